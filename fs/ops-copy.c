/*
 * ops-copy.c - copy_file_range within one hsmfs mount: the source's
 * ACCESS_PERM and missing bytes, then the destination's PRE_MODIFY,
 * each parked on the engine with a struct later (ops-int.h), then the
 * copy between the store files.
 */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdlib.h>
#include <unistd.h>

#include "events.h"
#include "inode.h"
#include "ops-int.h"

static void copy_resume(void *arg, int res);

/* The reply of a copy: bytes copied, or -errno. */
static void reply_copy(fuse_req_t req, ssize_t res)
{
	if (res < 0)
		reply_err(req, (int)res);
	else
		fuse_reply_write(req, (size_t)res);
}

/*
 * Copy len bytes from the store descriptor fd_in to fd_out for req's
 * caller, and the destination's bookkeeping; ends the source's read hold
 * if held.  The bytes copied, or -errno.
 */
static ssize_t do_copy(fuse_req_t req, struct inode *src, int fd_in, off_t off_in,
		       struct inode *dst, int fd_out, off_t off_out, size_t len,
		       unsigned int flags, bool held)
{
	off_t start_out = off_out;
	struct events_change ch = { 0 };
	ssize_t res;

	/* the destination's set-ID bits: FUSE_COPY_FILE_RANGE says nothing of them */
	ops_kill_privs(req, dst, fd_out);
	if (inode_flags(dst) & INODE_STATEFUL)
		events_change_begin(dst, &ch, off_out, off_out + len);
	res = copy_file_range(fd_in, &off_in, fd_out, &off_out, len, flags);
	if (res < 0)
		res = -errno;
	events_wrote(dst, &ch, start_out, res > 0 ? res : 0);
	if (held)
		events_read_done(src);
	return res;
}

/* The destination's turn (the source's bytes are there): its PRE_MODIFY. */
static int copy_ask_dst(struct later *l)
{
	l->step = LATER_COPY;
	if (!events_modify_watched())
		return 0;
	return events_modify(IN(l->ino_out), (uint64_t)l->off_out, (uint64_t)l->off_out + l->len,
			     FRONT(l->req), copy_resume, l);
}

/*
 * A copy within one hsmfs mount, from l->step on: the source's
 * ACCESS_PERM (asked by the handler), its missing bytes, the
 * destination's PRE_MODIFY, each parked, then the copy.
 */
static int copy_step(struct later *l, int res)
{
	struct inode *src = IN(l->ino);

	switch (l->step) {
	case LATER_COPY_SRC:
		l->step = LATER_COPY_DST;
		if (!res && (inode_flags(src) & (INODE_NONRESIDENT | INODE_TRACKED))) {
			/* 0 at once sets l->held itself */
			res = events_read_check(src, (uint64_t)l->off, l->len, FRONT(l->req),
						copy_resume, l, &l->held);
			if (res == EVENTS_PARKED)
				return res;
		}
		if (!res)
			res = copy_ask_dst(l);
		break;
	case LATER_COPY_DST:
		/* the parked check of the source ended: 0 holds a read */
		if (!res) {
			l->held = true;
			res = copy_ask_dst(l);
		}
		break;
	case LATER_COPY:
		break;
	default:
		abort(); /* not a copy's step: our bug */
	}
	if (res == EVENTS_PARKED)
		return res;
	if (res && l->held)
		events_read_done(src);
	reply_copy(l->req, res ? res :
				  do_copy(l->req, src, (int)l->fi.fh, l->off, IN(l->ino_out),
					  (int)l->fi_out.fh, l->off_out, l->len, l->flags,
					  l->held));
	return 0;
}

void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
			struct fuse_file_info *fi_out, size_t len, int flags)
{
	struct inode *src = IN(ino_in), *dst = IN(ino_out);
	struct later *l;
	int res = 0;

	if (!(inode_flags(src) & (INODE_NONRESIDENT | INODE_TRACKED)) &&
	    !events_modify_watched() && !events_access_watched()) {
		reply_copy(req, do_copy(req, src, (int)fi_in->fh, off_in, dst, (int)fi_out->fh,
					off_out, len, (unsigned int)flags, false));
		return;
	}
	l = later_new(&(struct later){ .step = LATER_COPY_SRC, .req = req, .ino = ino_in,
				       .fi = *fi_in, .off = off_in, .len = len,
				       .ino_out = ino_out, .fi_out = *fi_out,
				       .off_out = off_out, .flags = (unsigned int)flags },
		      0);
	if (!l) {
		reply_copy(req, -ENOMEM);
		return;
	}
	if (events_access_watched())
		res = events_access_perm(src, (uint64_t)off_in, (uint64_t)off_in + len, FRONT(req),
					 copy_resume, l);
	if (res != EVENTS_PARKED)
		copy_resume(l, res);
}

/* The continuation of this family's parked requests (ops-int.h). */
static void copy_resume(void *arg, int res)
{
	later_ran(arg, copy_step(arg, res));
}
