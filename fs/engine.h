/*
 * engine.h - the event engine's own state: the event slots, the
 * parking pool and the hook list, in one struct engine E, guarded by
 * S.lock (state.h) like the state layer's share, S.  The files that
 * make up the engine, one job each, from the bottom up (each calls, of
 * these, only files listed before it):
 *
 *   engine.c     E itself
 *   event.c      an event's life: slots, references, complete(), waits,
 *                the ready list of parked requests (event.h)
 *   route.c      which hooks get an event: targets, masks, dispatch to a
 *                fill hook, the queue of fills waiting for one (route.h)
 *   listing.c    a directory listing's commit (listing.h)
 *   fill.c       a new fill's size and admission (fill.h)
 *   readahead.c  chunks asked ahead of a sequential reader (readahead.h)
 *   decide.c     the decision rule of a read and of permission events:
 *                present, wait for an event, or start one (decide.h)
 *   park.c       requests parked instead of holding a FUSE worker, the
 *                room thread, per-user shares (park.h)
 *   dirs.c       lazy directories: listings and lookups (dirs.h)
 *   timer.c      expiry, resends, closed readers' windows (timer.h)
 *   answer.c     what hooks say: joined, left, answers, PROGRESS,
 *                FILLED (answer.h)
 *   vattr.c      user.hsmfs.* values and the statistics (vattr.h)
 *   start.c      events_init(), events_shutdown()
 *
 * Below the engine, under the same lock: the event record (evrec.h),
 * the shared state S (state.h), fstate.c (range state, fstate.h),
 * commit.c (staging files, fill commits, commit.h),
 * evict.c (evict.h), writeback.c (writeback.h).  Above it, a front end
 * (the FUSE layer) calls the engine through events.h and vattr.h, and
 * the engine calls it back through front.h.
 *
 * An event's states and the function behind each transition: the
 * diagram above enum ev_state (evrec.h); ev_set() makes every
 * transition.
 *
 * Everything here is guarded by S.lock unless a field says otherwise;
 * a function whose comment says "S.lock held" asserts it in debug
 * builds.  Nothing outside the engine includes this header.
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
#include "evrec.h"
#include "hooks.h"
#include "hsmfs/protocol.h"
#include "lockcheck.h"
#include "saved.h"
#include "state.h"

struct fstate;
struct inode;
struct front_req;

#define PAGE 4096ULL
#define SLOT_BITS 20 /* event id = sequence << SLOT_BITS | slot */
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

/*
 * A request parked on an event instead of holding a FUSE worker thread
 * while a hook works.  Three kinds:
 *   read   (events_read(), cont NULL): when the event ends, the thread
 *          that ended it checks the read again: another missing range
 *          parks it on the next event, else it is answered from that
 *          thread (front.reply);
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
	struct front_req *req;       /* NULL: free */
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

/* The engine's state: one per process (one mount per process). */
struct engine {
	struct event *slots;
	struct event *free_list;
	pthread_cond_t slot_cond;  /* a slot was freed */
	uint64_t seq;
	struct event *queue;       /* PRE_ACCESS events waiting for a fill hook */
	struct hook *hooks;
	struct hook *rr;           /* round-robin position among fill hooks */
	/*
	 * Hooks the last daemon had and that have not connected again since
	 * a takeover (route.c): asked for by name until one of that name
	 * connects, or until absent_until (the mount's timeout after the
	 * takeover).  Their subscriptions count in events_mask meanwhile.
	 */
	struct saved_hook absent[SAVED_HOOKS];
	unsigned nabsent;
	bool table_full;           /* the saved table could not name every hook:
				    * logged once as it fills (recompute_mask) */
	struct timespec absent_until;
	pthread_t timer;           /* expires events, resends, redispatches */
	pthread_cond_t tcond;      /* wakes the timer: to stop, or stage_wanted */
	bool stage_wanted;         /* the staging pool is half gone or empty: refill now */
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
};
extern struct engine E;

#endif
