/*
 * ops.h - the FUSE low-level operations: a passthrough to the store.
 *
 * Every request gets exactly one reply.  Each operation is split into
 * do_* workers that return 0 or -errno and never reply, and the handler
 * that turns their result into the one reply, or parks the request on
 * the engine, whose continuation then makes it (ops-int.h says the rule
 * and where each operation lives).  Every store access is relative to a
 * descriptor below the store root (no absolute paths, O_NOFOLLOW /
 * AT_SYMLINK_NOFOLLOW on the last component), so nothing outside the
 * store is ever reached, and STORE/.hsmfs is neither listed nor
 * reachable by name.
 *
 * State: one mount per process; ops_init() must be called once before
 * the session starts.
 */
#ifndef HSMFS_OPS_H
#define HSMFS_OPS_H

#include <stdbool.h>
#include <stdint.h>

struct fuse_lowlevel_ops;
struct fuse_session;

struct ops_config {
	double entry_timeout;    /* seconds the kernel may cache a name */
	double attr_timeout;     /* seconds the kernel may cache attributes */
	double negative_timeout; /* seconds the kernel may cache ENOENT */
	bool writeback;          /* ask for the kernel writeback cache */
	bool passthrough;        /* pass resident files through (passthrough.h) */
	bool default_perms;      /* the kernel checks permissions: it may
				  * enforce POSIX ACLs too */
	bool cold_direct;        /* read-only opens of files with bytes missing
				  * bypass the page cache (FOPEN_DIRECT_IO) */
};

/* Background requests (readahead, async direct I/O) the kernel may send at once. */
#define OPS_MAX_BACKGROUND 256

void ops_init(const struct ops_config *cfg);
/* The session, for cache invalidations (set before the loop starts). */
void ops_set_session(struct fuse_session *se);
/*
 * Drop the kernel's page cache of in's [off, off + len) (len 0: to the
 * end).  Must not be called from a read or write of that inode, whose
 * pages the kernel holds until its reply; see events.h.
 */
struct inode;
void ops_invalidate(struct inode *in, uint64_t off, uint64_t len);
/* Drop the kernel's entry of name in dir; never from a request that holds dir's lock. */
void ops_invalidate_entry(struct inode *dir, const char *name);
/* Has the FUSE session ended (unmounted)?  Any thread. */
bool ops_exiting(void);

/*
 * The one reply of a read: an error, or [off, off + len) of the store
 * descriptor fd.  Also the engine's for the reads it parked (events.h,
 * cfg.reply).
 */
struct fuse_req;
void ops_read_reply(struct fuse_req *req, struct inode *in, int fd, uint64_t off,
		    uint64_t len, int res);
/* Free what ops keeps between requests (the read reply buffers); at exit. */
void ops_shutdown(void);
/*
 * Drop the kernel's page cache of every regular file, soon, on the
 * invalidator thread (a hook that watches reads joined).  Any thread,
 * any lock held.
 */
void ops_invalidate_files_later(void);
/* Stop the invalidator thread: after the session's unmount, before its destroy. */
void ops_inval_stop(void);
const struct fuse_lowlevel_ops *ops_table(void);
unsigned long ops_table_size(void);

#endif
