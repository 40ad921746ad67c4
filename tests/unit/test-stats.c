/* test-stats.c - the counters' table: the JSON and hsmfsctl's rows */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "stats.h"
#include "tap.h"

/* The object user.hsmfs.stats has always been, written out by hand. */
static int reference_json(const struct stats_snapshot *s, char *val, size_t size)
{
	const struct cache_stats *cs = &s->cache;
	const struct events_stats *es = &s->events;
	const struct pt_stats *ps = &s->pt;
	const struct prefetch_stats *pf = &s->prefetch;

	return snprintf(val, size,
			"{\"cache_bytes\": %llu, \"cache_reserved\": %llu, "
			"\"cache_max\": %llu, \"cache_min_free\": %llu, "
			"\"fs_free\": %llu, \"evicted_files\": %llu, "
			"\"evicted_bytes\": %llu, \"eviction_rounds\": %llu, "
			"\"enospc\": %llu, \"hits\": %llu, \"misses\": %llu, \"readahead\": %llu, "
			"\"beside\": %llu, \"filled_bytes\": %llu, \"early_reads\": %llu, \"cache_drops\": %llu, "
			"\"pre_access\": %llu, "
			"\"pre_modify\": %llu, \"open_perm\": %llu, \"access_perm\": %llu, "
			"\"pre_dir\": %llu, \"pre_lookup\": %llu, \"listed\": %llu, "
			"\"refreshed\": %llu, "
			"\"denied\": %llu, \"timeouts\": %llu, "
			"\"interrupted\": %llu, \"closed_ahead\": %llu, \"parked\": %llu, "
			"\"over_bound\": %llu, \"fill_p50_us\": %llu, "
			"\"fill_p90_us\": %llu, \"fill_p99_us\": %llu, "
			"\"evictions_started\": %llu, \"evictions_done\": %llu, "
			"\"archives\": %llu, \"archived_files\": %llu, \"archived_bytes\": %llu, "
			"\"archive_failed\": %llu, \"conflicts\": %llu, "
			"\"archive_pending\": %llu, \"archive_running\": %llu, "
			"\"archive_pending_bytes\": %llu, \"names_pending\": %llu, "
			"\"archive_rate\": %llu, \"archived_for_room\": %llu, "
			"\"inodes\": %llu, \"cached_fds\": %llu, "
			"\"passthrough\": %d, \"passthrough_opens\": %llu, "
			"\"passthrough_refused\": %llu, \"prefetched_files\": %llu, "
			"\"prefetched_bytes\": %llu, \"prefetch_used_bytes\": %llu, "
			"\"prefetch_wasted_bytes\": %llu, \"restarts\": %llu, \"handovers\": %llu, "
			"\"last_exit_signal\": %llu, \"last_exit_status\": %llu, "
			"\"restart_pause_ms\": %llu, \"restart_pause_max_ms\": %llu, "
			"\"inodes_kept\": %llu, \"fds\": %llu, \"fds_limit\": %llu, "
			"\"fds_exhausted\": %llu, \"over_fills\": %llu, \"over_bytes\": %llu, "
			"\"listed_partial\": %llu, \"archive_deferred\": %llu, "
			"\"lost_events\": %llu, \"lost_changes\": %llu}\n",
			(unsigned long long)cs->cache_bytes, (unsigned long long)cs->cache_reserved,
			(unsigned long long)cs->cache_max, (unsigned long long)cs->cache_min_free,
			(unsigned long long)cs->fs_free, (unsigned long long)cs->evicted_files,
			(unsigned long long)cs->evicted_bytes,
			(unsigned long long)cs->eviction_rounds, (unsigned long long)cs->enospc,
			(unsigned long long)es->hits, (unsigned long long)es->misses,
			(unsigned long long)es->readahead, (unsigned long long)es->beside,
			(unsigned long long)es->filled_bytes, (unsigned long long)es->early_reads,
			(unsigned long long)es->cache_drops, (unsigned long long)es->pre_access,
			(unsigned long long)es->pre_modify, (unsigned long long)es->open_perm,
			(unsigned long long)es->access_perm, (unsigned long long)es->pre_dir,
			(unsigned long long)es->pre_lookup, (unsigned long long)es->listed,
			(unsigned long long)es->refreshed, (unsigned long long)es->denied,
			(unsigned long long)es->timeouts, (unsigned long long)es->interrupted,
			(unsigned long long)es->closed_ahead, (unsigned long long)es->parked,
			(unsigned long long)es->over_bound, (unsigned long long)es->fill_p50_us,
			(unsigned long long)es->fill_p90_us, (unsigned long long)es->fill_p99_us,
			(unsigned long long)es->evictions_started,
			(unsigned long long)es->evictions_done,
			(unsigned long long)es->archives, (unsigned long long)es->archived_files,
			(unsigned long long)es->archived_bytes, (unsigned long long)es->archive_failed,
			(unsigned long long)es->conflicts, (unsigned long long)es->archive_pending,
			(unsigned long long)es->archive_running,
			(unsigned long long)es->archive_pending_bytes,
			(unsigned long long)es->names_pending,
			(unsigned long long)es->archive_rate,
			(unsigned long long)es->archived_for_room,
			(unsigned long long)s->inode.inodes, (unsigned long long)s->inode.cached_fds,
			(int)ps->passthrough, (unsigned long long)ps->passthrough_opens,
			(unsigned long long)ps->passthrough_refused,
			(unsigned long long)pf->prefetched_files,
			(unsigned long long)pf->prefetched_bytes,
			(unsigned long long)pf->prefetch_used_bytes,
			(unsigned long long)pf->prefetch_wasted_bytes,
			(unsigned long long)s->keeper.restarts, (unsigned long long)s->keeper.handovers,
			(unsigned long long)s->keeper.last_exit_signal,
			(unsigned long long)s->keeper.last_exit_status,
			(unsigned long long)s->keeper.restart_pause_ms,
			(unsigned long long)s->keeper.restart_pause_max_ms,
			(unsigned long long)s->inode.inodes_kept, (unsigned long long)s->fds.fds,
			(unsigned long long)s->fds.fds_limit, (unsigned long long)s->fds.fds_exhausted,
			(unsigned long long)cs->over_fills, (unsigned long long)cs->over_bytes,
			(unsigned long long)es->listed_partial,
			(unsigned long long)es->archive_deferred,
			(unsigned long long)s->front.lost_events,
			(unsigned long long)s->front.lost_changes);
}

int main(void)
{
	char got[4096], want[4096], small[40];
	struct stats_snapshot s;
	uint64_t v = 1;
	int n, m;
	bool all_rows = true, unique = true, in_json = true;

	/* every counter a value of its own; passthrough is 0 or 1 */
#define FILL(owner, key, show, row, what) s.owner.key = v++ * 1000003;
	STATS_FIELDS(FILL)
#undef FILL
	s.pt.passthrough = 1;
	n = stats_json(&s, got, sizeof(got));
	m = reference_json(&s, want, sizeof(want));
	ok(n == m && !strcmp(got, want), "the JSON is byte for byte the reference (%d bytes)", n);
	memset(&s, 0, sizeof(s));
	n = stats_json(&s, got, sizeof(got));
	m = reference_json(&s, want, sizeof(want));
	ok(n == m && !strcmp(got, want), "and so with every counter 0");
	ok(STATS_NFIELDS == 71, "71 counters (%d)", STATS_NFIELDS);

	n = stats_json(&s, small, sizeof(small));
	ok(n == m && strlen(small) == sizeof(small) - 1 && !strncmp(small, want, sizeof(small) - 1),
	   "a short buffer: cut and terminated, the whole length returned");
	ok(stats_json(&s, NULL, 0) == m, "no buffer: the length only");

	for (size_t i = 0; i < STATS_NFIELDS; i++) {
		char pat[64];

		if (!stats_rows[i].key || !stats_rows[i].what) {
			all_rows = false;
			continue;
		}
		for (size_t j = 0; j < i; j++)
			if (stats_rows[j].key && !strcmp(stats_rows[i].key, stats_rows[j].key))
				unique = false;
		snprintf(pat, sizeof(pat), "\"%s\": ", stats_rows[i].key);
		if (!strstr(want, pat) || strstr(strstr(want, pat) + 1, pat))
			in_json = false;
	}
	ok(all_rows, "every row number from 1 to %d is used", STATS_NFIELDS);
	ok(unique, "every key is in one row");
	ok(in_json, "every row's key is in the JSON once");
	ok(stats_rows[0].key && !strcmp(stats_rows[0].key, "cache_bytes") &&
		   stats_rows[41].key && !strcmp(stats_rows[41].key, "cached_fds") &&
		   stats_rows[42].show == STATS_HIDDEN && stats_rows[43].show == STATS_HIDDEN,
	   "hsmfsctl's order: cache_bytes first, cached_fds last shown, evictions hidden");
	return tap_done();
}
