/*
 * ops-dir.c - open directories: opendir (which first waits for the
 * directory's listing, dir_wait()), readdir(plus), releasedir, fsyncdir.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "inode.h"
#include "ops-int.h"
#include "saved.h"

static void dir_resume(void *arg, int res);

/* ------------------------------------------------------ open directories */

struct dir_handle {
	DIR *dp;              /* owns the directory descriptor */
	off_t offset;         /* offset of entry, or of the next readdir() */
	struct dirent *entry; /* read but not yet returned, or NULL */
	bool is_root;         /* hide STORE_STATE_DIR */
};

/*
 * An open directory's handle is its descriptor's number (as a file's
 * is): a daemon taking over reopens it there (ops_dir_adopt()).  This
 * table finds the handle's state by that number; it is written before
 * the reply that gives the kernel the number.
 */
static _Atomic(struct dir_handle *) *dirs;

static struct dir_handle *dir_of(struct fuse_file_info *fi)
{
	return atomic_load_explicit(&dirs[fi->fh], memory_order_relaxed);
}

static void dir_set(int fd, struct dir_handle *d, struct inode *in)
{
	struct saved_open *r = saved_open_rec(fd);

	atomic_store_explicit(&dirs[fd], d, memory_order_relaxed);
	if (d) {
		r->node = (uint32_t)inode_nodeid(in);
		r->flags = O_RDONLY | O_DIRECTORY;
		r->backing_id = 0;
		r->pt_mode = 0;
		saved_open_set(r, fd, SAVED_OPEN_DIR);
	} else {
		saved_open_set(r, fd, SAVED_OPEN_FREE);
	}
}

static void dir_free(struct fuse_file_info *fi)
{
	struct dir_handle *d = dir_of(fi);

	dir_set((int)fi->fh, NULL, NULL);
	closedir(d->dp);
	free(d);
}

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
	if (dfd >= (int)SAVED_OPENS_MAX) {
		close(dfd);
		free(d);
		return -EMFILE;
	}
	if (dfd < 0 || !(d->dp = fdopendir(dfd))) {
		int res = -errno;

		if (dfd >= 0)
			close(dfd);
		free(d);
		return res;
	}
	ops_store_noatime(dfd, true);
	d->is_root = in == inode_root();
	fi->fh = (uint64_t)dfd;
	/*
	 * The kernel keeps the listing across opens (FOPEN_CACHE_DIR |
	 * FOPEN_KEEP_CACHE): a change through the mount resets it, and the
	 * daemon drops it after each change it makes to the directory
	 * itself (listing.c, hsmfsctl import's reload), with its attributes,
	 * whose mtime the kernel checks at each rewind.
	 */
	fi->cache_readdir = ops_cfg.cache_dirs;
	fi->keep_cache = ops_cfg.cache_dirs;
	dir_set(dfd, d, in);
	inode_open_inc(in);
	return 0;
}

int ops_dir_adopt(int fd, struct inode *in)
{
	struct dir_handle *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->dp = fdopendir(fd);
	if (!d->dp) {
		free(d);
		return -errno;
	}
	d->offset = -1; /* the next readdir seeks where the kernel says */
	d->is_root = in == inode_root();
	dir_set(fd, d, in);
	inode_open_inc(in);
	return 0;
}

static void reply_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int res)
{
	if (res) {
		reply_err(req, res);
	} else if (fuse_reply_open(req, fi) == -ENOENT) {
		/* the opener was interrupted: the kernel never releases it */
		dir_free(fi);
		inode_open_dec(IN(ino));
	}
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int res = dir_wait(req, ino, &(struct later){ .step = LATER_OPENDIR, .ino = ino,
						       .fi = *fi }, dir_resume);

	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_opendir(ino, fi);
	reply_opendir(req, ino, fi, res);
}

/*
 * Fill buf (size bytes) with the entries of the open directory fi from
 * offset on (with their lookups: plus).  The bytes filled, or -errno
 * when the directory could not be read and nothing was filled.
 */
static ssize_t do_readdir(fuse_req_t req, fuse_ino_t ino, char *buf, size_t size, off_t offset,
			  struct fuse_file_info *fi, bool plus)
{
	struct dir_handle *d = dir_of(fi);
	char *p;
	size_t rem = size;
	int err = 0;

	if (!d)
		return -EBADF; /* a handle the daemon taking over could not reopen */

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
		return -err;
	return (ssize_t)(size - rem);
}

static void reply_dir_buf(fuse_req_t req, ssize_t res, const char *buf)
{
	if (res < 0)
		reply_err(req, (int)res);
	else
		fuse_reply_buf(req, buf, (size_t)res);
}

static void readdir_any(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi, bool plus)
{
	char *buf = malloc(size);

	reply_dir_buf(req, buf ? do_readdir(req, ino, buf, size, off, fi, plus) : -ENOMEM, buf);
	free(buf);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	readdir_any(req, ino, size, off, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	readdir_any(req, ino, size, off, fi, true);
}

void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dir_handle *d;
	int placeholder = -1;

	struct saved_open *r = saved_open_rec((int)fi->fh);
	uint8_t kind = r ? __atomic_load_n(&r->kind, __ATOMIC_ACQUIRE) : SAVED_OPEN_FREE;

	ops_lost_forget(fi->fh); /* before anything is read of it: no retry meanwhile */
	d = dir_of(fi);
	if (d) {
		/* its number taken until answered, as op_release() keeps it (saved.h) */
		atomic_store_explicit(&dirs[fi->fh], NULL, memory_order_relaxed);
		saved_open_set(r, (int)fi->fh, SAVED_OPEN_RELEASING);
		inode_open_dec(IN(ino));
	} else if (kind == SAVED_OPEN_DIR || kind == SAVED_OPEN_RELEASING) {
		/*
		 * a placeholder left by a takeover (saved.h): a handle it
		 * could not reopen, or one whose RELEASEDIR the last daemon
		 * did and died before answering
		 */
		placeholder = (int)fi->fh;
	}
	/* else a RELEASEDIR resent after the last daemon answered it: done */
	reply_err(req, 0);
	/* freed once answered and closed after, as op_release() does, for the same reason */
	if (d || placeholder >= 0)
		saved_open_set(r, (int)fi->fh, SAVED_OPEN_FREE);
	if (d) {
		closedir(d->dp);
		free(d);
	}
	if (placeholder >= 0)
		close(placeholder);
}

void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int fd = dir_of(fi) ? dirfd(dir_of(fi)->dp) : -1;
	int res = fd < 0 ? (errno = EBADF, -1) : datasync ? fdatasync(fd) : fsync(fd);

	reply_err(req, res < 0 ? -errno : 0);
}

/* LATER_OPENDIR: the directory is listed (res 0), the opendir runs again. */
static int opendir_again(struct later *l, int res)
{
	if (res)
		reply_err(l->req, res);
	else
		op_opendir(l->req, l->ino, &l->fi);
	return 0;
}

/* The continuation of this family's parked requests (ops-int.h). */
static void dir_resume(void *arg, int res)
{
	later_ran(arg, opendir_again(arg, res));
}

void ops_dir_init(void)
{
	dirs = calloc(SAVED_OPENS_MAX, sizeof(*dirs));
	if (!dirs)
		abort(); /* at start-up: 8 MB of address space */
}
