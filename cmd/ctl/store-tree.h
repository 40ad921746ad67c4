/*
 * store-tree.h - an import's writes to a store's tree: a placeholder (or
 * an unlisted directory) made from an item, with the directories on its
 * way (import_one(), open_parent()), or removed again when its batch
 * failed (remove_path()); and a live mount told to read again what
 * changed below it, since the import wrote its store behind the daemon's
 * back (reload(), reload_made()).
 *
 * Shared by import.c and import-sync.c.  Returns 0 or -errno (with err
 * set where there is one), but reload() and reload_made(): 0 or -1,
 * having said why on standard error.
 */
#ifndef HSMFS_CTL_STORE_TREE_H
#define HSMFS_CTL_STORE_TREE_H

#include <stdbool.h>
#include <stddef.h>

#include "place.h"

/* Entries an import makes, or a sync removes, in one transaction. */
#define BATCH 1000

struct item;
struct meta;

int open_parent(int root, char *path, char **ret_name, struct meta *m);
int reload(const char *mnt, const char *rel);
/* qsort()'s order of strings */
int cmp_str(const void *a, const void *b);
int reload_made(const char *mnt, const struct item *items, const bool *made, size_t n);
int import_one(int root, const char *mnt, struct meta *m, struct item *it,
	       bool *created, enum place_outcome *out, char *err, size_t errlen);
int remove_path(int root, const char *rel, bool is_dir);

#endif
