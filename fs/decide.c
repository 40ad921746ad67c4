/* decide.c - the decision rule of reads and permission events: see decide.h */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include "cache.h"
#include "decide.h"
#include "engine.h"
#include "event.h"
#include "evict.h"
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
 * step (a hit is counted, readahead driven).  On mounts with cache
 * limits a new fill is admitted first; *reserved is what was admitted
 * and not yet handed to an event.  With may_block, admission drops
 * S.lock and waits for room; without, a fill that does not fit now
 * returns 2 (the evictor is asked to make room; the room thread waits
 * for it).  S.lock held.
 */
int access_step(struct inode *in, struct fstate *fs, uint64_t start, uint64_t end,
		struct front_req *req, bool first, bool may_block,
		uint64_t *reserved, struct event **ret_ev)
{
	ELOCK_HELD();
	bool over = false; /* admitted past the limit: see below */

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
			uint64_t hs, he, hint_start, hint_end, need, gap_end, ff;
			bool beside, stream, whole;

			if (!have_fill_hook() && S.cfg.nohook_fail)
				return -EIO;
			res = recently_failed(fs, miss.start, miss.end, req);
			if (res)
				return res;
			/* hint: the chunk-aligned span, within the same gap */
			hs = miss.start & ~(S.cfg.chunk - 1);
			he = (miss.end + S.cfg.chunk - 1) & ~(S.cfg.chunk - 1);
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
			 * A random miss asks only the first_fill-aligned
			 * blocks around it: a random reader fetches what it
			 * reads and little more (and a cache tier in front of
			 * the origin sees the same blocks from every host),
			 * where a whole chunk a read was 256 times a 4 KiB
			 * read.  Random: not in a stream, and not going on
			 * from bytes being fetched (the kernel's window, its
			 * requests out of order).  Bytes merely present
			 * (another read's block, a prefetch) do not make a
			 * stream unless this reader read them (ra_seen, in
			 * in_stream()).  A reader that goes on from there is
			 * a young stream: its fills grow four times at each
			 * miss, up to a chunk, then readahead takes over
			 * (readahead.c).  A read at the file's start (cat,
			 * cp, tar: the reader goes on at once) waits for its
			 * first window (the kernel's, or first_fill if
			 * larger) and the rest of its chunk is asked now
			 * beside it, in an event of its own it does not wait
			 * for.  Not for a file with chunk digests: its fills
			 * are whole chunks (start_fill()).
			 */
			gap_end = hint_end;
			beside = false;
			ff = S.cfg.first_fill;
			/*
			 * A young stream goes on only from where its last
			 * fill ended (a first_fill block of slack) or its
			 * last read: the kernel's windows of slack would take
			 * a random read near the last one for a reader going on.
			 */
			stream = in_stream(fs, miss.start) &&
				 (!fs->ra_grow || miss.start <= fs->ra_ahead + ff ||
				  miss.start == fs->ra_seen);
			/*
			 * A fill that would complete a file with a digest
			 * stays whole: its digest is checked before a byte of
			 * it is served (commit_fill()).
			 */
			whole = fs->sha256 && hint_start == 0 && hint_end == fs->size;
			if (first && ff && !fs->dsums && !whole && !stream &&
			    !(miss.start >= PAGE && inflight_over(fs, miss.start - PAGE, miss.start))) {
				uint64_t head = ff > S.cfg.kernel_ra ? ff : S.cfg.kernel_ra;

				if (hint_start == 0 && miss.start == 0) {
					fs->ra_grow = 0; /* a reader from the start goes on */
					if (hint_end > 2 * head) {
						he = (miss.end + head - 1) & ~(head - 1);
						if (he < hint_end)
							hint_end = he;
						beside = true;
					}
				} else if (hint_end - hint_start > 2 * ff) {
					hs = miss.start & ~(ff - 1);
					he = (miss.end + ff - 1) & ~(ff - 1);
					if (hs > hint_start)
						hint_start = hs;
					if (he < hint_end)
						hint_end = he;
					fs->ra_grow = ff * 4 >= S.cfg.chunk ? 0 : ff * 4;
				}
			} else if (first && ff && fs->ra_grow && !fs->dsums && !whole) {
				/*
				 * A young stream (its first misses after a random
				 * one): four times its last fill, so that random
				 * reads that land near each other by chance do not
				 * fetch whole chunks.
				 */
				he = (hint_start & ~(ff - 1)) + fs->ra_grow;
				if (he < miss.end)
					he = (miss.end + ff - 1) & ~(ff - 1);
				if (he < hint_end)
					hint_end = he;
				fs->ra_grow = fs->ra_grow * 4 >= S.cfg.chunk ? 0 : fs->ra_grow * 4;
			}
			{
				/* a file with chunk digests: its whole chunks (route.h) */
				uint64_t ws = miss.start, we = miss.end;

				fill_span(fs, &ws, &we, &hint_start, &hint_end);
			}
			/* admission: room for the fill before it may write */
			need = ((hint_end + PAGE - 1) & ~(PAGE - 1)) - (hint_start & ~(PAGE - 1));
			if (S.cfg.cache_limited && *reserved < need && !may_block && !over) {
				/* the cache's lock comes after S.lock */
				if (cache_try_admit(need))
					return 2;
				if (*reserved)
					cache_unreserve(*reserved);
				*reserved = need;
			}
			if (S.cfg.cache_limited && *reserved < need && !over) {
				struct timespec deadline;

				mono_after(&deadline, S.cfg.timeout);
				eunlock();
				if (*reserved)
					cache_unreserve(*reserved);
				*reserved = 0;
				res = cache_admit(need, &deadline);
				elock();
				/*
				 * Nothing can be evicted (all pinned, open, dirty):
				 * a limit of ours never fails a read (SPEC 10).  The
				 * fill goes ahead past cache_max and the file is
				 * evicted again once its last descriptor is closed
				 * (events_released(): cache_over_closed()), so the
				 * bytes are kept only while it is read.
				 */
				if (res == -ENOSPC) {
					over = true;
					fs->over = true;
					cache_over(need);
				} else if (res) {
					return res;
				} else {
					*reserved = need;
				}
				continue; /* the world may have changed meanwhile */
			}
			ev = start_fill(in, fs, miss.start, miss.end, hint_start, hint_end,
					req, false, *reserved, &res);
			if (!ev)
				return res;
			*reserved = 0;
			if (beside && fill_ahead(in, fs, hint_end, gap_end, req, 1, &S.st.beside,
						 NULL, false) > hint_end)
				asked_end = gap_end;
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
