/*
 * supervise.h - run the mount's own hook (-o hook=COMMAND) and keep it
 * running.
 *
 * Once the mount is live, COMMAND is run by /bin/sh with the mountpoint
 * as its last argument and in $HSMFS_MOUNTPOINT.  Its standard output
 * and error go to hsmfs's log, a line at a time.  When it exits it is
 * started again after a backoff that doubles from 0.1 s up to 30 s and
 * starts over once a run lasted a minute.  At unmount it gets SIGTERM.
 * One thread does all of this; nothing here touches FUSE.  Each spawn
 * and exit is told to ready.h: the mount is ready once the hook joined.
 *
 * With probe, the first run has HSMFS_PROBE=1 in its environment: the
 * mount is new and its root was never listed, so a hook that cannot
 * serve it (an origin that does not answer, or answers no listing) may
 * say so by printing one line and exiting with HSMFS_HOOK_REFUSED (78)
 * before it joins.  If the mount is not ready yet it then fails: the
 * line is handed to ready.h, the hook is not started again, and
 * refused() is called to end the daemon.  Any other exit, or a refusal
 * once the mount is ready, is restarted as usual.
 */
#ifndef HSMFS_SUPERVISE_H
#define HSMFS_SUPERVISE_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Before mounting: can COMMAND's program be run?  Its first word, as
 * the hook would find it: a path, or a name looked up beside this hsmfs
 * first, then in PATH.  A command whose first word the shell would
 * expand or split (quotes, $, a redirection...) is left to the shell.
 * 0, or -ENOENT / -EACCES with err saying which and how to fix it.
 */
int supervise_check(const char *command, char *err, size_t errlen);
/*
 * Copies its arguments; refused: called once, on the supervising thread,
 * if the hook refused the mount (see above).  0 or -errno.
 */
int supervise_start(const char *command, const char *mountpoint, bool probe,
		    void (*refused)(void));
/* The last line the hook printed, "" if none (for statistics). */
void supervise_last_line(char *buf, size_t size);
void supervise_stop(void);

#endif
