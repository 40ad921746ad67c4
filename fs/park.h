/*
 * park.h - requests parked on an event instead of holding a FUSE worker
 * thread while a hook works (park.c), and the room thread that admits
 * parked reads to a limited cache.
 */
#ifndef HSMFS_PARK_H
#define HSMFS_PARK_H

#include <stdbool.h>
#include <stdint.h>


struct event;
struct front_req;
struct inode;
struct parked;

/*
 * Park req on ev, whose reference the caller holds (it goes to the
 * parked request): EVENTS_PARKED, or the event's result when it is
 * decided already or no parking place is free, or -EAGAIN.
 * cont(arg, res) is called once ev ends.  S.lock held.
 */
int park_on(struct event *ev, struct inode *in, struct front_req *req,
	    void (*cont)(void *arg, int res), void *arg);
/*
 * The slow paths that wait in the calling thread.  Return 0 to go on, or
 * -errno for the caller.  req may be NULL; with it, a FUSE interrupt of
 * the caller ends the wait with EINTR.  Without S.lock; they drain the
 * ready list before they return.
 */
int events_pre_access(struct inode *in, uint64_t off, uint64_t len,
		      struct front_req *req, bool *ret_held);
/*
 * Resume every parked request whose event ended (complete() put it on
 * E.ready): what every path that may end an event calls once it has
 * dropped S.lock.
 */
void drain_ready(void);
/* A parked read or check ends with res.  Without S.lock. */
void finish_read(struct parked *p, int res);
/* The room thread (started by events_init). */
void *roomer_main(void *arg);

#endif
