/* ops-io.c - see ops-io.h */
#include <errno.h>
#include <fcntl.h>
#include <poll.h> /* ThreadSanitizer builds: io_read() */
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fault.h"
#include "log.h"
#include "ops-int.h"
#include "ops-inval.h"
#include "ops-io.h"
#include "saved.h"

/*
 * The kernel's side of the protocol that this file reads (fuse_kernel.h,
 * protocol 7.40; the system's headers may be older than the kernel).
 */
struct k_in_header {
	uint32_t len, opcode;
	uint64_t unique, nodeid;
	uint32_t uid, gid, pid;
	uint16_t total_extlen, padding;
};
struct k_out_header {
	uint32_t len;
	int32_t error;
	uint64_t unique;
};
struct k_init_in {
	uint32_t major, minor, max_readahead, flags, flags2;
};
#define K_INIT 26
#define K_NOTIFY_RESEND 7
#define K_INIT_EXT (1u << 30)
#define K_HAS_RESEND (1ULL << 39)
_Static_assert(sizeof(struct k_in_header) == 40, "fuse_in_header");

/* The replayed INIT's id: the kernel's ids count up from 1 and never set bit 62 */
#define INIT_REPLAY_ID (1ULL << 62)

/*
 * A daemon taking over answers the replayed INIT before it reads any
 * other request: the kernel, connected all along, has requests queued,
 * and libfuse's workers would read them while the INIT is being
 * answered (one starts another as soon as it has read a request),
 * failing with EIO those read before libfuse marks INIT done and
 * running the rest beside op_init().  So every read waits while
 * IO.init_pending, which io_writev() clears with the INIT's reply.
 * Locks: IO.lock is a leaf, held only to wait or to clear.
 */
static struct {
	_Atomic bool replay;       /* the next read returns the saved INIT */
	_Atomic bool init_pending; /* reads wait: the replayed INIT is not answered yet */
	pthread_mutex_t lock;
	pthread_cond_t answered;
} IO = { .lock = PTHREAD_MUTEX_INITIALIZER, .answered = PTHREAD_COND_INITIALIZER };

static void unlock_io(void *arg)
{
	pthread_mutex_unlock(arg);
}

static void init_wait(void)
{
	pthread_mutex_lock(&IO.lock);
	/* libfuse cancels its workers at exit: one cancelled here unlocks */
	pthread_cleanup_push(unlock_io, &IO.lock);
	while (atomic_load(&IO.init_pending))
		pthread_cond_wait(&IO.answered, &IO.lock);
	pthread_cleanup_pop(1);
}

static void init_answered(void)
{
	pthread_mutex_lock(&IO.lock);
	atomic_store(&IO.init_pending, false);
	pthread_cond_broadcast(&IO.answered);
	pthread_mutex_unlock(&IO.lock);
}

static __thread uint64_t cur_unique;

/*
 * ThreadSanitizer sees the kernel's ordering (a reply before the
 * requests that follow from it: a lookup before the use of its node id,
 * a release before the open that reuses its descriptor number) through
 * its model of reads and writes of a descriptor it saw opened.  A daemon
 * taking over inherited /dev/fuse across exec, unseen: the same order is
 * said here, in those builds only.
 */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char kernel_order;
#define KERNEL_AFTER() __tsan_acquire(&kernel_order)
#define KERNEL_BEFORE() __tsan_release(&kernel_order)
#else
#define KERNEL_AFTER() ((void)0)
#define KERNEL_BEFORE() ((void)0)
#endif

uint64_t ops_io_unique(void)
{
	return cur_unique;
}

void ops_io_set_unique(uint64_t unique)
{
	cur_unique = unique;
}

bool ops_io_can_resend(void)
{
	const struct saved_head *h = saved_head();
	const struct k_init_in *in;

	if (!h || __atomic_load_n(&h->init_len, __ATOMIC_ACQUIRE) <
			  sizeof(struct k_in_header) + sizeof(*in))
		return false;
	in = (const void *)(h->init + sizeof(struct k_in_header));
	return in->major == 7 && in->minor >= 36 && (in->flags & K_INIT_EXT) &&
	       ((uint64_t)in->flags2 << 32 & K_HAS_RESEND);
}

/*
 * The kernel copies a request into the buffer read(2) is given a page at
 * a time, pinning each page; one not mapped yet is faulted in on a slow
 * path that gives up once the daemon has been sent SIGKILL, and the
 * kernel then ends that request with EIO rather than keep it for the
 * next daemon to be sent again: a user's write failed so when the daemon
 * was killed while it read that write's bytes.  So each buffer libfuse
 * reads into is written once, whole, before its first read: its pages
 * are mapped and writable, and the copy never takes the slow path.  Once
 * a buffer (libfuse keeps one per worker, reallocated only when INIT
 * makes it larger); the memory was the daemon's already.
 */
static __thread void *touched;
static __thread size_t touched_len;

static void touch_buffer(void *buf, size_t len)
{
	static size_t page;

	if (buf == touched && len <= touched_len)
		return;
	if (!page)
		page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t off = 0; off < len; off += page)
		((volatile char *)buf)[off] = 0;
	((volatile char *)buf)[len - 1] = 0;
	touched = buf;
	touched_len = len;
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	struct saved_head *h = saved_head();
	ssize_t res;
	bool want = true;

	if (atomic_compare_exchange_strong(&IO.replay, &want, false)) {
		struct k_in_header *ih = buf;

		if (len < h->init_len) {
			errno = EINVAL;
			return -1;
		}
		memcpy(buf, h->init, h->init_len);
		ih->unique = INIT_REPLAY_ID;
		cur_unique = 0;
		return h->init_len;
	}
	if (__builtin_expect(atomic_load_explicit(&IO.init_pending, memory_order_acquire), 0))
		init_wait();
	if (len)
		touch_buffer(buf, len);
#if defined(__SANITIZE_THREAD__)
	/*
	 * tsan_cancel.c ends a worker with a signal that interrupts its read;
	 * one that comes just before the read would be lost and the read
	 * block for ever (the daemon not exiting at unmount).  So the
	 * descriptor is non-blocking in these builds (ops_io_attach()), and
	 * an idle read returns EINTR every 200 ms: libfuse's loop looks at
	 * the session again and goes on, or ends.
	 */
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, 200) == 0) {
			errno = EINTR;
			return -1;
		}
	}
	res = read(fd, buf, len);
	if (res < 0 && errno == EAGAIN)
		errno = EINTR; /* another worker read it first */
#else
	res = read(fd, buf, len);
#endif
	KERNEL_AFTER();
	if (res >= (ssize_t)sizeof(struct k_in_header)) {
		const struct k_in_header *ih = buf;

		cur_unique = ih->unique;
		/* once, before any other request: the kernel sends INIT alone */
		if (ih->opcode == K_INIT && !__atomic_load_n(&h->init_len, __ATOMIC_ACQUIRE) &&
		    (size_t)res <= sizeof(h->init)) {
			memcpy(h->init, buf, (size_t)res);
			__atomic_store_n(&h->init_len, (uint32_t)res, __ATOMIC_RELEASE);
		}
	}
	return res;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	const struct k_out_header *oh = iov[0].iov_base;

	if (iov[0].iov_len >= sizeof(*oh) && oh->unique == INIT_REPLAY_ID) {
		size_t n = 0;

		for (int i = 0; i < count; i++)
			n += iov[i].iov_len;
		/*
		 * Ready to serve: the pause of this restart (what a request
		 * waiting since the death waited, its own work apart) ends here.
		 */
		struct saved_head *h = saved_head();
		int64_t now = mono_ms();

		if (h->died_ms && now >= h->died_ms) {
			uint64_t p = (uint64_t)(now - h->died_ms);

			__atomic_store_n(&h->pause_last_ms, p, __ATOMIC_RELAXED);
			if (p > __atomic_load_n(&h->pause_max_ms, __ATOMIC_RELAXED))
				__atomic_store_n(&h->pause_max_ms, p, __ATOMIC_RELAXED);
		}
		/*
		 * What the kernel caches long may be what the dead daemon
		 * changed and died before telling it: dropped, soon.
		 */
		ops_invalidate_all_later();
		/* the kernel has its INIT answer; ask again what it sent the dead daemon */
		if (ops_io_can_resend()) {
			struct k_out_header nh = { .len = sizeof(nh),
						      .error = K_NOTIFY_RESEND };

			if (write(fd, &nh, sizeof(nh)) < 0)
				log_warn("cannot ask the kernel to resend requests: %s",
					 strerror(errno));
		}
		fault_named(FAULT_TAKE_REPLAYED);
		init_answered(); /* the other workers read on */
		return (ssize_t)n;
	}
	KERNEL_BEFORE();
	return writev(fd, iov, count);
}

static ssize_t io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
			      unsigned int flags, void *userdata)
{
	KERNEL_BEFORE();
	return splice(fdin, offin, fdout, offout, len, flags);
}

int ops_io_attach(struct fuse_session *se, int fd, bool takeover)
{
	static const struct fuse_custom_io io = {
		.read = io_read,
		.writev = io_writev,
		.splice_send = io_splice_send,
		/* no splice_receive: every request is read, its id seen (ops-io.h) */
	};

	if (takeover && !saved_head()->init_len)
		return -EPROTO; /* the last daemon died before INIT: nothing to replay */
	if (takeover)
		resend_adopt(); /* before any request is read */
	atomic_store(&IO.init_pending, takeover);
	atomic_store(&IO.replay, takeover);
#if defined(__SANITIZE_THREAD__)
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); /* see io_read() */
#endif
	return fuse_session_custom_io(se, &io, sizeof(io), fd);
}
