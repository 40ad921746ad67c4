/*
 * event.h - an event's life (event.c): a slot taken from the fixed pool,
 * references held by waiters and parked requests, the one place it is
 * finished (complete()), and the ready list its parked requests go to.
 * Every function here wants S.lock held unless it says otherwise.
 */
#ifndef HSMFS_EVENT_H
#define HSMFS_EVENT_H

#include <stdbool.h>
#include <stdint.h>

struct event;
struct front_req;
struct inode;

/*
 * Set while a thread of the engine (a hook's connection, the timer, the
 * room thread) runs parked requests on: such a thread must never wait
 * for an event itself.
 */
extern __thread bool engine_thread;

/* Take a free slot, waiting for one until the timeout; NULL: none. */
struct event *get_slot(void);
/* Fill a fresh slot in as a QUEUED event of type for in (referenced). */
void init_event(struct event *ev, uint32_t type, struct inode *in, struct front_req *req);
/* The event of id while it is QUEUED or SENT, else NULL. */
struct event *find_event(uint64_t id);
/* Append ev to E.queue (fills waiting for a fill hook) / take it off. */
void queue_add(struct event *ev);
void queue_remove(struct event *ev);
/* Finish ev with result: nobody may send it again, waiters wake. */
void complete(struct event *ev, int result);
/* References: see hold_event(), put_ref() and put_event() in event.c. */
void hold_event(struct event *ev);
void put_ref(struct event *ev);
void put_event(struct event *ev);
/* Every hook that has ev gets a CANCEL of reason. */
void send_cancel(struct event *ev, uint32_t reason);
/* ev ran out of time: CANCEL to its hooks, it fails with EV_TIMEOUT. */
void expire(struct event *ev);
/* Wait for ev with a reference the caller holds (dropped): its result. */
int wait_event(struct event *ev, struct front_req *req);
/* Parked requests of ev whose caller was interrupted leave it. */
void unpark_interrupted(struct event *ev);
/* Map an internal failure to what the caller of read/write sees. */
int caller_errno(int res);

#endif
