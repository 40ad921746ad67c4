/* vattr.c - see engine.h */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/types.h>
#include "cache.h"
#include "fdlimit.h"
#include "archive.h"
#include "engine.h"
#include "events.h"
#include "fstate.h"
#include "hooks.h"
#include "hsmfs/protocol.h"
#include "inode.h"
#include "meta.h"
#include "ranges.h"
#include "stats.h"
#include "store.h"
#include "supervise.h"
#include "saved.h"

static uint64_t lat_value(unsigned b);
_Static_assert(HOOK_LAT_BUCKETS == LAT_BUCKETS, "a hook's latency buckets are the fills'");
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
	S.st.cache_drops++;
	eunlock();
}

static void events_get_stats(struct events_stats *ret)
{
	uint64_t total = 0;

	elock();
	*ret = S.st;
	ret->parked = E.nparked;
	for (unsigned b = 0; b < LAT_BUCKETS; b++)
		total += S.lat[b];
	ret->fill_p50_us = lat_percentile(S.lat, total, 50);
	ret->fill_p90_us = lat_percentile(S.lat, total, 90);
	ret->fill_p99_us = lat_percentile(S.lat, total, 99);
	archive_stats(ret);
	eunlock();
}

void events_stats_snapshot(struct stats_snapshot *s)
{
	events_get_stats(&s->events);
	cache_stats(&s->cache);
	inode_counts(&s->inode.inodes, &s->inode.inodes_kept, &s->inode.cached_fds);
	fdlimit_stats(&s->fds.fds, &s->fds.fds_limit, &s->fds.fds_exhausted);
	{
		const struct saved_head *h = saved_head();
		int st = h->last_status;

		s->keeper = (struct keeper_stats){
			.restarts = h->restarts, .handovers = h->handovers,
			.last_exit_signal = h->restarts && WIFSIGNALED(st) ? WTERMSIG(st) : 0,
			.last_exit_status = h->restarts && WIFEXITED(st) ? WEXITSTATUS(st) : 0,
			.restart_pause_ms = __atomic_load_n(&h->pause_last_ms, __ATOMIC_RELAXED),
			.restart_pause_max_ms = __atomic_load_n(&h->pause_max_ms,
								__ATOMIC_RELAXED) };
		s->front = (struct front_stats){
			.lost_events = __atomic_load_n(&h->fan_lost_events, __ATOMIC_RELAXED),
			.lost_changes = __atomic_load_n(&h->fan_lost_changes, __ATOMIC_RELAXED) };
	}
}

/* A value of n bytes in val, given as getxattr(2) gives it (bufsize 0: its length). */
static ssize_t value_out(const char *val, int n, size_t cap, char *buf, size_t bufsize)
{
	if (n >= (int)cap)
		n = (int)cap - 1;
	if (!bufsize)
		return n;
	if ((size_t)n > bufsize)
		return -ERANGE;
	memcpy(buf, val, (size_t)n);
	return n;
}

ssize_t events_stats_value(const struct stats_snapshot *s, char *buf, size_t bufsize)
{
	char val[HSMFS_MAX_PATH + 64];

	return value_out(val, stats_json(s, val, sizeof(val)), sizeof(val), buf, bufsize);
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
		/*
		 * A line a hook: name, pid, kind, events, pending, answered,
		 * denied, timed out, latency p50 and p99 (microseconds), subtree
		 * (last: the one field that may hold a space).
		 */
		for (struct hook *h = E.hooks; h && len < cap; h = h->next) {
			uint64_t total = 0;

			for (unsigned b = 0; b < HOOK_LAT_BUCKETS; b++)
				total += h->lat[b];
			len += snprintf(list + len, cap - len,
					"%s\t%d\t%s\t%s%s\t%u\t%llu\t%llu\t%llu\t%llu\t%llu\t%s\n",
					h->name, (int)h->pid,
					h->kind == HSMFS_KIND_FILL ? "fill" : "watch",
					h->mask & HSMFS_MASK(HSMFS_EV_PRE_ACCESS) ? "A" : "-",
					h->mask & HSMFS_MASK(HSMFS_EV_PRE_MODIFY) ? "M" : "-",
					h->assigned, (unsigned long long)h->answered,
					(unsigned long long)h->denied,
					(unsigned long long)h->timeouts,
					(unsigned long long)(total ? lat_percentile(h->lat, total, 50) : 0),
					(unsigned long long)(total ? lat_percentile(h->lat, total, 99) : 0),
					h->subtree[0] ? h->subtree : "/");
		}
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
	if (!strcmp(name, "user.hsmfs.hook_stats") && in == inode_root()) {
		ssize_t len = hooks_stats(NULL, 0);
		char *list;

		if (len < 0)
			return len;
		if (!bufsize)
			return len;
		if ((size_t)len > bufsize)
			return -ERANGE;
		list = malloc(len + 1);
		if (!list)
			return -ENOMEM;
		/* a hook may have said more meanwhile: what fits, or ERANGE again */
		len = hooks_stats(list, len + 1);
		if (len >= 0 && (size_t)len <= bufsize)
			memcpy(buf, list, len);
		else if (len >= 0)
			len = -ERANGE;
		free(list);
		return len;
	}
	if (!strcmp(name, "user.hsmfs.hook_said") && in == inode_root()) {
		/* the -o hook= command's last line of output: its last error, often */
		supervise_last_line(val, sizeof(val));
		n = strlen(val);
	} else if (!strcmp(name, "user.hsmfs.socket") || !strcmp(name, "user.hsmfs.store")) {
		if (in != inode_root())
			return -ENODATA;
		n = snprintf(val, sizeof(val), "%s",
			     name[11] == 's' && name[12] == 'o' ? hooks_socket_path() :
								  S.cfg.store_path);
	} else if (in == inode_root() && !strcmp(name, "user.hsmfs.origin")) {
		if (!S.cfg.origin)
			return -ENODATA;
		n = snprintf(val, sizeof(val), "%s", S.cfg.origin);
	} else if (inode_is_dir(in) && !strcmp(name, "user.hsmfs.state")) {
		/* a directory: listed from an origin, not yet, or plain */
		struct meta_file f;
		int r = meta_get(S.cfg.meta, inode_ino(in), &f);

		if (r && r != -ENOENT)
			return -EIO;
		n = snprintf(val, sizeof(val), "%s%s",
			     r ? "directory" : meta_state_name(f.state),
			     !r && (f.flags & META_F_PARTIAL) ? ",partial" : "");
		if (!r)
			meta_file_free(&f);
	} else {
		if (events_load(in))
			return -EIO;
		elock();
		fs = inode_state(in);
		if (!strcmp(name, "user.hsmfs.state")) {
			n = snprintf(val, sizeof(val), "%s%s%s%s%s%s",
				     fs ? meta_state_name(fs->state) : "resident",
				     fs && (fs->flags & META_F_NEW) ? ",new" : "",
				     fs && fs->arch == ARCH_RUNNING ? ",archiving" :
				     fs && (fs->flags & META_F_CONFLICT) ? ",conflict" : "",
				     fs && (fs->flags & META_F_PINNED) ? ",pinned" : "",
				     fs && (fs->flags & META_F_STALE) ? ",stale" : "",
				     inode_flags(in) & INODE_PASSTHROUGH ? ",passthrough" : "");
		} else if (!strcmp(name, "user.hsmfs.archive_error") && fs && fs->arch_err) {
			/* the last attempt's error and the attempts failed in a row */
			n = snprintf(val, sizeof(val), "%s (%u attempt%s)", strerror(-fs->arch_err),
				     fs->arch_tries, fs->arch_tries == 1 ? "" : "s");
		} else if (!strcmp(name, "user.hsmfs.version") && fs && fs->version) {
			n = snprintf(val, sizeof(val), "%s", fs->version);
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
	return value_out(val, n, sizeof(val), buf, bufsize);
}
