/*
 * stats.h - every counter the daemon reports (user.hsmfs.stats of the
 * root, hsmfsctl stats), in one table.
 *
 * Pure module: no I/O, no locks, no state.  Each row of STATS_FIELDS is
 * one counter; from the table come the struct of its owner (the module
 * that counts it), the JSON object of user.hsmfs.stats (stats_json(),
 * keys in table order) and hsmfsctl stats's rows (stats_rows, in row
 * order).  A row is X(owner, key, show, row, what):
 *   owner  the member of struct stats_snapshot, and the module, whose
 *          struct holds it: cache (cache_stats()), events
 *          (events_get_stats()), inode (inode_counts()), pt
 *          (pt_get_stats()), prefetch (prefetch_stats()), keeper and
 *          front (the saved region's head, saved.h), fds (fdlimit_stats());
 *   key    the JSON key and the name of the struct's field (uint64_t);
 *   show   how hsmfsctl shows it (enum stats_show);
 *   row    its line in hsmfsctl stats, from 1; every row number is used
 *          once (a number used twice is a -Woverride-init warning);
 *   what   hsmfsctl's label, which is also the field's description.
 * The JSON's keys, their order and their formats are part of the
 * product (tests and users parse them): a key is never renamed or
 * removed.
 *
 * Locks: each owner fills its struct under its own lock (the engine's
 * counters under S.lock, which its slow paths hold anyway: nothing is
 * counted on the fast path, so a read of a resident file is no hit
 * here, it never reaches the engine).
 */
#ifndef HSMFS_STATS_H
#define HSMFS_STATS_H

#include <stddef.h>
#include <stdint.h>

enum stats_show {
	STATS_NUM,    /* a number */
	STATS_SIZE,   /* bytes, with a binary unit */
	STATS_LIMIT,  /* bytes, with a binary unit; 0: "none" */
	STATS_HIDDEN, /* in the JSON only */
};

#define STATS_CACHE(X)                                                         \
	X(cache, cache_bytes, STATS_SIZE, 1, "cache size (allocated)")         \
	X(cache, cache_reserved, STATS_SIZE, 5, "reserved for fills running")  \
	X(cache, cache_max, STATS_LIMIT, 2, "cache_max")                       \
	X(cache, cache_min_free, STATS_LIMIT, 3, "cache_min_free")             \
	X(cache, fs_free, STATS_SIZE, 4, "free on the store's filesystem")     \
	X(cache, evicted_files, STATS_NUM, 6, "files evicted")                 \
	X(cache, evicted_bytes, STATS_SIZE, 7, "bytes evicted")                \
	X(cache, eviction_rounds, STATS_NUM, 8, "eviction rounds")             \
	X(cache, enospc, STATS_NUM, 9, "ENOSPC (nothing to evict)")

#define STATS_EVENTS(X)                                                        \
	/* slow-path reads whose bytes were present */                        \
	X(events, hits, STATS_NUM, 10, "hits (slow path, bytes present)")      \
	/* PRE_ACCESS events started; of them, asked ahead of a reader (or    \
	 * prefetched), and the rest of a miss's chunk (first_fill) */        \
	X(events, misses, STATS_NUM, 11, "misses (fills asked)")               \
	X(events, readahead, STATS_NUM, 12, "of which ahead of sequential reads") \
	X(events, beside, STATS_NUM, 13, "of which the rest of a read's chunk") \
	X(events, filled_bytes, STATS_SIZE, 18, "bytes filled")                \
	X(events, early_reads, STATS_NUM, 19, "reads answered at a hook's FILLED") \
	/* a count, which hsmfsctl shows with a unit of bytes */              \
	X(events, cache_drops, STATS_SIZE, 20,                                 \
	  "page-cache ranges of read-watched files dropped")                   \
	X(events, pre_access, STATS_NUM, 21, "PRE_ACCESS events")              \
	X(events, pre_modify, STATS_NUM, 22, "PRE_MODIFY events")              \
	X(events, open_perm, STATS_NUM, 23, "OPEN_PERM events")                \
	X(events, access_perm, STATS_NUM, 24, "ACCESS_PERM events")            \
	X(events, pre_dir, STATS_NUM, 25, "PRE_DIR events")                    \
	X(events, pre_lookup, STATS_NUM, 26, "PRE_LOOKUP events")              \
	/* PRE_DIR listings committed; of them, listed again by a refresh */  \
	X(events, listed, STATS_NUM, 27, "directories listed")                 \
	X(events, refreshed, STATS_NUM, 28, "directories listed again (refresh)") \
	X(events, denied, STATS_NUM, 29, "denied")                             \
	X(events, timeouts, STATS_NUM, 30, "timed out")                        \
	X(events, interrupted, STATS_NUM, 31, "interrupted")                   \
	X(events, closed_ahead, STATS_NUM, 32, "fills ahead cancelled at close") \
	/* not a count: the requests parked now */                            \
	X(events, parked, STATS_NUM, 33, "requests parked on hooks")           \
	X(events, over_bound, STATS_NUM, 37, "refused: user's bound (EAGAIN)") \
	X(events, fill_p50_us, STATS_NUM, 38, "fill latency p50 (us)")         \
	X(events, fill_p90_us, STATS_NUM, 39, "fill latency p90 (us)")         \
	X(events, fill_p99_us, STATS_NUM, 40, "fill latency p99 (us)")         \
	X(events, evictions_started, STATS_HIDDEN, 43, "evictions' punches begun") \
	X(events, evictions_done, STATS_HIDDEN, 44, "evictions' punches ended") \
	X(events, archives, STATS_NUM, 45, "ARCHIVE events")                   \
	/* files the archiver made clean, and their bytes */                  \
	X(events, archived_files, STATS_NUM, 46, "files archived")             \
	X(events, archived_bytes, STATS_SIZE, 47, "bytes archived")            \
	X(events, archive_failed, STATS_NUM, 48, "archive attempts failed")    \
	X(events, conflicts, STATS_NUM, 49, "archive conflicts")               \
	/* not counts: the archive queue now (queued, and being archived) */  \
	X(events, archive_pending, STATS_NUM, 50, "files waiting to be archived") \
	X(events, archive_running, STATS_NUM, 51, "files being archived")    \
	X(events, archive_pending_bytes, STATS_SIZE, 52, "bytes waiting to be archived") \
	/* removals and renames recorded, not yet applied at the origin */     \
	X(events, names_pending, STATS_NUM, 53, "name changes waiting for the origin") \
	/* bytes a second the origin took, over the last 10 s (an upload    \
	 * counts when it ends) */                                           \
	X(events, archive_rate, STATS_SIZE, 54, "archived a second (last 10 s)") \
	/* changed files archived before their time to make room */          \
	X(events, archived_for_room, STATS_NUM, 55, "archived early for room")

#define STATS_INODE(X)                                                         \
	X(inode, inodes, STATS_NUM, 41, "inodes remembered")                   \
	X(inode, cached_fds, STATS_NUM, 42, "cached descriptors")

#define STATS_PT(X)                                                            \
	X(pt, passthrough, STATS_NUM, 34, "kernel passthrough (1: on)")        \
	X(pt, passthrough_opens, STATS_NUM, 35, "opens passed through")        \
	X(pt, passthrough_refused, STATS_NUM, 36, "passthrough refused by the kernel")

/* the keeper's (keeper.h): daemons that came and went */
#define STATS_KEEPER(X)                                                        \
	X(keeper, restarts, STATS_NUM, 56, "daemons started after the first")  \
	X(keeper, handovers, STATS_NUM, 57, "of which by hsmfsctl restart")    \
	/* how the last daemon that ended ended: a signal, or its status */    \
	X(keeper, last_exit_signal, STATS_NUM, 58, "the last one ended by signal") \
	X(keeper, last_exit_status, STATS_NUM, 59, "the last one's exit status") \
	/* from a daemon's end to its successor's first reply, in ms */        \
	X(keeper, restart_pause_ms, STATS_NUM, 60, "pause of the last restart (ms)") \
	X(keeper, restart_pause_max_ms, STATS_NUM, 61, "longest pause of a restart (ms)")

/* inode's too, added later (the JSON's keys keep their order): of the
 * inodes remembered, those the kernel forgot, kept for file handles */
#define STATS_INODE_KEPT(X)                                                    \
	X(inode, inodes_kept, STATS_NUM, 62, "inodes kept for file handles")

/* the process's descriptors (fdlimit.h), added later: open now, the
 * limit (RLIMIT_NOFILE, raised to its hard limit at start), and the
 * EMFILE/ENFILE the daemon met (each failed a user's call with it, or
 * was waited out) */
#define STATS_FDS(X)                                                           \
	X(fds, fds, STATS_NUM, 63, "descriptors open")                         \
	X(fds, fds_limit, STATS_NUM, 64, "descriptor limit")                   \
	X(fds, fds_exhausted, STATS_NUM, 65, "out of descriptors (EMFILE, ENFILE)")

/* cache's too, added later: reads answered past cache_max because
 * nothing could be evicted (cache_over()), and the bytes admitted so */
#define STATS_CACHE_OVER(X)                                                    \
	X(cache, over_fills, STATS_NUM, 66, "fills past cache_max (nothing to evict)") \
	X(cache, over_bytes, STATS_SIZE, 67, "bytes filled past cache_max")

/* events' too, added later: of the directories listed, those whose URL
 * answered with a page (index.html), listed from its links */
#define STATS_EVENTS_PAGE(X)                                                   \
	X(events, listed_partial, STATS_NUM, 68, "of which from a page, not an index")

/* events' too, added later: archive attempts put off because the file
 * changed meanwhile or was busy (a change in flight, a passthrough
 * writer): queued again, not a failure */
#define STATS_EVENTS_DEFERRED(X)                                               \
	X(events, archive_deferred, STATS_NUM, 69, "archive attempts put off (file busy)")

/* the front end's (fanotify: the saved region's head, saved.h), added
 * later: events the kernel lost to an overflow, over the mount's life;
 * on FUSE always 0 */
#define STATS_FRONT(X)                                                         \
	X(front, lost_events, STATS_NUM, 70, "events lost (reads maybe of zeros)") \
	X(front, lost_changes, STATS_NUM, 71, "changes lost (maybe not dirty)")

#define STATS_PREFETCH(X)                                                      \
	X(prefetch, prefetched_files, STATS_NUM, 14, "sibling files prefetched") \
	X(prefetch, prefetched_bytes, STATS_SIZE, 15, "bytes prefetched")      \
	X(prefetch, prefetch_used_bytes, STATS_SIZE, 16, "of which opened")    \
	X(prefetch, prefetch_wasted_bytes, STATS_SIZE, 17, "of which given up unopened")

/* Every counter, in the JSON's order. */
#define STATS_FIELDS(X)                                                        \
	STATS_CACHE(X) STATS_EVENTS(X) STATS_INODE(X) STATS_PT(X) STATS_PREFETCH(X) \
	STATS_KEEPER(X) STATS_INODE_KEPT(X) STATS_FDS(X) STATS_CACHE_OVER(X) \
	STATS_EVENTS_PAGE(X) STATS_EVENTS_DEFERRED(X) STATS_FRONT(X)

#define STATS_MEMBER_(owner, key, show, row, what) uint64_t key;
#define STATS_ONE_(owner, key, show, row, what) +1
#define STATS_NFIELDS (0 STATS_FIELDS(STATS_ONE_))

struct cache_stats { STATS_CACHE(STATS_MEMBER_) STATS_CACHE_OVER(STATS_MEMBER_) };
struct events_stats {
	STATS_EVENTS(STATS_MEMBER_) STATS_EVENTS_PAGE(STATS_MEMBER_)
	STATS_EVENTS_DEFERRED(STATS_MEMBER_)
};
struct inode_stats { STATS_INODE(STATS_MEMBER_) STATS_INODE_KEPT(STATS_MEMBER_) };
struct pt_stats { STATS_PT(STATS_MEMBER_) };
struct prefetch_stats { STATS_PREFETCH(STATS_MEMBER_) };
struct keeper_stats { STATS_KEEPER(STATS_MEMBER_) };
struct fds_stats { STATS_FDS(STATS_MEMBER_) };
struct front_stats { STATS_FRONT(STATS_MEMBER_) };

/* What user.hsmfs.stats reports: every owner's struct, read one by one. */
struct stats_snapshot {
	struct cache_stats cache;
	struct events_stats events;
	struct inode_stats inode;
	struct pt_stats pt;
	struct prefetch_stats prefetch;
	struct keeper_stats keeper;
	struct fds_stats fds;
	struct front_stats front;
};

/*
 * The JSON object of s, one line: {"key": value, ...}\n with every key
 * of STATS_FIELDS in its order.  Writes at most size bytes, NUL included;
 * returns the length of the whole object (snprintf's contract: a value
 * of size or more means it was cut).
 */
int stats_json(const struct stats_snapshot *s, char *buf, size_t size);

/* One line of hsmfsctl stats. */
struct stats_row {
	const char *key;      /* JSON key */
	enum stats_show show;
	const char *what;     /* label */
};

/* Every counter, indexed by its row number less one. */
extern const struct stats_row stats_rows[STATS_NFIELDS];

#endif
