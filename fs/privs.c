/* privs.c - see privs.h */
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "privs.h"

#define CAPS_XATTR "security.capability"

void privs_kill(const struct fuse_ctx *ctx, int fd, bool always)
{
	struct stat st;
	mode_t keep;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return;
	keep = st.st_mode;
	if (always || (ctx && ctx->uid != 0)) {
		keep &= ~(mode_t)S_ISUID;
		if ((st.st_mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) ||
		    (!always && (st.st_mode & S_ISGID) && ctx && ctx->gid != st.st_gid))
			keep &= ~(mode_t)S_ISGID;
	}
	if (keep != st.st_mode)
		fchmod(fd, keep & 07777);
	/* capabilities only mean something on executables */
	if (st.st_mode & 0111)
		fremovexattr(fd, CAPS_XATTR);
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
