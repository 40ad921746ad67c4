/* ops.c - see ops.h */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cache.h"
#include "creds.h"
#include "events.h"
#include "inode.h"
#include "log.h"
#include "names.h"
#include "ops.h"
#include "passthrough.h"
#include "prefetch.h"
#include "privs.h"
#include "readbuf.h"
#include "ready.h"
#include "store.h"

static struct ops_config cfg;
static bool acls; /* the kernel enforces POSIX ACLs (op_init) */
static bool killpriv; /* set-ID bits are ours to drop (op_init, privs.h) */
static struct fuse_session *session;

bool ops_exiting(void)
{
	return session && fuse_session_exited(session);
}

void ops_invalidate(struct inode *in, uint64_t off, uint64_t len)
{
	if (session)
		fuse_lowlevel_notify_inval_inode(session, inode_nodeid(in), (off_t)off,
						 (off_t)len);
}

/*
 * The invalidator: one thread that drops ranges of the kernel's page
 * cache on request, so that no thread that answers requests or hooks
 * blocks in the kernel's invalidation (it waits for locked pages, whose
 * reads may wait for a hook).  A request is made (inval_new, which may
 * fail: the caller then fails closed) before the reply whose pages it
 * drops, and posted (inval_post) after it: the thread never waits for
 * the pages of a reply not sent yet.  nodeid 0: every regular file.
 *
 * Locks: IV.lock guards the queue; it is a leaf (nothing is called
 * under it but malloc'd list links and the condition).
 */
struct inval {
	struct inval *next;
	uint64_t nodeid, off, len;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct inval *head, **tail;
	pthread_t thread;
	bool started, stop;
} IV = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
	 .tail = &IV.head };

static struct inval *inval_new(uint64_t nodeid, uint64_t off, uint64_t len)
{
	struct inval *iv = malloc(sizeof(*iv));

	if (iv)
		*iv = (struct inval){ .nodeid = nodeid, .off = off, .len = len };
	return iv;
}

static void inval_post(struct inval *iv)
{
	pthread_mutex_lock(&IV.lock);
	iv->next = NULL;
	*IV.tail = iv;
	IV.tail = &iv->next;
	pthread_cond_signal(&IV.cond);
	pthread_mutex_unlock(&IV.lock);
}

static void inval_one(uint64_t nodeid, uint64_t off, uint64_t len)
{
	if (session && !fuse_session_exited(session))
		fuse_lowlevel_notify_inval_inode(session, nodeid, (off_t)off, (off_t)len);
}

static void *inval_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&IV.lock);
	for (;;) {
		struct inval *list;

		while (!IV.head && !IV.stop)
			pthread_cond_wait(&IV.cond, &IV.lock);
		if (!IV.head)
			break;
		list = IV.head;
		IV.head = NULL;
		IV.tail = &IV.head;
		pthread_mutex_unlock(&IV.lock);
		while (list) {
			struct inval *iv = list;

			list = iv->next;
			if (iv->nodeid) {
				inval_one(iv->nodeid, iv->off, iv->len);
				events_cache_dropped();
			} else {
				uint64_t *ids;
				size_t n;

				/* out of memory: each watched open drops its cache anyway */
				if (!inode_files(&ids, &n)) {
					for (size_t i = 0; i < n; i++)
						inval_one(ids[i], 0, 0);
					free(ids);
					events_cache_dropped();
				}
			}
			free(iv);
		}
		pthread_mutex_lock(&IV.lock);
	}
	pthread_mutex_unlock(&IV.lock);
	return NULL;
}

void ops_set_session(struct fuse_session *se)
{
	session = se;
	if (se && !IV.started)
		IV.started = !pthread_create(&IV.thread, NULL, inval_thread, NULL);
}

void ops_invalidate_files_later(void)
{
	struct inval *iv = inval_new(0, 0, 0);

	if (iv)
		inval_post(iv);
	else
		log_warn("out of memory: the page cache is not dropped for a new reads watcher");
}

void ops_inval_stop(void)
{
	pthread_mutex_lock(&IV.lock);
	IV.stop = true;
	pthread_cond_signal(&IV.cond);
	pthread_mutex_unlock(&IV.lock);
	if (IV.started)
		pthread_join(IV.thread, NULL);
	IV.started = false;
	while (IV.head) {
		/* posted after the thread's last look: the session is gone */
		struct inval *iv = IV.head;

		IV.head = iv->next;
		free(iv);
	}
	IV.tail = &IV.head;
}

void ops_invalidate_entry(struct inode *dir, const char *name)
{
	if (session)
		fuse_lowlevel_notify_inval_entry(session, inode_nodeid(dir), name, strlen(name));
}

void ops_init(const struct ops_config *c)
{
	cfg = *c;
	creds_init();
}

static struct inode *IN(fuse_ino_t ino)
{
	return inode_from_nodeid(ino);
}

/* The one name in the store the mount never shows. */
static bool reserved(fuse_ino_t parent, const char *name)
{
	return IN(parent) == inode_root() && !strcmp(name, STORE_STATE_DIR);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* Truncation always arrives as setattr(size): one place to see it. */
	conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
	if (cfg.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
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
	acls = cfg.default_perms && (conn->capable & FUSE_CAP_POSIX_ACL);
	if (acls)
		conn->want |= FUSE_CAP_POSIX_ACL;
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
		killpriv = true;
	}
	/*
	 * Files opened past the page cache (ACCESS_PERM) may still be mapped
	 * shared; their mapped pages are not asked about (hsmfs-hooks(7)).
	 */
	if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP)
		conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
	else if (cfg.cold_direct) {
		/* a cold file could not be mapped (ENODEV): Linux 6.6 */
		cfg.cold_direct = false;
		log_info("cold_reads=direct needs Linux 6.6; cold files are read "
			 "through the page cache");
	}
	pt_init(conn, cfg.passthrough);
	ready_live();
}

/* ---------------------------------------------------------------- names */

static int do_lookup(fuse_ino_t parent, const char *name,
		     struct fuse_entry_param *e)
{
	struct inode *in;
	int res;

	memset(e, 0, sizeof(*e));
	if (reserved(parent, name))
		return -ENOENT;
	res = inode_lookup(IN(parent), name, &e->attr, &in);
	if (res)
		return res;
	events_shown_attr(in, &e->attr);
	e->ino = inode_nodeid(in);
	e->attr_timeout = cfg.attr_timeout;
	e->entry_timeout = cfg.entry_timeout;
	return 0;
}

static void reply_entry_or_err(fuse_req_t req, int res,
			       const struct fuse_entry_param *e)
{
	if (res)
		fuse_reply_err(req, -res);
	else
		fuse_reply_entry(req, e);
}

/*
 * Lazy directories (events_dir()): an operation on the names of a
 * directory not listed yet parks until its listing is committed, then
 * runs again from the start in the engine thread that ended the wait;
 * its arguments are kept here meanwhile.
 */
enum dl_op { DL_LOOKUP, DL_MKNOD, DL_MKDIR, DL_SYMLINK, DL_LINK, DL_UNLINK, DL_RMDIR,
	     DL_RENAME, DL_CREATE, DL_OPENDIR };

struct dirlater {
	fuse_req_t req;
	enum dl_op op;
	fuse_ino_t parent, newparent, ino;
	mode_t mode;
	dev_t rdev;
	unsigned int flags;
	struct fuse_file_info fi;
	const char *name, *name2; /* owned once parked */
};

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev);
static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name);
static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname);
static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname, unsigned int flags);
static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi);
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

static void dirlater_free(struct dirlater *l)
{
	free((char *)l->name);
	free((char *)l->name2);
	free(l);
}

static void dir_listed(void *arg, int res)
{
	struct dirlater *l = arg;

	if (res) {
		fuse_reply_err(l->req, -res);
		dirlater_free(l);
		return;
	}
	switch (l->op) {
	case DL_LOOKUP: op_lookup(l->req, l->parent, l->name); break;
	case DL_MKNOD: op_mknod(l->req, l->parent, l->name, l->mode, l->rdev); break;
	case DL_MKDIR: op_mkdir(l->req, l->parent, l->name, l->mode); break;
	case DL_SYMLINK: op_symlink(l->req, l->name2, l->parent, l->name); break;
	case DL_LINK: op_link(l->req, l->ino, l->newparent, l->name); break;
	case DL_UNLINK: op_unlink(l->req, l->parent, l->name); break;
	case DL_RMDIR: op_rmdir(l->req, l->parent, l->name); break;
	case DL_RENAME:
		op_rename(l->req, l->parent, l->name, l->newparent, l->name2, l->flags);
		break;
	case DL_CREATE: op_create(l->req, l->parent, l->name, l->mode, &l->fi); break;
	case DL_OPENDIR: op_opendir(l->req, l->ino, &l->fi); break;
	}
	dirlater_free(l);
}

/*
 * Before an operation on the names of dir: true when the request was
 * taken (parked until dir is listed, or answered with an error), false
 * to go on now.  One relaxed load on stores with no lazy directory.
 */
static bool dir_wait(fuse_req_t req, fuse_ino_t dir, const struct dirlater *args)
{
	struct inode *d = IN(dir);
	struct dirlater *l;
	int res;

	if (__builtin_expect(events_dir_known(d), 1))
		return false;
	l = malloc(sizeof(*l));
	if (!l) {
		fuse_reply_err(req, ENOMEM);
		return true;
	}
	*l = *args;
	l->req = req;
	l->name = args->name ? strdup(args->name) : NULL;
	l->name2 = args->name2 ? strdup(args->name2) : NULL;
	if ((args->name && !l->name) || (args->name2 && !l->name2)) {
		dirlater_free(l);
		fuse_reply_err(req, ENOMEM);
		return true;
	}
	/* a lookup may ask the hook for its one name (PRE_LOOKUP) */
	res = args->op == DL_LOOKUP ? events_dir_lookup(d, l->name, req, dir_listed, l) :
				      events_dir(d, req, dir_listed, l);
	if (res == EVENTS_PARKED)
		return true;
	dirlater_free(l);
	if (res) {
		fuse_reply_err(req, -res);
		return true;
	}
	return false;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int res;

	if (dir_wait(req, parent, &(struct dirlater){ .op = DL_LOOKUP, .parent = parent,
						      .name = name }))
		return;
	res = do_lookup(parent, name, &e);

	if (res == -ENOENT && cfg.negative_timeout > 0) {
		memset(&e, 0, sizeof(e));
		e.entry_timeout = cfg.negative_timeout;
		fuse_reply_entry(req, &e);
		return;
	}
	reply_entry_or_err(req, res, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	inode_forget(IN(ino), nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	size_t i;

	for (i = 0; i < count; i++)
		inode_forget(IN(forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

/*
 * A change parked on its PRE_MODIFY event (events_modify()): the
 * request's arguments, kept until every hook has answered; the change
 * is then made from the engine thread that decided it.  The kernel
 * keeps the open file, so its descriptors, until the request is
 * answered.
 */
struct later {
	fuse_req_t req;
	fuse_ino_t ino, ino_out;
	struct fuse_file_info fi, fi_out;
	bool has_fi, held;
	bool opened;               /* open_steps: the store file is open */
	bool open_asked;           /* open_steps: OPEN_PERM allowed */
	bool modify_asked;         /* open_steps: the whole file's PRE_MODIFY allowed */
	uint64_t gen;              /* open_steps: pt_gen() its tests were made on */
	struct stat attr;
	int valid, mode, flags;
	off_t off, off_out;
	size_t len;
	char data[]; /* a write's bytes */
};

/*
 * The arguments of a request that may park: fi (or NULL), off and len.
 * NULL when out of memory, the request answered with ENOMEM.
 */
static struct later *later_new(fuse_req_t req, fuse_ino_t ino, const struct fuse_file_info *fi,
			       off_t off, size_t len, size_t datalen)
{
	struct later *l = calloc(1, sizeof(*l) + datalen);

	if (!l) {
		fuse_reply_err(req, ENOMEM);
		return NULL;
	}
	l->req = req;
	l->ino = ino;
	if (fi) {
		l->fi = *fi;
		l->has_fi = true;
	}
	l->off = off;
	l->len = len;
	return l;
}

/* ----------------------------------------------------------- attributes */

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
	if (!res)
		events_shown_attr(in, st);
	return res;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int res = do_getattr(ino, fi, &st);

	if (res)
		fuse_reply_err(req, -res);
	else
		fuse_reply_attr(req, &st, cfg.attr_timeout);
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
			res = events_pre_modify(in, a, b, req);
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
		if (inode_flags(in) & INODE_STATEFUL)
			events_truncated(in, &ch, old.st_size, attr->st_size);
		/* the kernel marks a truncate whose caller lacks CAP_FSETID */
		if (killpriv && (valid & FUSE_SET_ATTR_KILL_SUID)) {
			int kfd = use_fh ? (int)fi->fh :
					   open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

			if (kfd >= 0) {
				privs_kill(fuse_req_ctx(req), kfd, true);
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
	return res;
err:
	res = -errno;
	inode_fd_put(in);
	return res;
}

static void setattr_later(void *arg, int res)
{
	struct later *l = arg;
	struct stat st;

	if (!res)
		res = do_setattr(l->req, l->ino, &l->attr, l->valid,
				 l->has_fi ? &l->fi : NULL, &st, true);
	if (res)
		fuse_reply_err(l->req, -res);
	else
		fuse_reply_attr(l->req, &st, cfg.attr_timeout);
	free(l);
}

/*
 * A size change a hook must allow: ask before any attribute changes,
 * parking the request.  0: go on (checked); EVENTS_PARKED; -errno.
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
	l = later_new(req, ino, fi, 0, 0, 0);
	if (!l)
		return EVENTS_PARKED; /* answered (ENOMEM) */
	l->attr = *attr;
	l->valid = valid;
	res = events_modify(in, a, b, req, setattr_later, l);
	if (res != EVENTS_PARKED)
		free(l);
	return res;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int valid, struct fuse_file_info *fi)
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
	if (res)
		fuse_reply_err(req, -res);
	else
		fuse_reply_attr(req, &st, cfg.attr_timeout);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct inode *in = IN(ino);
	char buf[PATH_MAX + 1];
	ssize_t n;
	int fd = inode_fd_get(in);

	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	n = readlinkat(fd, "", buf, sizeof(buf));
	if (n < 0) {
		n = -errno;
	} else if (n == sizeof(buf)) {
		n = -ENAMETOOLONG;
	}
	inode_fd_put(in);
	if (n < 0) {
		fuse_reply_err(req, -n);
		return;
	}
	buf[n] = '\0';
	fuse_reply_readlink(req, buf);
}

/* ------------------------------------------------------------- creation */

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
	res = creds_as_caller(req, &id);
	if (!res) {
		struct names_user u;

		names_user_begin(&u, inode_ino(p), name, 0, NULL);
		switch (kind) {
		case MK_NOD: res = mknodat(pfd, name, mode, rdev); break;
		case MK_DIR: res = mkdirat(pfd, name, mode); break;
		default: res = symlinkat(link, pfd, name); break;
		}
		res = res < 0 ? -errno : 0;
		names_user_end(&u);
		creds_as_daemon(&id);
	}
	inode_fd_put(p);
	if (res)
		return res;
	return do_lookup(parent, name, e);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	struct fuse_entry_param e;

	if (dir_wait(req, parent, &(struct dirlater){ .op = DL_MKNOD, .parent = parent,
						      .name = name, .mode = mode, .rdev = rdev }))
		return;
	reply_entry_or_err(req, do_make(req, parent, name, MK_NOD, mode, rdev,
					NULL, &e), &e);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	struct fuse_entry_param e;

	if (dir_wait(req, parent, &(struct dirlater){ .op = DL_MKDIR, .parent = parent,
						      .name = name, .mode = mode }))
		return;
	reply_entry_or_err(req, do_make(req, parent, name, MK_DIR, mode, 0,
					NULL, &e), &e);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	struct fuse_entry_param e;

	if (dir_wait(req, parent, &(struct dirlater){ .op = DL_SYMLINK, .parent = parent,
						      .name = name, .name2 = link }))
		return;
	reply_entry_or_err(req, do_make(req, parent, name, MK_SYMLINK, 0, 0,
					link, &e), &e);
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
	res = linkat(AT_FDCWD, path, npfd, newname, AT_SYMLINK_FOLLOW) < 0 ?
		      -errno : 0;
	names_user_end(&u);
	inode_fd_put(np);
	inode_fd_put(in);
	if (res)
		return res;
	return do_lookup(newparent, newname, e);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	struct fuse_entry_param e;

	if (dir_wait(req, newparent, &(struct dirlater){ .op = DL_LINK, .ino = ino,
							 .newparent = newparent,
							 .name = newname }))
		return;
	reply_entry_or_err(req, do_link(ino, newparent, newname, &e), &e);
}

/* -------------------------------------------------------------- removal */

static int do_remove(fuse_ino_t parent, const char *name, int flags)
{
	struct inode *p = IN(parent), *victim;
	struct names_user u;
	struct stat st;
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
	res = unlinkat(pfd, name, flags) < 0 ? -errno : 0;
	names_user_end(&u);
	inode_fd_put(p);
	if (!res && !flags && st.st_nlink == 1) {
		/* still reachable (an O_PATH descriptor): its state outlives the row */
		if (victim)
			events_load(victim);
		events_unlinked(st.st_ino);
	}
	if (!res && flags)
		events_dir_removed(st.st_ino);
	if (!res && victim)
		inode_unaliased(victim);
	inode_release(victim);
	return res;
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (dir_wait(req, parent, &(struct dirlater){ .op = DL_UNLINK, .parent = parent,
						      .name = name }))
		return;
	fuse_reply_err(req, -do_remove(parent, name, 0));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct dirlater l = { .op = DL_RMDIR, .parent = parent, .name = name };

	if (dir_wait(req, parent, &l))
		return;
	/* a directory not listed yet is empty only once its listing says so */
	if (atomic_load_explicit(&events_lazy_dirs, memory_order_relaxed)) {
		struct stat st;
		struct inode *victim = inode_hold_name(IN(parent), name, false, &st);
		bool taken = victim && dir_wait(req, inode_nodeid(victim), &l);

		inode_release(victim);
		if (taken)
			return;
	}
	fuse_reply_err(req, -do_remove(parent, name, AT_REMOVEDIR));
}

static int do_rename(fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		     const char *newname, unsigned int flags)
{
	struct inode *p = IN(parent), *np = IN(newparent), *src, *dst;
	struct names_user u;
	struct stat sst, dst_st;
	int pfd, npfd, res;

	if (reserved(parent, name) || reserved(newparent, newname))
		return -EPERM;
	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
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
	res = renameat2(pfd, name, npfd, newname, flags) < 0 ? -errno : 0;
	names_user_end(&u);
	inode_fd_put(np);
	if (!res && !(flags & RENAME_EXCHANGE))
		events_renamed(p, name, np, newname);
	if (!res && src != dst) {
		if (src)
			inode_moved(src, np, newname);
		if (dst && (flags & RENAME_EXCHANGE))
			inode_moved(dst, p, name);
		else if (dst)
			inode_unaliased(dst);
	}
	if (!res && !(flags & RENAME_EXCHANGE) && dst_st.st_nlink == 1 &&
	    !S_ISDIR(dst_st.st_mode) && dst_st.st_ino != sst.st_ino) {
		if (dst)
			events_load(dst); /* as in do_remove() */
		events_unlinked(dst_st.st_ino);
	}
out:
	if (pfd >= 0)
		inode_fd_put(p);
	inode_release(src);
	inode_release(dst);
	return res;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	struct dirlater l = { .op = DL_RENAME, .parent = parent, .name = name,
			      .newparent = newparent, .name2 = newname, .flags = flags };

	if (dir_wait(req, parent, &l) || dir_wait(req, newparent, &l))
		return;
	fuse_reply_err(req, -do_rename(parent, name, newparent, newname, flags));
}

/* ---------------------------------------------------------------- files */

static int open_flags(int flags)
{
	/*
	 * O_DIRECT is the kernel's business on the mount side; the store is
	 * read into our own unaligned buffers.
	 */
	flags &= ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | O_DIRECT);
	if (cfg.writeback) {
		/* the kernel may read pages of a file opened write-only */
		if ((flags & O_ACCMODE) == O_WRONLY)
			flags = (flags & ~O_ACCMODE) | O_RDWR;
	}
	/*
	 * The kernel positions appends itself and sends every write with
	 * its offset (pwritev2 RWF_NOAPPEND, a shared mapping's write-back
	 * included): the store descriptor must write where it says.
	 */
	flags &= ~O_APPEND;
	return flags | O_CLOEXEC;
}

/*
 * A file a hook watches the reads of (ACCESS_PERM) is opened past the
 * page cache, so that every read(2) reaches the daemon and is asked
 * about; such an open does not start passthrough (passthrough.c).  If
 * the inode passes through already, the open must too: its reads still
 * come here, and its mappings, which go to the backing file, are asked
 * about once at open (open_steps).
 */
static void access_watch(struct inode *in, struct fuse_file_info *fi)
{
	if (__builtin_expect(events_access_watched(), 0) && events_access_target(in)) {
		fi->direct_io = 1;
		fi->keep_cache = 0;
	}
}

/*
 * cold_reads=direct: a read-only open of a file with bytes missing is
 * served past the mount's page cache.  Its bytes are in the store's
 * page cache already (a fill writes them there, a read of them reads
 * them from there); through the mount's cache each would be copied into
 * a second page, in memory twice.  Without that copy a cold read of a
 * fast origin runs faster (loopback nginx, 1 GiB: 890 against 730 MB/s,
 * README), and the memory it leaves behind is half.  The price: no
 * kernel readahead on that open, so each read(2) is a round trip to the
 * daemon (4 KiB reads: 134 against 570 MB/s); the daemon's own readahead
 * still fetches ahead.  An open once the file is whole passes through or
 * is cached as any other.  The kernel keeps the two views coherent: with
 * DIRECT_IO_ALLOW_MMAP (op_init) it writes back the range's dirty pages
 * before a direct read, and such an open may still be mapped.
 */
static void cold_direct(struct inode *in, struct fuse_file_info *fi)
{
	if (cfg.cold_direct && (fi->flags & O_ACCMODE) == O_RDONLY &&
	    (inode_flags(in) & INODE_NONRESIDENT))
		fi->direct_io = 1;
}

/*
 * Open the store file of ino and fix the open's mode on the
 * subscriptions of generation gen (pt_gen(), read before the caller
 * tested any mask).  0, -errno, or PT_AGAIN: the subscriptions changed
 * since gen, or an open for writing must join passthrough and
 * !modify_asked (passthrough.h); nothing is left open, decide again.
 */
static int do_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, uint64_t gen,
		   bool modify_asked)
{
	struct inode *in = IN(ino);
	struct fuse_file_info fi0 = *fi;
	char path[32];
	int fd, res;

	fd = inode_fd_get(in);
	if (fd < 0)
		return fd;
	inode_proc_path(fd, path);
	res = open(path, open_flags(fi->flags));
	inode_fd_put(in);
	if (res < 0)
		return -errno;
	fi->fh = res;
	fi->keep_cache = 1;
	/*
	 * A read-only descriptor has nothing for op_flush to report: its
	 * close(2) sends no FLUSH (the kernel's own locks need none; under
	 * writeback_cache the kernel sends it anyway, for its dirty pages)
	 */
	if ((fi->flags & O_ACCMODE) == O_RDONLY)
		fi->noflush = 1;
	if (!inode_is_dir(in))
		access_watch(in, fi);
	if (!inode_is_dir(in)) {
		int err = events_load(in);

		if (err) {
			close(res);
			*fi = fi0;
			return err;
		}
		cold_direct(in, fi); /* the state loaded says what is missing */
	}
	inode_open_inc(in);
	if (inode_flags(in) & INODE_STATEFUL)
		events_opened(in);
	/* the mode, fixed for this open, atomically with the subscriptions */
	if (!inode_is_dir(in) && pt_opened(req, in, fi, gen, modify_asked) == PT_AGAIN) {
		close(res);
		inode_open_dec(in);
		if (inode_flags(in) & INODE_STATEFUL)
			events_released(in);
		*fi = fi0;
		return PT_AGAIN;
	}
	return 0;
}

/* An open the kernel will never release (the opener was interrupted). */
static void open_undo(fuse_req_t req, struct inode *in, struct fuse_file_info *fi)
{
	pt_released(req, in, fi);
	close(fi->fh);
	inode_open_dec(in);
	if (inode_flags(in) & INODE_STATEFUL)
		events_released(in);
}

static void open_reply(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int res)
{
	struct inode *in = IN(ino);
	/*
	 * A reader walking a directory: its next files may be fetched
	 * ahead.  The prefetcher hears of it after the reply: waking its
	 * thread before it cost the open 25 us, and 100-200 us when the
	 * thread then listed the directory on the open's CPU.  The
	 * reference keeps in for the hint once the file may be closed.
	 */
	bool hint = !res && prefetch_enabled() && !inode_is_dir(in) &&
		    (inode_flags(in) & (INODE_NONRESIDENT | INODE_PREFETCHED));

	if (hint)
		inode_ref(in);
	if (res)
		fuse_reply_err(req, -res);
	else if (fuse_reply_open(req, fi) == -ENOENT)
		open_undo(req, in, fi);
	if (hint)
		prefetch_opened(in);
}

static void open_later(void *arg, int res);

/*
 * The steps of an open, each of which may park on hooks (l->mode says
 * which one waits; its continuation goes on with the next):
 *   0  OPEN_PERM;
 *   1  for an open for writing of a file open in passthrough mode while
 *      a PRE_MODIFY watcher is subscribed, one PRE_MODIFY of the whole
 *      file: the kernel passes every open of such a file through, so the
 *      watcher cannot see its writes one by one and is asked at open;
 *   2  the store file is opened (l->opened) and the mode fixed, on the
 *      subscriptions of generation l->gen, read before step 0 tested
 *      any: if they changed meanwhile, or the file started passthrough
 *      since step 1 looked, nothing stays open and the steps start over
 *      (what was allowed stays allowed: l->open_asked, l->modify_asked);
 *   3  an open that passes through while an ACCESS_PERM watcher watches
 *      the file: one ACCESS_PERM of the whole file, for the same reason
 *      (its deny undoes the open).
 * Returns EVENTS_PARKED (l is the engine's), or the result (l is ours).
 */
static int open_steps(struct later *l, int step)
{
	struct inode *in = IN(l->ino);
	int res;

again:
	/* the continuation of an ask runs only once it was allowed */
	if (step == 0 && !l->open_asked && events_open_watched()) {
		l->mode = 1;
		l->open_asked = true;
		res = events_open_perm(in, l->fi.flags, l->req, open_later, l);
		if (res)
			return res;
	}
	if (step <= 1 && !l->modify_asked && (l->fi.flags & O_ACCMODE) != O_RDONLY &&
	    events_modify_watched() && pt_active(in)) {
		l->mode = 2;
		l->modify_asked = true;
		res = events_modify(in, 0, UINT64_MAX, l->req, open_later, l);
		if (res)
			return res;
	}
	if (step <= 2) {
		res = do_open(l->req, l->ino, &l->fi, l->gen, l->modify_asked);
		if (res == PT_AGAIN) {
			uint64_t gen = pt_gen();

			/* other hooks: what was asked is asked of them again */
			if (gen != l->gen)
				l->open_asked = l->modify_asked = false;
			l->gen = gen;
			step = 0;
			goto again;
		}
		if (res)
			return res;
		l->opened = true;
	}
	if (step <= 3 && l->fi.backing_id && events_access_watched() &&
	    events_access_target(in)) {
		l->mode = 4;
		res = events_access_perm(in, 0, UINT64_MAX, l->req, open_later, l);
		if (res)
			return res;
	}
	return 0;
}

static void open_finish(struct later *l, int res)
{
	if (res && l->opened) {
		open_undo(l->req, IN(l->ino), &l->fi);
		fuse_reply_err(l->req, -res);
	} else {
		open_reply(l->req, l->ino, &l->fi, res);
	}
	free(l);
}

static void open_later(void *arg, int res)
{
	struct later *l = arg;

	if (!res)
		res = open_steps(l, l->mode);
	if (res != EVENTS_PARKED)
		open_finish(l, res);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	uint64_t gen = pt_gen(); /* before any mask is tested */
	int res;

	/* asked before the store file is opened: a denied open does nothing */
	if (__builtin_expect(events_open_watched() || events_access_watched() ||
			     ((fi->flags & O_ACCMODE) != O_RDONLY && events_modify_watched()), 0) &&
	    !inode_is_dir(IN(ino))) {
		struct later *l;

slow:
		l = later_new(req, ino, fi, 0, 0, 0);
		if (!l)
			return;
		l->gen = gen;
		res = open_steps(l, 0);
		if (res != EVENTS_PARKED)
			open_finish(l, res);
		return;
	}
	res = do_open(req, ino, fi, gen, false);
	if (res == PT_AGAIN) {
		/* a hook joined meanwhile: the open is asked what it asks */
		gen = pt_gen();
		goto slow;
	}
	open_reply(req, ino, fi, res);
}

static int do_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, struct fuse_file_info *fi,
		     struct fuse_entry_param *e)
{
	struct inode *p = IN(parent), *in;
	struct creds id;
	int pfd, fd = -1, res;

	if (reserved(parent, name))
		return -EPERM;
	pfd = inode_fd_get(p);
	if (pfd < 0)
		return pfd;
	res = creds_as_caller(req, &id);
	if (!res) {
		struct names_user u;

		names_user_begin(&u, inode_ino(p), name, 0, NULL);
		fd = openat(pfd, name, open_flags(fi->flags) | O_CREAT | O_NOFOLLOW |
					       (fi->flags & O_EXCL), mode);
		res = fd < 0 ? -errno : 0;
		names_user_end(&u);
		creds_as_daemon(&id);
	}
	inode_fd_put(p);
	if (!res)
		res = do_lookup(parent, name, e);
	if (res) {
		if (fd >= 0)
			close(fd);
		return res;
	}
	in = IN(e->ino);
	fi->fh = fd;
	inode_open_inc(in);
	/*
	 * An O_CREAT open of a name that exists may meet a file in
	 * passthrough mode: the mode is decided as do_open() decides it; a
	 * write that must join passthrough under a PRE_MODIFY watcher is
	 * asked the whole file here, holding this worker (rare: the kernel
	 * sends CREATE only for a name it does not know).
	 */
	for (bool modify_asked = false;;) {
		uint64_t gen = pt_gen();
		int ask;

		fi->keep_cache = 1;
		fi->direct_io = 0;
		access_watch(in, fi);
		if (pt_opened(req, in, fi, gen, modify_asked) != PT_AGAIN)
			break;
		if (gen != pt_gen() || modify_asked)
			continue;
		ask = events_pre_modify(in, 0, UINT64_MAX, req);
		if (ask) {
			close(fd);
			inode_open_dec(in);
			inode_forget(in, 1);
			return ask;
		}
		modify_asked = true;
	}
	return 0;
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	int res;

	if (dir_wait(req, parent, &(struct dirlater){ .op = DL_CREATE, .parent = parent,
						      .name = name, .mode = mode, .fi = *fi }))
		return;
	res = do_create(req, parent, name, mode, fi, &e);

	if (res)
		fuse_reply_err(req, -res);
	else if (fuse_reply_create(req, &e, fi) == -ENOENT)
		open_undo(req, IN(e.ino), fi);
}

void ops_shutdown(void)
{
	readbuf_shutdown();
}

void ops_read_reply(struct fuse_req *req, struct inode *in, int fd, uint64_t off,
		    uint64_t len, int res)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(len);
	struct inval *iv = NULL;
	char *b;

	/*
	 * A read of a file whose reads a hook watches may be the kernel's
	 * filling of its page cache (a splice, a sendfile, a fault, a read
	 * through an open made before the hook: the kernel's splice of a
	 * direct I/O open reads through the page cache too).  What it
	 * caches would be served to the next reader unasked: the range is
	 * dropped once the reply is sent (hsmfs-hooks(7) says what the
	 * kernel still serves between the two).
	 */
	if (!res && __builtin_expect(events_access_watched(), 0) && events_access_target(in)) {
		/* IV.started is set once, before the session serves a request */
		iv = IV.started ? inval_new(inode_nodeid(in), off, len) : NULL;
		if (!iv)
			res = -ENOMEM; /* fail closed: no page stays cached unasked */
	}
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	if (len > READBUF_SPLICE_MAX && len <= READBUF_SIZE && (b = readbuf_take())) {
		ssize_t n = pread(fd, b, len, (off_t)off);

		if (n < 0)
			fuse_reply_err(req, errno);
		else
			fuse_reply_buf(req, b, (size_t)n);
		readbuf_put(b);
	} else {
		buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
		buf.buf[0].fd = fd;
		buf.buf[0].pos = off;
		fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
	}
	if (iv)
		inval_post(iv);
}

static void read_now(fuse_req_t req, struct inode *in, int fd, size_t size, off_t off)
{
	bool held = false;
	int res = 0;

	if (__builtin_expect(inode_flags(in) & (INODE_NONRESIDENT | INODE_TRACKED), 0)) {
		/* waiting for a hook parks the request, not this thread */
		res = events_read(in, off, size, req, fd, &held);
		if (res == EVENTS_PARKED)
			return;
	}
	ops_read_reply(req, in, fd, off, size, res);
	if (held)
		events_read_done(in);
}

/* A read's ACCESS_PERM was decided. */
static void read_later(void *arg, int res)
{
	struct later *l = arg;

	if (res)
		fuse_reply_err(l->req, -res);
	else
		read_now(l->req, IN(l->ino), (int)l->fi.fh, l->len, l->off);
	free(l);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	if (__builtin_expect(events_access_watched(), 0)) {
		struct later *l = later_new(req, ino, fi, off, size, 0);
		int res;

		if (!l)
			return;
		res = events_access_perm(IN(ino), (uint64_t)off, (uint64_t)off + size, req,
					 read_later, l);
		if (res != EVENTS_PARKED)
			read_later(l, res);
		return;
	}
	read_now(req, IN(ino), (int)fi->fh, size, off);
}

static void write_now(fuse_req_t req, struct inode *in, struct fuse_bufvec *in_buf,
		      off_t off, int fd)
{
	size_t size = fuse_buf_size(in_buf);
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(size);
	uint32_t flags = inode_flags(in);
	struct events_change ch;
	ssize_t res;

	/* a short splice into the store goes on: a write is all or an error */
	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY;
	out.buf[0].fd = fd;
	out.buf[0].pos = off;
	if (killpriv)
		privs_kill(fuse_req_ctx(req), fd, false);
	/* the user's bytes win: no fill is committed over them */
	if (__builtin_expect(flags & INODE_STATEFUL, 0))
		events_change_begin(in, &ch, off, off + size);
	res = fuse_buf_copy(&out, in_buf, 0);
	if (res == -ENOSPC && !cache_make_room(size)) {
		/* nothing was written: evicting made room, once more */
		res = fuse_buf_copy(&out, in_buf, 0);
	}
	if (__builtin_expect(flags & INODE_STATEFUL, 0))
		events_wrote(in, &ch, off, res > 0 ? res : 0);
	if (res < 0) {
		fuse_reply_err(req, -res);
		return;
	}
	fuse_reply_write(req, res);
}

static void write_later(void *arg, int res)
{
	struct later *l = arg;
	struct fuse_bufvec b = FUSE_BUFVEC_INIT(l->len);

	b.buf[0].mem = l->data;
	if (res)
		fuse_reply_err(l->req, -res);
	else
		write_now(l->req, IN(l->ino), &b, l->off, l->fi.fh);
	free(l);
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino,
			 struct fuse_bufvec *in_buf, off_t off,
			 struct fuse_file_info *fi)
{
	struct inode *in = IN(ino);

	if (__builtin_expect(events_modify_watched(), 0) &&
	    !(inode_flags(in) & INODE_QUIET)) {
		/* the bytes are kept while a hook decides: the request parks */
		size_t size = fuse_buf_size(in_buf);
		struct later *l = later_new(req, ino, fi, off, size, size);
		struct fuse_bufvec b = FUSE_BUFVEC_INIT(size);
		ssize_t res;

		if (!l)
			return;
		b.buf[0].mem = l->data;
		res = fuse_buf_copy(&b, in_buf, 0);
		if (res >= 0 && (size_t)res != size)
			res = -EIO;
		if (res >= 0)
			res = events_modify(in, off, off + size, req, write_later, l);
		if (res == EVENTS_PARKED)
			return;
		if (res < 0)
			fuse_reply_err(req, (int)-res);
		else
			write_now(req, in, &b, off, fi->fh);
		free(l);
		return;
	}
	write_now(req, in, in_buf, off, fi->fh);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	/* report errors of the store's close (NFS, quotas) at close(2) */
	int fd = dup(fi->fh);

	fuse_reply_err(req, fd < 0 ? errno : close(fd) < 0 ? errno : 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	pt_released(req, IN(ino), fi);
	close(fi->fh);
	inode_open_dec(IN(ino));
	if (inode_flags(IN(ino)) & INODE_STATEFUL)
		events_released(IN(ino));
	fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		     struct fuse_file_info *fi)
{
	int res = datasync ? fdatasync(fi->fh) : fsync(fi->fh);

	res = res < 0 ? -errno : 0;
	/* the file's state is as durable as its bytes (events.h) */
	if (!res && (inode_flags(IN(ino)) & INODE_STATEFUL))
		res = events_fsync(IN(ino));
	fuse_reply_err(req, -res);
}

static void fallocate_now(fuse_req_t req, struct inode *in, int fd, int mode,
			  off_t off, off_t len)
{
	struct events_change ch = { 0 };
	struct stat st, before;
	int res = 0;

	if (inode_flags(in) & INODE_STATEFUL)
		events_change_begin(in, &ch, off, off + len);
	if (ch.fs && fstat(fd, &before) < 0)
		before.st_size = 0;
	if (fallocate(fd, mode, off, len) < 0)
		res = -errno;
	if (res || !ch.fs || fstat(fd, &st) < 0)
		st.st_size = before.st_size = 0; /* nothing to record (or known) */
	if (!res && ch.fs && (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) &&
	    off < st.st_size) {
		/* the range is zeros now: the user's */
		events_wrote(in, &ch, off,
			     (off + len > st.st_size ? st.st_size : off + len) - off);
	} else if (!res && ch.fs && st.st_size > before.st_size) {
		/*
		 * Plain allocation changes no byte: what was missing is still
		 * the origin's, to be fetched.  Only what it added past the
		 * end is the user's (zeros).
		 */
		events_wrote(in, &ch, before.st_size, st.st_size - before.st_size);
	} else {
		events_change_end(in, &ch);
	}
	fuse_reply_err(req, -res);
}

static void fallocate_later(void *arg, int res)
{
	struct later *l = arg;

	if (res)
		fuse_reply_err(l->req, -res);
	else
		fallocate_now(l->req, IN(l->ino), (int)l->fi.fh, l->mode, l->off,
			      (off_t)l->len);
	free(l);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off,
			 off_t len, struct fuse_file_info *fi)
{
	struct inode *in = IN(ino);
	int res = 0;

	if (events_modify_watched()) {
		struct later *l = later_new(req, ino, fi, off, (size_t)len, 0);

		if (!l)
			return;
		l->mode = mode;
		res = events_modify(in, off, off + len, req, fallocate_later, l);
		if (res == EVENTS_PARKED)
			return;
		free(l);
	}
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	fallocate_now(req, in, fi->fh, mode, off, len);
}

static void copy_now(fuse_req_t req, struct inode *src, int fd_in, off_t off_in,
		     struct inode *dst, int fd_out, off_t off_out, size_t len,
		     int flags, bool held)
{
	off_t start_out = off_out;
	struct events_change ch = { 0 };
	ssize_t res;

	if (inode_flags(dst) & INODE_STATEFUL)
		events_change_begin(dst, &ch, off_out, off_out + len);
	res = copy_file_range(fd_in, &off_in, fd_out, &off_out, len, (unsigned)flags);
	if (res < 0)
		res = -errno;
	events_wrote(dst, &ch, start_out, res > 0 ? res : 0);
	if (held)
		events_read_done(src);
	if (res < 0)
		fuse_reply_err(req, (int)-res);
	else
		fuse_reply_write(req, res);
}

static void copy_later(void *arg, int res)
{
	struct later *l = arg;

	if (res) {
		if (l->held)
			events_read_done(IN(l->ino));
		fuse_reply_err(l->req, -res);
	} else {
		copy_now(l->req, IN(l->ino), l->fi.fh, l->off, IN(l->ino_out), l->fi_out.fh,
			 l->off_out, l->len, l->flags, l->held);
	}
	free(l);
}

/* The source's bytes are there (l->held set as they were checked): the destination's turn. */
static void copy_dst(struct later *l)
{
	int res = 0;

	if (events_modify_watched()) {
		res = events_modify(IN(l->ino_out), l->off_out, l->off_out + l->len, l->req,
				    copy_later, l);
		if (res == EVENTS_PARKED)
			return;
	}
	copy_later(l, res);
}

/* The source's check ended (events_read_check: res 0 holds a read). */
static void copy_src_later(void *arg, int res)
{
	struct later *l = arg;

	if (res) {
		copy_later(l, res); /* fails it */
		return;
	}
	l->held = true;
	copy_dst(l);
}

/* The source's turn: its missing bytes are waited for (parked). */
static void copy_src(struct later *l)
{
	struct inode *src = IN(l->ino);
	int res;

	if (inode_flags(src) & (INODE_NONRESIDENT | INODE_TRACKED)) {
		res = events_read_check(src, l->off, l->len, l->req, copy_src_later, l, &l->held);
		if (res == EVENTS_PARKED)
			return;
		if (res) {
			copy_later(l, res); /* fails it */
			return;
		}
	}
	copy_dst(l);
}

/* The source's ACCESS_PERM was decided. */
static void copy_perm_later(void *arg, int res)
{
	struct later *l = arg;

	if (res)
		copy_later(l, res); /* fails it */
	else
		copy_src(l);
}

/*
 * A copy within one hsmfs mount: the source's ACCESS_PERM, its missing
 * bytes, then the destination's PRE_MODIFY, each parked.
 */
static void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			       struct fuse_file_info *fi_in, fuse_ino_t ino_out,
			       off_t off_out, struct fuse_file_info *fi_out,
			       size_t len, int flags)
{
	struct inode *src = IN(ino_in), *dst = IN(ino_out);
	struct later *l;
	int res;

	if (!(inode_flags(src) & (INODE_NONRESIDENT | INODE_TRACKED)) &&
	    !events_modify_watched() && !events_access_watched()) {
		copy_now(req, src, fi_in->fh, off_in, dst, fi_out->fh, off_out, len, flags,
			 false);
		return;
	}
	l = later_new(req, ino_in, fi_in, off_in, len, 0);
	if (!l)
		return;
	l->ino_out = ino_out;
	l->fi_out = *fi_out;
	l->off_out = off_out;
	l->flags = flags;
	if (events_access_watched()) {
		res = events_access_perm(src, (uint64_t)off_in, (uint64_t)off_in + len, req,
					 copy_perm_later, l);
		if (res != EVENTS_PARKED)
			copy_perm_later(l, res);
		return;
	}
	copy_src(l);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	off_t res = lseek(fi->fh, off, whence);

	if (res < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_lseek(req, res);
}

/* ---------------------------------------------------------- directories */

struct dir_handle {
	DIR *dp;              /* owns the directory descriptor */
	off_t offset;         /* offset of entry, or of the next readdir() */
	struct dirent *entry; /* read but not yet returned, or NULL */
	bool is_root;         /* hide STORE_STATE_DIR */
};

static int do_opendir(fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct inode *in = IN(ino);
	struct dir_handle *d;
	char path[32];
	int fd, dfd;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	fd = inode_fd_get(in);
	if (fd < 0) {
		free(d);
		return fd;
	}
	inode_proc_path(fd, path);
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	inode_fd_put(in);
	if (dfd < 0 || !(d->dp = fdopendir(dfd))) {
		int res = -errno;

		if (dfd >= 0)
			close(dfd);
		free(d);
		return res;
	}
	d->is_root = in == inode_root();
	fi->fh = (uintptr_t)d;
	inode_open_inc(in);
	return 0;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int res;

	if (dir_wait(req, ino, &(struct dirlater){ .op = DL_OPENDIR, .ino = ino, .fi = *fi }))
		return;
	res = do_opendir(ino, fi);

	if (res)
		fuse_reply_err(req, -res);
	else if (fuse_reply_open(req, fi) == -ENOENT) {
		closedir(((struct dir_handle *)(uintptr_t)fi->fh)->dp);
		free((void *)(uintptr_t)fi->fh);
		inode_open_dec(IN(ino));
	}
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t offset, struct fuse_file_info *fi, bool plus)
{
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
	char *buf, *p;
	size_t rem = size;
	int err = 0;

	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (p = buf;;) {
		struct fuse_entry_param e;
		const char *name;
		size_t n;
		off_t next;

		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				err = errno;
				break;
			}
		}
		name = d->entry->d_name;
		next = d->entry->d_off;
		if (d->is_root && !strcmp(name, STORE_STATE_DIR)) {
			d->entry = NULL;
			d->offset = next;
			continue;
		}
		if (plus) {
			bool dot = !strcmp(name, ".") || !strcmp(name, "..");

			memset(&e, 0, sizeof(e));
			if (dot) {
				e.attr.st_ino = d->entry->d_ino;
				e.attr.st_mode = d->entry->d_type << 12;
			} else if (do_lookup(ino, name, &e)) {
				/* vanished meanwhile: skip it */
				d->entry = NULL;
				d->offset = next;
				continue;
			}
			n = fuse_add_direntry_plus(req, p, rem, name, &e, next);
			if (n > rem) {
				if (e.ino)
					inode_forget(IN(e.ino), 1);
				break;
			}
		} else {
			struct stat st = { 0 };

			st.st_ino = d->entry->d_ino;
			st.st_mode = d->entry->d_type << 12;
			n = fuse_add_direntry(req, p, rem, name, &st, next);
			if (n > rem)
				break;
		}
		p += n;
		rem -= n;
		d->entry = NULL;
		d->offset = next;
	}
	if (err && rem == size)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;

	closedir(d->dp);
	free(d);
	inode_open_dec(IN(ino));
	fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			struct fuse_file_info *fi)
{
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
	int fd = dirfd(d->dp);
	int res = datasync ? fdatasync(fd) : fsync(fd);

	fuse_reply_err(req, res < 0 ? errno : 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;
	int fd = inode_fd_get(inode_root());

	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	if (fstatvfs(fd, &sv) < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &sv);
	inode_fd_put(inode_root());
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

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	fuse_reply_err(req, -do_access(ino, mask));
}

/* --------------------------------------------------------------- xattrs */

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

/* One reply for a get/list result: a size probe, data, or an error. */
static void reply_xattr_result(fuse_req_t req, ssize_t res, const char *buf,
			       size_t size)
{
	if (res < 0)
		fuse_reply_err(req, -res);
	else if (!size)
		fuse_reply_xattr(req, res);
	else
		fuse_reply_buf(req, buf, res);
}

static void reply_xattr_data(fuse_req_t req, struct inode *in, enum xop op,
			     const char *name, size_t size)
{
	char *buf = NULL;
	ssize_t res;

	if (size && !(buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	res = do_xattr(in, op, name, buf, size, 0);
	reply_xattr_result(req, res, buf, size);
	free(buf);
}

#define VIRT_PREFIX "user.hsmfs."

/*
 * hsmfsctl refresh: a getxattr of user.hsmfs.refresh on the directory
 * (a getxattr holds no lock of the directory, whose names the refresh
 * invalidates).  Its value is "ok" once the refresh is applied
 * ("unlisted": not listed yet, so nothing to refresh); asked
 * for its size first (size 0), it says 16 and refreshes nothing.
 */
struct refresh_req {
	fuse_req_t req;
	size_t size;
};

static void refresh_done(void *arg, int res)
{
	struct refresh_req *r = arg;

	if (res == EVENTS_UNLISTED)
		fuse_reply_buf(r->req, "unlisted", r->size < 8 ? 0 : 8);
	else if (res)
		fuse_reply_err(r->req, -res);
	else if (r->size < 2)
		fuse_reply_err(r->req, ERANGE);
	else
		fuse_reply_buf(r->req, "ok", 2);
	free(r);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	if (!strcmp(name, VIRT_PREFIX "refresh")) {
		struct refresh_req *r;
		int res;

		if (!size) {
			fuse_reply_xattr(req, 16);
			return;
		}
		r = malloc(sizeof(*r));
		if (!r) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		*r = (struct refresh_req){ req, size };
		res = events_dir_refresh(IN(ino), req, refresh_done, r);
		if (res != EVENTS_PARKED)
			refresh_done(r, res);
		return;
	}
	if (!strncmp(name, VIRT_PREFIX, sizeof(VIRT_PREFIX) - 1)) {
		struct inode *in = IN(ino);
		struct stat st = { 0 };
		char *buf = size ? malloc(size) : NULL;
		ssize_t res;
		int fd = inode_fd_get(in);

		if (fd >= 0) {
			fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
			inode_fd_put(in);
		}
		res = size && !buf ? -ENOMEM :
				     events_xattr(in, st.st_size, name, buf, size);
		reply_xattr_result(req, res, buf, size);
		free(buf);
		return;
	}
	reply_xattr_data(req, IN(ino), X_GET, name, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	reply_xattr_data(req, IN(ino), X_LIST, NULL, size);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	ssize_t res;

	if (!acls && (!strcmp(name, "system.posix_acl_access") ||
		      !strcmp(name, "system.posix_acl_default"))) {
		/* nothing would enforce it: refused, never stored and ignored */
		res = -EOPNOTSUPP;
	} else if (!strcmp(name, VIRT_PREFIX "reload")) {
		/* hsmfsctl import changed this file in the store */
		if (inode_is_dir(IN(ino))) {
			events_dir_forget(IN(ino));
			res = 0;
		} else {
			res = events_reload(IN(ino));
		}
		if (!res)
			ops_invalidate(IN(ino), 0, 0);
	} else if (!strcmp(name, VIRT_PREFIX "stale")) {
		res = events_mark_stale(IN(ino));
	} else if (!strcmp(name, VIRT_PREFIX "evict")) {
		/* value: empty for the whole file, or "START-END" in bytes */
		unsigned long long a = 0, b = 0;
		char v[64];

		snprintf(v, sizeof(v), "%.*s", (int)(size < 63 ? size : 63), value);
		if (size && sscanf(v, "%llu-%llu", &a, &b) != 2)
			res = -EINVAL;
		else
			res = events_evict(IN(ino), a, b, inode_is_open(IN(ino)));
		if (!res)
			ops_invalidate(IN(ino), a, b ? b - a : 0);
	} else if (!strcmp(name, VIRT_PREFIX "pin") || !strcmp(name, VIRT_PREFIX "unpin")) {
		res = events_pin(IN(ino), name[11] == 'p');
	} else {
		res = !strncmp(name, VIRT_PREFIX, sizeof(VIRT_PREFIX) - 1) ? -EPERM :
			do_xattr(IN(ino), X_SET, name, (void *)value, size, flags);
	}

	fuse_reply_err(req, res < 0 ? -res : 0);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	ssize_t res = !strncmp(name, VIRT_PREFIX, sizeof(VIRT_PREFIX) - 1) ? -EPERM :
		do_xattr(IN(ino), X_REMOVE, name, NULL, 0, 0);

	fuse_reply_err(req, res < 0 ? -res : 0);
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
