/*
 * dueheap.h - items by due time: a binary min-heap of the caller's
 * records, each holding its place, so that a change of an item's due
 * time or its removal from anywhere costs O(log n), and the earliest
 * item is found in O(1).  The archive queue (AQ.heap, aqueue.h) is one: a
 * thousand files due at once are taken in n log n, not n squared.
 *
 * Pure module: no I/O, no output, no locks (the owner serializes every
 * call on a heap; the archive queue's is S.lock).
 *
 * The caller embeds a struct due_item in each record and sets due
 * before due_heap_add(), or changes it and calls due_heap_fix().
 * Invariants between calls:
 *   - v[0..n) are the items held, n <= cap; v is NULL when cap is 0;
 *   - v[i]->at == i + 1 for each held item; at == 0: not held;
 *   - v[(i - 1) / 2]->due <= v[i]->due for every i > 0.
 * Items of the same due time come out in no set order.
 */
#ifndef HSMFS_DUEHEAP_H
#define HSMFS_DUEHEAP_H

#include <stddef.h>
#include <stdint.h>

struct due_item {
	int64_t due;  /* the key: not before (the caller's clock) */
	size_t at;    /* place + 1 in its heap, 0: in none */
};

struct due_heap {
	struct due_item **v;
	size_t n, cap;
};

/* Add it (not held): 0, or -ENOMEM (it is not held). */
int due_heap_add(struct due_heap *h, struct due_item *it);
/* it (held) got a new due time: its place follows. */
void due_heap_fix(struct due_heap *h, struct due_item *it);
/* Take it (held) out. */
void due_heap_remove(struct due_heap *h, struct due_item *it);
/* The earliest item, or NULL when empty. */
static inline struct due_item *due_heap_first(const struct due_heap *h)
{
	return h->n ? h->v[0] : NULL;
}
/* The table goes (the items stay the caller's); h is empty after. */
void due_heap_free(struct due_heap *h);

#endif
