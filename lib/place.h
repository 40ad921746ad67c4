/*
 * place.h - make what a manifest or a directory listing names: a
 * placeholder file or an unlisted directory in the store, and its row.
 *
 * Used by hsmfsctl import and by the daemon's directory listings
 * (PRE_DIR, dirs.c), so that both make exactly the same entries.
 *
 * A file: created sparse at its size, mode and mtime, marked with
 * STORE_MARKER_XATTR (origin, version), and a PLACEHOLDER row (a file
 * of size 0 is RESIDENT).  An existing file with a row of the same
 * size, origin and version is left as it is (PLACE_SAME); with another
 * it loses every byte and is a placeholder again (PLACE_CHANGED).
 * A directory: created (mode 0755 unless the entry says), with an
 * unlisted row (META_DIR_UNLISTED, origin = the entry's url, or none)
 * and the STORE_UNLISTED_XATTR mark: its names are listed by a hook on
 * first look.  An existing directory with a row is left as it is.
 *
 * Existing entries without a row are refused (-EEXIST: their data would
 * be lost), unless adopt is set: a caller that knows nobody could have
 * written them (entries of a directory that was never listed, left by
 * a listing that crashed before its commit) takes them over.  A managed
 * file whose name leads to another file by the time it is opened to be
 * emptied is refused (-EBUSY: a live mount's user replaced it).
 *
 * A store that takes no xattrs still gets the entries, unmarked (a lost
 * database could not be rebuilt): place_unmarked holds the last errno
 * of such a failure, for the caller to report once.  Prints nothing.
 *
 * The caller groups calls in a meta transaction and syncs the store
 * before committing it, or makes the entries first, syncs, and writes
 * their rows in one transaction (place_entry_deferred(); durability:
 * fs/state.h).  No locks of its own;
 * 0 or -errno with a one-line reason in err.
 */
#ifndef HSMFS_PLACE_H
#define HSMFS_PLACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "manifest.h"
#include "meta.h"

extern _Atomic int place_unmarked;

enum place_outcome { PLACE_NEW, PLACE_CHANGED, PLACE_SAME };

/*
 * Called for an existing managed file about to be emptied (CHANGED),
 * before anything changes; a non-zero return (-errno, reason in err)
 * stops it.  May be NULL.
 */
typedef int (*place_check_fn)(void *arg, const char *relpath, char *err, size_t errlen);

/*
 * Make e (a file or a directory) as name in the directory dfd; relpath
 * is its path below the store root (recorded as the row's path hint).
 * *created: a new entry was made (a failed batch may remove it).
 */
int place_entry(struct meta *m, int dfd, const char *name, const char *relpath,
		const struct manifest_entry *e, bool adopt, place_check_fn check,
		void *arg, bool *created, enum place_outcome *out, char *err,
		size_t errlen);

/*
 * The same, but the row is not written: it is handed back in *row
 * (row->ino 0: nothing to write; row->path is allocated, row's other
 * strings and its chunks are e's) for the caller to write later, in a transaction
 * after the store is synced, so that the database is held for the
 * writes alone, not across making the entries and syncing them.
 */
int place_entry_deferred(struct meta *m, int dfd, const char *name, const char *relpath,
			 const struct manifest_entry *e, bool adopt, struct meta_file *row,
			 bool *created, enum place_outcome *out, char *err, size_t errlen);

/*
 * An import put an entry into the directory dfd: if it was unlisted, it
 * is a plain directory from now on, its row gone (the manifest says what
 * is in it; no hook is asked, and refresh never lists it from the origin
 * its row had).  0 or -errno.
 */
int place_listed(struct meta *m, int dfd);
/* A new generation for a row (meta.h): a write-behind of an older file
 * with the same inode number must not apply to it. */
uint64_t place_new_gen(void);

#endif
