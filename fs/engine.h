/*
 * engine.h - the event engine's shared state: the event slots, the
 * parking pool and the hook list, all in one struct engine E under one
 * lock, E.lock.  The files that make up the engine, one job each, from
 * the bottom up (each calls, of these, only files listed before it):
 *
 *   engine.c     E itself and the clock
 *   event.c      an event's life: slots, references, complete(), waits,
 *                the ready list of parked requests (event.h)
 *   route.c      which hooks get an event: targets, masks, dispatch to a
 *                fill hook, the queue of fills waiting for one (route.h)
 *   readahead.c  chunks asked ahead of a sequential reader (readahead.h)
 *   decide.c     the decision rule of a read and of permission events:
 *                present, wait for an event, or start one (decide.h)
 *   park.c       requests parked instead of holding a FUSE worker, the
 *                room thread, per-user shares (park.h)
 *   dirs.c       lazy directories: listings and lookups (dirs.h)
 *   timer.c      expiry, resends, closed readers' windows (timer.h)
 *   answer.c     what hooks say: joined, left, answers, PROGRESS,
 *                FILLED (answer.h)
 *   start.c      events_init(), events_shutdown()
 *
 * Below the engine, under the same lock: fstate.c (range state,
 * fstate.h), evict.c (evict.h), writeback.c (writeback.h), listing.c
 * (a directory listing's commit, listing.h); above it, vattr.c
 * (vattr.h) reads the counters.
 *
 * An event's states and the function behind each transition: the
 * diagram above enum ev_state; ev_set() makes every transition.
 *
 * Everything here is guarded by E.lock unless a field says otherwise;
 * a function whose comment says "E.lock held" asserts it in debug
 * builds.  Nothing outside the engine, the state layer and vattr.c
 * includes this header.
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
 *      Without the mark there is no punch.
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
 * So after a crash at any point a range is never present without its
 * bytes, and an acknowledged write is never lost.
 */
#ifndef HSMFS_ENGINE_H
#define HSMFS_ENGINE_H

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>
#include "clock.h"
#include "lockcheck.h"
#include "events.h"
#include "hooks.h"
#include "hsmfs/protocol.h"

struct fstate;
struct inode;
struct fuse_req;

#define PAGE 4096ULL
#define SLOT_BITS 20 /* event id = sequence << SLOT_BITS | slot */
#define LAT_BUCKETS 256
#define RA_MAX (32ULL << 20) /* readahead of sequential misses, at most */

#define TICK_MS 100           /* the timer's period: expiries, resends */
#define CLOSED_AHEAD_MS 200   /* a closed file's window is cancelled after */
#define RETRY_FAIL_MS 200     /* a failed range fails at once this long, for
			       * the same thread (the kernel's retry) */

/*
 * The engine's own result for an event that ran out of time.  Not
 * ETIMEDOUT: a hook may deny with ETIMEDOUT, which reaches the caller
 * as it is, while the engine's timeout reaches it as EIO.
 */
#define EV_TIMEOUT (-ETIME)

#define STAGE_POOL 8          /* staging files kept ready (stage_refill) */

/*
 * Latency histogram: 8 buckets per power of two of microseconds, so a
 * percentile is known within 9%; in E.lat, guarded by E.lock like the counters;
 * lat_value() of vattr.c reads a bucket back.
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

/*
 * An event's states.  Every change of ev->st goes through ev_set(),
 * which asserts in debug builds that it is one of these arrows, each
 * named by the function that takes it:
 *
 *   FREE --init_event()--> QUEUED --dispatch(), start_perm()--> SENT
 *                            ^                                   |
 *                            +------- events_hook_left() --------+
 *                                     (its fill hook left)       |
 *                                                                |
 *                                  answer_one(): the fill hook   |
 *                                  allowed                       v
 *   COPYING <-- commit_fill(), commit_listing() ------------- FILLED
 *      |        (every watcher allowed too)                      ^
 *      +------- commit_fill(), commit_now(): copied -------------+
 *
 *   QUEUED, SENT, FILLED --complete()--> DONE --release_slot()--> FREE
 *                                             (no reference left)
 *
 *   QUEUED   no fill hook has it yet: on E.queue (watchers may have it;
 *            a permission event is QUEUED only while it is set up)
 *   SENT     a fill hook has it, or every permission target was sent it
 *   FILLED   PRE_ACCESS, PRE_DIR, PRE_LOOKUP: its fill hook allowed
 *            [fill_start, fill_end); committed once every watcher
 *            allowed too
 *   COPYING  being committed (on the lister's queue, or copied with
 *            E.lock dropped): nobody but the committer completes it; it
 *            neither times out nor is cancelled
 *   DONE     result is final; the slot is freed once no reference is left
 *
 * QUEUED, SENT, FILLED and COPYING are live (ev_live()): hooks' answers
 * find the event.  detached (nobody started it to wait) and stream (of
 * a sequential reader's window) are properties beside the state.
 */
enum ev_state { EV_FREE, EV_QUEUED, EV_SENT, EV_FILLED, EV_COPYING, EV_DONE };

/*
 * A request parked on an event instead of holding a FUSE worker thread
 * while a hook works.  Three kinds:
 *   read   (events_read(), cont NULL): when the event ends, the thread
 *          that ended it checks the read again: another missing range
 *          parks it on the next event, else it is answered from that
 *          thread (cfg.reply);
 *   check  (events_read_check(), cont set, check): as a read, but once
 *          its bytes are present cont(arg, 0) is called with a read hold
 *          taken (the source of a copy);
 *   change (events_modify(), events_open_perm(): cont set): cont(arg,
 *          res) once the permission event is decided.
 * A read or check that must wait for room in the cache (cache_max, or
 * ENOSPC from the store) goes to the room thread's queue instead of an
 * event's list: only that thread waits for the evictor.
 * From a fixed pool of max_pending; with none free, a request from a
 * FUSE worker waits in that worker for its event (one from an engine
 * thread fails with EAGAIN).  Interrupts are seen by the timer.
 */
struct parked {
	struct fuse_req *req;       /* NULL: free */
	struct inode *in;           /* held with inode_ref */
	int fd;                     /* the open file's store descriptor */
	uint64_t off, len;          /* the read */
	int result;                 /* of the event it waited for */
	bool retried;               /* ENOSPC: evicted and tried once more */
	bool stepped;               /* its first check ran (hits, readahead) */
	bool check;                 /* kind check (see above) */
	bool make_room;             /* room queue: evict (ENOSPC), then check */
	bool held;                  /* a read hold taken (fs->nreading) */
	uint64_t reserved;          /* admitted to the cache, not yet used */
	void (*cont)(void *arg, int res); /* check or change: see above */
	void *arg;
	unsigned share;             /* its user's count in E.parked_by */
	struct parked *next;        /* event's list, ready list, or free list */
};

/*
 * Parked requests are counted per user, in USER_SHARES counters by a
 * hash of the uid (users whose ids share a counter share its bound):
 * one user cannot take every parking place of an allow_other mount.
 */
#define USER_SHARES 64

struct event {
	uint64_t id;               /* 0 when free */
	uint32_t type;             /* HSMFS_EV_* */
	enum ev_state st;          /* see the diagram above; ev_set() */
	struct inode *in;          /* held with inode_ref */
	struct fstate *fs;         /* PRE_ACCESS: the file's state */
	uint64_t start, end;       /* required range */
	uint64_t hint_start, hint_end;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int stage_fd;              /* PRE_ACCESS: the staging file of the
				    * current delivery (owned), or -1 */
	struct hook *hook;         /* PRE_ACCESS: the fill hook it went to */
	struct hook *targets[HOOKS_MAX]; /* hooks yet to answer (all must allow);
					  * NULL: one that left, see orphans */
	bool unsent[HOOKS_MAX];    /* targets[i] could not take the event yet:
				    * it still must answer; the timer resends */
	unsigned ntargets;
	char (*orphans)[HSMFS_MAX_NAME + 1]; /* names of targets that left */
	unsigned norphans;
	struct event *cnext;       /* in E.commits */
	uint64_t fill_start, fill_end; /* FILLED, COPYING: what the fill hook
					* allowed (PRE_ACCESS) */
	bool detached;             /* readahead: nobody started it to wait */
	bool stream;               /* detached, of a sequential reader's window
				    * (readahead.c): cancelled when the file's
				    * last open closes (cancel_window) */
	char *dir_origin;          /* PRE_DIR: the directory's listing origin
				    * (owned, may be NULL) */
	char *name;                /* PRE_LOOKUP: the name looked up (owned) */
	bool refresh;              /* PRE_DIR: of a listed directory (hsmfsctl
				    * refresh): its difference is applied */
	uint64_t names_plan;       /* PRE_DIR, PRE_LOOKUP: the plan its name
				    * changes are claimed under (names.h),
				    * open from its start to its slot's release */
	uint64_t side_lo, side_hi; /* PRE_ACCESS: the rest of its chunk's gap, asked
				    * once it is filled (first_fill), or 0, 0 */
	int result;                /* 0 or -errno once EV_DONE */
	uint32_t waiters;          /* references: threads in wait_event() and
				    * parked reads; released at 0 once done */
	struct parked *parked;     /* reads parked on it */
	struct timespec deadline;  /* CLOCK_MONOTONIC */
	struct timespec born;      /* CLOCK_MONOTONIC, for the fill latency */
	uint64_t reserved;         /* PRE_ACCESS: cache bytes admitted */
	uint64_t progress;
	pthread_cond_t cond;       /* with E.lock */
	struct event *fnext;       /* fstate->inflight link */
	struct event *qnext;       /* E.queue link (EV_QUEUED, no hook) */
	struct event *free_next;
};

/* The engine's state: one per process (one mount per process). */
struct engine {
	pthread_mutex_t lock;
	struct events_config cfg;
	struct event *slots;
	struct event *free_list;
	pthread_cond_t slot_cond;  /* a slot was freed */
	uint64_t seq;
	struct event *queue;       /* PRE_ACCESS events waiting for a fill hook */
	struct hook *hooks;
	struct hook *rr;           /* round-robin position among fill hooks */
	struct fstate *wqueue;     /* writer queue */
	size_t nqueued;            /* files on it */
	pthread_cond_t wcond;
	pthread_cond_t wdone;      /* the writer finished a batch */
	pthread_cond_t reads_done; /* a file's tracked reads went to 0 */
	bool writing;              /* the writer holds a batch */
	bool urgent;               /* an fsync waits: no gathering */
	uint64_t batch_taken;      /* batches the writer took so far */
	uint64_t batch_done;       /* of which finished */
	uint64_t batch_failed;     /* the last batch that was not committed */
	pthread_cond_t copied;     /* a fill's commit finished copying */
	pthread_cond_t evicted;    /* an eviction ended (evict_end) */
	pthread_t timer;           /* expires events, resends, redispatches */
	pthread_cond_t tcond;      /* wakes the timer to stop */
	bool timer_running;
	uint64_t joins;            /* hooks that joined so far */
	struct parked *park_pool;  /* max_pending entries */
	struct parked *park_free;
	struct parked *ready;      /* parked requests whose event ended */
	struct parked *room, **room_tail; /* reads waiting for cache room */
	pthread_cond_t room_cond;  /* wakes the room thread */
	pthread_t roomer;          /* admits them, one at a time */
	bool roomer_running;
	struct event *commits, **commits_tail; /* listings allowed, to commit */
	pthread_cond_t commit_cond; /* wakes the lister */
	pthread_t lister;          /* commits them, one at a time (dirs.c) */
	bool lister_running;
	uint32_t parked_by[USER_SHARES]; /* parked requests per user share */
	uint64_t nparked;          /* parked now, all users */
	int64_t share_warned;      /* when a user's bound was last logged (ms) */
	int stage[STAGE_POOL];     /* fresh staging files (stage_refill) */
	unsigned nstage;
	bool write_failing;        /* the last batch could not be committed */
	pthread_t writer;
	bool writer_running, stopping;
	struct events_stats st;    /* counters, guarded by E.lock */
	uint64_t lat[LAT_BUCKETS]; /* fill latency histogram, see lat_bucket() */
};
extern struct engine E;

/*
 * E.lock.  Lock order (lockcheck.h, asserted in debug builds): E.lock,
 * then the inode table's, the cache's, names.h's and meta's own locks.
 * No punch, invalidation or fill copy runs with it held.  What may
 * block and still runs under it (each helper calls may_block(); a run
 * with HSMFS_LOCKCHECK=report:FILE lists every place with its stack),
 * to be moved out:
 *   - complete() and drop_rw_fd(): close() of the staging file and of
 *     the fill's store descriptor, which can free blocks;
 *   - commit_fill() and write_batch() (times_kept, ctime_kept): futimens
 *     and fstat of the store file;
 *   - dispatch() (open_stage) when the staging pool is empty: O_TMPFILE
 *     and ftruncate; start_fill() (open_store) when no descriptor was
 *     opened ahead at open(2), as for every detached fill;
 *   - cache_try_admit() (fs_free): fstatvfs, when the cached figure is
 *     too old (evict-policy.h);
 *   - events_reload(): the meta_get of the reload's WAL read;
 *   - log lines: a hook joined or left, an event timed out, a fill
 *     that failed.
 * Under the inode table's and the names' locks nothing may block, and
 * debug builds abort if something does.
 */
extern __thread bool elock_mine;

static inline void elock(void)
{
	lk_lock(&E.lock, LK_ENGINE);
	elock_mine = true;
}

static inline void eunlock(void)
{
	elock_mine = false;
	lk_unlock(&E.lock, LK_ENGINE);
}

#define ELOCK_HELD() assert(elock_mine && lk_held(LK_ENGINE))
#define ELOCK_NOT_HELD() assert(!elock_mine && lk_not_held(LK_ENGINE))

/* Is from -> to an arrow of the diagram above enum ev_state? */
static inline bool ev_step_legal(enum ev_state from, enum ev_state to)
{
	switch (to) {
	case EV_QUEUED:
		return from == EV_FREE || from == EV_SENT;
	case EV_SENT:
		return from == EV_QUEUED;
	case EV_FILLED:
		return from == EV_SENT || from == EV_COPYING;
	case EV_COPYING:
		return from == EV_FILLED;
	case EV_DONE:
		return from == EV_QUEUED || from == EV_SENT || from == EV_FILLED;
	case EV_FREE:
		return from == EV_DONE;
	}
	return false;
}

/* Move ev to state to, asserting the arrow is legal.  E.lock held. */
static inline void ev_set(struct event *ev, enum ev_state to)
{
	ELOCK_HELD();
	assert(ev_step_legal(ev->st, to));
	ev->st = to;
}

/* Hooks may still answer ev: QUEUED, SENT, FILLED or COPYING. */
static inline bool ev_live(const struct event *ev)
{
	return ev->st != EV_FREE && ev->st != EV_DONE;
}

static inline int64_t ns_of(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

#endif
