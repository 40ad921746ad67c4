/*
 * restart.c - hsmfsctl restart MOUNTPOINT: a new daemon for a mount that
 * stays mounted.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>

#include "ctl.h"

/* How many hooks are connected to the mount mnt (0 if it cannot say). */
static int hooks_connected(const char *mnt)
{
	static char buf[1 << 20];
	ssize_t n = hgetxattr(mnt, "user.hsmfs.hooks", buf, sizeof(buf) - 1);
	int lines = 0;

	for (ssize_t i = 0; i < n; i++)
		lines += buf[i] == '\n';
	return lines;
}

/*
 * The serving daemon hands over to the hsmfs binary installed now: the
 * mount, its open files and its users stay (hsmfs(8), RESTARTS).  Waits
 * for the new daemon's first answer and says how long the mount paused.
 */
int cmd_restart(int argc, char **argv)
{
	char buf[4096];
	long long before, after = -1;
	int nhooks;
	ssize_t n;

	(void)argc; /* 2: the table in hsmfsctl.c let one MOUNTPOINT through only */
	if (mount_xattr(argv[1], "user.hsmfs.stats", buf, sizeof(buf)) < 0)
		return X_STORE;
	before = json_num(buf, "restarts");
	nhooks = hooks_connected(argv[1]);
	n = hgetxattr(argv[1], "user.hsmfs.restart", buf, sizeof(buf) - 1);
	if (n < 0) {
		fprintf(stderr, "hsmfsctl: cannot restart '%s': %s\n", argv[1],
			/* ESRCH: a fanotify mount's daemon (lib/ctlsock.h) */
			errno == EOPNOTSUPP || errno == ESRCH ? "it was mounted with -o norestart" :
			errno == ENODATA ? "not the mount's root" : strerror(errno));
		return X_STORE;
	}
	/*
	 * each look waits in the kernel until a daemon serves it (FUSE); a
	 * fanotify mount's control socket is not there between two daemons
	 */
	for (int i = 0; i < 600; i++) {
		n = hgetxattr(argv[1], "user.hsmfs.stats", buf, sizeof(buf) - 1);
		if (n < 0 && errno == ENOTCONN) {
			nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
			continue;
		}
		if (n < 0 && mount_xattr(argv[1], "user.hsmfs.stats", buf, sizeof(buf)) < 0)
			return X_STORE;
		if (n >= 0)
			buf[n] = '\0';
		after = json_num(buf, "restarts");
		if (after > before)
			break;
		nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	}
	if (after <= before) {
		fprintf(stderr, "hsmfsctl: '%s': no new daemon within 30 s\n", argv[1]);
		return X_STORE;
	}
	/*
	 * done once the mount is as it was: its hooks back (a hook starting
	 * up looks at the mountpoint, and an unmount then would be refused)
	 */
	for (int i = 0; i < 200 && hooks_connected(argv[1]) < nhooks; i++)
		nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	printf("restarted: the mount paused %lld ms\n", json_num(buf, "restart_pause_ms"));
	return 0;
}
