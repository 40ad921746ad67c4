/*
 * test-libfuse.c - what hsmfs relies on from the libfuse it links.
 *
 * The session is driven by hand through libfuse's public API: requests are
 * fed with fuse_session_process_buf() and replies caught by a custom
 * writev, so no mount and no kernel are involved and the timing that makes
 * these cases rare on a real mount is forced.
 *
 * A FUSE_INTERRUPT that reaches libfuse after the request it names was
 * answered (a killed process's FLUSH at exit races its INTERRUPT) is
 * queued until the next request comes, which answers it with EAGAIN.
 * libfuse 3.17.2's fuse_session_destroy() never freed one still queued
 * at unmount: LeakSanitizer failed the daemon's exit (t0370) about one run
 * in fifteen.  subprojects/packagefiles/ carries the fix.  The plain build
 * counts the heap with mallinfo2() (without the thread cache, which it
 * counts as in use); the ASan build fails at exit through LeakSanitizer.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define FUSE_USE_VERSION 317
#include <fuse_kernel.h>
#include <fuse_lowlevel.h>

#include "tap.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* The replies libfuse wrote, by unique. */
static struct {
	uint64_t unique;
	int32_t error;
} replies[16];
static int nreplies;

static ssize_t catch_writev(int fd, struct iovec *iov, int count, void *ud)
{
	struct fuse_out_header oh;
	ssize_t len = 0;

	(void)fd;
	(void)ud;
	memcpy(&oh, iov[0].iov_base, sizeof(oh));
	if (nreplies < 16) {
		replies[nreplies].unique = oh.unique;
		replies[nreplies].error = oh.error;
	}
	nreplies++;
	for (int i = 0; i < count; i++)
		len += (ssize_t)iov[i].iov_len;
	return len;
}

static ssize_t no_read(int fd, void *buf, size_t len, void *ud)
{
	(void)fd;
	(void)buf;
	(void)len;
	(void)ud;
	errno = ENODEV;
	return -1;
}

static void feed(struct fuse_session *se, uint32_t opcode, uint64_t unique,
		 uint64_t nodeid, const void *arg, size_t arglen)
{
	union {
		char b[512];
		uint64_t align;
	} msg;
	struct fuse_in_header ih = {
		.len = (uint32_t)(sizeof(ih) + arglen),
		.opcode = opcode,
		.unique = unique,
		.nodeid = nodeid,
	};
	struct fuse_buf buf = { .size = ih.len, .mem = msg.b };

	memcpy(msg.b, &ih, sizeof(ih));
	memcpy(msg.b + sizeof(ih), arg, arglen);
	fuse_session_process_buf(se, &buf);
}

static struct fuse_session *session(void)
{
	static const struct fuse_lowlevel_ops ops; /* every op answers ENOSYS */
	static const struct fuse_custom_io io = {
		.writev = catch_writev,
		.read = no_read,
	};
	char *argv[] = { "test-libfuse", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);
	struct fuse_session *se;
	struct fuse_init_in init = {
		.major = FUSE_KERNEL_VERSION,
		.minor = FUSE_KERNEL_MINOR_VERSION,
	};

	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se)
		return NULL;
	if (fuse_session_custom_io(se, &io, sizeof(io), dup(2)) != 0) {
		fuse_session_destroy(se);
		return NULL;
	}
	nreplies = 0;
	feed(se, FUSE_INIT, 2, 0, &init, sizeof(init));
	fuse_opt_free_args(&args);
	return se;
}

/* A late INTERRUPT for request u: u is answered first, then interrupted. */
static void late_interrupt(struct fuse_session *se, uint64_t u)
{
	struct fuse_getattr_in ga = { 0 };
	struct fuse_interrupt_in in = { .unique = u };

	feed(se, FUSE_GETATTR, u, FUSE_ROOT_ID, &ga, sizeof(ga));
	feed(se, FUSE_INTERRUPT, u + 1, 0, &in, sizeof(in));
}

static int replied(uint64_t unique, int32_t error)
{
	for (int i = 0; i < nreplies && i < 16; i++)
		if (replies[i].unique == unique && replies[i].error == error)
			return 1;
	return 0;
}

/* Heap bytes a session keeps after it is destroyed, with or without a late
 * INTERRUPT queued at the end. */
static size_t session_heap(int with_late)
{
	struct fuse_getattr_in ga = { 0 };
	size_t before = mallinfo2().uordblks;
	struct fuse_session *se = session();

	if (with_late)
		late_interrupt(se, 40);
	else
		feed(se, FUSE_GETATTR, 40, FUSE_ROOT_ID, &ga, sizeof(ga));
	fuse_session_destroy(se);
	return mallinfo2().uordblks - before;
}

int main(int argc, char **argv)
{
	struct fuse_session *se;
	size_t plain, late;
	struct fuse_getattr_in ga = { 0 };

	/* mallinfo2() counts chunks in the thread cache as in use: run
	 * without it, so that the heap counts below are exact */
	(void)argc;
	if (!UNDER_ASAN && !getenv("GLIBC_TUNABLES")) {
		setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
		execv("/proc/self/exe", argv);
	}

	/* What the kernel sees: a late interrupt is answered with EAGAIN by
	 * the next request (so the kernel resends it if still needed). */
	se = session();
	if (!ok(se != NULL, "a session with a custom io"))
		return tap_done();
	ok(replied(2, 0), "INIT answered");
	late_interrupt(se, 10);
	ok(replied(10, -ENOSYS), "the request answered");
	ok(nreplies == 2, "the late INTERRUPT stays queued (%d replies)", nreplies);
	feed(se, FUSE_GETATTR, 20, FUSE_ROOT_ID, &ga, sizeof(ga));
	ok(replied(11, -EAGAIN),
	   "the next request answers it with EAGAIN");
	fuse_session_destroy(se);

	/* A late interrupt still queued when the session ends is freed.  The
	 * heap a session with one is compared with a session without (libfuse
	 * keeps some bytes of each session reachable, which is not what is
	 * tested here); the first session's one-time allocations are past. */
	plain = session_heap(0);
	plain = session_heap(0);
	late = session_heap(1);
	if (UNDER_ASAN)
		ok(1, "# SKIP heap counted by LeakSanitizer at exit, not mallinfo2");
	else
		ok(late <= plain, "the session frees a queued late INTERRUPT "
		   "(heap kept: %zu bytes by a session with one, %zu without)",
		   late, plain);
	return tap_done();
}
