/* ranges.c - see ranges.h */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ranges.h"

/* Index of the first range whose end >= pos (n if none). */
static uint32_t first_ending_at_or_after(const struct rangeset *rs, uint64_t pos)
{
	uint32_t lo = 0, hi = rs->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (rs->v[mid].end < pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int reserve(struct rangeset *rs, uint32_t n)
{
	struct range *v;
	uint32_t cap;

	if (n <= rs->cap)
		return 0;
	if (n > RANGES_MAX)
		return -E2BIG;
	cap = rs->cap ? rs->cap : 4;
	while (cap < n)
		cap = cap > RANGES_MAX / 2 ? RANGES_MAX : cap * 2;
	v = realloc(rs->v, (size_t)cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	rs->v = v;
	rs->cap = cap;
	return 0;
}

int rs_add(struct rangeset *rs, uint64_t start, uint64_t end)
{
	uint32_t i, j;
	int res;

	if (start >= end)
		return 0;
	/* ranges i..j-1 overlap or touch [start, end) and merge into one */
	i = first_ending_at_or_after(rs, start);
	for (j = i; j < rs->n && rs->v[j].start <= end; j++)
		;
	if (i == j) {
		res = reserve(rs, rs->n + 1);
		if (res)
			return res;
		memmove(&rs->v[i + 1], &rs->v[i], (rs->n - i) * sizeof(*rs->v));
		rs->v[i] = (struct range){ start, end };
		rs->n++;
		return 0;
	}
	if (rs->v[i].start < start)
		start = rs->v[i].start;
	if (rs->v[j - 1].end > end)
		end = rs->v[j - 1].end;
	rs->v[i] = (struct range){ start, end };
	memmove(&rs->v[i + 1], &rs->v[j], (rs->n - j) * sizeof(*rs->v));
	rs->n -= j - i - 1;
	return 0;
}

int rs_remove(struct rangeset *rs, uint64_t start, uint64_t end)
{
	uint32_t i, j;
	int res;

	if (start >= end)
		return 0;
	i = first_ending_at_or_after(rs, start + 1); /* end > start */
	if (i == rs->n || rs->v[i].start >= end)
		return 0;
	/* split one range in two */
	if (rs->v[i].start < start && rs->v[i].end > end) {
		res = reserve(rs, rs->n + 1);
		if (res)
			return res;
		memmove(&rs->v[i + 1], &rs->v[i], (rs->n - i) * sizeof(*rs->v));
		rs->v[i].end = start;
		rs->v[i + 1].start = end;
		rs->n++;
		return 0;
	}
	if (rs->v[i].start < start) {
		rs->v[i].end = start;
		i++;
	}
	for (j = i; j < rs->n && rs->v[j].end <= end; j++)
		;
	if (j < rs->n && rs->v[j].start < end)
		rs->v[j].start = end;
	memmove(&rs->v[i], &rs->v[j], (rs->n - j) * sizeof(*rs->v));
	rs->n -= j - i;
	return 0;
}

bool rs_contains(const struct rangeset *rs, uint64_t start, uint64_t end)
{
	uint32_t i;

	if (start >= end)
		return true;
	i = first_ending_at_or_after(rs, start + 1);
	return i < rs->n && rs->v[i].start <= start && rs->v[i].end >= end;
}

size_t rs_missing(const struct rangeset *rs, uint64_t start, uint64_t end,
		  struct range *out, size_t max)
{
	size_t k = 0;
	uint32_t i;

	if (start >= end)
		return 0;
	for (i = first_ending_at_or_after(rs, start + 1);
	     i < rs->n && rs->v[i].start < end && start < end; i++) {
		if (rs->v[i].start > start) {
			if (k < max)
				out[k] = (struct range){ start, rs->v[i].start };
			k++;
		}
		start = rs->v[i].end;
	}
	if (start < end) {
		if (k < max)
			out[k] = (struct range){ start, end };
		k++;
	}
	return k;
}

uint64_t rs_total(const struct rangeset *rs)
{
	uint64_t t = 0;
	uint32_t i;

	for (i = 0; i < rs->n; i++)
		t += rs->v[i].end - rs->v[i].start;
	return t;
}

void rs_clear(struct rangeset *rs)
{
	if (!rs)
		return;
	free(rs->v);
	rs->v = NULL;
	rs->n = rs->cap = 0;
}

int rs_copy(struct rangeset *dst, const struct rangeset *src)
{
	struct range *v = NULL;

	if (src->n) {
		v = malloc((size_t)src->n * sizeof(*v));
		if (!v)
			return -ENOMEM;
		memcpy(v, src->v, (size_t)src->n * sizeof(*v));
	}
	free(dst->v);
	dst->v = v;
	dst->n = dst->cap = src->n;
	return 0;
}

size_t rs_encode_size(const struct rangeset *rs)
{
	return (size_t)rs->n * 16;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void rs_encode(const struct rangeset *rs, uint8_t *buf)
{
	for (uint32_t i = 0; i < rs->n; i++) {
		put_le64(buf + 16 * i, rs->v[i].start);
		put_le64(buf + 16 * i + 8, rs->v[i].end);
	}
}

int rs_decode(const uint8_t *buf, size_t len, struct rangeset *ret)
{
	struct rangeset rs = RANGESET_INIT;
	size_t n = len / 16, i;

	if (len % 16 || n > RANGES_MAX)
		return -EINVAL;
	if (n && reserve(&rs, n))
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		uint64_t s = get_le64(buf + 16 * i), e = get_le64(buf + 16 * i + 8);

		if (s >= e || (i && s <= rs.v[i - 1].end)) {
			rs_clear(&rs);
			return -EINVAL;
		}
		rs.v[i] = (struct range){ s, e };
	}
	rs.n = n;
	rs_clear(ret);
	*ret = rs;
	return 0;
}
