/*
 * hsmfs-mirror - an example fill hook: copies missing ranges from a
 * local mirror directory that has the same tree as the mount.
 *
 *   hsmfs-mirror MIRROR MOUNTPOINT
 *
 * (the mountpoint last, so that -o hook=hsmfs-mirror\ MIRROR works).
 * For each PRE_ACCESS event it reads the hint range of the file's copy
 * in MIRROR, writes it through the descriptor that came with the event,
 * and allows the range it filled; a missing mirror file is denied with
 * EIO.  It runs until the mount goes away.
 *
 * The copy is named by the file's origin (the manifest's url, relative
 * to MIRROR), and only without one by its path: the path of an event
 * can name another file by the time the hook reads it (a rename, a
 * RENAME_EXCHANGE of two placeholders), its origin cannot.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_PATH: built by users too, with pkg-config only */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hsmfs/hook.h"

/* hsmfs's build says its version; a copy built on its own, its protocol's */
#ifndef HSMFS_VERSION
#define STR_(x) #x
#define STR(x) STR_(x)
#define HSMFS_VERSION "(built outside hsmfs, hook protocol " STR(HSMFS_PROTO_VERSION) ")"
#endif

/* A name inside the mirror: relative, no "." or ".." component. */
static bool inside(const char *p)
{
	if (!p[0] || p[0] == '/')
		return false;
	for (const char *c = p; *c; c += strcspn(c, "/"), c += *c == '/') {
		size_t n = strcspn(c, "/");

		if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
	}
	return true;
}

static int fill(int mirror_dir, const struct hsmfs_event *ev)
{
	static char buf[1 << 20];
	uint64_t pos = ev->hint_start;
	const char *name = ev->origin[0] ? ev->origin : ev->path;
	struct stat st = { 0 };
	int src;

	if (!inside(name))
		return -EACCES;
	src = openat(mirror_dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (src < 0)
		return -errno;
	/* bytes of another version are never kept: its size must be the recorded one */
	if (fstat(src, &st) || (uint64_t)st.st_size != ev->file_size) {
		fprintf(stderr, "hsmfs-mirror: '%s' has %lld bytes, recorded %llu: refused\n",
			name, (long long)st.st_size, (unsigned long long)ev->file_size);
		close(src);
		return -EIO;
	}
	while (pos < ev->hint_end) {
		size_t want = ev->hint_end - pos < sizeof(buf) ? ev->hint_end - pos :
								 sizeof(buf);
		ssize_t n = pread(src, buf, want, pos);

		if (n <= 0) {
			close(src);
			return n < 0 ? -errno : -EIO; /* mirror shorter than the file */
		}
		for (ssize_t w, done = 0; done < n; done += w) {
			/* short writes go on; ENOSPC reaches the daemon as such */
			w = pwrite(ev->fd, buf + done, n - done, pos + done);
			if (w <= 0) {
				int e = w < 0 ? errno : EIO;

				close(src);
				return -e;
			}
		}
		pos += n;
	}
	close(src);
	return 0;
}

int main(int argc, char **argv)
{
	struct hsmfs_hook *h;
	struct hsmfs_event ev;
	int mirror, res;

	if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
		printf("hsmfs-mirror %s\n", HSMFS_VERSION);
		return 0;
	}
	if (argc != 3 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		bool asked = argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));

		fprintf(asked ? stdout : stderr,
			"usage: hsmfs-mirror MIRROR MOUNTPOINT\n"
			"  a fill hook: copies missing bytes from the same path (or the\n"
			"  recorded origin) below MIRROR; see hsmfs-mirror(1)\n"
			"       hsmfs-mirror -h|--help | -V|--version\n");
		return asked ? 0 : 1;
	}
	mirror = open(argv[1], O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (mirror < 0) {
		fprintf(stderr, "hsmfs-mirror: mirror '%s': %s\n", argv[1], strerror(errno));
		return 1;
	}
	res = hsmfs_hook_connect(argv[2], HSMFS_KIND_FILL,
				 HSMFS_MASK(HSMFS_EV_PRE_ACCESS), "hsmfs-mirror",
				 NULL, &h);
	if (res) {
		fprintf(stderr, "hsmfs-mirror: cannot connect to '%s': %s\n", argv[2],
			strerror(-res));
		return 1;
	}
	while ((res = hsmfs_hook_next(h, &ev)) == 0) {
		if (ev.type != HSMFS_EV_PRE_ACCESS) {
			if (ev.fd >= 0)
				close(ev.fd);
			continue;
		}
		res = ev.fd >= 0 ? fill(mirror, &ev) : -EBADF;
		if (ev.fd >= 0)
			close(ev.fd);
		if (res)
			hsmfs_hook_deny(h, ev.id, -res == ENOENT ? EIO : -res);
		else
			hsmfs_hook_allow(h, ev.id, ev.hint_start, ev.hint_end, 0);
	}
	hsmfs_hook_close(h);
	return res == -ECONNRESET ? 0 : 1;
}
