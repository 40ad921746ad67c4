/* dueheap.c - items by due time: see dueheap.h */
#include <errno.h>
#include <stdlib.h>

#include "dueheap.h"

#define DUE_HEAP_MIN_CAP 64

static void place(struct due_heap *h, size_t i, struct due_item *it)
{
	h->v[i] = it;
	it->at = i + 1;
}

/* it, for place i (free), goes up while its parent is due later. */
static void up(struct due_heap *h, size_t i, struct due_item *it)
{
	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (h->v[p]->due <= it->due)
			break;
		place(h, i, h->v[p]);
		i = p;
	}
	place(h, i, it);
}

/* it, for place i (free), goes down while a child is due sooner. */
static void down(struct due_heap *h, size_t i, struct due_item *it)
{
	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1]->due < h->v[c]->due)
			c++;
		if (it->due <= h->v[c]->due)
			break;
		place(h, i, h->v[c]);
		i = c;
	}
	place(h, i, it);
}

int due_heap_add(struct due_heap *h, struct due_item *it)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : DUE_HEAP_MIN_CAP;
		struct due_item **v = realloc(h->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	up(h, h->n++, it);
	return 0;
}

void due_heap_fix(struct due_heap *h, struct due_item *it)
{
	size_t i = it->at - 1;

	if (i > 0 && h->v[(i - 1) / 2]->due > it->due)
		up(h, i, it);
	else
		down(h, i, it);
}

void due_heap_remove(struct due_heap *h, struct due_item *it)
{
	size_t i = it->at - 1;
	struct due_item *last = h->v[--h->n];

	it->at = 0;
	if (last == it)
		return;
	/* the last item fills the hole, then finds its place either way */
	place(h, i, last);
	due_heap_fix(h, last);
}

void due_heap_free(struct due_heap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}
