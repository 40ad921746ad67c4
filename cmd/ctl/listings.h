/*
 * listings.h - the listings a store took: STORE/.hsmfs/listings records
 * each URL that import --listing imported (with its --s3 options), so
 * that refresh lists it again and set-origin can move it.  The file's
 * form is told in listings.c.
 *
 * Shared by import.c (listing_record()), refresh.c (listing_recs_read())
 * and set-origin.c (all of them).  These print nothing but
 * listing_record(), which warns; they return 0 or -errno, and
 * listing_record() 0 or -1 (a listing not recorded does not fail the
 * import: the caller's exit code does not change).
 */
#ifndef HSMFS_CTL_LISTINGS_H
#define HSMFS_CTL_LISTINGS_H

#include <stddef.h>

#include "origin-walk.h"

/* One listing recorded: its URL and the options to list it again. */
struct listing_rec {
	char *url;        /* owned */
	struct s3opts so; /* so.sigv4, so.keys_file: owned */
};

void listing_recs_free(struct listing_rec *v, size_t n);
int listing_recs_read(const char *store, struct listing_rec **ret, size_t *ret_n);
int listing_recs_write(const char *store, const struct listing_rec *v, size_t n);
int listings_lock(const char *store);
int listing_record(const char *store, const char *url, const struct s3opts *so);

#endif
