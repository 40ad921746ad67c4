/* fill.c - a new fill's size and admission: see fill.h */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include "cache.h"
#include "clock.h"
#include "engine.h"
#include "fill.h"
#include "fstate.h"
#include "ranges.h"
#include "route.h"

/* See fill.h. */
bool in_stream(const struct fstate *fs, uint64_t off)
{
	ELOCK_HELD();
	return (fs->ra_ahead && off >= fs->ra_lo && off <= fs->ra_ahead + S.cfg.kernel_ra) ||
	       (fs->ra_seen && off >= fs->ra_seen && off <= fs->ra_seen + 2 * S.cfg.kernel_ra);
}

/* See fill.h. */
void fill_size(struct fstate *fs, const struct range *miss, bool first,
	       struct fill_hint *ret)
{
	ELOCK_HELD();
	uint64_t hs, he, hint_start, hint_end, ff;
	struct range gap;
	bool stream, whole;

	/* hint: the chunk-aligned span, within the same gap */
	hs = miss->start & ~(S.cfg.chunk - 1);
	he = (miss->end + S.cfg.chunk - 1) & ~(S.cfg.chunk - 1);
	if (he > fs->size)
		he = fs->size;
	hint_start = miss->start;
	hint_end = miss->end;
	for (uint64_t pos = hs;
	     pos < he && rs_missing(&fs->present, pos, he, &gap, 1);
	     pos = gap.end) {
		if (gap.start <= miss->start && gap.end >= miss->end) {
			hint_start = gap.start;
			hint_end = gap.end;
			break;
		}
	}
	/* and apart from what other events fetch */
	inflight_clip(fs, miss->start, miss->end, &hint_start, &hint_end);
	/*
	 * A random miss asks only the first_fill-aligned blocks around it:
	 * a random reader fetches what it reads and little more (and a
	 * cache tier in front of the origin sees the same blocks from every
	 * host), where a whole chunk a read was 256 times a 4 KiB read.
	 * Random: not in a stream, and not going on from bytes being fetched
	 * (the kernel's window, its requests out of order).  Bytes merely
	 * present (another read's block, a prefetch) do not make a stream
	 * unless this reader read them (ra_seen, in in_stream()).  A reader
	 * that goes on from there is a young stream: its fills grow four
	 * times at each miss, up to a chunk, then readahead takes over
	 * (readahead.c).  A read at the file's start (cat, cp, tar: the
	 * reader goes on at once) waits for its first window (the kernel's,
	 * or first_fill if larger) and the rest of its chunk is asked now
	 * beside it, in an event of its own it does not wait for.  Not for a
	 * file with chunk digests: its fills are whole chunks (start_fill()).
	 */
	ret->gap_end = hint_end;
	ret->beside = false;
	ff = S.cfg.first_fill;
	/*
	 * A young stream goes on only from where its last fill ended (a
	 * first_fill block of slack) or its last read: the kernel's windows
	 * of slack would take a random read near the last one for a reader
	 * going on.
	 */
	stream = in_stream(fs, miss->start) &&
		 (!fs->ra_grow || miss->start <= fs->ra_ahead + ff ||
		  miss->start == fs->ra_seen);
	/*
	 * A fill that would complete a file with a digest stays whole: its
	 * digest is checked before a byte of it is served (commit_fill()).
	 */
	whole = fs->sha256 && hint_start == 0 && hint_end == fs->size;
	if (first && ff && !fs->dsums && !whole && !stream &&
	    !(miss->start >= PAGE && inflight_over(fs, miss->start - PAGE, miss->start))) {
		uint64_t head = ff > S.cfg.kernel_ra ? ff : S.cfg.kernel_ra;

		if (hint_start == 0 && miss->start == 0) {
			fs->ra_grow = 0; /* a reader from the start goes on */
			if (hint_end > 2 * head) {
				he = (miss->end + head - 1) & ~(head - 1);
				if (he < hint_end)
					hint_end = he;
				ret->beside = true;
			}
		} else if (hint_end - hint_start > 2 * ff) {
			hs = miss->start & ~(ff - 1);
			he = (miss->end + ff - 1) & ~(ff - 1);
			if (hs > hint_start)
				hint_start = hs;
			if (he < hint_end)
				hint_end = he;
			fs->ra_grow = ff * 4 >= S.cfg.chunk ? 0 : ff * 4;
		}
	} else if (first && ff && fs->ra_grow && !fs->dsums && !whole) {
		/*
		 * A young stream (its first misses after a random one): four
		 * times its last fill, so that random reads that land near
		 * each other by chance do not fetch whole chunks.
		 */
		he = (hint_start & ~(ff - 1)) + fs->ra_grow;
		if (he < miss->end)
			he = (miss->end + ff - 1) & ~(ff - 1);
		if (he < hint_end)
			hint_end = he;
		fs->ra_grow = fs->ra_grow * 4 >= S.cfg.chunk ? 0 : fs->ra_grow * 4;
	}
	{
		/* a file with chunk digests: its whole chunks (route.h) */
		uint64_t ws = miss->start, we = miss->end;

		fill_span(fs, &ws, &we, &hint_start, &hint_end);
	}
	ret->start = hint_start;
	ret->end = hint_end;
}

/* See fill.h. */
int fill_admit(struct fstate *fs, uint64_t start, uint64_t end, enum admit how,
	       uint64_t *reserved, bool *over)
{
	ELOCK_HELD();
	uint64_t need = ((end + PAGE - 1) & ~(PAGE - 1)) - (start & ~(PAGE - 1));
	struct timespec deadline;
	int res;

	if (!S.cfg.cache_limited || *over || *reserved >= need)
		return 0;
	if (how != ADMIT_WAIT) {
		/* the cache's lock comes after S.lock */
		if (cache_try_admit(need))
			return how == ADMIT_NOW ? -ENOSPC : 2;
		if (*reserved)
			cache_unreserve(*reserved);
		*reserved = need;
		return 0;
	}
	mono_after(&deadline, S.cfg.timeout);
	eunlock();
	if (*reserved)
		cache_unreserve(*reserved);
	*reserved = 0;
	res = cache_admit(need, &deadline);
	elock();
	/*
	 * Nothing can be evicted (all pinned, open, dirty): a limit of ours
	 * never fails a read (SPEC 10).  The fill goes ahead past cache_max
	 * and the file is evicted again once its last descriptor is closed
	 * (events_released(): cache_over_closed()), so the bytes are kept
	 * only while it is read.
	 */
	if (res == -ENOSPC) {
		*over = true;
		fs->over = true;
		cache_over(need);
	} else if (res) {
		return res;
	} else {
		*reserved = need;
	}
	return 1; /* the world may have changed meanwhile */
}
