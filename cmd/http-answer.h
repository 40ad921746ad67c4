/*
 * http-answer.h - does an origin's answer prove its bytes?
 *
 * One rule, in one function: the body of a response to a ranged GET is
 * kept only when every header that changes what the body means says it
 * is exactly the bytes asked, of the version recorded:
 *   - the status is 206 with a Content-Range that parses (RFC 9110
 *     14.4: the unit "bytes", case-insensitive; digits only) and equals
 *     the range asked, or 200 (a server that ignored Range: the whole
 *     object, from its first byte);
 *   - the complete length (Content-Range's, or a 200's Content-Length)
 *     is the recorded size; "*" (unknown) does not prove it;
 *   - Content-Length, where sent, is the length those say;
 *   - no content coding (Content-Encoding absent or "identity"), and no
 *     transfer coding but chunked (which the HTTP library removes);
 *   - the validator of the recorded version's kind is present and equal:
 *     an ETag ("..." or W/"...") against ETag, exactly; an HTTP date
 *     against Last-Modified, exactly.
 * A validator or a complete length that differs proves the object
 * changed (HTTP_CHANGED: the file is stale); anything else that does not
 * prove the bytes is HTTP_UNPROVEN (refused, the file left as it is).
 * A 416 whose complete length differs from the recorded size is a
 * change too.  Statuses outside 2xx are the caller's (HTTP_NOT_DATA).
 *
 * Pure: no I/O, no libcurl, no allocation; safe from any thread.
 */
#ifndef HSMFS_HTTP_ANSWER_H
#define HSMFS_HTTP_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What was asked. */
struct http_ask {
	uint64_t lo, hi;        /* the range: bytes [lo, hi), hi > lo */
	uint64_t size;          /* the recorded version's size */
	const char *version;    /* the recorded version (ETag or date), "" if none */
};

#define HTTP_FIELD 1024

/*
 * The headers of one response, as they arrive (http_answer_header());
 * http_answer_reset() at each status line (a redirect, a 100 Continue).
 */
struct http_answer {
	long status;
	bool has_range, has_length, has_etag, has_lastmod, has_coding, has_te;
	char range[128];                 /* Content-Range's value */
	char length[32];                 /* Content-Length's value */
	char coding[128];                /* Content-Encoding's value */
	char te[128];                    /* Transfer-Encoding's value */
	char etag[HTTP_FIELD], lastmod[HTTP_FIELD];
	bool too_long;                   /* a field did not fit: unproven */
};

enum http_verdict {
	HTTP_KEEP,      /* the body is the object's from *body_start on */
	HTTP_NOT_DATA,  /* not 2xx: the body is no part of the object */
	HTTP_UNPROVEN,  /* refuse the body whole; the file is not changed */
	HTTP_CHANGED,   /* the origin holds another version: refuse, stale */
};

void http_answer_reset(struct http_answer *a);

/*
 * Take one header line (as received: "Name: value\r\n", or a status
 * line "HTTP/x nnn ...", which resets a first).
 */
void http_answer_header(struct http_answer *a, const char *line, size_t len);

/*
 * The verdict on a's body for ask; on HTTP_KEEP *body_start is the
 * offset in the object of its first byte and *body_len its length
 * (UINT64_MAX: not said, a chunked 200 whose end proves it).  why gets a
 * one-line reason for any other verdict.
 */
enum http_verdict http_answer_check(const struct http_ask *ask, const struct http_answer *a,
				    uint64_t *body_start, uint64_t *body_len,
				    char *why, size_t whylen);

#endif
