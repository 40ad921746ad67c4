/*
 * events.h - pre-content events: per-file range state, the event engine,
 * and the write-behind of present ranges to the metadata database.
 *
 * Fast path.  The FUSE layer calls into the engine only when a per-inode bit
 * says so (inode_flags(): INODE_NONRESIDENT or INODE_TRACKED for reads,
 * INODE_STATEFUL for writes) or when the watcher mask says a hook wants
 * PRE_MODIFY (events_modify_watched(): one relaxed load).  A resident file
 * with hooks connected costs the same as with none.
 *
 * Range state.  A file with a metadata row has a struct fstate: its
 * present ranges, the fills in flight (events), the user changes in
 * flight (events_change_begin), and whether it is being evicted.  Every
 * transition goes through this module:
 *   missing -> filling      access_step() starts a fill event
 *   filling -> present      commit_fill(): the hook's staging file is
 *                           copied in, less what users changed meanwhile
 *   any -> present (user's) events_wrote() / events_truncated() (dirty)
 *   present -> missing      evict_range(): database, memory, mark, punch
 * A user's change always wins: a fill is never copied over bytes a
 * change in flight or done claims, and a change waits only for a copy
 * in progress over its range (bounded, no hook involved).  A hook's
 * FILLED changes no state: reads parked on its event are answered from
 * its staging file where the commit would copy the same bytes
 * (events_filled()).
 *
 * Engine.  Events live in a fixed array of max_pending slots allocated
 * at start and reused; a caller over the limit waits for a slot within
 * its timeout.  An event is QUEUED (no fill hook has it yet), SENT,
 * FILLED and COPYING once its fill hook allowed it, then DONE (the
 * diagram of engine.h); its slot is freed when it is done and no
 * waiter or parked read holds it.  It is decided when every hook that must answer has
 * allowed (a hook whose socket was full still must), or by the first
 * deny, or by the timeout (the timer thread expires every event,
 * readahead included).  Reads waiting for a hook are parked, not worker
 * threads (events_read).  Concurrent reads of the same missing bytes
 * wait on one event; a reader moving chunk by chunk gets the chunks
 * ahead asked for by detached events (readahead).
 *
 * Durability (numbered in engine.h): data synced before its range is
 * committed; an eviction committed before its punch; fsync returns
 * once the file's state is committed; a failed data sync is sticky.
 *
 * Locks.  E.lock (private) guards slots, per-file state and the hook
 * list; functions that need it say so and assert it in debug builds.
 * SQLite, punches, invalidations and the copy of a fill run without it,
 * behind per-file busy states (evicting, copying).
 */
#ifndef HSMFS_EVENTS_H
#define HSMFS_EVENTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "hsmfs/protocol.h"
#include "inode.h"
#include "proto.h"
#include "stats.h" /* struct events_stats */

struct inode;
struct hook;
struct meta;
struct fuse_req;

#define EVENTS_MAX_PENDING 65536 /* upper bound of -o max_pending */

struct events_config {
	unsigned max_pending; /* event slots */
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
	/* drop the kernel's page cache of in's [off, off + len) (len 0: all) */
	void (*invalidate)(struct inode *in, uint64_t off, uint64_t len);
	/*
	 * drop the kernel's page cache of every regular file soon, from
	 * another thread; callable under E.lock (a reads watcher joined)
	 */
	void (*invalidate_files_later)(void);
	/*
	 * the hooks' subscriptions changed (a join or a leave), before any
	 * WELCOME: opens decided on the old ones decide again
	 * (pt_subscriptions_changed); called under E.lock
	 */
	void (*subscriptions_changed)(void);
	/* drop the kernel's cached entry of name in dir (refresh) */
	void (*invalidate_entry)(struct inode *dir, const char *name);
	bool cache_limited;   /* cache_max or cache_min_free: admit fills */
	/*
	 * Answer a parked read (events_read()): res < 0 fails it, else the
	 * reply is [off, off + len) of the store descriptor fd.  Called from
	 * whichever engine thread ended its wait, without the engine's lock.
	 */
	void (*reply)(struct fuse_req *req, struct inode *in, int fd, uint64_t off,
		      uint64_t len, int res);
	int state_fd;         /* borrowed: STORE/.hsmfs, where fills stage */
	/*
	 * Requests one user may have parked waiting for hooks; over it, a
	 * request fails with EAGAIN at once.  0: max_pending.
	 */
	unsigned max_parked_user;
	/* has the FUSE session ended (unmounted)?  Then every wait ends. */
	bool (*exiting)(void);
};

/* OR of the masks of connected hooks. */
extern _Atomic uint32_t events_mask;

static inline bool events_modify_watched(void)
{
	return atomic_load_explicit(&events_mask, memory_order_relaxed) &
	       HSMFS_MASK(HSMFS_EV_PRE_MODIFY);
}

int events_init(const struct events_config *cfg);
/* Flush the write-behind queue and stop the writer thread. */
void events_shutdown(void);

/*
 * The slow paths' results beside 0 and -errno: EVENTS_PARKED (park.h),
 * EVENTS_UNLISTED (dirs.h).
 */
#define EVENTS_PARKED 1
#define EVENTS_UNLISTED 2

static inline bool events_open_watched(void)
{
	return atomic_load_explicit(&events_mask, memory_order_relaxed) &
	       HSMFS_MASK(HSMFS_EV_OPEN_PERM);
}

static inline bool events_access_watched(void)
{
	return atomic_load_explicit(&events_mask, memory_order_relaxed) &
	       HSMFS_MASK(HSMFS_EV_ACCESS_PERM);
}

/*
 * The entry points the FUSE layer calls, each declared by the file that
 * defines it (vattr.h, of the FUSE layer itself, is included where used).
 */
#include "decide.h"
#include "dirs.h"
#include "evict.h"
#include "fstate.h"
#include "park.h"
#include "writeback.h"

#endif
