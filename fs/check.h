/*
 * check.h - after an unclean stop, compare the database with the store.
 *
 * STORE/.hsmfs/clean is written at a clean unmount and removed at mount;
 * when it is missing and the database has rows, check_start() walks the
 * store in a background thread (never following symlinks, skipping
 * STORE/.hsmfs) while the mount serves:
 *   - a row whose file is gone is deleted, unless a removal of it the
 *     last daemon began is still to be answered (keep, given to
 *     check_start()): that request, resent, removes the row and records
 *     the removal for the origin, which a row deleted here would lose;
 *   - a row whose file changed size outside hsmfs is reset to nothing
 *     present if the file still carries the placeholder mark (its bytes
 *     are fetched again), or made dirty if it does not: all its bytes are
 *     here, a change on the mount whose record a crash lost (its origin
 *     kept, so that its moves, removal and archive still reach it);
 * each change guarded by the row's generation, so a concurrent import
 * wins.  One log line reports the outcome.  Nothing here touches FUSE.
 *
 * The walk runs while users rename: a file moved from a directory the
 * walk has not read yet into one it has read is not found by it, though
 * it is there.  So a row is deleted only when a walk that no move
 * overlapped did not find it: every rename and link through the mount
 * brackets its store call with check_move_begin() and check_move_end()
 * (two atomic additions, also when no check runs), a walk counts them
 * before and after, and a row one overlapped walk missed is looked for
 * at its recorded path, then by the next walk (at once, then after
 * growing pauses while users keep moving names).  A row is never
 * deleted on the evidence of an overlapped walk: a file deleted so
 * would lose its place at the origin (its moves and removal dropped,
 * or, new, never archived) or read zeros where its bytes are not
 * fetched yet.
 */
#ifndef HSMFS_CHECK_H
#define HSMFS_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct meta;

#define CHECK_CLEAN_FILE "clean"

/* Was the last stop clean?  Removes the mark (we are running now). */
bool check_was_clean(int state_fd);
/* Leave the mark of a clean stop. */
void check_mark_clean(int state_fd);

/* keep: nkeep store inode numbers whose rows stay (copied) */
int check_start(int root_fd, struct meta *m, const uint64_t *keep, size_t nkeep);
void check_stop(void);

/* A rename or link through the mount, around its store call (see above). */
void check_move_begin(void);
void check_move_end(void);

#endif
