/*
 * readahead.h - chunks asked ahead of a sequential reader (readahead.c).
 */
#ifndef HSMFS_READAHEAD_H
#define HSMFS_READAHEAD_H

#include <stdbool.h>
#include <stdint.h>

struct fstate;
struct front_req;
struct inode;
struct range;

/*
 * Ask for the missing bytes of [pos, limit) now, an event for each chunk's
 * (none past limit), at most max events, detached, only while slots are
 * free and the cache admits them without waiting, each counted in
 * *count (a stats counter).  Returns where it stopped; *ret_asked (may be
 * NULL) gets the bytes asked for.  stream: a sequential reader's window
 * (readahead.c), whose events the file's last close cancels
 * (cancel_window).  S.lock held.
 */
uint64_t fill_ahead(struct inode *in, struct fstate *fs, uint64_t pos, uint64_t limit,
		    struct front_req *req, unsigned max, uint64_t *count,
		    uint64_t *ret_asked, bool stream);
/* A reader's miss, whose fill asks up to asked_end: drives readahead. */
void read_ahead(struct inode *in, struct fstate *fs, const struct range *miss,
		uint64_t asked_end, struct front_req *req);

#endif
