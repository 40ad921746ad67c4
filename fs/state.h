/*
 * state.h - what the engine and the state layer share: the engine's
 * configuration, the one lock both run under (S.lock), the writer's
 * queue, the staging pool, the counters, and the watcher mask the fast
 * path reads.  Defined in state.c; one per process (one mount per
 * process).
 *
 * The state layer (fstate.c, change.c, journal.c, aqueue.c, commit.c,
 * evict.c, writeback.c) includes this and evrec.h, never engine.h: the
 * engine's own state (event slots, parked requests, the hook list) is
 * E, in engine.h, above it.
 *
 * S.lock, the engine's lock.  Lock order (lockcheck.h, asserted in debug builds): S.lock,
 * then the inode table's, the cache's, names.h's and meta's own locks.
 * It guards every field of S and of E unless a field says otherwise,
 * and every struct fstate and struct event.  A function whose comment
 * says "S.lock held" asserts it in debug builds (ELOCK_HELD).  No
 * punch, invalidation or fill copy runs with it held, and nothing that
 * may block (lockcheck.h: each helper calls may_block(), and debug
 * builds abort): closes and log lines asked for under it wait for the
 * unlock (close_unlocked(), elog() below), staging files are made by
 * the timer (stage_refill) once the pool is half gone, a store file is
 * opened at open(2) or by the commit, the free-space figure is read by
 * the cache off its lock, a reload reads its row first.  Two file calls
 * stay, both in open_stage() and bracketed there: an unnamed staging
 * file made when a burst emptied the pool, and the ftruncate that
 * sizes one (a size, no block, no name); either off the lock makes a
 * fill wait for a second thread.
 */
/*
 * The durability order (each step is a fault point of fault.h, so that
 * tests crash the daemon at each, t0320):
 *   1. The bytes of a range are in the store file and synced
 *      (fdatasync, write_batch: "data-synced") before the range is
 *      committed as present ("ranges-committed").  A fill's copy
 *      ("fill-copied") is visible to readers at once; it becomes durable
 *      only through 1.  A file whose store open or data sync fails is not
 *      committed; the error sticks to it until its next fsync reports it.
 *   2. An eviction's new state is committed ("evict-recorded") before
 *      the placeholder mark is set and the bytes are punched
 *      ("evict-punched"); memory changes only once the database has it.
 *      Without the mark there is no punch.  A front end whose users open
 *      the store's files (fanotify: front.h evicting) holds new opens out
 *      from before the commit to after the punch, and marks the file for
 *      its events after the placeholder mark: without both, no punch.
 *   3. Commits are durable when they return (SQLite WAL, synchronous=FULL).
 *   4. fsync/fdatasync through the mount return once a write-behind batch
 *      taken after the call committed the file (events_fsync).
 *   5. A directory's listing (dirs.c): every entry is made in the store
 *      and the store synced (syncfs, "listing-made") before one
 *      transaction records the entries and the directory as listed
 *      ("listing-committed"; the database is held for that transaction
 *      alone, not while the entries are made and synced, and the commit
 *      runs on dirs.c's lister thread, not on the hook's connection);
 *      its unlisted mark goes after.  Memory (and
 *      so every request) sees the directory listed only after that.
 *   6. An archive (archive.h): the snapshot is made ("archive-snapshot"),
 *      the archive hook uploads it and answers ("archive-answered"), then
 *      the writer commits the new version with the clean state in one
 *      transaction ("archive-committed"); until that commit the row says
 *      dirty, so a crash at any point archives the file again, and the
 *      hook finds its own bytes there (no conflict).  A user change begun
 *      after the snapshot keeps the file dirty: the version is recorded,
 *      the clean state is not.  A file removed while its upload was in
 *      flight: if the origin took it, its own removal is recorded in the
 *      ops table ("archive-gone-recorded") before the attempt ends, and
 *      the removal's op (7, with no object) is held by the namer until
 *      then, so the two are applied in order with the names after them.
 *      Where each upload goes is committed before it is asked (meta.h:
 *      landings): one whose answer is never read (a crash, a hook
 *      killed) is found again, and what it may have made there is
 *      removed, moved or replaced whatever its version.
 *   7. A name changed on the mount (a removal, a rename) is recorded in
 *      the ops table in the transaction that changes the rows; the namer
 *      applies the oldest at the origin, then drops it ("name-applied"
 *      between the two); a crash there applies it again, and the hook
 *      finds it done (the object gone, or at its new URL).  A removal
 *      or rename of a new file whose first upload is in flight is
 *      recorded too (the origin may have it once the upload ends; the
 *      namer waits for that), and an upload waits for the ops of its
 *      path: the names of a path reach the origin before bytes do.
 * So after a crash at any point a range is never present without its
 * bytes, and an acknowledged write is never lost.
 */
#ifndef HSMFS_STATE_H
#define HSMFS_STATE_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>
#include "front.h"
#include "hsmfs/protocol.h"
#include "lockcheck.h"
#include "log.h"
#include "stats.h" /* struct events_stats */

struct fstate;
struct front_req;
struct inode;
struct meta;

#define EVENTS_MAX_PENDING 65536 /* upper bound of -o max_pending */

struct events_config {
	unsigned max_pending; /* event slots */
	/* the first event sequence: each daemon of a mount its own (keeper.h),
	 * so that an answer meant for a dead daemon's event is never taken
	 * for one of the next daemon's */
	uint64_t seq_base;
	bool takeover;        /* the last daemon's hooks are waited for (route.h) */
	double timeout;       /* seconds per event, extended by PROGRESS at
			       * progress_floor bytes a second or more */
	uint64_t progress_floor;
	bool nohook_fail;     /* no fill hook: fail at once instead of waiting */
	double dir_ttl;       /* seconds: a listed directory is listed again
			       * (in the background) on a look after this, 0: never */
	uint64_t chunk;       /* hint alignment, a power of two >= 4096 */
	uint64_t first_fill;  /* a miss's own hint at most (0: its chunk's gap) */
	uint64_t kernel_ra;   /* the kernel's readahead window of the mount */
	struct meta *meta;    /* borrowed; outlives the engine */
	const char *store_path; /* borrowed; for user.hsmfs.store */
	const char *origin;   /* borrowed or NULL; the root's user.hsmfs.origin */
	bool cache_limited;   /* cache_max or cache_min_free: admit fills */
	/*
	 * An eviction empties a range and keeps its blocks (allocated,
	 * unwritten): a front end whose users see the store's own layout
	 * (fanotify), where a range with no blocks is a hole to every tool
	 */
	bool keep_blocks;
	int state_fd;         /* borrowed: STORE/.hsmfs, where fills stage */
	/*
	 * Requests one user may have parked waiting for hooks; over it, a
	 * request fails with EAGAIN at once.  0: max_pending.
	 */
	unsigned max_parked_user;
	/*
	 * Write-back (writeback_on): a dirty file is archived writeback
	 * seconds after its last change, close or fsync; off: only when
	 * asked (hsmfsctl archive, sync)
	 */
	bool writeback_on;
	double writeback;
	/* files made on the mount get state and a row, to be archived */
	bool track_new;
	struct events_front front; /* the front end's callbacks (front.h) */
};

/* OR of the masks of connected hooks (route.c keeps it). */
extern _Atomic uint32_t events_mask;

static inline bool events_watched(uint32_t type)
{
	return atomic_load_explicit(&events_mask, memory_order_relaxed) & HSMFS_MASK(type);
}

static inline bool events_modify_watched(void)
{
	return events_watched(HSMFS_EV_PRE_MODIFY);
}

static inline bool events_open_watched(void)
{
	return events_watched(HSMFS_EV_OPEN_PERM);
}

static inline bool events_access_watched(void)
{
	return events_watched(HSMFS_EV_ACCESS_PERM);
}

#define LAT_BUCKETS 256
#define STAGE_POOL 32         /* staging files kept ready (stage_refill) */

/*
 * Latency histogram: 8 buckets per power of two of microseconds, so a
 * percentile is known within 9%; in S.lat, guarded by S.lock like the
 * counters; lat_value() of vattr.c reads a bucket back.
 */
static inline unsigned lat_bucket(uint64_t us)
{
	unsigned top, b;

	if (us < 8)
		return (unsigned)us;
	top = 63 - (unsigned)__builtin_clzll(us); /* >= 3 */
	b = (top - 2) * 8 + (unsigned)((us >> (top - 3)) & 7);
	return b < LAT_BUCKETS ? b : LAT_BUCKETS - 1;
}

struct state {
	pthread_mutex_t lock;
	struct events_config cfg;
	/* the writer (writeback.c) and its queue, filled by persist_later() */
	struct fstate *wqueue;     /* writer queue */
	size_t nqueued;            /* files on it */
	pthread_cond_t wcond;
	pthread_cond_t wdone;      /* the writer finished a batch */
	bool writing;              /* the writer holds a batch */
	bool urgent;               /* an fsync waits: no gathering */
	uint64_t batch_taken;      /* batches the writer took so far */
	uint64_t batch_done;       /* of which finished */
	uint64_t batch_failed;     /* the last batch that was not committed */
	bool write_failing;        /* the last batch could not be committed */
	bool fds_short;            /* the last batch met EMFILE/ENFILE: its
				    * files wait for a descriptor (writeback.h) */
	pthread_t writer;
	bool writer_running;
	bool stopping;             /* events_shutdown() began */
	/* per-file waits */
	pthread_cond_t reads_done; /* a file's tracked reads went to 0 */
	pthread_cond_t copied;     /* a fill's commit finished copying */
	pthread_cond_t evicted;    /* an eviction ended (evict_end) */
	/* removed files' states an inode number reused by a new file took
	 * over from (events_created): freed once the engine stopped */
	struct fstate *graves;
	int stage[STAGE_POOL];     /* fresh staging files (stage_refill) */
	unsigned nstage;
	struct events_stats st;    /* counters */
	uint64_t lat[LAT_BUCKETS]; /* fill latency histogram, see lat_bucket() */
};
extern struct state S;

/*
 * Tell the front end what the kernel may hold stale (front.h), e.g.
 * front_inval((struct inval){ .kind = INVAL_ATTR, .in = in }).  Without
 * S.lock, except INVAL_FILES_LATER.
 */
static inline void front_inval(struct inval iv)
{
	if (S.cfg.front.invalidate)
		S.cfg.front.invalidate(&iv);
}

extern __thread bool elock_mine;

/*
 * Work that may block, asked for under S.lock and done by the same
 * thread as soon as eunlock() has dropped the lock: the close of a
 * descriptor (a staging or store file's close can free blocks) and a
 * log line.  Without S.lock they are done at once.  Thread-local, so a
 * thread that waits on a condition keeps its own until its next
 * eunlock().  Should memory run out, the work is done at once instead.
 */
void close_unlocked(int fd);
#ifndef NDEBUG
/* Whether this thread gave fd to close_unlocked() and its unlock will
 * close it: the descriptor must not be used any more (debug builds). */
bool close_is_pending(int fd);
#endif
void elog(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define elog_err(...) elog(LOG_LVL_ERR, __VA_ARGS__)
#define elog_warn(...) elog(LOG_LVL_WARN, __VA_ARGS__)
#define elog_info(...) elog(LOG_LVL_INFO, __VA_ARGS__)
#define elog_debug(...) elog(LOG_LVL_DEBUG, __VA_ARGS__)
void after_unlock(void);
extern __thread bool after_unlock_due;

static inline void elock(void)
{
	lk_lock(&S.lock, LK_ENGINE);
	elock_mine = true;
}

static inline void eunlock(void)
{
	elock_mine = false;
	lk_unlock(&S.lock, LK_ENGINE);
	if (__builtin_expect(after_unlock_due, 0))
		after_unlock();
}

#define ELOCK_HELD() assert(elock_mine && lk_held(LK_ENGINE))
#define ELOCK_NOT_HELD() assert(!elock_mine && lk_not_held(LK_ENGINE))

static inline int64_t ns_of(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

#endif
