/* decide.c - the decision rule of reads and permission events: see decide.h */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include "events.h"
#include "decide.h"
#include "engine.h"
#include "event.h"
#include "evict.h"
#include "fill.h"
#include "fstate.h"
#include "hooks.h"
#include "inode.h"
#include "meta.h"
#include "ranges.h"
#include "readahead.h"
#include "route.h"

/*
 * Did a fill of [start, end) of fs for the same thread fail a moment
 * ago (timed out, or the hook failed it with EIO or ETIMEDOUT: the
 * origin failed; a policy's deny is asked again), with no hook joined
 * since?
 * That is the kernel reading a failed readahead page once more for the
 * same read(2): asking again would wait the timeout twice, or run the
 * hook's retry policy twice.  It fails at once with the same error.
 * Another thread's read (a user's retry) asks again.  S.lock held.
 */
static int recently_failed(const struct fstate *fs, uint64_t start, uint64_t end,
			   struct front_req *req)
{
	ELOCK_HELD();
	struct caller who;

	if (!req || !fs->to_at)
		return 0; /* no failed fill to remember: the usual case */
	S.cfg.front.caller(req, &who);
	if (who.pid == fs->to_pid && start < fs->to_hi &&
	    fs->to_lo < end && fs->to_joins == E.joins &&
	    mono_ms() - fs->to_at < RETRY_FAIL_MS)
		return fs->to_err;
	return 0;
}

/* The page-aligned span of a read of [off, off + len), within the file. */
void read_span(const struct fstate *fs, uint64_t off, uint64_t len,
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
 * step (a hit is counted, readahead driven).  A new fill's size and
 * admission are fill.h's: *reserved is what was admitted and not yet
 * handed to an event.  With may_block, admission drops S.lock and waits
 * for room; without, a fill that does not fit now returns 2 (the room
 * thread waits for the evictor).  S.lock held.
 */
int access_step(struct inode *in, struct fstate *fs, uint64_t start, uint64_t end,
		struct front_req *req, bool first, bool may_block,
		uint64_t *reserved, struct event **ret_ev)
{
	ELOCK_HELD();
	bool over = false; /* admitted past the limit: see below */

	for (;;) {
		struct range miss;
		struct event *ev;
		uint64_t asked_end;
		int res = 0;

		evict_wait(fs); /* its present ranges are being changed */
		if (fs->flags & META_F_STALE)
			return -EIO;
		if (start >= end || !rs_missing(&fs->present, start, end, &miss, 1)) {
			if (first) {
				S.st.hits++;
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
			struct fill_hint hint;

			if (!have_fill_hook() && S.cfg.nohook_fail)
				return -EIO;
			res = recently_failed(fs, miss.start, miss.end, req);
			if (res)
				return res;
			fill_size(fs, &miss, first, &hint);
			res = fill_admit(fs, hint.start, hint.end,
					 may_block ? ADMIT_WAIT : ADMIT_PARKED, reserved, &over);
			if (res == 1)
				continue; /* S.lock was dropped */
			if (res)
				return res;
			ev = start_fill(in, fs, miss.start, miss.end, hint.start, hint.end,
					req, false, *reserved, &res);
			if (!ev)
				return res;
			*reserved = 0;
			if (hint.beside && fill_ahead(in, fs, hint.end, hint.gap_end, req, 1,
						      &S.st.beside, NULL, false) > hint.end)
				asked_end = hint.gap_end;
		}
		if (first) {
			if (ev->hint_end > asked_end)
				asked_end = ev->hint_end;
			read_ahead(in, fs, &miss, asked_end, req);
			fs->ra_seen = end;
			/* what an eviction of the open file must leave alone */
			fs->hot_lo = miss.start & ~(S.cfg.chunk - 1);
			fs->hot_hi = asked_end > fs->ra_ahead ? asked_end : fs->ra_ahead;
		}
		*ret_ev = ev;
		return 1;
	}
}


/*
 * QUIET is kept per hook: a set of store inode numbers (hashset.h) of at
 * most HOOK_QUIET_MAX, past which a QUIET is not kept (the hook gets
 * more events, never fewer than it should).  S.lock held.
 */
static bool quiet_has(const struct hook *h, uint64_t ino)
{
	ELOCK_HELD();
	return ino && hashset_find(&h->quiet, ino) != HASHSET_NONE;
}

/* S.lock held. */
void quiet_add(struct hook *h, uint64_t ino)
{
	ELOCK_HELD();
	if (ino)
		(void)hashset_add(&h->quiet, ino, NULL); /* full or no memory: not kept */
}

/* Must h answer a permission event of type of in?  S.lock held. */
static bool perm_target(const struct hook *h, struct inode *in, uint32_t type)
{
	ELOCK_HELD();
	return (h->mask & HSMFS_MASK(type)) && maybe_in_subtree(h, in) &&
	       (type != HSMFS_EV_PRE_MODIFY || !quiet_has(h, inode_ino(in)));
}

bool perm_wanted(struct inode *in, uint32_t type)
{
	ELOCK_HELD();
	for (const struct hook *h = E.hooks; h; h = h->next)
		if (perm_target(h, in, type))
			return true;
	return __builtin_expect(E.nabsent, 0) && absent_wants(type);
}

/*
 * Start a permission event (PRE_MODIFY of [start, end), or OPEN_PERM
 * with the open flags in start) of in: 0 (no hook must answer), 1 with
 * *ret_ev (one reference, the caller's), or -errno.  Every hook
 * subscribed must answer.  S.lock held.
 */
int start_perm(struct inode *in, uint32_t type, uint64_t start, uint64_t end,
	       struct front_req *req, struct event **ret_ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	struct event *ev;
	struct hook *h;

	for (h = E.hooks; h; h = h->next)
		if (perm_target(h, in, type))
			break;
	/* a hook of the last daemon's, not back yet (route.h), is asked too */
	if (!h && !(__builtin_expect(E.nabsent, 0) && absent_wants(type))) {
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
	/* and the hooks of the last daemon's not back yet, of either kind */
	if (__builtin_expect(E.nabsent, 0))
		wait_absent(ev, true);
	ev_set(ev, EV_SENT);
	if (!ev->ntargets)
		complete(ev, 0);
	*ret_ev = ev;
	return 1;
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
	/*
	 * a larger file: what its reader's first read from the start asks
	 * (the kernel's first window, or first_fill if larger), the rest of
	 * its chunk asked beside that read; first_fill=0: the chunk
	 */
	limit = fs->size;
	if (limit > max_bytes && S.cfg.first_fill) {
		uint64_t head = S.cfg.first_fill > S.cfg.kernel_ra ? S.cfg.first_fill : S.cfg.kernel_ra;

		limit = head < max_bytes ? head : max_bytes;
	} else if (limit > max_bytes) {
		limit = max_bytes;
	}
	fill_ahead(in, fs, 0, limit, NULL, UINT_MAX, &S.st.readahead, &asked, false);
	eunlock();
	return asked;
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
