/*
 * noop-hook - a fill hook that answers every PRE_ACCESS at once with the
 * required range, writing nothing: the cost of the event path itself
 * (the bytes read back are the store's zeros).  With --watch, a watch
 * hook subscribed to every event that allows each at once: the cost of
 * being watched, in C like the benchmark's fanotify listener.  For
 * benchmarks only.
 *
 *   noop-hook [--watch] MOUNTPOINT
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hsmfs/hook.h"

int main(int argc, char **argv)
{
	struct hsmfs_hook *h;
	struct hsmfs_event ev;
	int res;

	bool watch = argc == 3 && !strcmp(argv[1], "--watch");

	if (argc != 2 && !watch) {
		fprintf(stderr, "usage: noop-hook [--watch] MOUNTPOINT\n");
		return 1;
	}
	res = hsmfs_hook_connect(argv[argc - 1], watch ? HSMFS_KIND_WATCH : HSMFS_KIND_FILL,
				 watch ? HSMFS_MASK_ALL : HSMFS_MASK(HSMFS_EV_PRE_ACCESS),
				 "noop", NULL, &h);
	if (res) {
		fprintf(stderr, "noop-hook: %s\n", strerror(-res));
		return 1;
	}
	while (hsmfs_hook_next(h, &ev) == 0) {
		if (ev.fd >= 0)
			close(ev.fd);
		if (ev.type != HSMFS_EV_CANCEL)
			hsmfs_hook_allow(h, ev.id, ev.start, ev.end, 0);
	}
	hsmfs_hook_close(h);
	return 0;
}
