/*
 * events.h - pre-content events: per-file range state, the event engine,
 * and the write-behind of present ranges to the metadata database.
 *
 * Fast path.  ops.c calls into this module only when a per-inode bit
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
 * then DONE; its slot is freed when it is done and no waiter or parked
 * read holds it.  It is decided when every hook that must answer has
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

/*
 * Counters for hsmfsctl stats, kept under the engine's lock (which the
 * slow paths hold anyway): nothing is counted on the fast path, so a
 * read of a resident file is not a hit here, it never reaches us.
 */
struct events_stats {
	uint64_t hits;         /* slow-path reads whose bytes were present */
	uint64_t misses;       /* PRE_ACCESS events started (fills asked) */
	uint64_t readahead;    /* of which asked ahead of a reader (or prefetched) */
	uint64_t beside;       /* of which the rest of a miss's chunk (first_fill) */
	uint64_t filled_bytes; /* bytes fill hooks reported filled */
	uint64_t early_reads;  /* reads answered from a fill's FILLED, before its answer */
	uint64_t cache_drops;  /* page-cache ranges of read-watched files dropped */
	uint64_t pre_access, pre_modify, open_perm, access_perm, pre_dir,
		 pre_lookup; /* events by type */
	uint64_t listed;       /* directories listed (PRE_DIR committed) */
	uint64_t refreshed;    /* of listed ones listed again (hsmfsctl refresh) */
	uint64_t denied, timeouts, interrupted;
	uint64_t closed_ahead; /* fills ahead cancelled: their file's last open closed */
	uint64_t parked;       /* requests parked now, waiting for hooks */
	uint64_t over_bound;   /* requests failed with EAGAIN: user's bound */
	uint64_t evictions_started, evictions_done; /* punches begun, ended */
	uint64_t fill_p50_us, fill_p90_us, fill_p99_us;
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

/* Look up in's per-file state once (at open).  0 or -errno. */
int events_load(struct inode *in);

/*
 * Times are final: st, the store's attributes of in, gets the change
 * time the mount shows (ctime_shown of meta.h) when the store's is the
 * one the daemon's own fill or eviction left.  Loads the state of a
 * file not opened yet only on a store where some file has such a time
 * (one relaxed load otherwise).  Never waits for a fill.
 */
void events_shown_attr(struct inode *in, struct stat *st);
extern _Atomic bool events_any_ctime;

/*
 * Slow paths.  Return 0 to go on, or -errno for the caller.  req may be
 * NULL; with it, a FUSE interrupt of the caller ends the wait with EINTR.
 */
int events_pre_access(struct inode *in, uint64_t off, uint64_t len,
		      struct fuse_req *req, bool *ret_held);
/*
 * When events_pre_access() set *ret_held (mounts with cache limits), the
 * read is counted until its reply is sent; then call this, so that the
 * evictor may take ranges of the open file again.
 */
void events_read_done(struct inode *in);

/*
 * A read(2)'s slow path that does not hold the calling FUSE worker while
 * a hook works or the cache makes room: returns 0 (all present: read
 * and reply yourself; with *ret_held, call events_read_done() after),
 * -errno (reply it), or EVENTS_PARKED: the engine took the request and
 * answers it through cfg.reply once its bytes are present or it failed.
 * A full parking pool waits in the calling thread instead.
 */
#define EVENTS_PARKED 1
int events_read(struct inode *in, uint64_t off, uint64_t len, struct fuse_req *req,
		int fd, bool *ret_held);
/*
 * The same check for a request that reads the bytes itself (the source
 * of a copy_file_range): 0 and -errno as events_read(); EVENTS_PARKED:
 * cont(arg, res) is called once the bytes are present (res 0, with a
 * read hold taken: call events_read_done() when done with them) or the
 * check failed (-errno), from an engine thread, without its lock.
 */
int events_read_check(struct inode *in, uint64_t off, uint64_t len, struct fuse_req *req,
		      void (*cont)(void *arg, int res), void *arg, bool *ret_held);
int events_pre_modify(struct inode *in, uint64_t start, uint64_t end,
		      struct fuse_req *req);
/*
 * PRE_MODIFY of [start, end) of in without holding the calling worker:
 * 0 (no hook must answer, or all allowed: go on now), -errno (reply
 * it), or EVENTS_PARKED: the engine keeps the request and calls
 * cont(arg, res) once every hook answered or the event failed (res 0:
 * go on with the change; else the -errno to reply), from the engine
 * thread that decided it, without the engine's lock; in stays
 * referenced until cont returns.  A full parking pool waits in the
 * calling thread; a user over max_parked_user gets -EAGAIN.
 */
int events_modify(struct inode *in, uint64_t start, uint64_t end, struct fuse_req *req,
		  void (*cont)(void *arg, int res), void *arg);
/* OPEN_PERM of in, opened with flags: as events_modify(). */
int events_open_perm(struct inode *in, int flags, struct fuse_req *req,
		     void (*cont)(void *arg, int res), void *arg);

static inline bool events_open_watched(void)
{
	return atomic_load_explicit(&events_mask, memory_order_relaxed) &
	       HSMFS_MASK(HSMFS_EV_OPEN_PERM);
}

/*
 * ACCESS_PERM of [start, end) of in: as events_modify().  Raised for
 * each read(2) that reaches the daemon (and a copy's source); opens of
 * files a subscriber watches bypass the page cache so that each does
 * (events_access_target() at open).
 */
int events_access_perm(struct inode *in, uint64_t start, uint64_t end, struct fuse_req *req,
		       void (*cont)(void *arg, int res), void *arg);
/*
 * Ask the fill hooks now for what is missing of in, whole if it is no
 * larger than max_bytes, else of its first first_fill bytes (what its
 * reader's first read from the start waits for; max_bytes with
 * first_fill=0): a sibling prefetch, prefetch.c.  Detached events,
 * started only while slots are free and the cache admits them without
 * waiting.
 * The state must be loaded (events_load).  Returns the bytes asked for.
 */
uint64_t events_prefetch(struct inode *in, uint64_t max_bytes);

/* Is some hook subscribed to ACCESS_PERM of in (its subtree)? */
bool events_access_target(struct inode *in);

static inline bool events_access_watched(void)
{
	return atomic_load_explicit(&events_mask, memory_order_relaxed) &
	       HSMFS_MASK(HSMFS_EV_ACCESS_PERM);
}

/*
 * Lazy directories (dirs.c).  A directory whose names are not known yet
 * (an unlisted row) is listed by a fill hook (PRE_DIR) before a name in
 * it is looked up, listed or made: ops.c calls events_dir() first for
 * the directory it works in, unless events_dir_known() (one relaxed load
 * while no store has a lazy directory; then one per-inode bit).
 * Returns 0 (go on), -errno, or EVENTS_PARKED: cont(arg, res) once the
 * listing is committed (res 0: run the operation again) or failed, from
 * an engine thread, without the engine's lock.
 */
extern _Atomic bool events_lazy_dirs;

static inline bool events_dir_known(const struct inode *dir)
{
	return !atomic_load_explicit(&events_lazy_dirs, memory_order_relaxed) ||
	       (inode_flags(dir) & INODE_LISTED); /* not INODE_DIR_TTL: its age is checked */
}

int events_dir(struct inode *dir, struct fuse_req *req, void (*cont)(void *arg, int res),
	       void *arg);
/*
 * The lookup of name in dir: as events_dir(), but while dir is unlisted
 * and a fill hook subscribed to PRE_LOOKUP is connected, that hook is
 * asked for the one name instead of a listing of dir (-ENOENT: no such
 * name); the directory stays unlisted.  A name an earlier lookup made
 * is found at once.
 */
int events_dir_lookup(struct inode *dir, const char *name, struct fuse_req *req,
		      void (*cont)(void *arg, int res), void *arg);

/*
 * hsmfsctl refresh: list the listed directory dir again from its origin
 * and apply the difference (new names appear, names gone at the origin
 * go unless dirty or open, changed files are replaced by placeholders of
 * the new version).  0, EVENTS_UNLISTED (not listed yet: listed on
 * its first look anyway), -ENODATA (not a lazy directory), -errno, or EVENTS_PARKED as
 * events_dir().  The kernel's names are invalidated through
 * cfg.invalidate_entry, so the request must not hold dir's lock (a
 * getxattr, not a setxattr).
 */
#define EVENTS_UNLISTED 2
int events_dir_refresh(struct inode *dir, struct fuse_req *req,
		       void (*cont)(void *arg, int res), void *arg);
/* Forget what dir's listing state was: read again at the next look
 * (user.hsmfs.reload of a directory: import made lazy directories). */
void events_dir_forget(struct inode *dir);
/* A directory was removed through the mount: its row goes. */
void events_dir_removed(uint64_t ino);

/*
 * Re-read in's state from the database (after hsmfsctl import changed
 * the file in the store).  -EBUSY while events for it are pending.
 */
int events_reload(struct inode *in);

/*
 * Drop [start, end) of in (end 0: the whole file) back to missing: the
 * range is deleted from the database first, the placeholder mark put
 * back, then the bytes are punched out of the store file; the caller
 * then drops the kernel's cache of it.  -ENODATA: not managed (no
 * origin); -EBUSY: dirty, pinned, open, or being filled.
 */
int events_evict(struct inode *in, uint64_t start, uint64_t end, bool is_open);

/*
 * Opens and closes of files with state: their time of use for the
 * eviction order, and (at open) a barrier against an eviction in
 * progress.  Called after inode_open_inc() / after inode_open_dec().
 */
void events_opened(struct inode *in);
void events_released(struct inode *in);

/* A name was renamed through the mount: recorded paths follow. */
void events_renamed(struct inode *parent, const char *name,
		    struct inode *newparent, const char *newname);

void events_get_stats(struct events_stats *ret);
/* The kernel dropped a range of a read-watched file's page cache (ops.c). */
void events_cache_dropped(void);

/* Set or clear the pinned flag (pinned files are never evicted). */
int events_pin(struct inode *in, bool pin);

/* The origin changed under a partly present file: fail its reads. */
int events_mark_stale(struct inode *in);

/*
 * A change of a file's bytes or size through the mount (write,
 * truncate, fallocate, copy_file_range destination), from just before
 * the store is changed until its bookkeeping is done.  While a change
 * is open, no fill is committed over [start, end): the user's bytes win.
 * events_change_begin() waits only for a fill being copied into that
 * range right now (bounded: no hook is involved).  Every begin is ended
 * by exactly one of events_wrote(), events_truncated() or
 * events_change_end() (the change failed).  Files without state: no-op.
 */
struct fstate;
struct events_change {
	uint64_t start, end;        /* claimed bytes; end may be UINT64_MAX */
	struct fstate *fs;          /* NULL: nothing claimed */
	struct events_change *next; /* the file's list, under E.lock */
};
void events_change_begin(struct inode *in, struct events_change *c,
			 uint64_t start, uint64_t end);
void events_change_end(struct inode *in, struct events_change *c);

/* Bookkeeping after a successful change through the mount; ends c. */
void events_wrote(struct inode *in, struct events_change *c, uint64_t off,
		  uint64_t len);
void events_truncated(struct inode *in, struct events_change *c,
		      uint64_t old_size, uint64_t new_size);
void events_unlinked(uint64_t ino);
/*
 * in is open for writing where the daemon does not see the writes
 * (kernel passthrough): at open and again at release, its state becomes
 * dirty (every byte the user's, never fetched or evicted) with size, the
 * store file's size then.  Files without state: no-op.
 */
void events_unseen_writes(struct inode *in, uint64_t size);
/*
 * May in be opened in passthrough mode now (every byte present, nothing
 * filling, changing or being evicted, not stale or awaiting its digest)?
 * If so INODE_PASSTHROUGH is set, under the engine's lock, so that no
 * eviction starts on it until passthrough.c clears the flag.
 */
bool events_pass_begin(struct inode *in);

/*
 * fsync/fdatasync of a file with state, after the store file's own
 * sync succeeded: returns once its present ranges and dirty state are
 * committed durably, or the error that kept them from being (a failed
 * data sync of the write-behind is sticky and reported here once).
 */
int events_fsync(struct inode *in);

/*
 * Virtual xattr "user.hsmfs.*" of in (size: the file's size in the
 * store).  Returns the value length, or -ENODATA, -ERANGE.
 */
ssize_t events_xattr(struct inode *in, uint64_t size, const char *name,
		     char *buf, size_t bufsize);

/* Called by hooks.c from connection threads. */
/* h said HELLO: send it welcome (len bytes) and add it, atomically.  0 or -errno. */
int events_hook_joined(struct hook *h, const uint8_t *welcome, int len);
void events_hook_left(struct hook *h);
void events_answer(struct hook *h, const struct proto_answer *a);
void events_progress(struct hook *h, const struct proto_progress *p);
void events_filled(struct hook *h, const struct proto_filled *f);

#endif
