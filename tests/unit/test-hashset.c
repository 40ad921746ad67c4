/* test-hashset.c - the hash set against a model, records, removal in a walk, limits */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hashset.h"
#include "tap.h"

#define KEYS 3000

static uint64_t rnd_state = 0x853c49e6748fea9bULL;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* A hash whose home is the last slot of any table (hashset.c's multiply undone). */
static uint64_t at_end(void)
{
	uint64_t g = 0x9E3779B97F4A7C15ULL, inv = g;

	for (int i = 0; i < 6; i++)
		inv *= 2 - g * inv; /* Newton: inv = g^-1 mod 2^64 */
	return inv * 0xFFFFFFFFFFFFF000ULL;
}

/* Few homes: long clusters, a third of the keys from the last slot across the end. */
static uint64_t clumped(uint64_t key)
{
	return key % 3 == 0 ? at_end() : key % 5;
}

/* Random adds and removals against an array; 0 when they always agree. */
static int model(uint64_t (*hash)(uint64_t), unsigned ops)
{
	static bool in[KEYS + 1];
	static uint64_t val[KEYS + 1];
	struct hashset s;
	size_t n = 0, pos;
	int bad = 0;

	memset(in, 0, sizeof(in));
	hashset_init(&s, SIZE_MAX, true, hash);
	for (unsigned op = 0; op < ops && !bad; op++) {
		uint64_t k = rnd() % KEYS + 1;
		unsigned what = rnd() % 3;

		if (what == 0) {
			int r = hashset_add(&s, k, &pos);

			if (r != (in[k] ? 0 : 1) || hashset_key(&s, pos) != k ||
			    *hashset_val(&s, pos) != (in[k] ? val[k] : 0))
				bad = 1;
			if (!in[k])
				n++;
			in[k] = true;
			val[k] = rnd();
			*hashset_val(&s, pos) = val[k];
		} else if (what == 1) {
			if (hashset_remove(&s, k) != in[k])
				bad = 2;
			if (in[k])
				n--;
			in[k] = false;
		} else {
			pos = hashset_find(&s, k);
			if (in[k] ? pos == HASHSET_NONE || *hashset_val(&s, pos) != val[k]
				  : pos != HASHSET_NONE)
				bad = 3;
		}
		if (s.n != n || 2 * s.n > s.cap)
			bad = 4;
		if (op % 997 == 0) {
			size_t seen = 0;

			HASHSET_EACH(&s, p) {
				uint64_t key = hashset_key(&s, p);

				if (!in[key] || *hashset_val(&s, p) != val[key])
					bad = 5;
				seen++;
			}
			if (seen != n)
				bad = 6;
		}
	}
	hashset_free(&s);
	return bad;
}

struct rec {
	uint64_t dir;
	const char *name;
};

static uint64_t rec_hash_of(uint64_t dir, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ dir;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	return h;
}

static uint64_t rec_hash(uint64_t key)
{
	const struct rec *r = (const struct rec *)(uintptr_t)key;

	return rec_hash_of(r->dir, r->name);
}

static bool rec_match(uint64_t key, const void *probe)
{
	const struct rec *r = (const struct rec *)(uintptr_t)key, *p = probe;

	return r->dir == p->dir && !strcmp(r->name, p->name);
}

int main(void)
{
	struct hashset s;
	size_t pos;
	int bad;

	hashset_init(&s, SIZE_MAX, false, NULL);
	ok(hashset_find(&s, 7) == HASHSET_NONE && hashset_next(&s, 0) == HASHSET_NONE &&
		   !hashset_remove(&s, 7) && s.cap == 0,
	   "an empty set finds nothing and has no table");
	ok(hashset_add(&s, 0, NULL) == -EINVAL && hashset_find(&s, 0) == HASHSET_NONE,
	   "0 is not a key");
	ok(hashset_add(&s, 7, &pos) == 1 && hashset_key(&s, pos) == 7 &&
		   hashset_add(&s, 7, NULL) == 0 && s.n == 1 && s.cap == HASHSET_MIN_CAP &&
		   !s.vals,
	   "add once, a second add finds it; no values without with_vals");
	ok(hashset_remove(&s, 7) && s.n == 0 && hashset_find(&s, 7) == HASHSET_NONE,
	   "remove");
	hashset_free(&s);
	hashset_free(&s);
	ok(!s.keys && !s.cap, "free twice leaves it empty");

	bad = model(NULL, 200000);
	ok(!bad, "numbers as their own hash agree with a model (%d)", bad);
	bad = model(clumped, 60000);
	ok(!bad, "and with five homes for every key, clusters across the end (%d)", bad);

	/* a walk that removes: every even key, looking at a position again after it */
	hashset_init(&s, SIZE_MAX, false, clumped);
	for (uint64_t k = 1; k <= 500; k++)
		hashset_add(&s, k, NULL);
	{
		static unsigned seen[501];
		bool odd_seen = true, gone = true;

		for (size_t p = hashset_next(&s, 0); p != HASHSET_NONE;) {
			uint64_t k = hashset_key(&s, p);

			seen[k]++;
			if (k % 2 == 0)
				hashset_remove_at(&s, p);
			else
				p++;
			p = hashset_next(&s, p);
		}
		for (uint64_t k = 1; k <= 500; k++) {
			if (k % 2 && (!seen[k] || hashset_find(&s, k) == HASHSET_NONE))
				odd_seen = false;
			if (k % 2 == 0 && (seen[k] != 1 || hashset_find(&s, k) != HASHSET_NONE))
				gone = false;
		}
		ok(odd_seen && gone && s.n == 250,
		   "removal within a walk: every key that stays is seen, every removed one once");
	}
	hashset_free(&s);

	/* the limit is checked before the table grows */
	hashset_init(&s, 8, false, NULL);
	for (uint64_t k = 1; k <= 8; k++)
		hashset_add(&s, k, NULL);
	ok(hashset_add(&s, 9, &pos) == -ENOSPC && s.n == 8 && s.cap == HASHSET_MIN_CAP &&
		   hashset_add(&s, 8, NULL) == 0,
	   "at max an add fails -ENOSPC, a held key is still found");
	hashset_remove(&s, 1);
	ok(hashset_add(&s, 9, NULL) == 1, "below it again, adds work");
	hashset_free(&s);

	/* records: keys are pointers, found by their fields */
	{
		static const char *names[] = { "a", "b", "dir", "a b", "ü", "" };
		struct rec recs[12], probe;
		bool all = true;

		hashset_init(&s, SIZE_MAX, false, rec_hash);
		for (int i = 0; i < 12; i++) {
			recs[i] = (struct rec){ (uint64_t)(i / 6 + 1), names[i % 6] };
			hashset_add(&s, (uintptr_t)&recs[i], NULL);
		}
		for (int i = 0; i < 12; i++) {
			probe = (struct rec){ (uint64_t)(i / 6 + 1), names[i % 6] };
			pos = hashset_find_by(&s, rec_hash_of(probe.dir, probe.name), rec_match,
					      &probe);
			if (pos == HASHSET_NONE || hashset_key(&s, pos) != (uintptr_t)&recs[i])
				all = false;
		}
		probe = (struct rec){ 3, "a" };
		ok(all && hashset_find_by(&s, rec_hash_of(3, "a"), rec_match, &probe) ==
				  HASHSET_NONE,
		   "records are found by their fields, a missing one is not");
		ok(hashset_remove(&s, (uintptr_t)&recs[4]) &&
			   hashset_find_by(&s, rec_hash_of(1, "ü"), rec_match,
					   &(struct rec){ 1, "ü" }) == HASHSET_NONE,
		   "a record is removed by its pointer");
		hashset_free(&s);
	}
	return tap_done();
}
