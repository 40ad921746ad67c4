/*
 * Unit tests for lib/ranges.c, exhaustive on a small universe: every
 * subset of U bytes is built, every add/remove of every range is applied
 * to it, and the result, contains() and missing() of every range are
 * compared with a bitmap model; the invariants are checked each time.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ranges.h"
#include "tap.h"

#define U 10

static int invariants_hold(const struct rangeset *rs)
{
	for (uint32_t i = 0; i < rs->n; i++) {
		if (rs->v[i].start >= rs->v[i].end)
			return 0;
		if (i && rs->v[i - 1].end >= rs->v[i].start)
			return 0;
	}
	return rs->n <= rs->cap;
}

static unsigned to_bits(const struct rangeset *rs)
{
	unsigned b = 0;

	for (uint32_t i = 0; i < rs->n; i++)
		for (uint64_t x = rs->v[i].start; x < rs->v[i].end; x++)
			b |= 1u << x;
	return b;
}

static void from_bits(struct rangeset *rs, unsigned bits)
{
	rs_clear(rs);
	for (unsigned x = 0; x < U; x++)
		if (bits & (1u << x))
			rs_add(rs, x, x + 1);
}

static unsigned span(unsigned s, unsigned e)
{
	return ((1u << e) - 1) & ~((1u << s) - 1);
}

int main(void)
{
	struct rangeset rs = RANGESET_INIT, back = RANGESET_INIT;
	unsigned long checks = 0, bad_add = 0, bad_rm = 0, bad_q = 0, bad_inv = 0;
	struct range out[U];

	for (unsigned bits = 0; bits < (1u << U); bits++) {
		for (unsigned s = 0; s < U; s++) {
			for (unsigned e = s + 1; e <= U; e++) {
				unsigned m = span(s, e);

				from_bits(&rs, bits);
				if (to_bits(&rs) != bits || !invariants_hold(&rs))
					bad_inv++;
				/* queries */
				if (rs_contains(&rs, s, e) != ((bits & m) == m))
					bad_q++;
				size_t k = rs_missing(&rs, s, e, out, U);
				unsigned miss = 0, runs = 0;
				for (size_t i = 0; i < k; i++) {
					if (out[i].start >= out[i].end ||
					    (i && out[i - 1].end >= out[i].start))
						bad_q++;
					miss |= span(out[i].start, out[i].end);
				}
				for (unsigned x = s; x < e; x++)
					if (!(bits & (1u << x)) &&
					    (x == s || (bits & (1u << (x - 1)))))
						runs++;
				if (miss != (m & ~bits) || k != runs)
					bad_q++;
				/* add */
				rs_add(&rs, s, e);
				if (to_bits(&rs) != (bits | m) || !invariants_hold(&rs))
					bad_add++;
				/* remove */
				from_bits(&rs, bits);
				rs_remove(&rs, s, e);
				if (to_bits(&rs) != (bits & ~m) || !invariants_hold(&rs))
					bad_rm++;
				if (rs_total(&rs) != (unsigned)__builtin_popcount(bits & ~m))
					bad_rm++;
				/* encode / decode round trip */
				uint8_t buf[16 * U];
				rs_encode(&rs, buf);
				if (rs_decode(buf, rs_encode_size(&rs), &back) ||
				    to_bits(&back) != to_bits(&rs) || back.n != rs.n)
					bad_inv++;
				checks++;
			}
		}
	}
	ok(!bad_inv, "construction, invariants and encode/decode (%lu cases)", checks);
	ok(!bad_q, "contains() and missing() against the bitmap model");
	ok(!bad_add, "add() against the bitmap model");
	ok(!bad_rm, "remove() and total() against the bitmap model");

	/* edge cases */
	rs_clear(&rs);
	ok(rs_add(&rs, 5, 5) == 0 && rs.n == 0, "empty add is a no-op");
	ok(rs_contains(&rs, 7, 7), "empty range is contained");
	ok(rs_add(&rs, 0, UINT64_MAX) == 0 && rs_contains(&rs, 123, UINT64_MAX),
	   "full 64-bit range");
	ok(rs_remove(&rs, UINT64_MAX - 1, UINT64_MAX) == 0 && rs.n == 1 &&
		   rs.v[0].end == UINT64_MAX - 1,
	   "remove at the top of the space");

	/* decode rejects what breaks the invariants */
	uint8_t b[48] = { 0 };
	rs_clear(&back);
	rs_add(&back, 1, 2);
	ok(rs_decode(b, 15, &back) == -EINVAL, "decode: length not a multiple of 16");
	ok(rs_decode(b, 16, &back) == -EINVAL, "decode: empty pair (start == end)");
	b[0] = 5; b[8] = 9; b[16] = 9; b[24] = 12;
	ok(rs_decode(b, 32, &back) == -EINVAL, "decode: touching pairs");
	b[16] = 3;
	ok(rs_decode(b, 32, &back) == -EINVAL, "decode: unsorted pairs");
	ok(back.n == 1 && back.v[0].start == 1, "decode failure leaves target alone");
	b[16] = 10;
	ok(rs_decode(b, 32, &back) == 0 && back.n == 2, "decode: valid pairs");
	ok(rs_decode(b, 0, &back) == 0 && back.n == 0, "decode: empty set");

	/* the limit */
	rs_clear(&rs);
	int res = 0;
	for (uint64_t i = 0; i < RANGES_MAX && !res; i++)
		res = rs_add(&rs, 2 * i, 2 * i + 1);
	ok(res == 0 && rs.n == RANGES_MAX, "RANGES_MAX ranges fit");
	ok(rs_add(&rs, 4 * (uint64_t)RANGES_MAX, 4 * (uint64_t)RANGES_MAX + 1) == -E2BIG &&
		   rs.n == RANGES_MAX,
	   "one more fails with E2BIG and changes nothing");
	ok(rs_remove(&rs, 2, 3) == 0 && rs.n == RANGES_MAX - 1, "remove still works at the limit");
	rs_clear(&rs);
	rs_clear(&back);
	return tap_done();
}
