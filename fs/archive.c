/* archive.c - the archiver: see archive.h */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "events.h"
#include "aqueue.h"
#include "archive.h"
#include "clock.h"
#include "dirs.h"
#include "fstate.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "namer.h"
#include "park.h"
#include "state.h"
#include "sync.h"
#include "upload.h"
#include "writeback.h"

#define PRESS_SAY_MS 60000    /* archive_pressure() logs at most this often */
#define PRESS_MAX 32          /* files archive_pressure() makes due at once */

static struct {
	pthread_t threads[ARCHIVERS];
	unsigned created;       /* threads started */
	unsigned nthreads;      /* of which not ended */
	uint64_t pressed;       /* files archived early for room (archive_pressure) */
	int64_t pressed_said;   /* when that was last logged (mono ms) */
} A;

/* Answer fs's waiters with res (their list, taken under S.lock). */
static void answer_waiters(struct arch_wait *w, int res)
{
	while (w) {
		struct arch_wait *next = w->next;

		w->cont(w->arg, res);
		free(w);
		w = next;
	}
}

static void *archiver_main(void *arg)
{
	(void)arg;
	elock();
	while (!AQ.stop) {
		int64_t now = mono_ms(), next_due;
		struct arch_wait *w;
		struct fstate *fs;
		int res;

		if (sync_scan_next())
			continue;
		fs = take_due(now, &next_due);
		if (!fs) {
			struct timespec ts;

			mono_after(&ts, next_due && next_due - now < ARCH_LOOK_MS ?
					(double)(next_due - now) / 1000 : ARCH_LOOK_MS / 1000.0);
			pthread_cond_timedwait(&AQ.cond, &S.lock, &ts);
			continue;
		}
		uint64_t size = fs->size;
		unsigned slot = attempt_begin(fs, size);

		eunlock();
		res = archive_one(fs);
		elock();
		w = attempt_end(fs, slot, size, &res, mono_ms());
		eunlock();
		answer_waiters(w, res);
		inode_release(fs->in); /* the queue's reference */
		elock();
	}
	/* the last archiver out: what is not archived is left dirty for the
	 * next mount, its waiters told */
	if (--A.nthreads) {
		eunlock();
		return NULL;
	}
	/* what is left is logged by archive_shutdown(): every dirty file */
	for (struct due_item *it; (it = due_heap_first(&AQ.heap));) {
		struct fstate *fs = fstate_of_due(it);
		struct arch_wait *w = fs->awaiters;

		due_heap_remove(&AQ.heap, it);
		fs->awaiters = NULL;
		fs->arch = ARCH_IDLE;
		eunlock();
		answer_waiters(w, -ESHUTDOWN);
		inode_release(fs->in);
		elock();
	}
	eunlock();
	return NULL;
}

/* ------------------------------------------------------------ requests */

void archive_pressure(uint64_t need)
{
	struct fstate *pick[PRESS_MAX];
	int64_t now = mono_ms();
	uint64_t going;
	unsigned n = 0, i;

	elock();
	if (!AQ.running || AQ.stop || !S.cfg.writeback_on) {
		eunlock();
		return;
	}
	/* what is being archived, or due, makes room already */
	going = AQ.running_bytes;
	for (size_t k = 0; k < AQ.heap.n; k++) {
		struct fstate *fs = fstate_of_due(AQ.heap.v[k]);

		if (fs->aq.due <= now)
			going += fs->size;
	}
	/* the oldest changes not due yet, failed ones left to their backoff */
	for (size_t k = 0; k < AQ.heap.n && going < need; k++) {
		struct fstate *fs = fstate_of_due(AQ.heap.v[k]);

		if (fs->aq.due <= now || fs->arch_tries || fs->naming)
			continue;
		if (n == PRESS_MAX && fs->aq.due >= pick[n - 1]->aq.due)
			continue;
		i = n < PRESS_MAX ? n++ : n - 1;
		for (; i > 0 && pick[i - 1]->aq.due > fs->aq.due; i--)
			pick[i] = pick[i - 1];
		pick[i] = fs;
	}
	/* due now, in the order of their changes (take_due takes the earliest) */
	for (i = 0; i < n && going < need; i++) {
		pick[i]->aq.due = now - PRESS_MAX + i;
		due_heap_fix(&AQ.heap, &pick[i]->aq);
		going += pick[i]->size;
		A.pressed++;
	}
	bool say = i && now - A.pressed_said >= PRESS_SAY_MS;
	uint64_t so_far = A.pressed;

	if (i)
		pthread_cond_broadcast(&AQ.cond);
	if (say)
		A.pressed_said = now;
	eunlock();
	/* once a spell of pressure, not each round */
	if (say)
		elog_info("the store is short of %llu bytes: changed files archived now, to be "
			  "released (%llu so far)", (unsigned long long)need,
			  (unsigned long long)so_far);
}

/* A resolve --take-origin in progress: the listings of in's directory. */
struct take_req {
	struct inode *in, *dir;   /* referenced */
	struct front_req *req;
	bool listed, refreshed;   /* asked */
	void (*cont)(void *arg, int res);
	void *arg;
};

/*
 * The next step of a take, after the last ended with res: the
 * directory listed (a first listing if it never was: a lookup made the
 * file's name alone), then listed again (the refresh replaces the
 * file), then the answer: 0 if the refresh replaced or removed it.
 * Without S.lock.
 */
static void take_step(void *arg, int res)
{
	struct take_req *t = arg;
	bool done;

	if (!res && !t->listed) {
		t->listed = true;
		res = events_dir(t->dir, t->req, take_step, t);
		if (res == EVENTS_PARKED)
			return;
	}
	if (!res && !t->refreshed) {
		t->refreshed = true;
		res = events_dir_refresh(t->dir, t->req, take_step, t);
		if (res == EVENTS_PARKED)
			return;
	}
	elock();
	done = take_end(inode_ino(t->in));
	eunlock();
	if (res == EVENTS_UNLISTED || res == -ENODATA)
		res = -ENODATA; /* not a directory listed from an origin */
	else if (!res && !done)
		res = -EBUSY; /* open or changed again meanwhile: kept */
	if (!res)
		elog_info("inode %llu: its local change dropped for the origin's version "
			  "(hsmfsctl resolve --take-origin)", (unsigned long long)inode_ino(t->in));
	t->cont(t->arg, res);
	inode_release(t->dir);
	inode_release(t->in);
	free(t);
}

int events_take_origin(struct inode *in, struct front_req *req,
		       void (*cont)(void *arg, int res), void *arg)
{
	struct take_req *t;
	struct inode *parent;
	struct fstate *fs;
	char *name;
	int res = events_load(in), fd;
	bool dirty;

	if (res)
		return res;
	elock();
	fs = inode_state(in);
	dirty = fs && fs->state == META_DIRTY;
	if (!dirty)
		res = fs && fs->origin ? 0 : -ENODATA; /* clean already */
	else if ((fs->flags & META_F_NEW) || !fs->origin)
		res = -ENODATA; /* the origin never had it */
	else if (fs->arch == ARCH_RUNNING)
		res = -EBUSY; /* open files are the refresh's to refuse (a release may lag);
			       * from here the archiver passes it over (take_due) */
	else
		res = take_begin(fs->ino);
	eunlock();
	if (res || !dirty)
		return res;
	t = calloc(1, sizeof(*t));
	fd = t ? inode_parent_fd_get(in, &parent, &name) : -ENOMEM;
	if (fd < 0) {
		elock();
		take_end(inode_ino(in));
		eunlock();
		free(t);
		return fd;
	}
	inode_ref(parent);
	inode_parent_fd_put(parent, name);
	inode_ref(in);
	*t = (struct take_req){ .in = in, .dir = parent, .req = req, .cont = cont, .arg = arg };
	take_step(t, 0);
	return EVENTS_PARKED;
}

/* The archive figures of the statistics.  S.lock held. */
void archive_stats(struct events_stats *st)
{
	ELOCK_HELD();
	uint64_t bytes = 0;

	for (size_t k = 0; k < AQ.heap.n; k++)
		bytes += fstate_of_due(AQ.heap.v[k])->size;
	st->archive_pending = AQ.heap.n;
	st->archive_pending_bytes = bytes;
	st->archive_running = AQ.nrunning;
	st->names_pending = namer_pending();
	st->archive_rate = upload_rate();
	st->archived_for_room = A.pressed;
}

int archive_init(void)
{
	aqueue_init();
	if (!S.cfg.meta)
		return 0;
	namer_init();
	/*
	 * first uploads a crash left unanswered, of files removed or
	 * renamed meanwhile: what they may have made goes (meta.h: landings)
	 */
	if (S.cfg.track_new) {
		int res = meta_begin(S.cfg.meta);

		if (!res)
			res = meta_landing_orphans(S.cfg.meta);
		if (!res)
			res = meta_commit(S.cfg.meta);
		if (res) {
			elog_warn("cannot look for uploads a crash left unanswered: %s",
				  meta_errmsg(S.cfg.meta));
			meta_rollback(S.cfg.meta);
		}
	}
	/* with write-back, what a crash or an unmount left dirty goes now */
	if (S.cfg.writeback_on)
		sync_startup();
	elock();
	for (unsigned i = 0; i < ARCHIVERS; i++) {
		if (pthread_create(&A.threads[i], NULL, archiver_main, NULL))
			break;
		A.nthreads++;
		A.created++;
	}
	AQ.running = A.nthreads > 0;
	eunlock();
	if (AQ.running)
		namer_start();
	return AQ.running ? 0 : -EAGAIN;
}

/* Paths named in the unmount's line of what is not at the origin. */
#define LEFT_SHOWN 5

/*
 * The unmount's word on what is not at the origin: every dirty file the
 * store records (queued or not, write-back or not), the first few named,
 * and the name changes not yet applied (hsmfsctl unmount prints the
 * same).  Once the writer has committed what it holds.  Without S.lock.
 */
static void log_left(void)
{
	char names[LEFT_SHOWN * 80 + 16] = "";
	uint64_t files = 0, after = 0, ops = 0;
	size_t len = 0;

	writeback_sync();
	for (;;) {
		struct meta_victim *v = NULL;
		size_t n = 0;

		if (meta_dirty(S.cfg.meta, 256, after, &v, &n))
			return;
		for (size_t i = 0; i < n && files + i < LEFT_SHOWN && len < sizeof(names); i++)
			len += snprintf(names + len, sizeof(names) - len, "%s'%.70s'",
					files + i ? ", " : "", v[i].path ? v[i].path : "?");
		files += n;
		if (n)
			after = v[n - 1].ino; /* the next page (meta.h) */
		meta_victims_free(v, n);
		if (n < 256)
			break;
	}
	if (meta_op_count(S.cfg.meta, &ops))
		ops = 0;
	if (!files && !ops)
		return;
	elog_warn("unmounted with %llu file%s changed and not at the origin%s%s%s and %llu name "
		  "change%s not applied there: archived at the next mount (with write-back) or "
		  "by hsmfsctl sync", (unsigned long long)files, files == 1 ? "" : "s",
		  files ? " (" : "", names, files > LEFT_SHOWN ? ", ...)" : files ? ")" : "",
		  (unsigned long long)ops, ops == 1 ? "" : "s");
}

void archive_shutdown(void)
{
	bool running;

	elock();
	running = AQ.running;
	AQ.stop = true;
	pthread_cond_broadcast(&AQ.cond);
	pthread_cond_broadcast(&AQ.ncond);
	eunlock();
	namer_stop();
	for (unsigned i = 0; running && i < A.created; i++)
		pthread_join(A.threads[i], NULL);
	if (S.cfg.meta)
		log_left();
	elock();
	AQ.running = false;
	sync_shutdown();
	/* the queue's table (its files were taken off by the last archiver) */
	aqueue_free();
	eunlock();
}
