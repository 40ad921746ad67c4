/*
 * ops-file.h - the one reply of a read (ops-file.c), for main.c
 * (through ops.h) to hand the engine.
 */
#ifndef HSMFS_OPS_FILE_H
#define HSMFS_OPS_FILE_H

#include <stdint.h>

struct front_req;
struct inode;

/*
 * The one reply of a read: an error, or [off, off + len) of the store
 * descriptor fd.  Also the engine's for the reads it parked (events.h,
 * front.reply).
 */
void ops_read_reply(struct front_req *r, struct inode *in, int fd, uint64_t off,
		    uint64_t len, int res);

#endif
