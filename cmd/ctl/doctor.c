/*
 * doctor.c - hsmfsctl doctor [--json] MOUNTPOINT: is a mount healthy,
 * and if not, what to look at.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ctl.h"
#include "prom.h"

struct doctor {
	bool json;
	int fails, warns;
	const char *sep;           /* between JSON objects */
};

/* One finding: "ok", "warn" or "fail", and what it is. */
static void finding(struct doctor *d, const char *level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void finding(struct doctor *d, const char *level, const char *fmt, ...)
{
	char what[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	d->fails += !strcmp(level, "fail");
	d->warns += !strcmp(level, "warn");
	if (d->json) {
		printf("%s{\"level\": \"%s\", \"what\": ", d->sep, level);
		json_str(what);
		printf("}");
		d->sep = ",\n ";
	} else {
		printf("%-5s %s\n", level, what);
	}
}

/*
 * The proxies of hooks that say them (hsmfs-http --proxy, its STATS):
 * each one failed and skipped now a warning, then how many are up and
 * the bytes from the tier against those from the origin.
 */
static void doctor_proxies(struct doctor *d, const char *mnt)
{
	static char counters[1 << 20];
	long long tier = -1, origin = -1;
	unsigned up = 0, all = 0;
	char hook[256] = "";
	struct prom_counter c;

	hook_counters(mnt, counters, sizeof(counters));
	for (const char *l = counters; (l = counter_next(l, &c));) {
		const char *m = c.metric, *sp = c.value;

		snprintf(hook, sizeof(hook), "%.*s", (int)c.hook_len, c.hook);
		if (!strncmp(m, "proxy_up{proxy=\"", 16)) {
			const char *q = memchr(m + 16, '"', (size_t)(sp - m - 16));
			bool is_up = *sp == '1';

			all++;
			up += is_up;
			if (!is_up && q)
				finding(d, "warn", "hook %s: proxy %.*s failed and is skipped for now "
					"(the chain goes on through the next member)", hook,
					(int)(q - m - 16), m + 16);
		} else if (!strncmp(m, "tier_bytes_total ", 17)) {
			tier = atoll(sp);
		} else if (!strncmp(m, "origin_bytes_total ", 19)) {
			origin = atoll(sp);
		}
	}
	if (all) {
		char t[32], o[32];

		human(t, sizeof(t), tier < 0 ? 0 : tier);
		human(o, sizeof(o), origin < 0 ? 0 : origin);
		finding(d, up ? "ok" : "fail", "hook %s: %u of %u proxies up; %s from the tier's "
			"cache, %s from the origin (through a proxy or DIRECT)", hook, up, all, t, o);
	}
}

static size_t doctor_discard(char *b, size_t sz, size_t n, void *arg)
{
	(void)b;
	(void)arg;
	return sz * n;
}

static size_t doctor_nothing(char *b, size_t sz, size_t n, void *arg)
{
	(void)b;
	(void)sz;
	(void)n;
	(void)arg;
	return 0;
}

/*
 * Does the origin honour conditions on PUT?  As hsmfs-http asks at its
 * start: an empty PUT to a scratch name beside the origin with an
 * If-Match no object has; 412 honoured, a 2xx ignored (the scratch
 * object is deleted again), else not known (anonymous: no credentials).
 */
static void doctor_conditions(struct doctor *d, const char *origin)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	const char *slash = strrchr(origin, '/');
	char *url = NULL;
	CURLcode rc = CURLE_OUT_OF_MEMORY;
	long code = 0;

	if (asprintf(&url, "%.*s/.hsmfs-probe-%ld",
		     slash && slash[1] == '\0' ? (int)(slash - origin) : (int)strlen(origin),
		     origin, (long)getpid()) < 0)
		url = NULL;
	h = curl_slist_append(h, "If-Match: \"hsmfs-probe-matches-nothing\"");
	h = curl_slist_append(h, "Expect:");
	if (c && url && h) {
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, doctor_nothing);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)0);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, doctor_discard);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		if (rc == CURLE_OK && code / 100 == 2) {
			curl_easy_reset(c);
			curl_easy_setopt(c, CURLOPT_URL, url);
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
			curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, doctor_discard);
			curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
			curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
			(void)curl_easy_perform(c);
		}
	}
	if (rc == CURLE_OK && code == 412)
		finding(d, "ok", "origin %s honours conditional PUTs (If-Match): a lost update is "
			"refused", origin);
	else if (rc == CURLE_OK && code / 100 == 2)
		finding(d, "ok", "origin %s ignores conditional PUTs: each archive reads its "
			"object back to prove it (hsmfs-http(1))", origin);
	else
		finding(d, "ok", "origin %s: conditional PUTs not known (%s%ld): archives read "
			"their objects back", origin, rc == CURLE_OK ? "HTTP " : "",
			rc == CURLE_OK ? code : (long)rc);
	if (c)
		curl_easy_cleanup(c);
	curl_slist_free_all(h);
	free(url);
}

/*
 * Can the origin be reached?  A HEAD of its URL, anonymous: hsmfsctl has
 * not the hook's credentials, so a refusal is a warning only.
 */
static void doctor_origin(struct doctor *d, const char *origin)
{
	CURL *c = curl_easy_init();
	CURLcode rc = CURLE_OUT_OF_MEMORY;
	long code = 0;

	if (c) {
		curl_easy_setopt(c, CURLOPT_URL, origin);
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		curl_easy_cleanup(c);
	}
	if (rc != CURLE_OK)
		finding(d, "fail", "origin %s: %s", origin, curl_easy_strerror(rc));
	else if (code == 401 || code == 403)
		finding(d, "warn", "origin %s: HTTP %ld to a request without the hook's "
			"credentials", origin, code);
	else if (code >= 400)
		finding(d, "fail", "origin %s: HTTP %ld", origin, code);
	else
		finding(d, "ok", "origin %s answers", origin);
	if (rc == CURLE_OK && code < 400 && !strncmp(origin, "http", 4))
		doctor_conditions(d, origin);
}

/*
 * One command that says whether a mount is healthy, and if not what to
 * look at: the daemon answers, its restarts, the hooks (a fill hook there
 * when an origin is, their denials and timeouts, the hook's last line),
 * the origin, the cache's room, archive conflicts.  Exit 0 with
 * warnings at most, X_PARTIAL with a failure.
 */
int cmd_doctor(int argc, char **argv)
{
	static char hooks[1 << 20];
	struct doctor d = { .sep = "" };
	struct hook_line *hl = NULL;
	int nh;
	char stats[4096], origin[4096], said[4096], h[32], h2[32];
	const char *mnt = NULL;
	bool fill = false;
	ssize_t n;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			d.json = true;
		else if (!mnt)
			mnt = argv[i];
		else
			mnt = "";
	}
	if (!mnt || !*mnt) {
		fprintf(stderr, "hsmfsctl: doctor needs one MOUNTPOINT\n");
		return X_USAGE;
	}
	if (d.json)
		printf("[");
	n = hgetxattr(mnt, "user.hsmfs.stats", stats, sizeof(stats) - 1);
	if (n < 0) {
		finding(&d, "fail", "%s: %s", mnt, errno == ENOTCONN ?
			"the daemon is gone (unmount it: fusermount3 -u, or umount for a "
			"backend=fanotify mount, and mount again)" :
			errno == ENODATA || errno == EOPNOTSUPP ? "not the root of an hsmfs mount" :
			strerror(errno));
		if (d.json)
			printf("]\n");
		return X_STORE;
	}
	stats[n] = '\0';
	finding(&d, "ok", "%s: the daemon answers", mnt);
	if (json_num(stats, "restarts") > 0) {
		long long sig = json_num(stats, "last_exit_signal");

		finding(&d, "warn", "the daemon was started again %lld time%s (the last one ended "
			"by %s %lld)", json_num(stats, "restarts"),
			json_num(stats, "restarts") == 1 ? "" : "s", sig > 0 ? "signal" : "status",
			sig > 0 ? sig : json_num(stats, "last_exit_status"));
	}
	/* backend=fanotify: what the kernel let through, or did not report */
	if (json_num(stats, "lost_events") > 0)
		finding(&d, "fail", "the kernel lost %lld fanotify event%s to an overflow: a read of "
			"bytes not fetched may have been served zeros (hsmfs(8) FANOTIFY BACKEND); "
			"check what was read, and mount again to reset the count",
			json_num(stats, "lost_events"), json_num(stats, "lost_events") == 1 ? "" : "s");
	if (json_num(stats, "lost_changes") > 0)
		finding(&d, "fail", "the kernel lost %lld fanotify change%s to an overflow: a file a "
			"user changed may not be recorded dirty, and an eviction could replace its bytes "
			"with the origin's (hsmfs(8) FANOTIFY BACKEND)",
			json_num(stats, "lost_changes"), json_num(stats, "lost_changes") == 1 ? "" : "s");
	n = hgetxattr(mnt, "user.hsmfs.origin", origin, sizeof(origin) - 1);
	origin[n > 0 ? n : 0] = '\0';
	n = hgetxattr(mnt, "user.hsmfs.hooks", hooks, sizeof(hooks) - 1);
	hooks[n > 0 ? n : 0] = '\0';
	nh = hooks_split(hooks, &hl);
	for (int i = 0; i < nh; i++) {
		fill |= !strcmp(hl[i].kind, "fill");
		if (strcmp(hl[i].timeouts, "0"))
			finding(&d, "warn", "hook %s (pid %s): %s event%s ran out of time",
				hl[i].name, hl[i].pid, hl[i].timeouts,
				strcmp(hl[i].timeouts, "1") ? "s" : "");
		else if (strcmp(hl[i].denied, "0"))
			finding(&d, "warn", "hook %s (pid %s): denied %s of %s", hl[i].name,
				hl[i].pid, hl[i].denied, hl[i].answered);
		else
			finding(&d, "ok", "hook %s (pid %s, %s): %s answered", hl[i].name, hl[i].pid,
				hl[i].kind, hl[i].answered);
	}
	if (nh > 0)
		free(hl);
	if (origin[0] && !fill)
		finding(&d, "fail", "no fill hook connected: a read of missing bytes waits "
			"timeout= and fails (-o hook=hsmfs-http, hsmfs(8))");
	n = hgetxattr(mnt, "user.hsmfs.hook_said", said, sizeof(said) - 1);
	if (n > 0) {
		said[n] = '\0';
		finding(&d, "ok", "hook= last said: %s", said);
	}
	doctor_proxies(&d, mnt);
	if (origin[0])
		doctor_origin(&d, origin);
	{
		long long used = json_num(stats, "cache_bytes"), max = json_num(stats, "cache_max"),
			  fs_free = json_num(stats, "fs_free"), enospc = json_num(stats, "enospc"),
			  over = json_num(stats, "over_fills");

		human(h, sizeof(h), used);
		human(h2, sizeof(h2), fs_free);
		if (over > 0)
			finding(&d, "warn", "cache: %lld read%s answered past cache_max, nothing "
				"else to evict (every cached file pinned, open or dirty): its bytes "
				"kept until closed; %s used (raise cache_max=, unpin)", over,
				over == 1 ? "" : "s", h);
		if (enospc > 0)
			finding(&d, "warn", "cache: %lld fill%s found no room (ENOSPC); %s used, %s "
				"free (cache_max=, cache_min_free=)", enospc, enospc == 1 ? "" : "s",
				h, h2);
		else if (!over && max > 0 && used > max / 100 * 95)
			finding(&d, "warn", "cache: %s used of cache_max", h);
		else if (!over)
			finding(&d, "ok", "cache: %s used, %s free on the store's filesystem", h, h2);
	}
	if (json_num(stats, "listed_partial") > 0)
		finding(&d, "fail", "%lld director%s answered with a page (index.html), not an "
			"index: listed from the page's links only, names it does not link to "
			"missing (user.hsmfs.state \"listed,partial\", hsmfsctl status); fix the "
			"origin: nginx: an `index` no file of the tree has (nginx has no `index off`: "
			"index .hsmfs-no-index;) with autoindex on; autoindex_format json; or any "
			"JSON autoindex (hsmfs-http(1)); then hsmfsctl refresh",
			json_num(stats, "listed_partial"),
			json_num(stats, "listed_partial") == 1 ? "y" : "ies");
	if (json_num(stats, "conflicts") > 0)
		finding(&d, "warn", "%lld archive conflict%s: hsmfsctl status shows them, "
			"hsmfsctl resolve settles them", json_num(stats, "conflicts"),
			json_num(stats, "conflicts") == 1 ? "" : "s");
	if (d.json)
		printf("]\n");
	else
		printf("%s: %d failure%s, %d warning%s\n", mnt, d.fails, d.fails == 1 ? "" : "s",
		       d.warns, d.warns == 1 ? "" : "s");
	return d.fails ? X_PARTIAL : 0;
}
