/*
 * ops-xattr.c - extended attributes, passed to the store, and the
 * user.hsmfs.* names, which are the daemon's: read-only attributes
 * (events_xattr()) and control verbs, a getxattr of refresh and
 * setxattrs of reload, stale, evict, pin and unpin (hsmfsctl).  No
 * other user.hsmfs.* name is set or removed (EPERM).
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "creds.h"
#include "events.h"
#include "inode.h"
#include "ops-int.h"
#include "ops-io.h"
#include "ops-xattr.h"
#include "saved.h"
#include "ops-inval.h"
#include "passthrough.h"
#include "prefetch.h"
#include "privs.h"
#include "stats.h"

static void xattr_resume(void *arg, int res);

enum xop { X_GET, X_SET, X_LIST, X_REMOVE };

/*
 * Run one xattr call on in.  A symlink is reached through its parent
 * and name with the l* calls (the /proc link would follow it); anything
 * else through its /proc descriptor link.
 */
static ssize_t do_xattr(struct inode *in, enum xop op, const char *name,
			void *buf, size_t size, int flags)
{
	struct inode *parent = NULL;
	char path[PATH_MAX], *pname = NULL;
	ssize_t res;
	int fd;

	if (inode_is_symlink(in)) {
		fd = inode_parent_fd_get(in, &parent, &pname);
		if (fd < 0)
			return fd;
		if ((size_t)snprintf(path, sizeof(path), "/proc/self/fd/%d/%s",
				     fd, pname) >= sizeof(path)) {
			inode_parent_fd_put(parent, pname);
			return -ENAMETOOLONG;
		}
	} else {
		fd = inode_fd_get(in);
		if (fd < 0)
			return fd;
		inode_proc_path(fd, path);
	}
	switch (op) {
	case X_GET:
		res = parent ? lgetxattr(path, name, buf, size) :
			       getxattr(path, name, buf, size);
		break;
	case X_SET:
		res = parent ? lsetxattr(path, name, buf, size, flags) :
			       setxattr(path, name, buf, size, flags);
		break;
	case X_LIST:
		res = parent ? llistxattr(path, buf, size) :
			       listxattr(path, buf, size);
		break;
	default:
		res = parent ? lremovexattr(path, name) : removexattr(path, name);
		break;
	}
	if (res < 0)
		res = -errno;
	if (parent)
		inode_parent_fd_put(parent, pname);
	else
		inode_fd_put(in);
	return res;
}

/* The reply of a get or a list: a size probe (size 0), data, or an error. */
static void reply_xattr(fuse_req_t req, ssize_t res, const char *buf, size_t size)
{
	if (res < 0)
		reply_err(req, res);
	else if (!size)
		fuse_reply_xattr(req, res);
	else
		fuse_reply_buf(req, buf, res);
}

#define VIRT_PREFIX "user.hsmfs."

static bool is_virt(const char *name)
{
	return !strncmp(name, VIRT_PREFIX, sizeof(VIRT_PREFIX) - 1);
}

/* ---------------------------------------------------------------- reads */

/* user.hsmfs.stats: the engine's figures and the front end's own. */
static ssize_t stats_get(char *buf, size_t size)
{
	struct stats_snapshot s;

	events_stats_snapshot(&s);
	pt_get_stats(&s.pt);
	prefetch_stats(&s.prefetch);
	return events_stats_value(&s, buf, size);
}

/* A read-only user.hsmfs.* attribute of in: as do_xattr(X_GET). */
static ssize_t virt_get(struct inode *in, const char *name, char *buf, size_t size)
{
	struct stat st = { 0 };
	int fd;

	if (in == inode_root() && !strcmp(name, "user.hsmfs.stats"))
		return stats_get(buf, size);
	fd = inode_fd_get(in);

	if (fd >= 0) {
		fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
		inode_fd_put(in);
	}
	return events_xattr(in, st.st_size, name, buf, size);
}

/*
 * hsmfsctl refresh: a getxattr of user.hsmfs.refresh on the directory
 * (a getxattr holds no lock of the directory, whose names the refresh
 * invalidates).  Its value is "ok" once the refresh is applied
 * ("unlisted": not listed yet, so nothing to refresh); asked
 * for its size first (size 0), it says 16 and refreshes nothing.
 */
static void ctl_refresh(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct later *l;
	int res;

	if (!size) {
		reply_xattr(req, 16, NULL, 0);
		return;
	}
	l = later_new(&(struct later){ .step = LATER_REFRESH, .req = req, .len = size }, 0);
	if (!l) {
		reply_xattr(req, -ENOMEM, NULL, size);
		return;
	}
	res = events_dir_refresh(IN(ino), FRONT(req), xattr_resume, l);
	if (res != EVENTS_PARKED)
		xattr_resume(l, res);
}

static int refresh_step(struct later *l, int res)
{
	const char *value = NULL;

	if (res == EVENTS_UNLISTED) {
		value = "unlisted";
		res = l->len < 8 ? 0 : 8;
	} else if (!res && l->len < 2) {
		res = -ERANGE;
	} else if (!res) {
		value = "ok";
		res = 2;
	}
	reply_xattr(l->req, res, value, l->len);
	return 0;
}

/*
 * hsmfsctl archive, sync and resolve: a getxattr of user.hsmfs.archive
 * (of a file), user.hsmfs.sync (of the root), user.hsmfs.resolve_local
 * (of a file in conflict) or user.hsmfs.resolve_origin (a dirty file of
 * a listed directory: its change dropped, events_take_origin).  Its value is "ok" once the file is clean
 * (every dirty file, for sync), or it fails with the archive's error
 * (ESTALE: a conflict; ENOTCONN: no archive hook connected).  Asked for
 * its size first (size 0), it says 16 and does nothing.
 */
/*
 * Resolving a conflict for the local bytes overwrites the origin's: the
 * file's owner decides (or root, or the mount's owner), not any reader.
 */
static bool may_resolve(fuse_req_t req, struct inode *in)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct stat st;
	int fd = inode_fd_get(in);
	bool ok;

	if (fd < 0)
		return false;
	ok = !fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) &&
	     (ctx->uid == 0 || ctx->uid == st.st_uid || ctx->uid == getuid());
	inode_fd_put(in);
	return ok;
}

/* Archiving publishes the file's bytes at the origin, drafts included: ops-xattr.h. */
bool ops_may_archive(struct front_req *r, struct inode *in)
{
	fuse_req_t req = FUSE_REQ(r);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	char proc[32];
	struct creds id;
	struct stat st;
	int fd;
	bool ok = false;

	if (ctx->uid == 0 || ctx->uid == getuid())
		return true;
	fd = inode_fd_get(in);
	if (fd < 0)
		return false;
	inode_proc_path(fd, proc);
	if (creds_as_caller(req, &id) == 0 && id.switched) {
		ok = faccessat(AT_FDCWD, proc, W_OK, AT_EACCESS) == 0;
		creds_as_daemon(&id);
	} else if (fstat(fd, &st) == 0) {
		ok = privs_may_write(req, &st);
	}
	inode_fd_put(in);
	return ok;
}

/*
 * A sync archives every user's changes: root's or the mount owner's.
 * Anyone else's archives what the caller may archive one by one
 * (ops_may_archive), and leaves the rest (events_sync).
 */
static bool may_sync(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return ctx->uid == 0 || ctx->uid == getuid();
}

static void ctl_archive(fuse_req_t req, fuse_ino_t ino, size_t size, int verb)
{
	struct later *l;
	int res;

	if (!size) {
		reply_xattr(req, 16, NULL, 0);
		return;
	}
	l = later_new(&(struct later){ .step = LATER_ARCHIVE, .req = req, .len = size }, 0);
	if (!l) {
		reply_xattr(req, -ENOMEM, NULL, size);
		return;
	}
	if (verb == 1)
		res = IN(ino) != inode_root() ? -ENODATA :
		      events_sync(FRONT(req), may_sync(req), xattr_resume, l);
	else if (verb == 2)
		res = may_resolve(req, IN(ino)) ? events_resolve(IN(ino), FRONT(req), xattr_resume, l) : -EPERM;
	else if (verb == 3)
		res = may_resolve(req, IN(ino)) ?
			      events_take_origin(IN(ino), FRONT(req), xattr_resume, l) : -EPERM;
	else
		res = ops_may_archive(FRONT(req), IN(ino)) ? events_archive(IN(ino), FRONT(req), xattr_resume, l) : -EPERM;
	if (res != EVENTS_PARKED)
		xattr_resume(l, res);
}

static int archive_step(struct later *l, int res)
{
	if (!res && l->len < 2)
		res = -ERANGE;
	reply_xattr(l->req, res ? res : 2, res ? NULL : "ok", l->len);
	return 0;
}

/*
 * user.hsmfs.restart of the root (hsmfsctl restart): the daemon hands
 * over to the hsmfs binary installed now (keeper.h), once this is
 * answered.  Root's or the mount owner's; only under a keeper.
 */
static void ctl_restart(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	int res = 0;

	if (IN(ino) != inode_root())
		res = -ENODATA;
	else if (ctx->uid != 0 && ctx->uid != getuid())
		res = -EPERM;
	else if (!saved_head()->kept)
		res = -EOPNOTSUPP; /* -o norestart */
	else if (size < 2)
		res = -ERANGE;
	reply_xattr(req, res ? res : 2, res ? NULL : "ok", size);
	if (!res && size >= 2)
		ops_handover();
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char *buf;
	ssize_t res;

	if (!strcmp(name, VIRT_PREFIX "restart")) {
		ctl_restart(req, ino, size);
		return;
	}

	if (!strcmp(name, VIRT_PREFIX "refresh")) {
		ctl_refresh(req, ino, size);
		return;
	}
	if (!strcmp(name, VIRT_PREFIX "archive") || !strcmp(name, VIRT_PREFIX "sync") ||
	    !strcmp(name, VIRT_PREFIX "resolve_local") ||
	    !strcmp(name, VIRT_PREFIX "resolve_origin")) {
		ctl_archive(req, ino, size, name[11] == 's' ? 1 : !strcmp(name + 11, "resolve_local") ? 2 :
					    name[11] == 'r' ? 3 : 0);
		return;
	}
	buf = size ? malloc(size) : NULL;
	if (size && !buf)
		res = -ENOMEM;
	else if (!strcmp(name, VIRT_PREFIX "hook_said") &&
		 fuse_req_ctx(req)->uid != 0 && fuse_req_ctx(req)->uid != getuid())
		res = -EACCES; /* the hook's own words (an origin's URL...): the mount's owner's */
	else if (is_virt(name))
		res = virt_get(IN(ino), name, buf, size);
	else
		res = do_xattr(IN(ino), X_GET, name, buf, size, 0);
	reply_xattr(req, res, buf, size);
	free(buf);
}

/* Lists of the store that grew between the size asked and the names read, at most. */
#define LIST_TRIES 8

/*
 * The store's names of in less the daemon's own (user.hsmfs.*: the
 * marks of placeholders and of directories not listed yet), which are
 * never shown: every name listed can be read, and a copy of the file
 * (rsync -X, tar --xattrs) carries none of them.  Into buf[0..size) as
 * listxattr(2): the length (size 0: the length needed), or -errno.
 */
static ssize_t list_shown(struct inode *in, char *buf, size_t size)
{
	for (int tries = 0; tries < LIST_TRIES; tries++) {
		ssize_t n = do_xattr(in, X_LIST, NULL, NULL, 0, 0), got;
		size_t len = 0;
		char *all;

		if (n <= 0)
			return n;
		all = malloc((size_t)n);
		if (!all)
			return -ENOMEM;
		got = do_xattr(in, X_LIST, NULL, all, (size_t)n, 0);
		if (got == -ERANGE) {
			free(all); /* a name came meanwhile */
			continue;
		}
		for (char *p = all, *end = all + (got > 0 ? got : 0); p < end;) {
			size_t l = strnlen(p, (size_t)(end - p)) + 1;

			if (!is_virt(p) && p + l <= end) {
				if (size && len + l <= size)
					memcpy(buf + len, p, l);
				len += l;
			}
			p += l;
		}
		free(all);
		if (got < 0)
			return got;
		return size && len > size ? -ERANGE : (ssize_t)len;
	}
	return -ERANGE;
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char *buf = size ? malloc(size) : NULL;
	ssize_t res = size && !buf ? -ENOMEM : list_shown(IN(ino), buf, size);

	reply_xattr(req, res, buf, size);
	free(buf);
}

/* ------------------------------------------------------------- changes */

/* A setxattr of a user.hsmfs.* name: a control verb, 0 or -errno. */
static int ctl_set(struct inode *in, const char *name, const char *value, size_t size)
{
	const char *verb = name + sizeof(VIRT_PREFIX) - 1;
	int res;

	if (!strcmp(verb, "reload")) {
		/* hsmfsctl import changed this file in the store */
		if (inode_is_dir(in)) {
			/*
			 * or made names in this directory: the kernel's
			 * missing names anywhere are asked again (their
			 * names are the import's, not known here), and this
			 * directory's listing and attributes below
			 */
			events_dir_forget(in);
			/* a kernel that has the epoch and refused it: say so */
			res = (ops_invalidate_names() || !atomic_load(&ops_epoch)) ? 0 : -EIO;
		} else {
			res = events_reload(in);
		}
		if (!res)
			ops_invalidate(in, 0, 0);
	} else if (!strcmp(verb, "stale")) {
		res = events_mark_stale(in);
	} else if (!strcmp(verb, "evict")) {
		/* value: empty for the whole file, or "START-END" in bytes */
		unsigned long long a = 0, b = 0;
		char v[64];

		snprintf(v, sizeof(v), "%.*s", (int)(size < 63 ? size : 63), value);
		if (size && sscanf(v, "%llu-%llu", &a, &b) != 2)
			res = -EINVAL;
		else
			res = events_evict(in, a, b, inode_is_open(in));
		if (!res)
			ops_invalidate(in, a, b ? b - a : 0);
	} else if (!strcmp(verb, "pin") || !strcmp(verb, "unpin")) {
		res = events_pin(in, verb[0] == 'p');
	} else {
		res = -EPERM;
	}
	return res;
}

/*
 * A removal, or a set with XATTR_CREATE, is not the same done twice
 * (ENODATA, EEXIST): marked for a resend (ops-resend.c).  A resent one
 * the last daemon did gets its result; one it began may have happened,
 * so that error is success.
 */
static ssize_t xattr_change(fuse_ino_t ino, int op, const char *name, const char *value,
			    size_t size, int flags)
{
	uint64_t aux;
	int was, known = resend_lookup(ops_io_unique(), &aux, &was);
	ssize_t res;

	if (known == RESEND_DONE)
		return was;
	resend_begin(ops_io_unique(), op == X_SET ? OP_SETXATTR : OP_REMOVEXATTR, 0);
	res = do_xattr(IN(ino), op, name, (void *)value, size, flags);
	if (known == RESEND_BEGUN && (res == -ENODATA || res == -EEXIST))
		res = 0;
	resend_done(res < 0 ? (int)res : 0);
	return res;
}

/*
 * An access ACL set by a caller outside the file's group drops its
 * set-group-ID bit (privs_acl_set()), as the kernel's own filesystems
 * do.  The kernel leaves it to the daemon (FUSE_SETXATTR_ACL_KILL_SGID,
 * which libfuse 3.17 does not pass on: the same rule is applied here to
 * the caller it names), and asks for the attributes again after the
 * reply.  The store's own rule does not apply: the daemon sets the ACL
 * as root.
 */
static void acl_set(fuse_req_t req, struct inode *in)
{
	int fd = inode_fd_get(in);

	if (fd < 0)
		return;
	privs_acl_set(req, fd);
	inode_fd_put(in);
}

void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		 size_t size, int flags)
{
	ssize_t res;

	if (!ops_acls && (!strcmp(name, "system.posix_acl_access") ||
			  !strcmp(name, "system.posix_acl_default")))
		res = -EOPNOTSUPP; /* nothing would enforce it: refused, never stored and ignored */
	else if (is_virt(name))
		res = ctl_set(IN(ino), name, value, size);
	else
		res = xattr_change(ino, X_SET, name, value, size, flags);
	if (res >= 0 && ops_acls && !strcmp(name, "system.posix_acl_access"))
		acl_set(req, IN(ino));
	reply_err(req, res < 0 ? (int)res : 0);
	resend_end();
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	ssize_t res = is_virt(name) ? -EPERM : xattr_change(ino, X_REMOVE, name, NULL, 0, 0);

	reply_err(req, res < 0 ? (int)res : 0);
	resend_end();
}

/* The continuation of this family's parked requests (ops-int.h). */
static void xattr_resume(void *arg, int res)
{
	struct later *l = arg;

	if (l->step == LATER_REFRESH)
		later_ran(l, refresh_step(l, res));
	else if (l->step == LATER_ARCHIVE)
		later_ran(l, archive_step(l, res));
	else
		abort(); /* a step of another family: our bug */
}
