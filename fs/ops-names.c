/*
 * ops-names.c - the names of a directory: lookup and forget, what makes
 * a name (mknod, mkdir, symlink, link) and what removes or moves one
 * (unlink, rmdir, rename).  Each first waits for its directory's
 * listing (dir_wait()); each change of a name is the user's (names.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "check.h"
#include "creds.h"
#include "events.h"
#include "fault.h"
#include "inode.h"
#include "meta.h"
#include "names.h"
#include "ops-adopt.h"
#include "ops-int.h"
#include "ops-io.h"

static void names_resume(void *arg, int res);

static bool is_dot(const char *name)
{
	return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]));
}

/*
 * LOOKUP of "." or ".." of a node: the kernel resolving a file handle
 * (inode.h), never a path walk.  Nothing is listed and no name looked
 * up: no hook is asked.
 */
static int do_lookup_dot(fuse_ino_t ino, const char *name, struct fuse_entry_param *e)
{
	struct inode *in;
	int res;

	memset(e, 0, sizeof(*e));
	if (!ops_cfg.export)
		return -ESTALE;
	res = inode_lookup_dot(IN(ino), name[1] == '.', &e->attr, &in);
	if (res)
		return res;
	ops_entry_of(in, 0, e); /* no name: the kernel drops it (fuse_get_dentry) */
	return 0;
}

static void reply_entry(fuse_req_t req, int res, const struct fuse_entry_param *e)
{
	if (res)
		reply_err(req, res);
	else
		fuse_reply_entry(req, e);
	resend_end(); /* answered: its journal record goes (ops-resend.c) */
}

/* The store's inode number at name in parent, or 0: none (or unreachable). */
static uint64_t name_ino(fuse_ino_t parent, const char *name)
{
	struct stat st;
	int pfd = inode_fd_get(IN(parent)), r;

	if (pfd < 0)
		return 0;
	r = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW);
	inode_fd_put(IN(parent));
	return r ? 0 : (uint64_t)st.st_ino;
}

/*
 * A request the kernel resent that the last daemon carried out
 * (ops-resend.c): true, *res its result and *ret_aux its record's aux.
 * want: the store shows it done (the name there: made; gone: removed;
 * moved: a rename's file).
 */
static bool resent_done(uint64_t want_ino, fuse_ino_t parent, const char *name, bool made,
			int *res, uint64_t *ret_aux)
{
	uint64_t aux = 0, ino;
	int r = 0;

	*ret_aux = 0;

	switch (resend_lookup(ops_io_unique(), &aux, &r)) {
	case RESEND_DONE:
		*res = r;
		*ret_aux = aux;
		return true;
	case RESEND_BEGUN:
		ino = name_ino(parent, name);
		if (want_ino ? ino == aux : made ? ino != 0 : ino == 0) {
			*res = 0;
			*ret_aux = aux;
			return true;
		}
		return false;
	default:
		return false;
	}
}

/*
 * A name made by the last daemon for this request: its entry, once.
 * dir: a directory, whose making is recorded for the origin again (the
 * last daemon may have died before it was; twice is the same).
 */
static bool made_before(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct fuse_entry_param e;
	uint64_t aux;
	int res;

	if (!resent_done(0, parent, name, true, &res, &aux))
		return false;
	if (!res && dir)
		events_dir_named(IN(parent), name, META_OP_MKDIR);
	if (!res)
		res = do_lookup(parent, name, &e);
	/* a file the last daemon made and died before recording (mknod) */
	if (!res && !dir && S_ISREG(e.attr.st_mode))
		events_made_again(IN(e.ino));
	reply_entry(req, res, &e);
	return true;
}

static bool removed_before(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	uint64_t aux;
	int res;

	if (!resent_done(0, parent, name, false, &res, &aux))
		return false;
	/*
	 * What follows the store's removal, done again (each is the same
	 * done twice): the file's row goes, and its removal is recorded for
	 * the origin (events_unlinked() finds no row if the last daemon got
	 * that far); a directory's (aux: its inode) likewise.
	 */
	if (!res && !dir && (aux & RESEND_REMOVED_LAST))
		events_unlinked(NULL, aux & ~RESEND_REMOVED_LAST, true, NULL);
	if (!res && dir) {
		if (aux)
			events_dir_removed(aux);
		events_dir_named(IN(parent), name, META_OP_RMDIR);
	}
	reply_err(req, res);
	resend_end();
	return true;
}

/* An unknown name the kernel may cache as such (negative_timeout): e says so, 0. */
static int negative_entry(fuse_ino_t parent, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->entry_timeout = ops_name_timeout(parent, ops_cfg.negative_timeout);
	return 0;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int res;

	if (is_dot(name)) {
		res = do_lookup_dot(parent, name, &e);
		reply_entry(req, res, &e);
		return;
	}
	res = dir_wait(req, parent, &(struct later){ .step = LATER_LOOKUP, .parent = parent,
						      .name = name }, names_resume);
	if (res == EVENTS_PARKED)
		return;
	/* an unknown name of a directory not listed yet is not cached */
	if (!res) {
		res = do_lookup(parent, name, &e);
		if (res == -ENOENT && ops_cfg.negative_timeout > 0)
			res = negative_entry(parent, &e);
	}
	reply_entry(req, res, &e);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	inode_forget(IN(ino), nlookup);
	reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	size_t i;

	for (i = 0; i < count; i++)
		inode_forget(IN(forgets[i].ino), forgets[i].nlookup);
	reply_none(req);
}

/* ------------------------------------------------------------- creation */

/* see ops-int.h */
mode_t ops_create_mode(fuse_req_t req, int pfd, mode_t mode)
{
	char path[32];

	if (!ops_dont_mask)
		return mode;
	inode_proc_path(pfd, path);
	if (getxattr(path, "system.posix_acl_default", NULL, 0) > 0)
		return mode;
	return mode & ~(fuse_req_ctx(req)->umask & 0777);
}

enum mk_kind { MK_NOD, MK_DIR, MK_SYMLINK };

static int do_make(fuse_req_t req, fuse_ino_t parent, const char *name,
		   enum mk_kind kind, mode_t mode, dev_t rdev, const char *link,
		   struct fuse_entry_param *e)
{
	struct inode *p = IN(parent);
	struct creds id;
	int pfd, res;

	if (reserved(parent, name))
		return -EPERM;
	pfd = inode_fd_get(p);
	if (pfd < 0)
		return pfd;
	if (kind != MK_SYMLINK)
		mode = ops_create_mode(req, pfd, mode);
	res = creds_as_caller(req, &id);
	if (!res) {
		struct names_user u;

		names_user_begin(&u, inode_ino(p), name, 0, NULL);
		resend_begin(ops_io_unique(), kind == MK_DIR ? OP_MKDIR : OP_MKNOD, 0);
		switch (kind) {
		case MK_NOD: res = mknodat(pfd, name, mode, rdev); break;
		case MK_DIR: res = mkdirat(pfd, name, mode); break;
		default: res = symlinkat(link, pfd, name); break;
		}
		res = res < 0 ? -errno : 0;
		resend_done(res);
		names_user_end(&u);
		creds_as_daemon(&id);
	}
	inode_fd_put(p);
	if (res)
		return res;
	return do_lookup(parent, name, e);
}

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct fuse_entry_param e;
	int res;

	if (made_before(req, parent, name, false))
		return;
	res = dir_wait(req, parent, &(struct later){ .step = LATER_MKNOD, .parent = parent,
						      .name = name, .mode = mode, .rdev = rdev,
						      .unique = ops_io_unique() }, names_resume);

	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_make(req, parent, name, MK_NOD, mode, rdev, NULL, &e);
	if (!res && S_ISREG(mode))
		events_created(IN(e.ino));
	reply_entry(req, res, &e);
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct fuse_entry_param e;
	int res;

	if (made_before(req, parent, name, true))
		return;
	res = dir_wait(req, parent, &(struct later){ .step = LATER_MKDIR, .parent = parent,
						      .name = name, .mode = mode,
						      .unique = ops_io_unique() }, names_resume);

	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_make(req, parent, name, MK_DIR, mode, 0, NULL, &e);
	if (!res)
		events_dir_named(IN(parent), name, META_OP_MKDIR);
	reply_entry(req, res, &e);
}

void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int res;

	if (made_before(req, parent, name, false))
		return;
	res = dir_wait(req, parent, &(struct later){ .step = LATER_SYMLINK, .parent = parent,
						      .name = name, .name2 = link,
						      .unique = ops_io_unique() }, names_resume);

	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_make(req, parent, name, MK_SYMLINK, 0, 0, link, &e);
	reply_entry(req, res, &e);
}

static int do_link(fuse_ino_t ino, fuse_ino_t newparent, const char *newname,
		   struct fuse_entry_param *e)
{
	struct inode *in = IN(ino), *np = IN(newparent);
	struct names_user u;
	char path[32];
	int fd, npfd, res;

	if (reserved(newparent, newname))
		return -EPERM;
	fd = inode_fd_get(in);
	if (fd < 0)
		return fd;
	npfd = inode_fd_get(np);
	if (npfd < 0) {
		inode_fd_put(in);
		return npfd;
	}
	/* linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; /proc does not. */
	inode_proc_path(fd, path);
	names_user_begin(&u, inode_ino(np), newname, 0, NULL);
	resend_begin(ops_io_unique(), OP_LINK, 0);
	check_move_begin(); /* a name that the store's check may not see (check.h) */
	res = linkat(AT_FDCWD, path, npfd, newname, AT_SYMLINK_FOLLOW) < 0 ?
		      -errno : 0;
	check_move_end();
	resend_done(res);
	names_user_end(&u);
	inode_fd_put(np);
	inode_fd_put(in);
	if (res)
		return res;
	events_linked(in, true); /* the origin holds one name: sync says so */
	return do_lookup(newparent, newname, e);
}

void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct fuse_entry_param e;
	int res;

	if (made_before(req, newparent, newname, false))
		return;
	res = dir_wait(req, newparent, &(struct later){ .step = LATER_LINK, .ino = ino,
							 .newparent = newparent, .name = newname,
							 .unique = ops_io_unique() }, names_resume);

	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_link(ino, newparent, newname, &e);
	reply_entry(req, res, &e);
}

/* -------------------------------------------------------------- removal */

static int do_remove(fuse_ino_t parent, const char *name, int flags)
{
	struct inode *p = IN(parent), *victim;
	struct names_user u;
	struct stat st;
	char oname[48], opath[HSMFS_MAX_PATH + 1];
	bool orphan;
	int pfd, res;

	if (reserved(parent, name))
		return -EPERM;
	/* the name is the user's from its look to its removal (names.h) */
	names_user_begin(&u, inode_ino(p), name, 0, NULL);
	victim = inode_hold_name(p, name, true, &st);
	pfd = inode_fd_get(p);
	if (pfd < 0) {
		names_user_end(&u);
		inode_release(victim);
		return pfd;
	}
	resend_begin(ops_io_unique(), flags ? OP_RMDIR : OP_UNLINK,
		     flags ? st.st_ino : st.st_nlink == 1 ? st.st_ino | RESEND_REMOVED_LAST : 0);
	orphan = victim && !flags && inode_orphan_link(victim, oname);
	/* its path, which the orphan's link takes over (events_unlinked()) */
	if (orphan && inode_path(victim, opath, sizeof(opath)) <= 0)
		opath[0] = '\0';
	res = unlinkat(pfd, name, flags) < 0 ? -errno : 0;
	resend_done(res);
	if (orphan)
		inode_orphan_settle(victim, oname, !res);
	names_user_end(&u);
	inode_fd_put(p);
	if (!res && !flags && st.st_nlink == 1) {
		/* still reachable (an O_PATH descriptor): its state outlives the row */
		if (victim)
			events_load(victim);
		events_unlinked(victim, st.st_ino, true, orphan && opath[0] ? opath : NULL);
	}
	if (!res && flags) {
		events_dir_removed(st.st_ino);
		events_dir_named(p, name, META_OP_RMDIR);
	}
	if (!res && victim && !orphan)
		inode_name_gone(victim, p, name, st.st_nlink);
	/* a name of several: the row follows the one left (link, then unlink) */
	if (!res && victim && !orphan && !flags && st.st_nlink > 1)
		events_name_left(p, name, victim);
	inode_release(victim);
	return res;
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int res;

	if (removed_before(req, parent, name, false))
		return;
	res = dir_wait(req, parent, &(struct later){ .step = LATER_UNLINK, .parent = parent,
						      .name = name, .unique = ops_io_unique() }, names_resume);
	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_remove(parent, name, 0);
	reply_err(req, res);
	resend_end();
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct later args = { .step = LATER_RMDIR, .parent = parent, .name = name,
			      .unique = ops_io_unique() };
	int res;

	if (removed_before(req, parent, name, true))
		return;
	res = dir_wait(req, parent, &args, names_resume);

	/* a directory not listed yet is empty only once its listing says so */
	if (!res && atomic_load_explicit(&events_lazy_dirs, memory_order_relaxed)) {
		struct stat st;
		struct inode *victim = inode_hold_name(IN(parent), name, false, &st);

		if (victim)
			res = dir_wait(req, inode_nodeid(victim), &args, names_resume);
		inode_release(victim);
	}
	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_remove(parent, name, AT_REMOVEDIR);
	reply_err(req, res);
	resend_end();
}

static int do_rename(fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		     const char *newname, unsigned int flags)
{
	struct inode *p = IN(parent), *np = IN(newparent), *src, *dst;
	struct names_user u;
	struct stat sst, dst_st;
	char oname[48], opath[HSMFS_MAX_PATH + 1];
	bool orphan = false;
	int pfd, npfd, res;

	if (reserved(parent, name) || reserved(newparent, newname))
		return -EPERM;
	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	/* two objects swapped at once: no origin can (callers fall back, as
	 * on the filesystems without it) */
	if ((flags & RENAME_EXCHANGE) && events_names_follow())
		return -EINVAL;
	/* both names are the user's from their look to the rename (names.h) */
	names_user_begin(&u, inode_ino(p), name, inode_ino(np), newname);
	src = inode_hold_name(p, name, false, &sst);
	dst = inode_hold_name(np, newname, !(flags & RENAME_EXCHANGE), &dst_st);
	pfd = inode_fd_get(p);
	npfd = pfd < 0 ? pfd : inode_fd_get(np);
	if (npfd < 0) {
		names_user_end(&u);
		res = npfd;
		goto out;
	}
	/* done, if the file moved is found at the new name (ops-resend.c) */
	resend_begin(ops_io_unique(), OP_RENAME, sst.st_ino);
	orphan = dst && dst != src && !(flags & RENAME_EXCHANGE) && inode_orphan_link(dst, oname);
	if (orphan && inode_path(dst, opath, sizeof(opath)) <= 0)
		opath[0] = '\0';
	check_move_begin(); /* a file the store's check may not see (check.h) */
	res = renameat2(pfd, name, npfd, newname, flags) < 0 ? -errno : 0;
	check_move_end();
	resend_done(res);
	if (orphan)
		inode_orphan_settle(dst, oname, !res);
	names_user_end(&u);
	inode_fd_put(np);
	/* the name replaced goes first: at the origin too, before the move onto it */
	if (!res && !(flags & RENAME_EXCHANGE) && dst_st.st_nlink == 1 &&
	    !S_ISDIR(dst_st.st_mode) && dst_st.st_ino != sst.st_ino) {
		if (dst)
			events_load(dst); /* as in do_remove() */
		events_unlinked(dst, dst_st.st_ino, true, orphan && opath[0] ? opath : NULL);
	}
	if (!res && src != dst) {
		if (src)
			inode_moved(src, p, name, np, newname);
		if (dst && (flags & RENAME_EXCHANGE))
			inode_moved(dst, np, newname, p, name);
		else if (dst && !orphan)
			inode_name_gone(dst, np, newname, dst_st.st_nlink);
		/* the file replaced keeps other names: its row goes to one, the
		 * name to the file moved (below) */
		if (dst && !orphan && !(flags & RENAME_EXCHANGE) && dst_st.st_nlink > 1 &&
		    !S_ISDIR(dst_st.st_mode) && dst_st.st_ino != sst.st_ino)
			events_name_left(np, newname, dst);
	}
	/*
	 * The rows' paths after the inodes' (a row the writer inserts
	 * meanwhile takes the path then, and its writer looks again after
	 * its commit: writeback.c)
	 */
	if (!res && !(flags & RENAME_EXCHANGE)) {
		fault_delay(FAULT_RENAME_STORED);
		events_renamed(p, name, np, newname, S_ISDIR(sst.st_mode), src);
	}
out:
	if (pfd >= 0)
		inode_fd_put(p);
	inode_release(src);
	inode_release(dst);
	return res;
}

/*
 * A rename the last daemon made and may have died before giving the
 * moved node its new name: given now, before the kernel hears it done,
 * and the handles the takeover could not reopen under the old name
 * (the node's, or below it) are tried again.
 */
static void resent_renamed(fuse_ino_t parent, const char *name, fuse_ino_t newparent,
			   const char *newname, unsigned int flags)
{
	struct stat st, xst;
	struct inode *src = inode_hold_name(IN(newparent), newname, false, &st);
	/* an exchange: the other node is at the old name now */
	struct inode *other = flags & RENAME_EXCHANGE ?
				      inode_hold_name(IN(parent), name, false, &xst) : NULL;

	if (src)
		inode_moved(src, IN(parent), name, IN(newparent), newname);
	if (other && other != src)
		inode_moved(other, IN(newparent), newname, IN(parent), name);
	inode_release(src);
	inode_release(other);
	ops_adopt_retry();
	/*
	 * The rows after the node's, as do_rename() does, and the ops for
	 * the origin: a directory's tree too (its directories are read
	 * from the store, at the new name).  The same done twice is done
	 * once: the rows under the old name move, none is left to move the
	 * second time, and a directory made or removed again at the origin
	 * is found so.  An exchange moves no rows (do_rename()).
	 */
	if (!(flags & RENAME_EXCHANGE) && (S_ISDIR(st.st_mode) || st.st_nlink))
		events_renamed(IN(parent), name, IN(newparent), newname, S_ISDIR(st.st_mode),
			       NULL);
}

/*
 * A directory renamed where names follow at the origin moves its whole
 * tree there, file by file (events_renamed()): every directory of it is
 * listed first, parents before children, one listing at a time (the
 * rename parks and runs again), so that no file the mount never listed
 * stays behind under the old name while the new one is empty.  0 (all
 * listed), EVENTS_PARKED, or -errno.
 */
static int tree_wait(fuse_req_t req, fuse_ino_t parent, const char *name,
		     const struct later *args)
{
	struct inode *src, *below;
	uint64_t last = 0;
	struct stat st;
	int res = 0;

	if (!atomic_load_explicit(&events_lazy_dirs, memory_order_relaxed) ||
	    !events_names_follow())
		return 0;
	src = inode_hold_name(IN(parent), name, false, &st);
	if (!src || !S_ISDIR(st.st_mode)) {
		inode_release(src);
		return 0;
	}
	while (!res) {
		struct inode *dir;

		res = events_tree_unlisted(src, &below);
		if (res == -ENOENT) {
			res = 0;
			break;
		}
		if (res < 0)
			break;
		dir = res == 1 ? src : below;
		if (inode_ino(dir) == last) {
			/* its row says unlisted, its flags listed: not ours to loop on */
			log_err("renaming '%s': a directory below it stays unlisted", name);
			res = -EIO;
		} else {
			res = dir_wait(req, inode_nodeid(dir), args, names_resume);
		}
		last = inode_ino(dir);
		if (dir == below)
			inode_forget(below, 1);
	}
	inode_release(src);
	return res;
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags)
{
	struct later args = { .step = LATER_RENAME, .parent = parent, .name = name,
			      .newparent = newparent, .name2 = newname, .flags = flags,
			      .unique = ops_io_unique() };
	uint64_t aux;
	int res;

	if (resent_done(1, newparent, newname, true, &res, &aux)) {
		if (!res)
			resent_renamed(parent, name, newparent, newname, flags);
		reply_err(req, res);
		resend_end();
		return;
	}
	res = dir_wait(req, parent, &args, names_resume);

	if (!res)
		res = dir_wait(req, newparent, &args, names_resume);
	if (!res)
		res = tree_wait(req, parent, name, &args);
	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_rename(parent, name, newparent, newname, flags);
	reply_err(req, res);
	resend_end();
}

/*
 * LATER_LOOKUP .. LATER_RENAME: the directory is listed (res 0), the
 * operation runs again from its handler, which replies or parks anew
 * (with a struct later of its own).  A failed listing fails it.
 */
static int names_again(struct later *l, int res)
{
	if (res) {
		reply_err(l->req, res);
		return 0;
	}
	ops_io_set_unique(l->unique); /* the request this run is for (ops-resend.c) */
	switch (l->step) {
	case LATER_LOOKUP: op_lookup(l->req, l->parent, l->name); break;
	case LATER_MKNOD: op_mknod(l->req, l->parent, l->name, l->mode, l->rdev); break;
	case LATER_MKDIR: op_mkdir(l->req, l->parent, l->name, l->mode); break;
	case LATER_SYMLINK: op_symlink(l->req, l->name2, l->parent, l->name); break;
	case LATER_LINK: op_link(l->req, l->ino, l->newparent, l->name); break;
	case LATER_UNLINK: op_unlink(l->req, l->parent, l->name); break;
	case LATER_RMDIR: op_rmdir(l->req, l->parent, l->name); break;
	case LATER_RENAME:
		op_rename(l->req, l->parent, l->name, l->newparent, l->name2, l->flags);
		break;
	default: abort(); /* not an operation on names: our bug */
	}
	return 0;
}

/* The continuation of this family's parked requests (ops-int.h). */
static void names_resume(void *arg, int res)
{
	later_ran(arg, names_again(arg, res));
}
