/*
 * evict.h - the eviction mechanism: dropping a given file's ranges.
 *
 * Whether a file may go, which of its ranges, and which file first is
 * the policy's (evict-policy.h); evict.c asks it under S.lock and
 * carries the answer out in the durability order (state.h, step 2):
 * the database first, then memory, then the placeholder mark, then the
 * punch, and the kernel's page cache last.  The bytes freed are counted
 * in the cache (cache_account, cache_evicted).
 *
 * Eviction holds the file, not the engine: from evict_begin() to
 * evict_end() (evict.c) the file is marked evicting, and reads of its
 * missing ranges, opens and user changes of it wait (evict_wait(), fstate.h).
 */
#ifndef HSMFS_EVICT_H
#define HSMFS_EVICT_H

#include <stdbool.h>
#include <stdint.h>

struct fstate;
struct inode;
struct meta_victim;

/*
 * The evictor's handler (struct evict_handlers, registered in main.c):
 * reach the file of v through its path, check its inode number, and
 * evict what the policy lets go of it: all of it, or of an open file
 * its ranges away from its reader.  0 with *ret_freed set, or -errno
 * (-ESTALE: the path no longer leads to that file; it is forgotten;
 * -EBUSY: not evictable now).  With in_order, a file used since the
 * database's time (v->atime) is passed over with -EAGAIN: it is not
 * the least recent, and its time is queued to be written so that the
 * next list has it in its place.  Without S.lock.
 */
int evict_victim(const struct meta_victim *v, bool in_order, uint64_t *ret_freed);
/*
 * The regular file ino (0: whichever) at path (below the store's root,
 * as recorded), looked up component by component with no symlink
 * followed, its state loaded: 0 with *ret (a lookup reference:
 * inode_forget(*ret, 1)), or -errno (-ESTALE: the path does not lead to
 * it now; the row keeps it).  Without S.lock.
 */
int walk_to(const char *path, uint64_t ino, struct inode **ret);
/* Is there a name at path on the mount now (of any type)?  Without S.lock. */
bool walk_finds(const char *path);

#endif
