/*
 * passthrough.h - kernel FUSE passthrough for resident files.
 *
 * A file whose bytes are all present when it is opened may be opened in
 * passthrough mode: the kernel reads, writes and maps the store file
 * itself, the daemon sees none of it (native speed).  The mode is
 * decided at open and fixed for that open, the way the kernel decides at
 * open whether a file raises pre-content events:
 *   - only regular files with nothing missing, filling, changing or
 *     being evicted (events_pass_begin()), not O_DIRECT or O_APPEND;
 *   - not for writing while a PRE_MODIFY watcher is subscribed (it must
 *     see every write) or while the store holds evictable bytes (a write
 *     that meets a full store evicts and retries in the daemon);
 *   - a file with state opened for writing becomes dirty at open and
 *     again at release (events_unseen_writes()), with its new size;
 *   - a file in passthrough mode is never evicted (INODE_PASSTHROUGH).
 * The kernel allows one backing file per inode and requires every open
 * of an inode in passthrough mode to pass through: while one does, so
 * do all, also for writing under a watcher (the FUSE layer asks the watcher one
 * PRE_MODIFY of the whole file at such an open: pt_active()), and none
 * does while opens through the page cache exist.  An open that could
 * not have started passthrough (O_DIRECT, O_APPEND, its reads watched,
 * its writes watched or to be seen by the daemon) then passes through
 * its mappings only: its reads and writes come to the daemon (direct
 * I/O), which writes where they say and asks the hooks about each.
 * Where the kernel or libfuse refuses (unprivileged mounts: registering
 * a backing file needs CAP_SYS_ADMIN; kernels before 6.9), opens take
 * the daemon's path and the counters say so.
 *
 * The decision of an open and the hooks' subscriptions are one atomic
 * step.  An open reads the subscription generation (pt_gen()) before it
 * tests any mask or subtree; every subscription change bumps it
 * (pt_subscriptions_changed(), from the engine once the new mask is in
 * place and before the hook's WELCOME is sent); pt_opened() commits the
 * open's mode under this module's lock only if the generation is still
 * the one read, else it registers nothing and says PT_AGAIN: the caller
 * undoes its open and decides again, asking what the new subscriptions
 * ask.  So an open either committed before the change (it is an open
 * made before the hook subscribed) or decided after it, on what it put
 * in place.  The same holds for the inode's own mode: an open for
 * writing that would join passthrough under a PRE_MODIFY watcher without
 * having been asked the whole file at open gets PT_AGAIN too, decided
 * under the same lock as the join.
 *
 * Locks: one mutex of this module (P.lock) guards the inode_head fields
 * it owns and the generation's bumps; nothing blocking runs under it
 * (the store open and the kernel's registration ioctls run outside,
 * behind pt_busy, which other opens of that inode wait out).  It nests
 * inside the engine's lock (S.lock -> P.lock), never the other way.
 */
#ifndef HSMFS_PASSTHROUGH_H
#define HSMFS_PASSTHROUGH_H

#include <stdbool.h>
#include <stdint.h>

#include "stats.h" /* struct pt_stats */

struct fuse_conn_info;
struct fuse_file_info;
struct fuse_req;
struct inode;

/*
 * A daemon taking over: the open whose descriptor is fd, made by the
 * last daemon with what r says (saved.h), counted as that one counted
 * it: the kernel still passes it through with the backing id it got.
 */
struct saved_open;
void pt_adopt(struct inode *in, int fd, const struct saved_open *r);

/* At FUSE init: ask for passthrough if wanted and offered. */
void pt_init(struct fuse_conn_info *conn, bool wanted);

/*
 * The subscription generation: read (acquire) before an open tests a
 * mask or a hook's subtree; pass it to pt_opened().
 */
uint64_t pt_gen(void);
/* A hook joined or left, its mask in place already.  S.lock held. */
void pt_subscriptions_changed(void);

/*
 * Decide the mode of an open of in whose store descriptor is fi->fh
 * (opened with fi->flags), after its state was loaded, on what was
 * decided since gen was read (fi->direct_io; modify_asked: one
 * PRE_MODIFY of the whole file was allowed for this open): sets
 * fi->backing_id (passthrough), or leaves fi as it is (cached), and
 * returns 0, or PT_KILLED: the same, and the kernel's attributes of in
 * are to be dropped (ops_invalidate_attr(), by the caller): set-ID bits
 * of the file were dropped for this open (privs.h), or it is an open for
 * writing passed through, whose mapped writes move the store file's
 * times unseen (pt_write_opens, inode.h); call pt_released() for every such open, also
 * when the open's reply fails.  PT_AGAIN: the subscriptions changed since gen, or
 * the open is for writing, must join passthrough, a PRE_MODIFY watcher is
 * subscribed and modify_asked is false: nothing was registered (no
 * pt_released()); decide again from a new pt_gen().
 */
#define PT_AGAIN 2 /* not EVENTS_PARKED (1): open_steps() returns either */
#define PT_KILLED 3
int pt_opened(struct fuse_req *req, struct inode *in, struct fuse_file_info *fi,
	      uint64_t gen, bool modify_asked);
void pt_released(struct fuse_req *req, struct inode *in, struct fuse_file_info *fi);

/* Is in open in passthrough mode (or becoming so)? */
bool pt_active(struct inode *in);

void pt_get_stats(struct pt_stats *ret);

#endif
