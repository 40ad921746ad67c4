/* http-request.c - the requests of hsmfs-http's archives: see http-request.h */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http-request.h"

static void field(char *dst, size_t size, const char *v, size_t n)
{
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	while (n && *v == ' ') {
		v++;
		n--;
	}
	if (n >= size)
		n = size - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

static size_t on_header(char *b, size_t sz, size_t n, void *arg)
{
	struct seen *s = arg;
	size_t len = sz * n;

	if (len > 5 && !strncmp(b, "HTTP/", 5)) {
		/* a status line: a new response (a redirect, a 100) */
		s->etag[0] = s->lastmod[0] = '\0';
		s->length = -1;
		s->status = 0;
	} else if (len > 5 && !strncasecmp(b, "ETag:", 5)) {
		field(s->etag, sizeof(s->etag), b + 5, len - 5);
	} else if (len > 14 && !strncasecmp(b, "Last-Modified:", 14)) {
		field(s->lastmod, sizeof(s->lastmod), b + 14, len - 14);
	} else if (len > 15 && !strncasecmp(b, "Content-Length:", 15)) {
		char v[32];

		field(v, sizeof(v), b + 15, len - 15);
		s->length = atoll(v);
	}
	return len;
}

size_t discard(char *b, size_t sz, size_t n, void *arg)
{
	(void)b;
	(void)arg;
	return sz * n;
}

/* A body compared with the snapshot as it comes. */
struct cmp {
	int fd;
	uint64_t pos, size;
	bool differs;
};

static size_t compare_cb(char *b, size_t sz, size_t n, void *arg)
{
	struct cmp *c = arg;
	size_t len = sz * n, done = 0;
	char buf[65536];

	while (done < len && !c->differs) {
		size_t want = len - done < sizeof(buf) ? len - done : sizeof(buf);
		ssize_t r;

		if (c->pos + want > c->size) {
			c->differs = true; /* longer */
			break;
		}
		r = pread(c->fd, buf, want, (off_t)c->pos);
		if (r != (ssize_t)want || memcmp(buf, b + done, want))
			c->differs = true;
		c->pos += want;
		done += want;
	}
	return c->differs ? 0 : len; /* 0 stops the transfer */
}

size_t read_cb(char *b, size_t sz, size_t n, void *arg)
{
	struct upload *u = arg;
	size_t want = sz * n;
	ssize_t r;

	if (u->pos >= u->size)
		return 0;
	if (want > u->size - u->pos)
		want = (size_t)(u->size - u->pos);
	r = pread(u->fd, b, want, (off_t)u->pos);
	if (r <= 0)
		return CURL_READFUNC_ABORT;
	u->pos += (uint64_t)r;
	if (u->progress && u->pos - u->told >= (1u << 20)) {
		u->told = u->pos;
		u->progress(u->arg, u->pos);
	}
	return (size_t)r;
}

/* The handle reset to a plain request of url with our callbacks. */
void prepare(CURL *c, const char *url, struct seen *s, struct curl_slist *hdrs)
{
	memset(s, 0, sizeof(*s));
	s->length = -1;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, NULL);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 0L);
	curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(c, CURLOPT_RANGE, NULL);
	curl_easy_setopt(c, CURLOPT_TIMECONDITION, (long)CURL_TIMECOND_NONE);
}

int perform(CURL *c, struct seen *s, char *why, size_t wlen)
{
	CURLcode rc = curl_easy_perform(c);

	if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR) {
		if (why)
			snprintf(why, wlen, "%s", curl_easy_strerror(rc));
		return rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &s->status);
	return 0;
}

/* The recorded kind of validator of what s saw ("" if none). */
const char *validator(const struct seen *s, const char *recorded)
{
	if (recorded[0] && recorded[0] != '"' && strncmp(recorded, "W/", 2))
		return s->lastmod; /* a date was recorded */
	return s->etag[0] ? s->etag : s->lastmod;
}

/* Is the object at url byte for byte the snapshot?  1 yes, 0 no, or -errno. */
int same_bytes(CURL *c, const char *url, const struct hsmfs_event *ev,
	       struct curl_slist *hdrs, char *why, size_t wlen, struct seen *ret_seen)
{
	struct cmp cm = { ev->fd, 0, ev->file_size, false };
	struct seen s;
	int err;

	prepare(c, url, &s, hdrs);
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, NULL);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, compare_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &cm);
	err = perform(c, &s, why, wlen);
	if (err)
		return -err;
	if (s.status / 100 != 2) {
		/* no answer to the question: not a conflict (gone since, or a 5xx) */
		snprintf(why, wlen, "GET %s to compare: status %ld", url, s.status);
		return s.status == 404 || s.status >= 500 ? -EAGAIN : -EIO;
	}
	if (ret_seen)
		*ret_seen = s;
	return !cm.differs && cm.pos == cm.size;
}

/* WebDAV without create_full_put_path: each collection of url's path, made. */
void make_collections(CURL *c, const char *url, struct curl_slist *hdrs)
{
	const char *p = strstr(url, "://");
	char *u = strdup(url);
	struct seen s;

	p = p ? strchr(p + 3, '/') : NULL;
	if (!u || !p) {
		free(u);
		return;
	}
	for (char *q = u + (p - url) + 1; (q = strchr(q, '/')); q++) {
		char keep = q[1];

		q[1] = '\0';
		prepare(c, u, &s, hdrs);
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "MKCOL");
		(void)perform(c, &s, NULL, 0); /* 405: there already */
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
		q[1] = keep;
	}
	free(u);
}

/* A request of method to url with extra headers h: 0 with s, or an errno. */
int request(CURL *c, const char *method, const char *url, struct curl_slist *h,
	    struct seen *s, char *why, size_t wlen)
{
	int err;

	prepare(c, url, s, h);
	if (!strcmp(method, "HEAD"))
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	else
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	err = perform(c, s, why, wlen);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	return err;
}
