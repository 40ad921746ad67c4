/*
 * ranges.h - a set of byte ranges: which parts of a file are present.
 *
 * Pure module: no I/O, no locks (the owner serializes access).
 *
 * Invariants of a struct rangeset between calls:
 *   - v[0..n) are half-open [start, end) with start < end;
 *   - sorted by start, and neither overlapping nor touching
 *     (v[i].end < v[i+1].start), so every set has one canonical form;
 *   - n <= RANGES_MAX; cap >= n; v is NULL iff cap == 0.
 * Every operation keeps them or fails leaving the set unchanged.
 * Lookups are O(log n); add and remove are O(log n + moved entries).
 */
#ifndef HSMFS_RANGES_H
#define HSMFS_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Most separate ranges one file may have; past it, adds fail -E2BIG. */
#define RANGES_MAX (1u << 20)

struct range {
	uint64_t start; /* first byte */
	uint64_t end;   /* one past the last byte; > start */
};

struct rangeset {
	struct range *v; /* sorted, disjoint, non-adjacent */
	uint32_t n;      /* ranges in use */
	uint32_t cap;    /* allocated slots */
};

#define RANGESET_INIT { NULL, 0, 0 }

/* Mark [start, end) present, merging with neighbours.  0, -ENOMEM, -E2BIG. */
int rs_add(struct rangeset *rs, uint64_t start, uint64_t end);

/* Mark [start, end) missing.  0, -ENOMEM, -E2BIG (a split past the limit). */
int rs_remove(struct rangeset *rs, uint64_t start, uint64_t end);

/* Is all of [start, end) present?  An empty range is. */
bool rs_contains(const struct rangeset *rs, uint64_t start, uint64_t end);

/*
 * The missing parts of [start, end), in order, into out[0..max).
 * Returns how many there are in all (may exceed max: only max written).
 */
size_t rs_missing(const struct rangeset *rs, uint64_t start, uint64_t end,
		  struct range *out, size_t max);

/* Bytes present in all. */
uint64_t rs_total(const struct rangeset *rs);

/* Release memory; the set becomes empty.  Accepts NULL. */
void rs_clear(struct rangeset *rs);

/* Copy src into *dst (dst's old contents released on success). */
int rs_copy(struct rangeset *dst, const struct rangeset *src);

/*
 * Wire/disk form: n pairs of little-endian u64 (start, end).
 * rs_encode_size() bytes are written by rs_encode().  rs_decode()
 * replaces *ret on success and rejects (-EINVAL) a length that is not
 * a multiple of 16, more than RANGES_MAX ranges, or pairs that break
 * the invariants above; *ret is untouched on error.
 */
size_t rs_encode_size(const struct rangeset *rs);
void rs_encode(const struct rangeset *rs, uint8_t *buf);
int rs_decode(const uint8_t *buf, size_t len, struct rangeset *ret);

#endif
