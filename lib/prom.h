/*
 * prom.h - a mount's counters (lib/stats.h) and its hooks' queues in
 * Prometheus' text exposition format, version 0.0.4, for hsmfsctl stats
 * --prometheus and node_exporter's textfile collector.
 *
 * Pure module: no I/O, no allocation, no state.  The writers follow
 * snprintf's contract: they write at most size bytes, NUL included,
 * and return the length of the whole text, so that a result of size or
 * more means it was cut (buf may be NULL when size is 0).
 *
 * The format, as this module writes it: one family per counter, each a
 * "# HELP NAME TEXT" line, a "# TYPE NAME counter|gauge" line and its
 * samples, families never interleaved; every line ends in "\n".  Names
 * match [a-zA-Z_:][a-zA-Z0-9_:]*; in HELP text a backslash and a line
 * feed are written \\ and \n, in a label's value also a double quote
 * (\").  Following Prometheus' naming conventions, counters end in
 * _total, values are in base units (bytes, seconds: the daemon's
 * microseconds and milliseconds are converted, exactly, in decimal),
 * and a gauge of bytes ends in _bytes.  Every sample has the label
 * mountpoint="MNT".
 *
 * The metric names are part of the product (dashboards and alerts use
 * them): like the JSON's keys, a name is never renamed or removed.
 */
#ifndef HSMFS_PROM_H
#define HSMFS_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stats.h"

enum prom_type {
	PROM_COUNTER, /* only grows (restarts from 0 with a new daemon) */
	PROM_GAUGE,   /* a value now */
};

/* How one counter of STATS_FIELDS is exported. */
struct prom_metric {
	const char *key;     /* its JSON key (stats_rows) */
	const char *name;    /* its metric name, hsmfs_... */
	enum prom_type type;
	unsigned scale;      /* 1, or 1000 (ms) or 1000000 (us) per second */
	const char *help;    /* its HELP text; NULL: stats_rows' label */
};

/* Every counter's metric, one each, in no particular order. */
extern const struct prom_metric prom_metrics[STATS_NFIELDS];

/* The metric of the JSON key key, or NULL: none. */
const struct prom_metric *prom_metric(const char *key);

/* One connected hook, as user.hsmfs.hooks lists it. */
struct prom_hook {
	const char *name; /* its name (any bytes but NUL) */
	long pid;         /* its process */
	uint64_t pending; /* events sent to it and not answered */
	uint64_t answered, denied, timeouts; /* since it connected */
	uint64_t p50_us, p99_us;             /* its answers' latency; 0: none yet */
};

/*
 * The whole exposition of the mount mnt: for each row i of stats_rows
 * in row order whose have[i] is true (the daemon reported the key) the
 * family of its metric with one sample of vals[i]; then hsmfs_hooks
 * (nhooks), then hsmfs_hook_pending, hsmfs_hook_answers_total,
 * hsmfs_hook_denials_total, hsmfs_hook_timeouts_total and
 * hsmfs_hook_latency_p50_seconds and _p99_seconds (a hook with answers
 * only) with one sample per hook, labelled with its name and pid.  vals and have are indexed like stats_rows.
 * snprintf's contract (above).
 */
size_t prom_format(char *buf, size_t size, const char *mnt, const uint64_t *vals,
		   const bool *have, const struct prom_hook *hooks, size_t nhooks);

/*
 * The counters the mount's hooks sent (user.hsmfs.hook_stats: a line
 * each, "NAME\tPID\tMETRIC{LABELS} VALUE", hsmfs-hooks(7), STATS): one
 * family per metric, hsmfs_hook_METRIC, a counter if METRIC ends in
 * _total, else a gauge; each sample labelled mountpoint, hook and pid,
 * then the hook's own labels.  Lines of another form are left out.
 * snprintf's contract.
 */
size_t prom_hook_counters(char *buf, size_t size, const char *mnt, const char *lines);

/*
 * One line of user.hsmfs.hook_stats, split: pointers into it and their
 * lengths (labels: inside the braces, 0 long if none).  The line at p,
 * to its newline: true with *c if it has the form.
 */
struct prom_counter {
	const char *hook, *pid, *metric, *labels, *value;
	size_t hook_len, pid_len, metric_len, labels_len, value_len;
};
bool prom_counter_split(const char *p, struct prom_counter *c);

/* s as a label's value (without the quotes).  snprintf's contract. */
size_t prom_label_value(char *buf, size_t size, const char *s);

/*
 * The file name node_exporter's textfile collector reads for mount mnt,
 * "hsmfs-ESCAPED.prom", where ESCAPED is mnt escaped as systemd-escape
 * --path does (the name of its .mount unit, less ".mount"): slashes
 * collapsed and trimmed, "/" alone as "-", each "/" as "-", each byte
 * outside [a-zA-Z0-9:_.], and a leading ".", as \xNN.  Returns 0, or
 * -ENAMETOOLONG if the name and its NUL do not fit in size bytes or the
 * name is longer than a file name may be (255); buf is then untouched.
 */
int prom_file_name(char *buf, size_t size, const char *mnt);

#endif
