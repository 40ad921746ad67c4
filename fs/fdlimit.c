/* fdlimit.c - see fdlimit.h */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "fdlimit.h"

static struct rlimit started;    /* the limits at start; rlim_cur 0: not raised */
static _Atomic uint64_t exhausted; /* EMFILE/ENFILE met */

int fdlimit_raise(void)
{
	const char *was = getenv(FDLIMIT_ENV);
	unsigned long long w = was ? strtoull(was, NULL, 10) : 0;
	struct rlimit rl;
	char buf[32];

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	started = rl;
	/* a daemon a keeper started: the limit the first one was given */
	if (w > 0 && w <= rl.rlim_max)
		started.rlim_cur = w;
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)started.rlim_cur);
	setenv(FDLIMIT_ENV, buf, 1);
	if (rl.rlim_cur == rl.rlim_max)
		return 0;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		started.rlim_cur = 0;
		return -errno;
	}
	return 0;
}

void fdlimit_child(void)
{
	if (started.rlim_cur)
		(void)setrlimit(RLIMIT_NOFILE, &started);
}

int fdlimit_note(int err)
{
	if (err == -EMFILE || err == -ENFILE)
		atomic_fetch_add_explicit(&exhausted, 1, memory_order_relaxed);
	return err;
}

void fdlimit_stats(uint64_t *ret_fds, uint64_t *ret_limit, uint64_t *ret_exhausted)
{
	struct rlimit rl;
	DIR *d = opendir("/proc/self/fd");
	uint64_t n = 0;

	if (d) {
		while (readdir(d))
			n++;
		closedir(d);
		n = n > 3 ? n - 3 : 0; /* ".", ".." and the directory's own */
	}
	*ret_fds = n;
	*ret_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ?
			     rl.rlim_cur : 0;
	*ret_exhausted = atomic_load_explicit(&exhausted, memory_order_relaxed);
}
