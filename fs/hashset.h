/*
 * hashset.h - one open-addressing hash table of 64-bit keys, each with
 * a 64-bit value when the set is made with values.
 *
 * Pure module: no I/O, no output, no locks (the owner serializes every
 * call on a set, lookups included).
 *
 * Keys are nonzero: a number (an inode number), or a pointer to one of
 * the caller's records whose fields are the real key.  For records the
 * caller gives hash(key), the hash of the record's real key, and looks
 * them up with hashset_find_by() and a matcher; for numbers hash may be
 * NULL (the key is its own hash: hashset mixes every hash itself).
 *
 * Invariants between calls:
 *   - cap is 0 (keys and vals NULL) or a power of two >= HASHSET_MIN_CAP;
 *   - keys[i] == 0 marks an empty slot; n keys are held, n <= max and
 *     2 * n <= cap;
 *   - a key sits at its home slot or after it (linear probing), with no
 *     empty slot between: a removal shifts the keys after it back, so
 *     there are no tombstones;
 *   - vals is NULL in a set made without values, else vals[i] is the
 *     value of keys[i] (0 when the key was added).
 * A position (an index into keys and vals) is good until the next add
 * or removal; the caller's records stay the caller's (hashset_free()
 * frees the table, never what the keys point to).
 */
#ifndef HSMFS_HASHSET_H
#define HSMFS_HASHSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HASHSET_MIN_CAP 16    /* slots of the first table */
#define HASHSET_NONE SIZE_MAX /* no position */

struct hashset {
	uint64_t *keys;       /* cap slots; 0: empty */
	uint64_t *vals;       /* cap values beside keys, or NULL */
	size_t cap;           /* 0 or a power of two */
	size_t n;             /* keys held */
	size_t max;           /* keys at most: an add past it fails */
	unsigned shift;       /* 64 - log2(cap): a hash's top bits pick its home */
	bool with_vals;
	uint64_t (*hash)(uint64_t key); /* of a held key; NULL: the key */
};

/* A static initializer: what hashset_init() makes. */
#define HASHSET_INIT(max_, with_vals_, hash_)                                  \
	{ .max = (max_), .with_vals = (with_vals_), .hash = (hash_) }

/*
 * An empty set of at most max keys (SIZE_MAX: as many as memory holds),
 * with a value per key if with_vals.  Allocates nothing.
 */
void hashset_init(struct hashset *s, size_t max, bool with_vals,
		  uint64_t (*hash)(uint64_t key));
/* Free the table and leave s empty (as after hashset_init); s may be zeroed. */
void hashset_free(struct hashset *s);

/* The position of key, or HASHSET_NONE. */
size_t hashset_find(const struct hashset *s, uint64_t key);
/*
 * The position of the key for which match(key, probe) is true, or
 * HASHSET_NONE; hash is what s->hash gives for that key.
 */
size_t hashset_find_by(const struct hashset *s, uint64_t hash,
		       bool (*match)(uint64_t key, const void *probe), const void *probe);

/*
 * Add key unless it is held: 1 added (its value 0), 0 it was held,
 * -ENOSPC with max keys held, -ENOMEM when the table must grow and
 * cannot, -EINVAL for key 0.  *ret_pos (if ret_pos) is set on 0 and 1 only.  A set of
 * records must not hold two keys for one real key: find first.
 */
int hashset_add(struct hashset *s, uint64_t key, size_t *ret_pos);

/* Remove key if held; returns whether it was. */
bool hashset_remove(struct hashset *s, uint64_t key);
/*
 * Remove the key at pos.  Within a walk (HASHSET_EACH), look at pos
 * again after it: a key after it may have moved there.  A walk that
 * removes sees every key that stays, and may see one twice.
 */
void hashset_remove_at(struct hashset *s, size_t pos);

/* The first position at or after pos that holds a key, or HASHSET_NONE. */
size_t hashset_next(const struct hashset *s, size_t pos);

/* for each held position pos of s (no add or removal within it) */
#define HASHSET_EACH(s, pos)                                                  \
	for (size_t pos = hashset_next((s), 0); pos != HASHSET_NONE;          \
	     pos = hashset_next((s), pos + 1))

static inline uint64_t hashset_key(const struct hashset *s, size_t pos)
{
	return s->keys[pos];
}

/* The value at pos of a set made with values. */
static inline uint64_t *hashset_val(const struct hashset *s, size_t pos)
{
	return &s->vals[pos];
}

#endif
