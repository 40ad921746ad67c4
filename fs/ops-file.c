/*
 * ops-file.c - open files: open and create (whose mode is decided with
 * the hooks' subscriptions, passthrough.h), read, write, flush,
 * release, fsync, fallocate, lseek.  A read of bytes
 * missing parks on the engine, which answers it (ops_read_reply()); a
 * request a hook must allow first parks with a struct later whose step
 * makes it (ops-int.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "creds.h"
#include "events.h"
#include "fault.h"
#include "inode.h"
#include "names.h"
#include "ops-file.h"
#include "ops-int.h"
#include "ops-io.h"
#include "ops-inval.h"
#include "saved.h"
#include "passthrough.h"
#include "prefetch.h"
#include "privs.h"
#include "readbuf.h"

static void file_resume(void *arg, int res);

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
 * fast origin runs faster (README), and the memory it leaves behind is
 * half.  The price: no kernel readahead on that open, so each read(2) is
 * a round trip to the daemon, which small reads feel most; the daemon's
 * own readahead still fetches ahead.  An open once the file is whole
 * passes through or is cached as any other.  The kernel keeps the two
 * views coherent: with DIRECT_IO_ALLOW_MMAP (op_init) it writes back the
 * range's dirty pages before a direct read, and such an open may still
 * be mapped.
 */
static void cold_direct(struct inode *in, struct fuse_file_info *fi)
{
	if (ops_cfg.cold_direct && (fi->flags & O_ACCMODE) == O_RDONLY &&
	    (inode_flags(in) & INODE_NONRESIDENT))
		fi->direct_io = 1;
}

/* The open whose descriptor (and handle) is fi->fh, for a daemon taking over. */
static void saved_opened(struct fuse_file_info *fi, struct inode *in)
{
	struct saved_open *r = saved_open_rec((int)fi->fh);

	if (!r)
		return; /* past SAVED_OPENS_MAX: EBADF after a restart */
	r->node = (uint32_t)inode_nodeid(in);
	r->flags = (uint32_t)fi->flags;
	r->backing_id = 0;
	r->pt_mode = 0;
	saved_open_set(r, (int)fi->fh, SAVED_OPEN_FILE);
}

static void saved_closed(struct fuse_file_info *fi)
{
	struct saved_open *r = saved_open_rec((int)fi->fh);

	if (r)
		saved_open_set(r, (int)fi->fh, SAVED_OPEN_FREE);
}

/* A RELEASE of fi begun: its number stays taken until answered (saved.h). */
static void saved_releasing(struct fuse_file_info *fi)
{
	struct saved_open *r = saved_open_rec((int)fi->fh);

	if (r)
		saved_open_set(r, (int)fi->fh, SAVED_OPEN_RELEASING);
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
	int fd, res, pt;

	fd = inode_fd_get(in);
	if (fd < 0)
		return fd;
	inode_proc_path(fd, path);
	res = open(path, ops_store_flags(fi->flags));
	inode_fd_put(in);
	if (res < 0)
		return -errno;
	ops_store_noatime(res, inode_is_dir(in));
	fi->fh = res;
	saved_opened(fi, in);
	/* the page cache stays across opens, unless a direct write passed it by */
	fi->keep_cache = !atomic_load(&((struct inode_head *)in)->direct_writes);
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
			saved_closed(fi);
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
	pt = inode_is_dir(in) ? 0 : pt_opened(req, in, fi, gen, modify_asked);
	if (pt == PT_KILLED)
		ops_invalidate_attr(in);
	if (pt == PT_AGAIN) {
		saved_closed(fi);
		close(res);
		inode_open_dec(in);
		if (inode_flags(in) & INODE_STATEFUL)
			events_released(in);
		*fi = fi0;
		return PT_AGAIN;
	}
	return 0;
}

/* Undo an open the kernel will never release: its reply failed (the opener
 * was interrupted), or a step after the store open denied it. */
static void open_undo(fuse_req_t req, struct inode *in, struct fuse_file_info *fi)
{
	pt_released(req, in, fi);
	saved_closed(fi);
	close(fi->fh);
	inode_open_dec(in);
	if (inode_flags(in) & INODE_STATEFUL)
		events_released(in);
}

/* The one reply of an open (handler or open_step()): res, or fi. */
static void reply_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int res)
{
	struct inode *in = IN(ino);
	/*
	 * A reader walking a directory: its next files may be fetched
	 * ahead.  The prefetcher hears of it after the reply, so that the
	 * open waits neither for its thread to wake nor for it to list the
	 * directory on the open's CPU.  The reference keeps in for the
	 * hint once the file may be closed.
	 */
	bool hint = !res && prefetch_enabled() && !inode_is_dir(in) &&
		    (inode_flags(in) & (INODE_NONRESIDENT | INODE_PREFETCHED));

	if (hint)
		inode_ref(in);
	if (res)
		reply_err(req, res);
	else if (fuse_reply_open(req, fi) == -ENOENT)
		open_undo(req, in, fi);
	if (hint)
		prefetch_opened(in);
}

/*
 * The steps of an open from l->step on, each of which may park on
 * hooks (its continuation, open_step(), goes on with the next):
 *   LATER_OPEN_PERM    OPEN_PERM;
 *   LATER_OPEN_MODIFY  for an open for writing of a file open in
 *                      passthrough mode while a PRE_MODIFY watcher is
 *                      subscribed, one PRE_MODIFY of the whole file: the
 *                      kernel passes every open of such a file through,
 *                      so the watcher cannot see its writes one by one
 *                      and is asked at open;
 *   LATER_OPEN_STORE   the store file is opened (l->opened) and the mode
 *                      fixed, on the subscriptions of generation l->gen,
 *                      read before the first step tested any: if they
 *                      changed meanwhile, or the file started passthrough
 *                      since LATER_OPEN_MODIFY looked, nothing stays open
 *                      and the steps start over (what was allowed stays
 *                      allowed: l->open_asked, l->modify_asked);
 *   LATER_OPEN_ACCESS  an open that passes through while an ACCESS_PERM
 *                      watcher watches the file: one ACCESS_PERM of the
 *                      whole file, for the same reason (its deny undoes
 *                      the open);
 *   LATER_OPEN_REPLY   done.
 * l->step is set to the next step before each ask, which the engine may
 * decide on another thread before the ask returns.  Returns 0 (done),
 * -errno, or EVENTS_PARKED (l is the engine's).
 */
static int open_steps(struct later *l)
{
	struct inode *in = IN(l->ino);
	int res;

again:
	if (l->step == LATER_OPEN_PERM) {
		l->step = LATER_OPEN_MODIFY;
		if (!l->open_asked && events_open_watched()) {
			l->open_asked = true;
			res = events_open_perm(in, l->fi.flags, FRONT(l->req), file_resume, l);
			if (res)
				return res;
		}
	}
	if (l->step == LATER_OPEN_MODIFY) {
		l->step = LATER_OPEN_STORE;
		if (!l->modify_asked && (l->fi.flags & O_ACCMODE) != O_RDONLY &&
		    events_modify_watched() && pt_active(in)) {
			l->modify_asked = true;
			res = events_modify(in, 0, UINT64_MAX, FRONT(l->req), file_resume, l);
			if (res)
				return res;
		}
	}
	if (l->step == LATER_OPEN_STORE) {
		res = do_open(l->req, l->ino, &l->fi, l->gen, l->modify_asked);
		if (res == PT_AGAIN) {
			uint64_t gen = pt_gen();

			/* other hooks: what was asked is asked of them again */
			if (gen != l->gen)
				l->open_asked = l->modify_asked = false;
			l->gen = gen;
			l->step = LATER_OPEN_PERM;
			goto again;
		}
		if (res)
			return res;
		l->opened = true;
		l->step = LATER_OPEN_ACCESS;
	}
	if (l->step == LATER_OPEN_ACCESS) {
		l->step = LATER_OPEN_REPLY;
		if (l->fi.backing_id && events_access_watched() && events_access_target(in)) {
			res = events_access_perm(in, 0, UINT64_MAX, FRONT(l->req), file_resume, l);
			if (res)
				return res;
		}
	}
	return 0;
}

static int open_step(struct later *l, int res)
{
	/* a step whose ask was denied goes no further */
	if (!res)
		res = open_steps(l);
	if (res == EVENTS_PARKED)
		return res;
	if (res && l->opened)
		open_undo(l->req, IN(l->ino), &l->fi);
	reply_open(l->req, l->ino, &l->fi, res);
	return 0;
}

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	uint64_t gen = pt_gen(); /* before any mask is tested */
	/* asked before the store file is opened: a denied open does nothing */
	bool ask = __builtin_expect(events_open_watched() || events_access_watched() ||
					    ((fi->flags & O_ACCMODE) != O_RDONLY &&
					     events_modify_watched()),
				    0) &&
		   !inode_is_dir(IN(ino));
	struct later *l;

	if (!ask) {
		int res = do_open(req, ino, fi, gen, false);

		if (res != PT_AGAIN) {
			reply_open(req, ino, fi, res);
			return;
		}
		/* a hook joined meanwhile: the open is asked what it asks */
		gen = pt_gen();
	}
	l = later_new(&(struct later){ .step = LATER_OPEN_PERM, .req = req, .ino = ino,
				       .fi = *fi, .gen = gen },
		      0);
	if (!l) {
		reply_open(req, ino, fi, -ENOMEM);
		return;
	}
	file_resume(l, 0); /* its steps run here until one parks */
}

static int do_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, struct fuse_file_info *fi,
		     struct fuse_entry_param *e)
{
	struct inode *p = IN(parent), *in;
	struct creds id;
	uint64_t before = 0;
	int pfd, fd = -1, res, was = 0, resent;
	bool made = false, made_before, begun;

	if (reserved(parent, name))
		return -EPERM;
	/*
	 * resent, and the last daemon made the file: made on the mount
	 * still; begun only, it may have made it before it died (found below)
	 */
	resent = resend_lookup(ops_io_unique(), &before, &was);
	made_before = resent == RESEND_DONE && before;
	begun = resent == RESEND_BEGUN;
	pfd = inode_fd_get(p);
	if (pfd < 0)
		return pfd;
	mode = ops_create_mode(req, pfd, mode);
	res = creds_as_caller(req, &id);
	if (!res) {
		struct names_user u;

		names_user_begin(&u, inode_ino(p), name, 0, NULL);
		resend_begin(ops_io_unique(), OP_CREATE, 0);
		/*
		 * Made here, or opened (a name the kernel did not know of):
		 * which?  O_EXCL first; a name that exists is opened as
		 * O_CREAT would (after a few races with its removal, by
		 * O_CREAT itself, not knowing).
		 */
		for (int tries = 0;; tries++) {
			int excl = tries < 4 ? O_EXCL : 0;

			fd = openat(pfd, name, ops_store_flags(fi->flags) | O_CREAT | O_NOFOLLOW |
					       (fi->flags & O_EXCL) | excl, mode);
			made = fd >= 0 && excl;
			if (fd >= 0 || errno != EEXIST || (fi->flags & O_EXCL) || !excl)
				break;
			fd = openat(pfd, name, ops_store_flags(fi->flags) | O_NOFOLLOW);
			if (fd >= 0) {
				struct stat fst;

				/* as O_CREAT: a directory there is EISDIR */
				if (!fstat(fd, &fst) && S_ISDIR(fst.st_mode)) {
					close(fd);
					fd = -1;
					errno = EISDIR;
				}
				break;
			}
			if (errno != ENOENT)
				break; /* else removed meanwhile: make it again */
		}
		res = fd < 0 ? -errno : 0;
		made |= fd >= 0 && made_before;
		resend_set_aux(made);
		resend_done(res);
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
	if (made)
		events_created(in); /* before the open below loads its state */
	else if (begun)
		events_made_again(in); /* the last daemon's, not recorded? */
	ops_store_noatime(fd, false);
	fi->fh = fd;
	saved_opened(fi, in);
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
		int ask, pt;

		fi->keep_cache = 1;
		fi->direct_io = 0;
		access_watch(in, fi);
		pt = pt_opened(req, in, fi, gen, modify_asked);

		if (pt == PT_KILLED)
			ops_invalidate_attr(in);
		if (pt != PT_AGAIN)
			break;
		if (gen != pt_gen() || modify_asked)
			continue;
		ask = events_pre_modify(in, 0, UINT64_MAX, FRONT(req));
		if (ask) {
			saved_closed(fi);
			close(fd);
			inode_open_dec(in);
			inode_forget(in, 1);
			return ask;
		}
		modify_asked = true;
	}
	return 0;
}

static void reply_create(fuse_req_t req, int res, const struct fuse_entry_param *e,
			 struct fuse_file_info *fi)
{
	if (res)
		reply_err(req, res);
	else if (fuse_reply_create(req, e, fi) == -ENOENT)
		open_undo(req, IN(e->ino), fi);
	resend_end();
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	uint64_t aux;
	int res, was;

	/*
	 * Resent (ops-resend.c), and the last daemon made the file: it is
	 * opened as it is, neither refused (O_EXCL) nor emptied (O_TRUNC).
	 */
	switch (resend_lookup(ops_io_unique(), &aux, &was)) {
	case RESEND_DONE:
		if (was) {
			reply_create(req, was, &e, fi);
			return;
		}
		fi->flags &= ~(O_EXCL | O_TRUNC);
		break;
	case RESEND_BEGUN: {
		struct stat st;
		int pfd = inode_fd_get(IN(parent));

		if (pfd >= 0) {
			if (!fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW))
				fi->flags &= ~(O_EXCL | O_TRUNC);
			inode_fd_put(IN(parent));
		}
		break;
	}
	}
	res = dir_wait(req, parent, &(struct later){ .step = LATER_CREATE, .parent = parent,
						      .name = name, .mode = mode, .fi = *fi,
						      .unique = ops_io_unique() }, file_resume);

	if (res == EVENTS_PARKED)
		return;
	if (!res)
		res = do_create(req, parent, name, mode, fi, &e);
	reply_create(req, res, &e, fi);
}

/* ----------------------------------------------------------------- read */

/* see ops.h */
void ops_read_reply(struct front_req *r, struct inode *in, int fd, uint64_t off,
		    uint64_t len, int res)
{
	fuse_req_t req = FUSE_REQ(r);
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(len);
	struct inval_job *iv = NULL;
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
		/* started once, before the session serves a request */
		iv = inval_started() ? inval_new(inode_nodeid(in), off, len) : NULL;
		if (!iv)
			res = -ENOMEM; /* fail closed: no page stays cached unasked */
	}
	if (res) {
		reply_err(req, res);
		return;
	}
	if (len > READBUF_SPLICE_MAX && len <= READBUF_SIZE && (b = readbuf_take())) {
		ssize_t n = pread(fd, b, len, (off_t)off);

		if (n < 0)
			reply_err(req, -errno);
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

/*
 * A read whose ACCESS_PERM was allowed (res 0) or not: the bytes are
 * read now, or once they are present (events_read() parks the request
 * and the engine answers it through ops_read_reply()).
 */
static void read_run(fuse_req_t req, struct inode *in, int fd, size_t size, off_t off, int res)
{
	bool held = false;

	if (!res && __builtin_expect(inode_flags(in) & (INODE_NONRESIDENT | INODE_TRACKED), 0)) {
		/* waiting for a hook parks the request, not this thread */
		res = events_read(in, off, size, FRONT(req), fd, &held);
		if (res == EVENTS_PARKED)
			return;
	}
	ops_read_reply(FRONT(req), in, fd, off, size, res);
	if (held)
		events_read_done(in);
}

static int read_step(struct later *l, int res)
{
	read_run(l->req, IN(l->ino), (int)l->fi.fh, l->len, l->off, res);
	return 0;
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct later *l;
	int res;

	if (!__builtin_expect(events_access_watched(), 0)) {
		read_run(req, IN(ino), (int)fi->fh, size, off, 0);
		return;
	}
	l = later_new(&(struct later){ .step = LATER_READ, .req = req, .ino = ino, .fi = *fi,
				       .off = off, .len = size },
		      0);
	if (!l) {
		read_run(req, IN(ino), (int)fi->fh, size, off, -ENOMEM);
		return;
	}
	res = events_access_perm(IN(ino), (uint64_t)off, (uint64_t)off + size, FRONT(req), file_resume,
				 l);
	if (res != EVENTS_PARKED)
		file_resume(l, res);
}

/* ---------------------------------------------------------------- write */

/* see ops-int.h */
void ops_kill_privs(fuse_req_t req, struct inode *in, int fd)
{
	if (ops_killpriv && privs_kill(req, fd, false))
		ops_invalidate_attr(in);
}

/*
 * Write in_buf at off of the store descriptor fi->fh: the bytes written,
 * or -errno.
 */
static ssize_t do_write(fuse_req_t req, struct inode *in, struct fuse_bufvec *in_buf, off_t off,
			const struct fuse_file_info *fi)
{
	size_t size = fuse_buf_size(in_buf);
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(size);
	uint32_t flags = inode_flags(in);
	struct events_change ch;
	int fd = (int)fi->fh;
	ssize_t res;

	/* a short splice into the store goes on: a write is all or an error */
	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY;
	out.buf[0].fd = fd;
	out.buf[0].pos = off;
	/*
	 * Not for the kernel's write-back of its cached pages (the flusher's,
	 * as root): where a writer's change drops them, the kernel writes
	 * through, as that writer, instead of caching.
	 */
	if (!fi->writepage)
		ops_kill_privs(req, in, fd);
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
	return res;
}

/* The reply of a write: bytes written, or -errno. */
static void reply_write(fuse_req_t req, ssize_t res)
{
	if (res < 0) {
		reply_err(req, (int)res);
		return;
	}
	fault_named(FAULT_WRITE_DONE); /* a resent write must land where it did */
	fuse_reply_write(req, (size_t)res);
}

/*
 * A write through an O_DIRECT open passes by the page cache, whose
 * pages of the range other opens may read meanwhile: a buffered read
 * racing an asynchronous direct write can cache the old bytes after the
 * kernel's own invalidation, and every later open would keep them
 * (keep_cache).  So the range is dropped on the invalidator thread (not
 * on this worker: the drop waits for pages a read holds, and that read
 * may wait for a worker), and until that has run every open drops the
 * page cache itself (direct_writes, counted before the write is
 * answered: an open after the write sees it).  xfstests generic/451.
 */
static void direct_written(fuse_ino_t ino, const struct fuse_file_info *fi, off_t off,
			   ssize_t res)
{
	if ((fi->flags & O_DIRECT) && res > 0)
		inval_direct_write(IN(ino), (uint64_t)off, (uint64_t)res);
}

static int write_step(struct later *l, int res)
{
	struct fuse_bufvec b = FUSE_BUFVEC_INIT(l->len);
	ssize_t n;

	b.buf[0].mem = l->data;
	n = res ? res : do_write(l->req, IN(l->ino), &b, l->off, &l->fi);
	direct_written(l->ino, &l->fi, l->off, n);
	reply_write(l->req, n);
	return 0;
}

void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
		  struct fuse_file_info *fi)
{
	struct inode *in = IN(ino);
	struct fuse_bufvec b;
	struct later *l;
	size_t size;
	ssize_t res;

	if (!__builtin_expect(events_modify_watched(), 0) || (inode_flags(in) & INODE_QUIET)) {
		res = do_write(req, in, in_buf, off, fi);
		direct_written(ino, fi, off, res);
		reply_write(req, res);
		return;
	}
	/* the bytes are kept while a hook decides: the request parks */
	size = fuse_buf_size(in_buf);
	l = later_new(&(struct later){ .step = LATER_WRITE, .req = req, .ino = ino, .fi = *fi,
				       .off = off, .len = size },
		      size);
	if (!l) {
		reply_write(req, -ENOMEM);
		return;
	}
	b = (struct fuse_bufvec)FUSE_BUFVEC_INIT(size);
	b.buf[0].mem = l->data;
	res = fuse_buf_copy(&b, in_buf, 0);
	if (res >= 0 && (size_t)res != size)
		res = -EIO;
	if (res >= 0)
		res = events_modify(in, off, off + size, FRONT(req), file_resume, l);
	if (res != EVENTS_PARKED)
		file_resume(l, (int)res);
}

/* ---------------------------------------------------------- the others */

static int do_flush(struct fuse_file_info *fi)
{
	/* report errors of the store's close (NFS, quotas) at close(2) */
	int fd = dup(fi->fh);

	/*
	 * No descriptor for the dup: the daemon's limit, not the user's
	 * close failing; the store's own close at RELEASE still comes
	 * (counted: fdlimit.h).
	 */
	if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
		fdlimit_note(-errno);
		return 0;
	}
	if (fd < 0)
		return -errno;
	return close(fd) < 0 ? -errno : 0;
}

void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	reply_err(req, do_flush(fi));
}

void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct saved_open *r = saved_open_rec((int)fi->fh);
	uint8_t kind = r ? __atomic_load_n(&r->kind, __ATOMIC_ACQUIRE) : SAVED_OPEN_FILE;

	if (ops_io_unique() >> 63)
		fault_delay(FAULT_RELEASE_RESENT);
	if (kind == SAVED_OPEN_RELEASING) {
		/*
		 * Resent: the last daemon did this RELEASE and died before
		 * its reply.  Its number is a placeholder here
		 * (saved_reserve()), kept from every open until now.
		 */
		reply_err(req, 0);
		saved_closed(fi);
		close(fi->fh);
		fault_delay(FAULT_RELEASE_RESENT_DONE);
		return;
	}
	if (kind != SAVED_OPEN_FILE) {
		/* resent after the last daemon had answered it: done already */
		reply_err(req, 0);
		return;
	}
	ops_lost_forget(fi->fh);
	/*
	 * RELEASING before anything is undone: a daemon taking over then
	 * counts this open as gone, whatever step it died at.  Marked after
	 * pt_released(), a death between them left a record the next daemon
	 * adopted with a backing id the kernel had closed, which every open
	 * of the inode was then given (and failed with EIO).
	 */
	saved_releasing(fi);
	pt_released(req, IN(ino), fi);
	fault_named(FAULT_PT_RELEASED);
	inode_open_dec(IN(ino));
	if (inode_flags(IN(ino)) & INODE_STATEFUL)
		events_released(IN(ino));
	fault_named(FAULT_OP_RELEASED);
	fault_delay(FAULT_RELEASING);
	reply_err(req, 0);
	/*
	 * Freed once answered, and closed after that: until the reply the
	 * number is taken, so that no other open (of this daemon, or of the
	 * next one if this one dies now) gets it while the kernel may still
	 * send this RELEASE again.
	 */
	saved_closed(fi);
	close(fi->fh);
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int res = datasync ? fdatasync(fi->fh) : fsync(fi->fh);

	res = res < 0 ? -errno : 0;
	/* the file's state is as durable as its bytes (events.h) */
	if (!res && (inode_flags(IN(ino)) & INODE_STATEFUL))
		res = events_fsync(IN(ino));
	reply_err(req, res);
}

/* Bytes of data a punch reads to find it changes none, at most: past it, a change. */
#define ZEROS_CHECK_MAX (64u << 20)

/*
 * Does [off, end) of the store file fd hold only zeros (its holes, and
 * data read back)?  False past ZEROS_CHECK_MAX bytes of data, or on an
 * error: then it is taken for a change.
 */
static bool all_zeros(int fd, off_t off, off_t end)
{
	static const char zero[4096];
	char buf[sizeof(zero)];
	size_t budget = ZEROS_CHECK_MAX;

	while (off < end) {
		off_t d = lseek(fd, off, SEEK_DATA), h;

		if (d < 0)
			return errno == ENXIO;
		if (d >= end)
			return true;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			return false;
		for (off = d; off < h && off < end;) {
			size_t want = (size_t)((h < end ? h : end) - off);
			ssize_t n = pread(fd, buf, want < sizeof(buf) ? want : sizeof(buf), off);

			if (n <= 0 || (size_t)n > budget || memcmp(buf, zero, (size_t)n))
				return false;
			budget -= (size_t)n;
			off += n;
		}
	}
	return true;
}

/*
 * fallocate(2) of the store descriptor fd by req's caller, and its
 * bookkeeping: 0 or -errno.  Every mode drops set-ID bits, as on the
 * kernel's own filesystems; FUSE_FALLOCATE says nothing of it.
 */
static int do_fallocate(fuse_req_t req, struct inode *in, int fd, int mode, off_t off, off_t len)
{
	struct events_change ch = { 0 };
	struct stat st, before;
	bool zeroing = mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE), same = false;
	int res = 0;

	ops_kill_privs(req, in, fd);
	if (inode_flags(in) & INODE_STATEFUL)
		events_change_begin(in, &ch, off, off + len);
	if (ch.fs && fstat(fd, &before) < 0)
		before.st_size = 0;
	/*
	 * Zeros over zeros of a clean file, every byte present (a
	 * dig-holes): no byte of it changes, and it stays clean.
	 */
	if (ch.fs && zeroing && off + len <= before.st_size &&
	    events_change_clean(&ch, (uint64_t)off, (uint64_t)(off + len)))
		same = all_zeros(fd, off, off + len);
	if (fallocate(fd, mode, off, len) < 0)
		res = -errno;
	if (res || !ch.fs || fstat(fd, &st) < 0)
		st.st_size = before.st_size = 0; /* nothing to record (or known) */
	if (!res && same) {
		/* and its time stays the origin's version's, as after an eviction */
		futimens(fd, (struct timespec[2]){ { 0, UTIME_OMIT }, before.st_mtim });
		events_change_end(in, &ch);
	} else if (!res && ch.fs && zeroing && off < st.st_size) {
		/* the range holds zeros: the user's */
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
	return res;
}

static int fallocate_step(struct later *l, int res)
{
	if (!res)
		res = do_fallocate(l->req, IN(l->ino), (int)l->fi.fh, l->falloc_mode, l->off,
				   (off_t)l->len);
	reply_err(l->req, res);
	return 0;
}

void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		  struct fuse_file_info *fi)
{
	struct inode *in = IN(ino);
	struct later *l;
	int res;

	if (!events_modify_watched()) {
		reply_err(req, do_fallocate(req, in, (int)fi->fh, mode, off, len));
		return;
	}
	l = later_new(&(struct later){ .step = LATER_FALLOCATE, .req = req, .ino = ino, .fi = *fi,
				       .falloc_mode = mode, .off = off, .len = (size_t)len },
		      0);
	if (!l) {
		reply_err(req, -ENOMEM);
		return;
	}
	res = events_modify(in, off, off + len, FRONT(req), file_resume, l);
	if (res != EVENTS_PARKED)
		file_resume(l, res);
}

/* ---------------------------------------------------------------- lseek */

static void reply_lseek(fuse_req_t req, off_t res)
{
	if (res < 0)
		reply_err(req, (int)res);
	else
		fuse_reply_lseek(req, res);
}

void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	/* where the data is in the file the user sees, not in the store (hsmfs(8)) */
	reply_lseek(req, events_seek(IN(ino), (int)fi->fh, off, whence));
}

/* LATER_CREATE: the directory is listed (res 0), the create runs again. */
static int create_again(struct later *l, int res)
{
	if (res)
		reply_err(l->req, res);
	else {
		ops_io_set_unique(l->unique); /* the request this run is for (ops-resend.c) */
		op_create(l->req, l->parent, l->name, l->mode, &l->fi);
	}
	return 0;
}

/* The continuation of this family's parked requests (ops-int.h). */
static void file_resume(void *arg, int res)
{
	struct later *l = arg;

	switch (l->step) {
	case LATER_CREATE:
		later_ran(l, create_again(l, res));
		break;
	case LATER_OPEN_PERM:
	case LATER_OPEN_MODIFY:
	case LATER_OPEN_STORE:
	case LATER_OPEN_ACCESS:
	case LATER_OPEN_REPLY:
		later_ran(l, open_step(l, res));
		break;
	case LATER_READ:
		later_ran(l, read_step(l, res));
		break;
	case LATER_WRITE:
		later_ran(l, write_step(l, res));
		break;
	case LATER_FALLOCATE:
		later_ran(l, fallocate_step(l, res));
		break;
	default:
		abort(); /* a step of another family: our bug */
	}
}
