/* sync.c - archives and syncs asked for: see sync.h */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "events.h"
#include "aqueue.h"
#include "clock.h"
#include "fstate.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "namer.h"
#include "state.h"
#include "sync.h"
#include "writeback.h"

/*
 * A sync or an archive in progress: the files it waits for, and its
 * first failure.  One a user waits for (asked) is on Y.asked until it
 * is answered: once at the end, or at once with -EINTR when its caller
 * is interrupted (archive_interrupts(); the archives it started go on).
 * cont is taken under S.lock by whichever answers it.
 */
struct sync_req {
	void (*cont)(void *arg, int res); /* NULL: answered (or nobody asks) */
	void *arg;
	struct front_req *req;   /* the asking request, interrupted or not; NULL: none */
	bool asked;             /* a user's, not the start-up's scan */
	bool all;               /* every file (root's, the owner's), not the caller's only */
	bool scanning;          /* the scan asks req's caller: not answered meanwhile */
	unsigned others;        /* dirty files the caller may not publish, left */
	uid_t uid;              /* the caller's, for the log */
	unsigned pending;
	int err;
	struct sync_req *next;  /* Y.scans */
	struct sync_req *anext; /* Y.asked */
};

static struct {
	struct sync_req *scans; /* syncs whose dirty files are to be found */
	struct sync_req *asked; /* syncs and archives a user waits for, not answered */
} Y;

/* r off Y.asked, and its answer taken: false if it had none left.  S.lock held. */
static bool sync_take(struct sync_req *r, void (**cont)(void *arg, int res), void **arg)
{
	ELOCK_HELD();
	struct sync_req **pp = &Y.asked;

	if (r->asked) {
		while (*pp && *pp != r)
			pp = &(*pp)->anext;
		if (*pp)
			*pp = r->anext;
	}
	*cont = r->cont;
	*arg = r->arg;
	r->cont = NULL;
	r->req = NULL;
	return *cont != NULL;
}

/* A new sync or archive request (req: the caller's; NULL: nobody's). */
static struct sync_req *sync_new(struct front_req *req, void (*cont)(void *arg, int res),
				 void *arg)
{
	struct sync_req *r = calloc(1, sizeof(*r));

	if (r)
		*r = (struct sync_req){ .cont = cont, .arg = arg, .req = req, .asked = cont != NULL };
	return r;
}

/* r on Y.asked, once it is certain to be answered.  S.lock held. */
static void sync_asked(struct sync_req *r)
{
	ELOCK_HELD();
	if (r->asked) {
		r->anext = Y.asked;
		Y.asked = r;
	}
}

/* A sync's (or an archive's) waiter on one file. */
static void sync_one(void *arg, int res)
{
	struct sync_req *r = arg;
	void (*cont)(void *arg, int res) = NULL;
	void *carg = NULL;
	bool last;

	elock();
	if (res && !r->err)
		r->err = res;
	last = !--r->pending;
	if (last)
		sync_take(r, &cont, &carg);
	eunlock();
	if (last) {
		if (cont)
			cont(carg, r->err);
		free(r);
	}
}

/* Answered at most this many interrupted requests a tick; the rest the next. */
#define INTERRUPTS_TICK 16

void archive_interrupts(void)
{
	ELOCK_HELD();
	struct {
		void (*cont)(void *arg, int res);
		void *arg;
	} gone[INTERRUPTS_TICK];
	unsigned n = 0;

	if (!Y.asked || !S.cfg.front.interrupted)
		return;
	for (struct sync_req *r = Y.asked, *next; r && n < INTERRUPTS_TICK; r = next) {
		next = r->anext;
		if (r->req && !r->scanning && S.cfg.front.interrupted(r->req) &&
		    sync_take(r, &gone[n].cont, &gone[n].arg))
			n++;
	}
	if (!n)
		return;
	eunlock();
	for (unsigned i = 0; i < n; i++)
		gone[i].cont(gone[i].arg, -EINTR);
	elock();
}

/*
 * May the caller of r (a sync not everyone's: not root's, not the
 * owner's) publish in?  Asked of the front end (front.may_archive) with
 * r->req kept from its answer meanwhile; an interrupt seen here answers
 * r (-EINTR).  false: not the caller's (counted in r->others), or r is
 * answered.  Without S.lock.
 */
static bool callers_own(struct sync_req *r, struct inode *in)
{
	void (*cont)(void *arg, int res) = NULL;
	void *arg = NULL;
	bool mine = false;

	elock();
	if (!r->cont) {
		eunlock();
		return false; /* answered (interrupted): it asks no more */
	}
	r->scanning = true;
	eunlock();
	if (S.cfg.front.interrupted && S.cfg.front.interrupted(r->req)) {
		elock();
		r->scanning = false;
		sync_take(r, &cont, &arg);
		eunlock();
		if (cont)
			cont(arg, -EINTR);
		return false;
	}
	mine = S.cfg.front.may_archive && S.cfg.front.may_archive(r->req, in);
	elock();
	r->scanning = false;
	r->others += !mine;
	eunlock();
	return mine;
}

/*
 * Files of several names (hard links) for sync r: the origin, which has
 * no links, holds each under one name, so the sync fails (-EMLINK),
 * naming them; one that has a single name again is forgotten.  Without
 * S.lock.
 */
static void sync_links(struct sync_req *r)
{
	uint64_t after = 0, several = 0;

	for (;;) {
		struct meta_victim *v = NULL;
		size_t n = 0;

		if (meta_linked(S.cfg.meta, 256, after, &v, &n))
			break;
		for (size_t i = 0; i < n; i++) {
			struct inode *in;
			struct stat st;
			int fd;

			if (row_walk(v[i].ino, v[i].path, &in))
				continue;
			fd = open_store(in, O_RDONLY);
			if (fd >= 0 && !fstat(fd, &st)) {
				if (st.st_nlink > 1) {
					elog_warn("sync: '%s' has %lu names (hard links): the origin "
						  "holds it under one of them only", v[i].path,
						  (unsigned long)st.st_nlink);
					several++;
				} else {
					events_linked(in, false);
				}
			}
			if (fd >= 0)
				close(fd);
			inode_forget(in, 1);
		}
		if (n)
			after = v[n - 1].ino; /* the next page (meta.h) */
		meta_victims_free(v, n);
		if (n < 256)
			break;
	}
	if (several) {
		elock();
		r->err = r->err ? r->err : -EMLINK;
		eunlock();
	}
}

/*
 * Find every dirty file for sync r: the writer's queue written first
 * (so that a change or a file made just now has its row), then the
 * database's dirty rows, each looked up by its path.  Without S.lock.
 */
static void sync_scan(struct sync_req *r)
{
	struct meta_victim *v = NULL;
	uint64_t after = 0;
	size_t n = 0;
	int res;

	writeback_sync();
	elock();
	r->pending = 1; /* the scan's own, dropped at its end */
	eunlock();
	/*
	 * names first: a renamed file's bytes go to where its name went;
	 * with them, again, those the origin would not take (it may have
	 * been mended since)
	 */
	if (r->asked && meta_ops_unpark(S.cfg.meta))
		elog_warn("sync: cannot try again the name changes the origin would not take: %s",
			  meta_errmsg(S.cfg.meta));
	res = r->asked ? names_synced() : 0;
	if (!res && r->asked) {
		uint64_t kept = 0;

		res = meta_parked_count(S.cfg.meta, &kept) ? -EIO : kept ? -EEXIST : 0;
		if (kept)
			elog_info("sync: the origin differs from the mount at %llu name%s it "
				  "would not change (said above)", (unsigned long long)kept,
				  kept == 1 ? "" : "s");
	}
	if (res) {
		elock();
		r->err = r->err ? r->err : res;
		eunlock();
	}
	/* and what they changed (a file whose object was found nowhere: dirty now) */
	if (r->asked)
		writeback_sync();
	for (;;) {
		if (meta_dirty(S.cfg.meta, 256, after, &v, &n)) {
			elock();
			r->err = r->err ? r->err : -EIO;
			eunlock();
			break;
		}
		for (size_t i = 0; i < n; i++) {
			struct inode *in;
			struct fstate *fs;

			int wres = row_walk(v[i].ino, v[i].path, &in);

			if (wres == -ENOENT)
				continue; /* removed meanwhile: nothing to archive */
			if (!wres && r->asked && !r->all && !callers_own(r, in)) {
				inode_forget(in, 1);
				continue;
			}
			if (wres) {
				/* a dirty file sync cannot reach: not "everything is there" */
				elog_err("sync: dirty inode %llu is not at '%s' (moved beside the "
					 "mount?): not archived; open it to record its path",
					 (unsigned long long)v[i].ino, v[i].path);
				elock();
				r->err = r->err ? r->err : -EIO;
				eunlock();
				continue;
			}
			elock();
			fs = inode_state(in);
			if (r->asked && !r->cont) {
				/* its caller left (interrupted): it asks no more */
			} else if (fs && fs->state == META_DIRTY && !fs->gone &&
			    !(fs->flags & META_F_CONFLICT) && add_waiter(fs, sync_one, r)) {
				r->pending++;
				archive_later(fs, mono_ms());
			} else if (fs && (fs->flags & META_F_CONFLICT) && !r->err) {
				r->err = -ESTALE;
			}
			eunlock();
			inode_forget(in, 1);
		}
		if (n)
			after = v[n - 1].ino; /* the next page (meta.h) */
		meta_victims_free(v, n);
		if (n < 256)
			break;
	}
	if (r->asked)
		sync_links(r);
	elock();
	if (r->others && !r->err) {
		elog_info("sync by uid %u: %u changed file%s left to their owners (not the "
			  "caller's to publish)", (unsigned)r->uid, r->others,
			  r->others == 1 ? "" : "s");
		r->err = -EACCES;
	}
	eunlock();
	sync_one(r, 0);
}

int events_archive(struct inode *in, struct front_req *req,
		   void (*cont)(void *arg, int res), void *arg)
{
	struct sync_req *r;
	struct fstate *fs;
	int res;

	if (inode_is_dir(in))
		return -EISDIR;
	res = events_load(in);
	if (res)
		return res;
	r = sync_new(req, cont, arg);
	if (!r)
		return -ENOMEM;
	r->pending = 1;
	elock();
	fs = inode_state(in);
	if (!fs) {
		res = -ENODATA; /* plain: no origin to archive to, not made here */
	} else if (fs->state != META_DIRTY) {
		res = 0;
	} else if (fs->flags & META_F_CONFLICT) {
		res = -ESTALE;
	} else if (!AQ.running || AQ.stop) {
		res = -ESHUTDOWN;
	} else if (!add_waiter(fs, sync_one, r)) {
		res = -ENOMEM;
	} else {
		fs->arch_tries = 0; /* asked: at once, whatever the backoff said */
		archive_later(fs, mono_ms());
		sync_asked(r);
		r = NULL;
		res = EVENTS_PARKED;
	}
	eunlock();
	free(r);
	return res;
}

int events_resolve(struct inode *in, struct front_req *req,
		   void (*cont)(void *arg, int res), void *arg)
{
	struct fstate *fs;
	int res = events_load(in);

	if (res)
		return res;
	elock();
	fs = inode_state(in);
	if (fs && (fs->flags & META_F_CONFLICT)) {
		fstate_set_flag(fs, META_F_CONFLICT, false, true); /* the user's */
		fs->overwrite = true;
		fs->arch_err = 0;
	}
	eunlock();
	return events_archive(in, req, cont, arg);
}

int events_sync(struct front_req *req, bool all, void (*cont)(void *arg, int res), void *arg)
{
	struct sync_req *r = sync_new(req, cont, arg);
	struct caller who = { 0 };

	if (!r)
		return -ENOMEM;
	r->all = all || !req;
	if (!r->all && S.cfg.front.caller) {
		S.cfg.front.caller(req, &who);
		r->uid = who.uid;
	}
	elock();
	if (!AQ.running || AQ.stop) {
		eunlock();
		free(r);
		return -ESHUTDOWN;
	}
	r->next = Y.scans;
	Y.scans = r;
	sync_asked(r);
	pthread_cond_signal(&AQ.cond);
	eunlock();
	return EVENTS_PARKED;
}

bool sync_scan_next(void)
{
	ELOCK_HELD();
	struct sync_req *r = Y.scans;

	if (!r)
		return false;
	Y.scans = r->next;
	eunlock();
	sync_scan(r);
	elock();
	return true;
}

void sync_startup(void)
{
	Y.scans = calloc(1, sizeof(*Y.scans));
}

void sync_shutdown(void)
{
	ELOCK_HELD();
	while (Y.scans) {
		struct sync_req *r = Y.scans;
		void (*cont)(void *arg, int res);
		void *arg;

		Y.scans = r->next;
		sync_take(r, &cont, &arg);
		eunlock();
		if (cont)
			cont(arg, -ESHUTDOWN);
		free(r);
		elock();
	}
}
