/* store.c - see store.h */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

size_t store_marker(char buf[STORE_MARKER_MAX + 1], const char *origin, const char *version)
{
	size_t o = origin ? strlen(origin) : 0, v = version ? strlen(version) : 0;

	if (o + 1 + v > STORE_MARKER_MAX)
		o = 0; /* the database has it */
	if (o + 1 + v > STORE_MARKER_MAX) {
		buf[0] = '\0';
		return 0;
	}
	memcpy(buf, origin ? origin : "", o);
	buf[o] = '\n';
	memcpy(buf + o + 1, version ? version : "", v);
	buf[o + 1 + v] = '\0';
	return o + 1 + v;
}

/* mountinfo's escapes (\ooo for a space, tab, newline, backslash) undone in place */
static void unescape(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

/*
 * Is the store at path mounted (a fuse mount whose source, the daemon's
 * fsname, is path) in the mount table of pid (a decimal string, the
 * lock's holder), or in ours if that cannot be read?  A mount with an
 * fsname of its own is not seen: it is waited for, then refused.
 */
static bool store_mounted(const char *path, const char *pid)
{
	char file[64], *line = NULL;
	size_t cap = 0;
	bool found = false;
	FILE *f = NULL;

	if (pid[0] && strspn(pid, "0123456789") == strlen(pid)) {
		snprintf(file, sizeof(file), "/proc/%s/mountinfo", pid);
		f = fopen(file, "re");
	}
	if (!f)
		f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return false;
	while (!found && getline(&line, &cap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - TYPE SOURCE SUPER */
		char *sep = strstr(line, " - "), *type, *source, *save;

		if (!sep)
			continue;
		type = strtok_r(sep + 3, " \n", &save);
		source = type ? strtok_r(NULL, " \n", &save) : NULL;
		if (!source || strncmp(type, "fuse", 4))
			continue;
		unescape(source);
		found = !strcmp(source, path);
	}
	free(line);
	fclose(f);
	return found;
}

static int64_t mono_ms_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int store_hold(int dirfd, const char *name)
{
	return openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
}

void store_release(int fd)
{
	if (fd >= 0)
		close(fd);
}

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
	for (int64_t until = mono_ms_now() + STORE_LOCK_WAIT_MS,
		     live_until = mono_ms_now() + STORE_LIVE_WAIT_MS;;) {
		char buf[32] = "";
		bool mounted;
		ssize_t n;

		if (!flock(s.lock_fd, LOCK_EX | LOCK_NB))
			break;
		res = errno == EWOULDBLOCK ? -EBUSY : -errno;
		n = pread(s.lock_fd, buf, sizeof(buf) - 1, 0);
		if (n > 0) {
			buf[n] = '\0';
			buf[strcspn(buf, "\n")] = '\0';
		}
		/*
		 * umount(2) returns before the daemon has wound down: a holder
		 * whose mount is gone is waited for, a live mount a moment (an
		 * unmount of it may be under way), then refused
		 */
		mounted = res == -EBUSY && store_mounted(path, n > 0 ? buf : "");
		if (res == -EBUSY && held_fd < 0 &&
		    mono_ms_now() < (mounted ? live_until : until)) {
			nanosleep(&(struct timespec){ 0, STORE_LOCK_POLL_MS * 1000000L }, NULL);
			continue;
		}
		if (res == -EBUSY && !mounted && held_fd < 0)
			snprintf(err, errlen,
				 "store '%s' is held by another hsmfs (pid %s) whose mount is gone: "
				 "it did not let go within %d s",
				 path, n > 0 && buf[0] ? buf : "unknown", STORE_LOCK_WAIT_MS / 1000);
		else if (res == -EBUSY && n > 0 && buf[0])
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
