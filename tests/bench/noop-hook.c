/*
 * noop-hook - a fill hook that answers every PRE_ACCESS at once with the
 * required range, writing nothing: the cost of the event path itself
 * (the bytes read back are the store's zeros).  For benchmarks only.
 *
 *   noop-hook MOUNTPOINT
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hsmfs/hook.h"

int main(int argc, char **argv)
{
	struct hsmfs_hook *h;
	struct hsmfs_event ev;
	int res;

	if (argc != 2) {
		fprintf(stderr, "usage: noop-hook MOUNTPOINT\n");
		return 1;
	}
	res = hsmfs_hook_connect(argv[1], HSMFS_KIND_FILL,
				 HSMFS_MASK(HSMFS_EV_PRE_ACCESS), "noop", NULL, &h);
	if (res) {
		fprintf(stderr, "noop-hook: %s\n", strerror(-res));
		return 1;
	}
	while (hsmfs_hook_next(h, &ev) == 0) {
		if (ev.fd >= 0)
			close(ev.fd);
		if (ev.type == HSMFS_EV_PRE_ACCESS)
			hsmfs_hook_allow(h, ev.id, ev.start, ev.end, 0);
	}
	hsmfs_hook_close(h);
	return 0;
}
