/*
 * events.h - pre-content events: per-file range state, the event engine,
 * and the write-behind of present ranges to the metadata database.
 *
 * The engine's entry points: the whole of what a front end calls of the
 * engine and the state layer (fs/README's "interface" line; the layer
 * check holds it), declared here and defined by the module each
 * section names.  front.h is what the engine asks of the front end in
 * return.
 *
 * Fast path.  The FUSE front end calls into the engine only when a per-inode bit
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
 * diagram of evrec.h); its slot is freed when it is done and no
 * waiter or parked read holds it.  It is decided when every hook that must answer has
 * allowed (a hook whose socket was full still must), or by the first
 * deny, or by the timeout (the timer thread expires every event,
 * readahead included).  Reads waiting for a hook are parked, not worker
 * threads (events_read).  Concurrent reads of the same missing bytes
 * wait on one event; a reader moving chunk by chunk gets the chunks
 * ahead asked for by detached events (readahead).
 *
 * Durability (numbered in state.h): data synced before its range is
 * committed; an eviction committed before its punch; fsync returns
 * once the file's state is committed; a failed data sync is sticky.
 *
 * Locks.  S.lock (private) guards slots, per-file state and the hook
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
#include "state.h" /* struct events_config, the watcher mask */

struct inode;
struct fstate;
struct front_req;
struct stats_snapshot;

int events_init(const struct events_config *cfg);
/* Flush the write-behind queue and stop the writer thread. */
void events_shutdown(void);

/* The slow paths' results beside 0 and -errno. */
#define EVENTS_PARKED 1   /* the engine took the request: see each entry point */
#define EVENTS_UNLISTED 2 /* see events_dir_refresh() */

/*
 * A user change in flight (events_change_begin()), on its file's list
 * fs->changes: no fill is committed over [start, end) while it is there.
 */
struct events_change {
	uint64_t start, end;        /* claimed bytes; end may be UINT64_MAX */
	struct fstate *fs;          /* NULL: nothing claimed */
	struct events_change *next; /* the file's list, under S.lock */
};

/* ------------------------------------------------------------------
 * Reads and permission events (park.c): the slow paths, which park a
 * request instead of holding its thread while a hook works.
 */

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
 * answers it through front.reply once its bytes are present or it failed.
 * A full parking pool waits in the calling thread instead.
 */
int events_read(struct inode *in, uint64_t off, uint64_t len, struct front_req *req,
		int fd, bool *ret_held);

/*
 * The same check for a request that reads the bytes itself (the source
 * of a copy_file_range): 0 and -errno as events_read(); EVENTS_PARKED:
 * cont(arg, res) is called once the bytes are present (res 0, with a
 * read hold taken: call events_read_done() when done with them) or the
 * check failed (-errno), from an engine thread, without its lock.
 */
int events_read_check(struct inode *in, uint64_t off, uint64_t len, struct front_req *req,
		      void (*cont)(void *arg, int res), void *arg, bool *ret_held);

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
int events_modify(struct inode *in, uint64_t start, uint64_t end, struct front_req *req,
		  void (*cont)(void *arg, int res), void *arg);

/* OPEN_PERM of in, opened with flags: as events_modify(). */
int events_open_perm(struct inode *in, int flags, struct front_req *req,
		     void (*cont)(void *arg, int res), void *arg);

/*
 * ACCESS_PERM of [start, end) of in: as events_modify().  Raised for
 * each read(2) that reaches the daemon (and a copy's source); opens of
 * files a subscriber watches bypass the page cache so that each does
 * (events_access_target() at open).
 */
int events_access_perm(struct inode *in, uint64_t start, uint64_t end, struct front_req *req,
		       void (*cont)(void *arg, int res), void *arg);

/*
 * PRE_MODIFY of [start, end) of in, waiting in the calling thread (a
 * caller with no request to park): 0 or -errno.
 */
int events_pre_modify(struct inode *in, uint64_t start, uint64_t end,
		      struct front_req *req);

/* ------------------------------------------------------------------
 * Readahead and open decisions (decide.c).
 */

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

/* ------------------------------------------------------------------
 * A file's state (fstate.c): loaded, shown, pinned, stale.
 */

/* Look up in's per-file state once (at open).  0 or -errno. */
int events_load(struct inode *in);

/*
 * st, the store's attributes of in, as the mount shows them.  Times are
 * final: the change time the mount shows (ctime_shown of meta.h) where
 * the store's is the one the daemon's own fill or eviction left.  A
 * range not fetched yet is data: st_blocks counts it (layout_blocks()),
 * so that no tool takes a file not fetched yet for a sparse one.  Loads
 * the state of a file not opened yet only where the answer may depend
 * on it: a regular file the store holds fewer blocks of than its size
 * needs, or a store where some file has a kept change time (one relaxed
 * load and one comparison otherwise).  Never waits for a fill.
 */
void events_shown_attr(struct inode *in, struct stat *st);

/*
 * lseek(2) SEEK_DATA or SEEK_HOLE at off of in's file, fd a descriptor
 * of its store file, as the user sees the file (layout.h): a range not
 * fetched yet is data, never a hole.  A file without state is the
 * store's.  The store is asked without S.lock; an eviction meanwhile
 * (a new generation) asks again.  The offset, or -errno.
 */
off_t events_seek(struct inode *in, int fd, off_t off, int whence);

/*
 * Re-read in's state from the database (after hsmfsctl import changed
 * the file in the store).  -EBUSY while events for it are pending.
 */
int events_reload(struct inode *in);

/*
 * Do names changed on the mount follow at the origin (files made on it
 * are archived: S.cfg.track_new)?  The archive hook knows where
 * (origin=, or its own configuration).  Such a mount refuses
 * RENAME_EXCHANGE, which no origin can apply as one step.
 */
bool events_names_follow(void);

/* Set or clear the pinned flag (pinned files are never evicted). */
int events_pin(struct inode *in, bool pin);

/*
 * A file given another name (a hard link), or found by a sync with one
 * name again: META_F_LINKED set or cleared, for a sync to say the
 * origin holds one of its names (hsmfs(8) BUGS).  Without S.lock.
 */
void events_linked(struct inode *in, bool several);

/* The origin changed under a partly present file: fail its reads. */
int events_mark_stale(struct inode *in);

/* ------------------------------------------------------------------
 * Opens, closes and users' changes (change.c).  A change is
 * bracketed: events_change_begin() claims its range (no fill is
 * committed over it), the change is made, events_wrote() or
 * events_truncated() records it, events_change_end() drops the claim.
 */

/*
 * Opens and closes of files with state: their time of use for the
 * eviction order, and (at open) a barrier against an eviction in
 * progress.  Called after inode_open_inc() / after inode_open_dec().
 */
void events_opened(struct inode *in);

void events_released(struct inode *in);

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
void events_change_begin(struct inode *in, struct events_change *c,
			 uint64_t start, uint64_t end);

void events_change_end(struct inode *in, struct events_change *c);

/*
 * Is all of [start, end) present in the file of the open change c, and
 * the file clean (not DIRTY)?  Then a change that leaves those bytes as
 * they are (a punch of zeros: fallocate --dig-holes) may end with
 * events_change_end(), no change of the user's.
 */
bool events_change_clean(const struct events_change *c, uint64_t start, uint64_t end);

/* Bookkeeping after a successful change through the mount; ends c. */
void events_wrote(struct inode *in, struct events_change *c, uint64_t off,
		  uint64_t len);

void events_truncated(struct inode *in, struct events_change *c,
		      uint64_t old_size, uint64_t new_size);

/*
 * in is open for writing where the daemon does not see the writes
 * (kernel passthrough): at open and again at release, its state becomes
 * dirty (every byte the user's, never fetched or evicted) with size, the
 * store file's size then (UINT64_MAX: not known, the size stays).
 * open: at the open, else at its release; between them the file is
 * never archived (its bytes change unseen).  Files without state: no-op.
 */
void events_unseen_writes(struct inode *in, uint64_t size, bool open);

/*
 * A change of in the daemon did not see before it was made (the
 * fanotify front end: an open(O_TRUNC), a truncate(2) or a write to a
 * file no longer marked raise no event first), seen afterwards: size,
 * the store file's size now.  A size other than the recorded one is
 * the user's (a smaller one drops the bytes past it, a larger one's
 * new bytes are the user's); with wrote (a modification was reported),
 * the file is dirty even at the same size.  No range is taken as the
 * user's but the ones a size change makes: a byte written to a file
 * not all present was filled before the write (a pre-content event).
 * Files without state: no-op.  Without S.lock.
 */
void events_changed_unseen(struct inode *in, uint64_t size, bool wrote);

/*
 * May in be opened in passthrough mode now (every byte present, nothing
 * filling, changing or being evicted, not stale or awaiting its digest)?
 * If so INODE_PASSTHROUGH is set, under the engine's lock, so that no
 * eviction starts on it until passthrough.c clears the flag.
 */
bool events_pass_begin(struct inode *in);

/* ------------------------------------------------------------------
 * Names changed through the mount, for the archive (journal.c).
 */

/*
 * A regular file was made on the mount (create, mknod, a link's target
 * excluded): with S.cfg.track_new it gets state, dirty with no origin,
 * and its row is inserted by the writer.  Called after the inode is
 * made, before it is replied.
 */
void events_created(struct inode *in);

/*
 * A request to make a regular file, resent after a crash, finds the
 * file made by the last daemon, which may have died before it recorded
 * that (its claim not yet made): a file with neither state nor row then
 * is made on the mount now (events_created()), or it would never be
 * archived.  One with a row (a listing's entry, a claim replayed) is
 * left as it is.  Called after the inode is looked up, before it is
 * replied.  Without S.lock.
 */
void events_made_again(struct inode *in);

/* A name was renamed through the mount: recorded paths follow (and, on a
 * mount that archives, the origin's objects at the next archive of names;
 * a directory's (dir) directories too).  moved: the node renamed (NULL: not
 * known); a new file whose first upload is in flight is moved at the
 * origin once that upload ends (namer.h). */
void events_renamed(struct inode *parent, const char *name,
		    struct inode *newparent, const char *newname, bool dir, struct inode *moved);

/*
 * One of in's names, (parent, name), went (an unlink, or a rename over
 * it) and in keeps another: its recorded path, if it was that name,
 * follows the name in keeps, and on a mount that archives the origin's
 * object moves there too, as for a rename (a program that links a file
 * to its final name and removes the first, as git does, renames it).
 * Called after inode_name_gone().
 */
void events_name_left(struct inode *parent, const char *name, struct inode *in);

/*
 * A directory parent/name was made (op META_OP_MKDIR) or removed
 * (META_OP_RMDIR) through the mount: where files made on the mount are
 * archived (S.cfg.track_new), the origin's follows, in order with the
 * other names (namer.h).
 * Without S.lock.
 */
void events_dir_named(struct inode *parent, const char *name, uint32_t op);

/*
 * The last name of the file ino went (in: its inode, loaded, or NULL):
 * its row goes, after any write of it the writer has begun, and a file
 * made on the mount whose row is not written yet never gets one.  user:
 * removed through the mount (not by a listing); on a mount that
 * archives, the origin's object is to be removed too (meta.h: ops),
 * one that only memory knows of as well (a new file's upload answered
 * before its row was written: the removal is at path, the name that
 * went, or NULL: in's path, so this is called before inode_name_gone();
 * a file removed while open has an orphan's path by then, which its
 * caller takes before: inode_orphan_settle()).
 */
void events_unlinked(struct inode *in, uint64_t ino, bool user, const char *path);

/* ------------------------------------------------------------------
 * Lazy directories (dirs.c): listed from the origin on first use.
 */

/*
 * Lazy directories (dirs.c).  A directory whose names are not known yet
 * (an unlisted row) is listed by a fill hook (PRE_DIR) before a name in
 * it is looked up, listed or made: the FUSE layer calls events_dir() first for
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

/*
 * Has dir been listed (its names and their rows all committed), its
 * listing's age aside?  For a reader of the store's directory itself
 * (prefetch.c): an unlisted one holds only the names lookups made, and
 * one being listed holds entries whose rows are not written yet.
 */
static inline bool events_dir_listed(const struct inode *dir)
{
	return !atomic_load_explicit(&events_lazy_dirs, memory_order_relaxed) ||
	       (inode_flags(dir) & (INODE_LISTED | INODE_DIR_TTL));
}

int events_dir(struct inode *dir, struct front_req *req, void (*cont)(void *arg, int res),
	       void *arg);

/*
 * The lookup of name in dir: as events_dir(), but while dir is unlisted
 * and a fill hook subscribed to PRE_LOOKUP is connected, that hook is
 * asked for the one name instead of a listing of dir (-ENOENT: no such
 * name); the directory stays unlisted.  A name an earlier lookup made
 * is found at once.
 */
int events_dir_lookup(struct inode *dir, const char *name, struct front_req *req,
		      void (*cont)(void *arg, int res), void *arg);

/*
 * The first directory of the tree of dir, dir included, whose row says
 * it is unlisted, parents before their children (a directory a rename
 * moves at the origin must be listed, and its files recorded, first):
 * 1 (dir itself), 0 with *ret holding one lookup reference
 * (inode_forget()), -ENOENT when every directory of it is listed, or
 * -errno.  Reads the store and the database: without S.lock.
 */
int events_tree_unlisted(struct inode *dir, struct inode **ret);

/*
 * List every directory of dir's tree not listed yet, each before its
 * subdirectories are looked at, and wait for them here (the engine's own
 * work, no request), listers at a time (each a thread): for a front end
 * whose kernel raises no event before a directory is read
 * (backend=fanotify), at mount, before users see the tree.  each(listed
 * so far, directories queued), if not NULL, from the calling thread as
 * the walk goes: false stops it (-EINTR) once the listings under way
 * end.  A directory that cannot be listed stops the walk, or with
 * keep_going is counted and passed by (its subdirectories are not
 * known).  0, or -errno (the first failure, or -EINTR) with failed the
 * store path of the first directory that could not be listed ("." the
 * root); *ret_listed: the directories listed; *ret_failures: those not.
 * Without S.lock; blocks for the listings.
 */
int events_list_tree(struct inode *dir, unsigned listers, bool keep_going,
		     bool (*each)(unsigned long listed, unsigned long left),
		     unsigned long *ret_listed, unsigned long *ret_failures, char *failed,
		     size_t failedlen);

/*
 * hsmfsctl refresh: list the listed directory dir again from its origin
 * and apply the difference (new names appear, names gone at the origin
 * go unless dirty or open, changed files are replaced by placeholders of
 * the new version).  A directory not listed yet whose names lookups
 * made is listed first, then refreshed (the names a lookup made are
 * kept by a first listing, stale ones too).  0, EVENTS_UNLISTED (not
 * listed yet, and no name known: listed on its first look anyway),
 * -ENODATA (not a lazy directory), -errno, or EVENTS_PARKED as
 * events_dir() (cont may have been called already).  The kernel's names are invalidated through
 * INVAL_ENTRY (front.h), so the request must not hold dir's lock (a
 * getxattr, not a setxattr).
 */
int events_dir_refresh(struct inode *dir, struct front_req *req,
		       void (*cont)(void *arg, int res), void *arg);

/* Forget what dir's listing state was: read again at the next look
 * (user.hsmfs.reload of a directory: import made lazy directories). */
void events_dir_forget(struct inode *dir);

/* A directory was removed through the mount: its row goes. */
void events_dir_removed(uint64_t ino);

/* ------------------------------------------------------------------
 * Eviction (evict.c).
 */

/*
 * Drop [start, end) of in (end 0: the whole file) back to missing: the
 * range is deleted from the database first, the placeholder mark put
 * back, then the bytes are punched out of the store file; the caller
 * then drops the kernel's cache of it.  -ENODATA: not managed (no
 * origin); -EBUSY: dirty, pinned, open, or being filled.
 */
int events_evict(struct inode *in, uint64_t start, uint64_t end, bool is_open);

/* ------------------------------------------------------------------
 * fsync (writeback.c).
 */

/*
 * fsync/fdatasync of a file with state, after the store file's own
 * sync succeeded: returns once its present ranges and dirty state are
 * committed durably, or the error that kept them from being (a failed
 * data sync of the write-behind is sticky and reported here once).
 */
int events_fsync(struct inode *in);

/* ------------------------------------------------------------------
 * Archives and syncs asked for (sync.c, archive.c).
 */

/*
 * hsmfsctl archive: archive in now.  0 (clean already, or not a file
 * the mount archives: -ENODATA), -ESTALE (in conflict), -errno, or
 * EVENTS_PARKED: cont(arg, res) once the file is clean (0), in
 * conflict (-ESTALE) or the attempt failed (-errno), from the archiver
 * thread, without S.lock.  If req (the caller's) is interrupted first,
 * cont(arg, -EINTR) from the timer (archive_interrupts()); the archive
 * goes on.  The same holds for events_sync() and events_resolve().
 */
int events_archive(struct inode *in, struct front_req *req,
		   void (*cont)(void *arg, int res), void *arg);

/*
 * hsmfsctl sync: archive every dirty file now and answer once each is
 * clean or failed: cont(arg, 0), or the first failure (-ESTALE: a file
 * is in conflict).  Not all (a caller other than root and the mount's
 * owner): only the files front.may_archive lets req's caller publish; the
 * others are left as they are and make the answer -EACCES.
 * EVENTS_PARKED or -errno.
 */
int events_sync(struct front_req *req, bool all, void (*cont)(void *arg, int res), void *arg);

/*
 * hsmfsctl resolve --keep-local: settle a conflict of in for its local
 * bytes: its next archive is unconditional (HSMFS_EVENT_OVERWRITE) and
 * replaces whatever the origin holds.  Then as events_archive().
 */
int events_resolve(struct inode *in, struct front_req *req,
		   void (*cont)(void *arg, int res), void *arg);

/*
 * hsmfsctl resolve --take-origin: drop in's local change (a conflict's,
 * or any change of a file the origin has) for what the origin holds
 * now: its directory is listed (events_dir, if only a lookup made the
 * name) and listed again (events_dir_refresh), and the refresh replaces
 * the file by the listed version, a placeholder, or removes it if the
 * origin no longer has it.  Only a directory listed from the origin
 * can: -ENODATA for a file imported or made on the mount; -EBUSY while
 * it is being archived, or if it is open or being changed when the
 * refresh comes to it.  0 (clean already), -errno, or EVENTS_PARKED:
 * cont(arg, res) once the refresh ended, without S.lock.  A crash
 * before the refresh's rename leaves the change as it was.
 */
int events_take_origin(struct inode *in, struct front_req *req,
		       void (*cont)(void *arg, int res), void *arg);

/* ------------------------------------------------------------------
 * The engine's state as a front end shows it (vattr.c).
 */

/*
 * Every figure of user.hsmfs.stats (stats.h) but the front end's own
 * (pt, prefetch), each taken under its owner's lock.
 */
void events_stats_snapshot(struct stats_snapshot *s);
/*
 * user.hsmfs.stats of s (a snapshot, the front end's own figures added),
 * as getxattr(2) gives it: the length (bufsize 0: the length needed), or
 * -ERANGE.
 */
ssize_t events_stats_value(const struct stats_snapshot *s, char *buf, size_t bufsize);

/* The kernel dropped a range of a read-watched file's page cache (ops-inval.c). */
void events_cache_dropped(void);

/*
 * Virtual xattr "user.hsmfs.*" of in (size: the file's size in the
 * store).  Returns the value length, or -ENODATA, -ERANGE.
 */
ssize_t events_xattr(struct inode *in, uint64_t size, const char *name,
		     char *buf, size_t bufsize);

#endif
