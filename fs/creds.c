/* creds.c - see creds.h */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "creds.h"
#include "log.h"

static bool daemon_is_root; /* creds_init(); read-only afterwards */

void creds_init(void)
{
	daemon_is_root = geteuid() == 0;
}

int creds_as_caller(struct fuse_req *req, struct creds *ret)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t groups[CREDS_GROUPS_MAX];
	int n;

	ret->switched = false;
	if (!daemon_is_root || (ctx->uid == 0 && ctx->gid == 0))
		return 0;
	ret->ngroups = (int)syscall(SYS_getgroups, CREDS_GROUPS_MAX, ret->groups);
	if (ret->ngroups < 0)
		return -errno;
	n = fuse_req_getgroups(req, CREDS_GROUPS_MAX, groups);
	if (n < 0 || n > CREDS_GROUPS_MAX)
		n = 0; /* not known (or too many): the primary group only */
	if (syscall(SYS_setgroups, n, groups) < 0)
		return -errno;
	syscall(SYS_setfsgid, ctx->gid);
	syscall(SYS_setfsuid, ctx->uid);
	ret->switched = true;
	return 0;
}

void creds_as_daemon(struct creds *c)
{
	if (!c->switched)
		return;
	syscall(SYS_setfsuid, 0);
	syscall(SYS_setfsgid, 0);
	if (syscall(SYS_setgroups, c->ngroups, c->groups) < 0)
		log_err("cannot restore the daemon's groups: %s", strerror(errno));
	c->switched = false;
}
