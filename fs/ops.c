/* ops.c - see ops.h and ops-int.h: the top of the FUSE layer */
#include <assert.h>
#include <fuse_lowlevel.h>
#include <stdatomic.h>

#include "creds.h"
#include "fault.h"
#include "log.h"
#include "ops-int.h"
#include "ops.h"
#include "passthrough.h"
#include "readbuf.h"
#include "front.h"
#include "ready.h"

void ops_init(const struct ops_config *c)
{
	ops_cfg = *c;
	creds_init();
	ops_dir_init();
}

void ops_set_session(struct fuse_session *se)
{
	ops_session = se;
	if (se)
		inval_start();
}

bool ops_exiting(void)
{
	return ops_session && fuse_session_exited(ops_session);
}

void ops_caller(struct front_req *r, struct caller *ret)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(FUSE_REQ(r));

	ret->pid = ctx ? ctx->pid : 0;
	ret->uid = ctx ? ctx->uid : 0;
	ret->gid = ctx ? ctx->gid : 0;
}

bool ops_interrupted(struct front_req *r)
{
	return fuse_req_interrupted(FUSE_REQ(r));
}

void ops_shutdown(void)
{
	readbuf_shutdown();
}

/* ------------------------------------------------------------------ INIT */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	fault_delay(FAULT_INIT);
	/* Truncation always arrives as setattr(size): one place to see it. */
	conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
	if (ops_cfg.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	/* Move data between /dev/fuse and the store without copying it. */
	if (conn->capable & FUSE_CAP_SPLICE_READ)
		conn->want |= FUSE_CAP_SPLICE_READ;
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	/*
	 * POSIX ACLs: where the kernel checks permissions it enforces them
	 * too (and keeps the mode in step); elsewhere nothing would, so they
	 * cannot be set (op_setxattr), rather than be stored and ignored.
	 */
	ops_acls = ops_cfg.default_perms && (conn->capable & FUSE_CAP_POSIX_ACL);
	if (ops_acls)
		conn->want |= FUSE_CAP_POSIX_ACL;
	/*
	 * And a directory's default ACL replaces the umask: the mode of a
	 * create arrives as asked, with the caller's umask beside it, and
	 * the daemon applies one or the other (ops_create_mode()).  The
	 * kernel leaves default ACLs to the filesystem but would apply the
	 * umask first.
	 */
	if (ops_acls && (conn->capable & FUSE_CAP_DONT_MASK)) {
		conn->want |= FUSE_CAP_DONT_MASK;
		ops_dont_mask = true;
	}
	/* Locks stay in the kernel: correct among users of this mount. */
	conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
	/*
	 * Readahead and asynchronous direct I/O are background requests,
	 * of which the kernel sends 12 at a time by default: 12 reads parked
	 * on a slow hook would stall every other file's.  Parked reads hold
	 * no thread here, so let many be in flight (the kernel caps it for
	 * unprivileged mounts at fuse's max_user_bgreq).
	 */
	conn->max_background = OPS_MAX_BACKGROUND;
	conn->congestion_threshold = OPS_MAX_BACKGROUND * 3 / 4;
	/*
	 * Set-ID bits and capabilities dropped on change by hsmfs (privs_kill())
	 * rather than by the kernel, which otherwise asks for
	 * security.capability before every write: one round trip each.
	 */
	if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV_V2) {
		conn->want |= FUSE_CAP_HANDLE_KILLPRIV_V2;
		ops_killpriv = true;
	}
	/*
	 * Files opened past the page cache (ACCESS_PERM) may still be mapped
	 * shared; their mapped pages are not asked about (hsmfs-hooks(7)).
	 */
	if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP)
		conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
	else if (ops_cfg.cold_direct) {
		/* a cold file could not be mapped (ENODEV): Linux 6.6 */
		ops_cfg.cold_direct = false;
		log_info("cold_reads=direct needs Linux 6.6; cold files are read "
			 "through the page cache");
	}
	/*
	 * Missing names are cached long only where the kernel can be told
	 * to drop every name at once: an import into a live mount makes
	 * names the daemon cannot list (ops_invalidate_names()).
	 */
	atomic_store(&ops_epoch, conn->proto_major > 7 ||
				 (conn->proto_major == 7 && conn->proto_minor >= 44));
	if (ops_cfg.negative_timeout < 0)
		ops_cfg.negative_timeout = atomic_load(&ops_epoch) ? ops_cfg.entry_timeout : 0;
	/*
	 * File handles of inodes the kernel no longer caches: it asks
	 * LOOKUP(node id, ".") and ".." of directories (op_lookup()).
	 */
	if (ops_cfg.export && (conn->capable & FUSE_CAP_EXPORT_SUPPORT))
		conn->want |= FUSE_CAP_EXPORT_SUPPORT;
	pt_init(conn, ops_cfg.passthrough);
	ready_live();
}

/* ----------------------------------------------------------------- table */

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.symlink = op_symlink,
	.link = op_link,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.open = op_open,
	.create = op_create,
	.read = op_read,
	.write_buf = op_write_buf,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.fallocate = op_fallocate,
	.copy_file_range = op_copy_file_range,
	.lseek = op_lseek,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.access = op_access,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
};

const struct fuse_lowlevel_ops *ops_table(void)
{
	return &ops;
}

unsigned long ops_table_size(void)
{
	return sizeof(ops);
}
