/*
 * fan-marks.h - the marks of the files not all present, made at start
 * from the metadata database (fan.h: a mark counts only for the opens
 * made after it, so they are made before the store is bound).
 */
#ifndef HSMFS_FAN_MARKS_H
#define HSMFS_FAN_MARKS_H

struct meta;

/*
 * Mark every file of the store the database says is not all present
 * (placeholder or partial), having given it blocks for all its bytes:
 * by its recorded path, checked against its inode number; the rows
 * whose path is stale are found by one walk of the tree.  Returns the
 * number marked, or -errno; *ret_unlisted: the directories whose names
 * are not known yet (no event lists them on this mount).
 */
long fan_mark_missing(struct meta *m, unsigned long *ret_unlisted);

#endif
