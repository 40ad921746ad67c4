/* fault.c - see fault.h */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fault.h"

#ifndef NDEBUG
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * The environment, read once: named points sit on the write and release
 * paths of debug builds (the default build type), where a getenv() per
 * request would be a scan of the environment per request.
 */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static const char *env_at, *env_log, *env_delay;

static void env_read(void)
{
	env_at = getenv("HSMFS_CRASH_AT");
	env_log = getenv("HSMFS_CRASH_LOG");
	env_delay = getenv("HSMFS_DELAY");
}

static void env_get(void)
{
	pthread_once(&env_once, env_read);
}
static unsigned long steps;

/* HSMFS_DELAY=NAME:MS[,NAME:MS...]: MS for name, else 0 */
/*
 * Die as kill -9 would: the exit_group system call itself, not _exit(),
 * which the sanitizers intercept to report the threads and memory a
 * crash leaves (a report that fails the test, for what no crash frees).
 */
static void crash(void)
{
	syscall(SYS_exit_group, 99);
	_exit(99); /* not reached */
}

static unsigned long delay_of(const char *name)
{
	size_t n = strlen(name);
	const char *p;

	env_get();
	/* NAME:MS[,NAME:MS...] */
	for (p = env_delay; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
		const char *colon = strchr(p, ':');

		if (colon && (size_t)(colon - p) == n && !strncmp(p, name, n))
			return strtoul(colon + 1, NULL, 10);
	}
	return 0;
}

/* Append "tag name" to HSMFS_CRASH_LOG.  lock held. */
static void log_line(const char *logp, const char *tag, const char *name)
{
	int fd = open(logp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	char line[128];
	int len = snprintf(line, sizeof(line), "%s %s\n", tag, name);

	if (fd >= 0) {
		if (write(fd, line, len) < 0) {
			/* the test sees the step missing */
		}
		close(fd);
	}
}

/* HSMFS_CRASH_AT is "N" (the Nth step) or "NAME:K" (the Kth step NAME) */
static bool crash_here(const char *at, const char *name, unsigned long n)
{
	static unsigned long named; /* steps NAME passed; lock held */
	const char *colon = strchr(at, ':');

	if (!colon)
		return strtoul(at, NULL, 10) == n;
	if ((size_t)(colon - at) != strlen(name) || strncmp(at, name, colon - at))
		return false;
	return ++named == strtoul(colon + 1, NULL, 10);
}

void fault_point(const char *name)
{
	unsigned long n, ms = delay_of(name); /* env_get() */
	const char *at = env_at, *logp = env_log;

	if (at || logp) {
		char tag[32];

		pthread_mutex_lock(&lock);
		n = ++steps;
		snprintf(tag, sizeof(tag), "%lu", n);
		if (logp)
			log_line(logp, tag, name);
		if (at && crash_here(at, name, n))
			crash();
		pthread_mutex_unlock(&lock);
	}
	/* after the log line: a test waiting for it acts during the delay */
	if (ms)
		usleep(ms * 1000);
}

void fault_named(const char *name)
{
	static unsigned long named; /* lock held */
	const char *at, *colon;

	env_get();
	at = env_at;
	colon = at ? strchr(at, ':') : NULL;

	if (!colon || (size_t)(colon - at) != strlen(name) || strncmp(at, name, colon - at))
		return;
	pthread_mutex_lock(&lock);
	if (++named == strtoul(colon + 1, NULL, 10))
		crash();
	pthread_mutex_unlock(&lock);
}

void fault_delay(const char *name)
{
	unsigned long ms = delay_of(name); /* env_get() */
	const char *logp = env_log;

	if (!ms)
		return;
	if (logp) {
		pthread_mutex_lock(&lock);
		log_line(logp, "-", name);
		pthread_mutex_unlock(&lock);
	}
	usleep(ms * 1000);
}

bool fault_hit(const char *name)
{
	static bool done;
	const char *want = getenv("HSMFS_FAIL");
	bool hit = false;

	if (!want)
		return false;
	pthread_mutex_lock(&lock);
	if (!done && !strcmp(want, name)) {
		done = true;
		hit = true;
		errno = EIO;
	}
	pthread_mutex_unlock(&lock);
	return hit;
}
#endif
