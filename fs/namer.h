/*
 * namer.h - the namer (namer.c): one thread applies the ops table
 * (meta.h: ops; journal.h records them) at the origin, oldest first and
 * one at a time (a later op may depend on an earlier: a removal of the
 * name a rename then takes), while write-back is on, a sync waits for
 * them, or an archive waits for an op of its path (AQ.names_kick).  A
 * failed op stays at the head and is tried again with backoff; an op
 * of a file whose upload is in flight waits for its end (durability
 * steps 6 and 7, state.h).  A removal of an object that is, once its
 * upload in flight ended, the object of another file at the op's path on
 * the mount is not applied (namer.c: object_held()).  Each op is an
 * ARCHIVE_NAME event answered by the archive hook (hsmfs-hooks(7)).
 *
 * Locks: the namer's own fields are guarded by S.lock; it waits on
 * AQ.ncond.  Every function here is called without S.lock, but
 * namer_pending().
 */
#ifndef HSMFS_NAMER_H
#define HSMFS_NAMER_H

#include <stdint.h>

struct inode;

/* Set up (before the archivers start), start (after), stop (after AQ.stop). */
void namer_init(void);
void namer_start(void);
void namer_stop(void);

/*
 * A sync's first part: every op applied (0), or the first failure
 * (-errno; -ESHUTDOWN once stopping).  No namer: 0 at once.
 */
int names_synced(void);

/* Ops in the table, as the namer last counted (for the statistics).  S.lock held. */
uint64_t namer_pending(void);

/*
 * walk_to() for the row of ino whose path was read as path: a rename
 * through the mount moves the store's name before the row's path, so a
 * miss is looked at again, with the row read anew, for a while (half a
 * second).  -ENOENT: the row is gone (removed meanwhile).
 */
int row_walk(uint64_t ino, const char *path, struct inode **ret);

#endif
