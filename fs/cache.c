/* cache.c - see cache.h */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "lockcheck.h"
#include "cache.h"
#include "evict-policy.h"
#include "clock.h"
#include "log.h"
#include "meta.h"

#define FREE_FRESH_MS 10   /* a free-space figure this old is read again */
#define FREE_TRY_MS 1000   /* cache_try_admit() decides on one at most this old */

/*
 * Rounds: C.round is odd while one runs.  The first round to start
 * after a request made at round r has ended when C.round reaches
 * round_after(r).
 */
static uint64_t round_after(uint64_t r)
{
	return r % 2 ? r + 3 : r + 2;
}

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;      /* to the evictor: work to do */
	pthread_cond_t done;      /* from the evictor: a round ended */
	struct cache_config cfg;
	struct evict_limits limits; /* of cfg */
	uint64_t used, reserved;
	uint64_t want;            /* largest need waiting for a round */
	uint64_t force;           /* bytes a forced round must free */
	uint64_t round;           /* rounds finished */
	bool freed_last;          /* the last round freed anything */
	bool requested, stopping, running;
	bool known;               /* used includes the database's sum */
	int64_t early;            /* changes counted before that */
	uint64_t free_avail, free_size; /* the store's free space, see free_space() */
	int64_t free_at;          /* when read (monotonic ms), 0: never */
	int64_t free_spent;       /* bytes the cache grew by since (cache_account) */
	uint64_t free_forgets;    /* forget_free() calls so far */
	bool free_known;          /* read, and no ENOSPC or round since */
	bool free_reading;        /* a thread reads it (C.lock dropped) */
	bool free_wanted;         /* asked of the evictor (cache_try_admit) */
	pthread_t thread;
	uint64_t evicted_files, evicted_bytes, enospc;
	uint64_t over_fills, over_bytes; /* cache_over() */
} C = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Free bytes of the store's filesystem for us, and its size. */
static uint64_t fs_free(uint64_t *ret_size)
{
	struct statvfs sv;

	may_block("fstatvfs of the store");
	if (fstatvfs(C.cfg.store_fd, &sv) < 0) {
		*ret_size = 0;
		return UINT64_MAX;
	}
	*ret_size = (uint64_t)sv.f_blocks * sv.f_frsize;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/*
 * The store's free space as the policy sees it.  fstatvfs(2) can be a
 * network round trip (NFS): it is never called under C.lock (so never
 * under the engine's lock either, which cache_try_admit() is called
 * under).  The figure read is kept with the bytes the cache grew by
 * since (cache_account), which it is lowered by.  It is read again when
 * FREE_FRESH_MS old, after an ENOSPC from the store or the start of a
 * round (forget_free()), and before a decision that bytes do not fit
 * (deficit()).  cache_try_admit() does not read it: it decides on a
 * figure up to FREE_TRY_MS old and asks the evictor thread to read a
 * newer one, and on none (never read, or forgotten) it does not admit.
 */

/* Read the figure, C.lock dropped meanwhile.  C.lock held, not the engine's. */
static void read_free(void)
{
	assert(lk_not_held(LK_ENGINE));
	int64_t at = mono_ms(), spent = C.free_spent;
	uint64_t forgets = C.free_forgets, size, avail;

	if (C.free_reading) {
		/* another thread reads it: its figure serves */
		while (C.free_reading)
			pthread_cond_wait(&C.done, &C.lock);
		return;
	}
	C.free_reading = true;
	lk_unlock(&C.lock, LK_CACHE);
	avail = fs_free(&size);
	lk_lock(&C.lock, LK_CACHE);
	C.free_reading = false;
	pthread_cond_broadcast(&C.done);
	C.free_avail = avail;
	C.free_size = size;
	C.free_at = at;
	/* what the cache grew by while it was read counts as not in it */
	C.free_spent -= spent;
	C.free_known = C.free_forgets == forgets;
}

/*
 * Fills *ret with the figure (less what the cache grew by since it was
 * read); with can_read it is read first when due (always with again),
 * C.lock dropped meanwhile.  Without can_read: false when there is no
 * figure to decide on.  C.lock held.
 */
static bool free_space(struct evict_figures *ret, bool again, bool can_read)
{
	int64_t age = mono_ms() - C.free_at;

	if (can_read && (again || !C.free_known || !C.free_at || age >= FREE_FRESH_MS)) {
		read_free();
	} else if (!can_read && (!C.free_known || !C.free_at || age >= FREE_FRESH_MS)) {
		if (!C.free_wanted && C.running) {
			C.free_wanted = true;
			pthread_cond_signal(&C.wake);
		}
		if (!C.free_known || !C.free_at || age >= FREE_TRY_MS)
			return false;
	}
	ret->fs_avail = C.free_spent < 0 ? C.free_avail + (uint64_t)-C.free_spent :
		       C.free_avail > (uint64_t)C.free_spent ? C.free_avail - (uint64_t)C.free_spent : 0;
	ret->fs_size = C.free_size;
	return true;
}

/* The store said it is full, or a round starts: read the figure again.  C.lock held. */
static void forget_free(void)
{
	C.free_known = false;
	C.free_forgets++;
}

/*
 * Bytes to evict so that need more fit (evict_policy_deficit), aiming
 * at the low watermark when slack is set.  With can_read the figure is
 * read when due, and again before deciding that need does not fit;
 * without, UINT64_MAX when there is no figure to decide on.  C.lock
 * held (dropped meanwhile with can_read).
 */
static uint64_t deficit(uint64_t need, bool slack, bool can_read)
{
	struct evict_figures f;
	int64_t at = C.free_at;
	uint64_t d;

	if (!evict_policy_watches_free(&C.limits)) {
		f = (struct evict_figures){ .used = C.used, .reserved = C.reserved };
		return evict_policy_deficit(&C.limits, &f, need, slack);
	}
	if (!free_space(&f, false, can_read))
		return UINT64_MAX;
	f.used = C.used;
	f.reserved = C.reserved;
	d = evict_policy_deficit(&C.limits, &f, need, slack);
	/* does not fit on an older figure: decide on the current one */
	if (d && can_read && C.free_at == at) {
		free_space(&f, true, true);
		f.used = C.used;
		f.reserved = C.reserved;
		d = evict_policy_deficit(&C.limits, &f, need, slack);
	}
	return d;
}

int cache_admit(uint64_t need, const struct timespec *deadline)
{
	uint64_t seen;
	int res = 0;

	lk_lock(&C.lock, LK_CACHE);
	/* the size is summed in the background at mount: wait for it */
	while (!C.known && C.running &&
	       pthread_cond_timedwait(&C.done, &C.lock, deadline) != ETIMEDOUT)
		;
	for (seen = UINT64_MAX;;) {
		if (!deficit(need, false, true)) {
			C.reserved += need;
			break;
		}
		/* a round that started after we asked and freed nothing */
		if (C.stopping ||
		    (seen != UINT64_MAX && C.round >= round_after(seen) && !C.freed_last)) {
			res = -ENOSPC;
			break;
		}
		if (seen == UINT64_MAX)
			seen = C.round;
		if (need > C.want)
			C.want = need;
		C.requested = true;
		pthread_cond_signal(&C.wake);
		if (pthread_cond_timedwait(&C.done, &C.lock, deadline) == ETIMEDOUT &&
		    deficit(need, false, true)) {
			res = -ENOSPC;
			break;
		}
	}
	lk_unlock(&C.lock, LK_CACHE);
	return res;
}

void cache_over(uint64_t need)
{
	lk_lock(&C.lock, LK_CACHE);
	C.over_fills++;
	C.over_bytes += need;
	lk_unlock(&C.lock, LK_CACHE);
}

void cache_over_closed(void)
{
	lk_lock(&C.lock, LK_CACHE);
	if (C.running && C.cfg.max && C.used > C.cfg.max && !C.requested) {
		C.requested = true;
		pthread_cond_signal(&C.wake);
	}
	lk_unlock(&C.lock, LK_CACHE);
}

int cache_try_admit(uint64_t need)
{
	int res = 0;

	lk_lock(&C.lock, LK_CACHE);
	/* under the engine's lock: the figure is not read here */
	uint64_t d = C.known ? deficit(need, false, false) : UINT64_MAX;

	if (d) {
		/* make room for later, but do not wait for it (no figure: no round) */
		if (d != UINT64_MAX && C.running && !C.requested) {
			if (need > C.want)
				C.want = need;
			C.requested = true;
			pthread_cond_signal(&C.wake);
		}
		res = -ENOSPC;
	} else {
		C.reserved += need;
	}
	lk_unlock(&C.lock, LK_CACHE);
	return res;
}

void cache_unreserve(uint64_t n)
{
	lk_lock(&C.lock, LK_CACHE);
	C.reserved = C.reserved > n ? C.reserved - n : 0;
	lk_unlock(&C.lock, LK_CACHE);
}

void cache_account(int64_t delta)
{
	lk_lock(&C.lock, LK_CACHE);
	C.free_spent += delta; /* the figure of free space is lowered by it */
	if (!C.known)
		C.early += delta;
	else if (delta < 0 && (uint64_t)-delta > C.used)
		C.used = 0;
	else
		C.used += delta;
	lk_unlock(&C.lock, LK_CACHE);
}

void cache_evicted(uint64_t bytes)
{
	lk_lock(&C.lock, LK_CACHE);
	C.evicted_files++;
	C.evicted_bytes += bytes;
	lk_unlock(&C.lock, LK_CACHE);
}

int cache_make_room(uint64_t need)
{
	struct timespec deadline;
	uint64_t start;
	int res;

	mono_now(&deadline);
	deadline.tv_sec += 30;
	lk_lock(&C.lock, LK_CACHE);
	if (!C.running) {
		lk_unlock(&C.lock, LK_CACHE);
		return -ENOSPC;
	}
	start = C.round;
	forget_free(); /* the store said it is full */
	if (need > C.force)
		C.force = need;
	C.requested = true;
	pthread_cond_signal(&C.wake);
	/* the round that started after this request */
	while (C.round < round_after(start) && !C.stopping)
		if (pthread_cond_timedwait(&C.done, &C.lock, &deadline) == ETIMEDOUT)
			break;
	res = C.round >= round_after(start) && C.freed_last ? 0 : -ENOSPC;
	if (res)
		C.enospc++;
	lk_unlock(&C.lock, LK_CACHE);
	return res;
}

/*
 * The part of a round's goal (deficit() with slack) that the store's
 * free space asks, cache_max left out: changed files do not count in
 * cache_max (archived, they would count and be evicted, for nothing),
 * but they take the store's room.  C.lock held (dropped to read the
 * figure).
 */
static uint64_t room_deficit(uint64_t need)
{
	struct evict_limits l = C.limits;
	struct evict_figures f;

	l.max = 0;
	if (!evict_policy_watches_free(&l) || !free_space(&f, false, true))
		return 0;
	f.used = C.used;
	f.reserved = C.reserved;
	return evict_policy_deficit(&l, &f, need, true);
}

/* Does the evictor watch the free space for changed files (write-back on)? */
static bool pressure_watched(void)
{
	return C.cfg.on.archive && evict_policy_watches_free(&C.limits);
}

/*
 * One round: evict least recently used files until the goal is met (no
 * deficit for want, with the round's slack, and force bytes freed) or
 * nothing more can go.  Returns whether anything was freed.  No lock
 * held.
 */
static bool round_run(uint64_t want, uint64_t force)
{
	struct evict_walk w;
	uint64_t freed = 0, got, left;
	bool any = false;

	evict_walk_start(&w, &C.cfg.on, C.cfg.meta);
	for (;;) {
		lk_lock(&C.lock, LK_CACHE);
		left = deficit(want, true, true);
		lk_unlock(&C.lock, LK_CACHE);
		if (freed >= force && !left)
			break;
		if (!evict_walk_next(&w, &got))
			break;
		if (got) {
			any = true;
			freed += got;
			cache_evicted(got);
		}
	}
	evict_walk_end(&w);
	return any;
}

/*
 * The evictor: waits for a request, runs a round (round_run())
 * with C.lock dropped, tells the waiters.  See round_after().
 */
static void *evictor_main(void *arg)
{
	uint64_t total = 0;

	(void)arg;
	/*
	 * The cache's size from the database: a sum over every row, taken
	 * here so that it is not on the way to a live mount.  Changes
	 * counted meanwhile are deltas and add up with it.
	 */
	if (meta_cached_total(C.cfg.meta, &total))
		log_warn("cannot sum the cache's size: %s; starting from 0",
			 meta_errmsg(C.cfg.meta));
	lk_lock(&C.lock, LK_CACHE);
	C.used = C.early < 0 && (uint64_t)-C.early > total ? 0 : total + C.early;
	C.known = true;
	pthread_cond_broadcast(&C.done);
	if (C.cfg.max && C.used > C.cfg.max)
		C.requested = true; /* the limit was lowered: evict now */
	for (;;) {
		uint64_t want, force;
		bool any;

		while (!C.requested && !C.stopping && !C.free_wanted) {
			if (!pressure_watched()) {
				pthread_cond_wait(&C.wake, &C.lock);
				continue;
			}
			/* changed files fill the store too: look at it now and then */
			struct timespec ts;

			mono_after(&ts, EVICT_PRESSURE_MS / 1000.0);
			if (pthread_cond_timedwait(&C.wake, &C.lock, &ts) == ETIMEDOUT &&
			    room_deficit(0))
				C.requested = true;
		}
		if (C.stopping)
			break;
		if (C.free_wanted) {
			/* cache_try_admit() wants a newer figure */
			C.free_wanted = false;
			read_free();
			if (!C.requested)
				continue;
		}
		C.requested = false;
		C.round++; /* odd: a round is running */
		want = C.want;
		force = C.force;
		C.want = C.force = 0;
		forget_free(); /* the round's goal from the figure as it is */
		lk_unlock(&C.lock, LK_CACHE);
		any = round_run(want, force);
		lk_lock(&C.lock, LK_CACHE);
		if (C.cfg.on.archive) {
			/* what clean files could not give of the store's room:
			 * changed files archived for it */
			uint64_t short_of = room_deficit(want);

			if (short_of < force && !any)
				short_of = force;
			if (short_of && short_of != UINT64_MAX) {
				lk_unlock(&C.lock, LK_CACHE);
				C.cfg.on.archive(short_of);
				lk_lock(&C.lock, LK_CACHE);
			}
		}
		C.freed_last = any;
		C.round++;
		pthread_cond_broadcast(&C.done);
	}
	C.round += 2;
	pthread_cond_broadcast(&C.done);
	lk_unlock(&C.lock, LK_CACHE);
	return NULL;
}

int cache_init(const struct cache_config *cfg)
{
	pthread_condattr_t ca;
	uint64_t size, avail;

	C.cfg = *cfg;
	C.limits = (struct evict_limits){
		.max = cfg->max, .min_free = cfg->min_free,
		.min_free_pct = cfg->min_free_pct, .chunk = cfg->chunk,
	};
	/* STATE/reserve is none of this daemon's (the database keeps its own room): removed */
	if (cfg->state_fd >= 0)
		unlinkat(cfg->state_fd, "reserve", 0);
	avail = fs_free(&size);
	if (cfg->max && cfg->max > avail)
		log_warn("cache_max=%llu is more than the store's filesystem has free (%llu bytes); "
			 "a full filesystem will bound the cache first",
			 (unsigned long long)cfg->max, (unsigned long long)avail);
	if (evict_policy_watches_free(&C.limits) && avail < evict_policy_min_free(&C.limits, size))
		log_warn("the store's filesystem has %llu bytes free, less than cache_min_free; "
			 "fills will evict first", (unsigned long long)avail);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&C.wake, &ca);
	pthread_cond_init(&C.done, &ca);
	pthread_condattr_destroy(&ca);
	if (!cfg->meta) {
		C.known = true;
		return 0;
	}
	if (pthread_create(&C.thread, NULL, evictor_main, NULL))
		return -EAGAIN;
	C.running = true;
	return 0;
}

void cache_shutdown(void)
{
	lk_lock(&C.lock, LK_CACHE);
	if (!C.running) {
		lk_unlock(&C.lock, LK_CACHE);
		return;
	}
	C.stopping = true;
	pthread_cond_signal(&C.wake);
	lk_unlock(&C.lock, LK_CACHE);
	pthread_join(C.thread, NULL);
	C.running = false;
}

bool cache_any(void)
{
	bool any;

	lk_lock(&C.lock, LK_CACHE);
	any = C.used > 0;
	lk_unlock(&C.lock, LK_CACHE);
	return any;
}

void cache_stats(struct cache_stats *ret)
{
	uint64_t size, avail = fs_free(&size); /* before the lock: it may block */

	memset(ret, 0, sizeof(*ret));
	lk_lock(&C.lock, LK_CACHE);
	ret->cache_bytes = C.used;
	ret->cache_reserved = C.reserved;
	ret->cache_max = C.cfg.max;
	ret->fs_free = avail;
	ret->cache_min_free = evict_policy_watches_free(&C.limits) ?
			evict_policy_min_free(&C.limits, size) : 0;
	ret->evicted_files = C.evicted_files;
	ret->evicted_bytes = C.evicted_bytes;
	ret->eviction_rounds = C.round / 2;
	ret->enospc = C.enospc;
	ret->over_fills = C.over_fills;
	ret->over_bytes = C.over_bytes;
	lk_unlock(&C.lock, LK_CACHE);
}
