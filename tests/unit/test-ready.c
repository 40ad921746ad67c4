/*
 * test-ready.c - when the mount is ready (fs/ready.h): the rule for
 * each order of INIT, the hook's spawn, its join and its exit, and the
 * bound.  ready.c keeps one mount's state per process, so each case
 * runs in a child of its own and reports the first step that failed.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "ready.h"
#include "tap.h"

static int rfd; /* the read end of --ready-fd's pipe */

/* What the pipe holds now: 1 "ready\n", 0 nothing yet, -1 closed empty, -2 junk. */
static int state(int wait_ms)
{
	struct pollfd p = { rfd, POLLIN, 0 };
	char buf[16];
	ssize_t n;

	if (poll(&p, 1, wait_ms) == 0)
		return 0;
	n = read(rfd, buf, sizeof(buf));
	if (n == 0)
		return -1;
	return n == 6 && !memcmp(buf, "ready\n", 6) ? 1 : -2;
}

static void setup(bool wait_hook, double bound)
{
	int p[2];

	if (pipe(p) < 0)
		_exit(100);
	rfd = p[0];
	ready_init(p[1], -1, wait_hook, bound);
}

/* A process leading a group of its own, and one more in that group. */
static pid_t spawn_group(pid_t *member)
{
	int sync[2];
	pid_t leader;

	if (pipe(sync) < 0)
		_exit(100);
	leader = fork();
	if (leader == 0) {
		pid_t m;

		setpgid(0, 0);
		m = fork();
		if (m == 0) {
			pause();
			_exit(0);
		}
		(void)!write(sync[1], &m, sizeof(m));
		pause();
		_exit(0);
	}
	setpgid(leader, leader); /* whichever runs first */
	if (read(sync[0], member, sizeof(*member)) != sizeof(*member))
		_exit(100);
	close(sync[0]);
	close(sync[1]);
	return leader;
}

static void kill_group(pid_t leader)
{
	kill(-leader, SIGKILL);
	while (waitpid(leader, NULL, 0) < 0 && errno == EINTR)
		;
}

#define STEP(n, cond)                \
	do {                         \
		if (!(cond))         \
			return (n);  \
	} while (0)

static int no_hook(void)
{
	setup(false, 5);
	STEP(1, state(0) == 0);
	ready_live();
	STEP(2, state(1000) == 1);
	STEP(3, state(1000) == -1); /* written once, then closed */
	ready_shutdown();
	return 0;
}

static int hook_joins(void)
{
	pid_t member, leader = spawn_group(&member), other = getpid();
	int res = 0;

	setup(true, 30);
	ready_hook_started(leader);
	ready_live();
	if (state(50) != 0)
		res = 1;
	ready_hook_joined(other); /* some other hook: not ours */
	if (!res && state(50) != 0)
		res = 2;
	ready_hook_joined(leader);
	if (!res && state(1000) != 1)
		res = 3;
	ready_shutdown();
	kill_group(leader);
	return res;
}

static int member_joins(void)
{
	pid_t member, leader = spawn_group(&member);
	int res = 0;

	setup(true, 30);
	ready_hook_started(leader);
	ready_live();
	if (!member)
		res = 1;
	if (!res)
		ready_hook_joined(member); /* a wrapper's child */
	if (!res && state(1000) != 1)
		res = 2;
	ready_shutdown();
	kill_group(leader);
	return res;
}

static int joins_before_spawn_is_recorded(void)
{
	pid_t member, leader = spawn_group(&member);
	int res = 0;

	setup(true, 30);
	ready_live();
	ready_hook_joined(leader);
	if (state(50) != 0)
		res = 1;
	ready_hook_started(leader);
	if (!res && state(1000) != 1)
		res = 2;
	ready_shutdown();
	kill_group(leader);
	return res;
}

static int joins_before_init(void)
{
	pid_t member, leader = spawn_group(&member);
	int res = 0;

	setup(true, 30);
	ready_hook_started(leader);
	ready_hook_joined(leader);
	if (state(50) != 0) /* not live yet */
		res = 1;
	ready_live();
	if (!res && state(1000) != 1)
		res = 2;
	ready_shutdown();
	kill_group(leader);
	return res;
}

static int hook_exits(void)
{
	setup(true, 30);
	ready_hook_started(1);
	ready_live();
	STEP(1, state(50) == 0);
	ready_hook_exited();
	STEP(2, state(1000) == 1);
	ready_shutdown();
	return 0;
}

static int bound_passes(void)
{
	struct timespec a, b;
	double took;

	setup(true, 0.3);
	ready_hook_started(1);
	clock_gettime(CLOCK_MONOTONIC, &a);
	ready_live();
	STEP(1, state(100) == 0);
	STEP(2, state(5000) == 1);
	clock_gettime(CLOCK_MONOTONIC, &b);
	took = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	STEP(3, took >= 0.29 && took < 3);
	ready_shutdown();
	return 0;
}

static int shutdown_unready(void)
{
	setup(true, 30);
	ready_hook_started(1);
	ready_live();
	ready_shutdown(); /* joins the bound's timer, closes unwritten */
	STEP(1, state(1000) == -1);
	STEP(2, !ready_done());
	return 0;
}

/* A hook that joins from another thread after ms milliseconds. */
struct later {
	pid_t pid;
	int ms;
};

static void *join_later(void *arg)
{
	struct later *l = arg;

	usleep((useconds_t)l->ms * 1000);
	ready_hook_joined(l->pid);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int wait_hook_joins(void)
{
	pid_t member, leader = spawn_group(&member);
	struct later l = { leader, 100 };
	pthread_t t;
	double t0;
	int res = 0;

	/* before INIT (a fanotify mount lists its tree first): woken by the join */
	setup(true, 30);
	ready_hook_started(leader);
	pthread_create(&t, NULL, join_later, &l);
	t0 = now_s();
	if (ready_wait_hook() != 1)
		res = 1;
	if (!res && now_s() - t0 > 5)
		res = 2; /* waited for the bound, not the join */
	pthread_join(t, NULL);
	if (!res && state(50) != 0)
		res = 3; /* not ready before INIT */
	ready_live();
	if (!res && state(1000) != 1)
		res = 4;
	ready_shutdown();
	kill_group(leader);
	return res;
}

static int wait_hook_bound(void)
{
	double t0;

	setup(true, 0.2);
	ready_hook_started(1);
	t0 = now_s();
	STEP(1, ready_wait_hook() == 0);
	STEP(2, now_s() - t0 >= 0.15 && now_s() - t0 < 5);
	ready_shutdown();
	return 0;
}

static int wait_hook_refused(void)
{
	int p[2];
	char buf[64];
	ssize_t n;

	if (pipe(p) < 0)
		return 100;
	ready_init(-1, p[1], true, 30);
	ready_hook_started(1);
	ready_note("listing: %d", 3);
	STEP(1, ready_hook_refused("no such origin"));
	STEP(2, ready_wait_hook() == -1);
	n = read(p[0], buf, sizeof(buf) - 1);
	STEP(3, n > 0);
	buf[n] = '\0';
	/* a note the parent prints, then why it failed */
	STEP(4, !strcmp(buf, "Ilisting: 3\nEno such origin"));
	ready_shutdown();
	return 0;
}

static int fails_before_ready(void)
{
	int p[2];
	char buf[64];
	ssize_t n;

	if (pipe(p) < 0)
		return 100;
	ready_init(-1, p[1], false, 30);
	ready_fail("cannot list 'a/b'");
	ready_live(); /* never ready once failed */
	n = read(p[0], buf, sizeof(buf) - 1);
	STEP(1, n > 0);
	buf[n] = '\0';
	STEP(2, !strcmp(buf, "Ecannot list 'a/b'"));
	STEP(3, read(p[0], buf, sizeof(buf)) == 0); /* and closed */
	STEP(4, !ready_done());
	ready_shutdown();
	return 0;
}

static void run(const char *what, int (*fn)(void))
{
	pid_t pid;
	int status = 0;

	fflush(stdout); /* a child must not print the parent's buffered lines */
	pid = fork();

	if (pid == 0) {
		log_set_level(LOG_LVL_ERR);
		_exit(fn());
	}
	waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s%s", what,
	   WIFEXITED(status) && WEXITSTATUS(status) ? " (a step failed)" : "");
	if (WIFEXITED(status) && WEXITSTATUS(status))
		printf("# failed at step %d\n", WEXITSTATUS(status));
}

int main(void)
{
	run("no hook=: ready at INIT, written once", no_hook);
	run("ready once the supervised hook joins, not another hook", hook_joins);
	run("a process of the hook's group joining counts", member_joins);
	run("a join before its spawn is recorded counts at the spawn",
	    joins_before_spawn_is_recorded);
	run("a join before INIT: ready at INIT", joins_before_init);
	run("a hook that exits: ready then", hook_exits);
	run("a hook that never joins: ready once the bound passed", bound_passes);
	run("shutdown before ready: closed unwritten", shutdown_unready);
	run("waiting for the hook before INIT: woken by its join", wait_hook_joins);
	run("waiting for a hook that never joins: 0 once the bound passed", wait_hook_bound);
	run("waiting for a hook that refused: -1; notes and the refusal reach the parent",
	    wait_hook_refused);
	run("a mount that failed before ready: why reaches the parent, never ready",
	    fails_before_ready);
	return tap_done();
}
