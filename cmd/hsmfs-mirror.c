/*
 * hsmfs-mirror - an example fill hook: copies missing ranges from a
 * local mirror directory that has the same tree as the mount.
 *
 *   hsmfs-mirror MIRROR MOUNTPOINT
 *
 * (the mountpoint last, so that -o hook=hsmfs-mirror\ MIRROR works).
 * For each PRE_ACCESS event it reads the hint range of MIRROR/PATH,
 * writes it through the descriptor that came with the event, and allows
 * the range it filled; a missing mirror file is denied with EIO.
 * It runs until the mount goes away.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hsmfs/hook.h"

static int fill(int mirror_dir, const struct hsmfs_event *ev)
{
	static char buf[1 << 20];
	uint64_t pos = ev->hint_start;
	int src = openat(mirror_dir, ev->path, O_RDONLY | O_CLOEXEC);

	if (src < 0)
		return -errno;
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

	if (argc != 3 || !strcmp(argv[1], "--help")) {
		fprintf(stderr, "usage: hsmfs-mirror MIRROR MOUNTPOINT\n");
		return argc == 2 ? 0 : 1;
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
