/* test-prom.c - the counters in Prometheus' text format: names, escaping, files */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"
#include "tap.h"

static bool ends_with(const char *s, const char *end)
{
	size_t n = strlen(s), m = strlen(end);

	return n >= m && !strcmp(s + n - m, end);
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* */
static bool valid_name(const char *s)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == ':'))
			return false;
	return true;
}

static int row_of(const char *key)
{
	for (int i = 0; i < STATS_NFIELDS; i++)
		if (stats_rows[i].key && !strcmp(stats_rows[i].key, key))
			return i;
	return -1;
}

/*
 * The text's families, line by line: each "# HELP NAME ..." is followed
 * by "# TYPE NAME counter|gauge", then only samples of NAME; no NAME
 * twice.  Returns the number of families, or -1 (says which line).
 */
static int families(const char *text)
{
	char names[128][96], cur[96] = "";
	int nf = 0, state = 0; /* 0: HELP or sample; 1: TYPE due */
	const char *l = text;

	while (*l) {
		const char *nl = strchr(l, '\n');
		char line[512], name[96];
		size_t len;

		if (!nl)
			return printf("# no line feed at the end\n"), -1;
		len = (size_t)(nl - l);
		if (len >= sizeof(line))
			return -1;
		memcpy(line, l, len);
		line[len] = '\0';
		l = nl + 1;
		if (state == 1) {
			char want1[128], want2[128];

			snprintf(want1, sizeof(want1), "# TYPE %s counter", cur);
			snprintf(want2, sizeof(want2), "# TYPE %s gauge", cur);
			if (strcmp(line, want1) && strcmp(line, want2))
				return printf("# not a TYPE of %s: %s\n", cur, line), -1;
			state = 0;
		} else if (sscanf(line, "# HELP %95s ", name) == 1) {
			for (int i = 0; i < nf; i++)
				if (!strcmp(names[i], name))
					return printf("# %s twice\n", name), -1;
			if (!valid_name(name) || nf == 128)
				return printf("# bad name %s\n", name), -1;
			strcpy(names[nf++], name);
			strcpy(cur, name);
			state = 1;
		} else {
			size_t n = strlen(cur);

			if (!n || strncmp(line, cur, n) || line[n] != '{')
				return printf("# a sample out of its family: %s\n", line), -1;
		}
	}
	return state == 0 ? nf : -1;
}

static void test_table(void)
{
	bool each = true, names = true, conv = true, units = true;

	for (int i = 0; i < STATS_NFIELDS; i++) {
		const struct prom_metric *m = &prom_metrics[i];
		int row = row_of(m->key);

		if (row < 0 || prom_metric(m->key) != m) {
			each = false;
			printf("# %s: not a counter, or twice\n", m->key);
			continue;
		}
		for (int j = 0; j < i; j++)
			if (!strcmp(prom_metrics[j].name, m->name))
				names = false;
		if (!valid_name(m->name) || strncmp(m->name, "hsmfs_", 6))
			names = false;
		/* counters end in _total, and only they */
		if ((m->type == PROM_COUNTER) != ends_with(m->name, "_total")) {
			conv = false;
			printf("# %s: %s\n", m->key, m->name);
		}
		/* bytes in _bytes (a rate in _bytes_per_second), time in seconds */
		if (((stats_rows[row].show == STATS_SIZE || stats_rows[row].show == STATS_LIMIT) &&
		     strcmp(m->key, "cache_drops") &&
		     !ends_with(m->name, m->type == PROM_COUNTER ? "_bytes_total" : "_bytes") &&
		     !ends_with(m->name, "_bytes_per_second")) ||
		    (ends_with(m->key, "_us") && (m->scale != 1000000 || !ends_with(m->name, "_seconds"))) ||
		    (ends_with(m->key, "_ms") && (m->scale != 1000 || !ends_with(m->name, "_seconds"))) ||
		    (m->scale == 1 && ends_with(m->name, "_seconds"))) {
			units = false;
			printf("# %s: %s (scale %u)\n", m->key, m->name, m->scale);
		}
	}
	for (int i = 0; i < STATS_NFIELDS; i++)
		if (!prom_metric(stats_rows[i].key))
			each = false;
	ok(each, "every counter of stats.h has one metric, and no metric another key");
	ok(names, "metric names valid, unique, hsmfs_...");
	ok(conv, "counters end in _total, gauges do not");
	ok(units, "bytes end in _bytes (_bytes_total), us and ms are seconds");
	ok(!prom_metric("nosuch"), "an unknown key: no metric");
}

static void test_escape(void)
{
	char buf[64];
	size_t n;

	n = prom_label_value(buf, sizeof(buf), "a\\b\"c\nd");
	ok(n == 10 && !strcmp(buf, "a\\\\b\\\"c\\nd"), "label value: \\ \" and line feed escaped (%s)", buf);
	n = prom_label_value(buf, sizeof(buf), "/mnt/tree ü\t");
	ok(!strcmp(buf, "/mnt/tree ü\t") && n == strlen(buf), "other bytes as they are");
	n = prom_label_value(buf, 4, "\"\"\"");
	ok(n == 6 && !strcmp(buf, "\\\"\\"), "short buffer: cut, terminated, whole length");
	ok(prom_label_value(NULL, 0, "\\") == 2, "no buffer: the length");
}

static void test_format(void)
{
	uint64_t vals[STATS_NFIELDS];
	bool have[STATS_NFIELDS];
	struct prom_hook hooks[] = {
		{ "mirror", 4242, 3, 10, 2, 1, 1500, 250000 },
		{ "we\"ird\\na\nme", 7, 0 },
	};
	char *text, small[100];
	size_t n, m;
	int hits = row_of("hits"), p50 = row_of("fill_p50_us"), pause = row_of("restart_pause_ms");

	for (int i = 0; i < STATS_NFIELDS; i++) {
		vals[i] = (uint64_t)i * 1000003;
		have[i] = true;
	}
	vals[hits] = 10;
	vals[p50] = 1234;
	vals[pause] = 1500;
	n = prom_format(NULL, 0, "/m\"x", vals, have, hooks, 2);
	text = malloc(n + 1);
	m = prom_format(text, n + 1, "/m\"x", vals, have, hooks, 2);
	ok(m == n && strlen(text) == n, "the length asked first is the length written (%zu)", n);
	ok(families(text) == STATS_NFIELDS + 7, "every line in a family, HELP, TYPE, samples (%d)",
	   families(text));
	ok(strstr(text, "# HELP hsmfs_hits_total hits (slow path, bytes present)\n"
			"# TYPE hsmfs_hits_total counter\n"
			"hsmfs_hits_total{mountpoint=\"/m\\\"x\"} 10\n") != NULL,
	   "a counter: HELP from stats.h, TYPE, escaped mountpoint, value");
	ok(strstr(text, "hsmfs_fill_p50_seconds{mountpoint=\"/m\\\"x\"} 0.001234\n") &&
		   strstr(text, "hsmfs_restart_pause_seconds{mountpoint=\"/m\\\"x\"} 1.500\n") &&
		   strstr(text, "# TYPE hsmfs_cache_bytes gauge\n"),
	   "us and ms in seconds, exactly; a gauge");
	ok(strstr(text, "hsmfs_hooks{mountpoint=\"/m\\\"x\"} 2\n") &&
		   strstr(text, "hsmfs_hook_pending{mountpoint=\"/m\\\"x\",hook=\"mirror\",pid=\"4242\"} 3\n") &&
		   strstr(text, ",hook=\"we\\\"ird\\\\na\\nme\",pid=\"7\"} 0\n"),
	   "hooks: count, and pending by name (escaped) and pid");
	ok(strstr(text, "hsmfs_hook_answers_total{mountpoint=\"/m\\\"x\",hook=\"mirror\",pid=\"4242\"} 10\n") &&
		   strstr(text, "hsmfs_hook_denials_total{mountpoint=\"/m\\\"x\",hook=\"mirror\",pid=\"4242\"} 2\n") &&
		   strstr(text, "hsmfs_hook_timeouts_total{mountpoint=\"/m\\\"x\",hook=\"mirror\",pid=\"4242\"} 1\n") &&
		   strstr(text, "hsmfs_hook_latency_p50_seconds{mountpoint=\"/m\\\"x\",hook=\"mirror\",pid=\"4242\"} 0.001500\n") &&
		   strstr(text, "hsmfs_hook_latency_p99_seconds{mountpoint=\"/m\\\"x\",hook=\"mirror\",pid=\"4242\"} 0.250000\n") &&
		   !strstr(text, "hsmfs_hook_latency_p50_seconds{mountpoint=\"/m\\\"x\",hook=\"we"),
	   "each hook's answers, denials, timeouts and latency (none before its first answer)");
	ok(strstr(text, "hsmfs_evictions_started_total{") != NULL,
	   "a counter hsmfsctl hides is exported");
	free(text);

	have[hits] = false;
	n = prom_format(NULL, 0, "/m", vals, have, NULL, 0);
	text = malloc(n + 1);
	prom_format(text, n + 1, "/m", vals, have, NULL, 0);
	ok(!strstr(text, "hsmfs_hits_total") && families(text) == STATS_NFIELDS + 6,
	   "a key the daemon did not report: no family");
	ok(strstr(text, "# TYPE hsmfs_hook_pending gauge\n\n") == NULL &&
		   strstr(text, "# TYPE hsmfs_hook_pending gauge\n# HELP") &&
		   ends_with(text, "gauge\n"),
	   "no hooks: each hook family's HELP and TYPE, no sample");
	m = prom_format(small, sizeof(small), "/m", vals, have, NULL, 0);
	ok(m == n && strlen(small) == sizeof(small) - 1 && !strncmp(small, text, sizeof(small) - 1),
	   "a short buffer: cut and terminated, the whole length returned");
	free(text);
}

static void test_file_name(void)
{
	/* systemd-escape --path, with hsmfs- and .prom around it */
	static const char *const cases[][2] = {
		{ "/mnt/tree", "hsmfs-mnt-tree.prom" },
		{ "/", "hsmfs--.prom" },
		{ "//a//b/", "hsmfs-a-b.prom" },
		{ "/srv/my-data", "hsmfs-srv-my\\x2ddata.prom" },
		{ "/.hidden/x.y", "hsmfs-\\x2ehidden-x.y.prom" },
		{ "/mnt/a b\\", "hsmfs-mnt-a\\x20b\\x5c.prom" },
		{ "/mnt/\xc3\xbc", "hsmfs-mnt-\\xc3\\xbc.prom" },
	};
	char buf[300], longp[300];
	bool all = true;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (prom_file_name(buf, sizeof(buf), cases[i][0]) || strcmp(buf, cases[i][1])) {
			printf("# %s: %s\n", cases[i][0], buf);
			all = false;
		}
	}
	ok(all, "file names: mountpoints escaped as systemd-escape --path does");
	memset(longp, 'a', 243);
	longp[243] = '\0';
	ok(!prom_file_name(buf, sizeof(buf), longp) && strlen(buf) == 254, "254 bytes: fits");
	strcat(longp, "-");
	strcpy(buf, "kept");
	ok(prom_file_name(buf, sizeof(buf), longp) == -ENAMETOOLONG && !strcmp(buf, "kept"),
	   "a name over 255 bytes: ENAMETOOLONG, buffer untouched");
	ok(prom_file_name(buf, 19, "/mnt/tree") == -ENAMETOOLONG &&
		   !prom_file_name(buf, 20, "/mnt/tree"),
	   "a buffer too short for the name and its NUL: ENAMETOOLONG");
}

static void test_hook_counters(void)
{
	const char *lines =
		"hsmfs-http\t42\tproxy_requests_total{proxy=\"http://a:3128\",group=\"0\"} 7\n"
		"hsmfs-http\t42\tproxy_up{proxy=\"http://a:3128\"} 1\n"
		"other\t43\tbad line\n"
		"hsmfs-http\t42\tproxy_requests_total{proxy=\"DIRECT\",group=\"1\"} 2\n"
		"hsmfs-http\t42\ttier_bytes_total 1048576\n";
	const char *want =
		"# HELP hsmfs_hook_proxy_requests_total A counter a hook keeps (hsmfs-hooks(7), STATS)\n"
		"# TYPE hsmfs_hook_proxy_requests_total counter\n"
		"hsmfs_hook_proxy_requests_total{mountpoint=\"/m\",hook=\"hsmfs-http\",pid=\"42\","
		"proxy=\"http://a:3128\",group=\"0\"} 7\n"
		"hsmfs_hook_proxy_requests_total{mountpoint=\"/m\",hook=\"hsmfs-http\",pid=\"42\","
		"proxy=\"DIRECT\",group=\"1\"} 2\n"
		"# HELP hsmfs_hook_proxy_up A counter a hook keeps (hsmfs-hooks(7), STATS)\n"
		"# TYPE hsmfs_hook_proxy_up gauge\n"
		"hsmfs_hook_proxy_up{mountpoint=\"/m\",hook=\"hsmfs-http\",pid=\"42\","
		"proxy=\"http://a:3128\"} 1\n"
		"# HELP hsmfs_hook_tier_bytes_total A counter a hook keeps (hsmfs-hooks(7), STATS)\n"
		"# TYPE hsmfs_hook_tier_bytes_total counter\n"
		"hsmfs_hook_tier_bytes_total{mountpoint=\"/m\",hook=\"hsmfs-http\",pid=\"42\"} "
		"1048576\n";
	char buf[2048], small[40];
	size_t n = prom_hook_counters(buf, sizeof(buf), "/m", lines);

	ok(n == strlen(want) && !strcmp(buf, want),
	   "hooks' counters: a family per metric, never interleaved, labelled, a bad line left out");
	if (strcmp(buf, want))
		printf("# got:\n%s", buf);
	ok(prom_hook_counters(small, sizeof(small), "/m", lines) == n && strlen(small) == 39,
	   "cut at the buffer's end, the whole length returned");
	ok(prom_hook_counters(NULL, 0, "/m", "") == 0, "no counters: nothing");
}

int main(void)
{
	test_hook_counters();
	test_table();
	test_escape();
	test_format();
	test_file_name();
	return tap_done();
}
