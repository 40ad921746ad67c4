/*
 * watch.c - hsmfsctl watch [--json] MOUNTPOINT: a mount's events, printed
 * as they happen, from a hook of the watch kind (libhsmfs-hook), which
 * allows each one.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "ctlsock.h"
#include "hsmfs/hook.h"
#include "proto.h"

int cmd_watch(int argc, char **argv)
{
	struct hsmfs_hook *h;
	struct hsmfs_event ev;
	const char *mnt = NULL;
	char dir[PATH_MAX];
	bool json = false;
	int res;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--json"))
			json = true;
		else
			mnt = argv[i];
	if (!mnt) {
		fprintf(stderr, "hsmfsctl: watch needs a MOUNTPOINT\n");
		return X_USAGE;
	}
	res = hsmfs_hook_connect(mnt, HSMFS_KIND_WATCH, HSMFS_MASK_ALL, "hsmfsctl-watch",
				 NULL, &h);
	if (res == -EPROTO && ctlsock_find(mnt, true, dir, sizeof(dir))) {
		/* refused: a fanotify mount raises no PRE_MODIFY (hsmfs(8) FANOTIFY BACKEND) */
		fprintf(stderr, "hsmfsctl: a backend=fanotify mount raises no PRE_MODIFY: watching "
			"PRE_ACCESS only\n");
		res = hsmfs_hook_connect(mnt, HSMFS_KIND_WATCH, HSMFS_MASK(HSMFS_EV_PRE_ACCESS),
					 "hsmfsctl-watch", NULL, &h);
	}
	if (res) {
		fprintf(stderr, "hsmfsctl: cannot watch '%s': %s\n", mnt, strerror(-res));
		return X_STORE;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((res = hsmfs_hook_next(h, &ev)) == 0) {
		const char *type = proto_event_name(ev.type);

		if (ev.fd >= 0)
			close(ev.fd);
		if (ev.type == HSMFS_EV_CANCEL)
			continue;
		if (json) {
			printf("{\"id\": %llu, \"event\": \"%s\", \"pid\": %u, \"uid\": %u, "
			       "\"start\": %llu, \"end\": %llu, \"path\": ",
			       (unsigned long long)ev.id, type, ev.pid, ev.uid,
			       (unsigned long long)ev.start, (unsigned long long)ev.end);
			json_str(ev.path);
			printf("}\n");
		} else {
			printf("%s %s [%llu, %llu) pid %u uid %u\n", type, ev.path,
			       (unsigned long long)ev.start, (unsigned long long)ev.end,
			       ev.pid, ev.uid);
		}
		hsmfs_hook_allow(h, ev.id, 0, 0, 0);
	}
	hsmfs_hook_close(h);
	return res == -ECONNRESET ? 0 : X_STORE;
}
