/*
 * layout.c - where a file's data is, as its user sees it (layout.h).
 */
#include <errno.h>
#include <unistd.h>

#include "layout.h"

/* Is off missing?  If so, *ret_end gets the end of its missing run (<= size). */
static int missing_at(const struct rangeset *present, uint64_t size, uint64_t off,
		      uint64_t *ret_end)
{
	struct range r;

	if (!rs_missing(present, off, size, &r, 1) || r.start != off)
		return 0;
	*ret_end = r.end;
	return 1;
}

int64_t layout_seek(const struct rangeset *present, uint64_t size, uint64_t off, int whence,
		    layout_store_seek seek, void *arg)
{
	uint64_t end;
	int64_t s;
	struct range r;

	if (off >= size)
		return -ENXIO;
	if (whence == SEEK_DATA) {
		/* the nearer of the store's next data and the next missing byte */
		uint64_t best = size;

		if (rs_missing(present, off, size, &r, 1))
			best = r.start;
		if (best == off)
			return (int64_t)off;
		s = seek(arg, off, SEEK_DATA);
		if (s < 0 && s != -ENXIO)
			return s;
		if (s >= 0 && (uint64_t)s < best)
			best = (uint64_t)s;
		return best < size ? (int64_t)best : -ENXIO;
	}
	if (whence != SEEK_HOLE)
		return -EINVAL;
	/* the store's next hole, past every missing run it falls in */
	while (off < size) {
		if (missing_at(present, size, off, &end)) {
			off = end;
			continue;
		}
		s = seek(arg, off, SEEK_HOLE);
		if (s == -ENXIO)
			return (int64_t)size; /* the store is shorter: its end */
		if (s < 0)
			return s;
		if ((uint64_t)s >= size)
			return (int64_t)size;
		if (!missing_at(present, size, (uint64_t)s, &end))
			return s;
		off = end;
	}
	return (int64_t)size;
}

uint64_t layout_blocks(const struct rangeset *present, uint64_t size, uint64_t store_blocks)
{
	uint64_t have = 0;

	for (uint32_t i = 0; i < present->n && present->v[i].start < size; i++)
		have += (present->v[i].end < size ? present->v[i].end : size) -
			present->v[i].start;
	return store_blocks + (size - have + 511) / 512;
}
