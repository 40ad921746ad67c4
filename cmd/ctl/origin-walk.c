/*
 * origin-walk.c - an origin's files, as import --listing and refresh take
 * them (origin-walk.h): an nginx JSON autoindex (or an HTML index) walked
 * directory by directory, or an S3 bucket's listing page by page.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../http-list.h"
#include "ctl.h"
#include "manifest.h"
#include "origin-walk.h"

/* a listing over 256 MiB is not a listing */
#define LISTING_BODY_MAX (256u << 20)

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
 * Collect the listing at url (so: its options) below only (shallow:
 * directly in it): 0 or -errno (said why).  *items etc. as
 * collect_listing().
 */
int collect(const char *url, const struct s3opts *so, const char *only, bool shallow,
		   struct item **items, size_t *n, size_t *cap)
{
	return so->s3 ? collect_s3(url, so, only, shallow, items, n, cap) :
			collect_listing(url, only, shallow, items, n, cap);
}

void items_free(struct item *items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		manifest_entry_free(&items[i].e);
	free(items);
}
