/*
 * hooks.c - hsmfsctl hooks [--json] MOUNTPOINT, and the reading of a
 * mount's user.hsmfs.hooks that stats and doctor share (hooks_split()).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "ctl.h"

/* us microseconds, for a person: "-" (none), "850us", "12.3ms", "4.1s" */
static void duration_us(char *buf, size_t n, unsigned long long us)
{
	if (!us)
		snprintf(buf, n, "-");
	else if (us < 1000)
		snprintf(buf, n, "%lluus", us);
	else if (us < 1000000)
		snprintf(buf, n, "%.1fms", us / 1e3);
	else
		snprintf(buf, n, "%.1fs", us / 1e6);
}

/*
 * The lines of user.hsmfs.hooks in buf, split in place (buf is changed
 * and the lines point into it); a line without its HOOK_FIELDS
 * tab-separated fields is skipped.  Returns their number and sets
 * *ret_lines (caller frees), or -1 and says why (out of memory).
 */
int hooks_split(char *buf, struct hook_line **ret_lines)
{
	struct hook_line *lines = NULL;
	char *line, *save;
	int n = 0;

	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[HOOK_FIELDS] = { 0 }, *tsave;
		struct hook_line *more;
		int i = 0;

		for (char *t = strtok_r(line, "\t", &tsave); t && i < HOOK_FIELDS;
		     t = strtok_r(NULL, "\t", &tsave))
			f[i++] = t;
		if (i != HOOK_FIELDS)
			continue;
		more = realloc(lines, (n + 1) * sizeof(*lines));
		if (!more) {
			free(lines);
			fprintf(stderr, "hsmfsctl: out of memory\n");
			return -1;
		}
		lines = more;
		lines[n++] = (struct hook_line){ f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7],
						 f[8], f[9], f[10] };
	}
	*ret_lines = lines;
	return n;
}

/*
 * hsmfsctl hooks [--json] MOUNTPOINT: the hooks connected to a mount, as
 * a table or a JSON array of objects (hsmfsctl(1)).
 */
int cmd_hooks(int argc, char **argv)
{
	static char buf[1 << 20];
	struct hook_line *h;
	const char *mnt = NULL;
	bool json = false;
	int n;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!mnt)
			mnt = argv[i];
		else
			mnt = "";
	}
	if (!mnt || !*mnt) {
		fprintf(stderr, "hsmfsctl: hooks needs one MOUNTPOINT\n");
		return X_USAGE;
	}
	if (mount_xattr(mnt, "user.hsmfs.hooks", buf, sizeof(buf)) < 0)
		return X_STORE;
	n = hooks_split(buf, &h);
	if (n < 0)
		return X_STORE;
	if (json)
		printf("[");
	else
		printf("%-20s %8s %-5s %-6s %7s %9s %7s %7s %9s %9s  %s\n", "NAME", "PID",
		       "KIND", "EVENTS", "PENDING", "ANSWERED", "DENIED", "TIMEOUT", "P50", "P99",
		       "SUBTREE");
	for (int i = 0; i < n; i++) {
		if (!json) {
			char p50[16], p99[16];

			duration_us(p50, sizeof(p50), strtoull(h[i].p50_us, NULL, 10));
			duration_us(p99, sizeof(p99), strtoull(h[i].p99_us, NULL, 10));
			printf("%-20s %8s %-5s %-6s %7s %9s %7s %7s %9s %9s  %s\n", h[i].name,
			       h[i].pid, h[i].kind, h[i].events, h[i].pending, h[i].answered,
			       h[i].denied, h[i].timeouts, p50, p99, h[i].subtree);
			continue;
		}
		printf("%s\n  {\"name\": ", i ? "," : "");
		json_str(h[i].name);
		printf(", \"pid\": %ld, \"kind\": ", strtol(h[i].pid, NULL, 10));
		json_str(h[i].kind);
		/* EVENTS is "A" or "-", then "M" or "-" */
		printf(", \"events\": [%s%s%s], \"pending\": %llu, \"answered\": %llu, "
		       "\"denied\": %llu, \"timeouts\": %llu, \"latency_p50_us\": %llu, "
		       "\"latency_p99_us\": %llu, \"subtree\": ",
		       h[i].events[0] == 'A' ? "\"PRE_ACCESS\"" : "",
		       h[i].events[0] == 'A' && strchr(h[i].events, 'M') ? ", " : "",
		       strchr(h[i].events, 'M') ? "\"PRE_MODIFY\"" : "",
		       strtoull(h[i].pending, NULL, 10), strtoull(h[i].answered, NULL, 10),
		       strtoull(h[i].denied, NULL, 10), strtoull(h[i].timeouts, NULL, 10),
		       strtoull(h[i].p50_us, NULL, 10), strtoull(h[i].p99_us, NULL, 10));
		json_str(h[i].subtree);
		printf("}");
	}
	if (json)
		printf("\n]\n");
	free(h);
	/* the -o hook= command's last line: why an origin fails, most often */
	if (!json) {
		ssize_t said = hgetxattr(mnt, "user.hsmfs.hook_said", buf, sizeof(buf) - 1);

		if (said > 0) {
			buf[said] = '\0';
			printf("hook= last said: %s\n", buf);
		}
	}
	return 0;
}
