/*
 * evict-policy.h - the eviction policy: what may be evicted, in what
 * order, and when.  evict.c carries an eviction out (database, memory,
 * mark, punch); cache.c counts the bytes and runs the evictor thread;
 * the decisions are all here.
 *
 * The policy, as a user would read it:
 *
 *   What.  The cache is the clean files that have an origin
 *   (placeholders, partial and resident files).  A file is never
 *   evicted while it is dirty, pinned, being filled, being changed or
 *   evicted, or open in passthrough mode.  An open file is evicted only
 *   on a mount with cache limits (where its reads are counted), only
 *   while none of its reads is between its check and its reply, and
 *   only away from the span its reader is at; hsmfsctl evict refuses
 *   open files.
 *
 *   In what order.  Least recently used file first, by the time of its
 *   last open, close or fill.  The database lists the candidates in that
 *   order (meta.c's Q_LRU: clean, unpinned rows with allocated bytes and
 *   a known path, ORDER BY atime, ino, EVICT_BATCH at a time); the times
 *   reach it lazily (its time of a file lags the last use by less than
 *   EVICT_ATIME_LAZY_MS, touched() in change.c), so a file used more
 *   than EVICT_ATIME_SLACK_MS after its listed time is passed over and
 *   its time written.  If the list ends
 *   before room is made, it is read again in the order now written, and
 *   what was passed over is taken: the order is a preference, room is
 *   not.
 *
 *   When.  A fill is admitted only if cache_max and cache_min_free still
 *   hold with its bytes reserved.  If not, a round of eviction runs down
 *   to a low watermark: cache_max less a tenth of it (at least one
 *   chunk), and cache_min_free plus one chunk.  ENOSPC from the store
 *   forces a round that frees at least the bytes asked for, whatever the
 *   limits.  A fill that still does not fit after a round that freed
 *   nothing fails with ENOSPC.
 *
 *   Changed files.  They are the user's data, not cache: never evicted
 *   while dirty, and cache_max does not count them.  They fill the
 *   store's filesystem, though: with write-back on (archive_after) and
 *   cache_min_free set, the evictor reads the free space every
 *   EVICT_PRESSURE_MS; below cache_min_free it runs a round, and if
 *   clean files cannot make the room back to the low watermark, changed
 *   files are archived before their time, the oldest change first,
 *   for the bytes still missing (the "archived_for_room" statistic);
 *   once archived they are clean, and the next rounds release them,
 *   least recently used first.  cache_min_free is the buffer: a writer
 *   that outruns the origin's upload until it is spent gets ENOSPC
 *   (after a round, as above), never a lost or released change.
 *
 * The predicates are pure: the caller gives the figures and the facts
 * and holds whatever lock makes them true.  A round walks the candidates
 * (evict_walk_next()) through the handlers the layer above registered
 * (cache_init), for as long as the evictor (cache.c) wants.
 */
#ifndef HSMFS_EVICT_POLICY_H
#define HSMFS_EVICT_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "ranges.h"

struct meta;
struct meta_victim;

#define EVICT_ATIME_LAZY_MS 60000 /* the database's time of a file lags its
				   * last use by less than this */
#define EVICT_ATIME_SLACK_MS 1000 /* a use this much after its listed time:
				   * passed over (out of order) */
#define EVICT_BATCH 256           /* candidates read from the database at a time */
#define EVICT_PRESSURE_MS 250     /* with write-back on and cache_min_free: how
				   * often the evictor reads the free space */

/* When: the limits (cache_max, cache_min_free) and the fill granularity. */
struct evict_limits {
	uint64_t max;           /* bytes, 0: no limit */
	uint64_t min_free;      /* bytes to keep free on the store's filesystem */
	unsigned min_free_pct;  /* or a percentage of it (0: none) */
	uint64_t chunk;         /* fill granularity */
};

/* The figures a decision is made on. */
struct evict_figures {
	uint64_t used;          /* allocated bytes of the cache */
	uint64_t reserved;      /* admitted to fills, not yet allocated */
	uint64_t fs_avail;      /* free bytes of the store's filesystem for us */
	uint64_t fs_size;       /* its size */
};

/* Does the policy look at the store's free space (cache_min_free set)? */
static inline bool evict_policy_watches_free(const struct evict_limits *l)
{
	return l->min_free || l->min_free_pct;
}

/* The bytes cache_min_free keeps free on a filesystem of fs_size. */
uint64_t evict_policy_min_free(const struct evict_limits *l, uint64_t fs_size);

/*
 * Bytes to evict so that need more fit: 0 when they fit.  With slack,
 * down to the low watermark (a round's goal); without, to the limits
 * themselves (admission).  f->fs_avail and f->fs_size are read only
 * when evict_policy_watches_free().
 */
uint64_t evict_policy_deficit(const struct evict_limits *l, const struct evict_figures *f,
			      uint64_t need, bool slack);

/* What: the facts about one file the eligibility rule reads. */
struct evict_facts {
	bool dirty;             /* local data, not cache */
	bool pinned;
	bool filling;           /* fill events in flight */
	bool changing;          /* user changes in flight */
	bool evicting;          /* an eviction of it runs */
	bool passthrough;       /* the kernel reads its store file itself */
	bool open;
	bool tracked;           /* its reads are counted (tracked() in fstate.c) */
	bool reading;           /* a counted read is between check and reply */
};

#define EVICT_WAIT_READS 1 /* eligible once its reads in flight are answered */

/*
 * May the file be evicted now?  0, -EBUSY, or EVICT_WAIT_READS: only
 * its reads in flight keep it (their replies take microseconds; the
 * caller may wait for them briefly and ask again, and takes
 * EVICT_WAIT_READS after that wait as -EBUSY).  by_name: hsmfsctl
 * evict, which refuses an open file; the evictor takes parts of one
 * (evict_policy_open_spans).
 */
int evict_policy_eligible(const struct evict_facts *f, bool by_name);

/*
 * In what order: was a file whose listed time is listed_atime used
 * since (its time now atime, ms), so that a round in order passes it
 * over?
 */
static inline bool evict_policy_used_since(int64_t atime, int64_t listed_atime)
{
	return atime > listed_atime + EVICT_ATIME_SLACK_MS;
}

/*
 * The ranges of an open file of size bytes that an eviction takes: all
 * but the span [hot_lo, hot_hi) its last miss and readahead cover (0:
 * an end not known).  Fills ret[0..*ret_n), at most 2.
 */
void evict_policy_open_spans(uint64_t hot_lo, uint64_t hot_hi, uint64_t size,
			     struct range ret[2], unsigned *ret_n);

/*
 * What the layer above carries out for a round: cache_init() takes
 * these, registered at start-up (main.c).
 */
struct evict_handlers {
	/* Bring the database's list up to date (the write-behind). */
	void (*sync)(void);
	/*
	 * Evict the file of v (evict_victim() in evict.h): 0 with
	 * *ret_freed, -EAGAIN when in_order and it was used since its
	 * listed time, -ENOSPC when its eviction cannot be recorded, or
	 * another -errno when it is not evictable now.
	 */
	int (*evict)(const struct meta_victim *v, bool in_order, uint64_t *ret_freed);
	/*
	 * With write-back on (else NULL): the store is short of need bytes
	 * that no clean file could give; archive changed files now, the
	 * oldest change first, so that later rounds release them
	 * (archive_pressure() in archive.h).  Must not block.
	 */
	void (*archive)(uint64_t need);
};

/*
 * One round's walk over the candidates, least recently used first; the
 * evictor (cache.c) drives it and stops once its goal is met:
 *
 *	evict_walk_start(&w, on, meta);
 *	while (goal not met && evict_walk_next(&w, &got))
 *		count got;
 *	evict_walk_end(&w);
 *
 * The walk's fields are its own.  No lock held.
 */
struct evict_walk {
	const struct evict_handlers *on;
	struct meta *meta;         /* the candidates' list */
	struct meta_victim *v;     /* the batch read, NULL: none */
	size_t n, i;               /* its size, the next to try */
	uint64_t skipped;          /* candidates of the list passed over */
	bool in_order;             /* the first reading of the list */
	bool reordered;            /* a file used since was passed over */
	bool full_said;
};

/* Start a round's walk: the database, the candidates' list, brought up to date. */
void evict_walk_start(struct evict_walk *w, const struct evict_handlers *on,
		      struct meta *meta);
/*
 * Evict the next candidate that can go: true with *ret_got the bytes it
 * freed, or true with *ret_got 0 where a batch of the list ended (the
 * caller looks at its goal again); false when nothing more can go.
 */
bool evict_walk_next(struct evict_walk *w, uint64_t *ret_got);
void evict_walk_end(struct evict_walk *w);

#endif
