/*
 * stats.c - hsmfsctl stats [--json | --prometheus [--textfile DIR]]
 * MOUNTPOINT, and the hooks' own counters, which doctor reads too
 * (hook_counters(), counter_next()).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ctl.h"
#include "hsmfs/protocol.h"
#include "prom.h"
#include "stats.h"

/*
 * The text in dir/hsmfs-ESCAPED.prom for node_exporter's textfile
 * collector (prom_file_name()), replaced atomically: written to a
 * hidden temporary name in dir (the collector reads only *.prom), made
 * readable by all, then renamed over the old file, so that a scrape
 * sees the old text or the new one, never part of one.  Not synced: a
 * crash loses at most the last scrape's values.  Returns 0, or an exit
 * code (said why; no temporary file is left behind).
 */
static int textfile_write(const char *dir, const char *mnt, const char *text, size_t len)
{
	char name[NAME_MAX + 1], path[PATH_MAX], tmp[PATH_MAX];
	size_t done = 0;
	int fd;

	if (prom_file_name(name, sizeof(name), mnt)) {
		fprintf(stderr, "hsmfsctl: '%s': too long for a file name in '%s'\n", mnt, dir);
		return X_USAGE;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s/.%s.XXXXXX", dir, name) >= sizeof(tmp)) {
		fprintf(stderr, "hsmfsctl: '%s': path too long\n", dir);
		return X_USAGE;
	}
	fd = mkstemp(tmp);
	if (fd < 0) {
		fprintf(stderr, "hsmfsctl: cannot write in '%s': %s\n", dir, strerror(errno));
		return X_PARTIAL;
	}
	if (fchmod(fd, 0644) < 0)
		goto fail;
	while (done < len) {
		ssize_t n = write(fd, text + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto fail;
		done += (size_t)n;
	}
	if (close(fd) < 0) {
		fd = -1;
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) < 0)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "hsmfsctl: cannot write '%s': %s\n", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return X_PARTIAL;
}

/*
 * The counters the mount's hooks sent (user.hsmfs.hook_stats: "NAME\tPID\t
 * COUNTER VALUE" a line), NUL-terminated in buf; "" from a daemon that
 * has none or does not know the attribute.
 */
void hook_counters(const char *mnt, char *buf, size_t size)
{
	ssize_t n = hgetxattr(mnt, "user.hsmfs.hook_stats", buf, size - 1);

	buf[n > 0 ? n : 0] = '\0';
}

/*
 * The next counter line of those at l that has the form, split into *c:
 * where the line after it starts, or NULL when none is left.
 */
const char *counter_next(const char *l, struct prom_counter *c)
{
	while (*l) {
		size_t len = strcspn(l, "\n");
		bool ok = prom_counter_split(l, c);

		l += len + (l[len] == '\n');
		if (ok)
			return l;
	}
	return NULL;
}

/*
 * hsmfsctl stats --prometheus [--textfile DIR] of the mount mnt, whose
 * user.hsmfs.stats is stats: the counters and the hooks' queues in
 * Prometheus' text format (prom.h), labelled with the mount's real path,
 * on standard output or into DIR (textfile_write()).  Returns an exit
 * code.
 */

static int stats_prometheus(const char *mnt, const char *stats, const char *dir)
{
	static char counters[1 << 20];
	static char hooks[1 << 20];
	uint64_t vals[STATS_NFIELDS];
	bool have[STATS_NFIELDS];
	struct prom_hook *ph = NULL;
	struct hook_line *h = NULL;
	char real[PATH_MAX], *text = NULL;
	const char *label;
	int nh, rc = X_STORE;
	size_t len;

	for (size_t i = 0; i < STATS_NFIELDS; i++) {
		long long v = stats_rows[i].key ? json_num(stats, stats_rows[i].key) : -1;

		have[i] = v >= 0;
		vals[i] = have[i] ? (uint64_t)v : 0;
	}
	if (mount_xattr(mnt, "user.hsmfs.hooks", hooks, sizeof(hooks)) < 0)
		return X_STORE;
	nh = hooks_split(hooks, &h);
	if (nh < 0)
		return X_STORE;
	ph = calloc(nh ? nh : 1, sizeof(*ph));
	if (!ph) {
		fprintf(stderr, "hsmfsctl: out of memory\n");
		goto out;
	}
	for (int i = 0; i < nh; i++)
		ph[i] = (struct prom_hook){ h[i].name, strtol(h[i].pid, NULL, 10),
					    strtoull(h[i].pending, NULL, 10),
					    strtoull(h[i].answered, NULL, 10),
					    strtoull(h[i].denied, NULL, 10),
					    strtoull(h[i].timeouts, NULL, 10),
					    strtoull(h[i].p50_us, NULL, 10),
					    strtoull(h[i].p99_us, NULL, 10) };
	/* one name for the mount however it was given: its real path */
	label = realpath(mnt, real) ? real : mnt;
	hook_counters(mnt, counters, sizeof(counters));
	len = prom_format(NULL, 0, label, vals, have, ph, nh);
	len += prom_hook_counters(NULL, 0, label, counters);
	text = malloc(len + 1);
	if (!text) {
		fprintf(stderr, "hsmfsctl: out of memory\n");
		goto out;
	}
	{
		size_t k = prom_format(text, len + 1, label, vals, have, ph, nh);

		prom_hook_counters(text + k, len + 1 - k, label, counters);
	}
	if (dir) {
		rc = textfile_write(dir, label, text, len);
	} else {
		fwrite(text, 1, len, stdout);
		rc = fflush(stdout) ? X_PARTIAL : 0;
	}
out:
	free(text);
	free(ph);
	free(h);
	return rc;
}

/*
 * hsmfsctl stats [--json | --prometheus [--textfile DIR]] MOUNTPOINT:
 * a mount's counters, as rows, its JSON object, or Prometheus' text
 * format (hsmfsctl(1)).
 */
int cmd_stats(int argc, char **argv)
{
	static char counters[1 << 20];
	char buf[4096], h[32];
	const char *mnt = NULL, *dir = NULL;
	bool json = false, prom = false;
	ssize_t n;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--prometheus")) {
			prom = true;
		} else if (!strcmp(argv[i], "--textfile")) {
			if (++i == argc) {
				fprintf(stderr, "hsmfsctl: --textfile needs a DIR\n");
				return X_USAGE;
			}
			dir = argv[i];
			prom = true;
		} else if (!mnt) {
			mnt = argv[i];
		} else {
			mnt = "";
		}
	}
	if (!mnt || !*mnt) {
		fprintf(stderr, "hsmfsctl: stats needs one MOUNTPOINT\n");
		return X_USAGE;
	}
	if (json && prom) {
		fprintf(stderr, "hsmfsctl: stats takes --json or --prometheus, not both\n");
		return X_USAGE;
	}
	n = mount_xattr(mnt, "user.hsmfs.stats", buf, sizeof(buf));
	if (n < 0)
		return X_STORE;
	if (prom)
		return stats_prometheus(mnt, buf, dir);
	hook_counters(mnt, counters, sizeof(counters));
	if (json) {
		/* the daemon's object, and the hooks' counters in it */
		char *end = strrchr(buf, '}');

		if (!end || !counters[0]) {
			fputs(buf, stdout);
			return 0;
		}
		struct prom_counter c;
		bool first = true;

		*end = '\0';
		fputs(buf, stdout);
		fputs(",\"hook_counters\":[", stdout);
		for (const char *l = counters; (l = counter_next(l, &c));) {
			char hook[256], ctr[HSMFS_MAX_STATS + 1];

			snprintf(hook, sizeof(hook), "%.*s", (int)c.hook_len, c.hook);
			snprintf(ctr, sizeof(ctr), "%.*s", (int)(c.value - 1 - c.metric), c.metric);
			printf("%s{\"hook\":", first ? "" : ",");
			first = false;
			json_str(hook);
			printf(",\"pid\":%.*s,\"counter\":", (int)c.pid_len, c.pid);
			json_str(ctr);
			printf(",\"value\":%.*s}", (int)c.value_len, c.value);
		}
		printf("]}\n");
		return 0;
	}
	for (size_t i = 0; i < STATS_NFIELDS; i++) {
		const struct stats_row *r = &stats_rows[i];
		long long v;

		if (!r->key || r->show == STATS_HIDDEN || (v = json_num(buf, r->key)) < 0)
			continue;
		if (r->show == STATS_NUM) {
			printf("%-34s %lld\n", r->what, v);
		} else if (r->show == STATS_LIMIT && v == 0) {
			printf("%-34s %s\n", r->what, "none");
		} else {
			human(h, sizeof(h), v);
			printf("%-34s %s\n", r->what, h);
		}
	}
	/* the hooks' own: a proxy chain's members, bytes from the tier */
	{
		struct prom_counter c;

		for (const char *l = counters; (l = counter_next(l, &c));)
			printf("%.*s %-60.*s %.*s\n", (int)c.hook_len, c.hook,
			       (int)(c.value - 1 - c.metric), c.metric, (int)c.value_len, c.value);
	}
	return 0;
}
