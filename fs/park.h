/*
 * park.h - requests parked on an event instead of holding a FUSE worker
 * thread while a hook works (park.c), and the room thread that admits
 * parked reads to a limited cache.
 */
#ifndef HSMFS_PARK_H
#define HSMFS_PARK_H

#include <stdbool.h>
#include <stdint.h>

/* A result beside 0 and -errno: the engine took the request (see below). */
#define EVENTS_PARKED 1

struct event;
struct front_req;
struct inode;
struct parked;

/*
 * When events_pre_access() set *ret_held (mounts with cache limits), the
 * read is counted until its reply is sent; then call this, so that the
 * evictor may take ranges of the open file again.
 */
void events_read_done(struct inode *in);

/*
 * A read(2)'s slow path that does not hold the calling FUSE worker while
 * a hook works or the cache makes room: returns 0 (all present: read
 * and reply yourself; with *ret_held, call events_read_done() after),
 * -errno (reply it), or EVENTS_PARKED: the engine took the request and
 * answers it through front.reply once its bytes are present or it failed.
 * A full parking pool waits in the calling thread instead.
 */
int events_read(struct inode *in, uint64_t off, uint64_t len, struct front_req *req,
		int fd, bool *ret_held);
/*
 * The same check for a request that reads the bytes itself (the source
 * of a copy_file_range): 0 and -errno as events_read(); EVENTS_PARKED:
 * cont(arg, res) is called once the bytes are present (res 0, with a
 * read hold taken: call events_read_done() when done with them) or the
 * check failed (-errno), from an engine thread, without its lock.
 */
int events_read_check(struct inode *in, uint64_t off, uint64_t len, struct front_req *req,
		      void (*cont)(void *arg, int res), void *arg, bool *ret_held);
/*
 * PRE_MODIFY of [start, end) of in without holding the calling worker:
 * 0 (no hook must answer, or all allowed: go on now), -errno (reply
 * it), or EVENTS_PARKED: the engine keeps the request and calls
 * cont(arg, res) once every hook answered or the event failed (res 0:
 * go on with the change; else the -errno to reply), from the engine
 * thread that decided it, without the engine's lock; in stays
 * referenced until cont returns.  A full parking pool waits in the
 * calling thread; a user over max_parked_user gets -EAGAIN.
 */
int events_modify(struct inode *in, uint64_t start, uint64_t end, struct front_req *req,
		  void (*cont)(void *arg, int res), void *arg);
/* OPEN_PERM of in, opened with flags: as events_modify(). */
int events_open_perm(struct inode *in, int flags, struct front_req *req,
		     void (*cont)(void *arg, int res), void *arg);

/*
 * ACCESS_PERM of [start, end) of in: as events_modify().  Raised for
 * each read(2) that reaches the daemon (and a copy's source); opens of
 * files a subscriber watches bypass the page cache so that each does
 * (events_access_target() at open).
 */
int events_access_perm(struct inode *in, uint64_t start, uint64_t end, struct front_req *req,
		       void (*cont)(void *arg, int res), void *arg);

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
int events_pre_modify(struct inode *in, uint64_t start, uint64_t end,
		      struct front_req *req);
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
