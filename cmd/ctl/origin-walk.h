/*
 * origin-walk.h - an origin's files, as import --listing and refresh take
 * them: an nginx JSON autoindex (or any HTML index, each file then asked
 * for its size by a HEAD) walked directory by directory, or an S3
 * bucket's (or prefix's) ListObjectsV2 pages.  Each file becomes an item,
 * as a manifest's line does.
 *
 * Shared by import.c, refresh.c, listings.c (struct s3opts, the options
 * recorded) and store-tree.c (struct item).  A walk says why it failed
 * on standard error ("hsmfsctl: ...") and shows its progress on a
 * terminal (tty_progress(): ctl.h); it returns 0 or -errno, never an
 * exit code, which its callers choose.
 */
#ifndef HSMFS_CTL_ORIGIN_WALK_H
#define HSMFS_CTL_ORIGIN_WALK_H

#include <stdbool.h>
#include <stddef.h>

#include "manifest.h"

/* One file to import: a manifest's line, or a file a listing named. */
struct item {
	struct manifest_entry e;
	unsigned line;
};

/* import's --s3 options (all unset but page for an nginx listing). */
struct s3opts {
	bool s3;
	const char *sigv4;
	const char *keys_file;
	unsigned page;
};

/*
 * The files of the listing at url (with so's options), appended to
 * *items (*n of them, room for *cap; the caller frees them with
 * items_free()); with only (not NULL), those below that path ("" or
 * ending in '/'; shallow: directly in it).  0 or -errno (said why).
 */
int collect(const char *url, const struct s3opts *so, const char *only, bool shallow,
	    struct item **items, size_t *n, size_t *cap);
void items_free(struct item *items, size_t n);

#endif
