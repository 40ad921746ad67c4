/* privs.c - see privs.h */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "privs.h"

#define CAPS_XATTR "security.capability"
/* Supplementary groups looked at, at most (as creds.h's CREDS_GROUPS_MAX). */
#define PRIVS_GROUPS_MAX 256

/* Is req's caller in group gid (its primary group, or one of its others)? */
static bool in_group(struct fuse_req *req, gid_t gid)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t groups[PRIVS_GROUPS_MAX];
	int n;

	if (ctx->gid == gid)
		return true;
	n = fuse_req_getgroups(req, PRIVS_GROUPS_MAX, groups);
	for (int i = 0; i < n && i < PRIVS_GROUPS_MAX; i++)
		if (groups[i] == gid)
			return true;
	return false; /* not known: as not in it, the safe side */
}

bool privs_may_write(struct fuse_req *req, const struct stat *st)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	if (ctx->uid == 0)
		return true;
	if (ctx->uid == st->st_uid)
		return st->st_mode & S_IWUSR;
	if (in_group(req, st->st_gid))
		return st->st_mode & S_IWGRP;
	return st->st_mode & S_IWOTH;
}

/* fchmod(), through /proc for an O_PATH descriptor.  0 or -1 (errno). */
static int set_mode(int fd, mode_t mode)
{
	char path[32];

	if (!fchmod(fd, mode))
		return 0;
	if (errno != EBADF)
		return -1;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return chmod(path, mode);
}

bool privs_kill(struct fuse_req *req, int fd, bool always)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct stat st;
	mode_t keep;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	keep = st.st_mode;
	if ((st.st_mode & (S_ISUID | S_ISGID)) && (always || ctx->uid != 0)) {
		keep &= ~(mode_t)S_ISUID;
		if ((st.st_mode & S_ISGID) &&
		    ((st.st_mode & S_IXGRP) || !in_group(req, st.st_gid)))
			keep &= ~(mode_t)S_ISGID;
	}
	/* capabilities only mean something on executables */
	if (st.st_mode & 0111)
		fremovexattr(fd, CAPS_XATTR);
	return keep != st.st_mode && !set_mode(fd, keep & 07777);
}

bool privs_acl_set(struct fuse_req *req, int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0 || !(st.st_mode & S_ISGID) || fuse_req_ctx(req)->uid == 0 ||
	    in_group(req, st.st_gid))
		return false;
	return !set_mode(fd, st.st_mode & 07777 & ~(mode_t)S_ISGID);
}

bool privs_any(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return true; /* unknown: as if */
	if (st.st_mode & (S_ISUID | S_ISGID))
		return true;
	return (st.st_mode & 0111) && fgetxattr(fd, CAPS_XATTR, NULL, 0) >= 0;
}
