/*
 * http-list.c - hsmfs-http's directory listings (PRE_DIR): one directory
 * of an nginx JSON autoindex or of an S3 bucket (ListObjectsV2 with
 * delimiter "/", every page), written as JSON Lines into the event's
 * descriptor (hsmfs-hooks(7)).
 *
 * The URL of a directory is its recorded origin (the url its parent's
 * listing gave it; the mount's origin= for the root), else the mount's
 * origin joined with its path.  What each entry gets is what
 * `hsmfsctl import --listing` records: a file's url, its Last-Modified
 * (nginx) or ETag (S3) as its version, its size and mtime; a
 * directory's url is where it is listed.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "http-list.h"
#include "manifest.h"

#define PAGE_MAX (64u << 20) /* a page over 64 MiB is not a listing */

size_t http_body_cb(char *b, size_t sz, size_t n, void *arg)
{
	struct http_body *bd = arg;
	size_t len = sz * n;
	char *np;

	if (bd->n + len > bd->max)
		return 0;
	np = realloc(bd->p, bd->n + len + 1);
	if (!np)
		return 0;
	memcpy(np + bd->n, b, len);
	bd->p = np;
	bd->n += len;
	np[bd->n] = '\0';
	return len;
}

/* s as a JSON string: quotes, backslashes and control bytes escaped */
static void put_json(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

char *http_escape(const char *s, const char *keep)
{
	char *out = malloc(3 * strlen(s) + 1), *w = out;

	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~", *p) || (keep && strchr(keep, *p)))
			*w++ = *p;
		else
			w += sprintf(w, "%%%02X", *p);
	}
	*w = '\0';
	return out;
}

/* Is host (no port) one of AWS's names of a bucket: BUCKET.s3[.-]...amazonaws.com? */
static bool aws_virtual_host(const char *host, size_t n)
{
	static const char tail[] = ".amazonaws.com";
	const char *dot = memchr(host, '.', n);

	return dot && n > sizeof(tail) - 1 &&
	       !strncasecmp(host + n - (sizeof(tail) - 1), tail, sizeof(tail) - 1) &&
	       (size_t)(host + n - dot) > 4 && !strncasecmp(dot + 1, "s3", 2) &&
	       (dot[3] == '.' || dot[3] == '-');
}

int http_s3_split(const char *origin, char **ret_bucket, char **ret_prefix)
{
	const char *auth = strstr(origin, "://"), *path, *host, *port, *seg;
	size_t n = strlen(origin), pl;

	*ret_bucket = *ret_prefix = NULL;
	if (!auth)
		return -EINVAL;
	auth += 3;
	path = auth + strcspn(auth, "/?#");
	host = memchr(auth, '@', (size_t)(path - auth));
	host = host ? host + 1 : auth;
	port = memchr(host, ':', (size_t)(path - host));
	while (n > (size_t)(path - origin) && origin[n - 1] == '/')
		n--; /* trailing slashes: the prefix gets one of its own */
	if (aws_virtual_host(host, (size_t)((port ? port : path) - host)) || *path != '/') {
		seg = path;
	} else {
		seg = path + 1 + strcspn(path + 1, "/");
		if (seg > origin + n)
			seg = origin + n;
	}
	pl = (size_t)(origin + n - seg);
	*ret_bucket = strndup(origin, (size_t)(seg - origin));
	/* the prefix: seg past its '/', decoded, with a '/' at its end */
	if (pl > 1) {
		int k = 0;
		char *d = curl_easy_unescape(NULL, seg + 1, (int)(pl - 1), &k);

		if (!d || asprintf(ret_prefix, "%.*s/", k, d) < 0)
			*ret_prefix = NULL;
		curl_free(d);
	} else {
		*ret_prefix = strdup("");
	}
	if (!*ret_bucket || !*ret_prefix) {
		free(*ret_bucket);
		free(*ret_prefix);
		*ret_bucket = *ret_prefix = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* An S3 object of a listing page, waiting for its metadata (s3_heads). */
struct s3_obj {
	char *name;
	char *etag;
	uint64_t size;
	int64_t mtime;
	bool has_mtime;
	int mode; /* -1: none kept */
};

struct out {
	FILE *f;
	const char *base;   /* the directory's URL, ending in '/' */
	const char *prefix; /* S3: the key prefix of the directory */
	struct s3_obj *objs; /* S3 with metadata: this page's objects */
	size_t nobjs, capobjs;
	unsigned n;
	int err;
	CURL *c;            /* an HTML index's files are asked with a HEAD */
	char *why;          /* why o->err, when it is the origin's */
	size_t whylen;
};

static void put_entry_mode(struct out *o, const char *name, bool is_dir, uint64_t size,
			   int64_t mtime, bool has_mtime, const char *version, int mode);

static void put_entry(struct out *o, const char *name, bool is_dir, uint64_t size,
		      int64_t mtime, bool has_mtime, const char *version)
{
	put_entry_mode(o, name, is_dir, size, mtime, has_mtime, version, -1);
}

/* As put_entry(), with the file's permission bits (mode >= 0: the origin keeps them). */
static void put_entry_mode(struct out *o, const char *name, bool is_dir, uint64_t size,
			   int64_t mtime, bool has_mtime, const char *version, int mode)
{
	char *esc = http_escape(name, NULL);

	if (!esc) {
		o->err = ENOMEM;
		return;
	}
	fputs("{\"path\": ", o->f);
	put_json(o->f, name);
	if (is_dir) {
		fputs(", \"type\": \"dir\"", o->f);
	} else {
		fprintf(o->f, ", \"size\": %llu", (unsigned long long)size);
		if (version && version[0]) {
			fputs(", \"version\": ", o->f);
			put_json(o->f, version);
		}
	}
	if (has_mtime)
		fprintf(o->f, ", \"mtime\": %lld", (long long)mtime);
	if (mode >= 0 && !is_dir)
		fprintf(o->f, ", \"mode\": \"%04o\"", (unsigned)mode & 07777);
	fprintf(o->f, ", \"url\": ");
	{
		char *url;

		if (asprintf(&url, "%s%s%s", o->base, esc, is_dir ? "/" : "") < 0) {
			o->err = ENOMEM;
			free(esc);
			return;
		}
		put_json(o->f, url);
		free(url);
	}
	fputs("}\n", o->f);
	free(esc);
	o->n++;
}

static long head(CURL *c, const char *url, char *why, size_t whylen);
static int head_file(CURL *c, struct out *o, const char *name, const char *url, bool s3,
		     char *why, size_t whylen);

static int nginx_entry(void *arg, const char *name, bool is_dir, const char *mtime,
		       uint64_t size)
{
	struct out *o = arg;
	time_t t = mtime[0] ? curl_getdate(mtime, NULL) : -1;

	if (!is_dir && size == MANIFEST_SIZE_UNKNOWN) {
		/* an HTML index: the file's size and version are its HEAD's */
		char *en = http_escape(name, NULL), *url = NULL;
		int res = ENOMEM;

		if (en && asprintf(&url, "%s%s", o->base, en) >= 0)
			res = head_file(o->c, o, name, url, false, o->why, o->whylen);
		free(en);
		free(url);
		if (res && !o->err)
			o->err = res;
		return o->err ? -o->err : 0;
	}
	/* Last-Modified: the If-Range validator (as hsmfsctl import --listing) */
	put_entry(o, name, is_dir, size, t, t >= 0, mtime);
	return o->err ? -o->err : 0;
}

static int s3_entry(void *arg, const char *key, uint64_t size, const char *etag,
		    const char *lm)
{
	struct out *o = arg;
	size_t pl = strlen(o->prefix);
	struct tm tm = { 0 };
	bool has = strptime(lm, "%Y-%m-%dT%H:%M:%S", &tm) != NULL;

	if (strncmp(key, o->prefix, pl) || !key[pl] || strchr(key + pl, '/'))
		return 0; /* the directory's own marker, or not one of its names */
	if (o->capobjs) {
		/* its metadata asked first (s3_heads) */
		if (o->nobjs == o->capobjs) {
			struct s3_obj *v = realloc(o->objs, 2 * o->capobjs * sizeof(*v));

			if (!v)
				return -ENOMEM;
			o->objs = v;
			o->capobjs *= 2;
		}
		o->objs[o->nobjs] = (struct s3_obj){ .name = strdup(key + pl),
						     .etag = strdup(etag ? etag : ""), .size = size,
						     .mtime = has ? timegm(&tm) : 0,
						     .has_mtime = has, .mode = -1 };
		if (!o->objs[o->nobjs].name || !o->objs[o->nobjs].etag) {
			free(o->objs[o->nobjs].name);
			free(o->objs[o->nobjs].etag);
			return -ENOMEM;
		}
		o->nobjs++;
		return 0;
	}
	put_entry(o, key + pl, false, size, has ? timegm(&tm) : 0, has, etag);
	return o->err ? -o->err : 0;
}

/*
 * The x-amz-meta-mtime (seconds, maybe with a fraction, as rclone writes
 * it too) and x-amz-meta-mode (octal) of the object whose HEAD c just
 * made: an archive's (http-archive.c) or rclone's.  Kept in ob.
 */
static void s3_meta(CURL *c, struct s3_obj *ob)
{
	struct curl_header *h;
	char *end;

	if (curl_easy_header(c, "x-amz-meta-mtime", 0, CURLH_HEADER, -1, &h) == CURLHE_OK) {
		double t = strtod(h->value, &end);

		if (end != h->value && t >= 0 && t < 1e12) {
			ob->mtime = (int64_t)t;
			ob->has_mtime = true;
		}
	}
	if (curl_easy_header(c, "x-amz-meta-mode", 0, CURLH_HEADER, -1, &h) == CURLHE_OK) {
		long m = strtol(h->value, &end, 8);

		if (end != h->value && !*end && m >= 0)
			ob->mode = (int)(m & 07777);
	}
}

/* Objects whose metadata are asked at once (HEADs in flight). */
#define META_AT_ONCE 16

/*
 * Each object of o's page with its metadata (s3_meta), from a HEAD of
 * each, META_AT_ONCE at a time on handles copied from c (its signature,
 * keys and headers), then written as put_entry() would.  An object
 * whose HEAD fails (gone meanwhile, refused) keeps the listing's time.
 */
static void s3_heads(CURL *c, struct out *o)
{
	CURL *hs[META_AT_ONCE] = { 0 };
	size_t at[META_AT_ONCE], next = 0, busy = 0;
	CURLM *m = curl_multi_init();
	char *urls[META_AT_ONCE] = { 0 };

	for (unsigned i = 0; m && i < META_AT_ONCE && i < o->nobjs; i++) {
		hs[i] = curl_easy_duphandle(c);
		if (!hs[i])
			break;
		curl_easy_setopt(hs[i], CURLOPT_NOBODY, 1L);
		curl_easy_setopt(hs[i], CURLOPT_HEADERFUNCTION, NULL);
		curl_easy_setopt(hs[i], CURLOPT_WRITEFUNCTION, NULL);
		curl_easy_setopt(hs[i], CURLOPT_NOPROGRESS, 1L);
	}
	for (;;) {
		int running = 0, left;
		CURLMsg *msg;

		for (unsigned i = 0; m && i < META_AT_ONCE && hs[i] && next < o->nobjs; i++) {
			char *esc;

			if (urls[i])
				continue; /* busy */
			esc = http_escape(o->objs[next].name, NULL);
			if (!esc || asprintf(&urls[i], "%s%s", o->base, esc) < 0)
				urls[i] = NULL;
			free(esc);
			if (!urls[i]) {
				next = o->nobjs; /* no memory: the listing's times */
				break;
			}
			at[i] = next++;
			curl_easy_setopt(hs[i], CURLOPT_URL, urls[i]);
			curl_multi_add_handle(m, hs[i]);
			busy++;
		}
		if (!busy)
			break;
		if (curl_multi_perform(m, &running) != CURLM_OK ||
		    (running && curl_multi_poll(m, NULL, 0, 1000, NULL) != CURLM_OK))
			break;
		while ((msg = curl_multi_info_read(m, &left))) {
			long code = 0;
			unsigned i = 0;

			if (msg->msg != CURLMSG_DONE)
				continue;
			while (i < META_AT_ONCE && hs[i] != msg->easy_handle)
				i++;
			if (i == META_AT_ONCE)
				continue;
			curl_easy_getinfo(hs[i], CURLINFO_RESPONSE_CODE, &code);
			if (msg->data.result == CURLE_OK && code == 200)
				s3_meta(hs[i], &o->objs[at[i]]);
			curl_multi_remove_handle(m, hs[i]);
			free(urls[i]);
			urls[i] = NULL;
			busy--;
		}
	}
	for (unsigned i = 0; i < META_AT_ONCE; i++) {
		if (hs[i] && urls[i])
			curl_multi_remove_handle(m, hs[i]);
		free(urls[i]);
		if (hs[i])
			curl_easy_cleanup(hs[i]);
	}
	if (m)
		curl_multi_cleanup(m);
	for (size_t i = 0; i < o->nobjs; i++) {
		struct s3_obj *ob = &o->objs[i];

		put_entry_mode(o, ob->name, false, ob->size, ob->mtime, ob->has_mtime, ob->etag,
			       ob->mode);
		free(ob->name);
		free(ob->etag);
	}
	o->nobjs = 0;
}

static int s3_prefix(void *arg, const char *prefix)
{
	struct out *o = arg;
	size_t pl = strlen(o->prefix), n = strlen(prefix);
	char name[4096];

	if (strncmp(prefix, o->prefix, pl) || n <= pl + 1 || prefix[n - 1] != '/' ||
	    n - pl - 1 >= sizeof(name))
		return 0;
	memcpy(name, prefix + pl, n - pl - 1);
	name[n - pl - 1] = '\0';
	if (strchr(name, '/'))
		return 0;
	put_entry(o, name, true, 0, 0, false, NULL);
	return o->err ? -o->err : 0;
}

/*
 * A directory whose URL answers with a page (its index.html: nginx's
 * `index`, python's http.server) rather than an index: listed as well as
 * the page allows, and marked so (the "partial" line, hsmfs-hooks(7)).
 * Its names: index.html, and those the page links to one level down,
 * each confirmed by a HEAD (a file: its size and date; a directory: its
 * URL answering).  A name the page does not link to is not there.
 */
#define PAGE_LINKS_MAX 10000 /* names taken from one page; more are passed over */

struct page {
	char **names; /* owned, unique */
	bool *dirs;
	size_t n, cap;
};

static int page_link(void *arg, const char *name, bool is_dir, const char *mtime, uint64_t size)
{
	struct page *pg = arg;

	(void)mtime, (void)size;
	for (size_t i = 0; i < pg->n; i++)
		if (!strcmp(pg->names[i], name))
			return 0;
	if (pg->n == PAGE_LINKS_MAX)
		return 0;
	if (pg->n == pg->cap) {
		size_t cap = pg->cap ? 2 * pg->cap : 32;
		char **nn = realloc(pg->names, cap * sizeof(*nn));
		bool *nd;

		if (!nn)
			return -ENOMEM;
		pg->names = nn;
		nd = realloc(pg->dirs, cap * sizeof(*nd));
		if (!nd)
			return -ENOMEM;
		pg->dirs = nd;
		pg->cap = cap;
	}
	if (!(pg->names[pg->n] = strdup(name)))
		return -ENOMEM;
	pg->dirs[pg->n++] = is_dir;
	return 0;
}

/* The listing of a directory whose URL answered with page b: 0 or an errno (o->why). */
static int list_page(struct out *o, const struct http_body *b)
{
	struct page pg = { 0 };
	int res = page_link(&pg, "index.html", false, "", 0);

	if (!res)
		res = -manifest_parse_page_links(b->p ? b->p : "", b->n, page_link, &pg);
	if (!res) /* the mark: names not linked are missing (hsmfs-hooks(7)) */
		fputs("{\"path\": \".\", \"type\": \"dir\", \"partial\": \"page\"}\n", o->f);
	for (size_t i = 0; !res && !o->err && i < pg.n; i++) {
		char *en = http_escape(pg.names[i], NULL), *url = NULL;

		if (!en || asprintf(&url, "%s%s%s", o->base, en, pg.dirs[i] ? "/" : "") < 0) {
			url = NULL;
			res = ENOMEM;
		} else if (!pg.dirs[i]) {
			res = head_file(o->c, o, pg.names[i], url, false, o->why, o->whylen);
		} else {
			long code = head(o->c, url, o->why, o->whylen);

			if (code == 200)
				put_entry(o, pg.names[i], true, 0, 0, false, NULL);
			else if (code < 0)
				res = (int)-code;
			else if (code != 404 && code != 410 && code != 403) {
				snprintf(o->why, o->whylen, "HEAD %s: HTTP %ld", url, code);
				res = EIO;
			}
		}
		free(en);
		free(url);
	}
	for (size_t i = 0; i < pg.n; i++)
		free(pg.names[i]);
	free(pg.names);
	free(pg.dirs);
	return res ? res : o->err;
}

CURLcode (*http_perform)(CURL *c) = curl_easy_perform;

/* A response begins (its status line): the body kept is the new one's. */
static size_t body_restart(char *h, size_t sz, size_t n, void *arg)
{
	struct http_body *b = arg;

	if (sz * n > 5 && !strncasecmp(h, "HTTP/", 5) && b->p) {
		b->n = 0;
		b->p[0] = '\0';
	}
	return sz * n;
}

/* GET url into b: 0, or an errno (the reason logged) */
static int get(CURL *c, const char *url, struct http_body *b, char *why, size_t whylen)
{
	long code = 0;
	CURLcode rc;

	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, body_restart);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, b);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
	rc = http_perform(c);
	/* neither outlives b: with no header function, headers go to the write one */
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, NULL);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, NULL);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (rc == CURLE_OK && (code == 200 || (code == 0 && !strncmp(url, "file:", 5))))
		return 0;
	if (rc != CURLE_OK) {
		snprintf(why, whylen, "%s", curl_easy_strerror(rc));
		return EIO;
	}
	snprintf(why, whylen, "HTTP %ld", code);
	if (b->p)
		manifest_s3_error(b->p, why + strlen(why), whylen - strlen(why));
	return code == 404 ? ENOENT : code == 401 || code == 403 ? EACCES : EIO;
}

/* A listing's or lookup's request headers, or NULL without memory. */
static struct curl_slist *request_headers(bool s3)
{
	struct curl_slist *h = curl_slist_append(NULL, HTTP_IDENTITY), *more;

	if (h && s3) {
		more = curl_slist_append(h, HTTP_S3_EMPTY_PAYLOAD);
		if (!more)
			curl_slist_free_all(h);
		h = more;
	}
	return h;
}

int http_list(CURL *c, const struct hsmfs_event *ev, const char *origin, bool s3,
	      unsigned page, bool s3_meta_on, char *why, size_t whylen)
{
	struct out o = { 0 };
	struct http_body b = { .max = PAGE_MAX };
	struct curl_slist *hdrs = request_headers(s3);
	char *base = NULL, *bucket = NULL, *prefix = NULL, err[256] = "";
	int fd = dup(ev->fd), res = 0;

	why[0] = '\0';
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	if (!hdrs || fd < 0 || !(o.f = fdopen(fd, "w"))) {
		res = fd < 0 ? errno : ENOMEM;
		if (fd >= 0)
			close(fd);
		curl_slist_free_all(hdrs);
		return res;
	}
	if (s3) {
		/* origin: a bucket's URL, or a prefix's in it; the directory: a prefix below */
		char *kp = NULL;

		if (http_s3_split(origin, &bucket, &kp) ||
		    asprintf(&prefix, "%s%s%s", kp, ev->path, ev->path[0] ? "/" : "") < 0) {
			free(kp);
			prefix = NULL;
			res = ENOMEM;
			goto out;
		}
		free(kp);
		char *ep = http_escape(prefix, "/");

		if (!ep || asprintf(&base, "%s/%s", bucket, ep) < 0) {
			free(ep);
			res = ENOMEM;
			goto out;
		}
		free(ep);
		o.base = base;
		o.prefix = prefix;
		if (s3_meta_on && (o.objs = calloc(64, sizeof(*o.objs))))
			o.capobjs = 64;
		else if (s3_meta_on)
			res = ENOMEM;
		char token[1024] = "";
		bool more = true;

		while (!res && more) {
			char *url, *tok = token[0] ? http_escape(token, NULL) : NULL,
				   *pq = http_escape(prefix, NULL);

			char mk[32] = "";

			if (page)
				snprintf(mk, sizeof(mk), "&max-keys=%u", page);
			if (!pq || asprintf(&url, "%s?list-type=2&delimiter=%%2F&prefix=%s%s%s%s",
					    bucket, pq, mk, tok ? "&continuation-token=" : "",
					    tok ? tok : "") < 0) {
				free(tok);
				free(pq);
				res = ENOMEM;
				break;
			}
			free(tok);
			free(pq);
			free(b.p);
			b = (struct http_body){ .max = PAGE_MAX };
			res = get(c, url, &b, why, whylen);
			free(url);
			if (res)
				break;
			res = -manifest_parse_s3(b.p ? b.p : "", b.n, s3_entry, &o, &more, token,
						 sizeof(token), err, sizeof(err));
			if (o.nobjs)
				s3_heads(c, &o); /* and written, then the next page */
			if (!res)
				res = -manifest_parse_s3_prefixes(b.p ? b.p : "", b.n, s3_prefix,
								  &o);
			if (res && err[0])
				snprintf(why, whylen, "%s", err);
		}
	} else {
		/* a directory's listing URL: its recorded origin, or origin/path/ */
		if (ev->origin[0]) {
			size_t n = strlen(ev->origin);

			res = asprintf(&base, "%s%s", ev->origin,
				       ev->origin[n - 1] == '/' ? "" : "/") < 0 ? ENOMEM : 0;
		} else {
			char *ep = http_escape(ev->path, "/");
			size_t n = strlen(origin);

			res = !ep || asprintf(&base, "%s%s%s%s", origin,
					      n && origin[n - 1] == '/' ? "" : "/", ep,
					      ep[0] ? "/" : "") < 0 ? ENOMEM : 0;
			free(ep);
		}
		if (!res) {
			o.base = base;
			res = get(c, base, &b, why, whylen);
		}
		if (!res) {
			o.c = c;
			o.why = why;
			o.whylen = whylen;
			size_t i = 0;

			while (i < b.n && strchr(" \t\r\n", b.p[i]))
				i++;
			if (i < b.n && b.p[i] == '<' && !manifest_html_is_index(b.p, b.n))
				res = list_page(&o, &b);
			else
				res = -manifest_parse_listing(b.p ? b.p : "", b.n, nginx_entry, &o,
							      err, sizeof(err));
			if (res && err[0])
				snprintf(why, whylen, "not a directory listing (nginx JSON, or an "
					 "HTML index): %s", err);
		}
	}
	if (!res && o.err)
		res = o.err;
	if (res < 0)
		res = EIO;
out:
	if (fclose(o.f) && !res)
		res = EIO;
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	for (size_t i = 0; i < o.nobjs; i++) {
		free(o.objs[i].name);
		free(o.objs[i].etag);
	}
	free(o.objs);
	free(b.p);
	free(base);
	free(bucket);
	free(prefix);
	return res;
}

/* A response header of the last transfer of c, or NULL. */
static const char *header(CURL *c, const char *name)
{
	struct curl_header *h;

	return curl_easy_header(c, name, 0, CURLH_HEADER, -1, &h) == CURLHE_OK ? h->value : NULL;
}

/* HEAD url: the status, or -errno (the reason in why). */
static long head(CURL *c, const char *url, char *why, size_t whylen)
{
	long code = 0;
	CURLcode rc;

	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, NULL);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
	rc = http_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	if (rc != CURLE_OK) {
		snprintf(why, whylen, "%s", curl_easy_strerror(rc));
		return -EIO;
	}
	return code;
}

/*
 * The entry of a file whose HEAD (url) just answered 200 on c: its size,
 * date and version from the headers.  0, or an errno with why.
 */
static int head_entry(CURL *c, struct out *o, const char *name, const char *url, bool s3,
		      char *why, size_t whylen)
{
	const char *lm = header(c, "Last-Modified"), *etag = header(c, "ETag"),
		   *coding = header(c, "Content-Encoding");
	curl_off_t len = -1;
	time_t t = lm ? curl_getdate(lm, NULL) : -1;

	curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
	if (coding && coding[0] && strcasecmp(coding, "identity")) {
		/* its Content-Length is the coding's, not the file's size */
		snprintf(why, whylen, "HEAD %s: Content-Encoding: %s", url, coding);
		return EIO;
	}
	if (len < 0) {
		snprintf(why, whylen, "HEAD %s: no Content-Length", url);
		return EIO;
	}
	/* the version a listing records: the ETag (S3), the date (nginx) */
	if (s3) {
		struct s3_obj ob = { .mtime = t, .has_mtime = t >= 0, .mode = -1 };

		s3_meta(c, &ob);
		put_entry_mode(o, name, false, (uint64_t)len, ob.mtime, ob.has_mtime, etag,
			       ob.mode);
		return 0;
	}
	put_entry(o, name, false, (uint64_t)len, t, t >= 0, lm);
	return 0;
}

/*
 * A file an HTML index names: its entry from a HEAD of url (a redirect
 * to a slash: a directory).  0, or an errno with why; a name gone since
 * the index was made is passed over.
 */
static int head_file(CURL *c, struct out *o, const char *name, const char *url, bool s3,
		     char *why, size_t whylen)
{
	long code = head(c, url, why, whylen);

	if (code == 200)
		return head_entry(c, o, name, url, s3, why, whylen);
	if (code == 301 || code == 302) {
		const char *loc = header(c, "Location");

		if (loc && loc[0] && loc[strlen(loc) - 1] == '/')
			put_entry(o, name, true, 0, 0, false, NULL);
		return 0;
	}
	if (code == 404 || code == 410)
		return 0;
	if (code > 0)
		snprintf(why, whylen, "HEAD %s: HTTP %ld", url, code);
	return code == 401 || code == 403 ? EACCES : EIO;
}

int http_lookup(CURL *c, const struct hsmfs_event *ev, const char *origin, bool s3,
		char *why, size_t whylen)
{
	struct out o = { 0 };
	const char *slash = strrchr(ev->path, '/'), *name = slash ? slash + 1 : ev->path;
	char *dir = strndup(ev->path, slash ? (size_t)(slash - ev->path) : 0);
	char *base = NULL, *url = NULL, *en = http_escape(name, NULL), *ed = dir ? http_escape(dir, "/") : NULL;
	struct curl_slist *hdrs = request_headers(s3);
	int fd = dup(ev->fd), res = 0;
	size_t ol = strlen(origin);
	long code;

	why[0] = '\0';
	if (!dir || !en || !ed || !hdrs || fd < 0 || !(o.f = fdopen(fd, "w"))) {
		res = fd < 0 ? errno : ENOMEM;
		if (fd >= 0)
			close(fd);
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	/* the directory's URL, as its listing has it (http_list) */
	if (s3)
		res = asprintf(&base, "%.*s/%s%s", (int)(ol && origin[ol - 1] == '/' ? ol - 1 : ol),
			       origin, ed, ed[0] ? "/" : "") < 0;
	else if (ev->origin[0])
		res = asprintf(&base, "%s%s", ev->origin,
			       ev->origin[strlen(ev->origin) - 1] == '/' ? "" : "/") < 0;
	else
		res = asprintf(&base, "%s%s%s%s", origin, ol && origin[ol - 1] == '/' ? "" : "/",
			       ed, ed[0] ? "/" : "") < 0;
	if (res || asprintf(&url, "%s%s", base, en) < 0) {
		res = ENOMEM;
		goto out;
	}
	o.base = base;
	code = head(c, url, why, whylen);
	if (code == 200) {
		res = head_entry(c, &o, name, url, s3, why, whylen);
		if (res)
			goto out;
	} else if ((code == 301 || code == 302) && !s3) {
		const char *loc = header(c, "Location");

		if (loc && loc[0] && loc[strlen(loc) - 1] == '/')
			put_entry(&o, name, true, 0, 0, false, NULL); /* nginx: a directory */
	} else if (code == 404 && s3) {
		/* not a key: a prefix, if some key is below it */
		struct http_body b = { .max = PAGE_MAX };
		char *q = NULL, *prefix = NULL, *pq = NULL, *bucket = NULL, *kp = NULL;

		if (http_s3_split(origin, &bucket, &kp) ||
		    asprintf(&prefix, "%s%s%s%s/", kp, dir, dir[0] ? "/" : "", name) < 0 ||
		    !(pq = http_escape(prefix, NULL)) ||
		    asprintf(&q, "%s?list-type=2&delimiter=%%2F&max-keys=1&prefix=%s", bucket,
			     pq) < 0) {
			res = ENOMEM;
		} else {
			res = get(c, q, &b, why, whylen);
			if (!res && b.p && (strstr(b.p, "<Contents>") || strstr(b.p, "<CommonPrefixes>")))
				put_entry(&o, name, true, 0, 0, false, NULL);
		}
		free(b.p);
		free(q);
		free(pq);
		free(prefix);
		free(bucket);
		free(kp);
	} else if (code != 404) {
		if (code > 0)
			snprintf(why, whylen, "HEAD %s: HTTP %ld", url, code);
		res = code == 401 || code == 403 ? EACCES : EIO;
	}
	if (!res && o.err)
		res = o.err;
out:
	if (o.f && fclose(o.f) && !res)
		res = EIO;
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	free(base);
	free(url);
	free(en);
	free(ed);
	free(dir);
	return res;
}
