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

/* *ret_unlisted as fan_mark_missing() says it, nothing marked: 0 or -errno. */
long fan_count_unlisted(struct meta *m, unsigned long *ret_unlisted);

/*
 * Give the file open as fd (O_PATH, in the daemon's clone: no event)
 * blocks for all its bytes, allocated and unwritten, if it has fewer,
 * keeping its times (the origin's, or a user's: read just before).  A
 * file held by an eviction's lease is left to it (EWOULDBLOCK), as is
 * one being run (ETXTBSY).  0 or -errno.
 */
int fan_give_blocks(int fd);

#endif
