/*
 * common.c - the helpers hsmfsctl's commands share (ctl.h): the mount a
 * path is on and its root's attributes, JSON strings and numbers, sizes
 * for a person, and the progress line of long work on a terminal.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ctl.h"
#include "ctlsock.h"
#include "store.h"

/*
 * Long work on a terminal: one line on standard error, rewritten at most
 * ten times a second (end: the last, then wiped, so that the summary on
 * standard output stands alone).  Nothing when standard error is not a
 * terminal.  One thread.
 */
static int progress_width; /* of the line shown, 0: none */

void tty_progress(bool end, const char *fmt, ...)
{
	static int tty = -1;
	static double shown;
	char line[160];
	double now = mono_s();
	va_list ap;

	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	if (!tty || (!end && now - shown < 0.1) || (end && !progress_width))
		return;
	shown = now;
	if (end) {
		fprintf(stderr, "\r%*s\r", progress_width, "");
		progress_width = 0;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	progress_width = fprintf(stderr, "\r%-79.79s", line) - 1;
}

void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* A backend=fanotify mount's daemon refused a request: said once, here. */
static bool fan_said;

bool fanotify_mount_said(const char *path)
{
	char dir[PATH_MAX];
	int e = errno;

	if (fan_said)
		return true;
	if (!ctlsock_find(path, true, dir, sizeof(dir)))
		return false;
	fprintf(stderr, "hsmfsctl: '%s' is on a backend=fanotify mount whose daemon does not "
		"answer: %s\n", path, strerror(e));
	return true;
}

bool state_dir_shown(const char *dir, const char *name)
{
	char lock[PATH_MAX + 64];
	struct stat st;

	if (strcmp(name, STORE_STATE_DIR))
		return false;
	snprintf(lock, sizeof(lock), "%s/%s/" STORE_LOCK_FILE, dir, name);
	return !lstat(lock, &st);
}

#define VIRT "user.hsmfs."

#define FUSE_SUPER_MAGIC 0x65735546
#define CTL_WAIT_TRIES 200 /* 50 ms apart: a fanotify mount's next daemon */

/*
 * Is path on a FUSE mount?  Asked of its filesystem once a device
 * (a statfs(2) of FUSE is a request to its daemon).
 */
static bool on_fuse(const char *path, bool follow)
{
	static dev_t last_dev;
	static bool last_fuse, known;
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	struct statfs sf;
	struct stat st;
	bool fuse = false;
	int fd = open(path, O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));

	if (fd < 0 || fstat(fd, &st)) {
		if (fd >= 0)
			close(fd);
		return false; /* the call itself says why */
	}
	pthread_mutex_lock(&lock);
	if (known && st.st_dev == last_dev) {
		fuse = last_fuse;
	} else if (!fstatfs(fd, &sf)) {
		fuse = sf.f_type == FUSE_SUPER_MAGIC;
		last_dev = st.st_dev;
		last_fuse = fuse;
		known = true;
	}
	pthread_mutex_unlock(&lock);
	close(fd);
	return fuse;
}

/*
 * A user.hsmfs.* attribute of a path off FUSE: on a backend=fanotify
 * mount (the store bound, its state directory seen), asked of its daemon
 * through the control socket (ctlsock.h), as -1 and errno (ENOTCONN: no
 * daemon answers), or the length; -2: path is on no such mount.  Never
 * the store file's own attribute: a user may set one, and a daemon that
 * does not answer would leave one.
 */
static ssize_t fan_xattr(const char *path, bool follow, uint32_t op, const char *name,
			 const void *value, size_t len, void *buf, size_t size)
{
	char dir[PATH_MAX];
	ssize_t res;

	/*
	 * A FUSE mount answers its attributes itself, and a look for the
	 * socket there would be lookups of the daemon's (a directory not
	 * listed yet would be listed)
	 */
	if (strncmp(name, VIRT, sizeof(VIRT) - 1) || on_fuse(path, follow) ||
	    !ctlsock_find(path, follow, dir, sizeof(dir)))
		return -2;
	/*
	 * no daemon listens: the keeper's next one may be starting (a
	 * request to a FUSE mount waits in the kernel for it), 10 s at most
	 */
	for (int i = 0; (res = ctlsock_ask(dir, path, follow, op, name, value, len, buf,
					   size)) == -ENOTCONN && i < CTL_WAIT_TRIES; i++)
		nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	if (res == -EOPNOTSUPP && !fan_said) {
		fan_said = true;
		fprintf(stderr, "hsmfsctl: the daemon of a backend=fanotify mount does not do %s "
			"yet (hsmfs(8) FANOTIFY BACKEND)\n", name + sizeof(VIRT) - 1);
	}
	if (res < 0) {
		/* not ENOTSUP, which says "not an hsmfs mount" to the commands */
		errno = res == -EOPNOTSUPP ? ENOSYS : (int)-res;
		return -1;
	}
	return res;
}

/*
 * A get off FUSE asks a fanotify mount's daemon (the store's file may
 * hold a user's own user.hsmfs.*); anywhere else, the mount itself.
 */
static ssize_t get(const char *path, bool follow, const char *name, void *buf, size_t size)
{
	ssize_t n = fan_xattr(path, follow, CTLSOCK_GET, name, NULL, 0, buf, size);

	if (n != -2)
		return n;
	return follow ? getxattr(path, name, buf, size) : lgetxattr(path, name, buf, size);
}

ssize_t hgetxattr(const char *path, const char *name, void *buf, size_t size)
{
	return get(path, true, name, buf, size);
}

ssize_t hlgetxattr(const char *path, const char *name, void *buf, size_t size)
{
	return get(path, false, name, buf, size);
}

int hsetxattr(const char *path, const char *name, const void *value, size_t len, int flags)
{
	ssize_t n = fan_xattr(path, true, CTLSOCK_SET, name, value, len, NULL, 0);

	return n != -2 ? (int)n : setxattr(path, name, value, len, flags);
}

int hlsetxattr(const char *path, const char *name, const void *value, size_t len, int flags)
{
	ssize_t n = fan_xattr(path, false, CTLSOCK_SET, name, value, len, NULL, 0);

	return n != -2 ? (int)n : lsetxattr(path, name, value, len, flags);
}

/* A user.hsmfs.* attribute of the mount's root, NUL-terminated: its length, or -1 (said why). */
ssize_t mount_xattr(const char *mnt, const char *name, char *buf, size_t size)
{
	ssize_t n = hgetxattr(mnt, name, buf, size - 1);

	if (n < 0) {
		int e = errno;

		if (!fanotify_mount_said(mnt))
			fprintf(stderr, "hsmfsctl: '%s' is not an hsmfs mount: %s\n", mnt, strerror(e));
		return -1;
	}
	buf[n] = '\0';
	return n;
}

/* The number after "key": in the daemon's flat JSON object, or -1. */
long long json_num(const char *obj, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(obj, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

void human(char *buf, size_t n, long long v)
{
	const char *u = "KMGTP";
	double d = (double)v;
	int i = -1;

	while (d >= 1024 && i < 4) {
		d /= 1024;
		i++;
	}
	if (i < 0)
		snprintf(buf, n, "%lld B", v);
	else
		snprintf(buf, n, "%.1f %ciB", d, u[i]);
}

/*
 * The hsmfs mount path is on: its root in ret_mnt (a real path), and
 * path's own path below it in ret_rel ("" or ending in '/').  0, or
 * -1: not on an hsmfs mount.
 */
int mount_of(const char *path, char *ret_mnt, size_t mlen, char *ret_rel, size_t rlen)
{
	char real[PATH_MAX], cur[PATH_MAX];
	const char *rel;

	if (!realpath(path, real))
		return -1;
	snprintf(cur, sizeof(cur), "%s", real);
	while (hgetxattr(cur, "user.hsmfs.store", NULL, 0) < 0) {
		char *sl = strrchr(cur, '/');

		if (!sl || !cur[1])
			return -1;
		sl[sl == cur] = '\0';
	}
	rel = real + strlen(cur);
	rel += *rel == '/';
	if ((size_t)snprintf(ret_mnt, mlen, "%s", cur) >= mlen ||
	    (size_t)snprintf(ret_rel, rlen, "%s%s", rel, rel[0] ? "/" : "") >= rlen)
		return -1;
	return 0;
}
