/* engine.c - see engine.h */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "cache.h"
#include "events.h"
#include "store.h"
#include "hooks.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "names.h"
#include "fault.h"
#include "ranges.h"
#include "engine.h"

static int64_t mono_ms(void);
static bool in_subtree(const struct hook *h, struct inode *in);
static void recompute_mask(void);
static void fill_proto(const struct event *ev, struct proto_event *pe,
		       char *path, size_t pathsize);
static void add_target(struct event *ev, struct hook *h, bool sent);
static void remove_target(struct event *ev, unsigned i);
static void send_to_watchers(struct event *ev);
static void dispatch(struct event *ev);
static void queue_add(struct event *ev);
static void queue_remove(struct event *ev);
static void redispatch_queue(void);
static void put_event(struct event *ev);
static void release_slot(struct event *ev);
static struct event *get_slot(void);
static void init_event(struct event *ev, uint32_t type, struct inode *in,
		       struct fuse_req *req);
static void expire(struct event *ev);
static int recently_failed(const struct fstate *fs, uint64_t start, uint64_t end,
			   struct fuse_req *req);
static void resend(struct event *ev);
static void *timer_main(void *arg);
static void abandoned(struct event *ev);
static int wait_event(struct event *ev, struct fuse_req *req);
static bool have_fill_hook(void);
static int caller_errno(int res);
static void read_span(const struct fstate *fs, uint64_t off, uint64_t len,
		      uint64_t *ret_start, uint64_t *ret_end);
static int access_step(struct inode *in, struct fstate *fs, uint64_t start, uint64_t end,
		       struct fuse_req *req, bool first, bool may_block,
		       uint64_t *reserved, struct event **ret_ev);
static int check_parked(struct parked *p, bool may_block);
static void finish_read(struct parked *p, int res);
static void room_queue(struct parked *p);
static void *roomer_main(void *arg);
static int read_park(struct inode *in, uint64_t off, uint64_t len, struct fuse_req *req,
		     int fd, void (*cont)(void *arg, int res), void *arg, bool *ret_held);
static void resume(struct parked *p);
/*
 * Set while a thread of the engine (a hook's connection, the timer, the
 * room thread) runs parked requests on: such a thread must never wait
 * for an event itself.
 */
static __thread bool engine_thread;
static unsigned share_of(uid_t uid);
static struct parked *park_take(struct fuse_req *req, int *res);
static void park_put(struct parked *p);
static int start_perm(struct inode *in, uint32_t type, uint64_t start, uint64_t end,
		      struct fuse_req *req, struct event **ret_ev);
static int park_perm(struct inode *in, uint32_t type, uint64_t start, uint64_t end,
		     struct fuse_req *req, void (*cont)(void *arg, int res), void *arg);
static void unpark_interrupted(struct event *ev);
static bool quiet_has(const struct hook *h, uint64_t ino);
static void quiet_put(uint64_t *tab, uint32_t cap, uint64_t ino);
static void quiet_add(struct hook *h, uint64_t ino);
static bool perm_target(const struct hook *h, struct inode *in, uint32_t type);
static struct event *find_event(uint64_t id);
static int deny_errno(uint32_t e);
static void answer_one(struct hook *h, const struct proto_answer *a);

struct engine E = { .lock = PTHREAD_MUTEX_INITIALIZER };
__thread bool elock_mine;
_Atomic uint32_t events_mask;

int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void mono_after(struct timespec *ts, double seconds)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)seconds;
	ts->tv_nsec += (long)((seconds - (time_t)seconds) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

bool mono_passed(const struct timespec *ts)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > ts->tv_sec ||
	       (now.tv_sec == ts->tv_sec && now.tv_nsec >= ts->tv_nsec);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int events_init(const struct events_config *cfg)
{
	pthread_condattr_t ca;
	unsigned i;
	uint64_t nctimes = 0;

	E.cfg = *cfg;
	/* a scan, once: is there a change time to show anywhere? */
	if (cfg->meta && !meta_count_ctimes(cfg->meta, &nctimes) && nctimes)
		atomic_store_explicit(&events_any_ctime, true, memory_order_relaxed);
	E.slots = calloc(cfg->max_pending, sizeof(*E.slots));
	if (!E.slots)
		return -ENOMEM;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	for (i = cfg->max_pending; i-- > 0;) {
		pthread_cond_init(&E.slots[i].cond, &ca);
		E.slots[i].stage_fd = -1;
		E.slots[i].free_next = E.free_list;
		E.free_list = &E.slots[i];
	}
	E.park_pool = calloc(cfg->max_pending, sizeof(*E.park_pool));
	if (!E.park_pool)
		return -ENOMEM;
	for (i = cfg->max_pending; i-- > 0;) {
		E.park_pool[i].next = E.park_free;
		E.park_free = &E.park_pool[i];
	}
	pthread_cond_init(&E.slot_cond, &ca);
	pthread_cond_init(&E.wcond, &ca);
	pthread_cond_init(&E.wdone, &ca);
	pthread_cond_init(&E.reads_done, &ca);
	pthread_cond_init(&E.copied, &ca);
	pthread_cond_init(&E.evicted, &ca);
	pthread_cond_init(&E.tcond, &ca);
	pthread_cond_init(&E.room_cond, &ca);
	pthread_cond_init(&E.commit_cond, &ca);
	pthread_condattr_destroy(&ca);
	E.room_tail = &E.room;
	E.commits_tail = &E.commits;
	inode_set_state_destructor(fstate_free);
	if (pthread_create(&E.writer, NULL, writer_main, NULL))
		return -EAGAIN;
	E.writer_running = true;
	if (pthread_create(&E.timer, NULL, timer_main, NULL))
		return -EAGAIN;
	E.timer_running = true;
	if (pthread_create(&E.roomer, NULL, roomer_main, NULL))
		return -EAGAIN;
	E.roomer_running = true;
	stage_refill();
	return dirs_init();
}

void events_shutdown(void)
{
	elock();
	/* nobody will answer now: pending events fail, parked reads get EIO */
	for (unsigned i = 0; E.slots && i < E.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		if ((ev->st == EV_SENT || ev->st == EV_QUEUED) && !ev->copying)
			complete(ev, -EIO);
	}
	eunlock();
	drain_ready();
	elock();
	E.stopping = true;
	pthread_cond_signal(&E.wcond);
	pthread_cond_signal(&E.tcond);
	pthread_cond_signal(&E.room_cond);
	eunlock();
	/* the timer first: what it ends may still go to the room thread */
	if (E.timer_running) {
		pthread_join(E.timer, NULL);
		E.timer_running = false;
	}
	drain_ready();
	if (E.roomer_running) {
		pthread_join(E.roomer, NULL);
		E.roomer_running = false;
	}
	drain_ready(); /* what the room thread's last checks ended */
	dirs_shutdown(); /* the listings allowed are committed first */
	drain_ready();
	if (E.writer_running) {
		pthread_join(E.writer, NULL);
		E.writer_running = false;
	}
	while (E.nstage)
		close(E.stage[--E.nstage]);
}

/* ----------------------------------------------------------- engine */

static bool in_subtree(const struct hook *h, struct inode *in)
{
	char path[HSMFS_MAX_PATH + 1];
	size_t n = strlen(h->subtree);

	if (!n)
		return true;
	if (inode_path(in, path, sizeof(path)) < 0)
		return false;
	return !strncmp(path, h->subtree, n) && (path[n] == '/' || !path[n]);
}

/*
 * The mask of the hooks connected now, then a new subscription
 * generation: opens that decided on the old ones decide again
 * (passthrough.h).  Before any WELCOME is sent.  E.lock held.
 */
static void recompute_mask(void)
{
	uint32_t m = 0;
	struct hook *h;

	ELOCK_HELD();
	for (h = E.hooks; h; h = h->next)
		m |= h->mask;
	atomic_store_explicit(&events_mask, m, memory_order_relaxed);
	if (E.cfg.subscriptions_changed)
		E.cfg.subscriptions_changed();
}

static void fill_proto(const struct event *ev, struct proto_event *pe,
		       char *path, size_t pathsize)
{
	int n = inode_path(ev->in, path, pathsize);
	const struct fstate *fs;

	memset(pe, 0, sizeof(*pe));
	pe->id = ev->id;
	pe->type = ev->type;
	pe->pid = ev->pid;
	pe->uid = ev->uid;
	pe->gid = ev->gid;
	pe->file_id = inode_ino(ev->in);
	pe->start = ev->start;
	pe->end = ev->end;
	pe->hint_start = ev->hint_start;
	pe->hint_end = ev->hint_end;
	pe->path.p = path;
	pe->path.len = n > 0 ? n : 0;
	if (ev->type == HSMFS_EV_PRE_LOOKUP && ev->name && pe->path.len < pathsize - 1) {
		/* the path of the name looked up: its directory's, and the name */
		int k = snprintf(path + pe->path.len, pathsize - pe->path.len, "%s%s",
				 pe->path.len ? "/" : "", ev->name);

		pe->path.len = k > 0 && (size_t)k < pathsize - pe->path.len ?
				       pe->path.len + k : pe->path.len;
	}
	if (ev->type == HSMFS_EV_PRE_DIR || ev->type == HSMFS_EV_PRE_LOOKUP) {
		if (ev->dir_origin) {
			pe->origin.p = ev->dir_origin;
			pe->origin.len = strlen(ev->dir_origin);
		}
		return;
	}
	/*
	 * PRE_MODIFY events carry the file's origin and version too; a fill
	 * is of the recorded version, whose size is the origin's
	 */
	fs = ev->fs ? ev->fs : inode_state(ev->in);
	if (fs) {
		pe->file_size = ev->type == HSMFS_EV_PRE_ACCESS ? fs->osize : fs->size;
		if (fs->origin) {
			pe->origin.p = fs->origin;
			pe->origin.len = strlen(fs->origin);
		}
		if (fs->version) {
			pe->version.p = fs->version;
			pe->version.len = strlen(fs->version);
		}
	}
}

/*
 * h must answer ev.  A hook whose socket could not take it (full: it
 * does not read) has not allowed: it stays a target, the timer sends
 * again, and the event is decided by its answer or the timeout.
 * E.lock held.
 */
static void add_target(struct event *ev, struct hook *h, bool sent)
{
	ELOCK_HELD();
	ev->unsent[ev->ntargets] = !sent;
	ev->targets[ev->ntargets++] = h;
}

static void remove_target(struct event *ev, unsigned i)
{
	ev->ntargets--;
	ev->targets[i] = ev->targets[ev->ntargets];
	ev->unsent[i] = ev->unsent[ev->ntargets];
}

/*
 * Send a new event to every watch hook that subscribed to its type; each
 * must allow it (the first deny wins).  E.lock held.
 */
static void send_to_watchers(struct event *ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	bool built = false;

	for (struct hook *h = E.hooks; h; h = h->next) {
		if (h->kind != HSMFS_KIND_WATCH || !(h->mask & HSMFS_MASK(ev->type)) ||
		    !in_subtree(h, ev->in) || ev->ntargets == HOOKS_MAX)
			continue;
		if (!built) {
			fill_proto(ev, &pe, path, sizeof(path));
			built = true;
		}
		add_target(ev, h, hooks_send_event(h, &pe, -1) == 0);
	}
}

/* Try to hand a queued fill (PRE_ACCESS, PRE_DIR, PRE_LOOKUP) to a fill hook.  E.lock held. */
static void dispatch(struct event *ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	struct hook *h, *start;

	if (!E.hooks)
		return;
	fill_proto(ev, &pe, path, sizeof(path));
	pe.flags = HSMFS_EVENT_HAS_FD;
	start = E.rr && E.rr->next ? E.rr->next : E.hooks;
	h = start;
	do {
		if (h->kind == HSMFS_KIND_FILL &&
		    (h->mask & HSMFS_MASK(ev->type)) &&
		    in_subtree(h, ev->in)) {
			/* every delivery writes into a staging file of its own */
			if (ev->stage_fd < 0) {
				int fd = open_stage(ev->fs ? ev->fs->size : 0);

				if (fd < 0) {
					log_err("cannot create a staging file for a fill: %s",
						strerror(-fd));
					return;
				}
				ev->stage_fd = fd;
			}
			if (hooks_send_event(h, &pe, ev->stage_fd) != 0)
				goto next;
			ev->hook = h;
			ev->st = EV_SENT;
			h->assigned++;
			E.rr = h;
			return;
		}
next:
		h = h->next ? h->next : E.hooks;
	} while (h != start);
}

static void queue_add(struct event *ev)
{
	struct event **pp = &E.queue;

	while (*pp)
		pp = &(*pp)->qnext;
	ev->qnext = NULL;
	*pp = ev;
}

static void queue_remove(struct event *ev)
{
	struct event **pp;

	for (pp = &E.queue; *pp; pp = &(*pp)->qnext)
		if (*pp == ev) {
			*pp = ev->qnext;
			break;
		}
	ev->qnext = NULL;
}

static void redispatch_queue(void)
{
	struct event *ev, *next;

	for (ev = E.queue; ev; ev = next) {
		next = ev->qnext;
		dispatch(ev);
		if (ev->st == EV_SENT)
			queue_remove(ev);
	}
}

/* Finish an event: nobody may send it again, waiters wake.  E.lock held. */
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
	/* the rest of its chunk, now that the read that needed it is served
	 * (before it leaves the file's events: their descriptor stays) */
	if (!result && ev->side_hi && ev->fs && !E.stopping) {
		fill_ahead(ev->in, ev->fs, ev->hint_end, ev->side_hi, NULL, 1, &E.st.beside,
			   NULL, false);
		if (ev->side_lo < ev->hint_start)
			fill_ahead(ev->in, ev->fs, ev->side_lo, ev->hint_start, NULL, 1,
				   &E.st.beside, NULL, false);
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
	assert(!ev->copying);
	if (ev->stage_fd >= 0) {
		close(ev->stage_fd); /* what a late hook writes goes nowhere */
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
		E.st.timeouts++;
	else if (result == -EINTR)
		E.st.interrupted++;
	else if (result && result != -ECANCELED) /* cancel_window() counts its own */
		E.st.denied++;
	ev->st = EV_DONE;
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

/* Release ev's slot once it is done and nobody holds it.  E.lock held. */
static void put_event(struct event *ev)
{
	ELOCK_HELD();
	if (ev->st == EV_DONE && !ev->waiters)
		release_slot(ev);
}

/*
 * Take a reference on ev for a waiter; a readahead's first waiter gets
 * the whole timeout from now.  E.lock held.
 */
void hold_event(struct event *ev)
{
	ELOCK_HELD();
	if (!ev->waiters++ && ev->detached)
		mono_after(&ev->deadline, E.cfg.timeout);
}

static void release_slot(struct event *ev)
{
	if (ev->type == HSMFS_EV_PRE_DIR || ev->type == HSMFS_EV_PRE_LOOKUP)
		names_plan_end(ev->names_plan);
	ev->names_plan = 0;
	inode_release(ev->in);
	ev->in = NULL;
	ev->fs = NULL;
	ev->id = 0;
	ev->st = EV_FREE;
	ev->free_next = E.free_list;
	E.free_list = ev;
	pthread_cond_signal(&E.slot_cond);
}

/* Take a free slot, waiting for one until the timeout.  E.lock held. */
static struct event *get_slot(void)
{
	ELOCK_HELD();
	struct timespec deadline;

	mono_after(&deadline, E.cfg.timeout);
	while (!E.free_list) {
		if (pthread_cond_timedwait(&E.slot_cond, &E.lock, &deadline) ==
		    ETIMEDOUT && !E.free_list)
			return NULL;
	}
	struct event *ev = E.free_list;

	E.free_list = ev->free_next;
	return ev;
}

static void init_event(struct event *ev, uint32_t type, struct inode *in,
		       struct fuse_req *req)
{
	const struct fuse_ctx *ctx = req ? fuse_req_ctx(req) : NULL;

	ev->id = (++E.seq << SLOT_BITS) | (uint64_t)(ev - E.slots);
	ev->type = type;
	ev->st = EV_QUEUED;
	ev->in = in;
	inode_ref(in);
	ev->fs = NULL;
	ev->hook = NULL;
	ev->ntargets = 0;
	ev->filled = false;
	ev->detached = false;
	ev->stream = false;
	ev->side_lo = ev->side_hi = 0;
	ev->dir_origin = NULL;
	ev->name = NULL;
	ev->refresh = false;
	ev->result = 0;
	ev->waiters = 0;
	ev->parked = NULL;
	ev->progress = 0;
	ev->pid = ctx ? ctx->pid : 0;
	ev->uid = ctx ? ctx->uid : 0;
	ev->gid = ctx ? ctx->gid : 0;
	ev->fnext = ev->qnext = NULL;
	ev->reserved = 0;
	mono_after(&ev->deadline, E.cfg.timeout);
	clock_gettime(CLOCK_MONOTONIC, &ev->born);
	if (type == HSMFS_EV_PRE_ACCESS)
		E.st.pre_access++;
	else if (type == HSMFS_EV_PRE_MODIFY)
		E.st.pre_modify++;
	else if (type == HSMFS_EV_OPEN_PERM)
		E.st.open_perm++;
	else if (type == HSMFS_EV_PRE_DIR)
		E.st.pre_dir++;
	else if (type == HSMFS_EV_PRE_LOOKUP)
		E.st.pre_lookup++;
	else
		E.st.access_perm++;
}

/* Every hook that has ev (its fill hook, the watchers sent it) gets a CANCEL.  E.lock held. */
static void send_cancel(struct event *ev, uint32_t reason)
{
	ELOCK_HELD();
	if (ev->hook)
		hooks_send_cancel(ev->hook, ev->id, reason);
	for (unsigned i = 0; i < ev->ntargets; i++)
		if (ev->targets[i] && !ev->unsent[i])
			hooks_send_cancel(ev->targets[i], ev->id, reason);
}

/* ev ran out of time: every hook that had it gets a CANCEL, the event fails.  E.lock held. */
static void expire(struct event *ev)
{
	ELOCK_HELD();
	send_cancel(ev, HSMFS_CANCEL_TIMEOUT);
	log_warn("event %llu (%s) timed out%s", (unsigned long long)ev->id,
		 ev->type == HSMFS_EV_PRE_ACCESS ? "PRE_ACCESS" :
		 ev->type == HSMFS_EV_PRE_MODIFY ? "PRE_MODIFY" :
		 ev->type == HSMFS_EV_OPEN_PERM ? "OPEN_PERM" :
		 ev->type == HSMFS_EV_PRE_DIR ? "PRE_DIR" :
		 ev->type == HSMFS_EV_PRE_LOOKUP ? "PRE_LOOKUP" : "ACCESS_PERM",
		 ev->detached ? " (readahead)" : "");
	complete(ev, EV_TIMEOUT);
}

/*
 * Did a fill of [start, end) of fs for the same thread fail a moment
 * ago (timed out, or the hook failed it with EIO or ETIMEDOUT: the
 * origin failed; a policy's deny is asked again), with no hook joined
 * since?
 * That is the kernel reading a failed readahead page once more for the
 * same read(2): asking again would wait the timeout twice, or run the
 * hook's retry policy twice.  It fails at once with the same error.
 * Another thread's read (a user's retry) asks again.  E.lock held.
 */
static int recently_failed(const struct fstate *fs, uint64_t start, uint64_t end,
			   struct fuse_req *req)
{
	ELOCK_HELD();
	const struct fuse_ctx *ctx = req ? fuse_req_ctx(req) : NULL;

	if (fs->to_at && ctx && ctx->pid == fs->to_pid && start < fs->to_hi &&
	    fs->to_lo < end && fs->to_joins == E.joins &&
	    mono_ms() - fs->to_at < RETRY_FAIL_MS)
		return fs->to_err;
	return 0;
}

/* Send again what a full socket refused.  E.lock held. */
static void resend(struct event *ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	bool built = false;

	for (unsigned i = 0; i < ev->ntargets; i++) {
		if (!ev->targets[i] || !ev->unsent[i])
			continue;
		if (!built) {
			fill_proto(ev, &pe, path, sizeof(path));
			built = true;
		}
		if (hooks_send_event(ev->targets[i], &pe, -1) == 0)
			ev->unsent[i] = false;
	}
}

/*
 * A sequential reader's window (fill_ahead() from readahead.c, up to 32
 * MiB) is the reader's: when the file's last open has been closed for
 * CLOSED_AHEAD_MS (a reopen for the next request keeps it), its fills
 * that nobody waits for and the fill hook has not finished are
 * cancelled (CANCEL reason CLOSED), so that a reader that stopped does
 * not leave its window on the link.  The rest of a read's chunk
 * (first_fill) and the mount's prefetch of the file are a chunk or
 * less, and go on; so does a fill whose hook has allowed (it waits for
 * watchers, then commits) or one being committed.  A later reader asks
 * again for what is missing.  E.lock held.
 */
void ahead_closed(struct fstate *fs, bool closed)
{
	ELOCK_HELD();
	fs->closed_at = closed ? mono_ms() : 0;
}

/*
 * From the timer: is ev of a window left CLOSED_AHEAD_MS ago?  A stream
 * event is detached from its start; closed_at is 0 while the file is
 * open (an open that has counted itself but not yet cleared it may lose
 * its window: it asks again).  E.lock held.
 */
static bool window_left(const struct event *ev, int64_t now)
{
	ELOCK_HELD();
	return ev->stream && ev->fs->closed_at && now - ev->fs->closed_at >= CLOSED_AHEAD_MS &&
	       !ev->waiters && !ev->copying && !ev->filled;
}

static void cancel_window(struct event *ev)
{
	ELOCK_HELD();
	send_cancel(ev, HSMFS_CANCEL_CLOSED);
	E.st.closed_ahead++;
	complete(ev, -ECANCELED);
}

/*
 * The engine's clock: every TICK_MS it times out events nobody waits
 * for (readahead) as well as those waited for, sends again what full
 * sockets refused, and offers queued fills to the fill hooks again.
 */
static void *timer_main(void *arg)
{
	struct timespec ts;
	bool exiting;
	int64_t now;

	elock();
	while (!E.stopping) {
		mono_after(&ts, TICK_MS / 1000.0);
		pthread_cond_timedwait(&E.tcond, &E.lock, &ts);
		if (E.stopping)
			break;
		/* unmounted: nobody reads the answers; every wait ends now */
		exiting = E.cfg.exiting && E.cfg.exiting();
		now = mono_ms();
		for (unsigned i = 0; i < E.cfg.max_pending; i++) {
			struct event *ev = &E.slots[i];

			if (ev->st != EV_SENT && ev->st != EV_QUEUED)
				continue;
			if (exiting && !ev->copying) {
				complete(ev, -EIO);
				continue;
			}
			if (!ev->copying && mono_passed(&ev->deadline)) {
				expire(ev);
				continue;
			}
			if (window_left(ev, now)) {
				cancel_window(ev);
				continue;
			}
			resend(ev);
			if (ev->parked) {
				ev->waiters++; /* not released while we look */
				unpark_interrupted(ev);
				ev->waiters--;
				put_event(ev);
			}
		}
		if (E.queue)
			redispatch_queue();
		if (E.ready || E.nstage < STAGE_POOL / 2) {
			eunlock();
			drain_ready();
			stage_refill();
			elock();
		}
	}
	eunlock();
	return NULL;
}

/*
 * A waiter of ev left (interrupted): with nobody else waiting, the
 * event is cancelled unless it is a readahead or being committed.
 * The caller puts its reference.  E.lock held.
 */
static void abandoned(struct event *ev)
{
	ELOCK_HELD();
	if (ev->waiters || ev->st == EV_DONE || ev->detached || ev->copying)
		return;
	send_cancel(ev, HSMFS_CANCEL_INTERRUPTED);
	ev->waiters++; /* complete() must not release it under us */
	complete(ev, -EINTR);
	ev->waiters--;
}

/*
 * Wait for ev to finish, with a reference the caller took (hold_event,
 * or start_fill's); the reference is dropped.  E.lock held.  Returns
 * the event's result, or -EINTR.
 */
static int wait_event(struct event *ev, struct fuse_req *req)
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
		pthread_cond_timedwait(&ev->cond, &E.lock, &tick);
		if (ev->st == EV_DONE)
			break;
		if (req && fuse_req_interrupted(req)) {
			res = -EINTR;
			break;
		}
		if (mono_passed(&ev->deadline) && !ev->copying)
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

static bool have_fill_hook(void)
{
	for (struct hook *h = E.hooks; h; h = h->next)
		if (h->kind == HSMFS_KIND_FILL)
			return true;
	return false;
}

/* Map an internal failure to what the caller of read/write sees. */
static int caller_errno(int res)
{
	return res == EV_TIMEOUT ? -EIO : res;
}

/*
 * Start a fill of [start, end) with hint [hs, he).  A detached event (a
 * readahead) is started only if a slot is free now, and nobody waits for
 * it unless a reader comes to need its bytes.  Returns the event, or
 * NULL (with *res set unless detached).  E.lock held.
 */
struct event *start_fill(struct inode *in, struct fstate *fs, uint64_t start,
				uint64_t end, uint64_t hs, uint64_t he,
				struct fuse_req *req, bool detached, uint64_t reserved,
				int *res)
{
	ELOCK_HELD();
	struct event *ev;
	int sfd;

	if (detached) {
		ev = E.free_list;
		if (!ev)
			return NULL;
		E.free_list = ev->free_next;
	} else if (!(ev = get_slot())) {
		*res = -EIO;
		log_warn("no free event slot within the timeout (max_pending=%u)",
			 E.cfg.max_pending);
		return NULL;
	}
	init_event(ev, HSMFS_EV_PRE_ACCESS, in, req);
	E.st.misses++;
	ev->fs = fs;
	ev->start = start;
	ev->end = end;
	ev->hint_start = hs;
	ev->hint_end = he;
	/* one descriptor for all the file's events, not an open(2) each */
	if (fs->rw_fd < 0) {
		sfd = open_store(in, O_RDWR);
		if (sfd < 0) {
			if (!detached)
				*res = sfd;
			complete(ev, sfd); /* nobody holds it: released */
			return NULL;
		}
		fs->rw_fd = sfd;
	}
	sfd = fs->rw_fd;
	ev->detached = detached;
	if (!detached)
		ev->waiters = 1; /* the caller's reference, for wait_event() */
	ev->reserved = reserved; /* from here on the event gives it back */
	ev->fnext = fs->inflight;
	fs->inflight = ev;
	send_to_watchers(ev);
	dispatch(ev);
	if (ev->st == EV_QUEUED)
		queue_add(ev);
	return ev;
}

/* The page-aligned span of a read of [off, off + len), within the file. */
static void read_span(const struct fstate *fs, uint64_t off, uint64_t len,
		      uint64_t *ret_start, uint64_t *ret_end)
{
	uint64_t end = off + len > fs->size ? fs->size : (off + len + PAGE - 1) & ~(PAGE - 1);

	*ret_start = off & ~(PAGE - 1);
	*ret_end = end > fs->size ? fs->size : end;
}

/*
 * One step of a read's check of [start, end): 0 when all of it is
 * present, -errno to fail, 1 with a reference on *ret_ev (hold_event or
 * start_fill's) when the read must wait for that event: one already
 * fetching some of the bytes, or a new one.  first: the read's first
 * step (a hit is counted, readahead driven).  On mounts with cache
 * limits a new fill is admitted first; *reserved is what was admitted
 * and not yet handed to an event.  With may_block, admission drops
 * E.lock and waits for room; without, a fill that does not fit now
 * returns 2 (the evictor is asked to make room; the room thread waits
 * for it).  E.lock held.
 */
static int access_step(struct inode *in, struct fstate *fs, uint64_t start, uint64_t end,
		       struct fuse_req *req, bool first, bool may_block,
		       uint64_t *reserved, struct event **ret_ev)
{
	ELOCK_HELD();
	for (;;) {
		struct range miss, gap;
		struct event *ev;
		uint64_t asked_end;
		int res = 0;

		evict_wait(fs); /* its present ranges are being changed */
		if (fs->flags & META_F_STALE)
			return -EIO;
		if (start >= end || !rs_missing(&fs->present, start, end, &miss, 1)) {
			if (first) {
				E.st.hits++;
				fs->ra_seen = end;
			}
			return 0;
		}
		/*
		 * Wait for an event whose hint covers any of this: its hook is
		 * most likely fetching those bytes already.  What it does not
		 * fill is asked for again on the next step.
		 */
		ev = inflight_over(fs, miss.start, miss.end);
		asked_end = 0;
		if (ev) {
			hold_event(ev);
		} else {
			uint64_t hs, he, hint_start, hint_end, need, gap_start, gap_end, ff;
			bool beside;

			if (!have_fill_hook() && E.cfg.nohook_fail)
				return -EIO;
			res = recently_failed(fs, miss.start, miss.end, req);
			if (res)
				return res;
			/* hint: the chunk-aligned span, within the same gap */
			hs = miss.start & ~(E.cfg.chunk - 1);
			he = (miss.end + E.cfg.chunk - 1) & ~(E.cfg.chunk - 1);
			if (he > fs->size)
				he = fs->size;
			hint_start = miss.start;
			hint_end = miss.end;
			for (uint64_t pos = hs;
			     pos < he && rs_missing(&fs->present, pos, he, &gap, 1);
			     pos = gap.end) {
				if (gap.start <= miss.start && gap.end >= miss.end) {
					hint_start = gap.start;
					hint_end = gap.end;
					break;
				}
			}
			/* and apart from what other events fetch */
			inflight_clip(fs, miss.start, miss.end, &hint_start, &hint_end);
			/*
			 * The first miss in a chunk nothing of which is there
			 * or coming, not in a stream, asks first_fill bytes
			 * from its own start (its bytes come first, and a
			 * hook's FILLED lets it go before the rest are in);
			 * the rest of the chunk is asked beside it in events
			 * of its own that it does not wait for: a random read
			 * waits a round trip, not also the chunk's transfer,
			 * and the chunk still comes whole for the reads that
			 * follow.  At the file's start (cat, cp, tar: the
			 * reader goes on at once) the rest is asked now;
			 * elsewhere once this fill is done (complete()), so
			 * that it does not share the link with it.  A reader
			 * going on has its gap asked whole.
			 */
			gap_start = hint_start;
			gap_end = hint_end;
			beside = false;
			ff = E.cfg.first_fill;
			if (first && ff && hint_end - hint_start > 2 * ff && hint_start == hs &&
			    hint_end == he &&
			    !in_stream(fs, miss.start) &&
			    !(miss.start >= PAGE &&
			      (rs_contains(&fs->present, miss.start - PAGE, miss.start) ||
			       inflight_over(fs, miss.start - PAGE, miss.start)))) {
				hs = miss.start;
				he = miss.start + ((miss.end - miss.start + ff - 1) & ~(ff - 1));
				if (hs > hint_start)
					hint_start = hs;
				if (he < hint_end)
					hint_end = he;
				beside = true;
			}
			/* admission: room for the fill before it may write */
			need = ((hint_end + PAGE - 1) & ~(PAGE - 1)) - (hint_start & ~(PAGE - 1));
			if (E.cfg.cache_limited && *reserved < need && !may_block) {
				/* the cache's lock comes after E.lock */
				if (cache_try_admit(need))
					return 2;
				if (*reserved)
					cache_unreserve(*reserved);
				*reserved = need;
			}
			if (E.cfg.cache_limited && *reserved < need) {
				struct timespec deadline;

				mono_after(&deadline, E.cfg.timeout);
				eunlock();
				if (*reserved)
					cache_unreserve(*reserved);
				*reserved = 0;
				res = cache_admit(need, &deadline);
				elock();
				if (res)
					return res;
				*reserved = need;
				continue; /* the world may have changed meanwhile */
			}
			ev = start_fill(in, fs, miss.start, miss.end, hint_start, hint_end,
					req, false, *reserved, &res);
			if (!ev)
				return res;
			*reserved = 0;
			if (beside && hint_start == 0) {
				if (fill_ahead(in, fs, hint_end, gap_end, req, 1, &E.st.beside,
					       NULL, false) > hint_end)
					asked_end = gap_end;
			} else if (beside) {
				ev->side_lo = gap_start;
				ev->side_hi = gap_end;
				asked_end = gap_end;
			}
		}
		if (first) {
			if (ev->hint_end > asked_end)
				asked_end = ev->hint_end;
			read_ahead(in, fs, &miss, asked_end, req);
			fs->ra_seen = end;
			/* what an eviction of the open file must leave alone */
			fs->hot_lo = miss.start & ~(E.cfg.chunk - 1);
			fs->hot_hi = asked_end > fs->ra_ahead ? asked_end : fs->ra_ahead;
		}
		*ret_ev = ev;
		return 1;
	}
}

int events_pre_access(struct inode *in, uint64_t off, uint64_t len,
		      struct fuse_req *req, bool *ret_held)
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
		if (res == -ENOSPC && !retried) {
			/* the store is full: evict, then try once more */
			retried = true;
			eunlock();
			res = cache_make_room(E.cfg.chunk);
			elock();
			if (!res)
				continue;
			res = -ENOSPC;
		}
		if (res)
			break;
	}
	if (!res && tracked(fs)) {
		fs->nreading++; /* until events_read_done() */
		*ret_held = true;
	}
	eunlock();
	if (reserved)
		cache_unreserve(reserved);
	drain_ready();
	return caller_errno(res);
}

int events_read(struct inode *in, uint64_t off, uint64_t len, struct fuse_req *req,
		int fd, bool *ret_held)
{
	if (!E.cfg.reply)
		return events_pre_access(in, off, len, req, ret_held);
	return read_park(in, off, len, req, fd, NULL, NULL, ret_held);
}

int events_read_check(struct inode *in, uint64_t off, uint64_t len, struct fuse_req *req,
		      void (*cont)(void *arg, int res), void *arg, bool *ret_held)
{
	return read_park(in, off, len, req, -1, cont, arg, ret_held);
}

/*
 * The first check of a read (cont NULL) or a check (cont set), from a
 * FUSE worker: answered now, or parked on the event it waits for or on
 * the room thread's queue.  With no parking place free it waits here.
 */
static int read_park(struct inode *in, uint64_t off, uint64_t len, struct fuse_req *req,
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
		if (!res && tracked(fs)) {
			fs->nreading++; /* until events_read_done() */
			*ret_held = true;
		}
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
			return res; /* the user's bound; the fill goes on */
		if (engine_thread)
			return -EAGAIN; /* see engine_thread */
		/* every parking place taken: wait in this thread, as before */
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
 * the read hold taken that finish_read() gives back).  E.lock held;
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
	if (!res && (p->check || tracked(fs))) {
		fs->nreading++; /* given back by finish_read() or the check's cont */
		p->held = true;
	}
	return res;
}

/* A parked read or check ends with res.  Called without E.lock. */
static void finish_read(struct parked *p, int res)
{
	if (p->reserved) {
		cache_unreserve(p->reserved);
		p->reserved = 0;
	}
	if (p->check) {
		p->cont(p->arg, caller_errno(res)); /* res 0: gives the hold back */
	} else {
		E.cfg.reply(p->req, p->in, p->fd, p->off, p->len, caller_errno(res));
		if (p->held)
			events_read_done(p->in);
	}
	inode_release(p->in);
	elock();
	park_put(p);
	eunlock();
}

/* Hand p to the room thread.  E.lock held. */
static void room_queue(struct parked *p)
{
	ELOCK_HELD();
	p->next = NULL;
	*E.room_tail = p;
	E.room_tail = &p->next;
	pthread_cond_signal(&E.room_cond);
}

/*
 * The room thread: the one place a parked read waits for the evictor
 * (admission under cache_max/cache_min_free, and a round of eviction
 * after ENOSPC), one read at a time, each within the mount's timeout.
 * Hooks' answers and every other request go on meanwhile.
 */
static void *roomer_main(void *arg)
{
	(void)arg;
	engine_thread = true;
	elock();
	for (;;) {
		struct parked *p = E.room;
		int res = 0;

		if (!p) {
			if (E.stopping)
				break;
			pthread_cond_wait(&E.room_cond, &E.lock);
			continue;
		}
		E.room = p->next;
		if (!E.room)
			E.room_tail = &E.room;
		if (E.stopping || (E.cfg.exiting && E.cfg.exiting())) {
			res = -EIO; /* unmounted: nobody reads the answer */
		} else if (p->make_room) {
			p->make_room = false;
			eunlock();
			res = cache_make_room(E.cfg.chunk) ? -ENOSPC : 0;
			elock();
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

/* Drop a reference to ev taken for a wait that will not happen.  E.lock held. */
void put_ref(struct event *ev)
{
	ELOCK_HELD();
	ev->waiters--;
	put_event(ev);
}

static unsigned share_of(uid_t uid)
{
	return (unsigned)(((uint64_t)uid * 0x9E3779B97F4A7C15ULL) >> 58) % USER_SHARES;
}

/*
 * A parking place for req: NULL with *res 0 when the pool is empty (the
 * caller waits in its thread), NULL with -EAGAIN when req's user is at
 * its bound (cfg.max_parked_user), logged at most once a minute.
 * E.lock held.
 */
static struct parked *park_take(struct fuse_req *req, int *res)
{
	ELOCK_HELD();
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	unsigned share = share_of(ctx ? ctx->uid : 0);
	struct parked *p;

	*res = 0;
	if (E.cfg.max_parked_user && E.parked_by[share] >= E.cfg.max_parked_user) {
		int64_t now = mono_ms();

		E.st.over_bound++;
		if (!E.share_warned || now - E.share_warned >= 60000) {
			E.share_warned = now;
			log_warn("user %u has %u requests waiting for hooks "
				 "(max_pending_user=%u): failing more with EAGAIN",
				 ctx ? (unsigned)ctx->uid : 0, E.parked_by[share],
				 E.cfg.max_parked_user);
		}
		*res = -EAGAIN;
		return NULL;
	}
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

/* Give p back (its inode released by the caller).  E.lock held. */
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
 * answered.  Called without E.lock.
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
	if (!res && E.stopping)
		res = -EIO; /* shutting down: nobody checks it again */
	if (res == -ENOSPC && !p->retried) {
		/* the store is full: the room thread evicts, then checks again */
		p->retried = true;
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

/* Resume every parked read whose event ended.  Called without E.lock. */
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

/*
 * Parked reads whose caller was interrupted leave their event (the
 * event is cancelled if nobody else waits).  E.lock held.
 */
static void unpark_interrupted(struct event *ev)
{
	ELOCK_HELD();
	struct parked **pp = &ev->parked;

	while (*pp) {
		struct parked *p = *pp;

		if (!fuse_req_interrupted(p->req)) {
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

void events_read_done(struct inode *in)
{
	struct fstate *fs = inode_state(in);

	elock();
	if (fs && fs->nreading && !--fs->nreading)
		pthread_cond_broadcast(&E.reads_done);
	eunlock();
}

/*
 * QUIET is kept per hook: a set of store inode numbers, open addressing
 * (0 = empty slot), grown at half full up to HOOK_QUIET_MAX, past which
 * a QUIET is not kept (the hook gets more events, never fewer than it
 * should).  E.lock held.
 */
static bool quiet_has(const struct hook *h, uint64_t ino)
{
	ELOCK_HELD();
	if (!h->quiet || !ino)
		return false;
	for (uint32_t i = (uint32_t)(ino * 0x9E3779B97F4A7C15ULL >> 32) & (h->quiet_cap - 1);;
	     i = (i + 1) & (h->quiet_cap - 1)) {
		if (h->quiet[i] == ino)
			return true;
		if (!h->quiet[i])
			return false;
	}
}

static void quiet_put(uint64_t *tab, uint32_t cap, uint64_t ino)
{
	uint32_t i = (uint32_t)(ino * 0x9E3779B97F4A7C15ULL >> 32) & (cap - 1);

	while (tab[i] && tab[i] != ino)
		i = (i + 1) & (cap - 1);
	tab[i] = ino;
}

static void quiet_add(struct hook *h, uint64_t ino)
{
	if (!ino || quiet_has(h, ino))
		return;
	if ((h->nquiet + 1) * 2 > h->quiet_cap) {
		uint32_t cap = h->quiet_cap ? h->quiet_cap * 2 : 64;
		uint64_t *tab;

		if (h->nquiet >= HOOK_QUIET_MAX || !(tab = calloc(cap, sizeof(*tab))))
			return;
		for (uint32_t i = 0; i < h->quiet_cap; i++)
			if (h->quiet[i])
				quiet_put(tab, cap, h->quiet[i]);
		free(h->quiet);
		h->quiet = tab;
		h->quiet_cap = cap;
	}
	quiet_put(h->quiet, h->quiet_cap, ino);
	h->nquiet++;
}

/* Must h answer a permission event of type of in?  E.lock held. */
static bool perm_target(const struct hook *h, struct inode *in, uint32_t type)
{
	ELOCK_HELD();
	return (h->mask & HSMFS_MASK(type)) && in_subtree(h, in) &&
	       (type != HSMFS_EV_PRE_MODIFY || !quiet_has(h, inode_ino(in)));
}

/*
 * Start a permission event (PRE_MODIFY of [start, end), or OPEN_PERM
 * with the open flags in start) of in: 0 (no hook must answer), 1 with
 * *ret_ev (one reference, the caller's), or -errno.  Every hook
 * subscribed must answer.  E.lock held.
 */
static int start_perm(struct inode *in, uint32_t type, uint64_t start, uint64_t end,
		      struct fuse_req *req, struct event **ret_ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	struct event *ev;
	struct hook *h;

	for (h = E.hooks; h; h = h->next)
		if (perm_target(h, in, type))
			break;
	if (!h) {
		/* every hook that watches it quieted it: the fast path may skip */
		if (type == HSMFS_EV_PRE_MODIFY)
			inode_flags_set(in, INODE_QUIET);
		return 0;
	}
	ev = get_slot();
	if (!ev)
		return -EIO;
	init_event(ev, type, in, req);
	ev->waiters = 1; /* the caller's */
	ev->fs = NULL;
	ev->start = start;
	ev->end = end;
	ev->hint_start = start;
	ev->hint_end = end;
	fill_proto(ev, &pe, path, sizeof(path));
	for (h = E.hooks; h; h = h->next)
		if (perm_target(h, in, type))
			add_target(ev, h, hooks_send_event(h, &pe, -1) == 0);
	ev->st = EV_SENT;
	if (!ev->ntargets)
		complete(ev, 0);
	*ret_ev = ev;
	return 1;
}

int events_pre_modify(struct inode *in, uint64_t start, uint64_t end,
		      struct fuse_req *req)
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

int events_modify(struct inode *in, uint64_t start, uint64_t end, struct fuse_req *req,
		  void (*cont)(void *arg, int res), void *arg)
{
	if (inode_flags(in) & INODE_QUIET)
		return 0;
	return park_perm(in, HSMFS_EV_PRE_MODIFY, start, end, req, cont, arg);
}

int events_open_perm(struct inode *in, int flags, struct fuse_req *req,
		     void (*cont)(void *arg, int res), void *arg)
{
	return park_perm(in, HSMFS_EV_OPEN_PERM, (uint64_t)(unsigned)flags, 0, req, cont, arg);
}

uint64_t events_prefetch(struct inode *in, uint64_t max_bytes)
{
	uint64_t asked = 0, limit;
	struct fstate *fs;

	elock();
	fs = inode_state(in);
	if (!fs || !have_fill_hook() || (fs->flags & META_F_STALE)) {
		eunlock();
		return 0;
	}
	/* a larger file: what its reader's first read waits for (first_fill) */
	limit = fs->size;
	if (limit > max_bytes)
		limit = E.cfg.first_fill && E.cfg.first_fill < max_bytes ? E.cfg.first_fill :
									 max_bytes;
	fill_ahead(in, fs, 0, limit, NULL, UINT_MAX, &E.st.readahead, &asked, false);
	eunlock();
	return asked;
}

int events_access_perm(struct inode *in, uint64_t start, uint64_t end, struct fuse_req *req,
		       void (*cont)(void *arg, int res), void *arg)
{
	return park_perm(in, HSMFS_EV_ACCESS_PERM, start, end, req, cont, arg);
}

bool events_access_target(struct inode *in)
{
	bool yes = false;

	elock();
	for (struct hook *h = E.hooks; h && !yes; h = h->next)
		yes = perm_target(h, in, HSMFS_EV_ACCESS_PERM);
	eunlock();
	return yes;
}

/*
 * Park req on ev, whose reference the caller holds (it goes to the
 * parked request): EVENTS_PARKED, or the event's result when it is
 * decided already or no parking place is free (waited for here, as
 * before), or -EAGAIN.  cont(arg, res) is called once ev ends.
 * E.lock held.
 */
int park_on(struct event *ev, struct inode *in, struct fuse_req *req,
	    void (*cont)(void *arg, int res), void *arg)
{
	ELOCK_HELD();
	struct parked *p;
	int res;

	if (ev->st == EV_DONE)
		return wait_event(ev, req); /* decided already (nobody to ask) */
	p = park_take(req, &res);
	if (!p && !res && engine_thread) {
		/* an engine thread waiting could hold up the answer */
		put_ref(ev);
		return -EAGAIN;
	}
	if (!p) {
		if (!res) /* no parking place: wait here, as before */
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
		     struct fuse_req *req, void (*cont)(void *arg, int res), void *arg)
{
	struct event *ev;
	int res;

	elock();
	res = start_perm(in, type, start, end, req, &ev);
	if (res == 1)
		res = park_on(ev, in, req, cont, arg);
	eunlock();
	if (res == EVENTS_PARKED)
		return res;
	drain_ready();
	return caller_errno(res);
}

static bool have_dir_hook(void)
{
	for (struct hook *h = E.hooks; h; h = h->next)
		if (h->kind == HSMFS_KIND_FILL && (h->mask & HSMFS_MASK(HSMFS_EV_PRE_DIR)))
			return true;
	return false;
}

bool have_lookup_hook(void)
{
	ELOCK_HELD();
	for (struct hook *h = E.hooks; h; h = h->next)
		if (h->kind == HSMFS_KIND_FILL && (h->mask & HSMFS_MASK(HSMFS_EV_PRE_LOOKUP)))
			return true;
	return false;
}

/* PRE_DIR, or PRE_LOOKUP of name (owned, given to the event). */
static int start_dir_event(uint32_t type, struct inode *dir, char *origin, char *name,
			   struct fuse_req *req, struct event **ret_ev)
{
	ELOCK_HELD();
	struct event *ev;

	if (E.cfg.nohook_fail && !have_dir_hook()) {
		free(origin);
		free(name);
		return -EIO;
	}
	ev = get_slot();
	if (!ev) {
		free(origin);
		free(name);
		log_warn("no free event slot within the timeout (max_pending=%u)",
			 E.cfg.max_pending);
		return -EIO;
	}
	init_event(ev, type, dir, req);
	/* a name changed through the mount from here on is the user's */
	ev->names_plan = names_plan_begin();
	ev->dir_origin = origin;
	ev->name = name;
	ev->start = ev->end = ev->hint_start = ev->hint_end = 0;
	ev->waiters = 1; /* the caller's */
	send_to_watchers(ev);
	dispatch(ev);
	if (ev->st == EV_QUEUED)
		queue_add(ev);
	*ret_ev = ev;
	return 0;
}

int start_listing(struct inode *dir, char *origin, struct fuse_req *req,
		  struct event **ret_ev)
{
	return start_dir_event(HSMFS_EV_PRE_DIR, dir, origin, NULL, req, ret_ev);
}

int start_lookup(struct inode *dir, char *origin, char *name, struct fuse_req *req,
		 struct event **ret_ev)
{
	return start_dir_event(HSMFS_EV_PRE_LOOKUP, dir, origin, name, req, ret_ev);
}

/* ------------------------------------------------------------ hooks */

int events_hook_joined(struct hook *h, const uint8_t *welcome, int len)
{
	elock();
	/*
	 * In place before WELCOME: the mask the fast paths test and the
	 * quieted files, so an operation that follows WELCOME sees the hook.
	 * Every send to a hook runs under E.lock: WELCOME is still its first
	 * frame.
	 */
	h->next = E.hooks;
	E.hooks = h;
	recompute_mask();
	/* a new watcher of changes has quieted nothing yet */
	if (h->mask & HSMFS_MASK(HSMFS_EV_PRE_MODIFY))
		inode_flags_clear_all(INODE_QUIET);
	/*
	 * A new watcher of reads: what the kernel cached is dropped, so
	 * that reads of files open already come here and are asked too
	 * (each read of a watched file drops what it cached from now on:
	 * ops_read_reply)
	 */
	if ((h->mask & HSMFS_MASK(HSMFS_EV_ACCESS_PERM)) && E.cfg.invalidate_files_later)
		E.cfg.invalidate_files_later();
	if (hooks_send_welcome(h, welcome, len)) {
		E.hooks = h->next;
		recompute_mask();
		eunlock();
		return -EIO;
	}
	E.joins++;
	log_info("hook '%s' (pid %d, %s) connected", h->name, (int)h->pid,
		 h->kind == HSMFS_KIND_FILL ? "fill" : "watch");
	for (unsigned i = 0; i < E.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		for (unsigned k = 0; k < ev->norphans; k++) {
			char path[HSMFS_MAX_PATH + 1];
			struct proto_event pe;
			unsigned j;

			if (strcmp(ev->orphans[k], h->name) || !(h->mask & HSMFS_MASK(ev->type)))
				continue;
			fill_proto(ev, &pe, path, sizeof(path));
			for (j = 0; j < ev->ntargets && ev->targets[j]; j++)
				;
			ev->targets[j] = h;
			ev->unsent[j] = hooks_send_event(h, &pe, -1) != 0;
			memmove(ev->orphans[k], ev->orphans[k + 1],
				(ev->norphans - k - 1) * sizeof(*ev->orphans));
			ev->norphans--;
			break;
		}
	}
	redispatch_queue();
	eunlock();
	return 0;
}

void events_hook_left(struct hook *h)
{
	struct hook **pp;
	unsigned i, j;

	elock();
	for (pp = &E.hooks; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	if (E.rr == h)
		E.rr = NULL;
	recompute_mask();
	for (i = 0; i < E.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		if (ev->st != EV_SENT && ev->st != EV_QUEUED)
			continue;
		if (ev->hook == h) {
			/* fill events go to another fill hook, or wait for one */
			ev->hook = NULL;
			if (ev->stage_fd >= 0) {
				close(ev->stage_fd);
				ev->stage_fd = -1;
			}
			ev->st = EV_QUEUED;
			queue_add(ev);
		}
		for (j = 0; j < ev->ntargets; j++) {
			void *o;

			if (ev->targets[j] != h)
				continue;
			/* a watcher's events wait for a hook of the same name */
			o = realloc(ev->orphans, (ev->norphans + 1) * sizeof(*ev->orphans));
			if (!o) {
				complete(ev, -EIO);
				break;
			}
			ev->orphans = o;
			memcpy(ev->orphans[ev->norphans++], h->name, sizeof(h->name));
			ev->targets[j] = NULL;
		}
	}
	redispatch_queue();
	free(h->quiet);
	h->quiet = NULL;
	h->nquiet = h->quiet_cap = 0;
	log_info("hook '%s' (pid %d) disconnected", h->name, (int)h->pid);
	eunlock();
	drain_ready();
}

static struct event *find_event(uint64_t id)
{
	uint64_t slot = id & ((1ULL << SLOT_BITS) - 1);
	struct event *ev;

	if (slot >= E.cfg.max_pending)
		return NULL;
	ev = &E.slots[slot];
	/* a queued event may already be with its watchers */
	return ev->id == id && (ev->st == EV_SENT || ev->st == EV_QUEUED) ? ev : NULL;
}

static int deny_errno(uint32_t e)
{
	switch (e) {
	case EPERM: case EACCES: case EIO: case EBUSY: case EAGAIN:
	case ENOSPC: case EDQUOT: case ETXTBSY: case ENODATA: case ETIMEDOUT:
		return -(int)e; /* ETIMEDOUT too: EV_TIMEOUT is the engine's own */
	default:
		return -EIO;
	}
}

static void answer_one(struct hook *h, const struct proto_answer *a)
{
	struct event *ev;
	unsigned i;

	elock();
	ev = find_event(a->id);
	if (!ev) {
		/* late (timed out, cancelled) or repeated: ignored */
		eunlock();
		log_debug("hook '%s': answer to unknown event %llu ignored",
			  h->name, (unsigned long long)a->id);
		return;
	}
	if (ev->type == HSMFS_EV_PRE_ACCESS && ev->hook == h) {
		if (a->verdict == HSMFS_ALLOW) {
			uint64_t s = a->filled_start > ev->hint_start ?
					     a->filled_start : ev->hint_start;
			uint64_t e = a->filled_end < ev->hint_end ? a->filled_end :
								    ev->hint_end;

			if (s > ev->start || e < ev->end) {
				log_err("hook '%s' allowed event %llu but filled [%llu, %llu) short of [%llu, %llu)",
					h->name, (unsigned long long)a->id,
					(unsigned long long)a->filled_start,
					(unsigned long long)a->filled_end,
					(unsigned long long)ev->start,
					(unsigned long long)ev->end);
				complete(ev, -EIO);
			} else {
				/* committed once every watcher allowed too */
				ev->filled = true;
				ev->fill_start = s;
				ev->fill_end = e;
				ev->hook->assigned--;
				ev->hook = NULL;
				if (!ev->ntargets)
					commit_fill(ev);
			}
		} else {
			complete(ev, deny_errno(a->error));
		}
		eunlock();
		return;
	}
	if ((ev->type == HSMFS_EV_PRE_DIR || ev->type == HSMFS_EV_PRE_LOOKUP) &&
	    ev->hook == h) {
		if (a->verdict == HSMFS_ALLOW) {
			/* committed once every watcher allowed too */
			ev->filled = true;
			ev->hook->assigned--;
			ev->hook = NULL;
			if (!ev->ntargets)
				commit_listing(ev);
		} else {
			complete(ev, deny_errno(a->error));
		}
		eunlock();
		return;
	}
	for (i = 0; i < ev->ntargets && ev->targets[i] != h; i++)
		;
	/* a hook that was never sent the event cannot answer it */
	if (i == ev->ntargets || ev->unsent[i])
		goto not_ours;
	remove_target(ev, i);
	if (a->verdict != HSMFS_ALLOW) {
		complete(ev, deny_errno(a->error));
	} else {
		/* QUIET quiets the hook that said it, no other */
		if (ev->type == HSMFS_EV_PRE_MODIFY && (a->flags & HSMFS_ANSWER_QUIET))
			quiet_add(h, inode_ino(ev->in));
		if (!ev->ntargets && ev->type != HSMFS_EV_PRE_ACCESS &&
		    ev->type != HSMFS_EV_PRE_DIR && ev->type != HSMFS_EV_PRE_LOOKUP)
			complete(ev, 0);
		else if (!ev->ntargets && ev->filled && ev->type != HSMFS_EV_PRE_ACCESS)
			commit_listing(ev);
		else if (!ev->ntargets && ev->filled)
			commit_fill(ev);
	}
	eunlock();
	return;
not_ours:
	eunlock();
	log_debug("hook '%s': answer to event %llu it was not sent, ignored",
		  h->name, (unsigned long long)a->id);
}

void events_answer(struct hook *h, const struct proto_answer *a)
{
	answer_one(h, a);
	/* the reads parked on what it ended are answered from this thread */
	drain_ready();
}

/*
 * Does a PROGRESS of *done bytes extend ev's deadline?  Progress is bytes
 * advancing towards what the event asks, at progress_floor bytes a
 * second or more since the deadline was last set: a repeated count, a
 * trickle below the floor or a count past the hint range extends
 * nothing, so a reader waits at most the hint range at the floor's rate
 * plus one timeout.  *done is clamped to the range.  E.lock held.
 */
static bool progress_enough(const struct event *ev, uint64_t *done)
{
	ELOCK_HELD();
	struct timespec now;
	double since;

	if (ev->type == HSMFS_EV_PRE_ACCESS && ev->hint_end > ev->hint_start &&
	    *done > ev->hint_end - ev->hint_start)
		*done = ev->hint_end - ev->hint_start;
	if (*done <= ev->progress)
		return false;
	clock_gettime(CLOCK_MONOTONIC, &now);
	/* the deadline was last set timeout seconds before it */
	since = (double)(now.tv_sec - ev->deadline.tv_sec) +
		(now.tv_nsec - ev->deadline.tv_nsec) / 1e9 + E.cfg.timeout;
	return (double)(*done - ev->progress) >= (double)E.cfg.progress_floor * since;
}

void events_progress(struct hook *h, const struct proto_progress *p)
{
	struct event *ev;

	uint64_t done = p->bytes_done;

	elock();
	ev = find_event(p->id);
	if (!ev || ev->hook != h || !progress_enough(ev, &done)) {
		eunlock();
		return;
	}
	ev->progress = done;
	mono_after(&ev->deadline, E.cfg.timeout);
	eunlock();
}

/*
 * FILLED: before its answer, the fill hook says [filled_start,
 * filled_end) of its staging file is written and final.  The reads
 * parked on the event whose bytes all lie inside it are answered now,
 * from the staging file, when those bytes are exactly what the commit
 * would copy: every watcher has allowed, no user change of the file is
 * in flight, and the bytes are still missing.  Nothing is committed and
 * the timeout is not restarted: the answer still decides the event, and
 * a deny or a timeout fails only the reads still waiting.  Other reads (a wider
 * read, a check, one that comes later) wait for the answer as before.
 */
void events_filled(struct hook *h, const struct proto_filled *f)
{
	struct parked *out = NULL, **pp;
	struct fstate *fs;
	struct event *ev;
	uint64_t s, e;
	int fd = -1;

	elock();
	ev = find_event(f->id);
	if (!ev || ev->type != HSMFS_EV_PRE_ACCESS || ev->hook != h || ev->st != EV_SENT ||
	    ev->stage_fd < 0 || ev->copying || !ev->parked || ev->ntargets)
		goto out;
	fs = ev->fs;
	/*
	 * A user's change in flight may be over these bytes; one that is done
	 * marked its bytes present (events.h: any -> present (user's)), or
	 * shrank the file below them, which the checks below see.
	 */
	if (fs->changes || fs->evicting || (fs->flags & META_F_STALE) ||
	    fill_completes_digest(fs, ev->hint_start, ev->hint_end))
		goto out; /* what the answer may fill: the hint range */
	s = f->filled_start > ev->hint_start ? f->filled_start : ev->hint_start;
	e = f->filled_end < ev->hint_end ? f->filled_end : ev->hint_end;
	if (e > fs->size)
		e = fs->size;
	for (pp = &ev->parked; *pp && s < e;) {
		struct parked *p = *pp;
		uint64_t rs = p->off, re = p->off + p->len;
		struct range miss;

		if (re > fs->size)
			re = fs->size;
		if (p->cont || rs >= re || rs < s || re > e ||
		    rs_missing(&fs->present, rs, re, &miss, 1) != 1 || miss.start != rs ||
		    miss.end != re) {
			pp = &p->next;
			continue;
		}
		/* the staging file outlives the event for these replies */
		if (fd < 0 && (fd = fcntl(ev->stage_fd, F_DUPFD_CLOEXEC, 0)) < 0)
			break;
		*pp = p->next;
		p->fd = fd;
		p->len = re - rs;
		p->next = out;
		out = p;
		ev->waiters--; /* a parked read's reference; the event is not done */
		E.st.early_reads++;
	}
	/* nobody waits any more: it goes on as a readahead (its timeout
	 * is nobody's, and a new waiter gets one of its own) */
	if (out && !ev->waiters)
		ev->detached = true;
out:
	eunlock();
	while (out) {
		struct parked *p = out;

		out = p->next;
		finish_read(p, 0);
	}
	if (fd >= 0)
		close(fd);
}
