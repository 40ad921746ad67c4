/*
 * fan-marks.h - the marks of the files not all present, made at start
 * from the metadata database (fan.h: a mark counts only for the opens
 * made after it, so they are made before the store is bound).
 */
#ifndef HSMFS_FAN_MARKS_H
#define HSMFS_FAN_MARKS_H

#include <stdbool.h>

struct meta;

/*
 * Mark every file of the store the database says is not all present
 * (placeholder or partial), having given it blocks for all its bytes
 * (unless thin: the kernel answers lseek(SEEK_DATA) and st_blocks
 * itself, so a range with no blocks is a hole to cp, tar and bsdtar):
 * by its recorded path, checked against its inode number; the rows
 * whose path is stale are found by one walk of the tree.  Returns the
 * number marked, or -errno; *ret_unlisted: the directories whose names
 * are not known yet (no event lists them on this mount).
 */
long fan_mark_missing(struct meta *m, bool thin, unsigned long *ret_unlisted);

#endif
