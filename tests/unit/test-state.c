/*
 * Unit tests for fs/state.c's work after the unlock: a close or a log
 * line asked for under S.lock is done only once eunlock() has dropped
 * the lock, in the asking thread; without the lock, at once.  And the
 * lock check sees no blocking call under S.lock when the closes and
 * the log line are deferred.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state.h"
#include "tap.h"

static bool is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0 || errno != EBADF;
}

/* What stderr got since the last call (stderr is a pipe's write end). */
static int err_r = -1;
static size_t drained(char *buf, size_t size)
{
	ssize_t n = read(err_r, buf, size - 1);

	buf[n > 0 ? n : 0] = 0;
	return n > 0 ? (size_t)n : 0;
}

int main(void)
{
	int fds[40], p[2], saved_err;
	char buf[4096], report[] = "/tmp/hsmfs-test-state.XXXXXX";
	bool all;
	FILE *f;

	/* the lock check reports (not aborts) into a file of ours */
	close(mkstemp(report));
	setenv("HSMFS_LOCKCHECK", strcat(strcpy(buf, "report:"), report), 1);

	if (pipe2(p, O_NONBLOCK) < 0)
		return 1;
	err_r = p[0];
	saved_err = dup(STDERR_FILENO);
	dup2(p[1], STDERR_FILENO);

	elock();
	for (int i = 0; i < 40; i++) {
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		close_unlocked(fds[i]);
	}
	all = true;
	for (int i = 0; i < 40; i++)
		all = all && is_open(fds[i]);
	ok(all, "40 descriptors closed under S.lock are still open while it is held");
	elog_warn("a line asked for under the lock (%d)", 42);
	ok(drained(buf, sizeof(buf)) == 0, "a log line asked for under S.lock is not written yet");
	eunlock();
	all = true;
	for (int i = 0; i < 40; i++)
		all = all && !is_open(fds[i]);
	ok(all, "all 40 are closed once eunlock() returns");
	drained(buf, sizeof(buf));
	ok(strstr(buf, "a line asked for under the lock (42)") != NULL,
	   "the log line is written once eunlock() returns (got '%s')", buf);

	fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	close_unlocked(fds[0]);
	ok(!is_open(fds[0]), "without S.lock a descriptor is closed at once");
	elog_warn("a line without the lock");
	drained(buf, sizeof(buf));
	ok(strstr(buf, "a line without the lock") != NULL, "without S.lock a line is written at once");

	elock();
	elog_info("first");
	elog_info("second");
	eunlock();
	drained(buf, sizeof(buf));
	ok(strstr(buf, "first") && strstr(buf, "second") &&
	   strstr(buf, "first") < strstr(buf, "second"), "deferred lines keep their order");

	dup2(saved_err, STDERR_FILENO);
	f = fopen(report, "r");
	ok(f && fread(buf, 1, sizeof(buf), f) == 0,
	   "the lock check saw nothing block under S.lock");
	if (f)
		fclose(f);
	unlink(report);
	return tap_done();
}
