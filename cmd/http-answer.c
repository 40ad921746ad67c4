/*
 * http-answer.c - does an origin's answer prove its bytes?  See
 * http-answer.h for the rule.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http-answer.h"

void http_answer_reset(struct http_answer *a)
{
	memset(a, 0, sizeof(*a));
}

static bool ows(char c)
{
	return c == ' ' || c == '\t';
}

/*
 * Copy header value v (n bytes, OWS and CR LF trimmed) into dst.  A
 * second header of the same name with another value, or one too long,
 * makes the answer unprovable (too_long).
 */
static void take(struct http_answer *a, bool *has, char *dst, size_t size,
		 const char *v, size_t n)
{
	while (n && ows(*v))
		v++, n--;
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || ows(v[n - 1])))
		n--;
	if (n >= size) {
		a->too_long = true;
		return;
	}
	if (*has && (strlen(dst) != n || memcmp(dst, v, n))) {
		a->too_long = true; /* two answers in one: neither proves */
		return;
	}
	memcpy(dst, v, n);
	dst[n] = '\0';
	*has = true;
}

static bool named(const char *line, size_t len, const char *name, size_t *vstart)
{
	size_t n = strlen(name);

	if (len <= n || strncasecmp(line, name, n) || line[n] != ':')
		return false;
	*vstart = n + 1;
	return true;
}

void http_answer_header(struct http_answer *a, const char *b, size_t len)
{
	size_t v;

	if (len > 5 && !strncasecmp(b, "HTTP/", 5)) {
		char line[64];
		long status = 0;

		snprintf(line, sizeof(line), "%.*s", (int)(len < 63 ? len : 63), b);
		http_answer_reset(a);
		if (sscanf(line + 5, "%*s %ld", &status) == 1)
			a->status = status;
		return;
	}
	if (named(b, len, "Content-Range", &v))
		take(a, &a->has_range, a->range, sizeof(a->range), b + v, len - v);
	else if (named(b, len, "Content-Length", &v))
		take(a, &a->has_length, a->length, sizeof(a->length), b + v, len - v);
	else if (named(b, len, "Content-Encoding", &v))
		take(a, &a->has_coding, a->coding, sizeof(a->coding), b + v, len - v);
	else if (named(b, len, "Transfer-Encoding", &v))
		take(a, &a->has_te, a->te, sizeof(a->te), b + v, len - v);
	else if (named(b, len, "ETag", &v))
		take(a, &a->has_etag, a->etag, sizeof(a->etag), b + v, len - v);
	else if (named(b, len, "Last-Modified", &v))
		take(a, &a->has_lastmod, a->lastmod, sizeof(a->lastmod), b + v, len - v);
}

/* Is the version an HTTP date (compared with Last-Modified) rather than an ETag? */
static bool version_is_date(const char *v)
{
	return v[0] != '"' && strncmp(v, "W/", 2) && strstr(v, "GMT");
}

/* 1*DIGIT at *p into *ret, no overflow; advances *p. */
static bool digits(const char **p, uint64_t *ret)
{
	const char *s = *p;
	uint64_t n = 0;

	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (n > (UINT64_MAX - 9) / 10)
			return false;
		n = n * 10 + (uint64_t)(*s - '0');
	}
	*p = s;
	*ret = n;
	return true;
}

/*
 * Content-Range: "bytes first-last/complete", or the unsatisfied form
 * (first = last = UINT64_MAX), complete UINT64_MAX for "*".  false: it
 * does not parse.
 */
static bool parse_range(const char *s, uint64_t *first, uint64_t *last, uint64_t *complete)
{
	if (strncasecmp(s, "bytes", 5) || !ows(s[5]))
		return false;
	for (s += 5; ows(*s); s++)
		;
	if (*s == '*') {
		s++;
		*first = *last = UINT64_MAX;
		if (*s++ != '/' || !digits(&s, complete))
			return false;
		return !*s;
	}
	if (!digits(&s, first) || *s++ != '-' || !digits(&s, last) || *first > *last ||
	    *s++ != '/')
		return false;
	if (*s == '*') {
		*complete = UINT64_MAX;
		s++;
	} else if (!digits(&s, complete) || *last >= *complete) {
		return false;
	}
	return !*s;
}

/* Transfer-Encoding: only chunked (the HTTP library takes it off). */
static bool te_plain(const char *te)
{
	char buf[sizeof(((struct http_answer *)0)->te)], *tok, *save;

	snprintf(buf, sizeof(buf), "%s", te);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t n;

		while (ows(*tok))
			tok++;
		n = strlen(tok);
		while (n && ows(tok[n - 1]))
			n--;
		if (!(n == 7 && !strncasecmp(tok, "chunked", 7)) &&
		    !(n == 8 && !strncasecmp(tok, "identity", 8)))
			return false;
	}
	return true;
}

#define WHY(...) (snprintf(why, whylen, __VA_ARGS__))

enum http_verdict http_answer_check(const struct http_ask *ask, const struct http_answer *a,
				    uint64_t *body_start, uint64_t *body_len,
				    char *why, size_t whylen)
{
	uint64_t first, last, complete, length = 0;
	const char *want = ask->version, *got;

	if (a->status == 416 && a->has_range && parse_range(a->range, &first, &last, &complete) &&
	    complete != UINT64_MAX && complete != ask->size) {
		WHY("HTTP 416 says the object has %llu bytes, recorded %llu",
		    (unsigned long long)complete, (unsigned long long)ask->size);
		return HTTP_CHANGED;
	}
	if (a->status < 200 || a->status > 299) {
		WHY("HTTP %ld", a->status);
		return HTTP_NOT_DATA;
	}
	if (a->status != 200 && a->status != 206) {
		WHY("HTTP %ld to a range request", a->status);
		return HTTP_UNPROVEN;
	}
	if (a->too_long) {
		WHY("a header too long, or sent twice with two values");
		return HTTP_UNPROVEN;
	}
	if (ask->hi <= ask->lo || ask->hi > ask->size) {
		WHY("asked [%llu, %llu) of a version of %llu bytes", (unsigned long long)ask->lo,
		    (unsigned long long)ask->hi, (unsigned long long)ask->size);
		return HTTP_UNPROVEN;
	}
	if (a->has_coding && a->coding[0] && strcasecmp(a->coding, "identity")) {
		WHY("Content-Encoding: %s (the bytes would be its coding's, not the file's)",
		    a->coding);
		return HTTP_UNPROVEN;
	}
	if (a->has_te && !te_plain(a->te)) {
		WHY("Transfer-Encoding: %s", a->te);
		return HTTP_UNPROVEN;
	}
	if (want[0]) {
		bool date = version_is_date(want);

		got = date ? a->lastmod : a->etag;
		if (!(date ? a->has_lastmod : a->has_etag)) {
			WHY("no %s to check the recorded version %s against",
			    date ? "Last-Modified" : "ETag", want);
			return HTTP_UNPROVEN;
		}
		if (strcmp(got, want)) {
			WHY("%s %s, recorded %s", date ? "Last-Modified" : "ETag", got, want);
			return HTTP_CHANGED;
		}
	}
	if (a->has_length) {
		const char *p = a->length;

		if (!digits(&p, &length) || *p) {
			WHY("Content-Length: %s does not parse", a->length);
			return HTTP_UNPROVEN;
		}
	}
	if (a->status == 200) {
		if (a->has_range) {
			WHY("HTTP 200 with Content-Range: %s", a->range);
			return HTTP_UNPROVEN;
		}
		if (a->has_length && length != ask->size) {
			WHY("HTTP 200 of %llu bytes, recorded %llu", (unsigned long long)length,
			    (unsigned long long)ask->size);
			return HTTP_CHANGED;
		}
		*body_start = 0;
		*body_len = a->has_length ? length : UINT64_MAX;
		return HTTP_KEEP;
	}
	if (!a->has_range) {
		WHY("HTTP 206 without Content-Range");
		return HTTP_UNPROVEN;
	}
	if (!parse_range(a->range, &first, &last, &complete) || first == UINT64_MAX) {
		WHY("Content-Range: %s does not parse", a->range);
		return HTTP_UNPROVEN;
	}
	if (complete == UINT64_MAX) {
		WHY("Content-Range: %s does not say the object's size", a->range);
		return HTTP_UNPROVEN;
	}
	if (complete != ask->size) {
		WHY("Content-Range: %s, recorded size %llu", a->range,
		    (unsigned long long)ask->size);
		return HTTP_CHANGED;
	}
	if (first != ask->lo || last != ask->hi - 1) {
		WHY("Content-Range: %s, asked bytes %llu-%llu", a->range,
		    (unsigned long long)ask->lo, (unsigned long long)ask->hi - 1);
		return HTTP_UNPROVEN;
	}
	if (a->has_length && length != ask->hi - ask->lo) {
		WHY("Content-Length: %llu for Content-Range: %s", (unsigned long long)length,
		    a->range);
		return HTTP_UNPROVEN;
	}
	*body_start = first;
	*body_len = last - first + 1;
	return HTTP_KEEP;
}
