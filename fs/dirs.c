/*
 * dirs.c - lazy directories: which directories are listed, their PRE_DIR
 * events, and the lister thread that commits a listing (listing.c).
 * Part of the engine (engine.h).
 *
 * A directory with a META_DIR_UNLISTED row has names nobody knows yet.
 * Before a name in it is looked up, listed or made (the FUSE layer asks
 * events_dir() first), one PRE_DIR event goes to a fill hook subscribed
 * to it, with an empty staging file; the hook writes the listing there
 * (JSON Lines, manifest.h: one entry a line, "path" a single name) and
 * allows.  The listing is then committed (durability step 5, state.h):
 * every entry is made in the store (place.h), the store is synced, and
 * one transaction records the entries and the directory as listed.
 * Only then does the directory become listed in memory and the requests
 * parked on the event go on: nothing half-listed is ever shown.  A crash
 * before the commit leaves the directory unlisted; the next listing
 * takes over what the crashed one made (nobody else could have made
 * names in a directory never listed) and removes what it no longer
 * names.
 *
 * The user's change wins over names (names.h): every name a listing, a
 * refresh or a lookup's answer makes, replaces or removes is claimed
 * first under the plan its event opened when it started; a name changed
 * through the mount since is left as the user made it, and the rest of
 * the listing still applies.  A claim covers the store calls of its one
 * name, never a sync, a commit or an invalidation.
 *
 * Per inode: INODE_LISTED (names known: listed, or never lazy) or
 * INODE_UNLISTED (a row says so), found with one database lookup the
 * first time a directory is used after events_lazy_dirs was set.
 * Concurrent first looks wait on one event (listing_of()).  Locks: as
 * the engine's; the database, the store and the listing's parse run
 * without S.lock (the event is COPYING meanwhile).  Threads: the
 * commits run on one lister thread of this module's, in the order the
 * answers came, never on the hook's connection (its next answers would
 * wait behind a sync of the store).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "clock.h"
#include "events.h"
#include "dirs.h"
#include "ready.h"
#include "engine.h"
#include "event.h"
#include "hashset.h"
#include "inode.h"
#include "listing.h"
#include "log.h"
#include "park.h"
#include "place.h"
#include "route.h"
#include "store.h"

_Atomic bool events_lazy_dirs;

static struct event *listing_of(struct inode *dir);

/* a directory's names are known: listed (or plain), or listed and aging */
#define KNOWN (INODE_LISTED | INODE_DIR_TTL)

/*
 * dir_ttl: when each listed directory the daemon has seen was listed
 * (ms, the value), by store inode number (the key; 0 is kept as
 * UINT64_MAX).  Only with dir_ttl set; its own lock, held for a lookup
 * or an insert, nothing else.
 */
static struct {
	pthread_mutex_t lock;
	struct hashset at;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER, .at = HASHSET_INIT(SIZE_MAX, true, NULL) };

/* The time of ino (added as 0 if missing), or NULL without memory.  T.lock held. */
static int64_t *ttl_slot(uint64_t ino)
{
	size_t pos;

	if (hashset_add(&T.at, ino ? ino : UINT64_MAX, &pos) < 0)
		return NULL;
	return (int64_t *)hashset_val(&T.at, pos);
}

static void ttl_set(uint64_t ino, int64_t at)
{
	int64_t *t;

	pthread_mutex_lock(&T.lock);
	t = ttl_slot(ino);
	if (t)
		*t = at;
	pthread_mutex_unlock(&T.lock);
}

/*
 * A look at dir, listed and aging (dir_ttl): once its listing is older
 * than dir_ttl, a refresh starts in the background (nobody waits for it:
 * the look goes on with the names as they are).  Without S.lock.
 */
static void aged_check(struct inode *dir)
{
	int64_t now = now_ms(), *t;
	struct meta_file f;
	struct event *ev;
	bool stale;

	pthread_mutex_lock(&T.lock);
	t = ttl_slot(inode_ino(dir));
	stale = t && now - *t >= (int64_t)(S.cfg.dir_ttl * 1000);
	if (stale)
		*t = now; /* one refresh an age, failed or not */
	pthread_mutex_unlock(&T.lock);
	if (!stale || meta_get(S.cfg.meta, inode_ino(dir), &f))
		return;
	elock();
	if (f.state == META_DIR_LISTED && !listing_of(dir) && !S.stopping &&
	    !start_listing(dir, f.origin, NULL, &ev)) {
		f.origin = NULL; /* the event's */
		ev->refresh = true;
		ev->detached = true;
		put_ref(ev);
	}
	eunlock();
	meta_file_free(&f);
}

/*
 * The listing state of dir from the database: 0 with *ret_origin (owned,
 * may be NULL) when unlisted, 1 when its names are known, or -errno.
 * Sets the inode's bit.  Without S.lock.
 */
static int dir_state(struct inode *dir, char **ret_origin)
{
	struct meta_file f;
	int res;

	*ret_origin = NULL;
	if (!inode_is_dir(dir)) {
		inode_flags_set(dir, INODE_LISTED);
		return 1;
	}
	res = meta_get(S.cfg.meta, inode_ino(dir), &f);
	if (!res && f.state == META_DIR_LISTED && S.cfg.dir_ttl > 0) {
		ttl_set(f.ino, f.atime);
		meta_file_free(&f);
		inode_flags_set(dir, INODE_DIR_TTL);
		return 1;
	}
	if (res == -ENOENT || (!res && f.state != META_DIR_UNLISTED)) {
		if (!res)
			meta_file_free(&f);
		inode_flags_set(dir, INODE_LISTED);
		return 1;
	}
	if (res) {
		elog_err("cannot read the listing state of a directory: %s",
			meta_errmsg(S.cfg.meta));
		return -EIO;
	}
	*ret_origin = f.origin;
	f.origin = NULL;
	meta_file_free(&f);
	inode_flags_set(dir, INODE_UNLISTED);
	return 0;
}

/* Deeper than this, a tree walk gives up (-ELOOP): no origin lists such. */
#define TREE_DEPTH_MAX 256

/* Does the row of the store directory fd say unlisted?  1, 0 or -errno. */
static int row_unlisted(int fd)
{
	struct meta_file f;
	struct stat st;
	int res;

	if (fstat(fd, &st) < 0)
		return -errno;
	res = meta_get(S.cfg.meta, st.st_ino, &f);
	if (res == -ENOENT)
		return 0;
	if (res)
		return -EIO;
	res = f.state == META_DIR_UNLISTED;
	meta_file_free(&f);
	return res;
}

/*
 * Below the store directory fd (not itself), depth first, parents
 * first: the path (relative, into path from len on) of the first
 * unlisted directory.  1 found, 0 none, or -errno.  Closes fd.
 */
static int unlisted_below(int fd, char *path, size_t len, size_t size, unsigned depth)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;
	int res = 0;

	if (!d) {
		close(fd);
		return -errno;
	}
	if (depth > TREE_DEPTH_MAX) {
		closedir(d);
		return -ELOOP;
	}
	while (!res && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		int sub;

		if ((de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) ||
		    !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			if (errno == ENOTDIR || errno == ELOOP || errno == ENOENT)
				continue; /* not a directory (DT_UNKNOWN), or gone */
			res = -errno;
			break;
		}
		if (len + n + 2 > size) {
			close(sub);
			res = -ENAMETOOLONG;
			break;
		}
		path[len] = '/';
		memcpy(path + len + 1, de->d_name, n + 1);
		res = row_unlisted(sub);
		if (res) {
			close(sub);
			break;
		}
		res = unlisted_below(sub, path, len + 1 + n, size, depth + 1);
		if (!res)
			path[len] = '\0';
	}
	closedir(d);
	return res;
}

int events_tree_unlisted(struct inode *dir, struct inode **ret)
{
	char path[HSMFS_MAX_PATH + 2] = "", proc[32];
	struct inode *cur;
	const char *c;
	int fd = inode_fd_get(dir), sub, res;

	ELOCK_NOT_HELD();
	*ret = NULL;
	if (fd < 0)
		return fd;
	may_block("a walk of a store tree");
	inode_proc_path(fd, proc);
	sub = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	inode_fd_put(dir);
	if (sub < 0)
		return -errno;
	res = row_unlisted(sub);
	if (res) {
		close(sub);
		return res; /* 1: dir itself */
	}
	res = unlisted_below(sub, path, 0, sizeof(path), 0);
	if (res <= 0)
		return res ? res : -ENOENT;
	/* path is "/a/b": looked up one name at a time from dir */
	cur = dir;
	for (c = path + 1; *c;) {
		const char *e = strchr(c, '/');
		char name[HSMFS_MAX_PATH + 1];
		struct inode *next;
		struct stat st;
		size_t n = e ? (size_t)(e - c) : strlen(c);

		memcpy(name, c, n);
		name[n] = '\0';
		res = inode_lookup(cur, name, &st, &next);
		if (cur != dir)
			inode_forget(cur, 1);
		if (res)
			return res;
		cur = next;
		c += n + (e ? 1 : 0);
	}
	*ret = cur;
	return 0;
}

/* The listing event of dir in flight, or NULL.  S.lock held. */
static struct event *listing_of(struct inode *dir)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < S.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		if (ev->type == HSMFS_EV_PRE_DIR && ev->in == dir &&
		    ev_live(ev))
			return ev;
	}
	return NULL;
}

/* Park req on ev (S.lock held; returns without it): as events_dir(). */
static int park_wait(struct event *ev, struct inode *dir, struct front_req *req,
		     void (*cont)(void *arg, int res), void *arg)
{
	ELOCK_HELD();
	int res = park_on(ev, dir, req, cont, arg);

	eunlock();
	if (res == EVENTS_PARKED)
		return res;
	drain_ready();
	return res == EV_TIMEOUT ? -EIO : res;
}

/*
 * Is dir unlisted?  0 with *ret_origin (owned) when it is; 1 when its
 * names are known (a listing that aged is started in the background,
 * dir_ttl); -errno.  Without S.lock.
 */
static int unlisted(struct inode *dir, char **ret_origin)
{
	int res = 1;

	*ret_origin = NULL;
	if (inode_flags(dir) & INODE_LISTED)
		return 1;
	if (!(inode_flags(dir) & INODE_DIR_TTL))
		res = dir_state(dir, ret_origin);
	if (res > 0 && (inode_flags(dir) & INODE_DIR_TTL))
		aged_check(dir);
	return res;
}

/*
 * Join the listing of dir in flight, or start one (origin: owned, given
 * to it), and park req on it: as events_dir().  Called with S.lock held,
 * returns without it.
 */
static int wait_listing(struct inode *dir, char *origin, bool refresh, struct front_req *req,
			void (*cont)(void *arg, int res), void *arg)
{
	ELOCK_HELD();
	struct event *ev = listing_of(dir);
	int res;

	if (ev) {
		free(origin);
		hold_event(ev);
	} else {
		res = start_listing(dir, origin, req, &ev);
		if (res) {
			eunlock();
			return res;
		}
		ev->refresh = refresh;
	}
	return park_wait(ev, dir, req, cont, arg);
}

int events_dir(struct inode *dir, struct front_req *req, void (*cont)(void *arg, int res),
	       void *arg)
{
	char *origin = NULL;
	int res;

	res = unlisted(dir, &origin);
	if (res)
		return res > 0 ? 0 : res;
	elock();
	if (inode_flags(dir) & KNOWN) {
		/* listed while we looked */
		eunlock();
		free(origin);
		return 0;
	}
	return wait_listing(dir, origin, false, req, cont, arg);
}

/* A directory of events_list_tree()'s queue: its inode (a lookup
 * reference, but the root's) and its store path. */
struct tree_dir {
	struct inode *in;
	char *path;
};

/* dir's subdirectories onto q (*n of *cap): 0 or -errno. */
static int queue_subdirs(const struct tree_dir *dir, struct tree_dir **q, size_t *n, size_t *cap)
{
	char proc[32];
	struct dirent *de;
	DIR *d;
	int pfd = inode_fd_get(dir->in), res = 0;

	if (pfd < 0)
		return pfd;
	inode_proc_path(pfd, proc);
	d = opendir(proc);
	inode_fd_put(dir->in);
	if (!d)
		return -errno;
	while (!res && (de = readdir(d))) {
		struct tree_dir sub;
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (dir->in == inode_root() && !strcmp(de->d_name, STORE_STATE_DIR)) ||
		    (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
			continue;
		if (inode_lookup(dir->in, de->d_name, &st, &sub.in))
			continue; /* gone meanwhile */
		if (!S_ISDIR(st.st_mode)) {
			inode_forget(sub.in, 1);
			continue;
		}
		if (asprintf(&sub.path, "%s%s%s", dir->path, dir->path[0] ? "/" : "",
			     de->d_name) < 0) {
			inode_forget(sub.in, 1);
			res = -ENOMEM;
			break;
		}
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 64;
			struct tree_dir *nq = realloc(*q, c * sizeof(*nq));

			if (!nq) {
				inode_forget(sub.in, 1);
				free(sub.path);
				res = -ENOMEM;
				break;
			}
			*q = nq;
			*cap = c;
		}
		(*q)[(*n)++] = sub;
	}
	closedir(d);
	return res;
}

/* events_list_tree()'s walk, shared by its listers: guarded by lock. */
struct tree_walk {
	pthread_mutex_t lock;
	pthread_cond_t cond;     /* a directory queued, one done, or the end */
	struct tree_dir *q;      /* [at, n): to list; below at: taken */
	size_t n, cap, at;
	unsigned busy;           /* listers with a directory taken */
	unsigned long listed;
	struct inode *top;       /* the caller's (its reference, not the walk's) */
	bool keep_going;         /* a failure stops nothing: counted */
	unsigned long failures;
	bool stop;               /* a failure (not keep_going), or the caller's each() */
	int res;
	char *failed;
	size_t failedlen;
};

/* One directory: listed if it is not, its subdirectories queued.  Without W->lock. */
static int list_one(struct tree_walk *w, struct tree_dir *t, bool *ret_listed)
{
	struct tree_dir *sub = NULL;
	size_t nsub = 0, cap = 0;
	char *origin = NULL;
	int was = unlisted(t->in, &origin), res;

	free(origin);
	res = was < 0 ? was : events_dir(t->in, NULL, NULL, NULL);
	*ret_listed = res >= 0 && was == 0;
	if (res >= 0)
		res = queue_subdirs(t, &sub, &nsub, &cap);
	pthread_mutex_lock(&w->lock);
	if (!res && w->n + nsub > w->cap) {
		size_t c = w->cap;
		struct tree_dir *nq;

		while (c < w->n + nsub)
			c *= 2;
		nq = realloc(w->q, c * sizeof(*nq));
		if (nq) {
			w->q = nq;
			w->cap = c;
		} else {
			res = -ENOMEM;
		}
	}
	if (!res && nsub) {
		memcpy(w->q + w->n, sub, nsub * sizeof(*sub));
		w->n += nsub;
		nsub = 0;
	}
	pthread_mutex_unlock(&w->lock);
	for (size_t i = 0; i < nsub; i++) {
		inode_forget(sub[i].in, 1);
		free(sub[i].path);
	}
	free(sub);
	return res < 0 ? res : 0;
}

/* A lister: takes directories until none is left and none is being listed. */
static void *lister_walk(void *arg)
{
	struct tree_walk *w = arg;

	pthread_mutex_lock(&w->lock);
	while (!w->stop && (w->at < w->n || w->busy)) {
		struct tree_dir t;
		bool listed;
		int res;

		if (w->at == w->n) {
			pthread_cond_wait(&w->cond, &w->lock);
			continue;
		}
		t = w->q[w->at];
		w->q[w->at].in = NULL;
		w->q[w->at].path = NULL;
		w->at++;
		w->busy++;
		pthread_mutex_unlock(&w->lock);
		res = list_one(w, &t, &listed);
		pthread_mutex_lock(&w->lock);
		w->busy--;
		w->listed += listed;
		if (res && !w->stop) {
			/* the first failure is the one said */
			if (!w->failures++) {
				w->res = res;
				snprintf(w->failed, w->failedlen, "%s", t.path[0] ? t.path : ".");
			}
			w->stop = !w->keep_going;
		}
		pthread_cond_broadcast(&w->cond);
		pthread_mutex_unlock(&w->lock);
		/* done with it: a tree's directories are not all held at once */
		if (t.in != w->top)
			inode_forget(t.in, 1);
		free(t.path);
		pthread_mutex_lock(&w->lock);
	}
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int events_list_tree(struct inode *dir, unsigned listers, bool keep_going,
		     bool (*each)(unsigned long listed, unsigned long left),
		     unsigned long *ret_listed, unsigned long *ret_failures, char *failed,
		     size_t failedlen)
{
	struct tree_walk w = { .top = dir, .keep_going = keep_going, .failed = failed,
			       .failedlen = failedlen };
	pthread_t *t;
	unsigned started = 0;
	pthread_condattr_t ca;

	ELOCK_NOT_HELD();
	may_block("a listing of a whole tree");
	failed[0] = '\0';
	*ret_listed = *ret_failures = 0;
	if (!listers)
		listers = 1;
	w.q = malloc(64 * sizeof(*w.q));
	t = calloc(listers, sizeof(*t));
	if (!w.q || !t || !(w.q[0].path = strdup(""))) {
		free(w.q);
		free(t);
		return -ENOMEM;
	}
	w.q[0].in = dir; /* the caller's reference */
	w.n = 1;
	w.cap = 64;
	pthread_mutex_init(&w.lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w.cond, &ca);
	pthread_condattr_destroy(&ca);
	/* each directory listed before its subdirectories are queued: parents first */
	for (unsigned i = 0; i < listers; i++)
		if (!pthread_create(&t[started], NULL, lister_walk, &w))
			started++;
	if (!started)
		lister_walk(&w);
	/* the caller's each(), about once a second, here */
	pthread_mutex_lock(&w.lock);
	while (started && (w.at < w.n || w.busy) && !w.stop) {
		struct timespec until;

		mono_after(&until, 1.0);
		pthread_cond_timedwait(&w.cond, &w.lock, &until);
		if (each && !w.stop) {
			unsigned long listed = w.listed, left = (unsigned long)(w.n - w.at);
			bool go;

			pthread_mutex_unlock(&w.lock);
			go = each(listed, left);
			pthread_mutex_lock(&w.lock);
			if (!go && !w.stop) {
				w.stop = true;
				w.res = -EINTR;
				failed[0] = '\0';
				pthread_cond_broadcast(&w.cond);
			}
		}
	}
	pthread_mutex_unlock(&w.lock);
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	for (size_t i = w.at; i < w.n; i++) {
		if (w.q[i].in && w.q[i].in != w.top)
			inode_forget(w.q[i].in, 1);
		free(w.q[i].path);
	}
	free(w.q);
	free(t);
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	*ret_listed = w.listed;
	*ret_failures = w.failures;
	return w.res;
}

/* The PRE_LOOKUP of name in dir in flight, or NULL.  S.lock held. */
static struct event *lookup_of(struct inode *dir, const char *name)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < S.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		if (ev->type == HSMFS_EV_PRE_LOOKUP && ev->in == dir && ev->name &&
		    !strcmp(ev->name, name) && ev_live(ev))
			return ev;
	}
	return NULL;
}

/* Has name in the unlisted dir an entry with a row (an earlier lookup's)? */
static bool name_known(struct inode *dir, const char *name)
{
	struct meta_file f;
	struct stat st;
	int pfd = inode_fd_get(dir);
	bool known;

	if (pfd < 0)
		return false;
	known = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		!meta_get(S.cfg.meta, st.st_ino, &f);
	if (known)
		meta_file_free(&f);
	inode_fd_put(dir);
	return known;
}

int events_dir_lookup(struct inode *dir, const char *name, struct front_req *req,
		      void (*cont)(void *arg, int res), void *arg)
{
	char *origin = NULL, *nm;
	struct event *ev;
	int res;

	res = unlisted(dir, &origin);
	if (res)
		return res > 0 ? 0 : res;
	/* a name an earlier lookup made is there: no need to ask */
	if (name_known(dir, name)) {
		free(origin);
		return 0;
	}
	elock();
	if (inode_flags(dir) & KNOWN) {
		eunlock();
		free(origin);
		return 0;
	}
	/* a listing in flight answers it too; no hook asks for one name: list */
	if (listing_of(dir) || !have_lookup_hook())
		return wait_listing(dir, origin, false, req, cont, arg);
	ev = lookup_of(dir, name);
	if (ev) {
		free(origin);
		hold_event(ev);
	} else {
		nm = strdup(name);
		res = nm ? start_lookup(dir, origin, nm, req, &ev) : (free(origin), -ENOMEM);
		if (res) {
			eunlock();
			return res;
		}
	}
	return park_wait(ev, dir, req, cont, arg);
}

/* Does the store hold a name in dir (made by a lookup, if dir is unlisted)? */
static bool has_names(struct inode *dir)
{
	int fd = inode_fd_get(dir), dfd;
	struct dirent *de;
	bool any = false;
	DIR *d;

	if (fd < 0)
		return false;
	dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	inode_fd_put(dir);
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return false;
	}
	while (!any && (de = readdir(d)))
		any = strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		      (dir != inode_root() || strcmp(de->d_name, STORE_STATE_DIR));
	closedir(d);
	return any;
}

/* A refresh of an unlisted directory whose names lookups made. */
struct refresh_req {
	struct inode *dir; /* a reference of ours */
	struct front_req *req;
	void (*cont)(void *arg, int res);
	void *arg;
	bool listed;
};

/* Its next step once the last ended with res: listed, then refreshed, then answered. */
static void refresh_step(void *arg, int res)
{
	struct refresh_req *r = arg;

	if (!res && !r->listed) {
		r->listed = true;
		res = events_dir_refresh(r->dir, r->req, refresh_step, r);
		if (res == EVENTS_PARKED)
			return;
	}
	r->cont(r->arg, res);
	inode_release(r->dir);
	free(r);
}

int events_dir_refresh(struct inode *dir, struct front_req *req,
		       void (*cont)(void *arg, int res), void *arg)
{
	struct refresh_req *r;
	struct meta_file f;
	char *origin;
	int res;

	if (!inode_is_dir(dir))
		return -ENOTDIR;
	res = meta_get(S.cfg.meta, inode_ino(dir), &f);
	if (res == -ENOENT || (!res && f.state != META_DIR_LISTED &&
			       f.state != META_DIR_UNLISTED)) {
		if (!res)
			meta_file_free(&f);
		return -ENODATA; /* not listed from anywhere */
	}
	if (res)
		return -EIO;
	origin = f.origin;
	f.origin = NULL;
	res = f.state == META_DIR_UNLISTED;
	meta_file_free(&f);
	if (res) {
		free(origin);
		/*
		 * Its first look lists it afresh, but not the names lookups
		 * made already (kept as they are: apply_listing): listed now,
		 * then refreshed, they are too.  With none, nothing is stale.
		 */
		if (!has_names(dir))
			return EVENTS_UNLISTED;
		r = calloc(1, sizeof(*r));
		if (!r)
			return -ENOMEM;
		inode_ref(dir);
		*r = (struct refresh_req){ .dir = dir, .req = req, .cont = cont, .arg = arg };
		res = events_dir(dir, req, refresh_step, r);
		if (res != EVENTS_PARKED)
			refresh_step(r, res);
		return EVENTS_PARKED;
	}
	elock();
	return wait_listing(dir, origin, true, req, cont, arg);
}

void events_dir_forget(struct inode *dir)
{
	uint64_t dirs = 0;

	inode_flags_clear(dir, INODE_LISTED | INODE_UNLISTED | INODE_DIR_TTL);
	if (!meta_count_dirs(S.cfg.meta, &dirs) && dirs)
		atomic_store(&events_lazy_dirs, true);
}

void events_dir_removed(uint64_t ino)
{
	uint64_t cached;

	if (atomic_load_explicit(&events_lazy_dirs, memory_order_relaxed))
		meta_delete(S.cfg.meta, ino, &cached);
}

/* Commit ev, COPYING (S.lock dropped meanwhile).  S.lock held. */
static void commit_now(struct event *ev)
{
	ELOCK_HELD();
	struct inode *dir = ev->in;
	int stage = ev->stage_fd, res;
	bool partial = false;

	/*
	 * A lookup answered for a directory listed since (by a listing
	 * committed first): the listing made the name, or the user did.
	 */
	if (ev->type == HSMFS_EV_PRE_LOOKUP && (inode_flags(dir) & KNOWN)) {
		res = 0;
	} else {
		eunlock();
		res = apply_listing(dir, stage,
				    ev->type == HSMFS_EV_PRE_LOOKUP ? ev->name : NULL,
				    ev->refresh, ev->names_plan, &partial);
		elock();
	}
	ev_set(ev, EV_FILLED); /* committed; completed next */
	pthread_cond_broadcast(&S.copied);
	if (ev->type == HSMFS_EV_PRE_LOOKUP) {
		/* the directory stays unlisted */
	} else if (!res && ev->refresh) {
		if (S.cfg.dir_ttl > 0)
			ttl_set(inode_ino(dir), now_ms());
		S.st.refreshed++;
	} else if (!res) {
		if (S.cfg.dir_ttl > 0)
			ttl_set(inode_ino(dir), now_ms());
		inode_flags_clear(dir, INODE_UNLISTED);
		inode_flags_set(dir, S.cfg.dir_ttl > 0 ? INODE_DIR_TTL : INODE_LISTED);
		S.st.listed++;
		if (partial)
			S.st.listed_partial++;
	}
	complete(ev, res);
}

void commit_listing(struct event *ev)
{
	ELOCK_HELD();
	ev_set(ev, EV_COPYING); /* no timeout, no cancel: it was answered */
	if (!E.lister_running || S.stopping) {
		commit_now(ev);
		return;
	}
	ev->cnext = NULL;
	*E.commits_tail = ev;
	E.commits_tail = &ev->cnext;
	pthread_cond_signal(&E.commit_cond);
}

/*
 * The lister: commits the listings the hooks allowed, in order.  A
 * listing's commit syncs the store, which can take long on a busy one;
 * the hook's connection, which read the answer, reads the next meanwhile.
 */
static void *lister_main(void *arg)
{
	(void)arg;
	elock();
	for (;;) {
		struct event *ev = E.commits;

		if (!ev) {
			if (S.stopping)
				break;
			pthread_cond_wait(&E.commit_cond, &S.lock);
			continue;
		}
		E.commits = ev->cnext;
		if (!E.commits)
			E.commits_tail = &E.commits;
		commit_now(ev);
		/* the requests parked on it go on from here */
		eunlock();
		drain_ready();
		elock();
	}
	eunlock();
	return NULL;
}

void dirs_shutdown(void)
{
	ELOCK_NOT_HELD();
	elock();
	pthread_cond_signal(&E.commit_cond);
	eunlock();
	if (E.lister_running) {
		/* from S.stopping on, commit_listing() commits in place */
		pthread_join(E.lister, NULL);
		elock();
		E.lister_running = false;
		eunlock();
	}
}

/* ------------------------------------------------------------- setup */

/* Is the store directory dfd empty, but for the state directory? */
static bool store_empty(int pfd)
{
	char proc[32];
	struct dirent *de;
	bool empty = true;
	DIR *d;

	inode_proc_path(pfd, proc);
	d = opendir(proc);
	if (!d)
		return false;
	while (empty && (de = readdir(d)))
		empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
			!strcmp(de->d_name, STORE_STATE_DIR);
	closedir(d);
	return empty;
}

/*
 * A store mounted again with another origin=.  A root that was never
 * listed (its first listing failed: a typo in the URL, an origin down)
 * is listed from the new one: a wrong origin on the first mount does not
 * break the store for good.  A root listed before keeps its names and
 * their recorded origins; that is said once, never passed over.
 */
static int root_origin(void)
{
	struct inode *root = inode_root();
	struct meta_file row;
	int pfd, res;

	if (meta_get(S.cfg.meta, inode_ino(root), &row))
		return 0; /* no row: an imported store, whose files carry their URLs */
	res = 0;
	if (row.origin && !strcmp(row.origin, S.cfg.origin)) {
		/* the same origin */
	} else if (row.state == META_DIR_UNLISTED) {
		char proc[32];

		pfd = inode_fd_get(root);
		if (pfd < 0) {
			meta_file_free(&row);
			return pfd;
		}
		inode_proc_path(pfd, proc);
		elog_info("the root was never listed from '%s': it is listed from '%s' on first look",
			 row.origin ? row.origin : "", S.cfg.origin);
		free(row.origin);
		row.origin = strdup(S.cfg.origin);
		if (!row.origin) {
			res = -ENOMEM;
		} else {
			setxattr(proc, STORE_UNLISTED_XATTR, S.cfg.origin, strlen(S.cfg.origin), 0);
			res = meta_put(S.cfg.meta, &row);
		}
		inode_fd_put(root);
		if (res)
			elog_err("cannot record the root's new origin: %s", strerror(-res));
	} else if (row.state == META_DIR_LISTED) {
		ready_warn("origin=%s: this store's names were listed from '%s'; its directories "
			 "keep the origins they were listed from, and only files imported without "
			 "a URL are fetched from the new one (hsmfs(8), origin=)",
			 S.cfg.origin, row.origin ? row.origin : "");
	}
	meta_file_free(&row);
	return res;
}

bool dirs_root_unlisted(void)
{
	ELOCK_NOT_HELD();
	struct meta_file row;
	bool unlisted_root;

	if (meta_get(S.cfg.meta, inode_ino(inode_root()), &row))
		return false;
	unlisted_root = row.state == META_DIR_UNLISTED;
	meta_file_free(&row);
	return unlisted_root;
}

int dirs_init(void)
{
	ELOCK_NOT_HELD();
	struct inode *root = inode_root();
	uint64_t rows = 1, dirs = 0;
	int pfd, res = 0;

	/* zero setup: an empty store mounted with an origin is listed from it */
	if (S.cfg.origin && !meta_count(S.cfg.meta, &rows) && !rows) {
		pfd = inode_fd_get(root);
		if (pfd < 0)
			return pfd;
		if (store_empty(pfd)) {
			struct meta_file row;
			struct stat st;
			char proc[32];

			inode_proc_path(pfd, proc);
			res = stat(proc, &st) < 0 ? -errno : 0;
			if (!res) {
				memset(&row, 0, sizeof(row));
				row.ino = st.st_ino;
				row.mtime = st.st_mtim.tv_sec;
				row.mode = st.st_mode & 07777;
				row.state = META_DIR_UNLISTED;
				row.origin = (char *)S.cfg.origin;
				row.path = "";
				setxattr(proc, STORE_UNLISTED_XATTR, S.cfg.origin,
					 strlen(S.cfg.origin), 0);
				res = meta_put(S.cfg.meta, &row);
			}
			if (res)
				elog_err("cannot make the root an unlisted directory: %s",
					strerror(-res));
			else
				elog_info("empty store: its names are listed from '%s' on first look",
					 S.cfg.origin);
		} else {
			ready_warn("origin=%s: the store is not empty and has no state yet: it is "
				  "served as it is, nothing is listed from the origin, which only files "
				  "imported without a URL are fetched from (a zero-setup mount needs "
				  "an empty store: hsmfs(8), origin=)", S.cfg.origin);
		}
		inode_fd_put(root);
	} else if (S.cfg.origin && rows) {
		res = root_origin();
	}
	if (!res && !meta_count_dirs(S.cfg.meta, &dirs) && dirs)
		atomic_store(&events_lazy_dirs, true);
	if (!res) {
		if (pthread_create(&E.lister, NULL, lister_main, NULL))
			return -EAGAIN;
		elock();
		E.lister_running = true;
		eunlock();
	}
	return res;
}
