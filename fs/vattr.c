/* vattr.c - see engine.h */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "cache.h"
#include "engine.h"
#include "events.h"
#include "fstate.h"
#include "hooks.h"
#include "hsmfs/protocol.h"
#include "inode.h"
#include "meta.h"
#include "passthrough.h"
#include "prefetch.h"
#include "ranges.h"
#include "store.h"
#include "vattr.h"

static uint64_t lat_value(unsigned b);
static uint64_t lat_percentile(const uint64_t *h, uint64_t total, unsigned pct);

static uint64_t lat_value(unsigned b)
{
	if (b < 8)
		return b;
	return (uint64_t)(8 + b % 8) << (b / 8 - 1);
}

static uint64_t lat_percentile(const uint64_t *h, uint64_t total, unsigned pct)
{
	uint64_t want = (total * pct + 99) / 100, seen = 0;

	if (!total)
		return 0;
	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		seen += h[b];
		if (seen >= want)
			return lat_value(b);
	}
	return lat_value(LAT_BUCKETS - 1);
}

void events_cache_dropped(void)
{
	elock();
	E.st.cache_drops++;
	eunlock();
}

void events_get_stats(struct events_stats *ret)
{
	uint64_t total = 0;

	elock();
	*ret = E.st;
	ret->parked = E.nparked;
	for (unsigned b = 0; b < LAT_BUCKETS; b++)
		total += E.lat[b];
	ret->fill_p50_us = lat_percentile(E.lat, total, 50);
	ret->fill_p90_us = lat_percentile(E.lat, total, 90);
	ret->fill_p99_us = lat_percentile(E.lat, total, 99);
	eunlock();
}

ssize_t events_xattr(struct inode *in, uint64_t size, const char *name,
		     char *buf, size_t bufsize)
{
	char val[HSMFS_MAX_PATH + 64];
	struct fstate *fs;
	int n;

	if (!strcmp(name, "user.hsmfs.hooks") && in == inode_root()) {
		size_t cap = HOOKS_MAX * (HSMFS_MAX_NAME + HSMFS_MAX_PATH + 80), len = 0;
		char *list = malloc(cap);

		if (!list)
			return -ENOMEM;
		elock();
		for (struct hook *h = E.hooks; h && len < cap; h = h->next)
			len += snprintf(list + len, cap - len, "%s\t%d\t%s\t%s%s\t%u\t%s\n",
					h->name, (int)h->pid,
					h->kind == HSMFS_KIND_FILL ? "fill" : "watch",
					h->mask & HSMFS_MASK(HSMFS_EV_PRE_ACCESS) ? "A" : "-",
					h->mask & HSMFS_MASK(HSMFS_EV_PRE_MODIFY) ? "M" : "-",
					h->assigned, h->subtree[0] ? h->subtree : "/");
		eunlock();
		if (len > cap)
			len = cap;
		n = len;
		if (bufsize && (size_t)n > bufsize)
			n = -ERANGE;
		else if (bufsize)
			memcpy(buf, list, n);
		free(list);
		return n;
	}
	if (!strcmp(name, "user.hsmfs.stats") && in == inode_root()) {
		struct events_stats es;
		struct cache_stats cs;
		struct pt_stats ps;
		struct prefetch_stats pf;
		uint64_t inodes, fds;

		events_get_stats(&es);
		pt_get_stats(&ps);
		prefetch_stats(&pf);
		cache_stats(&cs);
		inode_counts(&inodes, &fds);
		n = snprintf(val, sizeof(val),
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
			     "\"inodes\": %llu, \"cached_fds\": %llu, "
			     "\"passthrough\": %d, \"passthrough_opens\": %llu, "
			     "\"passthrough_refused\": %llu, \"prefetched_files\": %llu, "
			     "\"prefetched_bytes\": %llu, \"prefetch_used_bytes\": %llu, "
			     "\"prefetch_wasted_bytes\": %llu}\n",
			     (unsigned long long)cs.used, (unsigned long long)cs.reserved,
			     (unsigned long long)cs.max, (unsigned long long)cs.min_free,
			     (unsigned long long)cs.fs_free,
			     (unsigned long long)cs.evicted_files,
			     (unsigned long long)cs.evicted_bytes,
			     (unsigned long long)cs.eviction_rounds,
			     (unsigned long long)cs.enospc, (unsigned long long)es.hits,
			     (unsigned long long)es.misses, (unsigned long long)es.readahead,
			     (unsigned long long)es.beside,
			     (unsigned long long)es.filled_bytes,
			     (unsigned long long)es.early_reads,
			     (unsigned long long)es.cache_drops,
			     (unsigned long long)es.pre_access,
			     (unsigned long long)es.pre_modify,
			     (unsigned long long)es.open_perm, (unsigned long long)es.access_perm,
			     (unsigned long long)es.pre_dir, (unsigned long long)es.pre_lookup,
			     (unsigned long long)es.listed,
			     (unsigned long long)es.refreshed,
			     (unsigned long long)es.denied, (unsigned long long)es.timeouts,
			     (unsigned long long)es.interrupted,
			     (unsigned long long)es.closed_ahead,
			     (unsigned long long)es.parked,
			     (unsigned long long)es.over_bound,
			     (unsigned long long)es.fill_p50_us,
			     (unsigned long long)es.fill_p90_us,
			     (unsigned long long)es.fill_p99_us,
			     (unsigned long long)es.evictions_started,
			     (unsigned long long)es.evictions_done,
			     (unsigned long long)inodes, (unsigned long long)fds,
			     ps.enabled, (unsigned long long)ps.opens,
			     (unsigned long long)ps.refused, (unsigned long long)pf.files,
			     (unsigned long long)pf.bytes, (unsigned long long)pf.used_bytes,
			     (unsigned long long)pf.wasted_bytes);
	} else if (!strcmp(name, "user.hsmfs.socket") || !strcmp(name, "user.hsmfs.store")) {
		if (in != inode_root())
			return -ENODATA;
		n = snprintf(val, sizeof(val), "%s",
			     name[11] == 's' && name[12] == 'o' ? hooks_socket_path() :
								  E.cfg.store_path);
	} else if (in == inode_root() && !strcmp(name, "user.hsmfs.origin")) {
		if (!E.cfg.origin)
			return -ENODATA;
		n = snprintf(val, sizeof(val), "%s", E.cfg.origin);
	} else if (inode_is_dir(in) && !strcmp(name, "user.hsmfs.state")) {
		/* a directory: listed from an origin, not yet, or plain */
		struct meta_file f;
		int r = meta_get(E.cfg.meta, inode_ino(in), &f);

		if (r && r != -ENOENT)
			return -EIO;
		n = snprintf(val, sizeof(val), "%s",
			     r ? "directory" : meta_state_name(f.state));
		if (!r)
			meta_file_free(&f);
	} else {
		if (events_load(in))
			return -EIO;
		elock();
		fs = inode_state(in);
		if (!strcmp(name, "user.hsmfs.state")) {
			n = snprintf(val, sizeof(val), "%s%s%s%s",
				     fs ? meta_state_name(fs->state) : "resident",
				     fs && (fs->flags & META_F_PINNED) ? ",pinned" : "",
				     fs && (fs->flags & META_F_STALE) ? ",stale" : "",
				     inode_flags(in) & INODE_PASSTHROUGH ? ",passthrough" : "");
		} else if (!strcmp(name, "user.hsmfs.present")) {
			n = snprintf(val, sizeof(val), "%llu",
				     (unsigned long long)(fs ? rs_total(&fs->present) : size));
		} else if (!strcmp(name, "user.hsmfs.origin") && fs && fs->origin) {
			n = snprintf(val, sizeof(val), "%s", fs->origin);
		} else if (!strcmp(name, "user.hsmfs.filling") && fs && fs->inflight) {
			/* "DONE BYTES" of the fills under way, DONE from PROGRESS */
			uint64_t done = 0, bytes = 0;

			for (struct event *ev = fs->inflight; ev; ev = ev->fnext) {
				uint64_t b = ev->hint_end - ev->hint_start;

				bytes += b;
				done += ev->progress < b ? ev->progress : b;
			}
			n = snprintf(val, sizeof(val), "%llu %llu", (unsigned long long)done,
				     (unsigned long long)bytes);
		} else {
			n = -ENODATA;
		}
		eunlock();
		if (n < 0)
			return n;
	}
	if (n >= (int)sizeof(val))
		n = sizeof(val) - 1;
	if (!bufsize)
		return n;
	if ((size_t)n > bufsize)
		return -ERANGE;
	memcpy(buf, val, n);
	return n;
}
