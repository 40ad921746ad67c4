/*
 * ops-inval.h - the kernel's caches dropped (ops-inval.c), for main.c
 * (through ops.h) to hand the engine: the page cache of a range or of
 * every file, a node's attributes, a name, every name, and everything
 * after a takeover.  Calls into the session, ops_set_session()'s;
 * without one they do nothing.
 */
#ifndef HSMFS_OPS_INVAL_H
#define HSMFS_OPS_INVAL_H

#include <stdbool.h>
#include <stdint.h>

struct inode;

/*
 * Drop the kernel's page cache of in's [off, off + len) (len 0: to the
 * end).  Must not be called from a read or write of that inode, whose
 * pages the kernel holds until its reply; see events.h.
 */
void ops_invalidate(struct inode *in, uint64_t off, uint64_t len);
/*
 * Drop the kernel's attributes of in (not its pages): the next stat asks.
 * Any thread, from any request (no page or inode lock is taken); no
 * engine lock held.
 */
void ops_invalidate_attr(struct inode *in);
/*
 * Every name the kernel holds, positive or negative, is asked again at
 * its next use (FUSE_NOTIFY_INC_EPOCH, Linux 6.16): for names made in
 * the store that the daemon cannot list (an import into a live mount).
 * Any thread, any request.  false: the kernel cannot (ops_epoch unset),
 * or the write failed.
 */
bool ops_invalidate_names(void);
/*
 * The kernel's entry of name in dir is stale.  Never waits for dir's
 * lock (a rename into an unlisted directory holds it while its lookup
 * waits for the lister, which calls this): where the kernel has the
 * epoch, nothing here (the caller calls ops_invalidate_names() once its
 * changes are made); elsewhere dropped soon on the invalidator thread.
 * Any thread, any lock held.
 */
void ops_invalidate_entry(struct inode *dir, const char *name);
/*
 * After a daemon taking over: every name asked again, and every node's
 * attributes and every directory's cached listing dropped soon on the
 * invalidator thread (what the last daemon changed and died before
 * telling the kernel).  Any thread.
 */
void ops_invalidate_all_later(void);
/*
 * Drop the kernel's page cache of every regular file, soon, on the
 * invalidator thread (a hook that watches reads joined).  Any thread,
 * any lock held.
 */
void ops_invalidate_files_later(void);
/*
 * The engine's invalidations (front.h: events_front.invalidate), each
 * by the function above for its kind.
 */
struct inval;
void ops_invalidate_front(const struct inval *iv);
/* Stop the invalidator thread: after the session's unmount, before its destroy. */
void ops_inval_stop(void);

#endif
