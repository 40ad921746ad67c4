/*
 * fan.c - the fanotify front end's events (fan.h): the reader thread,
 * an event's file found in the inode table, its range checked by the
 * engine in pieces, the one answer, the mark dropped once the file is
 * all present; the serving loop and the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "events.h"
#include "fan-kernel.h"
#include "fan-marks.h"
#include "fan.h"
#include "fault.h"
#include "hashset.h"
#include "inode.h"
#include "clock.h"
#include "log.h"
#include "saved.h"

/* A large range (an mmap's) is checked in at most this many pieces at once. */
#define FAN_PIECES 64
#define FAN_LEASE_TRIES 3 /* 5 ms apart: an eviction's lease, refused (fan_evicting()) */

/* A file an event was about: one lookup reference held while it is in F.files. */
struct fan_file {
	struct inode *in;
	unsigned busy; /* events in flight on it, under F.lock */
};

/* One event read from the group: answered once, when left drops to 0. */
struct fan_req {
	int fd;               /* the event's descriptor: its answer names it */
	pid_t pid;
	struct fan_file *f;
	_Atomic int left;     /* pieces not ended, and the dispatcher's own */
	_Atomic int err;      /* the first failure, or 0 */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t idle;
	struct hashset files;  /* inode number -> struct fan_file *, under lock */
	pthread_mutex_t mark_lock; /* a mark added or removed (a leaf) */
	struct hashset evicting;   /* inode numbers being evicted, under mark_lock */
	unsigned dispatching;  /* events being handed to the engine, under lock */
	bool stopping;         /* under lock: none is handed any more */
	_Atomic bool exiting;
	_Atomic bool handover; /* hsmfsctl restart asked (fan_handover()) */
	pthread_t reader;
	bool reader_up;
	int wake[2];           /* the reader's stop */
	int sig[2];            /* the signals that end serving */
	int spare;             /* no mount's file: an answered event's number holds it */
	uint64_t chunk;
	bool keep_blocks;      /* not thin (fan_start()) */
	pid_t pid;             /* the daemon's */
	_Atomic uint64_t events, denied;
} F = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.idle = PTHREAD_COND_INITIALIZER,
	.files = HASHSET_INIT(SIZE_MAX, true, NULL),
	.mark_lock = PTHREAD_MUTEX_INITIALIZER,
	.evicting = HASHSET_INIT(SIZE_MAX, false, NULL),
	.wake = { -1, -1 },
	.sig = { -1, -1 },
	.spare = -1,
};

/* The errnos FAN_DENY_ERRNO passes (the kernel refuses any other). */
static int deny_errno(int res)
{
	switch (-res) {
	case EIO: case EPERM: case EBUSY: case ETXTBSY: case EAGAIN: case ENOSPC: case EDQUOT:
		return -res;
	default:
		return EIO;
	}
}

/*
 * The response to the event of number fd written: false if the kernel
 * may still wait for it (ENOENT: it has no such event, the reader
 * killed, or it was answered before).
 */
static bool respond(int fd, int res)
{
	struct fanotify_response r = {
		.fd = fd,
		.response = res ? FAN_DENY_ERRNO(deny_errno(res)) : FAN_ALLOW,
	};

	if (write(K.group, &r, sizeof(r)) == sizeof(r) || errno == ENOENT)
		return true;
	if (res) {
		r.response = FAN_DENY;
		if (write(K.group, &r, sizeof(r)) == sizeof(r) || errno == ENOENT)
			return true;
	}
	log_err("backend=fanotify: cannot %s an event: %s", res ? "deny" : "answer",
		strerror(errno));
	return false;
}

/*
 * The one answer to the event of number fd (saved.h: the kernel knows
 * an event by it alone); res 0 allows.  Its record is freed after the
 * answer is written and before the number can be given again (close):
 * a daemon that dies in between leaves a record whose answer the next
 * one writes again, and the kernel has no event of that number (ENOENT).
 * false: not answered (said), the record kept.
 */
static bool answer_number(int fd, int res)
{
	struct saved_fan_event *e = saved_fan_event(fd);

	if (res)
		atomic_fetch_add(&F.denied, 1);
	/*
	 * The event's file let go before the answer, its number kept by
	 * the spare: the reader woken by the answer may unmount at once,
	 * which that file, opened through the mount, would find busy, or
	 * evict, whose lease any open file refuses.  Not a number this
	 * daemon had before it could keep it (saved_reserve()): that
	 * descriptor is another's.
	 */
	if (F.spare >= 0 && !(e && e->handle_type == SAVED_FAN_NOT_KEPT))
		(void)dup3(F.spare, fd, O_CLOEXEC);
	/*
	 * Not answered: its record and its number stay (one descriptor),
	 * so that no other event takes the number, and the keeper's end
	 * denies it
	 */
	if (!respond(fd, res))
		return false;
	fault_named(FAULT_FAN_ANSWERED);
	fault_delay(FAULT_FAN_ANSWERED);
	if (e)
		__atomic_store_n(&e->state, 0, __ATOMIC_RELEASE);
	return true;
}

/* The answer to the event of descriptor fd, which is then closed. */
static void answer(int fd, int res)
{
	if (answer_number(fd, res))
		close(fd);
}

/* ------------------------------------------------------------ files */

/* The inode of path (relative to the store's root), with a lookup reference. */
static int walk_path(char *path, struct stat *st, struct inode **ret)
{
	struct inode *cur = inode_root(), *next;
	char *save = NULL;
	int res = 0;

	for (char *c = strtok_r(path, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		res = inode_lookup(cur, c, st, &next);
		if (cur != inode_root())
			inode_forget(cur, 1);
		if (res)
			return res;
		cur = next;
	}
	if (cur == inode_root())
		return -EISDIR;
	*ret = cur;
	return 0;
}

/* The length of dir if path is dir or below it, else -1. */
static ssize_t prefix_len(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (strncmp(path, dir, n) || (path[n] != '/' && path[n]))
		return -1;
	return (ssize_t)n;
}

/*
 * The file of an event's descriptor, busy: from F.files, else looked up
 * by the path the descriptor was opened by, below base (the mountpoint,
 * or "" for one of the daemon's clone, whose root is "/").
 */
static struct fan_file *file_get(int fd, const char *base, struct stat *ret_st, int *ret_res)
{
	char link[32], path[PATH_MAX];
	struct fan_file *f = NULL;
	struct inode *in;
	struct stat got, *st = ret_st;
	size_t pos;
	ssize_t len, at;
	int res;

	if (fstat(fd, st)) {
		*ret_res = -errno;
		return NULL;
	}
	pthread_mutex_lock(&F.lock);
	pos = hashset_find(&F.files, st->st_ino);
	if (pos != HASHSET_NONE) {
		f = (struct fan_file *)(uintptr_t)*hashset_val(&F.files, pos);
		f->busy++;
	}
	pthread_mutex_unlock(&F.lock);
	if (f) {
		int pfd = inode_fd_get(f->in);

		if (pfd >= 0) {
			inode_fd_put(f->in);
			return f;
		}
		/*
		 * Renamed (or its directory) beside the daemon, which sees no
		 * names here: the path it was opened by is its alias again
		 */
	}
	inode_proc_path(fd, link);
	len = readlink(link, path, sizeof(path) - 1);
	if (len < 0 && f)
		return f; /* the engine finds it gone: EIO */
	if (len < 0) {
		*ret_res = -errno;
		return NULL;
	}
	path[len] = '\0';
	/* opened below base, or by the store's own path (a removed file's ends " (deleted)") */
	at = base ? prefix_len(path, base) : -1;
	if (at < 0 && base && *base && K.store)
		at = prefix_len(path, K.store);
	if (at < 0 && f)
		return f;
	if (at < 0) {
		log_debug("backend=fanotify: an event on '%s', not below the mountpoint", path);
		*ret_res = -EIO;
		return NULL;
	}
	res = walk_path(path + at, &got, &in);
	if (!res && (got.st_ino != st->st_ino || got.st_dev != st->st_dev)) {
		inode_forget(in, 1);
		res = -ESTALE; /* moved meanwhile */
	}
	if (f) {
		if (!res)
			inode_forget(in, 1); /* the same inode, its alias made again */
		return f;
	}
	if (res) {
		log_debug("backend=fanotify: cannot find '%s' in the store: %s", path, strerror(-res));
		*ret_res = -EIO;
		return NULL;
	}
	pthread_mutex_lock(&F.lock);
	pos = hashset_find(&F.files, st->st_ino);
	if (pos != HASHSET_NONE) {
		f = (struct fan_file *)(uintptr_t)*hashset_val(&F.files, pos);
	} else if ((f = calloc(1, sizeof(*f))) &&
		   hashset_add(&F.files, st->st_ino, &pos) == 1) {
		*hashset_val(&F.files, pos) = (uintptr_t)f;
		f->in = in;
		in = NULL;
	} else {
		free(f);
		f = NULL;
	}
	if (f)
		f->busy++;
	pthread_mutex_unlock(&F.lock);
	if (in)
		inode_forget(in, 1); /* another event's, or no room */
	if (!f)
		*ret_res = -ENOMEM;
	return f;
}

struct inode *fan_inode_of(int fd, struct stat *st, int *res)
{
	char link[32], path[PATH_MAX];
	struct stat root, got;
	struct inode *in;
	ssize_t len, at;

	if (fstat(fd, st)) {
		*res = -errno;
		return NULL;
	}
	if (!fstat(K.treedir, &root) && root.st_ino == st->st_ino && root.st_dev == st->st_dev)
		return inode_root();
	inode_proc_path(fd, link);
	len = readlink(link, path, sizeof(path) - 1);
	if (len < 0) {
		*res = -errno;
		return NULL;
	}
	path[len] = '\0';
	at = K.mnt ? prefix_len(path, K.mnt) : -1;
	if (at < 0 && K.store)
		at = prefix_len(path, K.store);
	if (at < 0) {
		*res = -EXDEV; /* not a file of this mount */
		return NULL;
	}
	*res = walk_path(path + at, &got, &in);
	if (*res)
		return NULL;
	if (got.st_ino != st->st_ino || got.st_dev != st->st_dev) {
		inode_forget(in, 1);
		*res = -ESTALE; /* moved meanwhile */
		return NULL;
	}
	return in;
}

void fan_inode_put(struct inode *in)
{
	if (in != inode_root())
		inode_forget(in, 1);
}

/*
 * An event on f ended.  A file all present now loses its mark (its
 * next opens pay nothing) and its place in F.files.
 */
static void file_put(struct fan_file *f)
{
	struct inode *in = f->in;
	bool drop = false;
	int fd, res;

	pthread_mutex_lock(&F.lock);
	if (!--f->busy && (inode_flags(in) & INODE_LOADED) &&
	    !(inode_flags(in) & INODE_NONRESIDENT) && !F.stopping) {
		hashset_remove(&F.files, inode_ino(in));
		drop = true;
	}
	pthread_mutex_unlock(&F.lock);
	if (!drop)
		return;
	fd = inode_fd_get(in);
	/* not a file an eviction just marked (fan_evicting()) */
	pthread_mutex_lock(&F.mark_lock);
	res = fd < 0 ? fd : hashset_find(&F.evicting, inode_ino(in)) != HASHSET_NONE ||
				     (inode_flags(in) & INODE_NONRESIDENT) ? 0 :
				     fan_mark_fd(fd, false);
	pthread_mutex_unlock(&F.mark_lock);
	if (fd >= 0)
		inode_fd_put(in);
	/* ENOENT: it had no mark (made all present before it was marked) */
	if (res && res != -ENOENT)
		log_warn("backend=fanotify: cannot unmark a file all present: %s", strerror(-res));
	inode_forget(in, 1);
	free(f);
}

/* ------------------------------------------------------------ events */

static void req_end(struct fan_req *req, int res)
{
	int none = 0;

	if (res)
		atomic_compare_exchange_strong(&req->err, &none, res);
	if (atomic_fetch_sub(&req->left, 1) != 1)
		return;
	/*
	 * The file let go first (its mark removed if all present, the
	 * engine's descriptor closed): the reader, once answered, finds
	 * it as it is, unmarked and held by nobody (a lease: evict.c)
	 */
	file_put(req->f);
	answer(req->fd, atomic_load(&req->err));
	free(req);
}

/* A parked piece ended (the engine's continuation): res 0 holds its bytes. */
static void piece_done(void *arg, int res)
{
	struct fan_req *req = arg;

	if (res)
		log_debug("backend=fanotify: a piece failed: %s", strerror(-res));
	else
		events_read_done(req->f->in);
	req_end(req, res);
}

/*
 * FAN_PRE_ACCESS of [off, off + count): the engine checks it (and fills
 * what is missing) in pieces of whole chunks, at most FAN_PIECES, at once.
 * count 0 is a truncate(2) to off, about to be made (Linux 6.18 says so
 * only for an off at a page's start; to any other length, the event is
 * the page at the new end, as a read's, and the change is seen when
 * FAN_MODIFY reports it: meanwhile no fill copies past the store
 * file's end, commit_fill()).  fd was opened by a path below base
 * (file_get()).
 */
static void on_access(int fd, const char *base, pid_t pid, uint64_t off, uint64_t count)
{
	struct fan_req *req = NULL;
	struct fan_file *f;
	struct stat st;
	uint64_t piece, end;
	int res = 0;

	pthread_mutex_lock(&F.lock);
	if (F.stopping) {
		pthread_mutex_unlock(&F.lock);
		answer(fd, -EIO);
		return;
	}
	F.dispatching++;
	pthread_mutex_unlock(&F.lock);

	f = file_get(fd, base, &st, &res);
	if (f)
		res = events_load(f->in);
	/* a truncation the daemon did not see (open(O_TRUNC)) is the user's */
	if (f && !res)
		events_changed_unseen(f->in, (uint64_t)st.st_size, false);
	if (f && !res && !count) {
		/*
		 * A truncate(2) to off, before it is made: claimed as a change
		 * of the user's (which waits for a fill being copied, so that
		 * no copy extends the file again after it), then allowed
		 */
		struct events_change c;

		if (off != (uint64_t)st.st_size) {
			events_change_begin(f->in, &c, off < (uint64_t)st.st_size ? off :
							 (uint64_t)st.st_size, UINT64_MAX);
			events_truncated(f->in, &c, (uint64_t)st.st_size, off);
		}
		file_put(f);
		answer(fd, 0);
		goto out;
	}
	if (f && !res && !(req = calloc(1, sizeof(*req))))
		res = -ENOMEM;
	if (!f || res) {
		log_debug("backend=fanotify: an event not checked: %s", strerror(-(res ? res : EIO)));
		if (f)
			file_put(f);
		answer(fd, res ? res : -EIO);
		goto out;
	}
	req->fd = fd;
	req->pid = pid;
	req->f = f;
	atomic_init(&req->left, 1);
	end = count > UINT64_MAX - off ? UINT64_MAX : off + count;
	piece = (count + FAN_PIECES - 1) / FAN_PIECES;
	piece = (piece + F.chunk - 1) / F.chunk * F.chunk;
	for (uint64_t at = off; at < end; at += piece) {
		uint64_t len = end - at < piece ? end - at : piece;
		bool held = false;

		atomic_fetch_add(&req->left, 1);
		res = events_read_check(f->in, at, len, (struct front_req *)req, piece_done, req,
					&held);
		if (res == EVENTS_PARKED)
			continue;
		if (!res && held)
			events_read_done(f->in);
		req_end(req, res < 0 ? res : 0);
	}
	req_end(req, 0); /* the dispatcher's own */
out:
	pthread_mutex_lock(&F.lock);
	if (!--F.dispatching)
		pthread_cond_broadcast(&F.idle);
	pthread_mutex_unlock(&F.lock);
}

/*
 * A file with bytes missing that a user left with fewer blocks than its
 * size (a truncate up, a punch: holes of the user's) gets blocks for
 * all of it again, allocated and unwritten, which read as the zeros the
 * user made: the kernel answers lseek(SEEK_DATA) and st_blocks itself,
 * and a tool that sees fewer blocks than the size (cp, install, mv,
 * tar --sparse) looks for holes, and would copy zeros for the missing
 * bytes, which are holes to it too (fan_give_blocks(): its times stay
 * the user's).  fd: an O_PATH descriptor in the daemon's clone.
 */
static void give_blocks(struct inode *in, int fd, const struct stat *st)
{
	int res;

	if (!F.keep_blocks || !(inode_flags(in) & INODE_NONRESIDENT) ||
	    (uint64_t)st->st_blocks * 512 >= (uint64_t)st->st_size)
		return;
	res = fan_give_blocks(fd);
	if (res < 0)
		log_debug("backend=fanotify: cannot give a changed file its blocks: %s",
			  strerror(-res));
}

/*
 * A file changed through the mountpoint (the notification group:
 * FAN_MODIFY, FAN_CLOSE_WRITE): the change is the user's, its file
 * dirty, its size the store file's.
 */
static void on_changed(int fd)
{
	struct fan_file *f;
	struct stat st;
	int res = 0;

	fault_delay(FAULT_CHANGE_SEEN);
	pthread_mutex_lock(&F.lock);
	if (F.stopping) {
		pthread_mutex_unlock(&F.lock);
		close(fd);
		return;
	}
	F.dispatching++;
	pthread_mutex_unlock(&F.lock);
	f = file_get(fd, "", &st, &res);
	if (f) {
		if (!events_load(f->in)) {
			events_changed_unseen(f->in, (uint64_t)st.st_size, true);
			give_blocks(f->in, fd, &st);
		}
		file_put(f);
	}
	close(fd);
	pthread_mutex_lock(&F.lock);
	if (!--F.dispatching)
		pthread_cond_broadcast(&F.idle);
	pthread_mutex_unlock(&F.lock);
}

/*
 * The event at *at of buf (len bytes read) copied into *md, *ret_body
 * its first byte; *at moves past it.  An event with a file id is not a
 * multiple of 8 bytes long: none is read in place.
 */
static bool next_event(const char *buf, ssize_t len, size_t *at,
		       struct fanotify_event_metadata *md, const char **ret_body)
{
	if (len < 0 || *at + sizeof(*md) > (size_t)len)
		return false;
	memcpy(md, buf + *at, sizeof(*md));
	if (md->event_len < sizeof(*md) || md->metadata_len > md->event_len ||
	    *at + md->event_len > (size_t)len)
		return false;
	*ret_body = buf + *at;
	*at += md->event_len;
	return true;
}

/* The changes' queue overflowed: said, and counted for hsmfsctl doctor. */
static void changes_lost(void)
{
	__atomic_add_fetch(&saved_head()->fan_lost_changes, 1, __ATOMIC_RELAXED);
	log_err("backend=fanotify: the queue of changes overflowed: a change of a user's may not "
		"be recorded, its file not dirty (hsmfsctl doctor)");
}

/*
 * The events of the notification group in buf: each names its file by
 * a file id, opened in the daemon's clone.  old: queued before this
 * daemon started (take_over()), when a dead daemon's own may be there.
 */
static void on_notify(const char *buf, ssize_t len, bool old)
{
	struct fanotify_event_metadata m, *md = &m;
	const char *body;
	size_t at = 0;

	while (next_event(buf, len, &at, &m, &body)) {
		struct fanotify_event_info_fid fid;
		union {
			struct file_handle fh;
			char raw[sizeof(struct file_handle) + MAX_HANDLE_SZ];
		} h;
		size_t hoff = md->metadata_len + offsetof(struct fanotify_event_info_fid, handle);
		int fd;

		if (md->mask & FAN_Q_OVERFLOW) {
			changes_lost();
			continue;
		}
		if (fault_hit(FAULT_FAN_CHANGES_LOST))
			changes_lost(); /* as if one had come before this one */
		/*
		 * The daemon's own: a change of a file's size or times reports
		 * no mount, which the ignore mark needs.  The keeper's (before
		 * it started the first daemon), and, queued before this daemon
		 * started, a dead daemon's: its pid may be a user's later on
		 */
		if (md->pid == F.pid || (uint32_t)md->pid == saved_head()->keeper_pid ||
		    (old && saved_daemon_pid((uint32_t)md->pid)))
			continue;
		if (md->event_len < hoff + sizeof(struct file_handle))
			continue;
		memcpy(&fid, body + md->metadata_len, sizeof(fid));
		memset(&h, 0, sizeof(h));
		memcpy(&h, body + hoff, md->event_len - hoff < sizeof(h) ? md->event_len - hoff : sizeof(h));
		if (fid.hdr.info_type != FAN_EVENT_INFO_TYPE_FID ||
		    h.fh.handle_bytes > MAX_HANDLE_SZ ||
		    hoff + sizeof(struct file_handle) + h.fh.handle_bytes > md->event_len)
			continue;
		fd = open_by_handle_at(K.treedir, &h.fh, O_PATH | O_CLOEXEC);
		if (fd >= 0)
			on_changed(fd);
		else if (errno != ESTALE)
			log_warn("backend=fanotify: cannot open a changed file: %s", strerror(errno));
	}
}

/* The range of an event: md, its copy; body, where it was read. */
static void event_range(const struct fanotify_event_metadata *md, const char *body,
			uint64_t *off, uint64_t *count)
{
	const char *p = body + md->metadata_len, *end = body + md->event_len;

	*off = *count = 0;
	while (p + sizeof(struct fanotify_event_info_header) <= end) {
		struct fanotify_event_info_header h;

		memcpy(&h, p, sizeof(h));
		if (h.len < sizeof(h) || p + h.len > end)
			break;
		if (h.info_type == FAN_EVENT_INFO_TYPE_RANGE && h.len >= sizeof(struct fan_info_range)) {
			struct fan_info_range r;

			memcpy(&r, p, sizeof(r));
			*off = r.offset;
			*count = r.count;
		}
		p += h.len;
	}
}

/*
 * An event read, recorded for the next daemon before it is handed on
 * (saved.h): the file's handle, the range, the reader.  Reader thread
 * only.  false: it cannot be (a number past the records): deny it.
 */
static bool record(const struct fanotify_event_metadata *md, const char *body)
{
	struct saved_fan_event *e = saved_fan_event(md->fd);
	struct saved_head *h = saved_head();
	union {
		struct file_handle fh;
		char raw[sizeof(struct file_handle) + SAVED_FAN_HANDLE];
	} fh;
	int mnt_id;

	if (!e)
		return false;
	event_range(md, body, &e->off, &e->count);
	e->pid = md->pid;
	fh.fh.handle_bytes = SAVED_FAN_HANDLE;
	if (!name_to_handle_at(md->fd, "", &fh.fh, &mnt_id, AT_EMPTY_PATH)) {
		e->handle_type = fh.fh.handle_type;
		e->handle_bytes = fh.fh.handle_bytes;
		memcpy(e->handle, fh.fh.f_handle, fh.fh.handle_bytes);
	} else {
		e->handle_type = 0;
		e->handle_bytes = 0; /* the next daemon denies it */
	}
	if ((uint32_t)md->fd >= h->fan_hwm)
		__atomic_store_n(&h->fan_hwm, (uint32_t)md->fd + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&e->state, SAVED_FAN_READ, __ATOMIC_RELEASE);
	return true;
}

/* One event read from the group (and recorded): md, its copy; body, where it was read. */
static void on_event(const struct fanotify_event_metadata *md, const char *body)
{
	uint64_t off, count;

	atomic_fetch_add(&F.events, 1);
	if ((md->mask & FAN_Q_OVERFLOW) || fault_hit(FAULT_FAN_EVENTS_LOST)) {
		__atomic_add_fetch(&saved_head()->fan_lost_events, 1, __ATOMIC_RELAXED);
		log_err("backend=fanotify: the kernel's event queue overflowed: a read of bytes not "
			"fetched may have been let through, and served zeros (hsmfsctl doctor)");
		if (md->mask & FAN_Q_OVERFLOW)
			return;
		/* injected (fault.h): as if lost before this one, which goes on */
	}
	if (md->fd < 0)
		return;
	event_range(md, body, &off, &count);
	on_access(md->fd, K.mnt, md->pid, off, count);
}

/* Read events until woken by fan_stop(), then the ones left, denied. */
static void *reader(void *arg)
{
	static char buf[64 << 10] __attribute__((aligned(8)));
	struct pollfd p[3] = { { .fd = K.group, .events = POLLIN },
			       { .fd = F.wake[0], .events = POLLIN },
			       { .fd = K.notify, .events = POLLIN } };

	struct fanotify_event_metadata md;
	const char *body;

	(void)arg;
	for (;;) {
		ssize_t len;

		if (poll(p, K.notify >= 0 ? 3 : 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_err("backend=fanotify: poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		if (K.notify >= 0 && (p[2].revents & POLLIN)) {
			len = read(K.notify, buf, sizeof(buf));
			if (len > 0)
				on_notify(buf, len, false);
		}
		if (!(p[0].revents & POLLIN))
			continue;
		/*
		 * Events read and not all recorded: a daemon that dies now
		 * leaves numbers nobody knows, which the next one denies
		 * (take_over())
		 */
		__atomic_store_n(&saved_head()->fan_reading, 1, __ATOMIC_RELAXED);
		len = read(K.group, buf, sizeof(buf));
		if (len < 0) {
			__atomic_store_n(&saved_head()->fan_reading, 0, __ATOMIC_RELAXED);
			/*
			 * An event whose descriptor could not be opened is
			 * denied by the kernel and reported as this error:
			 * the next one is read all the same
			 */
			if (errno != EINTR && errno != EAGAIN)
				log_warn("backend=fanotify: an event not read (the kernel denied it): %s",
					 strerror(errno));
			continue;
		}
		fault_named(FAULT_FAN_READ);
		/*
		 * every event of the batch recorded, or answered, before any
		 * is handed on
		 */
		for (size_t at = 0; next_event(buf, len, &at, &md, &body);) {
			if (md.fd < 0)
				continue;
			if (md.vers != FANOTIFY_METADATA_VERSION) {
				log_err("backend=fanotify: events of version %u, not %u", md.vers,
					FANOTIFY_METADATA_VERSION);
				answer(md.fd, -EIO);
			} else if (!(md.mask & FAN_PRE_ACCESS)) {
				answer(md.fd, 0); /* no other permission event is asked for */
			} else if (!record(&md, body)) {
				log_err("backend=fanotify: an event's number %d is past what can be "
					"recorded: denied", md.fd);
				answer(md.fd, -EIO);
			}
		}
		__atomic_store_n(&saved_head()->fan_reading, 0, __ATOMIC_RELEASE);
		fault_named(FAULT_FAN_RECORDED);
		for (size_t at = 0; next_event(buf, len, &at, &md, &body);)
			if (md.vers == FANOTIFY_METADATA_VERSION &&
			    (md.fd < 0 || ((md.mask & FAN_PRE_ACCESS) && saved_fan_event(md.fd))))
				on_event(&md, body);
	}
	return NULL;
}

/* ------------------------------------------------------------ front end */

static void fan_reply(struct front_req *r, struct inode *in, int fd, uint64_t off, uint64_t len,
		      int res)
{
	/* a check's end comes through its continuation; no read is parked here */
	(void)r, (void)in, (void)fd, (void)off, (void)len, (void)res;
	log_err("backend=fanotify: a reply to no read");
}

static void fan_caller(struct front_req *r, struct caller *ret)
{
	const struct fan_req *req = (const struct fan_req *)r;
	char path[32];
	struct stat st;

	/*
	 * The event names the process only: /proc/PID is owned by its
	 * effective ids (root's for a process that is not dumpable), one
	 * stat(2); FUSE gives the file-system ids, which are the effective
	 * ones but for a program that set them apart (setfsuid(2))
	 */
	ret->pid = req->pid;
	snprintf(path, sizeof(path), "/proc/%d", (int)req->pid);
	if (stat(path, &st)) {
		ret->uid = ret->gid = (uid_t)-1;
		return;
	}
	ret->uid = st.st_uid;
	ret->gid = st.st_gid;
}

static bool fan_exiting(void)
{
	return atomic_load_explicit(&F.exiting, memory_order_relaxed);
}

/*
 * An eviction (evict.c).  The mark first: an open decides at its start
 * whether it raises pre-content events, before it would wait on a lease.
 * Then a write lease, which cannot be taken while the file is open
 * anywhere (mapped included: no reader holds a file description of bytes
 * about to go), and keeps every later open waiting in the kernel until
 * the engine closes sfd, the bytes gone by then and those opens marked.
 * A hold refused leaves the mark on a file all present: its next event
 * finds nothing missing and drops it (file_put()).  The lease-break
 * signal (SIGIO) is ignored (fan_signals()): the eviction ends in
 * milliseconds, and the lease with it.  F.mark_lock orders the mark
 * against file_put()'s removal of it; F.evicting keeps that removal off
 * a file being evicted.
 */
static int fan_evicting(struct inode *in, int sfd, enum evict_step step)
{
	uint64_t ino = inode_ino(in);
	size_t pos;
	int res;

	if (step == EVICT_LET_GO) {
		pthread_mutex_lock(&F.mark_lock);
		hashset_remove(&F.evicting, ino);
		pthread_mutex_unlock(&F.mark_lock);
		return 0;
	}
	pthread_mutex_lock(&F.mark_lock);
	res = hashset_add(&F.evicting, ino, &pos) < 0 ? -ENOMEM : 0;
	if (!res)
		res = fan_mark_fd(sfd, true);
	if (res)
		hashset_remove(&F.evicting, ino);
	pthread_mutex_unlock(&F.mark_lock);
	if (res) {
		log_warn("backend=fanotify: cannot mark a file to evict: %s; its bytes are kept",
			 strerror(-res));
		return res;
	}
	/*
	 * Refused while anyone has the file open: the daemon's own opens
	 * (a copy, a digest) end in milliseconds, a user's does not.  Not
	 * longer: the file is marked, and its events wait (evict_wait()).
	 */
	for (int i = 0; fcntl(sfd, F_SETLEASE, F_WRLCK); i++) {
		if ((errno == EAGAIN || errno == EBUSY) && i < FAN_LEASE_TRIES) {
			usleep(5 * 1000);
			continue;
		}
		res = errno == EAGAIN || errno == EBUSY ? -EBUSY : -errno;
		if (res != -EBUSY)
			log_warn("backend=fanotify: cannot hold a file to evict (a write lease): %s; "
				 "its bytes are kept", strerror(-res));
		pthread_mutex_lock(&F.mark_lock);
		hashset_remove(&F.evicting, ino);
		pthread_mutex_unlock(&F.mark_lock);
		break;
	}
	return res;
}

const struct events_front fan_front = {
	.reply = fan_reply,
	.caller = fan_caller,
	.exiting = fan_exiting,
	.evicting = fan_evicting,
	/* the kernel serves the store's own pages: nothing of ours to drop */
};

/* ------------------------------------------------------------ serving */

/* No descriptor number reaches this (fs.nr_open). */
static uint32_t nr_open(void)
{
	unsigned long v = 0;
	FILE *f = fopen("/proc/sys/fs/nr_open", "re");

	if (f) {
		if (fscanf(f, "%lu", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v && v <= UINT32_MAX ? (uint32_t)v : 1u << 20;
}

/*
 * Every event of the group read by a daemon now gone and not recorded
 * is denied: each number below the last daemon's limit that has no
 * record.  The kernel has no event of most of them (ENOENT).  Only
 * where it died between a read and its records (fan_reading).
 */
static unsigned deny_unrecorded(void)
{
	struct saved_head *h = saved_head();
	unsigned n = 0;

	if (!__atomic_load_n(&h->fan_reading, __ATOMIC_RELAXED))
		return 0;
	if (!h->fan_fd_limit)
		h->fan_fd_limit = nr_open(); /* died before it said its limit */
	for (uint32_t fd = 0; fd < h->fan_fd_limit; fd++) {
		struct fanotify_response r = { .fd = (int)fd, .response = FAN_DENY_ERRNO(EIO) };

		/* a record is read only where one was made: the rest of the region is untouched */
		if (fd < h->fan_hwm && saved_fan_event((int)fd)->state == SAVED_FAN_READ)
			continue;
		if (write(K.group, &r, sizeof(r)) == sizeof(r))
			n++;
	}
	h->fan_reading = 0;
	return n;
}

/*
 * A daemon taking over (keeper.h), before its reader reads: the events
 * the last one read and did not answer.  Each recorded one's number is
 * this daemon's placeholder (saved_reserve()): its file, opened by its
 * handle in this daemon's clone, takes that number, and it is checked
 * and answered as if just read.  The kernel gives none of this daemon's
 * events such a number while the check runs, and none other was read.
 */
static void take_over(void)
{
	struct saved_head *h = saved_head();
	unsigned swept = deny_unrecorded(), taken = 0, denied = 0;

	/*
	 * The changes queued while no daemon ran first: a user's change
	 * wins over the fills below; the dead daemon's own are known by
	 * their pids only now
	 */
	if (K.notify >= 0) {
		static char buf[16 << 10] __attribute__((aligned(8)));
		ssize_t len;

		while ((len = read(K.notify, buf, sizeof(buf))) > 0)
			on_notify(buf, len, true);
	}

	for (uint32_t n = 0; n < h->fan_hwm && n < SAVED_FAN_MAX; n++) {
		struct saved_fan_event *e = saved_fan_event((int)n);
		union {
			struct file_handle fh;
			char raw[sizeof(struct file_handle) + SAVED_FAN_HANDLE];
		} fh;
		int fd;

		if (e->state != SAVED_FAN_READ)
			continue;
		if (!e->handle_bytes || e->handle_bytes > SAVED_FAN_HANDLE) {
			/* not named (its placeholder closed), or its number not kept (saved_reserve()) */
			if (answer_number((int)n, -EIO) && e->handle_type != SAVED_FAN_NOT_KEPT)
				close((int)n);
			denied++;
			continue;
		}
		fh.fh.handle_type = e->handle_type;
		fh.fh.handle_bytes = e->handle_bytes;
		memcpy(fh.fh.f_handle, e->handle, e->handle_bytes);
		fd = open_by_handle_at(K.treedir, &fh.fh, O_PATH | O_CLOEXEC);
		if (fd < 0 || dup3(fd, (int)n, O_CLOEXEC) < 0) {
			log_warn("backend=fanotify: cannot open the file of an event the last daemon "
				 "read: %s; denied", strerror(errno));
			if (fd >= 0)
				close(fd);
			answer((int)n, -EIO); /* and its placeholder closed */
			denied++;
			continue;
		}
		close(fd);
		taken++;
		on_access((int)n, "", e->pid, e->off, e->count);
	}
	/* the pause of this restart: a reader waiting since the death waited so long */
	if (h->died_ms && mono_ms() >= h->died_ms) {
		uint64_t p = (uint64_t)(mono_ms() - h->died_ms);

		h->pause_last_ms = p;
		if (p > h->pause_max_ms)
			h->pause_max_ms = p;
	}
	log_info("took over the mount at '%s': %u event%s the last daemon read and did not "
		 "answer; %u denied (%u read and not recorded)", K.mnt, taken + denied,
		 taken + denied == 1 ? "" : "s", denied + swept, swept);
}

int fan_start(uint64_t chunk, bool keep_blocks, bool takeover)
{
	struct rlimit rl;
	int res;

	F.chunk = chunk ? chunk : 1 << 20;
	F.keep_blocks = keep_blocks;
	F.pid = getpid();
	/* after saved_reserve(): never a recorded number */
	F.spare = open("/", O_PATH | O_CLOEXEC);
	if (F.spare < 0)
		return -errno;
	if (takeover)
		take_over();
	/* the bound of the numbers a next daemon may have to deny (deny_unrecorded()) */
	if (getrlimit(RLIMIT_NOFILE, &rl))
		rl.rlim_cur = RLIM_INFINITY;
	saved_head()->fan_fd_limit = rl.rlim_cur < nr_open() ? (uint32_t)rl.rlim_cur : nr_open();
	if (pipe2(F.wake, O_CLOEXEC))
		return -errno;
	res = pthread_create(&F.reader, NULL, reader, NULL);
	if (res)
		return -res;
	F.reader_up = true;
	return 0;
}

static volatile sig_atomic_t signalled;

static void on_signal(int sig)
{
	int e = errno;
	char c = (char)sig;

	if (sig) /* 0: fan_handover()'s, which waits for fan_serve() */
		signalled = 1;

	if (write(F.sig[1], &c, 1) < 0) {
		/* full: one is enough */
	}
	errno = e;
}

bool fan_signalled(void)
{
	return signalled;
}

int fan_signals(void)
{
	struct sigaction sa = { .sa_handler = on_signal };

	if (F.sig[0] < 0 && pipe2(F.sig, O_CLOEXEC | O_NONBLOCK))
		return -errno;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGIO, SIG_IGN); /* a lease broken (fan_evicting()): it ends by itself */
	return 0;
}

/* The reader ended: no event is read from here on (what it read is recorded). */
static void reader_stop(void)
{
	if (!F.reader_up)
		return;
	if (write(F.wake[1], "x", 1) < 0)
		log_err("backend=fanotify: cannot stop the reader: %s", strerror(errno));
	pthread_join(F.reader, NULL);
	F.reader_up = false;
}

void fan_handover(void)
{
	atomic_store(&F.handover, true);
	on_signal(0);
}

int fan_serve(void)
{
	struct pollfd p[2];
	int mi, res = fan_signals();

	if (res)
		return res;
	/* the mount table changed: POLLPRI on /proc/self/mountinfo */
	mi = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	p[0] = (struct pollfd){ .fd = F.sig[0], .events = POLLIN };
	p[1] = (struct pollfd){ .fd = mi, .events = POLLPRI };
	while (fan_still_mounted()) {
		if (poll(p, mi >= 0 ? 2 : 1, mi >= 0 ? -1 : 1000) < 0 && errno != EINTR) {
			res = -errno;
			break;
		}
		if (p[0].revents && atomic_load(&F.handover)) {
			/* left as it is, for the next daemon */
			if (mi >= 0)
				close(mi);
			reader_stop();
			return FAN_HANDOVER;
		}
		if (p[0].revents) {
			log_info("backend=fanotify: a signal ends the mount");
			break;
		}
		if (mi >= 0 && (p[1].revents & (POLLPRI | POLLERR))) {
			char buf[4096];

			/* read to the end: the next change raises POLLPRI again */
			lseek(mi, 0, SEEK_SET);
			while (read(mi, buf, sizeof(buf)) > 0) {
			}
		}
	}
	if (mi >= 0)
		close(mi);
	/* no new opens by the mountpoint */
	fan_unmount();
	/* no event goes to the engine from here on: its shutdown fails the ones in it */
	pthread_mutex_lock(&F.lock);
	F.stopping = true;
	while (F.dispatching)
		pthread_cond_wait(&F.idle, &F.lock);
	pthread_mutex_unlock(&F.lock);
	atomic_store(&F.exiting, true);
	return res;
}

/*
 * What is still queued is denied: a closed group allows it (an error is
 * an event the kernel could not give and denied itself: read on, a
 * bounded number of times).
 */
static void deny_queued(void)
{
	static char buf[16 << 10] __attribute__((aligned(8)));
	struct fanotify_event_metadata md;
	const char *body;
	ssize_t len;

	fcntl(K.group, F_SETFL, fcntl(K.group, F_GETFL) | O_NONBLOCK);
	for (unsigned tries = 0; tries < 1u << 20; tries++) {
		/* each batch answered at once, unrecorded: a death meanwhile is swept */
		__atomic_store_n(&saved_head()->fan_reading, 1, __ATOMIC_RELAXED);
		len = read(K.group, buf, sizeof(buf));
		if (len < 0 && (errno == EAGAIN || errno == EBADF))
			break;
		for (size_t at = 0; next_event(buf, len, &at, &md, &body);)
			if (md.fd >= 0 && respond(md.fd, -EIO))
				close(md.fd);
	}
	__atomic_store_n(&saved_head()->fan_reading, 0, __ATOMIC_RELEASE);
}

void fan_keeper_end(bool clean)
{
	struct saved_head *h = saved_head();
	unsigned n = 0;

	if (K.group < 0)
		return;
	/* no new opens by the mountpoint, then every event left denied */
	fan_unmount();
	deny_queued();
	/*
	 * The keeper reads nothing itself: every event read and not
	 * answered is a dead daemon's, recorded or not.  The recorded ones
	 * first (their numbers), then every other number
	 */
	for (uint32_t fd = 0; fd < h->fan_hwm && fd < SAVED_FAN_MAX; fd++)
		if (saved_fan_event((int)fd)->state == SAVED_FAN_READ && respond((int)fd, -EIO)) {
			saved_fan_event((int)fd)->state = 0;
			n++;
		}
	/* a daemon that ended cleanly answered all it read (fan_stop()) */
	if (!clean)
		h->fan_reading = 1;
	n += deny_unrecorded();
	if (n)
		log_err("keeper: denied %u event%s no daemon answered", n, n == 1 ? "" : "s");
	close(K.group);
	K.group = -1;
}

void fan_stop(bool ending)
{
	/* no new opens by the mountpoint; then the reader's last events */
	if (ending)
		fan_unmount();
	pthread_mutex_lock(&F.lock);
	F.stopping = true;
	pthread_mutex_unlock(&F.lock);
	reader_stop();
	/* not ending: the keeper's next daemon answers them */
	if (K.group >= 0 && ending)
		deny_queued();
	HASHSET_EACH(&F.files, pos) {
		struct fan_file *f = (struct fan_file *)(uintptr_t)*hashset_val(&F.files, pos);

		inode_forget(f->in, 1);
		free(f);
	}
	hashset_free(&F.files);
	hashset_free(&F.evicting);
	log_info("backend=fanotify: %llu events, %llu denied, %llu and %llu changes lost; %llu "
		 "marks made, %llu removed", (unsigned long long)atomic_load(&F.events),
		 (unsigned long long)atomic_load(&F.denied),
		 (unsigned long long)__atomic_load_n(&saved_head()->fan_lost_events,
						     __ATOMIC_RELAXED),
		 (unsigned long long)__atomic_load_n(&saved_head()->fan_lost_changes,
						     __ATOMIC_RELAXED),
		 (unsigned long long)atomic_load(&K.marked),
		 (unsigned long long)atomic_load(&K.unmarked));
	if (F.spare >= 0)
		close(F.spare);
	F.spare = -1;
	if (K.group >= 0)
		close(K.group);
	if (K.tree >= 0)
		close(K.tree);
	if (K.notify >= 0)
		close(K.notify);
	if (K.treedir >= 0)
		close(K.treedir);
	K.group = K.tree = K.notify = K.treedir = -1;
	/* read by the reader until it ended */
	free(K.mnt);
	free(K.store);
	K.mnt = K.store = NULL;
	for (int i = 0; i < 2; i++) {
		if (F.wake[i] >= 0)
			close(F.wake[i]);
		if (F.sig[i] >= 0)
			close(F.sig[i]);
		F.wake[i] = F.sig[i] = -1;
	}
}
