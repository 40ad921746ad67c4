/*
 * test-http-answer.c - the table of origin answers: which prove their
 * bytes (http-answer.h), which are refused, which prove a change.
 */
#include <stdint.h>
#include <string.h>

#include "../../cmd/http-answer.h"
#include "tap.h"

#define DATE "Wed, 02 Dec 2026 10:00:00 GMT"
#define ETAG "\"5f3-abc\""

struct row {
	const char *what;
	uint64_t lo, hi, size;
	const char *version;
	const char *headers; /* lines separated by \n, the status line first */
	enum http_verdict want;
	uint64_t start, len; /* on HTTP_KEEP */
};

#define KEEP(s, l) HTTP_KEEP, s, l

static const struct row rows[] = {
	/* 206: the range asked, of the recorded size */
	{ "206 exact", 4096, 8192, 10000, DATE,
	  "HTTP/1.1 206 Partial Content\nContent-Range: bytes 4096-8191/10000\n"
	  "Content-Length: 4096\nLast-Modified: " DATE, KEEP(4096, 4096) },
	{ "206 unit case-insensitive (RFC 9110)", 0, 100, 100, DATE,
	  "HTTP/1.1 206 x\nContent-Range: Bytes 0-99/100\nLast-Modified: " DATE, KEEP(0, 100) },
	{ "206 header names case-insensitive", 0, 100, 100, ETAG,
	  "HTTP/2 206\ncontent-range: bytes 0-99/100\netag: " ETAG, KEEP(0, 100) },
	{ "206 with ETag", 0, 100, 100, ETAG,
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nETag: " ETAG, KEEP(0, 100) },
	{ "206 chunked", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nTransfer-Encoding: chunked\nContent-Range: bytes 0-99/100",
	  KEEP(0, 100) },
	{ "206 Content-Encoding identity", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Encoding: identity\nContent-Range: bytes 0-99/100",
	  KEEP(0, 100) },
	{ "206 no recorded version", 10, 20, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 10-19/100", KEEP(10, 10) },
	{ "206 after a redirect: the last response counts", 0, 100, 100, DATE,
	  "HTTP/1.1 302 Found\nContent-Range: bytes 5-9/7\nLast-Modified: x\n"
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nLast-Modified: " DATE, KEEP(0, 100) },
	/* 206 that does not prove its range */
	{ "206 without Content-Range", 1114112, 2162688, 4194304, DATE,
	  "HTTP/1.1 206 x\nLast-Modified: " DATE, HTTP_UNPROVEN },
	{ "206 Content-Range of another start", 1114112, 2162688, 4194304, DATE,
	  "HTTP/1.1 206 x\nContent-Range: bytes 2162688-3211263/4194304\nLast-Modified: " DATE,
	  HTTP_UNPROVEN },
	{ "206 Content-Range shorter", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-49/100", HTTP_UNPROVEN },
	{ "206 Content-Range longer", 0, 50, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100", HTTP_UNPROVEN },
	{ "206 unit not bytes", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: items 0-99/100", HTTP_UNPROVEN },
	{ "206 unit glued to the range", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes0-99/100", HTTP_UNPROVEN },
	{ "206 a sign", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes +0-99/100", HTTP_UNPROVEN },
	{ "206 first after last", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 99-0/100", HTTP_UNPROVEN },
	{ "206 trailing junk", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100x", HTTP_UNPROVEN },
	{ "206 last beyond the complete length", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-100/100", HTTP_UNPROVEN },
	{ "206 overflowing number", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/184467440737095516160", HTTP_UNPROVEN },
	{ "206 unknown complete length", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/*", HTTP_UNPROVEN },
	{ "206 unsatisfied form", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes */100", HTTP_UNPROVEN },
	{ "206 Content-Length not the range's", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nContent-Length: 99", HTTP_UNPROVEN },
	{ "206 Content-Length does not parse", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nContent-Length: 1e2", HTTP_UNPROVEN },
	{ "206 two Content-Ranges", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nContent-Range: bytes 1-100/101",
	  HTTP_UNPROVEN },
	{ "206 multipart (no Content-Range)", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Type: multipart/byteranges; boundary=x", HTTP_UNPROVEN },
	/* codings */
	{ "206 gzip", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nContent-Encoding: gzip\nContent-Range: bytes 0-99/100", HTTP_UNPROVEN },
	{ "200 gzip", 0, 100, 100, DATE,
	  "HTTP/1.1 200 OK\nContent-Encoding: gzip\nLast-Modified: " DATE, HTTP_UNPROVEN },
	{ "200 br, case", 0, 100, 100, "",
	  "HTTP/1.1 200 OK\ncontent-encoding: BR", HTTP_UNPROVEN },
	{ "206 gzip transfer coding", 0, 100, 100, "",
	  "HTTP/1.1 206 x\nTransfer-Encoding: gzip, chunked\nContent-Range: bytes 0-99/100",
	  HTTP_UNPROVEN },
	/* versions */
	{ "206 Last-Modified differs", 0, 100, 100, DATE,
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\n"
	  "Last-Modified: Wed, 02 Dec 2026 10:00:01 GMT", HTTP_CHANGED },
	{ "206 no Last-Modified to check", 0, 100, 100, DATE,
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nETag: " ETAG, HTTP_UNPROVEN },
	{ "206 ETag differs", 0, 100, 100, ETAG,
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nETag: \"other\"", HTTP_CHANGED },
	{ "206 weak ETag is not the strong one", 0, 100, 100, ETAG,
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nETag: W/" ETAG, HTTP_CHANGED },
	{ "206 no ETag to check", 0, 100, 100, ETAG,
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-99/100\nLast-Modified: " DATE, HTTP_UNPROVEN },
	{ "206 same date, another size (a same-second rewrite)", 1048576, 2097152, 2097152, DATE,
	  "HTTP/1.1 206 x\nContent-Range: bytes 1048576-2097151/3145728\nLast-Modified: " DATE,
	  HTTP_CHANGED },
	{ "416 of a smaller object", 4096, 8192, 10000, DATE,
	  "HTTP/1.1 416 x\nContent-Range: bytes */3000", HTTP_CHANGED },
	{ "416 of the recorded size", 4096, 8192, 10000, DATE,
	  "HTTP/1.1 416 x\nContent-Range: bytes */10000", HTTP_NOT_DATA },
	/* 200: the server ignored Range */
	{ "200 of the recorded size", 4096, 8192, 10000, DATE,
	  "HTTP/1.1 200 OK\nContent-Length: 10000\nLast-Modified: " DATE, KEEP(0, 10000) },
	{ "200 chunked: its end proves its length", 4096, 8192, 10000, DATE,
	  "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\nLast-Modified: " DATE,
	  KEEP(0, UINT64_MAX) },
	{ "200 of another size", 4096, 8192, 10000, DATE,
	  "HTTP/1.1 200 OK\nContent-Length: 10001\nLast-Modified: " DATE, HTTP_CHANGED },
	{ "200 with a Content-Range", 0, 100, 100, "",
	  "HTTP/1.1 200 OK\nContent-Range: bytes 0-99/100", HTTP_UNPROVEN },
	/* other statuses */
	{ "204", 0, 100, 100, "", "HTTP/1.1 204 No Content", HTTP_UNPROVEN },
	{ "203", 0, 100, 100, "", "HTTP/1.1 203 x\nContent-Range: bytes 0-99/100", HTTP_UNPROVEN },
	{ "404", 0, 100, 100, DATE, "HTTP/1.1 404 Not Found", HTTP_NOT_DATA },
	{ "500", 0, 100, 100, DATE, "HTTP/1.1 500 x\nContent-Encoding: gzip", HTTP_NOT_DATA },
	{ "a range beyond the recorded size", 0, 200, 100, "",
	  "HTTP/1.1 206 x\nContent-Range: bytes 0-199/200", HTTP_UNPROVEN },
};

static enum http_verdict run(const struct row *r, uint64_t *start, uint64_t *len, char *why,
			     size_t whylen)
{
	struct http_ask ask = { .lo = r->lo, .hi = r->hi, .size = r->size, .version = r->version };
	struct http_answer a;
	const char *p = r->headers;

	http_answer_reset(&a);
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		char line[2200];

		/* as libcurl hands them over: each line with its CR LF */
		snprintf(line, sizeof(line), "%.*s\r\n", (int)n, p);
		http_answer_header(&a, line, strlen(line));
		p += n + (nl != NULL);
	}
	http_answer_header(&a, "\r\n", 2);
	return http_answer_check(&ask, &a, start, len, why, whylen);
}

int main(void)
{
	static const char *const names[] = { "keep", "not data", "unproven", "changed" };

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		uint64_t start = 12345, len = 12345;
		char why[2300] = "";
		enum http_verdict v = run(r, &start, &len, why, sizeof(why));

		ok(v == r->want, "%s: %s (want %s)%s%s", r->what, names[v], names[r->want],
		   why[0] ? ": " : "", why);
		if (r->want == HTTP_KEEP && v == HTTP_KEEP)
			ok(start == r->start && len == r->len, "%s: body at %llu, %llu bytes",
			   r->what, (unsigned long long)start, (unsigned long long)len);
		if (v != HTTP_KEEP)
			ok(why[0] != '\0', "%s: a reason is given", r->what);
	}
	{
		/* a header longer than its field is not taken as a shorter one */
		struct http_answer a;
		char line[HTTP_FIELD + 64];
		uint64_t s, l;
		char why[256];
		struct http_ask ask = { .lo = 0, .hi = 10, .size = 10, .version = ETAG };

		http_answer_reset(&a);
		http_answer_header(&a, "HTTP/1.1 206 x\r\n", 16);
		http_answer_header(&a, "Content-Range: bytes 0-9/10\r\n", 29);
		memset(line, 'a', sizeof(line));
		memcpy(line, "ETag: " ETAG, 6 + strlen(ETAG));
		http_answer_header(&a, line, sizeof(line));
		ok(http_answer_check(&ask, &a, &s, &l, why, sizeof(why)) == HTTP_UNPROVEN,
		   "an ETag longer than its field: unproven (%s)", why);
	}
	return tap_done();
}
