/*
 * dirs.h - lazy directories (dirs.c): listings and lookups asked of a
 * fill hook, committed on the lister thread.
 */
#ifndef HSMFS_DIRS_H
#define HSMFS_DIRS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "inode.h"
#include "park.h" /* EVENTS_PARKED */

/* A result beside 0, -errno and EVENTS_PARKED: see events_dir_refresh(). */
#define EVENTS_UNLISTED 2

struct event;
struct front_req;
struct inode;

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

/* Set the zero-setup root up and events_lazy_dirs, start the lister.
 * Without S.lock. */
int dirs_init(void);
/*
 * Has the root never been listed (a zero-setup store whose first listing
 * is still to come)?  After dirs_init(); for the mount-time probe
 * (supervise.h).  Without S.lock.
 */
bool dirs_root_unlisted(void);
/* Stop the lister once the listings queued are committed.  Without
 * S.lock, after S.stopping is set. */
void dirs_shutdown(void);
/*
 * The hook allowed a listing and every watcher too: ev (now COPYING)
 * goes to the lister thread, which commits it and completes it, so that
 * the hook's connection goes on reading answers meanwhile.  Without a
 * lister (stopping) it is committed here, S.lock dropped meanwhile.
 * S.lock held.
 */
void commit_listing(struct event *ev);

#endif
