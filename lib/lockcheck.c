/* lockcheck.c - see lockcheck.h */
#include "lockcheck.h"

#ifndef NDEBUG
#include <execinfo.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const lk_name[LK_N] = {
	[LK_ENGINE] = "S.lock", [LK_INODES] = "the inode table's lock",
	[LK_CACHE] = "the cache's lock", [LK_NAMES] = "the names' lock",
	[LK_META] = "the database's lock",
};
/* The locks under which nothing may block. */
#define NO_BLOCK (1u << LK_ENGINE | 1u << LK_INODES | 1u << LK_CACHE | 1u << LK_NAMES)

static __thread unsigned depth[LK_N]; /* LK_META is recursive */
static __thread unsigned block_ok;

/*
 * A broken rule aborts, after the message and the stack on stderr;
 * with HSMFS_LOCKCHECK=report in the environment it only reports, so
 * that one run of the suite lists every place.
 */
__attribute__((format(printf, 1, 2)))
static void fail(const char *fmt, ...)
{
	va_list ap;
	void *pcs[24];
	const char *mode = getenv("HSMFS_LOCKCHECK");
	bool report = mode && strncmp(mode, "report", 6) == 0;
	char line[256];
	int n, fd = 2;

	if (report && mode[6] == ':')
		fd = open(mode + 7, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		fd = 2;

	n = snprintf(line, sizeof(line), "hsmfs: lock rule broken: ");
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	if (n < (int)sizeof(line) - 1)
		line[n++] = '\n';
	(void)!write(fd, line, n);
	backtrace_symbols_fd(pcs, backtrace(pcs, 24), fd);
	if (fd != 2)
		close(fd);
	if (!report)
		abort();
}

void lk_lock(pthread_mutex_t *m, enum lk l)
{
	for (unsigned k = l + 1; k < LK_N; k++)
		if (depth[k])
			fail("%s taken while holding %s, which comes after it", lk_name[l],
			     lk_name[k]);
	if (depth[l] && l != LK_META)
		fail("%s taken twice", lk_name[l]);
	pthread_mutex_lock(m);
	depth[l]++;
}

void lk_unlock(pthread_mutex_t *m, enum lk l)
{
	if (!depth[l])
		fail("%s dropped but not held", lk_name[l]);
	depth[l]--;
	pthread_mutex_unlock(m);
}

bool lk_held(enum lk l)
{
	return depth[l] != 0;
}

bool lk_not_held(enum lk l)
{
	return depth[l] == 0;
}

void may_block(const char *what)
{
	if (block_ok)
		return;
	for (unsigned k = 0; k < LK_N; k++)
		if (depth[k] && (NO_BLOCK >> k & 1))
			fail("%s may block and runs under %s", what, lk_name[k]);
}

void lk_block_ok_begin(void)
{
	block_ok++;
}

void lk_block_ok_end(void)
{
	block_ok--;
}
#endif
