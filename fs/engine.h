/*
 * engine.h - the event engine's private half: its state, shared by the
 * files that make it up, one job each.  engine.c is the top: it calls
 * the others, which call back into it only to finish an event
 * (complete(), after a fill's commit), to start one (start_fill(), for
 * readahead) and for the clock:
 *
 *   engine.c     events, their slots and states, hooks' answers, the
 *                timer, parked reads (the entry points of events.h)
 *   readahead.c  chunks asked ahead of a sequential reader
 *   fstate.c     per-file range state: loads, user changes, fill commits
 *   evict.c      dropping ranges: database, memory, mark, punch
 *   writeback.c  the write-behind of present ranges, fsync
 *   vattr.c      user.hsmfs.* attributes and statistics
 *
 * Everything here is guarded by E.lock unless a field says otherwise;
 * a function whose comment says "E.lock held" asserts it in debug
 * builds.  Nothing outside these files includes this header.
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
#include <pthread.h>
#include <time.h>
#include "events.h"
#include "evict.h"
#include "hooks.h"
#include "meta.h"
#include "ranges.h"
#include "writeback.h"
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>
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


/* Per-file state of a file that has a metadata row. */
struct fstate {
	uint64_t ino;
	uint64_t size;
	uint64_t osize;            /* the recorded version's size (meta_file) */
	uint32_t state;            /* enum meta_state */
	uint32_t flags;            /* META_F_* */
	char *origin;              /* owned, may be NULL */
	char *version;             /* owned, may be NULL */
	struct rangeset present;
	struct event *inflight;    /* PRE_ACCESS events of this file */
	bool queued;               /* on the writer's queue */
	struct inode *in;          /* back pointer (the inode owns us) */
	struct fstate *wnext;      /* writer queue link */
	uint64_t gen;              /* the row's generation (see meta.h) */
	uint64_t blocks;           /* allocated bytes counted in the cache */
	int64_t atime;             /* last open, close or fill (ms, realtime) */
	int64_t atime_saved;       /* atime as last queued for the database */
	uint64_t ra_lo;            /* readahead: where the stream's last miss began */
	uint64_t ra_ahead;         /* readahead: end of what was asked ahead */
	uint64_t ra_window;        /* readahead: bytes asked ahead of a miss */
	uint64_t ra_seen;          /* readahead: end of the last read checked */
	int64_t closed_at;         /* readahead: when the last open closed
				    * (mono ms), 0 while open (cancel_window) */
	unsigned nreading;         /* tracked reads between check and reply */
	uint64_t hot_lo, hot_hi;   /* the span the last miss and its readahead
				    * cover: kept when an open file is evicted */
	int rw_fd;                 /* O_RDWR store descriptor fills are
				    * committed through, or -1; kept while the
				    * file is open or has events (drop_rw_fd) */
	struct events_change *changes; /* user changes in flight */
	uint64_t nchanges;         /* user changes begun so far (times_kept) */
	int sticky_err;            /* a failed data sync, for the next fsync */
	int64_t ctime_real, ctime_shown; /* see meta_file (ns; 0: none) */
	bool evicting;             /* see evict_begin() */
	char *sha256;              /* the manifest's digest (hex, owned), or NULL */
	bool unverified;           /* all present, the digest not checked yet:
				    * shown partial until the writer checks */
	uint64_t to_lo, to_hi;     /* the hint of the last fill that failed, */
	int64_t to_at;             /*   when (monotonic ms), how many hooks had */
	uint64_t to_joins;         /*   joined then, for whom (thread id), and */
	pid_t to_pid;              /*   its result: see recently_failed() */
	int to_err;
};

enum ev_state { EV_FREE, EV_QUEUED, EV_SENT, EV_DONE };

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
 * FUSE worker waits in it as before (one from an engine thread fails
 * with EAGAIN).  Interrupts are seen by the timer.
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
	enum ev_state st;
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
	bool filled;               /* PRE_ACCESS, PRE_DIR: the fill hook allowed
				    * [fill_start, fill_end); committed once
				    * every watcher allowed too */
	struct event *cnext;       /* in E.commits */
	bool copying;              /* being committed, E.lock dropped: nobody
				    * but the committer completes it */
	uint64_t fill_start, fill_end;
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
 * E.lock.  Lock order: E.lock, then the inode table's, the cache's,
 * names.h's and meta's own locks.  No SQLite statement, punch,
 * invalidation or fill copy runs with it held; the exceptions say why
 * where they are (the reload's WAL read; the open of a fill's descriptor
 * or staging file when none was opened ahead at open(2)).
 */
extern __thread bool elock_mine;

static inline void elock(void)
{
	pthread_mutex_lock(&E.lock);
	elock_mine = true;
}

static inline void eunlock(void)
{
	elock_mine = false;
	pthread_mutex_unlock(&E.lock);
}

#define ELOCK_HELD() assert(elock_mine)

/* engine.c */
int64_t now_ms(void);
void mono_after(struct timespec *ts, double seconds);
bool mono_passed(const struct timespec *ts);
void complete(struct event *ev, int result);
struct event *start_fill(struct inode *in, struct fstate *fs, uint64_t start,
				uint64_t end, uint64_t hs, uint64_t he,
				struct fuse_req *req, bool detached, uint64_t reserved,
				int *res);
void hold_event(struct event *ev);
void ahead_closed(struct fstate *fs, bool closed);
void put_ref(struct event *ev);
int park_on(struct event *ev, struct inode *in, struct fuse_req *req,
	    void (*cont)(void *arg, int res), void *arg);
void drain_ready(void);
/*
 * Start the PRE_DIR event of dir (origin: owned by the event from here
 * on, may be NULL): 0 with *ret_ev (one reference, the caller's), or
 * -errno.  E.lock held.
 */
int start_listing(struct inode *dir, char *origin, struct fuse_req *req,
		  struct event **ret_ev);
/* The same for the PRE_LOOKUP of name in dir (name: owned by the event). */
int start_lookup(struct inode *dir, char *origin, char *name, struct fuse_req *req,
		 struct event **ret_ev);
/* Is a fill hook subscribed to PRE_LOOKUP connected?  E.lock held. */
bool have_lookup_hook(void);

/* dirs.c */
/* Set the zero-setup root up and events_lazy_dirs, start the lister.
 * Without E.lock. */
int dirs_init(void);
/* Stop the lister once the listings queued are committed.  Without
 * E.lock, after E.stopping is set. */
void dirs_shutdown(void);
/*
 * The hook allowed a listing and every watcher too: ev (marked copying)
 * goes to the lister thread, which commits it and completes it, so that
 * the hook's connection goes on reading answers meanwhile.  Without a
 * lister (stopping) it is committed here, E.lock dropped meanwhile.
 * E.lock held.
 */
void commit_listing(struct event *ev);

/* readahead.c */
/*
 * Ask for the missing bytes of [pos, limit) now, an event for each chunk's
 * (none past limit), at most max events, detached, only while slots are
 * free and the cache admits them without waiting, each counted in
 * *count (a stats counter).  Returns where it stopped; *ret_asked (may be
 * NULL) gets the bytes asked for.  stream: a sequential reader's window
 * (readahead.c), whose events the file's last close cancels
 * (cancel_window).  E.lock held.
 */
uint64_t fill_ahead(struct inode *in, struct fstate *fs, uint64_t pos, uint64_t limit,
		    struct fuse_req *req, unsigned max, uint64_t *count,
		    uint64_t *ret_asked, bool stream);
/*
 * Does a miss at off go on the stream of fs?  From where its last miss
 * began to one kernel readahead window past what was asked, or up to
 * two windows past where the last read checked ended (a reader that
 * read present bytes up to here goes on; the kernel keeps a window and
 * the next one in flight): the requests of the kernel's windows run on
 * several workers, and the later ones can come first.  E.lock held.
 */
bool in_stream(const struct fstate *fs, uint64_t off);
/* A reader's miss, whose fill asks up to asked_end: drives readahead. */
void read_ahead(struct inode *in, struct fstate *fs, const struct range *miss,
		uint64_t asked_end, struct fuse_req *req);

/* fstate.c */
int64_t allocated(int fd);
bool tracked(const struct fstate *fs);
/*
 * Does a fill of [start, end) complete fs, whose manifest gave a digest?
 * Then no byte of it is kept or served before the digest is checked
 * (commit_fill; events_filled answers none early).  E.lock held.
 */
bool fill_completes_digest(const struct fstate *fs, uint64_t start, uint64_t end);
/*
 * The sha256 (hex) of a file of size bytes whose ranges todo (may be
 * NULL) are read from stage and the rest from dst: 0, -ENODATA when a
 * file is shorter than that (got is the digest of what there is), or
 * -errno when a read fails.  No lock held: it reads files.
 */
int file_digest(int stage, int dst, const struct rangeset *todo, uint64_t size, char got[65]);
void fstate_free(void *p);
int open_store(struct inode *in, int flags);
int open_stage(uint64_t size);
void stage_refill(void);
struct event *inflight_over(const struct fstate *fs, uint64_t start, uint64_t end);
/* Shrink [*lo, *hi), around [start, end) that no event covers, to where no
 * event's hint overlaps it.  E.lock held. */
void inflight_clip(const struct fstate *fs, uint64_t start, uint64_t end, uint64_t *lo,
		   uint64_t *hi);
void drop_rw_fd(struct fstate *fs);
void commit_fill(struct event *ev);
void times_kept(struct fstate *fs, int fd, const struct stat *before,
		uint64_t nchanges);
void ctime_kept(struct fstate *fs, int fd, const struct stat *before);

static inline int64_t ns_of(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* evict.c: evict.h; writeback.c: writeback.h */

/* vattr.c */
unsigned lat_bucket(uint64_t us);

#endif
