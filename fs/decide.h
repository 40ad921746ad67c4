/*
 * decide.h - the decision rule of the engine (decide.c): is a read's
 * range present, is an event fetching it already, or does a new one
 * start; must a permission event be asked, of which hooks.
 */
#ifndef HSMFS_DECIDE_H
#define HSMFS_DECIDE_H

#include <stdbool.h>
#include <stdint.h>

struct event;
struct fstate;
struct front_req;
struct hook;
struct inode;

/* The page-aligned span of a read of [off, off + len), within the file. */
void read_span(const struct fstate *fs, uint64_t off, uint64_t len, uint64_t *ret_start,
	       uint64_t *ret_end);
/*
 * One step of a read's check of [start, end): see decide.c.  0, -errno,
 * 1 with *ret_ev to wait for, or 2 (no room now, !may_block).  S.lock held.
 */
int access_step(struct inode *in, struct fstate *fs, uint64_t start, uint64_t end,
		struct front_req *req, bool first, bool may_block, uint64_t *reserved,
		struct event **ret_ev);
/*
 * Start a permission event of in: 0 (no hook must answer), 1 with
 * *ret_ev (one reference, the caller's), or -errno.  S.lock held.
 */
int start_perm(struct inode *in, uint32_t type, uint64_t start, uint64_t end,
	       struct front_req *req, struct event **ret_ev);
/* Would start_perm() ask a hook (raise an event)?  S.lock held. */
bool perm_wanted(struct inode *in, uint32_t type);
/* h answered PRE_MODIFY of the file ino with QUIET.  S.lock held. */
void quiet_add(struct hook *h, uint64_t ino);

#endif
