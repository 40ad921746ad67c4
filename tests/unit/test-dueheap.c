/* test-dueheap.c - the due-time heap against a model: random adds, removals, changes, takes */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dueheap.h"
#include "tap.h"

#define ITEMS 400
#define STEPS 200000

static uint64_t rnd_state;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

struct rec {
	int id;
	struct due_item q;
	bool held; /* the model */
};

static struct rec recs[ITEMS];

/* The heap's invariants (dueheap.h) and that it holds what the model holds. */
static bool sound(const struct due_heap *h)
{
	size_t held = 0;

	for (size_t i = 0; i < h->n; i++) {
		if (h->v[i]->at != i + 1)
			return false;
		if (i > 0 && h->v[(i - 1) / 2]->due > h->v[i]->due)
			return false;
	}
	for (int i = 0; i < ITEMS; i++) {
		if (recs[i].held != (recs[i].q.at != 0))
			return false;
		held += recs[i].held;
	}
	return held == h->n;
}

/* The model's earliest due time, or INT64_MAX. */
static int64_t earliest(void)
{
	int64_t e = INT64_MAX;

	for (int i = 0; i < ITEMS; i++)
		if (recs[i].held && recs[i].q.due < e)
			e = recs[i].q.due;
	return e;
}

int main(void)
{
	struct due_heap h = { 0 };
	uint64_t seed = getenv("HSMFS_SEED") ? strtoull(getenv("HSMFS_SEED"), NULL, 0) :
					       0x9e3779b97f4a7c15ULL;
	unsigned bad = 0, taken = 0, adds = 0;
	int64_t last = INT64_MIN;

	printf("# seed %llu (HSMFS_SEED repeats it)\n", (unsigned long long)seed);
	rnd_state = seed ? seed : 1;
	for (int i = 0; i < ITEMS; i++)
		recs[i].id = i;
	ok(due_heap_first(&h) == NULL, "an empty heap has no first item");
	for (int s = 0; s < STEPS && !bad; s++) {
		struct rec *r = &recs[rnd() % ITEMS];
		unsigned what = rnd() % 8;
		/* a narrow range of times: many items due at the same time */
		int64_t due = (int64_t)(rnd() % 64) - 16;

		if (!r->held && what < 4) {
			r->q.due = due;
			if (due_heap_add(&h, &r->q)) {
				bad++;
				break;
			}
			r->held = true;
			adds++;
		} else if (r->held && what < 5) {
			r->q.due = due;
			due_heap_fix(&h, &r->q);
		} else if (r->held && what < 6) {
			due_heap_remove(&h, &r->q);
			r->held = false;
		} else if (what >= 6) {
			/* the first is due no later than any other, and taken */
			struct due_item *f = due_heap_first(&h);

			if (!f != (earliest() == INT64_MAX) || (f && f->due != earliest())) {
				bad++;
				break;
			}
			if (f) {
				struct rec *fr = (struct rec *)((char *)f - offsetof(struct rec, q));

				due_heap_remove(&h, f);
				fr->held = false;
				taken++;
			}
		}
		if (!sound(&h))
			bad++;
	}
	ok(!bad, "%d random steps over %d items: invariants hold, the first is the earliest "
	   "(%u added, %u taken)", STEPS, ITEMS, adds, taken);
	/* drained in order of due time */
	bad = 0;
	while (due_heap_first(&h)) {
		struct due_item *f = due_heap_first(&h);

		if (f->due < last)
			bad++;
		last = f->due;
		due_heap_remove(&h, f);
	}
	for (int i = 0; i < ITEMS; i++)
		recs[i].held = false;
	ok(!bad && sound(&h), "drained earliest first");
	/* a hundred thousand due at once: taken in n log n */
	{
		static struct due_item many[100000];
		size_t n = sizeof(many) / sizeof(*many), out = 0;

		for (size_t i = 0; i < n; i++) {
			many[i].due = (int64_t)(rnd() % 1000);
			many[i].at = 0;
			if (due_heap_add(&h, &many[i]))
				break;
		}
		last = INT64_MIN;
		bad = 0;
		while (due_heap_first(&h)) {
			struct due_item *f = due_heap_first(&h);

			bad += f->due < last;
			last = f->due;
			due_heap_remove(&h, f);
			out++;
		}
		ok(!bad && out == n, "%zu items added and taken in order", n);
	}
	due_heap_free(&h);
	ok(h.n == 0 && h.cap == 0 && !h.v, "freed: empty");
	return tap_done();
}
