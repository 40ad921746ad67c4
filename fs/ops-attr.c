/*
 * ops-attr.c - what a file is: its attributes (getattr, setattr: a
 * size change asks the PRE_MODIFY hooks first), a symlink's target, the
 * store's space, access checks.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "events.h"
#include "inode.h"
#include "fault.h"
#include "ops-int.h"
#include "privs.h"

static void attr_resume(void *arg, int res);

static void reply_attr(fuse_req_t req, fuse_ino_t ino, int res, const struct stat *st)
{
	if (res)
		reply_err(req, res);
	else
		fuse_reply_attr(req, st, ops_attr_timeout(IN(ino)));
}

static int do_getattr(fuse_ino_t ino, struct fuse_file_info *fi,
		      struct stat *st)
{
	struct inode *in = IN(ino);
	int fd, res;

	if (fi && !inode_is_dir(in)) {
		res = fstat(fi->fh, st) < 0 ? -errno : 0;
	} else {
		fd = inode_fd_get(in);
		if (fd < 0)
			return fd;
		res = fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ?
			      -errno : 0;
		inode_fd_put(in);
	}
	if (!res && inode_orphaned(in) && st->st_nlink)
		st->st_nlink--; /* not the link that keeps it for a restart */
	if (!res)
		events_shown_attr(in, st);
	return res;
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int res = do_getattr(ino, fi, &st);

	reply_attr(req, ino, res, &st);
}

static int set_times(struct inode *in, int fd, struct fuse_file_info *fi,
		     const struct stat *attr, int valid)
{
	struct timespec tv[2] = { { 0, UTIME_OMIT }, { 0, UTIME_OMIT } };
	char path[32];
	int res;

	if (valid & FUSE_SET_ATTR_ATIME_NOW)
		tv[0].tv_nsec = UTIME_NOW;
	else if (valid & FUSE_SET_ATTR_ATIME)
		tv[0] = attr->st_atim;
	if (valid & FUSE_SET_ATTR_MTIME_NOW)
		tv[1].tv_nsec = UTIME_NOW;
	else if (valid & FUSE_SET_ATTR_MTIME)
		tv[1] = attr->st_mtim;

	if (fi && !inode_is_dir(in))
		return futimens(fi->fh, tv) < 0 ? -errno : 0;
	if (inode_is_symlink(in)) {
		struct inode *parent;
		char *name;
		int pfd = inode_parent_fd_get(in, &parent, &name);

		if (pfd < 0)
			return pfd;
		res = utimensat(pfd, name, tv, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
		inode_parent_fd_put(parent, name);
		return res;
	}
	inode_proc_path(fd, path);
	return utimensat(AT_FDCWD, path, tv, 0) < 0 ? -errno : 0;
}

static int do_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		      int valid, struct fuse_file_info *fi, struct stat *ret_st,
		      bool checked)
{
	struct inode *in = IN(ino);
	bool use_fh = fi && !inode_is_dir(in);
	char path[32];
	int fd, res = 0;

	fd = inode_fd_get(in);
	if (fd < 0)
		return fd;
	inode_proc_path(fd, path);

	if (valid & FUSE_SET_ATTR_MODE) {
		if (use_fh)
			res = fchmod(fi->fh, attr->st_mode);
		else
			res = chmod(path, attr->st_mode);
		if (res < 0)
			goto err;
	}
	if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		uid_t uid = valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1;
		gid_t gid = valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1;

		res = fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
		if (res < 0)
			goto err;
	}
	if (valid & FUSE_SET_ATTR_SIZE) {
		struct events_change ch = { 0 };
		struct stat old;
		uint64_t a, b;

		if (fstatat(fd, "", &old, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
			goto err;
		a = old.st_size < attr->st_size ? old.st_size : attr->st_size;
		b = old.st_size < attr->st_size ? attr->st_size : old.st_size;
		if (!inode_is_dir(in))
			res = events_load(in);
		if (!res && !checked && events_modify_watched() && a != b)
			res = events_pre_modify(in, a, b, FRONT(req));
		if (res) {
			inode_fd_put(in);
			return res;
		}
		/* no fill lands past the new size while it changes */
		if (inode_flags(in) & INODE_STATEFUL)
			events_change_begin(in, &ch, a, UINT64_MAX);
		if (use_fh)
			res = ftruncate(fi->fh, attr->st_size);
		else
			res = truncate(path, attr->st_size);
		if (res < 0) {
			res = -errno;
			events_change_end(in, &ch);
			inode_fd_put(in);
			return res;
		}
		fault_named(FAULT_TRUNCATED);
		if (inode_flags(in) & INODE_STATEFUL)
			events_truncated(in, &ch, old.st_size, attr->st_size);
		/* the kernel marks a truncate whose caller lacks CAP_FSETID */
		if (ops_killpriv && (valid & FUSE_SET_ATTR_KILL_SUID)) {
			int kfd = use_fh ? (int)fi->fh :
					   open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

			if (kfd >= 0) {
				/* the reply's attributes below show it: nothing to invalidate */
				privs_kill(req, kfd, true);
				if (!use_fh)
					close(kfd);
			}
		}
	}
	if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
		res = set_times(in, fd, fi, attr, valid);
		if (res) {
			inode_fd_put(in);
			return res;
		}
	}
	res = fstatat(fd, "", ret_st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ?
		      -errno : 0;
	inode_fd_put(in);
	if (!res && inode_orphaned(in) && ret_st->st_nlink)
		ret_st->st_nlink--; /* as do_getattr() */
	return res;
err:
	res = -errno;
	inode_fd_put(in);
	return res;
}

static int setattr_step(struct later *l, int res)
{
	struct stat st;

	if (!res)
		res = do_setattr(l->req, l->ino, &l->attr, l->valid, l->has_fi ? &l->fi : NULL,
				 &st, true);
	reply_attr(l->req, l->ino, res, &st);
	return 0;
}

/*
 * A size change a hook must allow: asked before any attribute changes.
 * 0: go on (checked: no hook must answer, or all allowed); -errno;
 * EVENTS_PARKED: setattr_step() makes the change once they decided.
 */
static int setattr_ask(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		       struct fuse_file_info *fi)
{
	struct inode *in = IN(ino);
	struct later *l;
	struct stat old;
	uint64_t a, b;
	int fd, res;

	fd = inode_fd_get(in);
	if (fd < 0)
		return fd;
	res = fstatat(fd, "", &old, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
	inode_fd_put(in);
	if (!res)
		res = events_load(in);
	if (res)
		return res;
	a = (uint64_t)(old.st_size < attr->st_size ? old.st_size : attr->st_size);
	b = (uint64_t)(old.st_size < attr->st_size ? attr->st_size : old.st_size);
	if (a == b)
		return 0;
	l = later_new(&(struct later){ .step = LATER_SETATTR, .req = req, .ino = ino,
				       .fi = fi ? *fi : (struct fuse_file_info){ 0 },
				       .has_fi = fi != NULL, .attr = *attr, .valid = valid },
		      0);
	if (!l)
		return -ENOMEM;
	res = events_modify(in, a, b, FRONT(req), attr_resume, l);
	if (res != EVENTS_PARKED)
		later_free(l);
	return res;
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		struct fuse_file_info *fi)
{
	bool checked = false;
	struct stat st;
	int res = 0;

	if ((valid & FUSE_SET_ATTR_SIZE) && events_modify_watched() &&
	    !inode_is_dir(IN(ino))) {
		res = setattr_ask(req, ino, attr, valid, fi);
		if (res == EVENTS_PARKED)
			return;
		checked = true;
	}
	if (!res)
		res = do_setattr(req, ino, attr, valid, fi, &st, checked);
	reply_attr(req, ino, res, &st);
}

/* ------------------------------------------------------------- the rest */

/* The target of the symlink ino into buf (size bytes, NUL-terminated): its length or -errno. */
static ssize_t do_readlink(fuse_ino_t ino, char *buf, size_t size)
{
	struct inode *in = IN(ino);
	ssize_t n;
	int fd = inode_fd_get(in);

	if (fd < 0)
		return fd;
	n = readlinkat(fd, "", buf, size);
	if (n < 0)
		n = -errno;
	else if ((size_t)n == size)
		n = -ENAMETOOLONG;
	else
		buf[n] = '\0';
	inode_fd_put(in);
	return n;
}

static void reply_readlink(fuse_req_t req, ssize_t res, const char *buf)
{
	if (res < 0)
		reply_err(req, (int)res);
	else
		fuse_reply_readlink(req, buf);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[PATH_MAX + 1];

	reply_readlink(req, do_readlink(ino, buf, sizeof(buf)), buf);
}

static int do_statfs(struct statvfs *ret)
{
	int fd = inode_fd_get(inode_root()), res;

	if (fd < 0)
		return fd;
	res = fstatvfs(fd, ret) < 0 ? -errno : 0;
	inode_fd_put(inode_root());
	return res;
}

static void reply_statfs(fuse_req_t req, int res, const struct statvfs *sv)
{
	if (res)
		reply_err(req, res);
	else
		fuse_reply_statfs(req, sv);
}

void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	reply_statfs(req, do_statfs(&sv), &sv);
}

static int do_access(fuse_ino_t ino, int mask)
{
	struct inode *in = IN(ino);
	char path[32];
	int fd = inode_fd_get(in), res;

	if (fd < 0)
		return fd;
	inode_proc_path(fd, path);
	res = faccessat(AT_FDCWD, path, mask, 0) < 0 ? -errno : 0;
	inode_fd_put(in);
	return res;
}

void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	reply_err(req, do_access(ino, mask));
}

/* The continuation of this family's parked requests (ops-int.h). */
static void attr_resume(void *arg, int res)
{
	later_ran(arg, setattr_step(arg, res));
}
