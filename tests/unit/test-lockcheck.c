/*
 * Unit tests for lib/lockcheck.c: each rule it states is broken once in
 * a child process, which must abort; each thing it allows must pass.
 */
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lockcheck.h"
#include "tap.h"

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t r;

static void in_order(void)
{
	lk_lock(&a, LK_ENGINE);
	lk_lock(&b, LK_CACHE);
	lk_unlock(&b, LK_CACHE);
	lk_unlock(&a, LK_ENGINE);
}

static void out_of_order(void)
{
	lk_lock(&b, LK_CACHE);
	lk_lock(&a, LK_ENGINE);
}

static void twice(void)
{
	lk_lock(&a, LK_INODES);
	lk_lock(&b, LK_INODES);
}

static void recursive_meta(void)
{
	lk_lock(&r, LK_META);
	lk_lock(&r, LK_META);
	may_block("SQLite");
	lk_unlock(&r, LK_META);
	lk_unlock(&r, LK_META);
}

static void block_under_engine(void)
{
	lk_lock(&a, LK_ENGINE);
	may_block("a test's open");
}

static void block_under_cache(void)
{
	lk_lock(&a, LK_CACHE);
	may_block("a test's fstatvfs");
}

static void block_under_inodes(void)
{
	lk_lock(&a, LK_INODES);
	may_block("a test's open");
}

static void block_bracketed(void)
{
	lk_lock(&a, LK_INODES);
	lk_block_ok_begin();
	may_block("a named exception");
	lk_block_ok_end();
	lk_unlock(&a, LK_INODES);
	may_block("after the unlock");
}

static void unlock_unheld(void)
{
	lk_unlock(&a, LK_NAMES);
}

static void held_states(void)
{
	if (!lk_not_held(LK_ENGINE) || lk_held(LK_ENGINE))
		abort();
	lk_lock(&a, LK_ENGINE);
	if (!lk_held(LK_ENGINE) || lk_not_held(LK_ENGINE))
		abort();
	lk_unlock(&a, LK_ENGINE);
}

/* 0: the child exited 0; 1: it aborted; -1 anything else. */
static int run(void (*fn)(void), const char *env)
{
	int status;
	pid_t pid;

	fflush(stdout); /* a child must not print what the parent buffered */
	pid = fork();

	if (pid == 0) {
		if (env)
			setenv("HSMFS_LOCKCHECK", env, 1);
		else
			unsetenv("HSMFS_LOCKCHECK");
		/* the stack a broken rule prints is not this test's output */
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		fn();
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT ? 1 : -1;
}

int main(void)
{
	pthread_mutexattr_t ma;

	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&r, &ma);
#ifdef NDEBUG
	ok(run(in_order, NULL) == 0, "release build: locks work, nothing is checked");
	return tap_done();
#endif
	ok(run(in_order, NULL) == 0, "locks taken in the order pass");
	ok(run(out_of_order, NULL) == 1, "a lock taken after one that comes later aborts");
	ok(run(twice, NULL) == 1, "a lock taken twice aborts");
	ok(run(recursive_meta, NULL) == 0, "the database's lock is recursive and may block");
	ok(run(block_under_inodes, NULL) == 1, "may_block under the inode table's lock aborts");
	ok(run(block_under_engine, NULL) == 1, "may_block under S.lock aborts");
	ok(run(block_under_cache, NULL) == 1, "may_block under the cache's lock aborts");
	ok(run(block_bracketed, NULL) == 0, "may_block in a named exception, or unlocked, passes");
	ok(run(unlock_unheld, NULL) == 1, "a lock dropped but not held aborts");
	ok(run(held_states, NULL) == 0, "lk_held and lk_not_held say what this thread holds");
	{
		char path[] = "/tmp/hsmfs-test-lockcheck-XXXXXX", env[64], buf[512] = "";
		int fd = mkstemp(path);
		ssize_t n;

		snprintf(env, sizeof(env), "report:%s", path);
		ok(fd >= 0 && run(block_under_engine, env) == 0 &&
		   (n = read(fd, buf, sizeof(buf) - 1)) > 0 &&
		   strstr(buf, "a test's open may block and runs under S.lock"),
		   "HSMFS_LOCKCHECK=report:FILE reports a place under S.lock there, and goes on");
		ok(run(out_of_order, env) == 0, "and reports a broken order without aborting");
		if (fd >= 0)
			close(fd);
		unlink(path);
	}
	return tap_done();
}
