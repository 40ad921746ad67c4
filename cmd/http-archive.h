/*
 * http-archive.h - hsmfs-http's archives (ARCHIVE events): the snapshot
 * of ev->fd goes to the file's URL (its recorded origin, else the
 * mount's origin joined with its path).
 *
 *   file://   a temporary file beside the target, its mode and mtime
 *             set, fsync, rename into place, the directory synced; the
 *             version is "MTIME_NS-SIZE" of the result.
 *   http(s)   PUT (WebDAV, S3), conditional: If-Match on the recorded
 *             ETag, If-None-Match: * for a file the origin never had.
 *             Whether the origin honours them is probed at start
 *             (http_conditions_probe()).  One that ignores them (nginx's
 *             dav module) is checked with a HEAD before the PUT, and
 *             after it the object is read back and compared with the
 *             snapshot (objects up to read_back_max bytes): other
 *             bytes are a conflict (ESTALE), and the version is the
 *             validator of that GET, never a HEAD's.  A larger object
 *             is checked by a HEAD: its length ours, its Last-Modified
 *             the Date we sent, its ETag not the one before; else a
 *             conflict.
 *             The window that remains is in hsmfs-http(1).  If the
 *             object's Last-Modified is the mtime we would send (and its
 *             size ours), the mtime goes one second later, so that the
 *             new version never has the old one's validator.  The mtime goes
 *             as the Date header (nginx's dav module keeps it) and, with
 *             s3, as x-amz-meta-mtime.  The version is the PUT's ETag,
 *             else a HEAD's after it (ETag, else Last-Modified).  With
 *             s3, a file over part_size (0: never) goes as a multipart
 *             upload, four parts at a time, aborted on any failure, its
 *             condition on its completion.
 * Unless ev is HSMFS_EVENT_OVERWRITE, an object that is not the recorded
 * version (or one there already, for a new file) is compared with the
 * snapshot byte for byte: the same bytes are archived already (a
 * repeat after a crash), under the version they have; others are a
 * conflict (ESTALE), and nothing is written.
 *
 * Returns 0 with the new version (and the URL for a new file, else "")
 * or an errno for the event's DENY, with a one-line reason in why.
 * progress(arg, bytes) is called as the upload goes.
 *
 * Built of: http-request.h (the requests, the answer's struct),
 * http-file.h (file://), http-multipart.h (S3 multipart uploads).  An
 * ARCHIVE_NAME is http-names.h's.  No globals, no locks: a call uses
 * only the handle it is given, on the caller's thread.
 */
#ifndef HSMFS_HTTP_ARCHIVE_H
#define HSMFS_HTTP_ARCHIVE_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hsmfs/hook.h"
#include "http-request.h"

int http_archive(CURL *c, const struct hsmfs_event *ev, uint16_t flags, const char *url,
		 bool s3, bool honoured, uint64_t read_back_max, uint64_t part_size,
		 void (*progress)(void *arg, uint64_t bytes), void *arg,
		 struct http_archive_out *out);

/*
 * Does the origin honour If-Match on PUT?  A PUT of an empty body to
 * scratch_url with an If-Match no object has: 412 is 1 (honoured), a
 * 2xx is 0 (the scratch object is then removed), anything else -EIO with
 * the answer in why.
 */
int http_conditions_probe(CURL *c, const char *scratch_url, bool s3, char *why, size_t wlen);

#endif
