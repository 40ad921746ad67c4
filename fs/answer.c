/* answer.c - what hooks say to the engine: see answer.h */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "answer.h"
#include "commit.h"
#include "decide.h"
#include "dirs.h"
#include "engine.h"
#include "event.h"
#include "fstate.h"
#include "hooks.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "park.h"
#include "ranges.h"
#include "route.h"

int events_hook_joined(struct hook *h, const uint8_t *welcome, int len)
{
	elock();
	/*
	 * In place before WELCOME: the mask the fast paths test and the
	 * quieted files, so an operation that follows WELCOME sees the hook.
	 * Every send to a hook runs under S.lock: WELCOME is still its first
	 * frame.
	 */
	hashset_init(&h->quiet, HOOK_QUIET_MAX, false, NULL);
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
	if (h->mask & HSMFS_MASK(HSMFS_EV_ACCESS_PERM))
		front_inval((struct inval){ .kind = INVAL_FILES_LATER });
	if (hooks_send_welcome(h, welcome, len)) {
		E.hooks = h->next;
		recompute_mask();
		eunlock();
		return -EIO;
	}
	E.joins++;
	absent_joined(h); /* one of the last daemon's, back: it is asked from now */
	elog_info("hook '%s' (pid %d, %s) connected", h->name, (int)h->pid,
		 h->kind == HSMFS_KIND_FILL ? "fill" : "watch");
	for (unsigned i = 0; i < S.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		for (unsigned k = 0; k < ev->norphans; k++) {
			char path[HSMFS_MAX_PATH + 1];
			struct proto_event pe;
			unsigned j;

			if (strcmp(ev->orphans[k], h->name) || !(h->mask & HSMFS_MASK(ev->type)))
				continue;
			/* every name has the place of a target nobody answers */
			for (j = 0; j < ev->ntargets && ev->targets[j]; j++)
				;
			if (j == ev->ntargets) {
				assert(!"an orphan without its place");
				continue;
			}
			fill_proto(ev, &pe, path, sizeof(path));
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
	for (i = 0; i < S.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		if (!ev_live(ev))
			continue;
		if (ev->hook == h) {
			/* fill events go to another fill hook, or wait for one;
			 * an archive keeps its snapshot (read-only, unchanged) */
			ev->hook = NULL;
			if (ev->type == HSMFS_EV_ARCHIVE) {
				free(ev->new_version);
				free(ev->new_origin);
				ev->new_version = ev->new_origin = NULL;
			}
			if (ev->stage_fd >= 0 && ev->type != HSMFS_EV_ARCHIVE) {
				close_unlocked(ev->stage_fd);
				ev->stage_fd = -1;
			}
			/*
			 * A hook that dies on an event (a supervised one is
			 * started again, and handed it again) is not handed it
			 * for ever: the third loss fails it.  An archive keeps
			 * its own backoff.
			 */
			if (ev->type != HSMFS_EV_ARCHIVE && ev->type != HSMFS_EV_ARCHIVE_NAME &&
			    ++ev->hook_losses >= HOOK_LOSSES_MAX) {
				char path[HSMFS_MAX_PATH + 1];

				if (inode_path(ev->in, path, sizeof(path)) < 0)
					snprintf(path, sizeof(path), "inode %llu",
						 (unsigned long long)inode_ino(ev->in));
				elog_warn("fill hooks left while handling the %s event of '/%s' %u "
					  "times (the last '%s'): it fails", proto_event_name(ev->type),
					  path, HOOK_LOSSES_MAX, h->name);
				complete(ev, -EIO);
				continue;
			}
			ev_set(ev, EV_QUEUED);
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
	hashset_free(&h->quiet);
	elog_info("hook '%s' (pid %d) disconnected", h->name, (int)h->pid);
	eunlock();
	drain_ready();
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

/*
 * An archive hook's deny: these errnos reach the archiver (and hsmfsctl)
 * as they are, each says something the others do not (ESTALE: a
 * conflict; EFBIG, EINVAL, ENAMETOOLONG: never, as it is; ENOENT: gone;
 * ENOTEMPTY: a directory to remove is not empty at the origin); others
 * are EIO.
 */
static int archive_errno(uint32_t e)
{
	switch (e) {
	case ESTALE: case EFBIG: case EINVAL: case ENAMETOOLONG: case ENOENT: case ENOTEMPTY:
		return -(int)e;
	default:
		return deny_errno(e);
	}
}

/* h answered ev (allow or deny): its counters (struct hook).  S.lock held. */
static void hook_answered(struct hook *h, const struct event *ev, uint32_t verdict)
{
	ELOCK_HELD();
	struct timespec now;

	mono_now(&now);
	h->answered++;
	if (verdict != HSMFS_ALLOW)
		h->denied++;
	h->lat[lat_bucket((uint64_t)((now.tv_sec - ev->born.tv_sec) * 1000000 +
				     (now.tv_nsec - ev->born.tv_nsec) / 1000))]++;
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
		elog_debug("hook '%s': answer to unknown event %llu ignored",
			  h->name, (unsigned long long)a->id);
		return;
	}
	if (ev->type == HSMFS_EV_PRE_ACCESS && ev->hook == h) {
		if (a->verdict == HSMFS_ALLOW) {
			uint64_t s = a->filled_start > ev->hint_start ?
					     a->filled_start : ev->hint_start;
			uint64_t e = a->filled_end < ev->hint_end ? a->filled_end :
								    ev->hint_end;

			/* an allow short of what was asked failed the read: counted so */
			hook_answered(h, ev, s > ev->start || e < ev->end ? HSMFS_DENY : HSMFS_ALLOW);
			if (s > ev->start || e < ev->end) {
				elog_err("hook '%s' allowed event %llu but filled [%llu, %llu) short of [%llu, %llu)",
					h->name, (unsigned long long)a->id,
					(unsigned long long)a->filled_start,
					(unsigned long long)a->filled_end,
					(unsigned long long)ev->start,
					(unsigned long long)ev->end);
				complete(ev, -EIO);
			} else {
				/* committed once every watcher allowed too */
				ev_set(ev, EV_FILLED);
				ev->fill_start = s;
				ev->fill_end = e;
				ev->hook->assigned--;
				ev->hook = NULL;
				if (!ev->ntargets)
					complete(ev, commit_fill(ev));
			}
		} else {
			hook_answered(h, ev, a->verdict);
			complete(ev, deny_errno(a->error));
		}
		eunlock();
		return;
	}
	if ((ev->type == HSMFS_EV_ARCHIVE || ev->type == HSMFS_EV_ARCHIVE_NAME) &&
	    ev->hook == h) {
		hook_answered(h, ev, a->verdict);
		if (a->verdict == HSMFS_ALLOW && ev->type == HSMFS_EV_ARCHIVE && !ev->new_version) {
			elog_err("hook '%s' allowed the archive of event %llu without ARCHIVED: not archived",
				h->name, (unsigned long long)a->id);
			complete(ev, -EPROTO);
		} else if (a->verdict == HSMFS_ALLOW) {
			/* done once every watcher allowed too */
			ev->uploaded = true;
			ev_set(ev, EV_FILLED);
			ev->hook->assigned--;
			ev->hook = NULL;
			if (!ev->ntargets)
				complete(ev, 0);
		} else {
			/* ESTALE: a conflict; the archiver's, never a caller's */
			complete(ev, archive_errno(a->error));
		}
		eunlock();
		return;
	}
	if ((ev->type == HSMFS_EV_PRE_DIR || ev->type == HSMFS_EV_PRE_LOOKUP) &&
	    ev->hook == h) {
		hook_answered(h, ev, a->verdict);
		if (a->verdict == HSMFS_ALLOW) {
			/* committed once every watcher allowed too */
			ev_set(ev, EV_FILLED);
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
	hook_answered(h, ev, a->verdict);
	if (a->verdict != HSMFS_ALLOW) {
		complete(ev, deny_errno(a->error));
	} else {
		/* QUIET quiets the hook that said it, no other */
		if (ev->type == HSMFS_EV_PRE_MODIFY && (a->flags & HSMFS_ANSWER_QUIET))
			quiet_add(h, inode_ino(ev->in));
		if (!ev->ntargets && ev->type != HSMFS_EV_PRE_ACCESS &&
		    ev->type != HSMFS_EV_PRE_DIR && ev->type != HSMFS_EV_PRE_LOOKUP &&
		    ev->type != HSMFS_EV_ARCHIVE && ev->type != HSMFS_EV_ARCHIVE_NAME)
			complete(ev, 0);
		else if (!ev->ntargets && ev->st == EV_FILLED &&
			 (ev->type == HSMFS_EV_ARCHIVE || ev->type == HSMFS_EV_ARCHIVE_NAME))
			complete(ev, 0);
		else if (!ev->ntargets && ev->st == EV_FILLED && ev->type != HSMFS_EV_PRE_ACCESS)
			commit_listing(ev);
		else if (!ev->ntargets && ev->st == EV_FILLED)
			complete(ev, commit_fill(ev));
	}
	eunlock();
	return;
not_ours:
	eunlock();
	elog_debug("hook '%s': answer to event %llu it was not sent, ignored",
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
 * plus one timeout.  *done is clamped to the range.  S.lock held.
 */
static bool progress_enough(const struct event *ev, uint64_t *done)
{
	ELOCK_HELD();
	struct timespec now;
	double since;

	if ((ev->type == HSMFS_EV_PRE_ACCESS || ev->type == HSMFS_EV_ARCHIVE) &&
	    ev->hint_end > ev->hint_start &&
	    *done > ev->hint_end - ev->hint_start)
		*done = ev->hint_end - ev->hint_start;
	if (*done <= ev->progress)
		return false;
	clock_gettime(CLOCK_MONOTONIC, &now);
	/* the deadline was last set timeout seconds before it */
	since = (double)(now.tv_sec - ev->deadline.tv_sec) +
		(now.tv_nsec - ev->deadline.tv_nsec) / 1e9 + S.cfg.timeout;
	return (double)(*done - ev->progress) >= (double)S.cfg.progress_floor * since;
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
	mono_after(&ev->deadline, S.cfg.timeout);
	eunlock();
}

/*
 * ARCHIVED: before its ALLOW, the archive hook says which version (and
 * where) the snapshot is at the origin now.  Kept with the event for
 * the archiver; a later ARCHIVED replaces it.
 */
void events_archived(struct hook *h, const struct proto_archived *a)
{
	struct event *ev;
	char *v, *o;

	v = strndup(a->version.p ? a->version.p : "", a->version.len);
	o = a->origin.len ? strndup(a->origin.p, a->origin.len) : NULL;
	elock();
	ev = find_event(a->id);
	if (v && (!a->origin.len || o) && ev &&
	    (ev->type == HSMFS_EV_ARCHIVE || ev->type == HSMFS_EV_ARCHIVE_NAME) && ev->hook == h &&
	    ev->st == EV_SENT && !memchr(a->version.p ? a->version.p : "", 0, a->version.len) &&
	    (!o || !memchr(a->origin.p, 0, a->origin.len))) {
		free(ev->new_version);
		free(ev->new_origin);
		ev->new_version = v;
		ev->new_origin = o;
		v = o = NULL;
	}
	eunlock();
	free(v);
	free(o);
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
 * read, a check, one that comes later) wait for the answer.
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
	    ev->stage_fd < 0 || !ev->parked || ev->ntargets)
		goto out;
	fs = ev->fs;
	/*
	 * A user's change in flight may be over these bytes; one that is done
	 * marked its bytes present (events.h: any -> present (user's)), or
	 * shrank the file below them, which the checks below see.
	 */
	if (fs->changes || fs->evicting || (fs->flags & META_F_STALE) ||
	    fs->dsums ||
	    fill_completes_digest(fs, ev->hint_start, ev->hint_end))
		goto out; /* what the answer may fill: the hint range; chunks checked first */
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
		S.st.early_reads++;
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
