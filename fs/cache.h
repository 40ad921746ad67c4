/*
 * cache.h - the cache's size, its limits, and the evictor.
 *
 * What counts.  The cache is the bytes the store allocates (st_blocks,
 * not logical sizes) for clean files that have an origin: placeholders,
 * partial and resident files.  Dirty files are local data, not cache;
 * they stop counting when they become dirty.  The size is kept in
 * memory (cache_account() with the change of each fill and eviction)
 * and persisted per file in the database, whose sum (taken by the
 * evictor thread as it starts, not on the way to a live mount) starts it.
 *
 * Limits.  cache_max bounds that size; cache_min_free keeps the store's
 * filesystem from filling (statvfs(2), so other writers to the
 * filesystem count too; see "Free space").  Admission: before a fill may
 * write, cache_admit() reserves its bytes; if they do not fit, the
 * evictor runs first, down to the policy's low watermark so that it does
 * not thrash; if nothing can be evicted cache_admit() says ENOSPC and
 * a read's fill goes ahead past the limit (cache_over()), its file
 * evicted again at its last close: a read never fails because the
 * cache is full.  A fill may overshoot its reservation by at most the
 * rounding of its hint to the chunk, so the cache stays below the
 * limit plus one chunk at every moment when anything can be evicted,
 * and below it plus the files being read past it otherwise.
 *
 * Eviction.  What may go, in what order and when is the policy's
 * (evict-policy.h).  One thread, the evictor, runs its rounds; the
 * layer above carries each eviction out through the handlers it gives
 * cache_init() (struct evict_handlers: the write-behind's sync, and the
 * eviction of one file: database first, then the store's bytes, then
 * the kernel's page cache), which count their bytes back here
 * (cache_account, cache_evicted).  cache.c calls nothing above it.
 * ENOSPC from the store (a fill's or a user write's) asks for a round of
 * eviction regardless of the limits, then the caller retries once.  An
 * eviction writes to the database before it frees a byte; the database
 * keeps room for that in its own log (see meta.c), so a full filesystem
 * can still be evicted from.
 *
 * Free space.  The figure of the store's free space is read again when
 * it is FREE_FRESH_MS old (cache.c), after an ENOSPC or the start of a
 * round, and always before a decision that bytes do not fit; between
 * reads it is lowered by what the cache grew by.  It is never read
 * (fstatvfs) under the cache's lock or the engine's: cache_try_admit()
 * decides on a figure up to FREE_TRY_MS old and has the evictor thread
 * read a newer one.  See free_space() in cache.c.
 *
 * Locking.  One mutex guards the counters; it is never held while
 * evicting, and it is taken after the events lock, never before it.
 */
#ifndef HSMFS_CACHE_H
#define HSMFS_CACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "evict-policy.h"
#include "stats.h" /* struct cache_stats */

struct meta;

struct cache_config {
	uint64_t max;           /* bytes, 0: no limit */
	uint64_t min_free;      /* bytes to keep free on the store's filesystem */
	unsigned min_free_pct;  /* or a percentage of it (0: none) */
	uint64_t chunk;         /* fill granularity */
	int store_fd;           /* any descriptor on the store's filesystem */
	int state_fd;           /* STORE/.hsmfs, or -1 */
	struct meta *meta;      /* borrowed */
	struct evict_handlers on; /* set by the layer above (main.c) */
};

/*
 * Read the cache's size from the database and start the evictor.  With
 * cfg->meta, cfg->on's handlers are all set.
 */
int cache_init(const struct cache_config *cfg);
void cache_shutdown(void);

/*
 * Reserve need bytes for a fill, evicting first when they do not fit.
 * 0, or -ENOSPC when nothing more can be evicted (or not before
 * deadline, CLOCK_MONOTONIC).  Pair with cache_unreserve().
 */
int cache_admit(uint64_t need, const struct timespec *deadline);
void cache_unreserve(uint64_t n);
/*
 * Reserve need bytes only if they fit now (a readahead): 0, or -ENOSPC
 * after asking the evictor to make room for later, without waiting.
 */
int cache_try_admit(uint64_t need);

/*
 * cache_admit() found no room and nothing to evict (all pinned, open or
 * dirty): the caller fills need bytes past cache_max all the same, so
 * that the read is answered (a full cache serves reads, it does not
 * fail them), and calls cache_over_closed() once the file is closed:
 * if the cache is still past its limit, a round evicts what it can,
 * that file among the rest.  Counted in the stats (over_fills,
 * over_bytes).  Either under the events lock or not.
 */
void cache_over(uint64_t need);
void cache_over_closed(void);

/* The allocated bytes of the cache changed by delta. */
void cache_account(int64_t delta);

/* An eviction asked for by name (hsmfsctl evict) freed bytes of a file. */
void cache_evicted(uint64_t bytes);

/*
 * The store said ENOSPC: run a round of eviction for at least need
 * bytes, whatever the limits.  0 if anything was freed, else -ENOSPC.
 */
int cache_make_room(uint64_t need);

/* A snapshot of the counters. */
void cache_stats(struct cache_stats *ret);
/* Does the cache hold any evictable bytes (clean files with an origin)? */
bool cache_any(void);

#endif
