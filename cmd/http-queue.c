/* http-queue.c - hsmfs-http's events waiting: see http-queue.h */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "hsmfs/hook.h"
#include "http-config.h"
#include "http-queue.h"

struct jobq fills, later, lists;  /* under qlock */
pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t qcond = PTHREAD_COND_INITIALIZER; /* lists grew, or done */
bool done;                 /* no more events: finish what is queued */
int hook_end;              /* hsmfs_hook_next()'s error that ended the events */

/*
 * A CANCEL: the event is given up (its answer would be ignored), so a
 * job of it still queued is dropped, never fetched.  One under way
 * finishes (stopping it would cost an HTTP/1.1 connection).  Under qlock.
 */
static bool jobq_drop(struct jobq *q, uint64_t id)
{
	struct job **pp, *prev = NULL;

	for (pp = &q->head; *pp; prev = *pp, pp = &(*pp)->next) {
		struct job *j = *pp;

		if (j->ev.id != id)
			continue;
		*pp = j->next;
		if (q->tail == j)
			q->tail = prev;
		if (j->ev.fd >= 0)
			close(j->ev.fd);
		free(j);
		return true;
	}
	return false;
}

struct job *jobq_take(struct jobq *q)
{
	struct job *j = q->head;

	if (j) {
		q->head = j->next;
		if (!q->head)
			q->tail = NULL;
	}
	return j;
}

/* Queue one event: a fill for the fetcher (the caller), a listing for a lister. */
static void take_event(struct hsmfs_event *ev)
{
	struct job *j;
	struct jobq *q;

	if (ev->type == HSMFS_EV_CANCEL) {
		pthread_mutex_lock(&qlock);
		if ((jobq_drop(&fills, ev->id) || jobq_drop(&later, ev->id)) && cfg.verbose)
			logf_("event %llu cancelled before its transfer began",
			      (unsigned long long)ev->id);
		pthread_mutex_unlock(&qlock);
		return;
	}
	if (ev->type != HSMFS_EV_PRE_ACCESS && ev->type != HSMFS_EV_PRE_DIR &&
	    ev->type != HSMFS_EV_PRE_LOOKUP && ev->type != HSMFS_EV_ARCHIVE &&
	    ev->type != HSMFS_EV_ARCHIVE_NAME) {
		if (ev->fd >= 0)
			close(ev->fd);
		return;
	}
	j = malloc(sizeof(*j));
	if (!j) {
		hsmfs_hook_deny(hook, ev->id, EAGAIN);
		if (ev->fd >= 0)
			close(ev->fd);
		return;
	}
	j->ev = *ev;
	j->flags = hsmfs_hook_event_flags(hook);
	j->next = NULL;
	q = ev->type != HSMFS_EV_PRE_ACCESS ? &lists : ev->pid ? &fills : &later;
	pthread_mutex_lock(&qlock);
	if (q->tail)
		q->tail->next = j;
	else
		q->head = j;
	q->tail = j;
	if (q == &lists)
		pthread_cond_signal(&qcond);
	pthread_mutex_unlock(&qlock);
}

/*
 * Take every event waiting on the hook's socket, without blocking (a
 * SEQPACKET socket that polls readable holds a whole message).  When the
 * mount is gone, no more come: the listers are told, the fetcher finishes
 * what is queued.
 */
void take_events(void)
{
	struct pollfd p = { .fd = hsmfs_hook_fd(hook), .events = POLLIN };
	struct hsmfs_event ev;

	while (!done && poll(&p, 1, 0) > 0) {
		int res = hsmfs_hook_next(hook, &ev);

		if (res) {
			pthread_mutex_lock(&qlock);
			hook_end = res;
			done = true;
			pthread_cond_broadcast(&qcond);
			pthread_mutex_unlock(&qlock);
			return;
		}
		take_event(&ev);
	}
}
