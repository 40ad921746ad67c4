/*
 * http-queue.h - hsmfs-http's events waiting.  take_events() takes every
 * event waiting on the hook's socket, without blocking, and queues each:
 * a fill in fills (a reader's) or later (the mount's own, pid 0) for the
 * fetcher (http-fetch.h); a listing, a lookup, an archive or a name's
 * change in lists for the listers (http-lister.h).  A CANCEL drops its
 * event's fill while still queued; an event of another type is closed
 * unanswered.  When the mount is gone no more come: done is set, and
 * hook_end says how the events ended.
 *
 * Shares the queues, done and hook_end, all under qlock; qcond is
 * signalled when lists grows and broadcast when done is set.
 * take_events() is the fetcher's (the hook's socket is one of the
 * descriptors it polls); a job taken off a queue (jobq_take(), under
 * qlock) is its taker's alone, to answer and free.
 */
#ifndef HSMFS_HTTP_QUEUE_H
#define HSMFS_HTTP_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "hsmfs/hook.h"

/*
 * Events waiting: fills for the fetcher, listings for the listers.  A
 * fill no process caused (pid 0: the mount's sibling prefetch, the rest
 * of a chunk after a reader's part) waits in later: the fetcher takes
 * a reader's fill first, and keeps a slot that only a reader's fill may
 * take, so that one never waits for the mount's guesses to finish.
 */
struct job {
	struct hsmfs_event ev;
	uint16_t flags;   /* the event's (HSMFS_EVENT_OVERWRITE) */
	struct job *next;
};
struct jobq {
	struct job *head, *tail;
};
extern struct jobq fills, later, lists;  /* under qlock */
extern pthread_mutex_t qlock;
extern pthread_cond_t qcond;             /* lists grew, or done */
extern bool done;                        /* no more events: finish what is queued */
extern int hook_end;                     /* hsmfs_hook_next()'s error that ended the events */

/* The first job of q, NULL if none.  Under qlock. */
struct job *jobq_take(struct jobq *q);
void take_events(void);

#endif
