/* route.c - which hooks get an event: see route.h */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "commit.h"
#include "engine.h"
#include "event.h"
#include "fstate.h"
#include "hooks.h"
#include "inode.h"
#include "log.h"
#include "names.h"
#include "proto.h"
#include "route.h"


/* in's path is within h's subtree: 1, 0, or -errno when in has no path to tell. */
static int subtree_has(const struct hook *h, struct inode *in)
{
	char path[HSMFS_MAX_PATH + 1];
	size_t n = strlen(h->subtree);
	int res;

	if (!n)
		return 1;
	res = inode_path(in, path, sizeof(path));
	if (res < 0)
		return res;
	return !strncmp(path, h->subtree, n) && (path[n] == '/' || !path[n]);
}

bool in_subtree(const struct hook *h, struct inode *in)
{
	return subtree_has(h, in) == 1;
}

bool maybe_in_subtree(const struct hook *h, struct inode *in)
{
	return subtree_has(h, in) != 0;
}

/* The permission events: every hook subscribed answers them, of either kind. */
#define PERM_EVENTS (HSMFS_MASK(HSMFS_EV_PRE_MODIFY) | HSMFS_MASK(HSMFS_EV_OPEN_PERM) | \
		     HSMFS_MASK(HSMFS_EV_ACCESS_PERM))

/*
 * Remember one hook in the saved table t, at *n, of which the first
 * keep records hold a hook each; past them, the last record stands for
 * every hook that does not fit (SAVED_HOOK_LOST, saved.h): it gathers
 * their subscriptions (a fill hook's permission events only: a fill
 * nobody answers never serves missing bytes).  *ret_lost: the first
 * named hook that did not fit.
 */
static void remember(struct saved_hook *t, unsigned *n, unsigned keep, const char *name,
		     uint32_t kind, uint32_t mask, const char **ret_lost)
{
	struct saved_hook *l = &t[SAVED_HOOKS - 1];

	if (*n < keep) {
		memcpy(t[*n].name, name, sizeof(t[*n].name));
		t[*n].kind = kind;
		t[*n].mask = mask;
		++*n;
		return;
	}
	if (*n == keep) {
		memset(l->name, 0, sizeof(l->name));
		l->kind = SAVED_HOOK_LOST;
		l->mask = 0;
		++*n;
	}
	l->mask |= kind == HSMFS_KIND_FILL ? mask & PERM_EVENTS : mask;
	if (!*ret_lost && name[0])
		*ret_lost = name;
}

/*
 * The mask of the hooks connected now, then a new subscription
 * generation: opens that decided on the old ones decide again
 * (passthrough.h).  Before any WELCOME is sent.  S.lock held.
 */
void recompute_mask(void)
{
	struct saved_hook *t = saved_hooks();
	const char *lost = NULL;
	uint32_t m = 0;
	unsigned n = 0, total = E.nabsent, keep;
	struct hook *h;

	ELOCK_HELD();
	for (h = E.hooks; h; h = h->next)
		m |= h->mask;
	for (unsigned i = 0; i < E.nabsent; i++)
		m |= E.absent[i].mask;
	atomic_store_explicit(&events_mask, m, memory_order_relaxed);
	if (S.cfg.front.subscriptions_changed)
		S.cfg.front.subscriptions_changed();
	/* what the next daemon asks for after a crash: these, and those
	 * still absent (saved.h) */
	if (!t)
		return;
	/*
	 * Up to HOOKS_MAX connected and SAVED_HOOKS absent may not all fit:
	 * those that do not are remembered as one that never answers,
	 * never forgotten (remember())
	 */
	for (h = E.hooks; h; h = h->next)
		total++;
	keep = total <= SAVED_HOOKS ? total : SAVED_HOOKS - 1;
	for (h = E.hooks; h; h = h->next)
		remember(t, &n, keep, h->name, h->kind, h->mask, &lost);
	for (unsigned i = 0; i < E.nabsent; i++)
		remember(t, &n, keep, E.absent[i].name, E.absent[i].kind, E.absent[i].mask, &lost);
	for (; n < SAVED_HOOKS && t[n].kind; n++)
		t[n].kind = 0;
	if (total > SAVED_HOOKS && !E.table_full)
		elog_warn("no room to remember hook '%s' and %u more for a restart (%u hooks at "
			  "most): after one, the events they subscribed to wait and fail at the timeout",
			  lost ? lost : "(of the last daemon)", total - SAVED_HOOKS, SAVED_HOOKS);
	E.table_full = total > SAVED_HOOKS;
}

_Static_assert(SAVED_HOOK_NAME == HSMFS_MAX_NAME + 1, "a hook's name");

void absent_load(double timeout)
{
	const struct saved_hook *t = saved_hooks();

	ELOCK_HELD();
	for (unsigned i = 0; t && i < SAVED_HOOKS && t[i].kind; i++) {
		/* one record a name: the first (a watcher and a fill hook of
		 * one name are one program's two connections, asked as one) */
		bool dup = false;

		for (unsigned j = 0; j < E.nabsent; j++)
			dup |= !strcmp(E.absent[j].name, t[i].name) &&
			       E.absent[j].kind == t[i].kind;
		if (!dup)
			E.absent[E.nabsent++] = t[i];
	}
	mono_after(&E.absent_until, timeout);
	for (unsigned i = 0; i < E.nabsent; i++) {
		if (E.absent[i].kind == SAVED_HOOK_LOST)
			elog_warn("the last daemon had more hooks than it could name: for %.0f s, "
				  "the events they subscribed to wait for them and fail at the timeout",
				  timeout);
		else
			elog_info("waiting up to %.0f s for hook '%s' of the last daemon to connect again",
				  timeout, E.absent[i].name);
	}
	if (E.nabsent)
		recompute_mask();
}

void absent_joined(const struct hook *h)
{
	bool back = false;

	ELOCK_HELD();
	for (unsigned i = 0; i < E.nabsent;) {
		if (!strcmp(E.absent[i].name, h->name) && E.absent[i].kind == h->kind) {
			E.absent[i] = E.absent[--E.nabsent];
			back = true;
		} else {
			i++;
		}
	}
	if (back)
		recompute_mask();
}

/*
 * Must an absent hook answer an event of type?  A permission event is
 * every subscribed hook's, of either kind (as perm_target() asks those
 * connected); the others go to a fill hook and to the watchers.
 */
static bool absent_must(const struct saved_hook *a, uint32_t type, bool perm)
{
	return (a->mask & HSMFS_MASK(type)) &&
	       (perm || a->kind == HSMFS_KIND_WATCH || a->kind == SAVED_HOOK_LOST);
}

bool absent_wants(uint32_t type)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < E.nabsent; i++)
		if (absent_must(&E.absent[i], type, true))
			return true;
	return false;
}

void absent_expire(void)
{
	ELOCK_HELD();
	if (!E.nabsent || !mono_passed(&E.absent_until))
		return;
	for (unsigned i = 0; i < E.nabsent; i++)
		elog_warn("hook '%s' of the last daemon did not connect again within the timeout: "
			  "its events are no longer waited for", E.absent[i].name);
	E.nabsent = 0;
	recompute_mask();
}

void wait_absent(struct event *ev, bool perm)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < E.nabsent; i++) {
		void *o;

		if (!absent_must(&E.absent[i], ev->type, perm))
			continue;
		/* the hooks that did not fit in the table have no name to
		 * come back by; with no memory to name one, neither: the
		 * timeout decides */
		o = E.absent[i].kind == SAVED_HOOK_LOST ? NULL :
		    realloc(ev->orphans, (ev->norphans + 1) * sizeof(*ev->orphans));
		if (o) {
			ev->orphans = o;
			memcpy(ev->orphans[ev->norphans++], E.absent[i].name,
			       sizeof(*ev->orphans));
		}
		add_target(ev, NULL, true);
	}
}

/* S.lock held. */
void fill_proto(const struct event *ev, struct proto_event *pe,
		char *path, size_t pathsize)
{
	ELOCK_HELD();
	/* an archive's path is its landing's, fixed at its start (start_archive) */
	int n = ev->type == HSMFS_EV_ARCHIVE && ev->name ?
			snprintf(path, pathsize, "%s", ev->name) :
			inode_path(ev->in, path, pathsize);
	const struct fstate *fs;

	if (n >= (int)pathsize)
		n = -ENAMETOOLONG;

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
	if ((ev->type == HSMFS_EV_PRE_LOOKUP || ev->type == HSMFS_EV_ARCHIVE_NAME) && ev->name &&
	    pe->path.len < pathsize - 1) {
		/* the path of the name looked up: its directory's, and the name */
		int k = snprintf(path + pe->path.len, pathsize - pe->path.len, "%s%s",
				 pe->path.len ? "/" : "", ev->name);

		pe->path.len = k > 0 && (size_t)k < pathsize - pe->path.len ?
				       pe->path.len + k : pe->path.len;
	}
	if (ev->type == HSMFS_EV_PRE_DIR || ev->type == HSMFS_EV_PRE_LOOKUP ||
	    ev->type == HSMFS_EV_ARCHIVE_NAME) {
		if (ev->dir_origin) {
			pe->origin.p = ev->dir_origin;
			pe->origin.len = strlen(ev->dir_origin);
		}
		if (ev->type == HSMFS_EV_ARCHIVE_NAME && ev->new_version) {
			/* before an answer, the version the name's object has */
			pe->version.p = ev->new_version;
			pe->version.len = strlen(ev->new_version);
		}
		return;
	}
	/*
	 * PRE_MODIFY events carry the file's origin and version too; a fill
	 * is of the recorded version, whose size is the origin's; an archive
	 * is of its snapshot, [0, hint_end) of its descriptor
	 */
	fs = ev->fs ? ev->fs : inode_state(ev->in);
	if (fs) {
		pe->file_size = ev->type == HSMFS_EV_PRE_ACCESS ? fs->osize :
				ev->type == HSMFS_EV_ARCHIVE ? ev->hint_end : fs->size;
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
 * EV_TARGETS_MAX holds every hook that can be asked; were it full, the
 * last place becomes one nobody answers, so that the event fails at
 * the timeout rather than going on without h.  S.lock held.
 */
void add_target(struct event *ev, struct hook *h, bool sent)
{
	ELOCK_HELD();
	if (ev->ntargets == EV_TARGETS_MAX) {
		assert(!"more hooks to ask than EV_TARGETS_MAX");
		elog_err("event %llu (%s): more hooks to ask than %u: it fails at the timeout",
			 (unsigned long long)ev->id, proto_event_name(ev->type), EV_TARGETS_MAX);
		ev->targets[EV_TARGETS_MAX - 1] = NULL;
		ev->unsent[EV_TARGETS_MAX - 1] = false;
		return;
	}
	ev->unsent[ev->ntargets] = !sent;
	ev->targets[ev->ntargets++] = h;
}

/* S.lock held. */
void remove_target(struct event *ev, unsigned i)
{
	ELOCK_HELD();
	ev->ntargets--;
	ev->targets[i] = ev->targets[ev->ntargets];
	ev->unsent[i] = ev->unsent[ev->ntargets];
}

/*
 * Send a new event to every watch hook that subscribed to its type; each
 * must allow it (the first deny wins).  S.lock held.
 */
static void send_to_watchers(struct event *ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	bool built = false;

	for (struct hook *h = E.hooks; h; h = h->next) {
		if (h->kind != HSMFS_KIND_WATCH || !(h->mask & HSMFS_MASK(ev->type)) ||
		    !maybe_in_subtree(h, ev->in))
			continue;
		if (!built) {
			fill_proto(ev, &pe, path, sizeof(path));
			built = true;
		}
		add_target(ev, h, hooks_send_event(h, &pe, -1) == 0);
	}
	if (__builtin_expect(E.nabsent, 0))
		wait_absent(ev, false);
}

/* Try to hand a queued fill (PRE_ACCESS, PRE_DIR, PRE_LOOKUP, ARCHIVE) to a fill hook.  S.lock held. */
static void dispatch(struct event *ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	struct hook *h, *start;

	if (!E.hooks)
		return;
	/* its object moving at the origin (namer.c): asked once it is at its new place */
	if (ev->type == HSMFS_EV_PRE_ACCESS && ev->fs && ev->fs->naming)
		return;
	fill_proto(ev, &pe, path, sizeof(path));
	pe.flags = ev->type == HSMFS_EV_ARCHIVE_NAME ? 0 :
		   HSMFS_EVENT_HAS_FD | (ev->type == HSMFS_EV_ARCHIVE ? ev->aflags : 0);
	start = E.rr && E.rr->next ? E.rr->next : E.hooks;
	h = start;
	do {
		if (h->kind == HSMFS_KIND_FILL &&
		    (h->mask & HSMFS_MASK(ev->type)) &&
		    in_subtree(h, ev->in)) {
			/* every delivery writes into a staging file of its own */
			if (ev->stage_fd < 0 && ev->type != HSMFS_EV_ARCHIVE_NAME) {
				int fd = open_stage(ev->fs ? ev->fs->size : 0);

				if (fd < 0) {
					elog_err("cannot create a staging file for a fill: %s",
						strerror(-fd));
					return;
				}
				ev->stage_fd = fd;
				/* half gone: the timer makes more before the next needs one */
				if (S.nstage < STAGE_POOL / 2 && !E.stage_wanted) {
					E.stage_wanted = true;
					pthread_cond_signal(&E.tcond);
				}
			}
			if (hooks_send_event(h, &pe, ev->stage_fd) != 0)
				goto next;
			ev->hook = h;
			ev_set(ev, EV_SENT);
			h->assigned++;
			E.rr = h;
			return;
		}
next:
		h = h->next ? h->next : E.hooks;
	} while (h != start);
}

/*
 * A new event goes out: to its watchers, and to a fill hook, or on the
 * queue of those waiting for one.  S.lock held.
 */
static void launch(struct event *ev)
{
	ELOCK_HELD();
	send_to_watchers(ev);
	dispatch(ev);
	if (ev->st == EV_QUEUED)
		queue_add(ev);
}

/* S.lock held. */
void redispatch_queue(void)
{
	ELOCK_HELD();
	struct event *ev, *next;

	for (ev = E.queue; ev; ev = next) {
		next = ev->qnext;
		dispatch(ev);
		if (ev->st == EV_SENT)
			queue_remove(ev);
	}
}

/* Send again what a full socket refused.  S.lock held. */
void resend(struct event *ev)
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

/* S.lock held. */
bool have_fill_hook(void)
{
	ELOCK_HELD();
	for (struct hook *h = E.hooks; h; h = h->next)
		if (h->kind == HSMFS_KIND_FILL)
			return true;
	/* one of the last daemon's, coming back: the fill waits for it */
	for (unsigned i = 0; i < E.nabsent; i++)
		if (E.absent[i].kind == HSMFS_KIND_FILL)
			return true;
	return false;
}

/*
 * Start a fill of [start, end) with hint [hs, he).  A detached event (a
 * readahead) is started only if a slot is free now, and nobody waits for
 * it unless a reader comes to need its bytes.  Returns the event, or
 * NULL (with *res set unless detached).  S.lock held.
 */
void fill_span(const struct fstate *fs, uint64_t *start, uint64_t *end, uint64_t *hs,
	       uint64_t *he)
{
	if (fs->dsums && *start < fs->osize) {
		/*
		 * Chunk digests: the hook must fill whole chunks (of the
		 * recorded version: a file the user changed still has the
		 * origin's bytes checked), which the commit checks before a
		 * byte is kept (commit_fill()).
		 */
		uint64_t c = fs->dchunk, last = fs->osize - (fs->osize % c);

		*start &= ~(c - 1);
		*end = *end > last ? (*end > fs->osize ? *end : fs->osize) :
				     (*end + c - 1) & ~(c - 1);
		if (*hs > *start)
			*hs = *start;
		if (*he < *end)
			*he = *end;
	}
}

struct event *start_fill(struct inode *in, struct fstate *fs, uint64_t start,
			 uint64_t end, uint64_t hs, uint64_t he,
			 struct front_req *req, bool detached, uint64_t reserved,
			 int *res)
{
	ELOCK_HELD();
	struct event *ev;

	if (detached) {
		ev = E.free_list;
		if (!ev)
			return NULL;
		E.free_list = ev->free_next;
	} else if (!(ev = get_slot())) {
		*res = -EIO;
		elog_warn("no free event slot within the timeout (max_pending=%u)",
			 S.cfg.max_pending);
		return NULL;
	}
	init_event(ev, HSMFS_EV_PRE_ACCESS, in, req);
	S.st.misses++;
	ev->fs = fs;
	fill_span(fs, &start, &end, &hs, &he);
	ev->start = start;
	ev->end = end;
	ev->hint_start = hs;
	ev->hint_end = he;
	/* the store file is opened at open(2), or by the commit (commit_fill) */
	ev->detached = detached;
	if (!detached)
		ev->waiters = 1; /* the caller's reference, for wait_event() */
	ev->reserved = reserved; /* from here on the event gives it back */
	ev->fnext = fs->inflight;
	fs->inflight = ev;
	launch(ev);
	return ev;
}

/* S.lock held. */
static bool have_dir_hook(void)
{
	ELOCK_HELD();
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

int start_name_archive(uint32_t kind, char *path, char *origin, char *version,
		       struct event **ret_ev)
{
	ELOCK_HELD();
	struct event *ev = get_slot();

	if (!ev) {
		free(path);
		free(origin);
		free(version);
		return -EIO;
	}
	init_event(ev, HSMFS_EV_ARCHIVE_NAME, inode_root(), NULL);
	ev->start = kind;
	ev->end = 0;
	ev->name = path;          /* the path, below the root */
	ev->dir_origin = origin;  /* the object's URL */
	ev->new_version = version; /* its version, until the answer's */
	ev->waiters = 1;
	launch(ev);
	*ret_ev = ev;
	return 0;
}

bool have_archive_hook(struct inode *in)
{
	ELOCK_HELD();
	for (struct hook *h = E.hooks; h; h = h->next)
		if (h->kind == HSMFS_KIND_FILL && (h->mask & HSMFS_MASK(HSMFS_EV_ARCHIVE)) &&
		    in_subtree(h, in))
			return true;
	return false;
}

int start_archive(struct inode *in, int fd, uint64_t size, uint32_t mode, int64_t mtime,
		  uint16_t flags, const char *path, struct event **ret_ev)
{
	ELOCK_HELD();
	char *p = path && path[0] ? strdup(path) : NULL;
	struct event *ev;

	if (path && path[0] && !p) {
		close_unlocked(fd);
		return -ENOMEM;
	}
	ev = get_slot();

	if (!ev) {
		close_unlocked(fd);
		free(p);
		elog_warn("no free event slot within the timeout (max_pending=%u)",
			 S.cfg.max_pending);
		return -EIO;
	}
	init_event(ev, HSMFS_EV_ARCHIVE, in, NULL);
	ev->name = p; /* the path it goes to (fill_proto) */
	ev->start = mode;
	ev->end = mtime > 0 ? (uint64_t)mtime : 0;
	ev->hint_start = 0;
	ev->hint_end = size;
	ev->stage_fd = fd; /* the snapshot, sent again to a next hook if one leaves */
	ev->aflags = flags;
	ev->waiters = 1;   /* the caller's */
	launch(ev);
	*ret_ev = ev;
	return 0;
}

/* PRE_DIR, or PRE_LOOKUP of name (owned, given to the event). */
static int start_dir_event(uint32_t type, struct inode *dir, char *origin, char *name,
			   struct front_req *req, struct event **ret_ev)
{
	ELOCK_HELD();
	struct event *ev;

	if (S.cfg.nohook_fail && !have_dir_hook()) {
		free(origin);
		free(name);
		return -EIO;
	}
	ev = get_slot();
	if (!ev) {
		free(origin);
		free(name);
		elog_warn("no free event slot within the timeout (max_pending=%u)",
			 S.cfg.max_pending);
		return -EIO;
	}
	init_event(ev, type, dir, req);
	/* a name changed through the mount from here on is the user's */
	ev->names_plan = names_plan_begin();
	ev->dir_origin = origin;
	ev->name = name;
	ev->start = ev->end = ev->hint_start = ev->hint_end = 0;
	ev->waiters = 1; /* the caller's */
	launch(ev);
	*ret_ev = ev;
	return 0;
}

int start_listing(struct inode *dir, char *origin, struct front_req *req,
		  struct event **ret_ev)
{
	return start_dir_event(HSMFS_EV_PRE_DIR, dir, origin, NULL, req, ret_ev);
}

int start_lookup(struct inode *dir, char *origin, char *name, struct front_req *req,
		 struct event **ret_ev)
{
	return start_dir_event(HSMFS_EV_PRE_LOOKUP, dir, origin, name, req, ret_ev);
}
