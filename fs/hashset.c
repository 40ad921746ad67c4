/* hashset.c - see hashset.h */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "hashset.h"

/* Fibonacci hashing: the multiply spreads every bit of h into the top ones. */
static size_t home(const struct hashset *s, uint64_t h)
{
	return (size_t)((h * 0x9E3779B97F4A7C15ULL) >> s->shift);
}

static uint64_t hash_of(const struct hashset *s, uint64_t key)
{
	return s->hash ? s->hash(key) : key;
}

void hashset_init(struct hashset *s, size_t max, bool with_vals,
		  uint64_t (*hash)(uint64_t key))
{
	*s = (struct hashset){ .max = max, .with_vals = with_vals, .hash = hash };
}

void hashset_free(struct hashset *s)
{
	free(s->keys);
	free(s->vals);
	s->keys = s->vals = NULL;
	s->cap = s->n = 0;
	s->shift = 0;
}

size_t hashset_find(const struct hashset *s, uint64_t key)
{
	size_t mask = s->cap - 1;

	if (!s->n || !key)
		return HASHSET_NONE;
	for (size_t i = home(s, hash_of(s, key));; i = (i + 1) & mask) {
		if (s->keys[i] == key)
			return i;
		if (!s->keys[i])
			return HASHSET_NONE;
	}
}

size_t hashset_find_by(const struct hashset *s, uint64_t hash,
		       bool (*match)(uint64_t key, const void *probe), const void *probe)
{
	size_t mask = s->cap - 1;

	if (!s->n)
		return HASHSET_NONE;
	for (size_t i = home(s, hash);; i = (i + 1) & mask) {
		if (!s->keys[i])
			return HASHSET_NONE;
		if (match(s->keys[i], probe))
			return i;
	}
}

/* The empty slot key goes to (it is not held).  cap > 2 * n. */
static size_t slot_for(const struct hashset *s, uint64_t key)
{
	size_t i = home(s, hash_of(s, key));

	while (s->keys[i])
		i = (i + 1) & (s->cap - 1);
	return i;
}

/* Move every key into a table of cap slots.  0 or -ENOMEM (s unchanged). */
static int grow(struct hashset *s, size_t cap)
{
	struct hashset old = *s;
	uint64_t *keys, *vals = NULL;
	unsigned bits = 0;

	if (cap > SIZE_MAX / 2 / sizeof(*keys))
		return -ENOMEM;
	keys = calloc(cap, sizeof(*keys));
	if (!keys || (s->with_vals && !(vals = calloc(cap, sizeof(*vals))))) {
		free(keys);
		return -ENOMEM;
	}
	while (((size_t)1 << bits) < cap)
		bits++;
	s->keys = keys;
	s->vals = vals;
	s->cap = cap;
	s->shift = 64 - bits;
	for (size_t i = 0; i < old.cap; i++) {
		size_t j;

		if (!old.keys[i])
			continue;
		j = slot_for(s, old.keys[i]);
		s->keys[j] = old.keys[i];
		if (vals)
			vals[j] = old.vals[i];
	}
	free(old.keys);
	free(old.vals);
	return 0;
}

int hashset_add(struct hashset *s, uint64_t key, size_t *ret_pos)
{
	size_t i;

	if (!key)
		return -EINVAL;
	i = hashset_find(s, key);
	if (i != HASHSET_NONE) {
		if (ret_pos)
			*ret_pos = i;
		return 0;
	}
	if (s->n >= s->max)
		return -ENOSPC;
	if (2 * (s->n + 1) > s->cap) {
		int res = grow(s, s->cap ? 2 * s->cap : HASHSET_MIN_CAP);

		if (res)
			return res;
	}
	i = slot_for(s, key);
	s->keys[i] = key;
	if (s->vals)
		s->vals[i] = 0;
	s->n++;
	if (ret_pos)
		*ret_pos = i;
	return 1;
}

void hashset_remove_at(struct hashset *s, size_t pos)
{
	size_t mask = s->cap - 1, hole = pos;

	assert(pos < s->cap && s->keys[pos]);
	/*
	 * Backward shift: a key after the hole moves into it unless its
	 * home lies after the hole (it would then sit before its home).
	 */
	for (size_t j = (pos + 1) & mask; s->keys[j]; j = (j + 1) & mask) {
		size_t h = home(s, hash_of(s, s->keys[j]));

		if (((j - h) & mask) >= ((j - hole) & mask)) {
			s->keys[hole] = s->keys[j];
			if (s->vals)
				s->vals[hole] = s->vals[j];
			hole = j;
		}
	}
	s->keys[hole] = 0;
	if (s->vals)
		s->vals[hole] = 0;
	s->n--;
}

bool hashset_remove(struct hashset *s, uint64_t key)
{
	size_t i = hashset_find(s, key);

	if (i == HASHSET_NONE)
		return false;
	hashset_remove_at(s, i);
	return true;
}

size_t hashset_next(const struct hashset *s, size_t pos)
{
	for (; s->n && pos < s->cap; pos++)
		if (s->keys[pos])
			return pos;
	return HASHSET_NONE;
}
