/* readahead.c - see engine.h */
#include <stdbool.h>
#include <stdint.h>
#include "cache.h"
#include "engine.h"
#include "fill.h"
#include "fstate.h"
#include "ranges.h"
#include "readahead.h"
#include "route.h"

/* See engine.h. */
uint64_t fill_ahead(struct inode *in, struct fstate *fs, uint64_t pos, uint64_t limit,
		    struct front_req *req, unsigned max, uint64_t *count,
		    uint64_t *ret_asked, bool stream)
{
	ELOCK_HELD();
	uint64_t chunk = S.cfg.chunk, asked = 0;
	unsigned started = 0;

	for (; pos < limit && started < max; pos = (pos & ~(chunk - 1)) + chunk) {
		uint64_t ce = (pos & ~(chunk - 1)) + chunk, reserved = 0;
		struct range gap;
		struct event *ev;
		bool over = false;
		int res;

		if (ce > limit)
			ce = limit;
		if (!rs_missing(&fs->present, pos, ce, &gap, 1))
			continue;
		if (inflight_over(fs, gap.start, gap.end))
			continue;
		/* each chunk's gap (fill.h), only if it fits now */
		if (fill_admit(fs, gap.start, gap.end, ADMIT_NOW, &reserved, &over))
			break;
		ev = start_fill(in, fs, gap.start, gap.end, gap.start, gap.end, req, true,
				reserved, &res);
		if (!ev) {
			if (reserved)
				cache_unreserve(reserved);
			break;
		}
		ev->stream = stream;
		asked += gap.end - gap.start;
		started++;
		(*count)++;
	}
	if (ret_asked)
		*ret_asked = asked;
	return pos;
}

/*
 * Readahead of sequential misses.  A stream is misses that move forward
 * chunk by chunk, each into a chunk after the last one's and no further
 * than in_stream() allows (a kernel window past what was asked, or two
 * past where the last read ended, so a reader going on from present
 * bytes is one too); misses in the same chunk (the kernel's own
 * concurrent readahead requests, or several readers) leave it as it
 * is, any other miss ends it.  Each miss that goes on a stream doubles
 * its window (two chunks at first, up to RA_MAX), and the missing
 * chunks of it are asked for now,
 * one event each, so that fetches overlap the reading and a hook with
 * several connections runs them in parallel.  Scattered reads and mmap
 * faults of a few pages raise only the events they need.  asked_end is
 * where the reader's own fill (and any beside it) ends.  S.lock held.
 */
void read_ahead(struct inode *in, struct fstate *fs, const struct range *miss,
		uint64_t asked_end, struct front_req *req)
{
	ELOCK_HELD();
	uint64_t chunk = S.cfg.chunk, pos, limit;

	if (fs->ra_ahead && miss->start / chunk == fs->ra_lo / chunk) {
		/* the same chunk again; what was asked may have grown */
		if (miss->start <= fs->ra_ahead && asked_end > fs->ra_ahead)
			fs->ra_ahead = asked_end;
		return;
	}
	if (!in_stream(fs, miss->start)) {
		fs->ra_lo = miss->start;
		fs->ra_ahead = asked_end;
		fs->ra_window = 0;
		return;
	}
	fs->ra_lo = miss->start;
	if (asked_end > fs->ra_ahead)
		fs->ra_ahead = asked_end;
	if (fs->ra_grow)
		return; /* young: its own fills grow first (decide.c) */
	/*
	 * A window of two chunks at a stream's second miss, doubling at
	 * each miss after, up to RA_MAX: a link with a long round trip
	 * keeps a window's worth in flight.
	 */
	fs->ra_window = fs->ra_window ? fs->ra_window * 2 : 2 * chunk;
	if (fs->ra_window > RA_MAX)
		fs->ra_window = RA_MAX;
	limit = asked_end + fs->ra_window;
	if (limit > fs->size)
		limit = fs->size;
	pos = fill_ahead(in, fs, fs->ra_ahead, limit, req, 16, &S.st.readahead, NULL, true);
	if (pos > fs->ra_ahead)
		fs->ra_ahead = pos;
}
