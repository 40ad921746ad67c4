/*
 * ready.c - when the mount is ready (ready.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "ready.h"

#define READY_JOINERS 8 /* process groups of hooks that joined, kept */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;     /* on the monotonic clock */
	int ready_fd, daemon_fd;
	bool wait_hook;          /* hook= given and not joined/exited yet */
	bool live;               /* INIT answered */
	bool done;               /* signalled, or refused */
	bool refused;            /* the hook refused the mount: never ready */
	bool stopping;
	bool timer_up;
	double bound;
	pid_t hook_pid;          /* the supervised hook's group, 0: none yet */
	pid_t joined[READY_JOINERS];
	unsigned njoined;
	pthread_t timer;
} R = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.ready_fd = -1,
	.daemon_fd = -1,
};

static void signal_locked(void)
{
	if (R.done)
		return;
	R.done = true;
	if (R.ready_fd >= 0) {
		(void)!write(R.ready_fd, "ready\n", 6);
		close(R.ready_fd);
		R.ready_fd = -1;
	}
	if (R.daemon_fd >= 0) {
		(void)!write(R.daemon_fd, "R", 1);
		close(R.daemon_fd);
		R.daemon_fd = -1;
	}
	pthread_cond_broadcast(&R.cond);
}

static void check_locked(void)
{
	if (!R.wait_hook)
		pthread_cond_broadcast(&R.cond); /* ready_wait_hook() */
	if (R.live && !R.wait_hook)
		signal_locked();
}

void ready_init(int ready_fd, int daemon_fd, bool wait_hook, double bound)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&R.cond, &ca);
	pthread_condattr_destroy(&ca);
	R.ready_fd = ready_fd;
	R.daemon_fd = daemon_fd;
	R.wait_hook = wait_hook;
	R.bound = bound;
}

/* The bound: INIT plus R.bound, then ready whatever the hook does. */
static void *timer_main(void *arg)
{
	struct timespec until;

	(void)arg;
	mono_after(&until, R.bound);
	pthread_mutex_lock(&R.lock);
	while (!R.done && !R.stopping &&
	       pthread_cond_timedwait(&R.cond, &R.lock, &until) != ETIMEDOUT)
		;
	if (!R.done && !R.stopping) {
		log_warn("the hook has not joined within %.3g s; the mount is ready without it",
			 R.bound);
		R.wait_hook = false;
		signal_locked();
	}
	pthread_mutex_unlock(&R.lock);
	return NULL;
}

void ready_live(void)
{
	pthread_mutex_lock(&R.lock);
	R.live = true;
	check_locked();
	if (!R.done && !R.timer_up && !R.stopping) {
		if (pthread_create(&R.timer, NULL, timer_main, NULL) == 0) {
			R.timer_up = true;
		} else {
			log_warn("cannot wait for the hook to join; the mount is ready without it");
			R.wait_hook = false;
			signal_locked();
		}
	}
	pthread_mutex_unlock(&R.lock);
}

void ready_hook_started(pid_t pid)
{
	pthread_mutex_lock(&R.lock);
	R.hook_pid = pid;
	for (unsigned i = 0; i < READY_JOINERS && i < R.njoined; i++)
		if (R.joined[i] == pid)
			R.wait_hook = false;
	check_locked();
	pthread_mutex_unlock(&R.lock);
}

void ready_hook_joined(pid_t pid)
{
	/*
	 * The hook's own pid, or a process of its group (a wrapper's child).
	 * A peer gone already has no group: its pid stands for it (the
	 * supervised hook leads its group, so its pid is the group's id).
	 */
	pid_t group = pid > 0 ? getpgid(pid) : -1;

	if (pid <= 0) /* a peer in another pid namespace: not ours */
		return;
	if (group <= 0)
		group = pid;

	pthread_mutex_lock(&R.lock);
	if (R.wait_hook) {
		if (R.hook_pid && (pid == R.hook_pid || group == R.hook_pid))
			R.wait_hook = false;
		else
			R.joined[R.njoined++ % READY_JOINERS] = group;
		check_locked();
	}
	pthread_mutex_unlock(&R.lock);
}

void ready_hook_exited(void)
{
	pthread_mutex_lock(&R.lock);
	R.wait_hook = false;
	check_locked();
	pthread_mutex_unlock(&R.lock);
}

/* Never ready: why to the parent, which prints it.  R.lock held. */
static bool fail_locked(const char *why)
{
	bool failed = !R.done && !R.stopping;

	if (failed) {
		R.done = R.refused = true; /* never ready: the parent reads why */
		if (R.ready_fd >= 0) {
			close(R.ready_fd);
			R.ready_fd = -1;
		}
		if (R.daemon_fd >= 0) {
			char msg[1024];
			int n = snprintf(msg, sizeof(msg), "E%s", why);

			/* one write under PIPE_BUF: the parent reads it whole */
			(void)!write(R.daemon_fd, msg, n < (int)sizeof(msg) ? (size_t)n :
							     sizeof(msg) - 1);
			close(R.daemon_fd);
			R.daemon_fd = -1;
		}
		pthread_cond_broadcast(&R.cond);
	}
	return failed;
}

bool ready_hook_refused(const char *why)
{
	bool failed;

	pthread_mutex_lock(&R.lock);
	failed = fail_locked(why);
	pthread_mutex_unlock(&R.lock);
	return failed;
}

void ready_fail(const char *why)
{
	pthread_mutex_lock(&R.lock);
	fail_locked(why);
	pthread_mutex_unlock(&R.lock);
}

int ready_wait_hook(void)
{
	struct timespec until;
	int res;

	mono_after(&until, R.bound);
	pthread_mutex_lock(&R.lock);
	while (R.wait_hook && !R.done && !R.stopping &&
	       pthread_cond_timedwait(&R.cond, &R.lock, &until) != ETIMEDOUT)
		;
	res = R.refused ? -1 : !R.wait_hook;
	pthread_mutex_unlock(&R.lock);
	return res;
}

/* A line the parent prints (kind 'W': a warning, 'I': a note), and the log. */
static void say(char kind, const char *fmt, va_list ap)
{
	char msg[1024];
	int n = vsnprintf(msg + 1, sizeof(msg) - 2, fmt, ap);

	if (n < 0)
		return;
	if ((size_t)n > sizeof(msg) - 3)
		n = sizeof(msg) - 3;
	if (kind == 'W')
		log_warn("%s", msg + 1);
	else
		log_info("%s", msg + 1);
	pthread_mutex_lock(&R.lock);
	if (!R.done && R.daemon_fd >= 0) {
		/* the kind, the text, a newline; one write (PIPE_BUF) */
		msg[0] = kind;
		for (int i = 1; i <= n; i++)
			if (msg[i] == '\n')
				msg[i] = ' ';
		msg[n + 1] = '\n';
		(void)!write(R.daemon_fd, msg, (size_t)n + 2);
	}
	pthread_mutex_unlock(&R.lock);
}

void ready_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say('W', fmt, ap);
	va_end(ap);
}

void ready_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say('I', fmt, ap);
	va_end(ap);
}

void ready_shutdown(void)
{
	bool join;

	pthread_mutex_lock(&R.lock);
	R.stopping = true;
	join = R.timer_up;
	R.timer_up = false;
	pthread_cond_broadcast(&R.cond);
	pthread_mutex_unlock(&R.lock);
	if (join)
		pthread_join(R.timer, NULL);
	pthread_mutex_lock(&R.lock);
	if (R.ready_fd >= 0)
		close(R.ready_fd);
	if (R.daemon_fd >= 0)
		close(R.daemon_fd);
	R.ready_fd = R.daemon_fd = -1;
	pthread_mutex_unlock(&R.lock);
}

bool ready_done(void)
{
	bool d;

	pthread_mutex_lock(&R.lock);
	d = R.done && !R.refused;
	pthread_mutex_unlock(&R.lock);
	return d;
}
