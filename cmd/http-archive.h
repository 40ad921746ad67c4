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
 */
#ifndef HSMFS_HTTP_ARCHIVE_H
#define HSMFS_HTTP_ARCHIVE_H

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

int http_archive(CURL *c, const struct hsmfs_event *ev, uint16_t flags, const char *url,
		 bool s3, bool honoured, uint64_t read_back_max, uint64_t part_size, void (*progress)(void *arg, uint64_t bytes),
		 void *arg, struct http_archive_out *out);

/*
 * S3 multipart uploads are journalled (http-journal.h) from their
 * creation to their completion or abort, so that one a crash left is
 * aborted at the next start.  http_multipart_abort(): AbortMultipartUpload
 * of id at url, 0 also if it ended already (404), else an errno.  The
 * upload's write condition (If-Match, If-None-Match: *) goes on its
 * CompleteMultipartUpload, where S3 judges it; a 412 there is ESTALE.
 */
int http_multipart_abort(CURL *c, const char *url, const char *id);

/*
 * Does the origin honour If-Match on PUT?  A PUT of an empty body to
 * scratch_url with an If-Match no object has: 412 is 1 (honoured), a
 * 2xx is 0 (the scratch object is then removed), anything else -EIO with
 * the answer in why.
 */
int http_conditions_probe(CURL *c, const char *scratch_url, bool s3, char *why, size_t wlen);

/*
 * An ARCHIVE_NAME: the object at ev->origin removed (DELETE), or moved
 * to the URL to (WebDAV MOVE with Overwrite; S3 CopyObject, then
 * DeleteObject; file:// rename), conditional on ev->version as above.
 * An object gone already is ENOENT, or, for a rename whose new URL
 * holds the version, done (a repeat after a crash).  0 with the moved
 * object's version and URL in out, or an errno.
 */
int http_archive_name(CURL *c, const struct hsmfs_event *ev, const char *to, bool s3,
		      struct http_archive_out *out);

/*
 * An ARCHIVE_NAME of a directory (HSMFS_NAME_MKDIR, HSMFS_NAME_RMDIR) at
 * url (ending in "/").  Made: WebDAV MKCOL (its parents first where the
 * server wants them; one there already is done), S3 an empty "path/"
 * object (the marker other tools make), file:// mkdir with its parents.
 * Removed so that nothing the mount never saw goes with it: file://
 * rmdir (only if empty); WebDAV, whose DELETE of a collection is
 * recursive, only if its listing reads empty ("[]" of nginx's JSON
 * autoindex; anything else keeps it), then DELETE, and a name made at
 * the origin between the look and the DELETE is lost with it
 * (hsmfs-http(1)); S3 the "path/" marker (keys below it are objects of
 * their own, left, and keep the prefix listed).  A directory kept (not
 * empty there) is ENOTEMPTY, said in why: the daemon asks again after
 * the ops of files recorded since (archive.c).
 */
int http_archive_dir(CURL *c, const char *url, bool made, bool s3,
		     struct http_archive_out *out);

#endif
