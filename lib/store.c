/* store.c - see store.h */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"

int store_open(const char *path, struct store *ret, char *err, size_t errlen)
{
	return store_open_held(path, -1, ret, err, errlen);
}

int store_open_held(const char *path, int held_fd, struct store *ret, char *err,
		    size_t errlen)
{
	struct store s = { -1, -1, -1 };
	struct stat st;
	int res;

	s.root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (s.root_fd < 0) {
		res = -errno;
		snprintf(err, errlen, "store '%s': %s", path,
			 res == -ENOTDIR ? "not a directory" : strerror(-res));
		return res;
	}
	if (mkdirat(s.root_fd, STORE_STATE_DIR, 0700) < 0 && errno != EEXIST) {
		res = -errno;
		snprintf(err, errlen, "cannot create '%s/%s': %s", path,
			 STORE_STATE_DIR, strerror(-res));
		goto fail;
	}
	s.state_fd = openat(s.root_fd, STORE_STATE_DIR,
			    O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s.state_fd < 0 || fstat(s.state_fd, &st) < 0) {
		res = -errno;
		snprintf(err, errlen, "'%s/%s' is not a usable directory: %s",
			 path, STORE_STATE_DIR, strerror(-res));
		goto fail;
	}
	if (st.st_uid != geteuid()) {
		res = -EPERM;
		snprintf(err, errlen, "'%s/%s' belongs to uid %u, not to us",
			 path, STORE_STATE_DIR, (unsigned)st.st_uid);
		goto fail;
	}
	/* O_PATH cannot be used with openat for creation; reopen the dir. */
	if (held_fd >= 0) {
		/* the keeper's: flock() on it again succeeds, it is the same lock */
		s.lock_fd = fcntl(held_fd, F_DUPFD_CLOEXEC, 3);
	} else {
		char p[64];

		snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", s.state_fd,
			 STORE_LOCK_FILE);
		s.lock_fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
				 0600);
	}
	if (s.lock_fd < 0) {
		res = -errno;
		snprintf(err, errlen, "cannot open lock '%s/%s/%s': %s", path,
			 STORE_STATE_DIR, STORE_LOCK_FILE, strerror(-res));
		goto fail;
	}
	if (flock(s.lock_fd, LOCK_EX | LOCK_NB) < 0) {
		char buf[32] = "";
		ssize_t n;

		res = errno == EWOULDBLOCK ? -EBUSY : -errno;
		n = pread(s.lock_fd, buf, sizeof(buf) - 1, 0);
		if (n > 0) {
			buf[n] = '\0';
			buf[strcspn(buf, "\n")] = '\0';
		}
		if (res == -EBUSY && n > 0 && buf[0])
			snprintf(err, errlen,
				 "store '%s' is already mounted by another hsmfs (pid %s)",
				 path, buf);
		else if (res == -EBUSY)
			snprintf(err, errlen,
				 "store '%s' is already mounted by another hsmfs",
				 path);
		else
			snprintf(err, errlen, "cannot lock store '%s': %s",
				 path, strerror(-res));
		goto fail;
	}
	*ret = s;
	return 0;
fail:
	if (s.lock_fd >= 0)
		close(s.lock_fd);
	if (s.state_fd >= 0)
		close(s.state_fd);
	close(s.root_fd);
	return res;
}

void store_write_pid(const struct store *s, pid_t pid)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)pid);

	if (ftruncate(s->lock_fd, 0) == 0)
		(void)!pwrite(s->lock_fd, buf, n, 0);
}

void store_close(struct store *s)
{
	if (!s)
		return;
	if (s->state_fd >= 0)
		close(s->state_fd);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	s->state_fd = s->lock_fd = -1;
}
