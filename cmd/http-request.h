/*
 * http-request.h - the requests of hsmfs-http's archives (http-archive.h,
 * http-multipart.h, http-names.h), each on the caller's easy handle:
 * prepare() resets it to a plain request of a URL whose answer's status,
 * validators and length are kept (struct seen; a body is discarded),
 * perform() sends it, request() both with a method and headers of its
 * own.  The snapshot as an upload's body (struct upload, read_cb()); an
 * object compared byte for byte with the snapshot (same_bytes()); the
 * WebDAV collections above a URL made (make_collections()); the
 * recorded kind of validator of an answer (validator()).  And what every
 * archive operation answers (struct http_archive_out).
 *
 * Shares those structs.  No globals, no locks: a call uses only the
 * handle it is given, on the caller's thread.
 */
#ifndef HSMFS_HTTP_REQUEST_H
#define HSMFS_HTTP_REQUEST_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hsmfs/hook.h"

struct http_archive_out {
	char version[1024];
	char origin[4096];
	unsigned parts;          /* of a multipart upload, 0: one PUT */
	char why[8400];
};

/* What one request saw: its status and validators. */
struct seen {
	long status;
	char etag[1024], lastmod[128];
	long long length;  /* Content-Length, -1: none */
};

/* The snapshot as a PUT's body. */
struct upload {
	int fd;
	uint64_t pos, size;
	void (*progress)(void *arg, uint64_t bytes);
	void *arg;
	uint64_t told;
};

/* CURLOPT_WRITEFUNCTION: the body dropped. */
size_t discard(char *b, size_t sz, size_t n, void *arg);
/* CURLOPT_READFUNCTION of a struct upload: the snapshot, progress said each MiB. */
size_t read_cb(char *b, size_t sz, size_t n, void *arg);
/* The handle reset to a plain request of url with our callbacks. */
void prepare(CURL *c, const char *url, struct seen *s, struct curl_slist *hdrs);
/* The request as prepared: 0 with s->status, or an errno (the reason in why, if given). */
int perform(CURL *c, struct seen *s, char *why, size_t wlen);
/* A request of method to url with extra headers h: 0 with s, or an errno. */
int request(CURL *c, const char *method, const char *url, struct curl_slist *h,
	    struct seen *s, char *why, size_t wlen);
/* The recorded kind of validator of what s saw ("" if none). */
const char *validator(const struct seen *s, const char *recorded);
/* Is the object at url byte for byte the snapshot?  1 yes, 0 no, or -errno. */
int same_bytes(CURL *c, const char *url, const struct hsmfs_event *ev,
	       struct curl_slist *hdrs, char *why, size_t wlen, struct seen *ret_seen);
/* WebDAV without create_full_put_path: each collection of url's path, made. */
void make_collections(CURL *c, const char *url, struct curl_slist *hdrs);

#endif
