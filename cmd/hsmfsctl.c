/*
 * hsmfsctl - control an hsmfs store or mount.
 *
 *   hsmfsctl import (-s STORE | -m MOUNTPOINT) MANIFEST|- | --listing URL [--sync]
 *   hsmfsctl status [--json] PATH...
 *   hsmfsctl watch [--json] MOUNTPOINT
 *   hsmfsctl hooks [--json] MOUNTPOINT
 *   hsmfsctl stats [--json | --prometheus [--textfile DIR]] MOUNTPOINT
 *   hsmfsctl restart MOUNTPOINT
 *   hsmfsctl evict|pin|unpin|prefetch PATH...
 *   hsmfsctl refresh [--recursive] DIR... | -s STORE
 *   (archive, resolve, sync and unmount: ctl/archive.c)
 *
 * Exit codes: ctl.h.
 */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ctl/ctl.h"
#include "hsmfs/hook.h"
#include "http-list.h"
#include "manifest.h"
#include "meta.h"
#include "place.h"
#include "prom.h"
#include "proto.h"
#include "stats.h"
#include "store.h"

#define BATCH 1000

static void usage(FILE *f)
{
	fprintf(f,
"usage: hsmfsctl import (-s STORE | -m MOUNTPOINT) (MANIFEST|- | --listing URL\n"
"                       [--s3 [--aws-sigv4 PROVIDER1:PROVIDER2:REGION:SERVICE]\n"
"                       [--aws-keys-file FILE] [--page-size N]] [--sync])\n"
"       hsmfsctl status [--json] PATH... | -s STORE\n"
"       hsmfsctl watch [--json] MOUNTPOINT\n"
"       hsmfsctl hooks [--json] MOUNTPOINT\n"
"       hsmfsctl stats [--json | --prometheus [--textfile DIR]] MOUNTPOINT\n"
"       hsmfsctl doctor [--json] MOUNTPOINT\n"
"       hsmfsctl set-origin -s STORE FROM TO\n"
"       hsmfsctl restart MOUNTPOINT\n"
"       hsmfsctl evict [--range START-END] PATH...\n"
"       hsmfsctl pin|prefetch [--jobs N] PATH...\n"
"       hsmfsctl unpin PATH...\n"
"       hsmfsctl refresh [--recursive] DIR... | -s STORE\n"
"       hsmfsctl archive [--recursive] [--timeout SECONDS] PATH...\n"
"       hsmfsctl sync [--timeout SECONDS] MOUNTPOINT\n"
"       hsmfsctl unmount [--timeout SECONDS] [--lazy] MOUNTPOINT\n"
"       hsmfsctl resolve --keep-local|--take-origin PATH...\n"
"       hsmfsctl -h|--help | -V|--version\n"
"\n"
"import  create placeholders from a JSON Lines manifest (one object per\n"
"        file: path, size, and optional mtime, mode, url, version, sha256),\n"
"        or from an origin's nginx JSON autoindex (recursively) or S3 bucket,\n"
"        which is recorded for refresh; --sync also removes what it no longer has\n"
"status  per-file state and present bytes of paths in a mount, with totals;\n"
"        with -s, the files and names of an unmounted store not at the origin\n"
"watch   print the events of a mount as they happen (and allow them)\n"
"hooks   list the hooks connected to a mount\n"
"stats   cache size and limits, evictions, hits, misses, fill latency; in\n"
"        Prometheus' text format with --prometheus, or into DIR/hsmfs-*.prom\n"
"        for node_exporter's textfile collector with --textfile\n"
"doctor  is a mount healthy? its daemon, hooks, origin, cache and conflicts\n"
"set-origin  the origin moved: URLs that begin with FROM begin with TO (unmounted)\n"
"evict   drop fetched bytes of clean files (they are fetched again on access)\n"
"pin     fetch files completely and keep them (never evicted); unpin undoes\n"
"prefetch  fetch files or trees now, N files at a time (default 4), with progress\n"
"refresh list directories again from their origin: new names appear, removed\n"
"        ones go, changed files become placeholders of the new version; trees\n"
"        imported with --listing (of a mount, or with -s of a whole store) are\n"
"        listed again the same way; what a user changed stays, and is said\n"
"archive send changed and new files to their origin now (exit 0: all there)\n"
"sync    archive every changed file of a mount and wait for them\n"
"unmount sync (for 60 s at most: --timeout), unmount, and say whether every\n"
"        change reached the origin (exit 0) or which did not (exit 4)\n"
"resolve settle a conflict: the local bytes replace the origin's (--keep-local),\n"
"        or the origin's replace them (--take-origin: the local change is lost)\n"
"See hsmfsctl(1).\n");
}

/* ------------------------------------------------------------- import */

struct item {
	struct manifest_entry e;
	unsigned line;
};

static int cmp_items(const void *a, const void *b)
{
	const struct item *x = *(struct item *const *)a, *y = *(struct item *const *)b;
	int c = strcmp(x->e.path, y->e.path);

	return c ? c : (int)x->line - (int)y->line;
}

/* Both NULL, or the same string. */
static bool str_same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

/* ------------------------------------------------------ origin listing */

/* a listing over 256 MiB is not a listing */
#define LISTING_BODY_MAX (256u << 20)

/*
 * Long work on a terminal: one line on standard error, rewritten at most
 * ten times a second (end: the last, then wiped, so that the summary on
 * standard output stands alone).  Nothing when standard error is not a
 * terminal.  One thread.
 */
static int progress_width; /* of the line shown, 0: none */

static void tty_progress(bool end, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tty_progress(bool end, const char *fmt, ...)
{
	static int tty = -1;
	static double shown;
	char line[160];
	double now = mono_s();
	va_list ap;

	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	if (!tty || (!end && now - shown < 0.1) || (end && !progress_width))
		return;
	shown = now;
	if (end) {
		fprintf(stderr, "\r%*s\r", progress_width, "");
		progress_width = 0;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	progress_width = fprintf(stderr, "\r%-79.79s", line) - 1;
}

/* The progress line wiped: before a message, or at the end. */
#define tty_progress_end() tty_progress(true, "%s", "")

struct walk {
	CURL *c;
	const char *base;     /* the listing URL of this directory */
	char prefix[4096];    /* path of this directory, "" or ending in '/' */
	struct item **items;
	size_t *n, *cap;
	int depth;
	const char *only;     /* collect only below this path ("" or ending in '/') */
	bool shallow;         /* and only the names directly in it */
	const char *keys;     /* S3: the origin's key prefix ("" or ending in '/') */
	char err[512];
};

/* Does a walk limited to w->only collect the file path? */
static bool below_only(const struct walk *w, const char *path)
{
	size_t lo = w->only ? strlen(w->only) : 0;

	return !strncmp(path, w->only ? w->only : "", lo) &&
	       (!w->shallow || !strchr(path + lo, '/'));
}

/*
 * Does it list the directory path (ending in '/')?  Those on the way
 * down to w->only, and those below it unless shallow.
 */
static bool lists_dir(const struct walk *w, const char *path)
{
	size_t lp = strlen(path), lo = w->only ? strlen(w->only) : 0;

	if (lo >= lp)
		return !strncmp(w->only, path, lp);
	return !w->shallow && !strncmp(path, w->only ? w->only : "", lo);
}

static int listing_dir(struct walk *w);

static int head_file(struct walk *w, const char *url, uint64_t *size, char *lm, size_t lmlen);

static int listing_entry(void *arg, const char *name, bool is_dir, const char *mtime,
			 uint64_t size)
{
	struct walk *w = arg;
	char *esc = curl_easy_escape(w->c, name, 0), lm[128] = "";
	struct item *it;

	if (!esc)
		return -ENOMEM;
	if (is_dir) {
		struct walk sub = *w;
		char *url;

		sub.depth++;
		if (sub.depth > 64 ||
		    snprintf(sub.prefix, sizeof(sub.prefix), "%s%s/", w->prefix, name) >=
			    (int)sizeof(sub.prefix)) {
			curl_free(esc);
			snprintf(w->err, sizeof(w->err), "listing too deep at '%.200s%.200s'", w->prefix, name);
			return -ELOOP;
		}
		if (!lists_dir(w, sub.prefix)) {
			curl_free(esc);
			return 0; /* outside the part asked for: not listed */
		}
		if (asprintf(&url, "%s%s/", w->base, esc) < 0) {
			curl_free(esc);
			return -ENOMEM;
		}
		curl_free(esc);
		sub.base = url;
		int res = listing_dir(&sub);
		if (res)
			snprintf(w->err, sizeof(w->err), "%s", sub.err);
		free(url);
		return res;
	}
	{
		char path[4096 + 256];

		snprintf(path, sizeof(path), "%s%s", w->prefix, name);
		if (!below_only(w, path)) {
			curl_free(esc);
			return 0;
		}
	}
	if (*w->n == *w->cap) {
		struct item *ni;

		*w->cap = *w->cap ? 2 * *w->cap : 256;
		ni = realloc(*w->items, *w->cap * sizeof(**w->items));
		if (!ni) {
			curl_free(esc);
			return -ENOMEM;
		}
		*w->items = ni;
	}
	it = &(*w->items)[(*w->n)++];
	memset(it, 0, sizeof(*it));
	it->line = *w->n;
	it->e.mode = 0644;
	it->e.size = size;
	if (size == MANIFEST_SIZE_UNKNOWN) {
		/* an HTML index: the file's size and date are its HEAD's */
		char *url = NULL;
		int res = asprintf(&url, "%s%s", w->base, esc) < 0 ? -ENOMEM :
			  head_file(w, url, &it->e.size, lm, sizeof(lm));

		free(url);
		if (res) {
			(*w->n)--;
			curl_free(esc);
			return res > 0 ? 0 : res; /* > 0: gone since the index was made */
		}
		mtime = lm;
	}
	if (mtime[0]) {
		time_t t = curl_getdate(mtime, NULL);

		if (t >= 0) {
			it->e.mtime = t;
			it->e.has_mtime = true;
		}
		it->e.version = strdup(mtime); /* Last-Modified: the If-Range validator */
	}
	if (asprintf(&it->e.path, "%s%s", w->prefix, name) < 0 ||
	    asprintf(&it->e.url, "%s%s", w->base, esc) < 0) {
		curl_free(esc);
		return -ENOMEM;
	}
	curl_free(esc);
	if (manifest_check_path(it->e.path, strlen(it->e.path), w->err, sizeof(w->err)))
		return -EINVAL;
	return 0;
}

/* A response header of c's last transfer, or NULL. */
static const char *last_header(CURL *c, const char *name)
{
	struct curl_header *h;

	return curl_easy_header(c, name, 0, CURLH_HEADER, -1, &h) == CURLHE_OK ? h->value : NULL;
}

/*
 * A file an HTML index names: its size and Last-Modified (into lm, ""
 * if none) from a HEAD of url.  0; 1 when it is gone (404, 410); or
 * -errno with w->err.
 */
static int head_file(struct walk *w, const char *url, uint64_t *size, char *lm, size_t lmlen)
{
	const char *v, *coding;
	curl_off_t len = -1;
	long code = 0;
	CURLcode rc;

	curl_easy_setopt(w->c, CURLOPT_URL, url);
	curl_easy_setopt(w->c, CURLOPT_NOBODY, 1L);
	rc = curl_easy_perform(w->c);
	curl_easy_setopt(w->c, CURLOPT_NOBODY, 0L);
	curl_easy_getinfo(w->c, CURLINFO_RESPONSE_CODE, &code);
	if (rc == CURLE_OK && (code == 404 || code == 410))
		return 1;
	coding = rc == CURLE_OK ? last_header(w->c, "Content-Encoding") : NULL;
	if (rc == CURLE_OK && code == 200)
		curl_easy_getinfo(w->c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
	if (rc != CURLE_OK || code != 200 || len < 0 ||
	    (coding && coding[0] && strcasecmp(coding, "identity"))) {
		snprintf(w->err, sizeof(w->err), "HEAD '%.300s': %s", url,
			 rc != CURLE_OK ? curl_easy_strerror(rc) :
			 code != 200 ? "HTTP error" :
			 len < 0 ? "no Content-Length" : "a content coding");
		return -EIO;
	}
	*size = (uint64_t)len;
	v = last_header(w->c, "Last-Modified");
	snprintf(lm, lmlen, "%s", v ? v : "");
	return 0;
}

static unsigned listed_dirs; /* for the progress line */

static int listing_dir(struct walk *w)
{
	struct http_body b = { .max = LISTING_BODY_MAX };
	long code = 0;
	CURLcode rc;
	int res;

	curl_easy_setopt(w->c, CURLOPT_URL, w->base);
	curl_easy_setopt(w->c, CURLOPT_WRITEFUNCTION, http_body_cb);
	curl_easy_setopt(w->c, CURLOPT_WRITEDATA, &b);
	rc = curl_easy_perform(w->c);
	curl_easy_getinfo(w->c, CURLINFO_RESPONSE_CODE, &code);
	if (rc != CURLE_OK || code != 200) {
		snprintf(w->err, sizeof(w->err), "listing '%.300s': %s", w->base,
			 rc != CURLE_OK ? curl_easy_strerror(rc) : "HTTP error");
		if (rc == CURLE_OK)
			snprintf(w->err + strlen(w->err), sizeof(w->err) - strlen(w->err),
				 " %ld", code);
		free(b.p);
		return -EIO;
	}
	listed_dirs++;
	tty_progress(false, "listing %s: %u directories, %zu files", w->base, listed_dirs, *w->n);
	/* nginx's JSON autoindex, or an HTML index (nginx, Apache, python...) */
	res = manifest_parse_listing(b.p ? b.p : "", b.n, listing_entry, w, w->err,
				     sizeof(w->err));
	if (res == -EINVAL && !strstr(w->err, "listing '")) {
		char tmp[512];

		snprintf(tmp, sizeof(tmp), "listing '%.150s': %.300s", w->base, w->err);
		snprintf(w->err, sizeof(w->err), "%s", tmp);
	}
	free(b.p);
	return res;
}

/* libcurl up, one handle, the listing URL ending in '/'; caller frees *ret_base. */
static int listing_begin(struct walk *w, const char *url, char **ret_base)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return -EIO;
	w->c = curl_easy_init();
	if (!w->c || asprintf(ret_base, "%s%s", url, url[strlen(url) - 1] == '/' ? "" : "/") < 0)
		return -ENOMEM;
	w->base = *ret_base;
	curl_easy_setopt(w->c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(w->c, CURLOPT_CONNECTTIMEOUT, 10L);
	return 0;
}

struct s3opts {
	bool s3;
	const char *sigv4;
	const char *keys_file;
	unsigned page;
};

static struct item *new_item(struct walk *w)
{
	if (*w->n == *w->cap) {
		struct item *ni;

		*w->cap = *w->cap ? 2 * *w->cap : 256;
		ni = realloc(*w->items, *w->cap * sizeof(**w->items));
		if (!ni)
			return NULL;
		*w->items = ni;
	}
	memset(&(*w->items)[*w->n], 0, sizeof(struct item));
	(*w->items)[*w->n].line = *w->n + 1;
	(*w->items)[*w->n].e.mode = 0644;
	return &(*w->items)[(*w->n)++];
}

static int s3_entry(void *arg, const char *key, uint64_t size, const char *etag,
		    const char *lm)
{
	struct walk *w = arg;
	struct item *it;
	struct tm tm = { 0 };
	char *url, *p;
	size_t klen = strlen(key);

	if (!klen || key[klen - 1] == '/')
		return 0; /* a "directory" marker */
	if (w->keys && strncmp(key, w->keys, strlen(w->keys)))
		return 0; /* not below the origin's prefix (a server that ignored it) */
	if (w->keys) {
		key += strlen(w->keys);
		klen -= strlen(w->keys);
	}
	if (manifest_check_path(key, klen, w->err, sizeof(w->err)))
		return -EINVAL;
	if (!below_only(w, key))
		return 0;
	/* escape each segment, keep the slashes */
	p = http_escape(key, "/");
	if (!p || asprintf(&url, "%s%s", w->base, p) < 0) {
		free(p);
		return -ENOMEM;
	}
	free(p);
	it = new_item(w);
	if (!it) {
		free(url);
		return -ENOMEM;
	}
	it->e.path = strdup(key);
	it->e.url = url;
	it->e.size = size;
	it->e.version = etag[0] ? strdup(etag) : NULL;
	if (strptime(lm, "%Y-%m-%dT%H:%M:%S", &tm)) {
		it->e.mtime = timegm(&tm);
		it->e.has_mtime = true;
	}
	return it->e.path ? 0 : -ENOMEM;
}

/*
 * The objects of the S3 bucket (or prefix) at url, appended to *items;
 * with only (not NULL), those below that path (shallow: directly in
 * it).  0 or -errno (said why).
 */
static int collect_s3(const char *url, const struct s3opts *so, const char *only,
		      bool shallow, struct item **items, size_t *n, size_t *cap)
{
	struct walk w = { .items = items, .n = n, .cap = cap, .only = only, .shallow = shallow };
	struct curl_slist *hdrs = NULL;
	char token[2048] = "", *userpwd = NULL, *base, *bucket = NULL, *keys = NULL, *kq = NULL;
	bool more = true;
	int res = listing_begin(&w, url, &base);

	/* the origin: a bucket, or a prefix in one (its keys are listed) */
	if (!res && (http_s3_split(url, &bucket, &keys) || !(kq = http_escape(keys, NULL))))
		res = -ENOMEM;
	w.keys = keys;
	if (res) {
		free(bucket);
		free(keys);
		return res;
	}
	curl_easy_setopt(w.c, CURLOPT_WRITEFUNCTION, http_body_cb);
	if (so->sigv4) {
		char buf[4096], *nl;
		FILE *f = so->keys_file ? fopen(so->keys_file, "r") : NULL;
		size_t k = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f)
			fclose(f);
		buf[k] = '\0';
		nl = strchr(buf, '\n');
		if (f && nl) {
			*nl = '\0';
			nl[1 + strcspn(nl + 1, "\r\n")] = '\0';
			res = asprintf(&userpwd, "%s:%s", buf, nl + 1) < 0 ? -ENOMEM : 0;
		} else if (getenv("AWS_ACCESS_KEY_ID") && getenv("AWS_SECRET_ACCESS_KEY")) {
			res = asprintf(&userpwd, "%s:%s", getenv("AWS_ACCESS_KEY_ID"),
				       getenv("AWS_SECRET_ACCESS_KEY")) < 0 ? -ENOMEM : 0;
		} else {
			fprintf(stderr, "hsmfsctl: --aws-sigv4 needs --aws-keys-file or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY\n");
			res = -EINVAL;
		}
		curl_easy_setopt(w.c, CURLOPT_AWS_SIGV4, so->sigv4);
		curl_easy_setopt(w.c, CURLOPT_USERPWD, userpwd);
		hdrs = curl_slist_append(NULL, HTTP_S3_EMPTY_PAYLOAD);
		curl_easy_setopt(w.c, CURLOPT_HTTPHEADER, hdrs);
	}
	while (!res && more) {
		struct http_body b = { .max = LISTING_BODY_MAX };
		char *req, *tok = token[0] ? curl_easy_escape(w.c, token, 0) : NULL;
		long code = 0;
		CURLcode rc;

		if (asprintf(&req, "%s/?list-type=2&max-keys=%u%s%s%s%s", bucket, so->page,
			     kq[0] ? "&prefix=" : "", kq, tok ? "&continuation-token=" : "",
			     tok ? tok : "") < 0) {
			curl_free(tok);
			res = -ENOMEM;
			break;
		}
		curl_free(tok);
		curl_easy_setopt(w.c, CURLOPT_URL, req);
		curl_easy_setopt(w.c, CURLOPT_WRITEDATA, &b);
		rc = curl_easy_perform(w.c);
		curl_easy_getinfo(w.c, CURLINFO_RESPONSE_CODE, &code);
		free(req);
		if (rc != CURLE_OK || code != 200) {
			char why[600] = "";

			if (rc == CURLE_OK && b.p) {
				char *z = realloc(b.p, b.n + 1);

				if (z) {
					b.p = z;
					b.p[b.n] = '\0';
					manifest_s3_error(b.p, why, sizeof(why));
				}
			}
			fprintf(stderr, "hsmfsctl: listing '%s': %s %ld%s\n", base,
				rc != CURLE_OK ? curl_easy_strerror(rc) : "HTTP", code, why);
			free(b.p);
			res = code == 401 || code == 403 ? -EACCES : -EIO;
			break;
		}
		tty_progress(false, "listing %s: %zu objects", url, *w.n);
		res = manifest_parse_s3(b.p ? b.p : "", b.n, s3_entry, &w, &more, token,
					sizeof(token), w.err, sizeof(w.err));
		if (res)
			fprintf(stderr, "hsmfsctl: listing '%s': %s\n", base,
				w.err[0] ? w.err : strerror(-res));
		free(b.p);
	}
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(w.c);
	curl_global_cleanup();
	free(base);
	free(bucket);
	free(keys);
	free(kq);
	free(userpwd);
	return res;
}

/*
 * The files of the nginx JSON autoindex at url and every directory below
 * it, appended to *items; only and shallow: as collect_s3().  0 or
 * -errno (said why).
 */
static int collect_listing(const char *url, const char *only, bool shallow,
			   struct item **items, size_t *n, size_t *cap)
{
	struct walk w = { .items = items, .n = n, .cap = cap, .only = only, .shallow = shallow };
	char *base;
	int res = listing_begin(&w, url, &base);

	if (res)
		return res;
	curl_easy_setopt(w.c, CURLOPT_FOLLOWLOCATION, 1L);
	res = listing_dir(&w);
	if (res)
		fprintf(stderr, "hsmfsctl: %s\n", w.err[0] ? w.err : strerror(-res));
	curl_easy_cleanup(w.c);
	curl_global_cleanup();
	free(base);
	return res;
}

/*
 * An import puts entries below these directories: each, if unlisted, is
 * listed from now on (place_listed), once an import (the inode numbers
 * seen so far are remembered).
 */
static struct {
	uint64_t *ino;
	size_t n, cap;
} seen_dirs;

static int listed_once(struct meta *m, int dfd)
{
	struct stat st;

	if (!m || fstat(dfd, &st) < 0)
		return 0;
	for (size_t i = seen_dirs.n; i-- > 0 && seen_dirs.n - i <= 64;)
		if (seen_dirs.ino[i] == st.st_ino)
			return 0; /* the last few: an import goes directory by directory */
	if (seen_dirs.n == seen_dirs.cap) {
		size_t cap = seen_dirs.cap ? 2 * seen_dirs.cap : 256;
		uint64_t *v = realloc(seen_dirs.ino, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		seen_dirs.ino = v;
		seen_dirs.cap = cap;
	}
	seen_dirs.ino[seen_dirs.n++] = st.st_ino;
	return place_listed(m, dfd);
}

/*
 * Open (creating) the directory of path below root, never following a
 * symlink; with m, each directory on the way that is unlisted becomes
 * listed (the manifest says what is in it).
 */
static int open_parent(int root, char *path, char **ret_name, struct meta *m)
{
	char *slash, *comp = path;
	int dfd = dup(root);

	if (dfd >= 0 && listed_once(m, dfd) < 0) {
		close(dfd);
		return -EIO;
	}

	while (dfd >= 0 && (slash = strchr(comp, '/'))) {
		int nfd;

		*slash = '\0';
		nfd = openat(dfd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT) {
			if (mkdirat(dfd, comp, 0755) < 0 && errno != EEXIST) {
				*slash = '/';
				close(dfd);
				return -errno;
			}
			nfd = openat(dfd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		*slash = '/';
		close(dfd);
		if (nfd < 0)
			return errno == ELOOP || errno == ENOTDIR ? -ENOTDIR : -errno;
		dfd = nfd;
		comp = slash + 1;
		if (listed_once(m, dfd) < 0) {
			close(dfd);
			return -EIO;
		}
	}
	*ret_name = comp;
	return dfd;
}

/*
 * A file open in passthrough mode is read by the kernel from the store
 * itself: emptied now, it would read as zeros until closed.
 */
static int not_passthrough(void *arg, const char *relpath, char *err, size_t errlen)
{
	const char *mnt = arg;
	char mp[PATH_MAX + 4200], state[256];
	ssize_t sn;

	if (!mnt)
		return 0;
	snprintf(mp, sizeof(mp), "%s/%s", mnt, relpath);
	sn = getxattr(mp, "user.hsmfs.state", state, sizeof(state) - 1);
	state[sn > 0 ? sn : 0] = 0;
	if (strstr(state, "passthrough")) {
		snprintf(err, errlen, "'%s' is open in passthrough mode; close it, "
			 "then import it again", relpath);
		return -EBUSY;
	}
	return 0;
}

/*
 * The live mount mnt re-reads rel (NULL: the root) from its store: a
 * file's state, or a directory's names.  A file being filled answers
 * EBUSY for a while: asked again.  0, or -1 (said).
 */
static int reload(const char *mnt, const char *rel)
{
	char p[PATH_MAX + 4200];

	snprintf(p, sizeof(p), "%s%s%s", mnt, rel ? "/" : "", rel ? rel : "");
	for (int tries = 0; setxattr(p, "user.hsmfs.reload", "1", 1, 0) < 0; tries++) {
		if (errno != EBUSY || tries == 100) {
			fprintf(stderr, "hsmfsctl: '%s': the mount did not reload it: %s\n", p,
				strerror(errno));
			return -1;
		}
		usleep(50000); /* a fill of the old version is finishing */
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * After a batch of n items went into the store of the live mount mnt,
 * made[k] where item k is a new name: the mount drops what its kernel
 * holds of each directory that gained a name, made ones included (their
 * listings, links and times), and every name it knew missing (the
 * root's reload, first).  0, or -1: a reload failed (said).
 */
static int reload_made(const char *mnt, const struct item *items, const bool *made, size_t n)
{
	char **dirs = NULL;
	size_t nd = 0, cap = 0, k;
	bool oom = false;
	int res = 0;

	for (k = 0; k < n && !made[k]; k++)
		;
	if (k == n)
		return 0;
	res = reload(mnt, NULL);
	/* every directory above a new name: open_parent() may have made them */
	for (k = 0; k < n && !oom; k++) {
		const char *path = items[k].e.path, *sl;

		for (sl = made[k] ? strchr(path, '/') : NULL; sl; sl = strchr(sl + 1, '/')) {
			if (nd == cap) {
				char **m = realloc(dirs, (cap = cap ? 2 * cap : 64) * sizeof(*dirs));

				if (!m) {
					oom = true;
					break;
				}
				dirs = m;
			}
			if (!(dirs[nd] = strndup(path, (size_t)(sl - path)))) {
				oom = true;
				break;
			}
			nd++;
		}
	}
	if (oom) {
		fprintf(stderr, "hsmfsctl: out of memory: the mount may show the import late\n");
		res = -1;
	}
	if (nd)
		qsort(dirs, nd, sizeof(*dirs), cmp_str);
	for (k = 0; k < nd; k++)
		if ((!k || strcmp(dirs[k], dirs[k - 1])) && reload(mnt, dirs[k]))
			res = -1;
	for (k = 0; k < nd; k++)
		free(dirs[k]);
	free(dirs);
	return res;
}

/*
 * Make one placeholder (or unlisted directory).  *created is set when a
 * new entry was made (so a failed batch can remove it again).
 */
static int import_one(int root, const char *mnt, struct meta *m, struct item *it,
		      bool *created, enum place_outcome *out, char *err, size_t errlen)
{
	char *name = NULL, path[4200];
	int dfd, res;

	*created = false;
	snprintf(path, sizeof(path), "%s", it->e.path);
	dfd = open_parent(root, path, &name, m);
	if (dfd == -EIO) {
		snprintf(err, errlen, "database: %s", meta_errmsg(m));
		return dfd;
	}
	if (dfd < 0) {
		snprintf(err, errlen, "cannot make the directories of '%s': %s",
			 it->e.path, dfd == -ENOTDIR ? "a component is not a directory (or is a symlink)" :
							strerror(-dfd));
		return dfd;
	}
	res = place_entry(m, dfd, name, it->e.path, &it->e, false, not_passthrough,
			  (void *)mnt, created, out, err, errlen);
	close(dfd);
	return res;
}

static int remove_path(int root, const char *rel, bool is_dir)
{
	char path[4200], *name;
	int dfd, res;

	snprintf(path, sizeof(path), "%s", rel);
	dfd = open_parent(root, path, &name, NULL);
	if (dfd < 0)
		return dfd;
	res = unlinkat(dfd, name, is_dir ? AT_REMOVEDIR : 0) < 0 ? -errno : 0;
	close(dfd);
	return res;
}

/* ---------------------------------------------- recorded listings */

/*
 * STORE/.hsmfs/listings: the listings import --listing took, which
 * hsmfsctl refresh lists again.  One line each, fields split by tabs:
 *   nginx URL
 *   s3 URL PAGE SIGV4 KEYSFILE     ("-": none; never a key itself)
 * A line per URL (an import again replaces its line).  Written whole
 * to a new file that is synced and renamed over the old one.
 */
#define LISTINGS_FILE "listings"

struct listing_rec {
	char *url;        /* owned */
	struct s3opts so; /* so.sigv4, so.keys_file: owned */
};

static void listing_recs_free(struct listing_rec *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].url);
		free((char *)v[i].so.sigv4);
		free((char *)v[i].so.keys_file);
	}
	free(v);
}

/*
 * The listings recorded in the store: *ret (caller frees with
 * listing_recs_free()) and *ret_n, both set only on success.  A store
 * with none gives 0 and an empty list; lines not understood are passed
 * over.  0 or -errno.
 */
static int listing_recs_read(const char *store, struct listing_rec **ret, size_t *ret_n)
{
	char path[PATH_MAX + 64], *line = NULL;
	struct listing_rec *v = NULL;
	size_t n = 0, cap = 0;
	ssize_t len;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", store, STORE_STATE_DIR, LISTINGS_FILE);
	f = fopen(path, "re");
	if (!f && errno != ENOENT)
		return -errno;
	while (f && (len = getline(&line, &cap, f)) >= 0) {
		char *fld[5] = { 0 }, *save, *t = strtok_r(line, "\t\n", &save);
		struct listing_rec *nv;
		int k = 0;

		for (; t && k < 5; t = strtok_r(NULL, "\t\n", &save))
			fld[k++] = t;
		if (k < 2 || (strcmp(fld[0], "nginx") && (strcmp(fld[0], "s3") || k != 5)))
			continue;
		nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv)
			goto oom;
		v = nv;
		memset(&v[n], 0, sizeof(v[n]));
		v[n].so.page = 1000;
		v[n].url = strdup(fld[1]);
		if (!v[n++].url)
			goto oom;
		if (k == 5) {
			v[n - 1].so.s3 = true;
			v[n - 1].so.page = atoi(fld[2]) > 0 ? (unsigned)atoi(fld[2]) : 1000;
			if ((strcmp(fld[3], "-") && !(v[n - 1].so.sigv4 = strdup(fld[3]))) ||
			    (strcmp(fld[4], "-") && !(v[n - 1].so.keys_file = strdup(fld[4]))))
				goto oom;
		}
	}
	free(line);
	if (f)
		fclose(f);
	*ret = v;
	*ret_n = n;
	return 0;
oom:
	free(line);
	fclose(f);
	listing_recs_free(v, n);
	return -ENOMEM;
}

/*
 * Record that the store took the listing at url (with so's options) for
 * refresh: its line added, or replaced.  Prints a warning and returns
 * -1 when it cannot (the import itself stands).
 */
/*
 * Write the listings v[0..n) as the store's record: a new file synced
 * and renamed over the old one, and the rename synced.  0 or -errno.
 */
static int listing_recs_write(const char *store, const struct listing_rec *v, size_t n)
{
	char path[PATH_MAX + 64], tmp[PATH_MAX + 72];
	int fd, res;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", store, STORE_STATE_DIR, LISTINGS_FILE);
	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	fchmod(fd, 0644);
	f = fdopen(fd, "w");
	if (!f) {
		res = -errno;
		close(fd);
		unlink(tmp);
		return res;
	}
	for (size_t i = 0; i < n; i++) {
		if (v[i].so.s3)
			fprintf(f, "s3\t%s\t%u\t%s\t%s\n", v[i].url, v[i].so.page,
				v[i].so.sigv4 ? v[i].so.sigv4 : "-",
				v[i].so.keys_file ? v[i].so.keys_file : "-");
		else
			fprintf(f, "nginx\t%s\n", v[i].url);
	}
	res = fflush(f) || fsync(fileno(f)) ? -errno : 0;
	if (fclose(f) && !res)
		res = -errno;
	if (!res && rename(tmp, path) < 0)
		res = -errno;
	if (res) {
		unlink(tmp);
		return res;
	}
	/* the rename reaches the disk */
	snprintf(path, sizeof(path), "%s/%s", store, STORE_STATE_DIR);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	return 0;
}

/*
 * The listings' read-modify-write, one at a time: two imports (one of
 * them into a live mount, under no store lock) would lose one's record.
 * A descriptor to close to let go, or -1 (then unlocked: said).
 */
static int listings_lock(const char *store)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "%s/%s/%s.lock", store, STORE_STATE_DIR, LISTINGS_FILE);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0 && flock(fd, LOCK_EX) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static int listing_record(const char *store, const char *url, const struct s3opts *so)
{
	char path[PATH_MAX + 64], keys[PATH_MAX] = "-";
	struct listing_rec *v = NULL, *nv;
	size_t n = 0, k = 0;
	int res, lockfd;

	if (strpbrk(url, "\t\n\r") || (so->sigv4 && strpbrk(so->sigv4, "\t\n\r"))) {
		fprintf(stderr, "hsmfsctl: warning: a tab or newline in the listing's URL or "
			"options: not recorded, refresh cannot list it again\n");
		return -1;
	}
	if (so->keys_file && !realpath(so->keys_file, keys))
		snprintf(keys, sizeof(keys), "%s", so->keys_file);
	lockfd = listings_lock(store);
	res = listing_recs_read(store, &v, &n);
	/* the others as they were, this one (again) last */
	for (size_t i = 0; !res && i < n; i++) {
		if (!strcmp(v[i].url, url)) {
			free(v[i].url);
			free((char *)v[i].so.sigv4);
			free((char *)v[i].so.keys_file);
		} else {
			v[k++] = v[i];
		}
	}
	n = res ? n : k;
	if (!res && !(nv = realloc(v, (n + 1) * sizeof(*v))))
		res = -ENOMEM;
	if (!res) {
		v = nv;
		v[n] = (struct listing_rec){ .url = strdup(url), .so = *so };
		v[n].so.sigv4 = so->sigv4 ? strdup(so->sigv4) : NULL;
		v[n].so.keys_file = so->s3 && strcmp(keys, "-") ? strdup(keys) : NULL;
		n++;
		res = v[n - 1].url ? listing_recs_write(store, v, n) : -ENOMEM;
	}
	listing_recs_free(v, n);
	if (lockfd >= 0)
		close(lockfd);
	if (!res)
		return 0;
	snprintf(path, sizeof(path), "%s/%s/%s", store, STORE_STATE_DIR, LISTINGS_FILE);
	fprintf(stderr, "hsmfsctl: warning: cannot record the listing in '%s': %s; refresh "
		"cannot list it again\n", path, strerror(-res));
	return -1;
}

/* ------------------------------------------------------ import, sync */

/*
 * One import into a store: items to make; for a sync (import --sync,
 * refresh), also the part of the tree its listing covers, below sub,
 * where what the listing no longer names goes.
 */
struct import_run {
	const char *store;     /* the store's path */
	const char *mnt;       /* its live mount, or NULL: the store is locked */
	const char *src;       /* the manifest or listing, for messages */
	struct item *items;    /* the caller's */
	size_t n;
	bool sync;
	const char *base;      /* sync: the listing's URL, ending in '/' */
	const char *sub;       /* sync: "" or a directory's path ending in '/' */
	bool shallow;          /* sync: only the names directly in sub */
	struct item **sorted;  /* items by path */
	size_t nnew, nchanged, nsame, nremoved, nkept;
};

static int cmp_path_key(const void *key, const void *elem)
{
	return strcmp(key, (*(struct item *const *)elem)->e.path);
}

/* Does the import name path? */
static bool run_names(const struct import_run *r, const char *path)
{
	return r->n && bsearch(path, r->sorted, r->n, sizeof(*r->sorted), cmp_path_key);
}

/* Does it name something below the directory dir (its path ending in '/')? */
static bool run_names_below(const struct import_run *r, const char *dir)
{
	size_t lo = 0, hi = r->n, ld = strlen(dir);

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(r->sorted[mid]->e.path, dir) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->n && !strncmp(r->sorted[lo]->e.path, dir, ld);
}

/* A name the refresh leaves as it is, and why: said once, counted. */
static void kept(struct import_run *r, const char *rel, const char *why)
{
	printf("kept '%s': %s\n", rel, why);
	r->nkept++;
}

/*
 * Is the managed file rel (row, st: its row and the store's stat) the
 * user's to keep, whatever the origin did?  Changed or made through the
 * mount (dirty, new, in conflict: in the database, or, on a live mount,
 * in the daemon's memory, which the database may lag), pinned, or with
 * a second name a user linked.  Sets why (a static string) when it is.
 */
static bool users(const struct import_run *r, const char *rel, const struct meta_file *row,
		  const struct stat *st, const char **why)
{
	char p[PATH_MAX + 4200], state[256] = "";
	ssize_t sn;

	if (r->mnt) {
		snprintf(p, sizeof(p), "%s/%s", r->mnt, rel);
		sn = lgetxattr(p, "user.hsmfs.state", state, sizeof(state) - 1);
		state[sn > 0 ? sn : 0] = '\0';
	}
	if (row->state == META_DIRTY || (row->flags & (META_F_NEW | META_F_CONFLICT)) ||
	    !strncmp(state, "dirty", 5) || strstr(state, ",new") || strstr(state, "conflict"))
		*why = "changed through the mount";
	else if ((row->flags & META_F_PINNED) || strstr(state, "pinned"))
		*why = "pinned (hsmfsctl unpin, then refresh again)";
	else if (st->st_nlink > 1)
		*why = "a user linked it (it has more than one name)";
	else if (strstr(state, "passthrough"))
		*why = "open in passthrough mode (close it, then refresh again)";
	else
		return false;
	return true;
}

/*
 * A file of a live mount about to be removed (p: its path on the mount,
 * st: its store file), asked again just before: changed, made, pinned,
 * linked or open for passthrough since the sync first looked?  why says.
 */
static bool busy_now(const char *p, const struct stat *st, const char **why)
{
	char state[256];
	ssize_t sn = lgetxattr(p, "user.hsmfs.state", state, sizeof(state) - 1);

	state[sn > 0 ? sn : 0] = '\0';
	if (!strncmp(state, "dirty", 5) || strstr(state, ",new") || strstr(state, "conflict"))
		*why = "changed through the mount meanwhile";
	else if (strstr(state, "pinned"))
		*why = "pinned meanwhile";
	else if (st->st_nlink > 1)
		*why = "a user linked it meanwhile";
	else if (strstr(state, "passthrough"))
		*why = "open in passthrough mode (close it, then refresh again)";
	else
		return false;
	return true;
}

enum keep { K_APPLY, K_SAME, K_KEEP };

/*
 * A sync is about to make item it: K_APPLY (make it as an import does),
 * K_SAME (the user's file, of the origin's version still: nothing to
 * do), or K_KEEP (the user's, or not a managed file: said, kept).
 */
static enum keep sync_keep(struct import_run *r, int root, struct meta *m,
			   const struct item *it)
{
	const char *why = NULL;
	struct meta_file row;
	struct stat st;
	bool same;
	int res;

	if (fstatat(root, it->e.path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return K_APPLY; /* new (import_one says why if it cannot be) */
	if (!S_ISREG(st.st_mode)) {
		kept(r, it->e.path, "not a file here (made through the mount)");
		return K_KEEP;
	}
	res = meta_get(m, st.st_ino, &row);
	if (res == -ENOENT) {
		kept(r, it->e.path, "not from the origin (made through the mount)");
		return K_KEEP;
	}
	if (res)
		return K_APPLY; /* import_one reports the database */
	same = str_same(row.origin, it->e.url) && str_same(row.version, it->e.version) &&
	       (row.state == META_DIRTY ? row.osize : row.size) == it->e.size;
	if (!str_same(row.origin, it->e.url)) {
		why = "not this listing's file (renamed here through the mount, "
		      "or imported from elsewhere)";
	} else if (same && row.state != META_DIRTY &&
		   !(row.flags & (META_F_NEW | META_F_CONFLICT))) {
		/* import_one leaves it as it is: the mount need not be asked */
	} else if (users(r, it->e.path, &row, &st, &why) && same) {
		meta_file_free(&row);
		return K_SAME; /* the origin's version is the one it started from */
	}
	meta_file_free(&row);
	if (!why)
		return K_APPLY;
	kept(r, it->e.path, why);
	return K_KEEP;
}

/* A file a sync removes: its path and store inode number. */
struct gone {
	char *rel;  /* owned */
	uint64_t ino;
};

struct gones {
	struct gone *v;
	size_t n, cap;
};

/*
 * Find below the store directory rel (fd dfd, which this closes) the
 * files the sync's listing no longer names: managed, clean, from this
 * listing (their origin the URL their path has in it), not the user's
 * (users()).  Directories with a row of their own (listed lazily, by
 * the daemon) are theirs, not walked.  0 or -errno (said why).
 */
static int sync_find(struct import_run *r, struct meta *m, int dfd, char *rel, size_t cap,
		     int depth, struct gones *g)
{
	size_t rl = strlen(rel);
	struct dirent *de;
	int res = 0;
	DIR *d = fdopendir(dfd);

	if (!d) {
		res = -errno;
		close(dfd);
		fprintf(stderr, "hsmfsctl: '%s/%s': %s\n", r->store, rel, strerror(-res));
		return res;
	}
	while (!res && (de = readdir(d))) {
		struct meta_file row;
		struct stat st;
		char *url, *esc;
		const char *why = NULL;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (!rl && !strcmp(de->d_name, STORE_STATE_DIR)))
			continue;
		if (rl + strlen(de->d_name) + 2 > cap ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		snprintf(rel + rl, cap - rl, "%s", de->d_name);
		if (S_ISDIR(st.st_mode)) {
			int sfd;

			if (r->shallow || depth > 4096)
				continue;
			if (!meta_get(m, st.st_ino, &row)) {
				meta_file_free(&row); /* listed lazily: the daemon's */
				continue;
			}
			strcat(rel, "/");
			sfd = openat(dirfd(d), de->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			res = sfd < 0 ? 0 : sync_find(r, m, sfd, rel, cap, depth + 1, g);
			rel[rl] = '\0';
			continue;
		}
		if (!S_ISREG(st.st_mode) || run_names(r, rel) || meta_get(m, st.st_ino, &row))
			continue;
		if (!row.origin || strncmp(row.origin, r->base, strlen(r->base))) {
			meta_file_free(&row); /* another listing's, or none's */
			continue;
		}
		esc = http_escape(rel, "/");
		if (!esc || asprintf(&url, "%s%s", r->base, esc) < 0) {
			free(esc);
			meta_file_free(&row);
			res = -ENOMEM;
			break;
		}
		free(esc);
		if (strcmp(url, row.origin))
			why = "renamed here through the mount";
		else
			users(r, rel, &row, &st, &why);
		free(url);
		meta_file_free(&row);
		if (why) {
			kept(r, rel, why);
			continue;
		}
		if (g->n == g->cap) {
			struct gone *nv = realloc(g->v, (g->cap = g->cap ? 2 * g->cap : 64) *
						  sizeof(*nv));

			if (!nv) {
				res = -ENOMEM;
				break;
			}
			g->v = nv;
		}
		g->v[g->n].ino = st.st_ino;
		if (!(g->v[g->n].rel = strdup(rel))) {
			res = -ENOMEM;
			break;
		}
		g->n++;
	}
	rel[rl] = '\0';
	closedir(d);
	if (res == -ENOMEM)
		fprintf(stderr, "hsmfsctl: out of memory\n");
	return res;
}

#define SYNC_TRASH "sync-trash"

/*
 * Files a sync took out of the tree (moved to STORE/.hsmfs/sync-trash,
 * named by inode number) and whose rows go: rows deleted in one
 * transaction, then the files.  A sync stopped between the two (a
 * crash) is finished so at the next one: the files were gone from the
 * origin.  tfd: the trash directory.  0 or -errno (said why).
 */
static int trash_empty(struct meta *m, int tfd)
{
	int fd = openat(tfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), res = 0;
	struct dirent *de;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	unsigned n = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	res = meta_begin(m);
	while (!res && (de = readdir(d))) {
		struct stat st;

		if (de->d_name[0] != '.' && !fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			res = meta_delete(m, st.st_ino, NULL);
	}
	if (!res)
		res = meta_commit(m);
	if (res) {
		meta_rollback(m);
		fprintf(stderr, "hsmfsctl: database: %s\n", meta_errmsg(m));
	}
	rewinddir(d);
	while (!res && (de = readdir(d)))
		if (de->d_name[0] != '.')
			n += unlinkat(dirfd(d), de->d_name, 0) == 0;
	closedir(d);
	if (n)
		fprintf(stderr, "hsmfsctl: finished removing %u file%s an earlier refresh "
			"stopped removing\n", n, n == 1 ? "" : "s");
	return res;
}

/*
 * Remove the files g found (sync_find()), BATCH at a time, each batch
 * atomic: its files moved into the trash, the store synced, their rows
 * deleted in one transaction, then the files unlinked; a batch that
 * fails is moved back.  On a live mount each file is marked stale
 * first (a reader that holds it open gets EIO for what it lacks, never
 * zeros), and each directory that lost names is reloaded at the end.
 * Directories emptied that the listing does not name go too.  0 or -1
 * (said why).
 */
static int sync_remove(struct import_run *r, int root, struct meta *m, struct gones *g)
{
	char p[PATH_MAX + 4200], tname[32], *name, **dirs = NULL;
	int tfd, sfd, res = 0;
	size_t i, nd = 0;
	bool *moved;

	if (!g->n)
		return 0;
	moved = calloc(BATCH, sizeof(*moved));
	dirs = calloc(g->n, sizeof(*dirs));
	snprintf(p, sizeof(p), "%s/%s", STORE_STATE_DIR, SYNC_TRASH);
	tfd = openat(root, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	sfd = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!moved || !dirs || tfd < 0 || sfd < 0) {
		fprintf(stderr, "hsmfsctl: cannot remove what the origin no longer has: %s\n",
			!moved || !dirs ? "out of memory" : strerror(errno));
		res = -1;
		goto out;
	}
	for (i = 0; !res && i < g->n; i += BATCH) {
		size_t end = i + BATCH < g->n ? i + BATCH : g->n, j;

		res = meta_begin(m);
		for (j = i; !res && j < end; j++) {
			struct gone *x = &g->v[j];
			struct stat st, before;
			int dfd;

			moved[j - i] = false;
			if (r->mnt && !fstatat(root, x->rel, &st, AT_SYMLINK_NOFOLLOW) &&
			    st.st_ino == x->ino) {
				const char *why = NULL;

				snprintf(p, sizeof(p), "%s/%s", r->mnt, x->rel);
				lsetxattr(p, "user.hsmfs.stale", "1", 1, 0);
				/*
				 * The user's change wins: looked at again now, just
				 * before it goes (the first look was a batch ago)
				 */
				if (busy_now(p, &st, &why)) {
					kept(r, x->rel, why);
					continue;
				}
				before = st;
			} else {
				memset(&before, 0, sizeof(before));
				before.st_ino = x->ino;
				fstatat(root, x->rel, &before, AT_SYMLINK_NOFOLLOW);
			}
			snprintf(p, sizeof(p), "%s", x->rel);
			dfd = open_parent(root, p, &name, NULL);
			if (dfd < 0)
				continue;
			snprintf(tname, sizeof(tname), "%llu", (unsigned long long)x->ino);
			if (renameat2(dfd, name, tfd, tname, RENAME_NOREPLACE) < 0) {
				close(dfd);
				continue;
			}
			/*
			 * the file looked at, not one a user put under its name
			 * since, nor written since it was looked at (a write
			 * moves its mtime; the rename moved its ctime): else it
			 * goes back
			 */
			if (fstatat(tfd, tname, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_ino != x->ino ||
			    st.st_size != before.st_size ||
			    st.st_mtim.tv_sec != before.st_mtim.tv_sec ||
			    st.st_mtim.tv_nsec != before.st_mtim.tv_nsec) {
				renameat2(tfd, tname, dfd, name, RENAME_NOREPLACE);
				close(dfd);
				kept(r, x->rel, "changed through the mount meanwhile");
				continue;
			}
			close(dfd);
			moved[j - i] = true;
			res = meta_delete(m, x->ino, NULL);
		}
		/* the moves reach the disk before the rows say the files are gone */
		if (!res && syncfs(sfd) < 0)
			res = -errno;
		if (!res)
			res = meta_commit(m);
		if (res) {
			fprintf(stderr, "hsmfsctl: cannot remove what the origin no longer has: %s\n",
				res == -EIO ? meta_errmsg(m) : strerror(-res));
			meta_rollback(m);
			for (size_t k = i; k < j; k++) {
				int dfd;

				if (!moved[k - i])
					continue;
				snprintf(p, sizeof(p), "%s", g->v[k].rel);
				snprintf(tname, sizeof(tname), "%llu", (unsigned long long)g->v[k].ino);
				dfd = open_parent(root, p, &name, NULL);
				if (dfd >= 0) {
					renameat2(tfd, tname, dfd, name, RENAME_NOREPLACE);
					close(dfd);
				}
			}
			res = -1;
			break;
		}
		for (j = i; j < end; j++) {
			char *sl;

			if (!moved[j - i])
				continue;
			snprintf(tname, sizeof(tname), "%llu", (unsigned long long)g->v[j].ino);
			unlinkat(tfd, tname, 0);
			r->nremoved++;
			/*
			 * up from its directory: each one it leaves empty that
			 * the listing does not name goes; p ends as the deepest
			 * one left ("": the root), which the mount reloads
			 */
			snprintf(p, sizeof(p), "%s", g->v[j].rel);
			for (;;) {
				char q[sizeof(p) + 1];
				struct meta_file row;
				struct stat st;

				if (!(sl = strrchr(p, '/'))) {
					p[0] = '\0';
					break;
				}
				*sl = '\0';
				snprintf(q, sizeof(q), "%s/", p);
				if ((size_t)(sl - p) < strlen(r->sub) || run_names_below(r, q) ||
				    fstatat(root, p, &st, AT_SYMLINK_NOFOLLOW) < 0)
					break;
				if (!meta_get(m, st.st_ino, &row)) {
					meta_file_free(&row); /* listed lazily: the daemon's */
					break;
				}
				if (unlinkat(root, p, AT_REMOVEDIR) < 0)
					break;
			}
			if (r->mnt && p[0]) {
				if (!(dirs[nd] = strdup(p)))
					break;
				nd++;
			}
		}
	}
	if (r->mnt && (r->nremoved || res)) {
		/* the kernel's names (every one, the root's reload) and listings */
		if (reload(r->mnt, NULL))
			res = -1;
		if (nd)
			qsort(dirs, nd, sizeof(*dirs), cmp_str);
		for (i = 0; i < nd; i++)
			if ((!i || strcmp(dirs[i], dirs[i - 1])) && reload(r->mnt, dirs[i]))
				res = -1;
	}
out:
	for (i = 0; dirs && i < nd; i++)
		free(dirs[i]);
	free(dirs);
	free(moved);
	if (tfd >= 0)
		close(tfd);
	if (sfd >= 0)
		close(sfd);
	return res;
}

/*
 * Before a sync makes anything: an earlier one's trash emptied, then
 * what the listing no longer has below r->sub found and removed.  0 or
 * -1 (said why).
 */
static int sync_prune(struct import_run *r, int root, struct meta *m)
{
	char rel[4200], p[64];
	struct gones g = { 0 };
	int res, tfd, dfd;

	snprintf(p, sizeof(p), "%s/%s", STORE_STATE_DIR, SYNC_TRASH);
	if (mkdirat(root, p, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "hsmfsctl: cannot make '%s/%s': %s\n", r->store, p, strerror(errno));
		return -1;
	}
	tfd = openat(root, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	res = tfd < 0 ? -errno : trash_empty(m, tfd);
	if (tfd >= 0)
		close(tfd);
	if (res)
		return -1;
	snprintf(rel, sizeof(rel), "%s", r->sub);
	dfd = openat(root, rel[0] ? rel : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -1; /* nothing of it here yet */
	res = sync_find(r, m, dfd, rel, sizeof(rel), 0, &g);
	if (!res)
		res = sync_remove(r, root, m, &g);
	for (size_t i = 0; i < g.n; i++)
		free(g.v[i].rel);
	free(g.v);
	return res ? -1 : 0;
}

/*
 * Apply the import r to its store, in batches, each one transaction
 * (a failed batch is undone); a sync removes first what its listing no
 * longer has (sync_prune()) and never makes over a user's file
 * (sync_keep()).  On a live mount the kernel is told of every change.
 * Counts in r; returns an exit code (X_*), having said why.
 */
static int import_apply(struct import_run *r)
{
	char err[512], dbpath[PATH_MAX + 32];
	struct item *items = r->items;
	size_t n = r->n, i, bad = 0;
	struct meta *m = NULL;
	int root = -1, lockfd = -1, rc = X_OK_;
	bool fresh;

	r->sorted = malloc((n ? n : 1) * sizeof(*r->sorted));
	if (!r->sorted) {
		fprintf(stderr, "hsmfsctl: out of memory\n");
		return X_STORE;
	}
	for (i = 0; i < n; i++)
		r->sorted[i] = &items[i];
	qsort(r->sorted, n, sizeof(*r->sorted), cmp_items);
	for (i = 1; i < n; i++) {
		const char *a = r->sorted[i - 1]->e.path, *b = r->sorted[i]->e.path;
		size_t la = strlen(a);

		if (!strcmp(a, b))
			fprintf(stderr, "%s:%u: duplicate path '%s' (first at line %u)\n",
				r->src, r->sorted[i]->line, b, r->sorted[i - 1]->line), bad++;
		else if (!strncmp(a, b, la) && b[la] == '/' && !r->sorted[i - 1]->e.is_dir)
			fprintf(stderr, "%s:%u: '%s' is a file in this manifest (line %u), not a directory\n",
				r->src, r->sorted[i]->line, a, r->sorted[i - 1]->line), bad++;
	}
	if (bad) {
		fprintf(stderr, "hsmfsctl: %zu bad line%s in '%s'; nothing imported\n", bad,
			bad == 1 ? "" : "s", r->src);
		rc = X_INPUT;
		goto out;
	}

	/* the store: locked when unmounted, so no daemon runs meanwhile */
	root = open(r->store, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		fprintf(stderr, "hsmfsctl: store '%s': %s\n", r->store, strerror(errno));
		rc = X_STORE;
		goto out;
	}
	snprintf(dbpath, sizeof(dbpath), "%s/.hsmfs", r->store);
	mkdir(dbpath, 0700);
	if (!r->mnt) {
		snprintf(dbpath, sizeof(dbpath), "%s/.hsmfs/lock", r->store);
		lockfd = open(dbpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
			fprintf(stderr, "hsmfsctl: store '%s' is mounted; %s with -m MOUNTPOINT\n",
				r->store, r->sync ? "refresh through the mount" : "import");
			rc = X_STORE;
			goto out;
		}
	}
	snprintf(dbpath, sizeof(dbpath), "%s/.hsmfs/meta.db", r->store);
	/* a store no daemon served yet: its first mount is not after a crash */
	fresh = !r->mnt && access(dbpath, F_OK) < 0 && errno == ENOENT;
	if (meta_open(dbpath, &m)) {
		fprintf(stderr, "hsmfsctl: cannot open '%s': %s\n", dbpath, meta_errmsg(m));
		rc = X_STORE;
		goto out;
	}
	if (r->sync && sync_prune(r, root, m)) {
		rc = X_PARTIAL;
		goto out;
	}

	/* apply in batches, each one transaction; a failed batch is undone */
	for (i = 0; i < n; i += BATCH) {
		size_t end = i + BATCH < n ? i + BATCH : n, j;
		bool created[BATCH], changed[BATCH], made[BATCH];
		int res = meta_begin(m);

		for (j = i; !res && j < end; j++) {
			enum keep k = r->sync ? sync_keep(r, root, m, &items[j]) : K_APPLY;

			tty_progress(false, "%s: %zu / %zu files", r->sync ? "refresh" : "import", j, n);
			enum place_outcome o = PLACE_SAME;

			created[j - i] = false;
			if (k == K_APPLY)
				res = import_one(root, r->mnt, m, &items[j], &created[j - i], &o,
						 err, sizeof(err));
			if (res) {
				tty_progress_end();
				fprintf(stderr, "%s:%u: %s\n", r->src, items[j].line, err);
				break;
			}
			r->nnew += k == K_APPLY && o == PLACE_NEW;
			r->nchanged += k == K_APPLY && o == PLACE_CHANGED;
			r->nsame += k == K_SAME || (k == K_APPLY && o == PLACE_SAME);
			changed[j - i] = k == K_APPLY && o == PLACE_CHANGED && !items[j].e.is_dir;
			made[j - i] = k == K_APPLY && o == PLACE_NEW;
		}
		if (!res)
			res = meta_commit(m);
		if (res) {
			meta_rollback(m);
			for (size_t k = i; k < j || (k == j && k < end && created[k - i]); k++)
				if (created[k - i])
					remove_path(root, items[k].e.path, items[k].e.is_dir);
			/* names a look meanwhile may have cached: asked again */
			if (r->mnt)
				reload(r->mnt, NULL);
			fprintf(stderr, "hsmfsctl: import stopped; lines %u to %u were not imported\n",
				items[i].line, items[n - 1].line);
			rc = i || r->nremoved ? X_PARTIAL : X_INPUT;
			goto out;
		}
		/* a live mount re-reads the state of changed files and drops their cache */
		for (j = i; r->mnt && j < end; j++)
			if (changed[j - i] && reload(r->mnt, items[j].e.path))
				rc = X_PARTIAL;
		/*
		 * and drops what its kernel holds of the directories that
		 * gained names (their listings, and names it knew missing)
		 */
		if (r->mnt && reload_made(r->mnt, items + i, made, end - i))
			rc = X_PARTIAL;
	}
	tty_progress_end();
	/* directories imported unlisted: the live mount lists them on first look */
	for (i = 0; r->mnt && i < n; i++)
		if (items[i].e.is_dir) {
			reload(r->mnt, NULL);
			break;
		}
	if (atomic_load(&place_unmarked))
		fprintf(stderr, "hsmfsctl: warning: cannot mark placeholders in the store (%s); "
			"a lost database could not be rebuilt\n",
			strerror(atomic_load(&place_unmarked)));
	if (fresh) {
		/* the mark a clean unmount leaves (fs/check.h) */
		snprintf(dbpath, sizeof(dbpath), "%s/.hsmfs/clean", r->store);
		int cfd = open(dbpath, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);

		if (cfd >= 0) {
			fsync(cfd);
			close(cfd);
		}
	}
out:
	free(r->sorted);
	r->sorted = NULL;
	meta_close(m);
	if (root >= 0)
		close(root);
	if (lockfd >= 0)
		close(lockfd);
	return rc;
}

/*
 * Collect the listing at url (so: its options) below only (shallow:
 * directly in it): 0 or -errno (said why).  *items etc. as
 * collect_listing().
 */
static int collect(const char *url, const struct s3opts *so, const char *only, bool shallow,
		   struct item **items, size_t *n, size_t *cap)
{
	return so->s3 ? collect_s3(url, so, only, shallow, items, n, cap) :
			collect_listing(url, only, shallow, items, n, cap);
}

static void items_free(struct item *items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		manifest_entry_free(&items[i].e);
	free(items);
}

static int cmd_import(int argc, char **argv)
{
	const char *store = NULL, *mnt = NULL, *file = NULL, *listing = NULL;
	struct s3opts so = { .page = 1000 };
	char store_buf[PATH_MAX], err[512], *base = NULL;
	struct item *items = NULL;
	size_t n = 0, cap = 0;
	unsigned lineno = 0, bad = 0;
	struct import_run r = { 0 };
	char *line = NULL;
	size_t linecap = 0;
	ssize_t len;
	FILE *f;
	int rc = X_OK_;
	bool sync = false;

	for (int i2 = 1; i2 < argc; i2++) {
		if (!strcmp(argv[i2], "-s") && i2 + 1 < argc)
			store = argv[++i2];
		else if (!strcmp(argv[i2], "-m") && i2 + 1 < argc)
			mnt = argv[++i2];
		else if (!strcmp(argv[i2], "--listing") && i2 + 1 < argc)
			listing = argv[++i2];
		else if (!strcmp(argv[i2], "--sync"))
			sync = true;
		else if (!strcmp(argv[i2], "--s3"))
			so.s3 = true;
		else if (!strcmp(argv[i2], "--aws-sigv4") && i2 + 1 < argc)
			so.sigv4 = argv[++i2];
		else if (!strcmp(argv[i2], "--aws-keys-file") && i2 + 1 < argc)
			so.keys_file = argv[++i2];
		else if (!strcmp(argv[i2], "--page-size") && i2 + 1 < argc)
			so.page = atoi(argv[++i2]) > 0 ? atoi(argv[i2]) : 1000;
		else if (!file && (argv[i2][0] != '-' || !strcmp(argv[i2], "-")))
			file = argv[i2];
		else {
			fprintf(stderr, "hsmfsctl: import: unexpected argument '%s'\n", argv[i2]);
			return X_USAGE;
		}
	}
	if (!file == !listing || !!store == !!mnt) {
		fprintf(stderr, "hsmfsctl: import needs a manifest or --listing URL, and one of -s STORE or -m MOUNTPOINT\n");
		return X_USAGE;
	}
	if (sync && !listing) {
		fprintf(stderr, "hsmfsctl: import --sync needs --listing URL (what a manifest "
			"no longer names is not known to be gone)\n");
		return X_USAGE;
	}
	if (mnt) {
		ssize_t sn = getxattr(mnt, "user.hsmfs.store", store_buf, sizeof(store_buf) - 1);

		if (sn < 0) {
			fprintf(stderr, "hsmfsctl: '%s' is not an hsmfs mount: %s\n", mnt,
				strerror(errno));
			return X_STORE;
		}
		store_buf[sn] = '\0';
		store = store_buf;
	}

	/* 1. read and check everything; nothing is written unless all is good */
	if (listing) {
		file = listing;
		if (collect(listing, &so, NULL, false, &items, &n, &cap)) {
			tty_progress_end();
			fprintf(stderr, "hsmfsctl: nothing imported\n");
			rc = X_INPUT;
			goto out;
		}
		goto apply;
	}
	f = strcmp(file, "-") ? fopen(file, "r") : stdin;
	if (!f) {
		fprintf(stderr, "hsmfsctl: manifest '%s': %s\n", file, strerror(errno));
		return X_INPUT;
	}
	while ((len = getline(&line, &linecap, f)) >= 0) {
		lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			len--;
		if (!len || line[strspn(line, " \t")] == '\n')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			items = realloc(items, cap * sizeof(*items));
			if (!items) {
				fprintf(stderr, "hsmfsctl: out of memory\n");
				return X_STORE;
			}
		}
		if (manifest_parse_line(line, len, &items[n].e, err, sizeof(err))) {
			fprintf(stderr, "%s:%u: %s\n", file, lineno, err);
			bad++;
			continue;
		}
		items[n++].line = lineno;
	}
	free(line);
	if (f != stdin)
		fclose(f);
	if (bad) {
		fprintf(stderr, "hsmfsctl: %u bad line%s in '%s'; nothing imported\n", bad,
			bad == 1 ? "" : "s", file);
		rc = X_INPUT;
		goto out;
	}
apply:
	if (sync && asprintf(&base, "%s%s", listing,
			     listing[strlen(listing) - 1] == '/' ? "" : "/") < 0) {
		rc = X_STORE;
		goto out;
	}
	r = (struct import_run){ .store = store, .mnt = mnt, .src = file, .items = items, .n = n,
				 .sync = sync, .base = base, .sub = "" };
	rc = import_apply(&r);
	if (rc == X_INPUT || rc == X_STORE)
		goto out;
	if (sync)
		printf("imported %zu file%s: %zu new, %zu changed, %zu unchanged, %zu removed, "
		       "%zu kept\n", n, n == 1 ? "" : "s", r.nnew, r.nchanged, r.nsame,
		       r.nremoved, r.nkept);
	else
		printf("imported %zu file%s: %zu new, %zu changed, %zu unchanged\n", n,
		       n == 1 ? "" : "s", r.nnew, r.nchanged, r.nsame);
	/* what refresh lists again */
	if (listing && rc == X_OK_)
		listing_record(store, listing, &so);
out:
	items_free(items, n);
	free(base);
	return rc;
}

/* ------------------------------------------------------------- status */

static void human(char *buf, size_t n, long long v);

struct totals {
	unsigned long long files, size, present;
};

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static ssize_t xattr(const char *p, const char *name, char *buf, size_t size)
{
	ssize_t n = lgetxattr(p, name, buf, size - 1);

	buf[n > 0 ? n : 0] = '\0';
	return n;
}

/* Times status_file() reads a file's state and bytes again while they move. */
#define STATUS_TRIES 8

static int status_file(const char *p, const struct stat *st, bool json,
		       struct totals *t, bool *first)
{
	char state[64], again[64], present[32], origin[4200], filling[64], aerr[128];
	unsigned long long pr, done = 0, bytes = 0;
	const char *arch;
	bool fetching;

	/*
	 * The state and the bytes present, as one: read the state again
	 * after the bytes, until it did not move between (a fill committed
	 * between the two showed "placeholder" with bytes present)
	 */
	for (int tries = 0;; tries++) {
		if (xattr(p, "user.hsmfs.state", state, sizeof(state)) < 0) {
			fprintf(stderr, "hsmfsctl: '%s' is not on an hsmfs mount: %s\n", p,
				strerror(errno));
			return -1;
		}
		xattr(p, "user.hsmfs.present", present, sizeof(present));
		if (tries == STATUS_TRIES || xattr(p, "user.hsmfs.state", again, sizeof(again)) < 0 ||
		    !strcmp(state, again))
			break;
	}
	if (xattr(p, "user.hsmfs.origin", origin, sizeof(origin)) < 0)
		origin[0] = '\0';
	/* fills under way: "DONE BYTES", as far as the hook has reported */
	fetching = xattr(p, "user.hsmfs.filling", filling, sizeof(filling)) > 0 &&
		   sscanf(filling, "%llu %llu", &done, &bytes) == 2;
	pr = strtoull(present, NULL, 10);
	/* the archive's side of the state (hsmfs(8), ARCHIVE) */
	arch = strstr(state, "conflict") ? "conflict" : strstr(state, "archiving") ? "archiving" :
	       strstr(state, "new") ? "new" : !strncmp(state, "dirty", 5) ? "dirty" :
	       origin[0] ? "clean" : "";
	if (xattr(p, "user.hsmfs.archive_error", aerr, sizeof(aerr)) < 0)
		aerr[0] = '\0';
	t->files++;
	t->size += st->st_size;
	t->present += pr;
	if (json) {
		printf("%s\n  {\"path\": ", *first ? "" : ",");
		json_str(p);
		printf(", \"size\": %lld, \"present\": %llu, \"state\": ",
		       (long long)st->st_size, pr);
		json_str(state);
		printf(", \"origin\": ");
		json_str(origin);
		if (arch[0]) {
			printf(", \"archive\": ");
			json_str(arch);
		}
		if (aerr[0]) {
			printf(", \"archive_error\": ");
			json_str(aerr);
		}
		if (fetching)
			printf(", \"fetching\": {\"done\": %llu, \"bytes\": %llu}", done, bytes);
		printf("}");
	} else {
		char a[32], b[32];

		printf("%-20s %14llu %14lld %5.1f%%  %s", state, pr, (long long)st->st_size,
		       st->st_size ? 100.0 * pr / st->st_size : 100.0, p);
		if (fetching) {
			human(a, sizeof(a), (long long)done);
			human(b, sizeof(b), (long long)bytes);
			printf("  (fetching: %s of %s)", a, b);
		}
		if (aerr[0] && strcmp(arch, "clean"))
			printf("  (archive failed: %s)", aerr);
		putchar('\n');
	}
	*first = false;
	return 0;
}

static int status_walk(const char *p, bool json, struct totals *t, bool *first)
{
	struct stat st;
	DIR *d;
	struct dirent *de;
	int res = 0;

	if (lstat(p, &st) < 0) {
		fprintf(stderr, "hsmfsctl: '%s': %s\n", p, strerror(errno));
		return -1;
	}
	if (S_ISREG(st.st_mode))
		return status_file(p, &st, json, t, first);
	if (!S_ISDIR(st.st_mode))
		return 0;
	{
		char state[64];

		/* a directory not listed yet: looking in would list it */
		if (xattr(p, "user.hsmfs.state", state, sizeof(state)) > 0 &&
		    !strcmp(state, "unlisted")) {
			if (!json)
				printf("%-20s %14s %14s %6s  %s/\n", "unlisted", "-", "-", "", p);
			return 0;
		}
		/* listed from a page's links (hsmfs-http(1)): some names may be missing */
		if (!json && strstr(state, ",partial"))
			printf("%-20s %14s %14s %6s  %s/\n", "listed,partial", "-", "-", "", p);
	}
	d = opendir(p);
	if (!d) {
		fprintf(stderr, "hsmfsctl: '%s': %s\n", p, strerror(errno));
		return -1;
	}
	while ((de = readdir(d))) {
		char child[PATH_MAX];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(child, sizeof(child), "%s/%s", p, de->d_name);
		if (status_walk(child, json, t, first))
			res = -1;
	}
	closedir(d);
	return res;
}

static int cmd_status(int argc, char **argv)
{
	struct totals t = { 0 };
	bool json = false, first = true;
	int i, npaths = 0, res = 0;

	if (argc == 3 && !strcmp(argv[1], "-s"))
		return cmd_status_store(argv[2]);
	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--json"))
			json = true;
		else
			npaths++;
	if (!npaths) {
		fprintf(stderr, "hsmfsctl: status needs at least one PATH\n");
		return X_USAGE;
	}
	/* each PATH on a mount, before any table: none is news of a mount */
	for (i = 1; i < argc; i++) {
		char state[64];
		struct stat st;

		/* a link or a device has no state to show, on a mount or not */
		if (!strcmp(argv[i], "--json") ||
		    (!lstat(argv[i], &st) && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) ||
		    xattr(argv[i], "user.hsmfs.state", state, sizeof(state)) >= 0)
			continue;
		if (errno == ENODATA || errno == ENOTSUP)
			fprintf(stderr, "hsmfsctl: '%s' is not on an hsmfs mount\n", argv[i]);
		else
			fprintf(stderr, "hsmfsctl: '%s': %s\n", argv[i], strerror(errno));
		return X_STORE;
	}
	if (json)
		printf("{\"files\": [");
	else
		printf("%-20s %14s %14s %6s  %s\n", "STATE", "PRESENT", "SIZE", "", "PATH");
	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], "--json") && status_walk(argv[i], json, &t, &first))
			res = X_STORE;
	if (json)
		printf("\n], \"total\": {\"files\": %llu, \"size\": %llu, \"present\": %llu}}\n",
		       t.files, t.size, t.present);
	else
		printf("%-20s %14llu %14llu %5.1f%%  %llu file%s\n", "total", t.present, t.size,
		       t.size ? 100.0 * t.present / t.size : 100.0, t.files,
		       t.files == 1 ? "" : "s");
	return res;
}

/* ----------------------------------------- evict, pin, unpin, prefetch */

struct act {
	const char *what;          /* evict, pin, unpin, prefetch */
	const char *range;         /* evict: "A-B" or NULL */
	bool tty;                  /* progress bar on stderr */
	unsigned long long total, done, files, skipped, failed;
	double started, shown;
	/*
	 * The ETA: each fetched file's seconds t against its bytes s, fitted
	 * as t = per_file + s * per_byte (least squares), so that many small
	 * files (their cost is per file) and a few large ones (per byte)
	 * are both foreseen; the rest is shared by the jobs.
	 */
	double fit_n, fit_s, fit_t, fit_ss, fit_st;
	unsigned long long fit_bytes;   /* bytes of the files fitted */
	/* prefetch and pin: the files, fetched by jobs threads */
	pthread_mutex_t lock;      /* the counters and the output */
	char **paths;
	off_t *sizes;
	size_t n, cap, next;
	unsigned jobs;
};

/* A file of s bytes took t seconds to fetch.  a->lock held. */
static void fitted(struct act *a, double s, double t)
{
	a->fit_n++;
	a->fit_s += s;
	a->fit_t += t;
	a->fit_ss += s * s;
	a->fit_st += s * t;
	a->fit_bytes += (unsigned long long)s;
}

/* Seconds left: the fit over the files fetched, else the byte rate. */
static double eta(const struct act *a, double elapsed)
{
	double n = a->fit_n, per_byte = 0, per_file, var = n * a->fit_ss - a->fit_s * a->fit_s;
	double files_left = (double)a->n - n, bytes_left = (double)(a->total - a->fit_bytes);

	if (n < 2)
		return a->done && a->total > a->done ?
			       (a->total - a->done) * elapsed / a->done : 0;
	if (var > 0)
		per_byte = (n * a->fit_st - a->fit_s * a->fit_t) / var;
	if (per_byte < 0)
		per_byte = 0;
	per_file = (a->fit_t - per_byte * a->fit_s) / n;
	if (per_file < 0)
		per_file = 0;
	if (files_left < 0)
		files_left = 0;
	if (bytes_left < 0)
		bytes_left = 0;
	return (files_left * per_file + bytes_left * per_byte) / (a->jobs ? a->jobs : 1);
}

/* The progress line, at most ten times a second.  a->lock held. */
static void progress(struct act *a, const char *p, bool end)
{
	double now = mono_s(), t = now - a->started, rate = t > 0 ? a->done / t : 0;

	if (!a->tty || (!end && now - a->shown < 0.1))
		return;
	a->shown = now;
	fprintf(stderr, "\r%-40.40s %6llu / %zu files %8.1f / %.1f MiB  %6.1f MiB/s  ETA %4.0fs%s",
		p, (unsigned long long)a->fit_n, a->n, a->done / 1048576.0,
		a->total / 1048576.0, rate / 1048576.0, end ? 0.0 : eta(a, t), end ? "\n" : "");
}

static int fetch_all(struct act *a, const char *p, const struct stat *st)
{
	enum { BUF = 1 << 20 };
	/* the call's own, no larger than the file: jobs read at once (the bytes are thrown away) */
	size_t len = st->st_size < BUF ? (size_t)st->st_size : BUF;
	off_t off = 0;
	char *buf;
	int fd = open(p, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	buf = malloc(len ? len : 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (off < st->st_size) {
		ssize_t n = pread(fd, buf, len, off);

		if (n <= 0) {
			int e = n < 0 ? errno : EIO;

			free(buf);
			close(fd);
			return -e;
		}
		off += n;
		pthread_mutex_lock(&a->lock);
		a->done += n;
		progress(a, p, false);
		pthread_mutex_unlock(&a->lock);
	}
	free(buf);
	close(fd);
	return 0;
}

/*
 * A file was read whole: where its manifest gave a sha256 the daemon
 * checks it before it calls the file resident (until then "partial").
 * Wait for its word: 0, or -EBADMSG when the file came out stale.
 */
static int verified(const char *p)
{
	char v[128];

	for (int i = 0; i < 6000; i++) { /* 2 minutes for a large file */
		ssize_t n = lgetxattr(p, "user.hsmfs.state", v, sizeof(v) - 1);

		if (n < 0)
			return errno == ENODATA ? 0 : -errno;
		v[n] = '\0';
		if (strstr(v, "stale"))
			return -EBADMSG;
		if (strncmp(v, "partial", 7))
			return 0;
		usleep(20000);
	}
	return -ETIMEDOUT;
}

/* Why the daemon refused to evict p (EBUSY), from its state. */
static const char *busy_why(const char *p)
{
	char v[128];
	ssize_t n = lgetxattr(p, "user.hsmfs.state", v, sizeof(v) - 1);

	if (n < 0)
		return "dirty, pinned, open or being filled";
	v[n] = '\0';
	if (!strncmp(v, "dirty", 5))
		return "dirty: changed through the mount, its bytes are the only copy";
	if (strstr(v, "pinned"))
		return "pinned (hsmfsctl unpin first)";
	if (strstr(v, "passthrough"))
		return "open in passthrough mode";
	return "open or being filled";
}

static int act_file(struct act *a, const char *p, const struct stat *st)
{
	int res = 0;

	pthread_mutex_lock(&a->lock);
	a->files++;
	pthread_mutex_unlock(&a->lock);
	if (!strcmp(a->what, "evict")) {
		const char *v = a->range ? a->range : "";

		if (lsetxattr(p, "user.hsmfs.evict", v, strlen(v), 0) < 0)
			res = -errno;
	} else if (!strcmp(a->what, "unpin")) {
		if (lsetxattr(p, "user.hsmfs.unpin", "1", 1, 0) < 0)
			res = -errno;
	} else {
		if (!strcmp(a->what, "pin") && lsetxattr(p, "user.hsmfs.pin", "1", 1, 0) < 0)
			res = -errno;
		double t0 = mono_s();

		if (!res)
			res = fetch_all(a, p, st);
		if (!res) {
			pthread_mutex_lock(&a->lock);
			fitted(a, (double)st->st_size, mono_s() - t0);
			pthread_mutex_unlock(&a->lock);
			res = verified(p);
		} else if (res == -EIO) {
			/* a fill that would complete it with the wrong digest fails */
			char v[128];
			ssize_t n = lgetxattr(p, "user.hsmfs.state", v, sizeof(v) - 1);

			if (n > 0 && memmem(v, (size_t)n, "stale", 5))
				res = -EBADMSG;
		}
		if (!res && !a->tty) {
			pthread_mutex_lock(&a->lock);
			printf("%s %s (%lld bytes)\n", !strcmp(a->what, "pin") ? "pinned" :
			       "prefetched", p, (long long)st->st_size);
			pthread_mutex_unlock(&a->lock);
		}
	}
	pthread_mutex_lock(&a->lock);
	if (res == -ENODATA) {
		a->skipped++; /* not managed by hsmfs: nothing to do */
		res = 0;
	} else if (res) {
		a->failed++;
		fprintf(stderr, "%shsmfsctl: %s '%s': %s\n", a->tty ? "\n" : "", a->what, p,
			res == -EBUSY ? busy_why(p) :
			res == -EBADMSG ? "its bytes do not match the manifest's sha256: stale" :
			strerror(-res));
	}
	pthread_mutex_unlock(&a->lock);
	return res;
}

static int walk_files(struct act *a, const char *p, bool list_only)
{
	struct stat st;
	struct dirent *de;
	DIR *d;

	if (lstat(p, &st) < 0) {
		fprintf(stderr, "hsmfsctl: '%s': %s\n", p, strerror(errno));
		a->failed++;
		return -1;
	}
	if (S_ISREG(st.st_mode)) {
		if (list_only) {
			/* fetching: list the files for the jobs */
			if (a->n == a->cap) {
				size_t cap = a->cap ? 2 * a->cap : 256;
				char **np = realloc(a->paths, cap * sizeof(*np));
				off_t *ns = np ? realloc(a->sizes, cap * sizeof(*ns)) : NULL;

				if (np)
					a->paths = np;
				if (!ns) {
					fprintf(stderr, "hsmfsctl: out of memory\n");
					a->failed++;
					return -1;
				}
				a->sizes = ns;
				a->cap = cap;
			}
			a->paths[a->n] = strdup(p);
			if (!a->paths[a->n]) {
				a->failed++;
				return -1;
			}
			a->sizes[a->n++] = st.st_size;
			a->total += st.st_size;
		} else {
			act_file(a, p, &st);
		}
		return 0;
	}
	if (!S_ISDIR(st.st_mode) || !(d = opendir(p)))
		return 0;
	while ((de = readdir(d))) {
		char child[PATH_MAX];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(child, sizeof(child), "%s/%s", p, de->d_name);
		walk_files(a, child, list_only);
	}
	closedir(d);
	return 0;
}

/* A prefetch job: fetch files from the shared list until none is left. */
static void *fetch_job(void *arg)
{
	struct act *a = arg;

	for (;;) {
		struct stat st = { .st_mode = S_IFREG };
		size_t i;

		pthread_mutex_lock(&a->lock);
		i = a->next < a->n ? a->next++ : a->n;
		pthread_mutex_unlock(&a->lock);
		if (i == a->n)
			return NULL;
		st.st_size = a->sizes[i];
		act_file(a, a->paths[i], &st);
	}
}

static void fetch_listed(struct act *a)
{
	pthread_t t[64];
	unsigned n = 0;

	while (n < a->jobs - 1 && n < a->n && !pthread_create(&t[n], NULL, fetch_job, a))
		n++;
	fetch_job(a);
	while (n)
		pthread_join(t[--n], NULL);
	for (size_t i = 0; i < a->n; i++)
		free(a->paths[i]);
	free(a->paths);
	free(a->sizes);
}

static int cmd_act(const char *what, int argc, char **argv)
{
	struct act a = { .what = what, .tty = isatty(STDERR_FILENO), .started = mono_s(),
			 .lock = PTHREAD_MUTEX_INITIALIZER, .jobs = 4 };
	bool fetching = !strcmp(what, "prefetch") || !strcmp(what, "pin");
	int i, npaths = 0;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--range") && i + 1 < argc && !strcmp(what, "evict")) {
			a.range = argv[++i];
		} else if (!strcmp(argv[i], "--jobs") && i + 1 < argc && fetching) {
			char *end;
			unsigned long j = strtoul(argv[++i], &end, 10);

			if (*end || !j || j > 64) {
				fprintf(stderr, "hsmfsctl: --jobs needs a number from 1 to 64\n");
				return X_USAGE;
			}
			a.jobs = (unsigned)j;
			argv[i - 1] = argv[i] = NULL; /* not paths */
		} else {
			npaths++;
		}
	}
	if (!npaths) {
		fprintf(stderr, "hsmfsctl: %s needs at least one PATH\n", what);
		return X_USAGE;
	}
	for (i = 1; i < argc; i++) {
		if (!argv[i])
			continue;
		if (!strcmp(argv[i], "--range")) {
			i++;
			continue;
		}
		walk_files(&a, argv[i], fetching);
	}
	if (fetching)
		fetch_listed(&a);
	if (a.total)
		progress(&a, "done", true);
	printf("%s: %llu file%s, %llu not managed by hsmfs, %llu failed\n", what, a.files,
	       a.files == 1 ? "" : "s", a.skipped, a.failed);
	return a.failed ? X_PARTIAL : 0;
}

/* -------------------------------------------------------------- hooks */

/* A user.hsmfs.* attribute of the mount's root, NUL-terminated: its length, or -1 (said why). */
static ssize_t mount_xattr(const char *mnt, const char *name, char *buf, size_t size)
{
	ssize_t n = getxattr(mnt, name, buf, size - 1);

	if (n < 0) {
		fprintf(stderr, "hsmfsctl: '%s' is not an hsmfs mount: %s\n", mnt, strerror(errno));
		return -1;
	}
	buf[n] = '\0';
	return n;
}

/*
 * One line of user.hsmfs.hooks: name, pid, kind, events, pending,
 * answered, denied, timed out, latency p50 and p99 (microseconds),
 * subtree.
 */
#define HOOK_FIELDS 11
struct hook_line {
	const char *name, *pid, *kind, *events, *pending, *answered, *denied, *timeouts,
		*p50_us, *p99_us, *subtree;
};

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
static int hooks_split(char *buf, struct hook_line **ret_lines)
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
static int cmd_hooks(int argc, char **argv)
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
		ssize_t said = getxattr(mnt, "user.hsmfs.hook_said", buf, sizeof(buf) - 1);

		if (said > 0) {
			buf[said] = '\0';
			printf("hook= last said: %s\n", buf);
		}
	}
	return 0;
}

/* -------------------------------------------------------------- stats */

/* The number after "key": in the daemon's flat JSON object, or -1. */
static long long json_num(const char *obj, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(obj, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

static void human(char *buf, size_t n, long long v)
{
	const char *u = "KMGTP";
	double d = (double)v;
	int i = -1;

	while (d >= 1024 && i < 4) {
		d /= 1024;
		i++;
	}
	if (i < 0)
		snprintf(buf, n, "%lld B", v);
	else
		snprintf(buf, n, "%.1f %ciB", d, u[i]);
}

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
 * hsmfsctl stats --prometheus [--textfile DIR] of the mount mnt, whose
 * user.hsmfs.stats is stats: the counters and the hooks' queues in
 * Prometheus' text format (prom.h), labelled with the mount's real path,
 * on standard output or into DIR (textfile_write()).  Returns an exit
 * code.
 */
/*
 * The counters the mount's hooks sent (user.hsmfs.hook_stats: "NAME\tPID\t
 * COUNTER VALUE" a line), NUL-terminated in buf; "" from a daemon that
 * has none or does not know the attribute.
 */
static void hook_counters(const char *mnt, char *buf, size_t size)
{
	ssize_t n = getxattr(mnt, "user.hsmfs.hook_stats", buf, size - 1);

	buf[n > 0 ? n : 0] = '\0';
}

/*
 * The next counter line of those at l that has the form, split into *c:
 * where the line after it starts, or NULL when none is left.
 */
static const char *counter_next(const char *l, struct prom_counter *c)
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
static int cmd_stats(int argc, char **argv)
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

/* ------------------------------------------------------------ restart */

/*
 * The serving daemon hands over to the hsmfs binary installed now: the
 * mount, its open files and its users stay (hsmfs(8), RESTARTS).  Waits
 * for the new daemon's first answer and says how long the mount paused.
 */
/* How many hooks are connected to the mount mnt (0 if it cannot say). */
static int hooks_connected(const char *mnt)
{
	static char buf[1 << 20];
	ssize_t n = getxattr(mnt, "user.hsmfs.hooks", buf, sizeof(buf) - 1);
	int lines = 0;

	for (ssize_t i = 0; i < n; i++)
		lines += buf[i] == '\n';
	return lines;
}

static int cmd_restart(int argc, char **argv)
{
	char buf[4096];
	long long before, after = -1;
	int nhooks;
	ssize_t n;

	if (argc != 2) {
		fprintf(stderr, "hsmfsctl: restart needs one MOUNTPOINT\n");
		return X_USAGE;
	}
	if (mount_xattr(argv[1], "user.hsmfs.stats", buf, sizeof(buf)) < 0)
		return X_STORE;
	before = json_num(buf, "restarts");
	nhooks = hooks_connected(argv[1]);
	n = getxattr(argv[1], "user.hsmfs.restart", buf, sizeof(buf) - 1);
	if (n < 0) {
		fprintf(stderr, "hsmfsctl: cannot restart '%s': %s\n", argv[1],
			errno == EOPNOTSUPP ? "it was mounted with -o norestart" :
			errno == ENODATA ? "not the mount's root" : strerror(errno));
		return X_STORE;
	}
	/* each look waits in the kernel until a daemon serves it */
	for (int i = 0; i < 600; i++) {
		if (mount_xattr(argv[1], "user.hsmfs.stats", buf, sizeof(buf)) < 0)
			return X_STORE;
		after = json_num(buf, "restarts");
		if (after > before)
			break;
		nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	}
	if (after <= before) {
		fprintf(stderr, "hsmfsctl: '%s': no new daemon within 30 s\n", argv[1]);
		return X_STORE;
	}
	/*
	 * done once the mount is as it was: its hooks back (a hook starting
	 * up looks at the mountpoint, and an unmount then would be refused)
	 */
	for (int i = 0; i < 200 && hooks_connected(argv[1]) < nhooks; i++)
		nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	printf("restarted: the mount paused %lld ms\n", json_num(buf, "restart_pause_ms"));
	return 0;
}

/* -------------------------------------------------------------- watch */

/* ------------------------------------------------------------ refresh */

/*
 * One directory: 1 listed again (descend), 0 not listed yet (its first
 * look lists it: nothing below it to refresh), -1 failed (said why).
 */
static int refresh_one(const char *path)
{
	char val[64];
	ssize_t n = getxattr(path, "user.hsmfs.refresh", val, sizeof(val) - 1);

	if (n < 0 && errno == ENODATA)
		return 1; /* not from an origin (made through the mount): below it may be */
	if (n < 0) {
		fprintf(stderr, "hsmfsctl: refresh '%s': %s\n", path,
			errno == EOPNOTSUPP || errno == ENOTSUP ? "not an hsmfs mount" :
								 strerror(errno));
		return -1;
	}
	val[n] = '\0';
	return strcmp(val, "unlisted") ? 1 : 0;
}

/* A name of a directory as a refresh found it, for the summary. */
struct dirent_seen {
	char *name;
	bool dir;
	uint64_t size;
	int64_t mtime;
};

static int cmp_seen(const void *a, const void *b)
{
	return strcmp(((const struct dirent_seen *)a)->name, ((const struct dirent_seen *)b)->name);
}

static void seen_free(struct dirent_seen *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
}

/* The names of the listed directory path, sorted; NULL and 0 if it cannot be read. */
static struct dirent_seen *seen_of(const char *path, size_t *ret_n)
{
	struct dirent_seen *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d = opendir(path);

	*ret_n = 0;
	if (!d)
		return NULL;
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (n == cap) {
			struct dirent_seen *more = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v));

			if (!more)
				break;
			v = more;
		}
		v[n] = (struct dirent_seen){ strdup(de->d_name), S_ISDIR(st.st_mode),
					     (uint64_t)st.st_size, st.st_mtim.tv_sec };
		if (v[n].name)
			n++;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmp_seen);
	*ret_n = n;
	return v;
}

/* What a refresh of the lazy directories did, for its summary line. */
static struct {
	unsigned dirs;
	size_t nnew, nremoved, nchanged;
} lazy;

/* Count the difference between a directory's names before and after. */
static void seen_diff(const struct dirent_seen *a, size_t na, const struct dirent_seen *b,
		      size_t nb)
{
	size_t i = 0, j = 0;

	while (i < na || j < nb) {
		int c = i == na ? 1 : j == nb ? -1 : strcmp(a[i].name, b[j].name);

		if (c < 0) {
			lazy.nremoved++;
			i++;
		} else if (c > 0) {
			lazy.nnew++;
			j++;
		} else {
			lazy.nchanged += a[i].dir != b[j].dir ||
					 (!a[i].dir && (a[i].size != b[j].size ||
							a[i].mtime != b[j].mtime));
			i++;
			j++;
		}
	}
}

/* Is path a directory not listed yet (whose first look would list it)? */
static bool unlisted_dir(const char *path)
{
	char val[32];
	ssize_t n = getxattr(path, "user.hsmfs.state", val, sizeof(val) - 1);

	return n == 8 && !memcmp(val, "unlisted", 8);
}

static int refresh_tree(const char *path, bool recursive, int depth)
{
	struct dirent_seen *before = NULL, *after;
	size_t nbefore = 0, nafter;
	int res, bad;
	struct dirent *de;
	DIR *d;

	/* its names before, unless reading them would list it the first time */
	if (!unlisted_dir(path))
		before = seen_of(path, &nbefore);
	res = refresh_one(path);
	bad = res < 0;
	if (res > 0 && before) {
		lazy.dirs++;
		after = seen_of(path, &nafter);
		seen_diff(before, nbefore, after, nafter);
		seen_free(after, nafter);
	} else if (res > 0) {
		lazy.dirs++; /* unlisted, names looked up: listed, then refreshed (not diffed) */
	}
	seen_free(before, nbefore);
	tty_progress(false, "refresh: %u directories listed again (%s)", lazy.dirs, path);
	if (res <= 0 || !recursive)
		return bad;
	if (depth > 4096 || !(d = opendir(path))) {
		fprintf(stderr, "hsmfsctl: refresh '%s': %s\n", path, strerror(errno));
		return 1;
	}
	while ((de = readdir(d))) {
		char sub[PATH_MAX];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= (int)sizeof(sub))
			continue;
		if (de->d_type == DT_DIR ||
		    (de->d_type == DT_UNKNOWN && !lstat(sub, &st) && S_ISDIR(st.st_mode)))
			bad |= refresh_tree(sub, true, depth + 1);
	}
	closedir(d);
	return bad;
}

/*
 * The hsmfs mount path is on: its root in ret_mnt (a real path), and
 * path's own path below it in ret_rel ("" or ending in '/').  0, or
 * -1: not on an hsmfs mount.
 */
int mount_of(const char *path, char *ret_mnt, size_t mlen, char *ret_rel, size_t rlen)
{
	char real[PATH_MAX], cur[PATH_MAX];
	const char *rel;

	if (!realpath(path, real))
		return -1;
	snprintf(cur, sizeof(cur), "%s", real);
	while (getxattr(cur, "user.hsmfs.store", NULL, 0) < 0) {
		char *sl = strrchr(cur, '/');

		if (!sl || !cur[1])
			return -1;
		sl[sl == cur] = '\0';
	}
	rel = real + strlen(cur);
	rel += *rel == '/';
	if ((size_t)snprintf(ret_mnt, mlen, "%s", cur) >= mlen ||
	    (size_t)snprintf(ret_rel, rlen, "%s%s", rel, rel[0] ? "/" : "") >= rlen)
		return -1;
	return 0;
}

/*
 * The imported trees below dir (a directory of a mount; or, with
 * store_opt, the whole unmounted store) follow their origin: each
 * listing the store recorded (import --listing) is listed again and
 * applied as import --sync applies it, below dir only (recursive: and
 * below its directories).  Says what it kept and why, then one line of
 * totals.  Nothing recorded: nothing to do, nothing said (but for a
 * store named).  Returns an exit code.
 */
static int refresh_imported(const char *dir, const char *store_opt, bool recursive)
{
	char mnt[PATH_MAX], sub[PATH_MAX] = "", store[PATH_MAX];
	struct listing_rec *recs = NULL;
	size_t nrec = 0, nnew = 0, nremoved = 0, nchanged = 0, nkept = 0;
	int rc = X_OK_, res;

	if (store_opt) {
		snprintf(store, sizeof(store), "%s", store_opt);
	} else {
		ssize_t sn;

		if (mount_of(dir, mnt, sizeof(mnt), sub, sizeof(sub)))
			return X_OK_; /* refresh_tree() said why */
		sn = getxattr(mnt, "user.hsmfs.store", store, sizeof(store) - 1);
		if (sn < 0)
			return X_OK_;
		store[sn] = '\0';
	}
	res = listing_recs_read(store, &recs, &nrec);
	if (res) {
		fprintf(stderr, "hsmfsctl: refresh '%s': cannot read the recorded listings: %s\n",
			dir, strerror(-res));
		return X_STORE;
	}
	if (!nrec && store_opt) {
		fprintf(stderr, "hsmfsctl: refresh: store '%s' has no listing recorded (import "
			"--listing records one)\n", store);
		return X_INPUT;
	}
	for (size_t i = 0; i < nrec; i++) {
		const char *url = recs[i].url;
		struct item *items = NULL;
		size_t n = 0, cap = 0;
		char *base = NULL;

		if (asprintf(&base, "%s%s", url, url[strlen(url) - 1] == '/' ? "" : "/") < 0) {
			rc = X_PARTIAL;
			break;
		}
		if (collect(url, &recs[i].so, sub, !recursive, &items, &n, &cap)) {
			fprintf(stderr, "hsmfsctl: refresh '%s': nothing changed from '%s'\n", dir,
				url);
			rc = X_PARTIAL;
		} else {
			struct import_run r = { .store = store, .mnt = store_opt ? NULL : mnt,
						.src = url, .items = items, .n = n, .sync = true,
						.base = base, .sub = sub, .shallow = !recursive };

			if (import_apply(&r))
				rc = rc == X_OK_ ? X_PARTIAL : rc;
			nnew += r.nnew;
			nremoved += r.nremoved;
			nchanged += r.nchanged;
			nkept += r.nkept;
		}
		items_free(items, n);
		free(base);
	}
	listing_recs_free(recs, nrec);
	if (nrec) {
		tty_progress_end();
		printf("refreshed %s: %zu new, %zu removed, %zu changed", dir, nnew, nremoved,
		       nchanged);
		if (nkept)
			printf(", %zu kept (the user's, above)", nkept);
		putchar('\n');
	}
	return rc;
}

static int cmd_refresh(int argc, char **argv)
{
	const char *store = NULL;
	bool recursive = false;
	int i, bad = 0, rc = X_OK_;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--recursive") || !strcmp(argv[i], "-r")) {
			recursive = true;
		} else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
			store = argv[++i];
		} else {
			fprintf(stderr, "hsmfsctl: refresh: unknown option '%s'\n", argv[i]);
			return X_USAGE;
		}
	}
	if (store) {
		if (i != argc) {
			fprintf(stderr, "hsmfsctl: refresh -s STORE takes no directory (the whole "
				"store is refreshed)\n");
			return X_USAGE;
		}
		return refresh_imported(store, store, true);
	}
	if (i == argc) {
		fprintf(stderr, "hsmfsctl: refresh needs a directory\n");
		return X_USAGE;
	}
	for (; i < argc; i++) {
		int r;

		lazy.dirs = 0;
		lazy.nnew = lazy.nremoved = lazy.nchanged = 0;
		bad |= refresh_tree(argv[i], recursive, 0);
		tty_progress_end();
		if (lazy.dirs)
			printf("refreshed %s: %u director%s listed again: %zu new, %zu removed, "
			       "%zu changed\n", argv[i], lazy.dirs, lazy.dirs == 1 ? "y" : "ies",
			       lazy.nnew, lazy.nremoved, lazy.nchanged);
		r = refresh_imported(argv[i], NULL, recursive);
		if (r != X_OK_ && rc == X_OK_)
			rc = r;
	}
	tty_progress_end();
	return rc != X_OK_ ? rc : bad ? X_PARTIAL : X_OK_;
}

static int cmd_watch(int argc, char **argv)
{
	struct hsmfs_hook *h;
	struct hsmfs_event ev;
	const char *mnt = NULL;
	bool json = false;
	int res;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--json"))
			json = true;
		else
			mnt = argv[i];
	if (!mnt) {
		fprintf(stderr, "hsmfsctl: watch needs a MOUNTPOINT\n");
		return X_USAGE;
	}
	res = hsmfs_hook_connect(mnt, HSMFS_KIND_WATCH, HSMFS_MASK_ALL, "hsmfsctl-watch",
				 NULL, &h);
	if (res) {
		fprintf(stderr, "hsmfsctl: cannot watch '%s': %s\n", mnt, strerror(-res));
		return X_STORE;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((res = hsmfs_hook_next(h, &ev)) == 0) {
		const char *type = proto_event_name(ev.type);

		if (ev.fd >= 0)
			close(ev.fd);
		if (ev.type == HSMFS_EV_CANCEL)
			continue;
		if (json) {
			printf("{\"id\": %llu, \"event\": \"%s\", \"pid\": %u, \"uid\": %u, "
			       "\"start\": %llu, \"end\": %llu, \"path\": ",
			       (unsigned long long)ev.id, type, ev.pid, ev.uid,
			       (unsigned long long)ev.start, (unsigned long long)ev.end);
			json_str(ev.path);
			printf("}\n");
		} else {
			printf("%s %s [%llu, %llu) pid %u uid %u\n", type, ev.path,
			       (unsigned long long)ev.start, (unsigned long long)ev.end,
			       ev.pid, ev.uid);
		}
		hsmfs_hook_allow(h, ev.id, 0, 0, 0);
	}
	hsmfs_hook_close(h);
	return res == -ECONNRESET ? 0 : X_STORE;
}

/* --------------------------------------------------------- set-origin */

struct rebase {
	int root;                  /* the store */
	const char *from, *to;
	size_t files, dirs, unmarked;
};

/*
 * One row moved to the new origin: its marker in the store (the URL a
 * lost database is rebuilt from) follows; the row itself is rewritten
 * by meta_rebase_origin() in the same transaction.
 */
static int rebase_one(void *arg, uint64_t ino, const char *path, uint32_t state,
		      const char *origin, const char *version)
{
	struct rebase *r = arg;
	bool dir = state == META_DIR_UNLISTED || state == META_DIR_LISTED;
	char url[8300];
	struct stat st;
	int fd, n;

	if (dir)
		r->dirs++;
	else
		r->files++;
	n = snprintf(url, sizeof(url), "%s%s", r->to, origin + strlen(r->from));
	if (!dir && n < (int)sizeof(url)) {
		/* a file's mark stays small (store.h): its URL only if it fits */
		char mark[STORE_MARKER_MAX + 1];

		n = (int)store_marker(mark, url, version);
		memcpy(url, mark, (size_t)n + 1);
	}
	if (!path || n >= (int)sizeof(url)) {
		r->unmarked++;
		return 0;
	}
	fd = path[0] ? openat(r->root, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
					     (dir ? O_DIRECTORY : 0)) :
		       dup(r->root);
	if (fd < 0 || fstat(fd, &st) || st.st_ino != ino) {
		r->unmarked++; /* moved: found by its ino at the next rebuild */
	} else if (state == META_DIR_UNLISTED) {
		if (fsetxattr(fd, STORE_UNLISTED_XATTR, url, (size_t)n, 0))
			r->unmarked++;
	} else if (!dir && fgetxattr(fd, STORE_MARKER_XATTR, NULL, 0) >= 0) {
		if (fsetxattr(fd, STORE_MARKER_XATTR, url, (size_t)n, 0))
			r->unmarked++;
	}
	if (fd >= 0)
		close(fd);
	return 0;
}

/*
 * hsmfsctl set-origin -s STORE FROM TO: the origin moved (another host,
 * another path).  Every file and directory whose URL begins with FROM
 * begins with TO instead: in the database, in the store's markers and
 * in the listings refresh takes.  The store must not be mounted.  The
 * bytes present stay; the versions recorded stay too, so a file the new
 * origin serves in another version is refused there (stale) until a
 * refresh takes it.
 */
static int cmd_set_origin(int argc, char **argv)
{
	struct rebase r = { .root = -1 };
	struct listing_rec *v = NULL;
	const char *store = NULL;
	char path[PATH_MAX + 64];
	struct meta *m = NULL;
	size_t nv = 0, moved = 0;
	int lockfd = -1, lockfd2, res, rc = X_OK_;

	if (argc == 5 && !strcmp(argv[1], "-s")) {
		store = argv[2];
		r.from = argv[3];
		r.to = argv[4];
	}
	if (!store || !r.from[0] || !r.to[0]) {
		fprintf(stderr, "hsmfsctl: set-origin needs -s STORE FROM TO\n");
		return X_USAGE;
	}
	r.root = open(store, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/%s/lock", store, STORE_STATE_DIR);
	if (r.root >= 0)
		lockfd = open(path, O_RDWR | O_CLOEXEC);
	if (r.root < 0 || lockfd < 0) {
		fprintf(stderr, "hsmfsctl: '%s' is not an hsmfs store: %s\n", store, strerror(errno));
		rc = X_STORE;
		goto out;
	}
	if (flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "hsmfsctl: store '%s' is mounted: unmount it first\n", store);
		rc = X_STORE;
		goto out;
	}
	snprintf(path, sizeof(path), "%s/%s/meta.db", store, STORE_STATE_DIR);
	res = meta_open(path, &m);
	if (!res)
		res = meta_begin(m);
	if (!res)
		res = meta_origins(m, r.from, rebase_one, &r);
	if (!res)
		res = meta_rebase_origin(m, r.from, r.to);
	if (!res)
		res = meta_commit(m);
	else if (m)
		meta_rollback(m);
	if (res) {
		fprintf(stderr, "hsmfsctl: set-origin '%s': %s\n", store, m ? meta_errmsg(m) :
			strerror(-res));
		rc = X_STORE;
		goto out;
	}
	/* the listings refresh takes again */
	lockfd2 = listings_lock(store);
	if (!listing_recs_read(store, &v, &nv)) {
		for (size_t i = 0; i < nv; i++) {
			char *u;

			if (strncmp(v[i].url, r.from, strlen(r.from)) ||
			    asprintf(&u, "%s%s", r.to, v[i].url + strlen(r.from)) < 0)
				continue;
			free(v[i].url);
			v[i].url = u;
			moved++;
		}
		if (moved && listing_recs_write(store, v, nv))
			fprintf(stderr, "hsmfsctl: warning: cannot rewrite the listings of '%s': "
				"refresh lists them from '%s'\n", store, r.from);
		listing_recs_free(v, nv);
	}
	if (lockfd2 >= 0)
		close(lockfd2);
	printf("set-origin: %zu file%s and %zu director%s now at %s%s", r.files,
	       r.files == 1 ? "" : "s", r.dirs, r.dirs == 1 ? "y" : "ies", r.to,
	       moved ? ", and the listings refresh takes" : "");
	if (r.unmarked)
		printf(" (%zu not found in the store by their path: marked at the next "
		       "rebuild)", r.unmarked);
	printf("\n");
out:
	meta_close(m);
	if (lockfd >= 0)
		close(lockfd);
	if (r.root >= 0)
		close(r.root);
	return rc;
}

/* ------------------------------------------------------------- doctor */

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
static int cmd_doctor(int argc, char **argv)
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
	n = getxattr(mnt, "user.hsmfs.stats", stats, sizeof(stats) - 1);
	if (n < 0) {
		finding(&d, "fail", "%s: %s", mnt, errno == ENOTCONN ?
			"the daemon is gone (unmount it: fusermount3 -u, and mount again)" :
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
	n = getxattr(mnt, "user.hsmfs.origin", origin, sizeof(origin) - 1);
	origin[n > 0 ? n : 0] = '\0';
	n = getxattr(mnt, "user.hsmfs.hooks", hooks, sizeof(hooks) - 1);
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
	n = getxattr(mnt, "user.hsmfs.hook_said", said, sizeof(said) - 1);
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

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? X_USAGE : 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("hsmfsctl %s\n", HSMFS_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "import"))
		return cmd_import(argc - 1, argv + 1);
	if (!strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	if (!strcmp(argv[1], "watch"))
		return cmd_watch(argc - 1, argv + 1);
	if (!strcmp(argv[1], "hooks"))
		return cmd_hooks(argc - 1, argv + 1);
	if (!strcmp(argv[1], "refresh"))
		return cmd_refresh(argc - 1, argv + 1);
	if (!strcmp(argv[1], "archive"))
		return cmd_archive(argc - 1, argv + 1, false);
	if (!strcmp(argv[1], "resolve"))
		return cmd_archive(argc - 1, argv + 1, true);
	if (!strcmp(argv[1], "sync"))
		return cmd_sync(argc - 1, argv + 1);
	if (!strcmp(argv[1], "unmount"))
		return cmd_unmount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stats"))
		return cmd_stats(argc - 1, argv + 1);
	if (!strcmp(argv[1], "doctor"))
		return cmd_doctor(argc - 1, argv + 1);
	if (!strcmp(argv[1], "set-origin"))
		return cmd_set_origin(argc - 1, argv + 1);
	if (!strcmp(argv[1], "restart"))
		return cmd_restart(argc - 1, argv + 1);
	if (!strcmp(argv[1], "evict") || !strcmp(argv[1], "pin") ||
	    !strcmp(argv[1], "unpin") || !strcmp(argv[1], "prefetch"))
		return cmd_act(argv[1], argc - 1, argv + 1);
	fprintf(stderr, "hsmfsctl: unknown command '%s' (see hsmfsctl --help)\n", argv[1]);
	return X_USAGE;
}
