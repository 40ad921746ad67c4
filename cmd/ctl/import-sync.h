/*
 * import-sync.h - one import into a store (struct import_run, which
 * import_apply() in import.c applies), and what a sync adds to it
 * (import --sync, refresh): before anything is made, what the origin's
 * listing no longer names goes (sync_prune()), and a user's own file is
 * never made over (sync_keep()).  What it keeps it says on standard
 * output ("kept 'PATH': why") and counts in the run.
 *
 * The run is declared here, not beside import_apply(), because this file
 * needs it and import.c calls into this one: a header of import.c's
 * would make the two a circle (tests/layers.py).  Shared by import.c and
 * refresh.c.  sync_prune() returns 0 or -1, having said why.
 */
#ifndef HSMFS_CTL_IMPORT_SYNC_H
#define HSMFS_CTL_IMPORT_SYNC_H

#include <stdbool.h>
#include <stddef.h>

struct item;
struct meta;

/*
 * One import into a store: items to make; for a sync (import --sync,
 * refresh), also the part of the tree its listing covers, below sub,
 * where what the listing no longer names goes.
 */
struct import_run {
	const char *store;     /* the store's path */
	const char *mnt;       /* its live mount, or NULL: the store is locked */
	const char *src;       /* the manifest or listing, for messages */
	struct item *items;    /* the caller's */
	size_t n;
	bool sync;
	const char *base;      /* sync: the listing's URL, ending in '/' */
	const char *sub;       /* sync: "" or a directory's path ending in '/' */
	bool shallow;          /* sync: only the names directly in sub */
	struct item **sorted;  /* items by path */
	size_t nnew, nchanged, nsame, nremoved, nkept;
};

/* What a sync does with an item: make it, leave it (the same), keep the user's. */
enum keep { K_APPLY, K_SAME, K_KEEP };

enum keep sync_keep(struct import_run *r, int root, struct meta *m, const struct item *it);
int sync_prune(struct import_run *r, int root, struct meta *m);

#endif
