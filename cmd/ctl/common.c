/*
 * common.c - the helpers hsmfsctl's commands share (ctl.h): the mount a
 * path is on and its root's attributes, JSON strings and numbers, sizes
 * for a person, and the progress line of long work on a terminal.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "clock.h"
#include "ctl.h"

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

bool fanotify_mount_said(const char *path)
{
	char cur[PATH_MAX], sock[PATH_MAX + 32];
	struct stat st;

	if (!realpath(path, cur))
		return false;
	for (;;) {
		char *sl;

		snprintf(sock, sizeof(sock), "%s/.hsmfs/hook.sock", cur);
		if (!stat(sock, &st) && S_ISSOCK(st.st_mode)) {
			fprintf(stderr, "hsmfsctl: '%s' is on a backend=fanotify mount, whose daemon "
				"hsmfsctl cannot ask yet (hsmfs(8) FANOTIFY BACKEND)\n", path);
			return true;
		}
		sl = strrchr(cur, '/');
		if (!sl || !cur[1])
			return false;
		sl[sl == cur] = '\0';
	}
}

/* A user.hsmfs.* attribute of the mount's root, NUL-terminated: its length, or -1 (said why). */
ssize_t mount_xattr(const char *mnt, const char *name, char *buf, size_t size)
{
	ssize_t n = getxattr(mnt, name, buf, size - 1);

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
	while (getxattr(cur, "user.hsmfs.store", NULL, 0) < 0) {
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
