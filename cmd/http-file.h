/*
 * http-file.h - hsmfs-http's archives to a file:// origin, on the local
 * file system: archive_file() is http_archive()'s (http-archive.h says
 * what it does), dir_file() http_archive_dir()'s and name_file()
 * http_archive_name()'s (http-names.h).  A file's version there is
 * "MTIME_NS-SIZE" of the file (file_version()).
 *
 * Shares nothing; no globals, no locks: each call works on the paths it
 * is given, on the caller's thread.
 */
#ifndef HSMFS_HTTP_FILE_H
#define HSMFS_HTTP_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "hsmfs/hook.h"
#include "http-request.h"

/* The snapshot of ev to the file:// url: 0 with out's version (and origin if new), or an errno. */
int archive_file(const struct hsmfs_event *ev, uint16_t flags, const char *url,
		 struct http_archive_out *out);
/* file://: a directory made with its parents, or removed if empty */
int dir_file(const char *url, bool made, struct http_archive_out *out);
/* file://: the object's removal or rename (no validator but our own) */
int name_file(const struct hsmfs_event *ev, const char *from, const char *to,
	      struct http_archive_out *out);

#endif
