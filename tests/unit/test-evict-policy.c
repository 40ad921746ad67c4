/*
 * Unit tests for fs/evict-policy.c: what may be evicted (eligibility,
 * the spans of an open file), when (the deficit of both limits, with
 * and without the low watermark), and in what order (a round over a
 * real database with a fake mechanism: least recent first, a file used
 * since passed over and taken on the second reading, the goal stops it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evict-policy.h"
#include "meta.h"
#include "tap.h"

#define MiB (1ULL << 20)

static char dir[] = "/tmp/hsmfs-policy-XXXXXX";

/*
 * The fake mechanism: evicts every file but the one it says was used
 * since (while in order); an evicted file leaves the list.
 */
static struct meta *m;
static uint64_t order[16];
static unsigned norder, syncs;
static uint64_t used_since = 0; /* an ino passed over while in order */
static uint64_t left_bytes;

static void fake_sync(void)
{
	syncs++;
}

static int fake_evict(const struct meta_victim *v, bool in_order, uint64_t *ret_freed)
{
	*ret_freed = 0;
	if (in_order && v->ino == used_since)
		return -EAGAIN;
	order[norder++] = v->ino;
	*ret_freed = v->blocks;
	return meta_set_path(m, v->ino, NULL);
}

/*
 * A round as the evictor (cache.c) walks it: until left_bytes is freed
 * and force bytes, or nothing more can go.  Whether anything was freed.
 */
static bool round_of(struct meta *db, const struct evict_handlers *on, uint64_t force)
{
	struct evict_walk w;
	uint64_t freed = 0, got;
	bool any = false;

	evict_walk_start(&w, on, db);
	while (!(freed >= force && !left_bytes) && evict_walk_next(&w, &got)) {
		if (got) {
			any = true;
			freed += got;
			left_bytes = left_bytes > got ? left_bytes - got : 0;
		}
	}
	evict_walk_end(&w);
	return any;
}

/* Files 1 to 4, 4 least recently used, and a pinned and a dirty one. */
static void seed(void)
{
	for (uint64_t ino = 1; ino <= 6; ino++) {
		char p[8];
		struct meta_file row = {
			.ino = ino, .size = MiB, .state = META_RESIDENT, .path = p,
			.blocks = MiB, .atime = (int64_t)(10 - ino) * 1000,
		};

		snprintf(p, sizeof(p), "f%llu", (unsigned long long)ino);
		if (ino == 5)
			row.flags = META_F_PINNED;
		if (ino == 6)
			row.state = META_DIRTY;
		if (ino >= 5)
			row.atime = 0;
		rs_add(&row.present, 0, MiB);
		meta_put(m, &row);
		rs_clear(&row.present);
	}
}

int main(void)
{
	struct evict_limits l = { .max = 100 * MiB, .chunk = MiB };
	struct evict_figures f = { .used = 95 * MiB };
	struct evict_facts e = { 0 };
	struct range span[2];
	unsigned n;

	/* when */
	ok(evict_policy_deficit(&l, &f, 5 * MiB, false) == 0, "cache_max: exactly full fits");
	ok(evict_policy_deficit(&l, &f, 6 * MiB, false) == MiB, "one MiB over: that much to evict");
	ok(evict_policy_deficit(&l, &f, 5 * MiB, true) == 10 * MiB,
	   "a round's goal is a tenth below cache_max");
	l.max = 4 * MiB;
	f.used = 4 * MiB;
	ok(evict_policy_deficit(&l, &f, 0, true) == MiB,
	   "the low watermark is at least one chunk below a small cache_max");
	l = (struct evict_limits){ .min_free = 10 * MiB, .chunk = MiB };
	f = (struct evict_figures){ .reserved = MiB, .fs_avail = 20 * MiB, .fs_size = 1000 * MiB };
	ok(evict_policy_watches_free(&l), "cache_min_free watches the free space");
	ok(evict_policy_deficit(&l, &f, 9 * MiB, false) == 0, "cache_min_free kept with the fill");
	ok(evict_policy_deficit(&l, &f, 10 * MiB, false) == MiB,
	   "reserved bytes count against the free space");
	ok(evict_policy_deficit(&l, &f, 9 * MiB, true) == MiB, "a round keeps a chunk more free");
	l.min_free_pct = 5;
	ok(evict_policy_min_free(&l, 1000 * MiB) == 50 * MiB, "the larger of cache_min_free and its percentage counts");
	l = (struct evict_limits){ .chunk = MiB };
	ok(!evict_policy_watches_free(&l) && evict_policy_deficit(&l, &f, 1ULL << 40, false) == 0,
	   "no limits: everything fits");

	/* what */
	ok(evict_policy_eligible(&e, false) == 0 && evict_policy_eligible(&e, true) == 0,
	   "a clean closed file may go");
	e.dirty = true;
	ok(evict_policy_eligible(&e, false) == -EBUSY, "a dirty file never goes");
	e = (struct evict_facts){ .pinned = true };
	ok(evict_policy_eligible(&e, false) == -EBUSY, "a pinned file never goes");
	e = (struct evict_facts){ .passthrough = true };
	ok(evict_policy_eligible(&e, false) == -EBUSY, "a file in passthrough mode never goes");
	e = (struct evict_facts){ .filling = true, .open = true, .tracked = true };
	ok(evict_policy_eligible(&e, false) == -EBUSY, "nor one being filled");
	e = (struct evict_facts){ .open = true };
	ok(evict_policy_eligible(&e, false) == -EBUSY, "an open file whose reads are not counted stays");
	e.tracked = true;
	ok(evict_policy_eligible(&e, false) == 0, "an open file with counted reads may lose ranges");
	ok(evict_policy_eligible(&e, true) == -EBUSY, "hsmfsctl evict refuses an open file");
	e.reading = true;
	ok(evict_policy_eligible(&e, false) == EVICT_WAIT_READS, "its reads in flight are waited for");
	e.dirty = true;
	ok(evict_policy_eligible(&e, false) == -EBUSY, "but not when it is not evictable anyway");
	evict_policy_open_spans(MiB, 2 * MiB, 8 * MiB, span, &n);
	ok(n == 2 && span[0].start == 0 && span[0].end == MiB && span[1].start == 2 * MiB &&
		   span[1].end == 8 * MiB,
	   "an open file keeps the span its reader is at");
	evict_policy_open_spans(0, 8 * MiB, 8 * MiB, span, &n);
	ok(n == 0, "a span from 0 to the end: nothing goes");
	ok(!evict_policy_used_since(1000 + EVICT_ATIME_SLACK_MS, 1000) &&
		   evict_policy_used_since(1001 + EVICT_ATIME_SLACK_MS, 1000),
	   "used since: more than the slack after its listed time");

	/* in what order */
	char path[256];
	struct evict_handlers on = { .sync = fake_sync, .evict = fake_evict };
	uint64_t force = 0;

	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/meta.db", dir);
	ok(meta_open(path, &m) == 0, "a database");
	seed();
	left_bytes = 2 * MiB;
	ok(round_of(m, &on, force) && norder == 2 && order[0] == 4 && order[1] == 3 &&
		   syncs == 1,
	   "least recent first, until the goal is met");
	seed();
	norder = syncs = 0;
	used_since = 2;
	left_bytes = 3 * MiB;
	ok(round_of(m, &on, force) && norder == 3 && order[0] == 4 && order[1] == 3 &&
		   order[2] == 1 && syncs == 1,
	   "a file used since is passed over while others make room");
	seed();
	norder = syncs = 0;
	left_bytes = 5 * MiB;
	ok(round_of(m, &on, force) && norder == 4 && order[3] == 2 && syncs == 2,
	   "the list read again takes what was passed over, never a pinned or dirty file");
	seed();
	norder = 0;
	used_since = 0;
	left_bytes = 0;
	force = MiB;
	ok(round_of(m, &on, force) && norder == 1 && order[0] == 4,
	   "a forced round frees its bytes whatever the limits");
	seed();
	force = 0;
	norder = 0;
	ok(!round_of(m, &on, force) && norder == 0, "nothing to free: nothing evicted");
	meta_close(m);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	if (system(path))
		return 1;
	return tap_done();
}
