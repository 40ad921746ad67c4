/*
 * fdlimit.h - the daemon's descriptors against RLIMIT_NOFILE.
 *
 * At start-up the soft limit is raised to the hard one (fdlimit_raise()):
 * 1024, the usual soft default, is a limit of select(2) programs, not of
 * a daemon that holds a descriptor per open of its users.  The hooks
 * the daemon starts get the soft limit it was started with back
 * (fdlimit_child()), as systemd advises for programs that raise theirs.
 *
 * What the daemon holds is bounded by what its users hold open plus a
 * constant (inode.h: the idle cache and pinned descriptors); where it
 * still meets EMFILE or ENFILE it counts it (fdlimit_note()) and either
 * fails the user's call with it or waits for a descriptor (writeback.h):
 * it never drops an acknowledged write.
 *
 * Base layer: no locks but one atomic counter.
 */
#ifndef HSMFS_FDLIMIT_H
#define HSMFS_FDLIMIT_H

#include <stdint.h>

/*
 * Raise the soft RLIMIT_NOFILE to the hard limit; remember the soft
 * limit it had for fdlimit_child(), and put it in the environment
 * (FDLIMIT_ENV), where a daemon a keeper starts (keeper.h: it inherits
 * the raised limit) finds the one the first daemon was given.  Before
 * any thread starts (setenv).  0, or -errno (the limit stays).
 */
#define FDLIMIT_ENV "HSMFS_NOFILE_SOFT"

int fdlimit_raise(void);

/*
 * In a child between fork and exec: put back the soft limit the daemon
 * was started with.  Async-signal-safe.
 */
void fdlimit_child(void);

/* err (a -errno) is -EMFILE or -ENFILE: counted; returns err. */
int fdlimit_note(int err);

/*
 * Statistics: descriptors open now (a read of /proc/self/fd), the soft
 * limit, and the EMFILE/ENFILE met since start.
 */
void fdlimit_stats(uint64_t *ret_fds, uint64_t *ret_limit, uint64_t *ret_exhausted);

#endif
