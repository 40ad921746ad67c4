/* park.c - parked requests and the room thread: see park.h */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include "events.h"
#include "cache.h"
#include "decide.h"
#include "engine.h"
#include "event.h"
#include "fstate.h"
#include "inode.h"
#include "log.h"
#include "park.h"

static void room_queue(struct parked *p);

/*
 * A read's bytes are all present: hold them from eviction until the read
 * is answered (events_read_done(), finish_read(), or the check's cont),
 * if the cache counts the file (tracked()) or the caller reads them
 * itself (a check: a copy's source).  Whether it held.  S.lock held.
 */
static bool read_hold(struct fstate *fs, bool check)
{
	ELOCK_HELD();
	if (!check && !tracked(fs))
		return false;
	fs->nreading++;
	return true;
}
static void park_put(struct parked *p);
static struct parked *park_take(struct front_req *req, int *res);
static int read_park(struct inode *in, uint64_t off, uint64_t len, struct front_req *req,
		     int fd, void (*cont)(void *arg, int res), void *arg, bool *ret_held);
static int park_perm(struct inode *in, uint32_t type, uint64_t start, uint64_t end,
		     struct front_req *req, void (*cont)(void *arg, int res), void *arg);

int events_read(struct inode *in, uint64_t off, uint64_t len, struct front_req *req,
		int fd, bool *ret_held)
{
	if (!S.cfg.front.reply)
		return events_pre_access(in, off, len, req, ret_held);
	return read_park(in, off, len, req, fd, NULL, NULL, ret_held);
}

int events_read_check(struct inode *in, uint64_t off, uint64_t len, struct front_req *req,
		      void (*cont)(void *arg, int res), void *arg, bool *ret_held)
{
	return read_park(in, off, len, req, -1, cont, arg, ret_held);
}

/*
 * The first check of a read (cont NULL) or a check (cont set), from a
 * FUSE worker: answered now, or parked on the event it waits for or on
 * the room thread's queue.  With no parking place free it waits here.
 */
static int read_park(struct inode *in, uint64_t off, uint64_t len, struct front_req *req,
		     int fd, void (*cont)(void *arg, int res), void *arg, bool *ret_held)
{
	struct fstate *fs = inode_state(in);
	uint64_t start, end, reserved = 0;
	struct event *ev = NULL;
	struct parked *p;
	int res;

	*ret_held = false;
	if (!fs)
		return 0;
	elock();
	read_span(fs, off, len, &start, &end);
	res = access_step(in, fs, start, end, req, true, false, &reserved, &ev);
	if (res <= 0) {
		if (!res)
			*ret_held = read_hold(fs, false);
		eunlock();
		if (reserved)
			cache_unreserve(reserved);
		return caller_errno(res);
	}
	p = park_take(req, &res);
	if (!p) {
		if (ev)
			put_ref(ev);
		eunlock();
		if (reserved)
			cache_unreserve(reserved);
		if (res)
			/*
			 * the user's bound: the read fails, and the fill it
			 * started goes on (the bytes any reader of them needs;
			 * a change's question, by contrast, is not asked: see
			 * park_perm())
			 */
			return res;
		if (engine_thread)
			return -EAGAIN; /* see engine_thread */
		/* every parking place taken: wait in this thread */
		return events_pre_access(in, off, len, req, ret_held);
	}
	p->in = in;
	inode_ref(in);
	p->fd = fd;
	p->off = off;
	p->len = len;
	p->cont = cont;
	p->arg = arg;
	p->check = cont != NULL;
	p->reserved = reserved;
	if (ev) {
		p->stepped = true;
		p->next = ev->parked; /* with the reference access_step took */
		ev->parked = p;
	} else {
		room_queue(p); /* the room thread admits it */
	}
	eunlock();
	return EVENTS_PARKED;
}

/*
 * Check a parked read or check again: 1 when it is parked once more (on
 * an event, or on the room queue), else its result (0: present, with
 * the read hold taken that finish_read() gives back).  S.lock held;
 * with may_block (the room thread) it may be dropped meanwhile.
 */
static int check_parked(struct parked *p, bool may_block)
{
	ELOCK_HELD();
	struct fstate *fs = inode_state(p->in);
	uint64_t start, end;
	struct event *ev = NULL;
	int res;

	read_span(fs, p->off, p->len, &start, &end);
	res = access_step(p->in, fs, start, end, p->req, !p->stepped, may_block,
			  &p->reserved, &ev);
	if (res == 1) {
		p->stepped = true;
		p->next = ev->parked;
		ev->parked = p;
		return 1;
	}
	if (res == 2) {
		room_queue(p);
		return 1;
	}
	if (!res)
		p->held = read_hold(fs, p->check);
	return res;
}

/* A parked read or check ends with res.  Called without S.lock. */
void finish_read(struct parked *p, int res)
{
	ELOCK_NOT_HELD();
	if (p->reserved) {
		cache_unreserve(p->reserved);
		p->reserved = 0;
	}
	if (p->check) {
		p->cont(p->arg, caller_errno(res)); /* res 0: gives the hold back */
	} else {
		S.cfg.front.reply(p->req, p->in, p->fd, p->off, p->len, caller_errno(res));
		if (p->held)
			events_read_done(p->in);
	}
	inode_release(p->in);
	elock();
	park_put(p);
	eunlock();
}

/* Hand p to the room thread.  S.lock held. */
static void room_queue(struct parked *p)
{
	ELOCK_HELD();
	p->next = NULL;
	*E.room_tail = p;
	E.room_tail = &p->next;
	pthread_cond_signal(&E.room_cond);
}

/*
 * The store was full (ENOSPC) for a read's fill: evict, then check the
 * read once more, once per read.  The rule of both the parked reads
 * (resume(), through the room thread) and the waiting ones
 * (events_pre_access()).
 */
static bool store_full_retry(int res, bool *retried)
{
	if (res != -ENOSPC || *retried)
		return false;
	*retried = true;
	return true;
}

/* A round of eviction for a read the store had no room for.  S.lock held, dropped. */
static int make_room(void)
{
	int res;

	eunlock();
	res = cache_make_room(S.cfg.chunk) ? -ENOSPC : 0;
	elock();
	return res;
}

/*
 * The room thread: the one place a parked read waits for the evictor
 * (admission under cache_max/cache_min_free, and a round of eviction
 * after ENOSPC), one read at a time, each within the mount's timeout.
 * Hooks' answers and every other request go on meanwhile.
 */
void *roomer_main(void *arg)
{
	(void)arg;
	engine_thread = true;
	elock();
	for (;;) {
		struct parked *p = E.room;
		int res = 0;

		if (!p) {
			if (S.stopping)
				break;
			pthread_cond_wait(&E.room_cond, &S.lock);
			continue;
		}
		E.room = p->next;
		if (!E.room)
			E.room_tail = &E.room;
		if (S.stopping || (S.cfg.front.exiting && S.cfg.front.exiting())) {
			res = -EIO; /* unmounted: nobody reads the answer */
		} else if (p->make_room) {
			p->make_room = false;
			res = make_room();
		}
		if (!res) {
			res = check_parked(p, true);
			if (res == 1)
				continue;
		}
		eunlock();
		finish_read(p, res);
		elock();
	}
	eunlock();
	return NULL;
}

static unsigned share_of(uid_t uid)
{
	return (unsigned)(((uint64_t)uid * 0x9E3779B97F4A7C15ULL) >> 58) % USER_SHARES;
}

/*
 * Is req's user at its bound of parked requests (cfg.max_parked_user)?
 * Then -EAGAIN, logged at most once a minute, else 0; *ret_share gets
 * the user's share.  S.lock held.
 */
static int over_bound(struct front_req *req, unsigned *ret_share)
{
	ELOCK_HELD();
	struct caller who = { 0 };
	unsigned share;

	if (req)
		S.cfg.front.caller(req, &who);
	share = share_of(who.uid);
	if (ret_share)
		*ret_share = share;
	if (S.cfg.max_parked_user && E.parked_by[share] >= S.cfg.max_parked_user) {
		int64_t now = mono_ms();

		S.st.over_bound++;
		if (!E.share_warned || now - E.share_warned >= 60000) {
			E.share_warned = now;
			elog_warn("user %u has %u requests waiting for hooks "
				 "(max_pending_user=%u): failing more with EAGAIN",
				 (unsigned)who.uid, E.parked_by[share],
				 S.cfg.max_parked_user);
		}
		return -EAGAIN;
	}
	return 0;
}

/*
 * A parking place for req: NULL with *res 0 when the pool is empty (the
 * caller waits in its thread), NULL with -EAGAIN when req's user is at
 * its bound (over_bound()).  S.lock held.
 */
static struct parked *park_take(struct front_req *req, int *res)
{
	ELOCK_HELD();
	struct parked *p;
	unsigned share;

	*res = over_bound(req, &share);
	if (*res)
		return NULL;
	p = E.park_free;
	if (!p)
		return NULL;
	E.park_free = p->next;
	memset(p, 0, sizeof(*p));
	p->req = req;
	p->share = share;
	E.parked_by[share]++;
	E.nparked++;
	return p;
}

/* Give p back (its inode released by the caller).  S.lock held. */
static void park_put(struct parked *p)
{
	ELOCK_HELD();
	E.parked_by[p->share]--;
	E.nparked--;
	p->req = NULL;
	p->in = NULL;
	p->cont = NULL;
	p->next = E.park_free;
	E.park_free = p;
}

/*
 * A parked request's event ended.  A change goes on through its
 * continuation.  A read is checked again: parked on the next event, or
 * answered.  Called without S.lock.
 */
static void resume(struct parked *p)
{
	int res = p->result;

	if (p->cont && !p->check) {
		p->cont(p->arg, caller_errno(res));
		inode_release(p->in);
		elock();
		park_put(p);
		eunlock();
		return;
	}
	elock();
	if (!res && S.stopping)
		res = -EIO; /* shutting down: nobody checks it again */
	if (store_full_retry(res, &p->retried)) {
		/* the room thread evicts, then checks again */
		p->make_room = true;
		room_queue(p);
		eunlock();
		return;
	}
	if (!res) {
		res = check_parked(p, false);
		if (res == 1) {
			eunlock();
			return;
		}
	}
	eunlock();
	finish_read(p, res);
}

void events_read_done(struct inode *in)
{
	struct fstate *fs = inode_state(in);

	elock();
	if (fs && fs->nreading && !--fs->nreading)
		pthread_cond_broadcast(&S.reads_done);
	eunlock();
}

int events_modify(struct inode *in, uint64_t start, uint64_t end, struct front_req *req,
		  void (*cont)(void *arg, int res), void *arg)
{
	if (inode_flags(in) & INODE_QUIET)
		return 0;
	return park_perm(in, HSMFS_EV_PRE_MODIFY, start, end, req, cont, arg);
}

int events_open_perm(struct inode *in, int flags, struct front_req *req,
		     void (*cont)(void *arg, int res), void *arg)
{
	return park_perm(in, HSMFS_EV_OPEN_PERM, (uint64_t)(unsigned)flags, 0, req, cont, arg);
}

int events_access_perm(struct inode *in, uint64_t start, uint64_t end, struct front_req *req,
		       void (*cont)(void *arg, int res), void *arg)
{
	return park_perm(in, HSMFS_EV_ACCESS_PERM, start, end, req, cont, arg);
}

/*
 * Park req on ev, whose reference the caller holds (it goes to the
 * parked request): EVENTS_PARKED, or the event's result when it is
 * decided already or no parking place is free (waited for here), or
 * -EAGAIN.  cont(arg, res) is called once ev ends.
 * S.lock held.
 */
int park_on(struct event *ev, struct inode *in, struct front_req *req,
	    void (*cont)(void *arg, int res), void *arg)
{
	ELOCK_HELD();
	struct parked *p;
	int res;

	/* decided already (nobody to ask), or no request to park: wait here */
	if (ev->st == EV_DONE || !req)
		return wait_event(ev, req);
	p = park_take(req, &res);
	if (!p && !res && engine_thread) {
		/* an engine thread waiting could hold up the answer */
		put_ref(ev);
		return -EAGAIN;
	}
	if (!p) {
		if (!res) /* no parking place: wait here */
			return wait_event(ev, req);
		put_ref(ev);
		return res;
	}
	p->in = in;
	inode_ref(in);
	p->cont = cont;
	p->arg = arg;
	p->next = ev->parked; /* with the caller's reference */
	ev->parked = p;
	return EVENTS_PARKED;
}

/* A permission event whose request parks: see events_modify(). */
static int park_perm(struct inode *in, uint32_t type, uint64_t start, uint64_t end,
		     struct front_req *req, void (*cont)(void *arg, int res), void *arg)
{
	struct event *ev;
	int res;

	elock();
	/*
	 * The user's bound before the event: a change refused for it is
	 * not asked about (a hook would hear of a change that never comes).
	 */
	if (perm_wanted(in, type) && (res = over_bound(req, NULL))) {
		eunlock();
		return res;
	}
	res = start_perm(in, type, start, end, req, &ev);
	if (res == 1)
		res = park_on(ev, in, req, cont, arg);
	eunlock();
	if (res == EVENTS_PARKED)
		return res;
	drain_ready();
	return caller_errno(res);
}

/* ------------------------------------------ the blocking entry points */

/*
 * The slow paths that wait in the calling thread (a parking pool full, a
 * caller with no request to park: upload.c's snapshot): the decision
 * rule (decide.c) asked again after each event, then the ready list
 * drained, as every path that may have ended an event does.
 */
int events_pre_access(struct inode *in, uint64_t off, uint64_t len,
		      struct front_req *req, bool *ret_held)
{
	struct fstate *fs = inode_state(in);
	uint64_t start, end, reserved = 0;
	bool waited = false, retried = false;
	struct event *ev;
	int res;

	*ret_held = false;
	if (!fs)
		return 0;
	elock();
	read_span(fs, off, len, &start, &end);
	for (;;) {
		res = access_step(in, fs, start, end, req, !waited, true, &reserved, &ev);
		if (res <= 0)
			break;
		waited = true;
		res = wait_event(ev, req);
		if (store_full_retry(res, &retried)) {
			res = make_room();
			if (!res)
				continue;
		}
		if (res)
			break;
	}
	if (!res)
		*ret_held = read_hold(fs, false);
	eunlock();
	if (reserved)
		cache_unreserve(reserved);
	drain_ready();
	return caller_errno(res);
}

int events_pre_modify(struct inode *in, uint64_t start, uint64_t end,
		      struct front_req *req)
{
	struct event *ev;
	int res;

	if (inode_flags(in) & INODE_QUIET)
		return 0;
	elock();
	res = start_perm(in, HSMFS_EV_PRE_MODIFY, start, end, req, &ev);
	if (res == 1)
		res = wait_event(ev, req);
	eunlock();
	drain_ready();
	return caller_errno(res);
}

/* Resume every parked read whose event ended.  Called without S.lock. */
void drain_ready(void)
{
	bool was;

	for (;;) {
		struct parked *p;

		elock();
		p = E.ready;
		if (p)
			E.ready = p->next;
		eunlock();
		if (!p)
			return;
		was = engine_thread;
		engine_thread = true;
		resume(p);
		engine_thread = was;
	}
}
