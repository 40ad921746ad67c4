/*
 * keeper.h - the process that keeps the mount while daemons come and go.
 *
 * The process that mounted (through fusermount3, or directly as root)
 * becomes the keeper: it holds the /dev/fuse descriptor (on
 * backend=fanotify the two fanotify groups: their marks and the events
 * waiting for an answer live as long as the groups), the store's lock
 * and the saved region (saved.h), and runs the serving daemon as its
 * child.  It does no FUSE request handling, no SQLite and no hook
 * I/O: it waits for the daemon to end and then
 *   - exit 0 (unmounted, or told to stop): unmounts and exits 0;
 *   - KEEPER_STOP (the mount failed before it was ready): unmounts and
 *     exits with it;
 *   - KEEPER_HANDOVER (hsmfsctl restart): starts the hsmfs binary now
 *     installed, at once;
 *   - anything else (a signal, an abort, a failure while serving): logs
 *     the cause and starts it again, the same way; five daemons that
 *     each die within KEEPER_QUICK_S of their start make it give up,
 *     unmount and exit with the last one's status.  It never restarts
 *     on a kernel without FUSE_HAS_RESEND (ops-io.h): there the requests
 *     the dead daemon held would never be answered, so the mount ends
 *     as without a keeper.  On backend=fanotify nothing is resent: the
 *     next daemon answers the events the dead one read by their numbers
 *     (fan.c, saved.h), and a mount that ends denies them first
 *     (fan_keeper_end()).
 * SIGTERM, SIGINT and SIGHUP to the keeper are passed to the daemon,
 * which stops as it does on them itself; the keeper then unmounts.
 *
 * A daemon started so finds the keeper's descriptors in its environment
 * (HSMFS_KEEPER) and takes over (main.c, ops-io.h): it is never started
 * by hand.  If the keeper dies the daemon is killed (PR_SET_PDEATHSIG)
 * and the mount ends, as a daemon's death ended it without a keeper.
 */
#ifndef HSMFS_KEEPER_H
#define HSMFS_KEEPER_H

#include <stdbool.h>

#define KEEPER_HANDOVER 75 /* a daemon's exit status: start the next one now */
#define KEEPER_STOP 6      /* a daemon's exit status: unmount and exit with it,
			    * never restart (its hook refused the mount) */
#define KEEPER_QUICK_S 1

struct fuse_session;

struct keeper_args {
	struct fuse_session *se; /* mounted; the keeper unmounts it at the end (FUSE) */
	bool fanotify;           /* backend=fanotify: the groups, not a session */
	int fuse_fd, lock_fd, saved_fd;
	int notify_fd;           /* backend=fanotify: fuse_fd is the pre-content
				  * group, this the group of changes, or -1 */
	const char *mnt;         /* the mountpoint's real path */
	char **argv;             /* the command line, run again for each daemon */
	bool syslog;             /* daemonized: daemons log to syslog */
	int close_fds[2];        /* the first daemon's alone (readiness), or -1 */
};

/*
 * In the process that mounted: fork the first daemon.  Returns in it;
 * the keeper itself never returns (it exits when the mount ends).
 */
void keeper_start(const struct keeper_args *a);

/*
 * In a daemon the keeper started: its descriptors and mountpoint (false:
 * none).  fuse_fd is /dev/fuse, or on backend=fanotify the pre-content
 * group and notify_fd the group of changes (-1: none).
 */
bool keeper_inherited(int *fuse_fd, int *notify_fd, int *lock_fd, int *saved_fd,
		      const char **mnt, bool *syslog);

#endif
