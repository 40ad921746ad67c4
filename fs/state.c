/* state.c - what the engine and the state layer share, S: see state.h */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "log.h"
#include "state.h"

struct state S = { .lock = PTHREAD_MUTEX_INITIALIZER };
__thread bool elock_mine;
_Atomic uint32_t events_mask;

/* A thread's work for after its unlock: descriptors, then log lines in order. */
struct line {
	struct line *next;
	enum log_level lvl;
	char text[];
};

__thread bool after_unlock_due;
static __thread int *fds;
static __thread size_t nfds, capfds;
static __thread struct line *lines, **lines_tail; /* lines_tail: valid while lines */

void close_unlocked(int fd)
{
	if (fd < 0)
		return;
	if (!elock_mine) {
		close(fd);
		return;
	}
	if (nfds == capfds) {
		size_t cap = capfds ? 2 * capfds : 16;
		int *more = realloc(fds, cap * sizeof(*fds));

		if (!more) {
			lk_block_ok_begin();
			close(fd); /* no memory: now, under the lock */
			lk_block_ok_end();
			return;
		}
		fds = more;
		capfds = cap;
	}
	fds[nfds++] = fd;
	after_unlock_due = true;
}

#ifndef NDEBUG
bool close_is_pending(int fd)
{
	for (size_t i = 0; i < nfds; i++)
		if (fds[i] == fd)
			return true;
	return false;
}
#endif

void elog(enum log_level lvl, const char *fmt, ...)
{
	struct line *l;
	va_list ap;
	int n;

	va_start(ap, fmt);
	if (elock_mine) {
		va_list again;

		va_copy(again, ap);
		n = vsnprintf(NULL, 0, fmt, again);
		va_end(again);
		l = n >= 0 ? malloc(sizeof(*l) + (size_t)n + 1) : NULL;
		if (l) {
			vsnprintf(l->text, (size_t)n + 1, fmt, ap);
			va_end(ap);
			l->lvl = lvl;
			l->next = NULL;
			if (!lines)
				lines_tail = &lines;
			*lines_tail = l;
			lines_tail = &l->next;
			after_unlock_due = true;
			return;
		}
		lk_block_ok_begin(); /* no memory: now, under the lock */
	}
	char buf[1024];

	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	log_msg(lvl, "%s", buf);
	if (elock_mine)
		lk_block_ok_end();
}

void after_unlock(void)
{
	ELOCK_NOT_HELD();
	after_unlock_due = false;
	for (size_t i = 0; i < nfds; i++)
		close(fds[i]);
	free(fds); /* a thread may end before its next unlock: nothing kept */
	fds = NULL;
	nfds = capfds = 0;
	while (lines) {
		struct line *l = lines;

		lines = l->next;
		log_msg(l->lvl, "%s", l->text);
		free(l);
	}
}
