/*
 * http-multipart.h - S3 multipart uploads of hsmfs-http's archives
 * (http-archive.h: a file over --part-size): s3_multipart() sends the
 * snapshot in parts of part bytes, four at a time, each on a
 * handle of its own, and aborts the upload on any failure.
 *
 * Uploads are journalled (http-journal.h) from their creation to their
 * completion or abort, so that one a crash left is aborted at the next
 * start.  http_multipart_abort(): AbortMultipartUpload of id at url, 0
 * also if it ended already (404), else an errno.  The upload's write
 * condition (If-Match, If-None-Match: *) goes on its
 * CompleteMultipartUpload, where S3 judges it; a 412 there is ESTALE.
 *
 * Shares nothing; no globals.  A call uses the handle it is given (and
 * copies of it) on the caller's thread; the journal locks itself.
 */
#ifndef HSMFS_HTTP_MULTIPART_H
#define HSMFS_HTTP_MULTIPART_H

#include <curl/curl.h>
#include <stdint.h>

#include "hsmfs/hook.h"
#include "http-request.h"

/* The file's mtime and mode as the object's metadata, added to h (NULL when out of memory). */
struct curl_slist *s3_meta_headers(struct curl_slist *h, const struct hsmfs_event *ev);

/*
 * The snapshot of ev to url in parts of part bytes, the write's condition
 * cond (a header line, or NULL) on its completion: 0 with the object's
 * ETag in out->version, or an errno.
 */
int s3_multipart(CURL *c, const struct hsmfs_event *ev, const char *url,
		 uint64_t part, const char *cond,
		 void (*progress)(void *arg, uint64_t bytes), void *arg,
		 struct http_archive_out *out);

int http_multipart_abort(CURL *c, const char *url, const char *id);

#endif
