/*
 * dirs.h - lazy directories (dirs.c): listings and lookups asked of a
 * fill hook, committed on the lister thread.
 */
#ifndef HSMFS_DIRS_H
#define HSMFS_DIRS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "inode.h"
#include "events.h" /* EVENTS_PARKED */


struct event;
struct front_req;
struct inode;

/* Set the zero-setup root up and events_lazy_dirs, start the lister.
 * Without S.lock. */
int dirs_init(void);
/*
 * Has the root never been listed (a zero-setup store whose first listing
 * is still to come)?  After dirs_init(); for the mount-time probe
 * (supervise.h).  Without S.lock.
 */
bool dirs_root_unlisted(void);
/* Stop the lister once the listings queued are committed.  Without
 * S.lock, after S.stopping is set. */
void dirs_shutdown(void);
/*
 * The hook allowed a listing and every watcher too: ev (now COPYING)
 * goes to the lister thread, which commits it and completes it, so that
 * the hook's connection goes on reading answers meanwhile.  Without a
 * lister (stopping) it is committed here, S.lock dropped meanwhile.
 * S.lock held.
 */
void commit_listing(struct event *ev);

#endif
