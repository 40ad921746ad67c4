/* prom.c - see prom.h */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "prom.h"

#define C PROM_COUNTER
#define G PROM_GAUGE

/*
 * A counter of events or bytes is a counter, with _total; a state now
 * (sizes, limits, queues, the last restart) a gauge.  cache_drops is a
 * count of ranges although hsmfsctl shows it with a unit of bytes.
 */
const struct prom_metric prom_metrics[STATS_NFIELDS] = {
	{ "cache_bytes", "hsmfs_cache_bytes", G, 1, "cache size (allocated bytes)" },
	{ "cache_reserved", "hsmfs_cache_reserved_bytes", G, 1, NULL },
	{ "cache_max", "hsmfs_cache_max_bytes", G, 1, "cache_max= (0: none)" },
	{ "cache_min_free", "hsmfs_cache_min_free_bytes", G, 1, "cache_min_free= (0: none)" },
	{ "fs_free", "hsmfs_fs_free_bytes", G, 1, NULL },
	{ "evicted_files", "hsmfs_evicted_files_total", C, 1, NULL },
	{ "evicted_bytes", "hsmfs_evicted_bytes_total", C, 1, NULL },
	{ "eviction_rounds", "hsmfs_eviction_rounds_total", C, 1, NULL },
	{ "enospc", "hsmfs_enospc_total", C, 1, NULL },
	{ "hits", "hsmfs_hits_total", C, 1, NULL },
	{ "misses", "hsmfs_misses_total", C, 1, NULL },
	{ "readahead", "hsmfs_readahead_total", C, 1, "misses asked ahead of sequential reads" },
	{ "beside", "hsmfs_beside_total", C, 1, "misses asked for the rest of a read's chunk" },
	{ "filled_bytes", "hsmfs_filled_bytes_total", C, 1, NULL },
	{ "early_reads", "hsmfs_early_reads_total", C, 1, NULL },
	{ "cache_drops", "hsmfs_cache_drops_total", C, 1, NULL },
	{ "pre_access", "hsmfs_pre_access_total", C, 1, NULL },
	{ "pre_modify", "hsmfs_pre_modify_total", C, 1, NULL },
	{ "open_perm", "hsmfs_open_perm_total", C, 1, NULL },
	{ "access_perm", "hsmfs_access_perm_total", C, 1, NULL },
	{ "pre_dir", "hsmfs_pre_dir_total", C, 1, NULL },
	{ "pre_lookup", "hsmfs_pre_lookup_total", C, 1, NULL },
	{ "listed", "hsmfs_listed_total", C, 1, NULL },
	{ "refreshed", "hsmfs_refreshed_total", C, 1, NULL },
	{ "denied", "hsmfs_denied_total", C, 1, "events denied" },
	{ "timeouts", "hsmfs_timeouts_total", C, 1, "events timed out" },
	{ "interrupted", "hsmfs_interrupted_total", C, 1, "events interrupted" },
	{ "closed_ahead", "hsmfs_closed_ahead_total", C, 1, NULL },
	{ "parked", "hsmfs_parked", G, 1, NULL },
	{ "over_bound", "hsmfs_over_bound_total", C, 1, NULL },
	{ "fill_p50_us", "hsmfs_fill_p50_seconds", G, 1000000, "fill latency p50 (seconds)" },
	{ "fill_p90_us", "hsmfs_fill_p90_seconds", G, 1000000, "fill latency p90 (seconds)" },
	{ "fill_p99_us", "hsmfs_fill_p99_seconds", G, 1000000, "fill latency p99 (seconds)" },
	{ "evictions_started", "hsmfs_evictions_started_total", C, 1, NULL },
	{ "evictions_done", "hsmfs_evictions_done_total", C, 1, NULL },
	{ "archives", "hsmfs_archives_total", C, 1, NULL },
	{ "archived_files", "hsmfs_archived_files_total", C, 1, NULL },
	{ "archived_bytes", "hsmfs_archived_bytes_total", C, 1, NULL },
	{ "archive_failed", "hsmfs_archive_failed_total", C, 1, NULL },
	{ "conflicts", "hsmfs_conflicts_total", C, 1, NULL },
	{ "archive_pending", "hsmfs_archive_pending", G, 1, NULL },
	{ "archive_running", "hsmfs_archive_running", G, 1, NULL },
	{ "archive_pending_bytes", "hsmfs_archive_pending_bytes", G, 1, NULL },
	{ "names_pending", "hsmfs_names_pending", G, 1, NULL },
	{ "archive_rate", "hsmfs_archive_rate_bytes_per_second", G, 1,
	  "bytes archived a second (last 10 s)" },
	{ "archived_for_room", "hsmfs_archived_for_room_total", C, 1, NULL },
	{ "inodes", "hsmfs_inodes", G, 1, NULL },
	{ "cached_fds", "hsmfs_cached_fds", G, 1, NULL },
	{ "passthrough", "hsmfs_passthrough", G, 1, NULL },
	{ "passthrough_opens", "hsmfs_passthrough_opens_total", C, 1, NULL },
	{ "passthrough_refused", "hsmfs_passthrough_refused_total", C, 1, NULL },
	{ "prefetched_files", "hsmfs_prefetched_files_total", C, 1, NULL },
	{ "prefetched_bytes", "hsmfs_prefetched_bytes_total", C, 1, NULL },
	{ "prefetch_used_bytes", "hsmfs_prefetch_used_bytes_total", C, 1,
	  "bytes prefetched, of which opened" },
	{ "prefetch_wasted_bytes", "hsmfs_prefetch_wasted_bytes_total", C, 1,
	  "bytes prefetched, of which given up unopened" },
	{ "restarts", "hsmfs_restarts_total", C, 1, NULL },
	{ "handovers", "hsmfs_handovers_total", C, 1, "restarts by hsmfsctl restart" },
	{ "last_exit_signal", "hsmfs_last_exit_signal", G, 1,
	  "the signal that ended the last daemon that ended (0: none)" },
	{ "last_exit_status", "hsmfs_last_exit_status", G, 1,
	  "the exit status of the last daemon that ended" },
	{ "restart_pause_ms", "hsmfs_restart_pause_seconds", G, 1000,
	  "pause of the last restart (seconds)" },
	{ "restart_pause_max_ms", "hsmfs_restart_pause_max_seconds", G, 1000,
	  "longest pause of a restart (seconds)" },
	{ "inodes_kept", "hsmfs_inodes_kept", G, 1,
	  "inodes the kernel forgot, kept for file handles" },
	{ "fds", "hsmfs_fds", G, 1, "descriptors the daemon has open" },
	{ "fds_limit", "hsmfs_fds_limit", G, 1, "the daemon's RLIMIT_NOFILE (soft, raised to hard)" },
	{ "fds_exhausted", "hsmfs_fds_exhausted_total", C, 1,
	  "EMFILE or ENFILE met by the daemon" },
	{ "over_fills", "hsmfs_over_fills_total", C, 1,
	  "fills past cache_max, nothing else to evict (the read answered)" },
	{ "over_bytes", "hsmfs_over_bytes_total", C, 1, "bytes filled past cache_max" },
	{ "listed_partial", "hsmfs_listed_partial_total", C, 1,
	  "directories listed from a page (index.html), not an index" },
	{ "archive_deferred", "hsmfs_archive_deferred_total", C, 1,
	  "archive attempts put off: the file changed meanwhile or was busy" },
	{ "lost_events", "hsmfs_lost_events_total", C, 1,
	  "fanotify events the kernel lost to an overflow: reads maybe served zeros" },
	{ "lost_changes", "hsmfs_lost_changes_total", C, 1,
	  "fanotify changes the kernel lost to an overflow: files maybe not dirty" },
};

#undef C
#undef G

const struct prom_metric *prom_metric(const char *key)
{
	for (size_t i = 0; i < STATS_NFIELDS; i++)
		if (!strcmp(prom_metrics[i].key, key))
			return &prom_metrics[i];
	return NULL;
}

/* Text being written under snprintf's contract: n counts what did not fit too. */
struct out {
	char *buf;
	size_t size;
	size_t n;
};

static void put(struct out *o, char c)
{
	if (o->n + 1 < o->size) {
		o->buf[o->n] = c;
		o->buf[o->n + 1] = '\0';
	}
	o->n++;
}

static void puts_(struct out *o, const char *s)
{
	while (*s)
		put(o, *s++);
}

__attribute__((format(printf, 2, 3))) static void putf(struct out *o, const char *fmt, ...)
{
	char tmp[64];
	va_list ap;

	/* only numbers and short words come this way */
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	puts_(o, tmp);
}

/* s escaped: backslash and line feed always, a double quote if quote. */
static void escaped(struct out *o, const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			puts_(o, "\\\\");
		else if (*s == '\n')
			puts_(o, "\\n");
		else if (*s == '"' && quote)
			puts_(o, "\\\"");
		else
			put(o, *s);
	}
}

/* A family's HELP and TYPE lines. */
static void family(struct out *o, const char *name, enum prom_type type, const char *help)
{
	puts_(o, "# HELP ");
	puts_(o, name);
	put(o, ' ');
	escaped(o, help, false);
	puts_(o, "\n# TYPE ");
	puts_(o, name);
	puts_(o, type == PROM_COUNTER ? " counter\n" : " gauge\n");
}

/* v / scale, exactly, as a decimal: 1234 of 1000 is "1.234". */
static void value(struct out *o, uint64_t v, unsigned scale)
{
	if (scale == 1000)
		putf(o, "%llu.%03llu", (unsigned long long)(v / 1000),
		     (unsigned long long)(v % 1000));
	else if (scale == 1000000)
		putf(o, "%llu.%06llu", (unsigned long long)(v / 1000000),
		     (unsigned long long)(v % 1000000));
	else
		putf(o, "%llu", (unsigned long long)v);
}

/* The start of a sample: NAME{mountpoint="MNT" (its labels go on). */
static void sample(struct out *o, const char *name, const char *mnt)
{
	puts_(o, name);
	puts_(o, "{mountpoint=\"");
	escaped(o, mnt, true);
	put(o, '"');
}

/*
 * A family of the hooks: one sample per hook of the uint64_t at off in
 * its struct prom_hook, in units of scale a second; with answered_only,
 * none for a hook that has not answered yet.
 */
static void hook_family(struct out *o, const char *mnt, const struct prom_hook *hooks,
			size_t nhooks, const char *name, enum prom_type type, const char *help,
			size_t off, unsigned scale, bool answered_only)
{
	family(o, name, type, help);
	for (size_t i = 0; i < nhooks; i++) {
		uint64_t v;

		if (answered_only && !hooks[i].answered)
			continue;
		memcpy(&v, (const char *)&hooks[i] + off, sizeof(v));
		sample(o, name, mnt);
		puts_(o, ",hook=\"");
		escaped(o, hooks[i].name, true);
		putf(o, "\",pid=\"%ld\"} ", hooks[i].pid);
		value(o, v, scale);
		put(o, '\n');
	}
}

size_t prom_format(char *buf, size_t size, const char *mnt, const uint64_t *vals,
		   const bool *have, const struct prom_hook *hooks, size_t nhooks)
{
	struct out o = { buf, size, 0 };

	if (size)
		buf[0] = '\0';
	for (size_t i = 0; i < STATS_NFIELDS; i++) {
		const struct stats_row *r = &stats_rows[i];
		const struct prom_metric *m;

		if (!have[i] || !r->key || !(m = prom_metric(r->key)))
			continue;
		family(&o, m->name, m->type, m->help ? m->help : r->what);
		sample(&o, m->name, mnt);
		puts_(&o, "} ");
		value(&o, vals[i], m->scale);
		put(&o, '\n');
	}
	family(&o, "hsmfs_hooks", PROM_GAUGE, "hooks connected");
	sample(&o, "hsmfs_hooks", mnt);
	putf(&o, "} %zu\n", nhooks);
	hook_family(&o, mnt, hooks, nhooks, "hsmfs_hook_pending", PROM_GAUGE,
		    "events sent to a hook and not answered yet",
		    offsetof(struct prom_hook, pending), 1, false);
	hook_family(&o, mnt, hooks, nhooks, "hsmfs_hook_answers_total", PROM_COUNTER,
		    "answers a hook gave (allow or deny)",
		    offsetof(struct prom_hook, answered), 1, false);
	hook_family(&o, mnt, hooks, nhooks, "hsmfs_hook_denials_total", PROM_COUNTER,
		    "answers a hook gave that denied", offsetof(struct prom_hook, denied), 1,
		    false);
	hook_family(&o, mnt, hooks, nhooks, "hsmfs_hook_timeouts_total", PROM_COUNTER,
		    "events that ran out of time while a hook had them",
		    offsetof(struct prom_hook, timeouts), 1, false);
	hook_family(&o, mnt, hooks, nhooks, "hsmfs_hook_latency_p50_seconds", PROM_GAUGE,
		    "median latency of a hook's answers, from its event's start",
		    offsetof(struct prom_hook, p50_us), 1000000, true);
	hook_family(&o, mnt, hooks, nhooks, "hsmfs_hook_latency_p99_seconds", PROM_GAUGE,
		    "99th percentile latency of a hook's answers, from its event's start",
		    offsetof(struct prom_hook, p99_us), 1000000, true);
	return o.n;
}

bool prom_counter_split(const char *p, struct prom_counter *c)
{
	size_t len = strcspn(p, "\n"), i;
	const char *t1 = memchr(p, '\t', len), *t2, *sp;

	if (!t1 || !(t2 = memchr(t1 + 1, '\t', len - (size_t)(t1 + 1 - p))))
		return false;
	c->hook = p;
	c->hook_len = (size_t)(t1 - p);
	c->pid = t1 + 1;
	c->pid_len = (size_t)(t2 - c->pid);
	c->metric = t2 + 1;
	for (i = 0; c->metric + i < p + len && (c->metric[i] == '_' ||
	     (c->metric[i] >= 'a' && c->metric[i] <= 'z') ||
	     (c->metric[i] >= '0' && c->metric[i] <= '9')); i++)
		;
	c->metric_len = i;
	sp = p + len;
	while (sp > c->metric && sp[-1] != ' ')
		sp--;
	if (!i || sp <= c->metric || sp == p + len)
		return false;
	c->value = sp;
	c->value_len = (size_t)(p + len - sp);
	if (strspn(sp, "0123456789.-+e") < c->value_len)
		return false; /* not a number */
	c->labels = c->metric + i;
	c->labels_len = (size_t)(sp - 1 - c->labels);
	if (c->labels_len) {
		/* {...}: its inside */
		if (c->labels_len < 2 || c->labels[0] != '{' || c->labels[c->labels_len - 1] != '}')
			return false;
		c->labels++;
		c->labels_len -= 2;
	}
	return true;
}

static void putn(struct out *o, const char *s, size_t n)
{
	while (n--)
		put(o, *s++);
}

size_t prom_hook_counters(char *buf, size_t size, const char *mnt, const char *lines)
{
	struct out o = { buf, size, 0 };

	if (size)
		buf[0] = '\0';
	for (const char *p = lines; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n')) {
		struct prom_counter c, d;
		bool seen = false;
		char name[300];

		if (!prom_counter_split(p, &c) || c.metric_len > 200)
			continue;
		/* its family, once: at the first line of its metric */
		for (const char *q = lines; q < p && !seen;
		     q += strcspn(q, "\n") + (q[strcspn(q, "\n")] == '\n'))
			seen = prom_counter_split(q, &d) && d.metric_len == c.metric_len &&
			       !memcmp(d.metric, c.metric, c.metric_len);
		if (seen)
			continue;
		snprintf(name, sizeof(name), "hsmfs_hook_%.*s", (int)c.metric_len, c.metric);
		family(&o, name, c.metric_len > 6 && !memcmp(c.metric + c.metric_len - 6, "_total", 6) ?
				 PROM_COUNTER : PROM_GAUGE,
		       "A counter a hook keeps (hsmfs-hooks(7), STATS)");
		for (const char *q = p; *q; q += strcspn(q, "\n") + (q[strcspn(q, "\n")] == '\n')) {
			char hook[256];

			if (!prom_counter_split(q, &d) || d.metric_len != c.metric_len ||
			    memcmp(d.metric, c.metric, c.metric_len))
				continue;
			snprintf(hook, sizeof(hook), "%.*s", (int)d.hook_len, d.hook);
			sample(&o, name, mnt);
			puts_(&o, ",hook=\"");
			escaped(&o, hook, true);
			puts_(&o, "\",pid=\"");
			putn(&o, d.pid, d.pid_len);
			put(&o, '"');
			if (d.labels_len) {
				put(&o, ',');
				putn(&o, d.labels, d.labels_len);
			}
			put(&o, '}');
			put(&o, ' ');
			putn(&o, d.value, d.value_len);
			put(&o, '\n');
		}
	}
	return o.n;
}

size_t prom_label_value(char *buf, size_t size, const char *s)
{
	struct out o = { buf, size, 0 };

	if (size)
		buf[0] = '\0';
	escaped(&o, s, true);
	return o.n;
}

int prom_file_name(char *buf, size_t size, const char *mnt)
{
	static const char prefix[] = "hsmfs-", suffix[] = ".prom";
	char name[256];
	struct out o = { name, sizeof(name), 0 };
	const char *p = mnt;
	bool first = true;

	puts_(&o, prefix);
	while (*p == '/')
		p++;
	if (!*p)
		put(&o, '-');
	while (*p) {
		unsigned char c = *p;

		if (c == '/') {
			while (*p == '/')
				p++;
			if (*p)
				put(&o, '-');
			continue;
		}
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == ':' || c == '_' || (c == '.' && !first))
			put(&o, (char)c);
		else
			putf(&o, "\\x%02x", c);
		first = false;
		p++;
	}
	puts_(&o, suffix);
	if (o.n >= sizeof(name) || o.n >= size)
		return -ENAMETOOLONG;
	memcpy(buf, name, o.n + 1);
	return 0;
}
