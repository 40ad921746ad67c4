/*
 * Unit tests for lib/layout.c, exhaustive on a small universe: every
 * file of U blocks whose blocks are each missing, present data or a
 * present hole of the store (a missing block's store copy a hole or
 * stale data), every offset, both whences, against a model that reads
 * the file as its user sees it: a missing block is data.  The answer
 * must never put a hole where the user sees data (a copy would write
 * zeros), and must be exact: the next data, the next present hole.
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "layout.h"
#include "tap.h"

#define U 7   /* blocks in the file */
#define B 100 /* bytes a block */

/* a block: 0 missing (store hole), 1 missing (stale store data), 2 data, 3 hole */
static int blk[U];

static int64_t store_seek(void *arg, uint64_t off, int whence)
{
	uint64_t size = *(uint64_t *)arg;

	if (off >= size)
		return -ENXIO;
	for (uint64_t b = off / B; b * B < size; b++) {
		bool data = blk[b] == 1 || blk[b] == 2;

		if (whence == SEEK_DATA && data)
			return (int64_t)(b * B > off ? b * B : off);
		if (whence == SEEK_HOLE && !data)
			return (int64_t)(b * B > off ? b * B : off);
	}
	return whence == SEEK_DATA ? -ENXIO : (int64_t)size;
}

static int64_t eio_seek(void *arg, uint64_t off, int whence)
{
	(void)arg, (void)off, (void)whence;
	return -EIO;
}

/* The user's view: data unless a present hole. */
static bool user_data(uint64_t b)
{
	return blk[b] != 3;
}

static int64_t model(uint64_t size, uint64_t off, int whence)
{
	if (off >= size)
		return -ENXIO;
	for (uint64_t b = off / B; b * B < size; b++)
		if (user_data(b) == (whence == SEEK_DATA))
			return (int64_t)(b * B > off ? b * B : off);
	return whence == SEEK_DATA ? -ENXIO : (int64_t)size;
}

int main(void)
{
	unsigned combos = 1, bad = 0, bad_blocks = 0;
	struct rangeset rs = RANGESET_INIT;

	for (int i = 0; i < U; i++)
		combos *= 4;
	for (unsigned c = 0; c < combos; c++) {
		uint64_t size = U * B, missing = 0, store = 0;
		unsigned x = c;

		rs_clear(&rs);
		for (int i = 0; i < U; i++, x /= 4) {
			blk[i] = (int)(x % 4);
			if (blk[i] >= 2)
				rs_add(&rs, (uint64_t)i * B, (uint64_t)(i + 1) * B);
			else
				missing += B;
			if (blk[i] == 1 || blk[i] == 2)
				store++;
		}
		/* a last block cut short: the size not a block multiple */
		for (uint64_t cut = 0; cut < 2; cut++) {
			size = U * B - cut * 37;
			for (uint64_t off = 0; off <= size + 3; off += 11) {
				for (int w = 0; w < 2; w++) {
					int whence = w ? SEEK_HOLE : SEEK_DATA;
					int64_t got = layout_seek(&rs, size, off, whence,
								  store_seek, &size);
					int64_t want = model(size, off, whence);

					if (got != want && bad++ < 5)
						ok(0, "combo %u size %llu off %llu %s: got %lld, want %lld",
						   c, (unsigned long long)size, (unsigned long long)off,
						   w ? "SEEK_HOLE" : "SEEK_DATA", (long long)got,
						   (long long)want);
				}
			}
		}
		if (layout_blocks(&rs, U * B, store * B / 512) !=
		    store * B / 512 + (missing + 511) / 512)
			bad_blocks++;
	}
	ok(!bad, "every file of %u blocks of 4 kinds, every offset, both whences: as the user sees it (%u wrong)",
	   U, bad);
	ok(!bad_blocks, "st_blocks counts the missing bytes as data (%u wrong)", bad_blocks);

	/* the store's errors other than ENXIO come back as they are */
	rs_clear(&rs);
	rs_add(&rs, 0, 10);
	ok(layout_seek(&rs, 100, 0, SEEK_HOLE, eio_seek, NULL) == -EIO,
	   "an error of the store's seek is returned");
	rs_clear(&rs);
	return tap_done();
}
