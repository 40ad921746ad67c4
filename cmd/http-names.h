/*
 * http-names.h - hsmfs-http's ARCHIVE_NAME events at the origin: an
 * object removed or moved (http_archive_name()), a directory made or
 * removed (http_archive_dir()); file:// origins by http-file.h.  The
 * conditions and the answer (struct http_archive_out) are as
 * http-archive.h describes for archives.
 *
 * Shares nothing; no globals, no locks: a call uses only the handle it
 * is given, on the caller's thread.
 */
#ifndef HSMFS_HTTP_NAMES_H
#define HSMFS_HTTP_NAMES_H

#include <curl/curl.h>
#include <stdbool.h>

#include "hsmfs/hook.h"
#include "http-request.h"

/*
 * An ARCHIVE_NAME: the object at ev->origin removed (DELETE), or moved
 * to the URL to (WebDAV MOVE with Overwrite; S3 CopyObject, then
 * DeleteObject; file:// rename), conditional on ev->version as an
 * archive is (http-archive.h).  An object gone already is ENOENT, or,
 * for a rename whose new URL holds the version, done (a repeat after a
 * crash).  0 with the moved object's version and URL in out, or an
 * errno.
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
 * the ops of files recorded since (namer.c).
 */
int http_archive_dir(CURL *c, const char *url, bool made, bool s3,
		     struct http_archive_out *out);

#endif
