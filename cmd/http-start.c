/* http-start.c - hsmfs-http's questions to its origin outside events: see http-start.h */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http-archive.h"
#include "http-config.h"
#include "http-journal.h"
#include "http-list.h"
#include "http-multipart.h"
#include "http-start.h"
#include "http-xfer.h"
#include "manifest.h"

/* A probe's response headers: the Content-Type's value kept. */
static size_t probe_header(char *b, size_t sz, size_t n, void *arg)
{
	char *type = arg;
	size_t len = sz * n;

	if (len > 13 && !strncasecmp(b, "content-type:", 13)) {
		size_t v = 13;

		while (v < len && b[v] == ' ')
			v++;
		snprintf(type, 128, "%.*s", (int)(len - v), b + v);
		type[strcspn(type, "\r\n;")] = '\0';
	}
	return len;
}

static int probe_entry(void *arg, const char *name, bool is_dir, const char *mtime,
		       uint64_t size)
{
	(void)arg, (void)name, (void)is_dir, (void)mtime, (void)size;
	return 0;
}

/* An HTML root: is it a directory index (its GET parsed, no HEADs)?  why if not. */
static void probe_html(CURL *c, const char *url, char *why, size_t whylen)
{
	struct http_body b = { .max = 64 << 20 };
	char err[256] = "";
	long code = 0;
	CURLcode rc;

	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	rc = http_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (rc != CURLE_OK)
		snprintf(why, whylen, "%s", curl_easy_strerror(rc));
	else if (code != 200)
		snprintf(why, whylen, "HTTP %ld", code);
	else if (!manifest_html_is_index(b.p ? b.p : "", b.n))
		/* below the root such a page is listed from its links; the root
		 * itself is more likely a wrong URL */
		snprintf(why, whylen, "it answers with an HTML page, not a directory index "
			 "(nginx: an `index` no file has, index .hsmfs-no-index;, with autoindex "
			 "on; autoindex_format json;)");
	else if (manifest_parse_html(b.p ? b.p : "", b.n, probe_entry, NULL, err, sizeof(err)))
		snprintf(why, whylen, "%s", err);
	free(b.p);
}

/*
 * The mount's first start, its root never listed (HSMFS_PROBE=1,
 * hsmfs-hooks(7)): does the origin's root answer as a listing?  One HEAD,
 * so a huge root is not listed twice: of the root's URL (nginx: 2xx and
 * JSON, the autoindex's type; an HTML page is read and must be an index),
 * or of the bucket (S3).  A wrong path, a
 * bucket that is not there, an origin down or unknown, a page that is no
 * listing: one line on standard error and false; the mount then fails
 * with that line rather than every later look with EIO.
 */
bool probe_origin(void)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	char why[512] = "", type[128] = "";
	size_t ol = strlen(cfg.origin);
	bool slash = ol && cfg.origin[ol - 1] == '/';
	char *url = NULL;
	CURLcode rc = CURLE_OUT_OF_MEMORY;
	long code = 0;

	char *kp = NULL;

	if (cfg.s3 && http_s3_split(cfg.origin, &url, &kp))
		url = NULL; /* the bucket (of the prefix the origin may be) */
	else if (cfg.s3)
		free(kp);
	else if (asprintf(&url, "%s%s", cfg.origin, slash ? "" : "/") < 0)
		url = NULL;
	hdrs = curl_slist_append(NULL, HTTP_IDENTITY);
	if (cfg.s3 && hdrs)
		hdrs = curl_slist_append(hdrs, HTTP_S3_EMPTY_PAYLOAD);
	if (c && url && hdrs) {
		setup_handle(c, true);
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, probe_header);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, (void *)type);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
		/* within the mount's wait for its hook (timeout=, 30 s by default) */
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
		rc = http_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	}
	if (rc != CURLE_OK)
		snprintf(why, sizeof(why), "%s", curl_easy_strerror(rc));
	else if (!strncmp(url, "file:", 5))
		; /* a directory there: its listing is read as it is */
	else if (code < 200 || code > 299)
		snprintf(why, sizeof(why), "HTTP %ld", code);
	else if (!cfg.s3 && strstr(type, "text/html"))
		probe_html(c, url, why, sizeof(why));
	else if (!cfg.s3 && !strstr(type, "json"))
		snprintf(why, sizeof(why), "it answers %s, not a listing (nginx: autoindex on; "
			 "with autoindex_format json; for exact sizes)",
			 type[0] ? type : "with no type");
	if (c)
		curl_easy_cleanup(c);
	curl_slist_free_all(hdrs);
	if (why[0])
		logf_("cannot list the origin '%s': %s; check -o origin=%s", cfg.origin, why,
		      cfg.s3 ? " and the S3 options" : "");
	free(url);
	return !why[0];
}

/*
 * The journal of S3 multipart uploads (http-multipart.h): "B ID URL" once
 * one is created (synced: a crash after it must find it), "E ID" once it
 * is completed or aborted.  Each start aborts those begun and never
 * ended (a crash, a kill: their parts are kept, and paid for, until
 * then).  One file a mount point and origin, in --state-dir: no other
 * hsmfs-http serves that mount meanwhile.  It is made at the first
 * upload, emptied whenever none is unfinished, and removed at the start
 * once what it held is settled.
 */
/* 64-bit FNV-1a: the journal's name for a mount point and origin */
static uint64_t fnv(const char *a, const char *b)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *p = a; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	h = (h ^ '\n') * 0x100000001b3ull;
	for (const char *p = b; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	return h;
}

static int mkdirs(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) < 0 && errno != EEXIST) {
			*p = '/';
			return -1;
		}
		*p = '/';
	}
	return mkdir(path, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

void journal_start(void)
{
	char dir[PATH_MAX], real[PATH_MAX], file[PATH_MAX + 64];
	const char *home = getenv("HOME"), *xdg = getenv("XDG_STATE_HOME");
	char **urls = NULL, **ids = NULL;
	unsigned left = 0, aborted = 0;
	size_t n = 0;
	CURL *c;
	int err;

	if (state_dir)
		snprintf(dir, sizeof(dir), "%s", state_dir);
	else if (xdg && xdg[0] == '/')
		snprintf(dir, sizeof(dir), "%s/hsmfs-http", xdg);
	else if (home && home[0] == '/')
		snprintf(dir, sizeof(dir), "%s/.local/state/hsmfs-http", home);
	else {
		logf_("no --state-dir, XDG_STATE_HOME or HOME: multipart uploads a crash leaves "
		      "are not aborted at the next start");
		return;
	}
	if (!realpath(cfg.mountpoint, real))
		snprintf(real, sizeof(real), "%s", cfg.mountpoint);
	snprintf(file, sizeof(file), "%s/multipart-%016llx", dir,
		 (unsigned long long)fnv(real, cfg.origin));
	if (mkdirs(dir) < 0 || (errno = http_journal_open(file))) {
		logf_("cannot keep a journal of multipart uploads in '%s': %s", dir,
		      strerror(errno));
		return;
	}
	/* what the last one left: each begun and never ended, aborted */
	err = http_journal_leftovers(&urls, &ids, &n);
	if (err)
		logf_("cannot read the journal of multipart uploads '%s': %s", file,
		      strerror(err));
	c = n ? curl_easy_init() : NULL;
	if (c) {
		setup_handle(c, true);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	}
	for (size_t i = 0; i < n; i++) {
		err = c ? http_multipart_abort(c, urls[i], ids[i]) : ENOMEM;
		if (err) {
			logf_("cannot abort the multipart upload %s of %s a crash left: %s", ids[i],
			      urls[i], strerror(err));
			left++;
		} else {
			aborted++;
		}
		free(ids[i]);
		free(urls[i]);
	}
	free(ids);
	free(urls);
	if (c)
		curl_easy_cleanup(c);
	if (aborted)
		logf_("aborted %u multipart upload%s a crash left unfinished", aborted,
		      aborted == 1 ? "" : "s");
	/* the file goes once every one is settled (else kept for the next start) */
	err = err ? err : http_journal_settled(left);
	if (err)
		logf_("cannot settle the journal of multipart uploads '%s': %s", file,
		      strerror(err));
}

/*
 * Does the origin honour conditions on PUT (http_conditions_probe())?
 * Into cfg.honoured, said on standard error.  Not known (an error, a
 * refusal): not honoured, so archives read their objects back.  Asked
 * once, before the first archive (pthread_once: a mount that only
 * reads never writes its origin).
 */
void probe_conditions(void)
{
	CURL *c = curl_easy_init();
	char why[512] = "", *url = NULL;
	int r = -ENOMEM;

	if (c) {
		char *slash = strrchr(cfg.origin, '/');

		/* a scratch name beside the origin's files: in its directory */
		if (asprintf(&url, "%.*s/.hsmfs-probe-%ld",
			     slash && slash[1] == '\0' ? (int)(slash - cfg.origin) :
							  (int)strlen(cfg.origin),
			     cfg.origin, (long)getpid()) < 0)
			url = NULL;
	}
	if (c && url) {
		setup_handle(c, true);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
		r = http_conditions_probe(c, url, cfg.s3, why, sizeof(why));
	}
	cfg.honoured = r == 1;
	logf_("origin '%s': conditional PUT %s%s%s", cfg.origin,
	      r == 1 ? "honoured (If-Match refused with 412)" :
	      r == 0 ? "not honoured: each archive reads its object back" :
		       "not known: each archive reads its object back", r < 0 ? "; " : "",
	      r < 0 ? why : "");
	if (c)
		curl_easy_cleanup(c);
	free(url);
}
