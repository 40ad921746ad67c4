/*
 * rebuild.h - recreate lost metadata from the store's placeholder marks.
 *
 * When the database had to be thrown away, every regular file below the
 * store root that carries STORE_MARKER_XATTR becomes a placeholder row
 * again (nothing present; origin and version from the mark), so nothing
 * is ever served as present by default.  Walks the whole tree with
 * descriptors, never following symlinks, skipping STORE/.hsmfs.  Used
 * only after corruption: a normal mount never scans.
 */
#ifndef HSMFS_REBUILD_H
#define HSMFS_REBUILD_H

#include <stdint.h>

struct meta;

/* 0 or -errno; *ret_found counts the placeholders recreated. */
int rebuild_from_marks(int root_fd, struct meta *m, uint64_t *ret_found);

#endif
