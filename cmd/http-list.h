/*
 * http-list.h - hsmfs-http's directory listings (PRE_DIR events).
 *
 * http_list() lists the directory of ev (an nginx JSON autoindex page;
 * an HTML index, nginx's, Apache's or python's http.server's, whose files
 * are each asked with a HEAD for their size and version; or with s3 every
 * page of a ListObjectsV2 of its prefix with delimiter "/") and writes the listing into ev->fd as JSON Lines (hsmfs-hooks(7)).
 * A URL that answers with a page that is no index (a directory's
 * index.html) is listed from the page's links, each asked with a HEAD,
 * and marked with a "partial" line (hsmfs-http(1)).
 * c: an easy handle set up by the caller, whose write and header
 * callbacks this call replaces.  origin: the mount's origin (the bucket's
 * URL with s3); page: keys a ListObjectsV2 page, 0: the server's default;
 * s3_meta: each object's x-amz-meta-mtime and x-amz-meta-mode (rclone's
 * too) from a HEAD of it, 16 at a time (ListObjectsV2 has no metadata).  Returns 0 or an errno for the event's DENY, with a
 * one-line reason in why.
 */
#ifndef HSMFS_HTTP_LIST_H
#define HSMFS_HTTP_LIST_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

#include "hsmfs/hook.h"

/*
 * A response body kept in memory (CURLOPT_WRITEFUNCTION with
 * CURLOPT_WRITEDATA a struct http_body): NUL-terminated, at most max
 * bytes (more fails the transfer).  The caller frees p.
 */
/*
 * s with every byte outside the unreserved set %-encoded (those in keep
 * kept too, e.g. "/" for a path); malloc'ed, NULL when out of memory.
 */
char *http_escape(const char *s, const char *keep);

/*
 * An S3 origin's URL split into its bucket's URL (*ret_bucket, with no
 * '/' at its end) and the key prefix below it (*ret_prefix, decoded: ""
 * or ending in '/').  Path-style (http://HOST/BUCKET/PRE/FIX/: the first
 * segment names the bucket), or virtual-hosted on AWS's own host names
 * (https://BUCKET.s3.REGION.amazonaws.com/PRE/FIX/: the whole path is
 * the prefix).  0, or -ENOMEM (-EINVAL: no scheme://).  The caller frees
 * both.
 */
int http_s3_split(const char *origin, char **ret_bucket, char **ret_prefix);

/* S3 wants the payload hash signed; a GET or HEAD has an empty one. */
#define HTTP_S3_EMPTY_PAYLOAD \
	"x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/*
 * Every request asks for the object's own bytes: a server may answer a
 * request without Accept-Encoding in any content coding (RFC 9110
 * 12.5.3), and a coded body or its length is not the file's.
 */
#define HTTP_IDENTITY "Accept-Encoding: identity"

struct http_body {
	char *p;
	size_t n, max;
};
size_t http_body_cb(char *b, size_t sz, size_t n, void *arg);

/*
 * What sends each request of http_list() and http_lookup():
 * curl_easy_perform() unless the program sets another (hsmfs-http's chain
 * of proxies sends a request through each member in turn until one gets
 * an answer).  It may perform c more than once: a body kept starts again
 * at each response's status line.  Set once, before any call.
 */
extern CURLcode (*http_perform)(CURL *c);

int http_list(CURL *c, const struct hsmfs_event *ev, const char *origin, bool s3,
	      unsigned page, bool s3_meta, char *why, size_t whylen);

/*
 * A PRE_LOOKUP: the one entry of the last component of ev->path, found
 * with a HEAD of its URL (nginx: 200 a file, a redirect to a slash a
 * directory; S3: a key, else a prefix some key is below), written as
 * http_list() writes it, or nothing when there is no such name.  Returns
 * 0 or an errno, with the reason in why.
 */
int http_lookup(CURL *c, const struct hsmfs_event *ev, const char *origin, bool s3,
		char *why, size_t whylen);

#endif
