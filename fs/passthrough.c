/* passthrough.c - see passthrough.h */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "events.h"
#include "inode.h"
#include "log.h"
#include "passthrough.h"
#include "privs.h"
#include "saved.h"

/* What an open was made, by its store descriptor (fi->fh) */
enum { M_NONE, M_CACHED, M_PT, M_PT_WRITE };

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;      /* a registration or release ended */
	bool enabled;
	bool killpriv;      /* set-ID bits are the daemon's to drop (privs.h) */
	uint8_t *mode;      /* by descriptor number */
	size_t nmode;
	struct pt_stats st;
	bool warned;
	_Atomic uint64_t gen;   /* subscription generation, bumped under lock */
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static __thread bool plock_mine; /* this thread holds P.lock (debug asserts) */
#define PLOCK_HELD() assert(plock_mine)

static void plock(void)
{
	pthread_mutex_lock(&P.lock);
	plock_mine = true;
}

static void punlock(void)
{
	plock_mine = false;
	pthread_mutex_unlock(&P.lock);
}

static void pwait(void)
{
	plock_mine = false;
	pthread_cond_wait(&P.cond, &P.lock);
	plock_mine = true;
}

uint64_t pt_gen(void)
{
	return atomic_load_explicit(&P.gen, memory_order_acquire);
}

void pt_subscriptions_changed(void)
{
	/*
	 * Under P.lock: an open that commits after this sees the new
	 * generation; one that committed before it is ordered before the
	 * hook's WELCOME, which the engine sends after this returns.
	 */
	plock();
	atomic_store_explicit(&P.gen, atomic_load_explicit(&P.gen, memory_order_relaxed) + 1,
			      memory_order_release);
	punlock();
}

static struct inode_head *head(struct inode *in)
{
	return (struct inode_head *)in;
}

/*
 * The registration h->pt_busy kept others out of is over (undone, or its
 * backing file closed): wake them, and in no longer passes through when
 * nothing of it does.  Takes P.lock.
 */
static void busy_end(struct inode_head *h, struct inode *in)
{
	plock();
	h->pt_busy = false;
	pthread_cond_broadcast(&P.cond);
	if (!h->pt_opens && !h->backing_id)
		inode_flags_clear(in, INODE_PASSTHROUGH);
	punlock();
}

void pt_init(struct fuse_conn_info *conn, bool wanted)
{
	P.killpriv = conn->want & FUSE_CAP_HANDLE_KILLPRIV_V2;
	if (!wanted || !(conn->capable & FUSE_CAP_PASSTHROUGH))
		return;
	/*
	 * The default stacking (FUSE_BACKING_STACKED_UNDER): the store is on
	 * a plain filesystem, and an overlay may stack on the mount.  A store
	 * on overlayfs or FUSE is refused per file, and counted.
	 */
	conn->want |= FUSE_CAP_PASSTHROUGH;
	P.enabled = true;
}

/* Remember the mode of the open whose descriptor is fd.  P.lock held. */
static void set_mode(int fd, uint8_t mode)
{
	PLOCK_HELD();
	if (fd < 0)
		return;
	if ((size_t)fd >= P.nmode) {
		size_t n = P.nmode ? P.nmode : 1024;
		uint8_t *m;

		while (n <= (size_t)fd)
			n *= 2;
		m = realloc(P.mode, n);
		if (!m)
			return; /* seen as M_NONE at release: nothing to undo */
		memset(m + P.nmode, 0, n - P.nmode);
		P.mode = m;
		P.nmode = n;
	}
	P.mode[fd] = mode;
}

/* The mode of the open whose descriptor is fd, forgotten.  P.lock held. */
static uint8_t take_mode(int fd)
{
	uint8_t m = M_NONE;

	PLOCK_HELD();
	if (fd >= 0 && (size_t)fd < P.nmode) {
		m = P.mode[fd];
		P.mode[fd] = M_NONE;
	}
	return m;
}

/*
 * Register the store file of fd as in's backing file: opened for
 * writing when it can be (all passthrough opens of an inode share it),
 * else as fd is.  Returns the backing id or 0.
 */
static int register_backing(struct fuse_req *req, int fd, bool *ret_writable, int *ret_err)
{
	char path[64];
	int bfd, id, acc = fcntl(fd, F_GETFL);

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	bfd = open(path, O_RDWR | O_CLOEXEC);
	*ret_writable = bfd >= 0 || (acc >= 0 && (acc & O_ACCMODE) != O_RDONLY);
	errno = 0;
	id = fuse_passthrough_open(req, bfd >= 0 ? bfd : fd);
	*ret_err = errno;
	if (bfd >= 0)
		close(bfd); /* the kernel keeps its own reference */
	return id > 0 ? id : 0;
}

int pt_opened(struct fuse_req *req, struct inode *in, struct fuse_file_info *fi,
	      uint64_t gen, bool modify_asked)
{
	struct inode_head *h = head(in);
	bool write = (fi->flags & O_ACCMODE) != O_RDONLY, writable = false;
	bool want, reg = false, privileged, direct, killed;
	uint8_t mode = M_CACHED;
	int id = 0;

	/*
	 * O_DIRECT: the store's alignment rules would apply; O_APPEND: the
	 * kernel's passthrough loses RWF_NOAPPEND; fi->direct_io: its reads
	 * are to be asked about (ACCESS_PERM).  A write passes through
	 * only with no watcher of changes subscribed and nothing evictable
	 * in the store (a write that meets a full store evicts and retries,
	 * in the daemon only).  When the inode passes through already every
	 * open must too; those that could not start it pass their mappings
	 * through and nothing else (below).
	 */
	/*
	 * With set-ID bits or capabilities to drop on a write, and that job
	 * ours (killpriv), the daemon must see the writes: the kernel's
	 * passthrough leaves them to us too.
	 */
	privileged = write && P.killpriv && privs_any((int)fi->fh);
	/* what the daemon must serve itself */
	direct = (fi->flags & (O_DIRECT | O_APPEND)) || fi->direct_io ||
		 (write && (privileged || events_modify_watched() || cache_any()));
	want = P.enabled && !(inode_flags(in) & INODE_NONRESIDENT) && !direct;
	plock();
	while (h->pt_busy)
		pwait();
	if (atomic_load_explicit(&P.gen, memory_order_relaxed) != gen) {
		/* a hook joined or left since the open's tests: decide again */
		punlock();
		return PT_AGAIN;
	}
	if (h->backing_id && write && events_modify_watched() && !modify_asked) {
		/*
		 * It would pass through, its mappings unseen, with nobody
		 * asked: the whole file is asked first (ops-file.c), then again.
		 */
		punlock();
		return PT_AGAIN;
	}
	if (h->backing_id) {
		/* the kernel wants every open of an inode in passthrough mode so */
		h->pt_opens++;
		id = h->backing_id;
		mode = write ? M_PT_WRITE : M_PT;
	} else if (want && !h->cached_opens) {
		h->pt_busy = true;
		reg = true;
	} else {
		h->cached_opens++;
	}
	punlock();

	if (reg) {
		int err = 0;

		/* the engine's word that it is whole and stays so (no eviction) */
		if (events_pass_begin(in))
			id = register_backing(req, (int)fi->fh, &writable, &err);
		plock();
		if (atomic_load_explicit(&P.gen, memory_order_relaxed) != gen) {
			/*
			 * A hook joined or left while the backing file was
			 * registered: undone (pt_busy still keeps the others
			 * out, and no eviction starts), and the open decides
			 * again.
			 */
			punlock();
			if (id)
				fuse_passthrough_close(req, id);
			busy_end(h, in);
			return PT_AGAIN;
		}
		h->pt_busy = false;
		pthread_cond_broadcast(&P.cond);
		if (id) {
			h->backing_id = id;
			h->pt_writable = writable;
			h->pt_opens++;
			mode = write ? M_PT_WRITE : M_PT;
		} else {
			P.st.passthrough_refused += err != 0;
			inode_flags_clear(in, INODE_PASSTHROUGH);
			h->cached_opens++;
			/* not allowed (an unprivileged mount): do not ask again */
			if (err == EPERM)
				P.enabled = false;
			/* EPERM unprivileged (the kernel allows it to root only): expected */
			if (err && !P.warned && (err != EPERM || geteuid() == 0)) {
				P.warned = true;
				log_info("the kernel refused a passthrough backing file (%s): %s",
					 strerror(err), err == EPERM ?
					 "files are served through the daemon" :
					 "that file is served through the daemon");
			}
		}
		punlock();
	}
	if (mode != M_CACHED) {
		fi->backing_id = id;
		fi->keep_cache = 0; /* the kernel allows no cache flags with it */
		/*
		 * An open the daemon must serve (direct) of an inode that
		 * passes through already (above): its reads and writes come to
		 * the daemon (FOPEN_DIRECT_IO beside FOPEN_PASSTHROUGH), only
		 * its mappings go to the backing file (a watcher asked about
		 * them at open, ops-file.c).
		 */
		fi->direct_io = direct;
	}
	/*
	 * Passed through though it has privileges to drop (the inode passes
	 * through already): dropped now, for what the daemon will not see
	 * (its writes come to the daemon, a shared mapping's do not); the
	 * caller tells the kernel, which shows the mode it cached.
	 */
	killed = mode == M_PT_WRITE && privileged && privs_kill(req, (int)fi->fh, false);
	if (mode == M_PT_WRITE && (inode_flags(in) & INODE_STATEFUL)) {
		struct stat st;

		if (fstat((int)fi->fh, &st) == 0)
			events_unseen_writes(in, (uint64_t)st.st_size, true);
	}
	plock();
	set_mode((int)fi->fh, mode);
	if (mode == M_PT_WRITE)
		h->pt_write_opens++;
	P.st.passthrough_opens += mode != M_CACHED;
	{
		/* for a daemon taking over (pt_adopt()) */
		struct saved_open *r = saved_open_rec((int)fi->fh);

		if (r) {
			r->pt_mode = mode;
			r->backing_id = mode != M_CACHED ? id : 0;
			r->pad = h->pt_writable;
		}
	}
	punlock();
	/* what the kernel cached before this open would be shown on: dropped */
	return killed || mode == M_PT_WRITE ? PT_KILLED : 0;
}

void pt_adopt(struct inode *in, int fd, const struct saved_open *r)
{
	struct inode_head *h = head(in);
	bool pt = r->pt_mode == M_PT || r->pt_mode == M_PT_WRITE;

	/* the kernel still passes this open through: the inode stays whole */
	if (pt && !h->backing_id)
		events_pass_begin(in);
	/* and writes the store unseen, as at the open (pt_open()) */
	if (r->pt_mode == M_PT_WRITE && (inode_flags(in) & INODE_STATEFUL)) {
		struct stat st;

		if (fstat(fd, &st) == 0)
			events_unseen_writes(in, (uint64_t)st.st_size, true);
	}
	plock();
	set_mode(fd, r->pt_mode);
	if (r->pt_mode == M_PT_WRITE)
		h->pt_write_opens++;
	if (pt) {
		if (!h->backing_id) {
			h->backing_id = r->backing_id;
			h->pt_writable = r->pad & 1;
		}
		h->pt_opens++;
	} else if (r->pt_mode == M_CACHED) {
		h->cached_opens++;
	}
	punlock();
}

void pt_released(struct fuse_req *req, struct inode *in, struct fuse_file_info *fi)
{
	struct inode_head *h = head(in);
	uint8_t mode;
	int close_id = 0;

	plock();
	mode = take_mode((int)fi->fh);
	if (mode == M_PT_WRITE && h->pt_write_opens)
		h->pt_write_opens--;
	if (mode == M_CACHED && h->cached_opens) {
		h->cached_opens--;
	} else if ((mode == M_PT || mode == M_PT_WRITE) && h->pt_opens && !--h->pt_opens) {
		close_id = h->backing_id;
		h->backing_id = 0;
		h->pt_busy = true; /* opens meanwhile wait for the release */
	}
	punlock();
	if (mode == M_PT_WRITE && (inode_flags(in) & INODE_STATEFUL)) {
		struct stat st;

		/* what the kernel wrote: dirty, with the size it left */
		events_unseen_writes(in, fstat((int)fi->fh, &st) == 0 ? (uint64_t)st.st_size :
									UINT64_MAX, false);
	}
	if (close_id) {
		fuse_passthrough_close(req, close_id);
		busy_end(h, in);
	}
}

bool pt_active(struct inode *in)
{
	bool on;

	plock();
	on = head(in)->backing_id || head(in)->pt_busy;
	punlock();
	return on;
}

void pt_get_stats(struct pt_stats *ret)
{
	plock();
	*ret = P.st;
	ret->passthrough = P.enabled;
	punlock();
}
