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
 * do all, also for writing under a watcher (ops.c asks the watcher one
 * PRE_MODIFY of the whole file at such an open: pt_active()), and none
 * does while opens through the page cache exist.  An open that could
 * not have started passthrough (O_DIRECT, O_APPEND, its reads watched,
 * its writes watched or to be seen by the daemon) then passes through
 * its mappings only: its reads and writes come to the daemon (direct
 * I/O), which writes where they say and asks the hooks about each.
 * Where the kernel or libfuse refuses (unprivileged mounts: registering
 * a backing file needs CAP_SYS_ADMIN; kernels before 6.9), opens take
 * the daemon's path as before and the counters say so.
 *
 * Locks: one mutex of this module guards the inode_head fields it owns;
 * nothing blocking runs under it (the store open and the kernel's
 * registration ioctls run outside, behind pt_busy, which other opens of
 * that inode wait out).
 */
#ifndef HSMFS_PASSTHROUGH_H
#define HSMFS_PASSTHROUGH_H

#include <stdbool.h>
#include <stdint.h>

struct fuse_conn_info;
struct fuse_file_info;
struct fuse_req;
struct inode;

/* At FUSE init: ask for passthrough if wanted and offered. */
void pt_init(struct fuse_conn_info *conn, bool wanted);

/*
 * Decide the mode of an open of in whose store descriptor is fi->fh
 * (opened with fi->flags), after its state was loaded: sets
 * fi->backing_id (passthrough), or leaves fi as it is (cached).  Call pt_released()
 * for every open this was called for, also when the open's reply fails.
 */
void pt_opened(struct fuse_req *req, struct inode *in, struct fuse_file_info *fi);
void pt_released(struct fuse_req *req, struct inode *in, struct fuse_file_info *fi);

/* Is in open in passthrough mode (or becoming so)? */
bool pt_active(struct inode *in);

struct pt_stats {
	bool enabled;          /* the kernel accepted FUSE_PASSTHROUGH */
	uint64_t opens;        /* opens passed through */
	uint64_t refused;      /* backing registrations the kernel refused */
};
void pt_get_stats(struct pt_stats *ret);

#endif
