/* fault.c - see fault.h */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"

#ifndef NDEBUG
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long steps;

void fault_point(const char *name)
{
	const char *at = getenv("HSMFS_CRASH_AT"), *logp = getenv("HSMFS_CRASH_LOG");
	const char *delay = getenv("HSMFS_DELAY"), *colon;
	unsigned long n;

	colon = delay ? strchr(delay, ':') : NULL;
	if (colon && (size_t)(colon - delay) == strlen(name) &&
	    !strncmp(delay, name, colon - delay))
		usleep(strtoul(colon + 1, NULL, 10) * 1000);
	if (!at && !logp)
		return;
	pthread_mutex_lock(&lock);
	n = ++steps;
	if (logp) {
		int fd = open(logp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
		char line[128];
		int len = snprintf(line, sizeof(line), "%lu %s\n", n, name);

		if (fd >= 0) {
			if (write(fd, line, len) < 0) {
				/* the test sees the step missing */
			}
			close(fd);
		}
	}
	if (at && strtoul(at, NULL, 10) == n)
		_exit(99);
	pthread_mutex_unlock(&lock);
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
