/* names.c - see names.h */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lockcheck.h"
#include "hashset.h"
#include "names.h"

struct name_rec {
	uint64_t dir;
	uint64_t gen;      /* when its last user change ended (0: none yet) */
	unsigned users;    /* user changes of it in flight */
	bool claimed;      /* the daemon's claim */
	char name[];
};

static uint64_t hash_of(uint64_t dir, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ dir;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	return h;
}

static uint64_t rec_hash(uint64_t key)
{
	const struct name_rec *r = (const struct name_rec *)(uintptr_t)key;

	return hash_of(r->dir, r->name);
}

static struct {
	pthread_mutex_t lock;
	pthread_cond_t released;  /* a claim was released */
	struct hashset recs;      /* the records, by (dir, name) */
	uint64_t gen;             /* the last generation handed out */
	uint64_t *plans;          /* the generations of the plans open */
	size_t nplans, cap;
	unsigned blind;           /* user changes in flight without a record */
	uint64_t blind_gen;       /* when the last of them ended */
} N = { .lock = PTHREAD_MUTEX_INITIALIZER, .released = PTHREAD_COND_INITIALIZER,
	.recs = HASHSET_INIT(SIZE_MAX, false, rec_hash) };

struct dir_name {
	uint64_t dir;
	const char *name;
};

static bool is_dir_name(uint64_t key, const void *probe)
{
	const struct name_rec *r = (const struct name_rec *)(uintptr_t)key;
	const struct dir_name *k = probe;

	return r->dir == k->dir && !strcmp(r->name, k->name);
}

/* The record of (dir, name), or NULL.  N.lock held. */
static struct name_rec *find(uint64_t dir, const char *name)
{
	size_t pos = hashset_find_by(&N.recs, hash_of(dir, name), is_dir_name,
				     &(struct dir_name){ dir, name });

	return pos == HASHSET_NONE ? NULL
				   : (struct name_rec *)(uintptr_t)hashset_key(&N.recs, pos);
}

/* The record of (dir, name), made if missing; NULL without memory.  N.lock held. */
static struct name_rec *find_add(uint64_t dir, const char *name)
{
	struct name_rec *r = find(dir, name);
	size_t len;

	if (r)
		return r;
	len = strlen(name);
	r = calloc(1, sizeof(*r) + len + 1);
	if (!r)
		return NULL;
	r->dir = dir;
	memcpy(r->name, name, len + 1);
	if (hashset_add(&N.recs, (uintptr_t)r, NULL) < 0) {
		free(r);
		return NULL;
	}
	return r;
}

/* The oldest plan open, or UINT64_MAX with none.  N.lock held. */
static uint64_t oldest_plan(void)
{
	uint64_t min = UINT64_MAX;

	for (size_t i = 0; i < N.nplans; i++)
		if (N.plans[i] < min)
			min = N.plans[i];
	return min;
}

/* Nothing in flight, and no plan open that it could refuse. */
static bool idle(const struct name_rec *r, uint64_t oldest)
{
	return !r->users && !r->claimed && (!N.nplans || r->gen <= oldest);
}

/* Drop r if idle.  N.lock held. */
static void drop_idle(struct name_rec *r)
{
	if (!idle(r, oldest_plan()))
		return;
	hashset_remove(&N.recs, (uintptr_t)r);
	free(r);
}

void names_user_begin(struct names_user *u, uint64_t dir, const char *name, uint64_t dir2,
		      const char *name2)
{
	struct name_rec *r;

	lk_lock(&N.lock, LK_NAMES);
	for (;;) {
		r = find(dir, name);
		if (!(r && r->claimed) && name2)
			r = find(dir2, name2);
		if (!(r && r->claimed))
			break;
		pthread_cond_wait(&N.released, &N.lock);
	}
	u->blind = false;
	u->r[0] = find_add(dir, name);
	u->r[1] = name2 ? find_add(dir2, name2) : NULL;
	for (int i = 0; i < 2; i++)
		if (u->r[i])
			u->r[i]->users++;
	if (!u->r[0] || (name2 && !u->r[1])) {
		u->blind = true;
		N.blind++;
	}
	lk_unlock(&N.lock, LK_NAMES);
}

void names_user_end(struct names_user *u)
{
	uint64_t gen;

	lk_lock(&N.lock, LK_NAMES);
	gen = ++N.gen;
	for (int i = 0; i < 2; i++) {
		struct name_rec *r = u->r[i];

		if (!r)
			continue;
		r->users--;
		r->gen = gen;
	}
	/* both first: a rename of a name onto itself has one record twice */
	for (int i = 0; i < 2; i++)
		if (u->r[i] && (i == 0 || u->r[1] != u->r[0]))
			drop_idle(u->r[i]);
	if (u->blind) {
		N.blind--;
		N.blind_gen = gen;
	}
	lk_unlock(&N.lock, LK_NAMES);
	u->r[0] = u->r[1] = NULL;
}

uint64_t names_plan_begin(void)
{
	uint64_t gen;

	lk_lock(&N.lock, LK_NAMES);
	gen = N.gen;
	if (N.nplans == N.cap) {
		size_t cap = N.cap ? 2 * N.cap : 64;
		uint64_t *v = realloc(N.plans, cap * sizeof(*v));

		if (!v) {
			/* not recorded: records older than it may go; refused whole */
			lk_unlock(&N.lock, LK_NAMES);
			return 0;
		}
		N.plans = v;
		N.cap = cap;
	}
	N.plans[N.nplans++] = gen;
	lk_unlock(&N.lock, LK_NAMES);
	return gen + 1; /* 0 is the plan that could not be recorded */
}

void names_plan_end(uint64_t plan)
{
	uint64_t oldest;

	if (!plan)
		return;
	lk_lock(&N.lock, LK_NAMES);
	for (size_t i = 0; i < N.nplans; i++)
		if (N.plans[i] == plan - 1) {
			N.plans[i] = N.plans[--N.nplans];
			break;
		}
	oldest = oldest_plan();
	for (size_t pos = hashset_next(&N.recs, 0); pos != HASHSET_NONE;) {
		struct name_rec *r = (struct name_rec *)(uintptr_t)hashset_key(&N.recs, pos);

		if (idle(r, oldest)) {
			hashset_remove_at(&N.recs, pos); /* pos is looked at again */
			free(r);
		} else {
			pos++;
		}
		pos = hashset_next(&N.recs, pos);
	}
	lk_unlock(&N.lock, LK_NAMES);
}

bool names_claim(uint64_t dir, const char *name, uint64_t plan)
{
	struct name_rec *r;
	bool ok;

	if (!plan)
		return false;
	plan--; /* the generation it was opened at */
	lk_lock(&N.lock, LK_NAMES);
	r = find(dir, name);
	ok = !N.blind && N.blind_gen <= plan && !(r && (r->users || r->claimed || r->gen > plan));
	if (ok && !r)
		r = find_add(dir, name);
	ok = ok && r;
	if (ok)
		r->claimed = true;
	lk_unlock(&N.lock, LK_NAMES);
	return ok;
}

void names_release(uint64_t dir, const char *name)
{
	struct name_rec *r;

	lk_lock(&N.lock, LK_NAMES);
	r = find(dir, name);
	if (r) {
		r->claimed = false;
		drop_idle(r);
	}
	pthread_cond_broadcast(&N.released);
	lk_unlock(&N.lock, LK_NAMES);
}
