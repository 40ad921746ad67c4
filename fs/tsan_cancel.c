/*
 * tsan_cancel.c - linked into ThreadSanitizer builds only (meson.build).
 *
 * libfuse ends its worker threads at unmount with pthread_cancel() while
 * they sit in read(2) of /dev/fuse.  ThreadSanitizer does not support
 * thread cancellation: a thread cancelled inside an intercepted call
 * leaves the runtime's state half-updated, and now and then the exiting
 * workers and the thread joining them all wait for the runtime's
 * thread-registry lock forever (the daemon never exits after unmount;
 * seen in CI, and here in 3 of 8 loaded runs of t0300 on the code before
 * this file).  This pthread_cancel(), found before libc's by the link,
 * interrupts the worker's read(2) with a signal instead: read returns
 * EINTR, libfuse's loop sees the session exited and the thread returns
 * on its own.  Release and ASan builds keep libfuse's cancellation.
 * A signal that comes just before the worker enters read(2) would be
 * lost, and the read block for ever: in these builds the descriptor is
 * non-blocking and an idle read returns EINTR every 200 ms (io_read() in
 * ops-io.c), so the worker sees the exit soon after either way.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#define WAKE_SIGNAL SIGURG /* ignored by default: harmless if it arrives late */

static void wake(int sig)
{
	(void)sig;
}

static void install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = wake; /* no SA_RESTART: the read returns EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(WAKE_SIGNAL, &sa, NULL);
}

int pthread_cancel(pthread_t thread)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, install);
	return pthread_kill(thread, WAKE_SIGNAL);
}
