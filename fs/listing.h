/*
 * listing.h - applying a fill hook's listing of a directory to the
 * store and the database (listing.c).
 */
#ifndef HSMFS_LISTING_H
#define HSMFS_LISTING_H

#include <stdbool.h>
#include <stdint.h>

struct inode;

/*
 * Commit the listing (or, with name, the lookup answer) in stage below
 * dir under the names plan names_plan (names.h): a first listing makes
 * every entry and records dir as listed; with refresh, the difference
 * to what dir holds is applied; with name, only that entry is made.
 * Without S.lock.  0 or -errno; *ret_partial, on success: a first
 * listing from a page's links (a "partial" line), not an index.
 */
int apply_listing(struct inode *dir, int stage, const char *name, bool refresh,
		  uint64_t names_plan, bool *ret_partial);

#endif
