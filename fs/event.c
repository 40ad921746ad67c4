/* event.c - an event's life: see event.h; its states: evrec.h */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include "cache.h"
#include "engine.h"
#include "proto.h"
#include "event.h"
#include "fstate.h"
#include "hooks.h"
#include "inode.h"
#include "log.h"
#include "names.h"

__thread bool engine_thread;
static void release_slot(struct event *ev);

/* S.lock held. */
void queue_add(struct event *ev)
{
	ELOCK_HELD();
	struct event **pp = &E.queue;

	while (*pp)
		pp = &(*pp)->qnext;
	ev->qnext = NULL;
	*pp = ev;
}

/* S.lock held. */
void queue_remove(struct event *ev)
{
	ELOCK_HELD();
	struct event **pp;

	for (pp = &E.queue; *pp; pp = &(*pp)->qnext)
		if (*pp == ev) {
			*pp = ev->qnext;
			break;
		}
	ev->qnext = NULL;
}

/* Finish an event: nobody may send it again, waiters wake.  S.lock held. */
void complete(struct event *ev, int result)
{
	ELOCK_HELD();
	if (ev->st == EV_DONE)
		return;
	if (ev->st == EV_QUEUED)
		queue_remove(ev);
	if (ev->hook) {
		ev->hook->assigned--;
		ev->hook = NULL;
	}
	if (ev->fs) {
		struct event **pp;

		for (pp = &ev->fs->inflight; *pp; pp = &(*pp)->fnext)
			if (*pp == ev) {
				*pp = ev->fnext;
				break;
			}
		drop_rw_fd(ev->fs);
	}
	assert(ev->st != EV_COPYING);
	if (ev->stage_fd >= 0) {
		close_unlocked(ev->stage_fd); /* what a late hook writes goes nowhere */
		ev->stage_fd = -1;
	}
	ev->ntargets = 0;
	free(ev->dir_origin);
	ev->dir_origin = NULL;
	free(ev->name);
	ev->name = NULL;
	free(ev->orphans);
	ev->orphans = NULL;
	ev->norphans = 0;
	if (ev->reserved) {
		cache_unreserve(ev->reserved);
		ev->reserved = 0;
	}
	/* a failed fill is remembered for the kernel's retry: recently_failed() */
	if (ev->fs && ev->type == HSMFS_EV_PRE_ACCESS && !ev->detached &&
	    (result == EV_TIMEOUT || result == -EIO || result == -ETIMEDOUT)) {
		ev->fs->to_lo = ev->hint_start;
		ev->fs->to_hi = ev->hint_end;
		ev->fs->to_at = mono_ms();
		ev->fs->to_joins = E.joins;
		ev->fs->to_pid = ev->pid;
		ev->fs->to_err = result;
	}
	if (result == EV_TIMEOUT)
		S.st.timeouts++;
	else if (result == -EINTR)
		S.st.interrupted++;
	else if (result && result != -ECANCELED) /* cancel_window() counts its own */
		S.st.denied++;
	ev_set(ev, EV_DONE);
	ev->result = result;
	pthread_cond_broadcast(&ev->cond);
	/* its parked reads go to whichever thread drains the ready list */
	while (ev->parked) {
		struct parked *p = ev->parked;

		ev->parked = p->next;
		p->result = result;
		p->next = E.ready;
		E.ready = p;
		ev->waiters--;
	}
	put_event(ev);
}

/* Release ev's slot once it is done and nobody holds it.  S.lock held. */
void put_event(struct event *ev)
{
	ELOCK_HELD();
	if (ev->st == EV_DONE && !ev->waiters)
		release_slot(ev);
}

/*
 * Take a reference on ev for a waiter; a readahead's first waiter gets
 * the whole timeout from now.  S.lock held.
 */
void hold_event(struct event *ev)
{
	ELOCK_HELD();
	if (!ev->waiters++ && ev->detached)
		mono_after(&ev->deadline, S.cfg.timeout);
}

/* S.lock held. */
static void release_slot(struct event *ev)
{
	ELOCK_HELD();
	if (ev->type == HSMFS_EV_PRE_DIR || ev->type == HSMFS_EV_PRE_LOOKUP)
		names_plan_end(ev->names_plan);
	ev->names_plan = 0;
	free(ev->new_version);
	free(ev->new_origin);
	ev->new_version = ev->new_origin = NULL;
	inode_release(ev->in);
	ev->in = NULL;
	ev->fs = NULL;
	ev->id = 0;
	ev_set(ev, EV_FREE);
	ev->free_next = E.free_list;
	E.free_list = ev;
	pthread_cond_signal(&E.slot_cond);
}

/* Take a free slot, waiting for one until the timeout.  S.lock held. */
struct event *get_slot(void)
{
	ELOCK_HELD();
	struct timespec deadline;

	mono_after(&deadline, S.cfg.timeout);
	while (!E.free_list) {
		if (pthread_cond_timedwait(&E.slot_cond, &S.lock, &deadline) ==
		    ETIMEDOUT && !E.free_list)
			return NULL;
	}
	struct event *ev = E.free_list;

	E.free_list = ev->free_next;
	return ev;
}

/* S.lock held. */
void init_event(struct event *ev, uint32_t type, struct inode *in,
		struct front_req *req)
{
	ELOCK_HELD();
	struct caller who = { 0 };

	if (req)
		S.cfg.front.caller(req, &who);
	ev->id = (++E.seq << SLOT_BITS) | (uint64_t)(ev - E.slots);
	ev->type = type;
	ev_set(ev, EV_QUEUED);
	ev->in = in;
	inode_ref(in);
	ev->fs = NULL;
	ev->hook = NULL;
	ev->hook_losses = 0;
	ev->ntargets = 0;
	ev->detached = false;
	ev->stream = false;
	ev->dir_origin = NULL;
	ev->name = NULL;
	ev->new_version = ev->new_origin = NULL;
	ev->uploaded = false;
	ev->refresh = false;
	ev->aflags = 0;
	ev->result = 0;
	ev->waiters = 0;
	ev->parked = NULL;
	ev->progress = 0;
	ev->pid = who.pid;
	ev->uid = who.uid;
	ev->gid = who.gid;
	ev->fnext = ev->qnext = NULL;
	ev->reserved = 0;
	mono_after(&ev->deadline, S.cfg.timeout);
	clock_gettime(CLOCK_MONOTONIC, &ev->born);
	if (type == HSMFS_EV_PRE_ACCESS)
		S.st.pre_access++;
	else if (type == HSMFS_EV_PRE_MODIFY)
		S.st.pre_modify++;
	else if (type == HSMFS_EV_OPEN_PERM)
		S.st.open_perm++;
	else if (type == HSMFS_EV_PRE_DIR)
		S.st.pre_dir++;
	else if (type == HSMFS_EV_PRE_LOOKUP)
		S.st.pre_lookup++;
	else if (type == HSMFS_EV_ARCHIVE || type == HSMFS_EV_ARCHIVE_NAME)
		S.st.archives++;
	else
		S.st.access_perm++;
}

/* Every hook that has ev (its fill hook, the watchers sent it) gets a CANCEL.  S.lock held. */
void send_cancel(struct event *ev, uint32_t reason)
{
	ELOCK_HELD();
	if (ev->hook)
		hooks_send_cancel(ev->hook, ev->id, reason);
	for (unsigned i = 0; i < ev->ntargets; i++)
		if (ev->targets[i] && !ev->unsent[i])
			hooks_send_cancel(ev->targets[i], ev->id, reason);
}

/* ev ran out of time: every hook that had it gets a CANCEL, the event fails.  S.lock held. */
void expire(struct event *ev)
{
	ELOCK_HELD();
	/* each hook that had it and did not answer in time, counted */
	if (ev->hook)
		ev->hook->timeouts++;
	for (unsigned i = 0; i < ev->ntargets; i++)
		if (ev->targets[i] && !ev->unsent[i])
			ev->targets[i]->timeouts++;
	send_cancel(ev, HSMFS_CANCEL_TIMEOUT);
	elog_warn("event %llu (%s) timed out%s", (unsigned long long)ev->id,
		 proto_event_name(ev->type),
		 ev->detached ? " (readahead)" : "");
	complete(ev, EV_TIMEOUT);
}

/*
 * A waiter of ev left (interrupted): with nobody else waiting, the
 * event is cancelled unless it is a readahead or being committed.
 * The caller puts its reference.  S.lock held.
 */
static void abandoned(struct event *ev)
{
	ELOCK_HELD();
	if (ev->waiters || ev->st == EV_DONE || ev->detached || ev->st == EV_COPYING)
		return;
	send_cancel(ev, HSMFS_CANCEL_INTERRUPTED);
	ev->waiters++; /* complete() must not release it under us */
	complete(ev, -EINTR);
	ev->waiters--;
}

/*
 * Wait for ev to finish, with a reference the caller took (hold_event,
 * or start_fill's); the reference is dropped.  S.lock held.  Returns
 * the event's result, or -EINTR.
 */
int wait_event(struct event *ev, struct front_req *req)
{
	ELOCK_HELD();
	int res = 0;

	while (ev->st != EV_DONE) {
		struct timespec tick;

		/* wake at least every 200 ms to notice FUSE interrupts */
		mono_after(&tick, 0.2);
		if (tick.tv_sec > ev->deadline.tv_sec ||
		    (tick.tv_sec == ev->deadline.tv_sec &&
		     tick.tv_nsec > ev->deadline.tv_nsec))
			tick = ev->deadline;
		pthread_cond_timedwait(&ev->cond, &S.lock, &tick);
		if (ev->st == EV_DONE)
			break;
		if (req && S.cfg.front.interrupted && S.cfg.front.interrupted(req)) {
			res = -EINTR;
			break;
		}
		if (mono_passed(&ev->deadline) && ev->st != EV_COPYING)
			expire(ev);
	}
	if (!res)
		res = ev->result;
	ev->waiters--;
	if (res == -EINTR)
		abandoned(ev);
	put_event(ev);
	return res;
}

/* Map an internal failure to what the caller of read/write sees. */
int caller_errno(int res)
{
	return res == EV_TIMEOUT ? -EIO : res;
}

/* Drop a reference to ev taken for a wait that will not happen.  S.lock held. */
void put_ref(struct event *ev)
{
	ELOCK_HELD();
	ev->waiters--;
	put_event(ev);
}


/*
 * Parked reads whose caller was interrupted leave their event (the
 * event is cancelled if nobody else waits).  S.lock held.
 */
void unpark_interrupted(struct event *ev)
{
	ELOCK_HELD();
	struct parked **pp = &ev->parked;

	if (!S.cfg.front.interrupted)
		return; /* a front end with no interrupts (front.h) */
	while (*pp) {
		struct parked *p = *pp;

		if (!S.cfg.front.interrupted(p->req)) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		p->result = -EINTR;
		p->next = E.ready;
		E.ready = p;
		ev->waiters--;
		abandoned(ev); /* the caller holds ev: never released here */
		if (ev->st == EV_DONE)
			break; /* the rest went to the ready list with it */
	}
}

/* S.lock held. */
struct event *find_event(uint64_t id)
{
	ELOCK_HELD();
	uint64_t slot = id & ((1ULL << SLOT_BITS) - 1);
	struct event *ev;

	if (slot >= S.cfg.max_pending)
		return NULL;
	ev = &E.slots[slot];
	/* a queued event may already be with its watchers */
	return ev->id == id && ev_live(ev) ? ev : NULL;
}
