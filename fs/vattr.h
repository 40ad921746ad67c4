/*
 * vattr.h - the user.hsmfs.* attributes and the statistics (vattr.c): the
 * engine's state as a front end shows it.  Takes S.lock itself; called
 * without it.
 */
#ifndef HSMFS_VATTR_H
#define HSMFS_VATTR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "events.h"

struct inode;

struct stats_snapshot;

void events_get_stats(struct events_stats *ret);
/*
 * Every figure of user.hsmfs.stats (stats.h) but the front end's own
 * (pt, prefetch), each taken under its owner's lock.
 */
void events_stats_snapshot(struct stats_snapshot *s);
/* The kernel dropped a range of a read-watched file's page cache (ops-inval.c). */
void events_cache_dropped(void);

/*
 * Virtual xattr "user.hsmfs.*" of in (size: the file's size in the
 * store).  Returns the value length, or -ENODATA, -ERANGE.
 */
ssize_t events_xattr(struct inode *in, uint64_t size, const char *name,
		     char *buf, size_t bufsize);


#endif
