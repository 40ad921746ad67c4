/*
 * privs.h - what the kernel does to a file's privileges when it is
 * changed, done by hsmfs where the mount took that job over (FUSE
 * HANDLE_KILLPRIV_V2: the kernel then stops asking for
 * security.capability before every write, one round trip each).
 *
 * A write, truncate, fallocate or copy into a file by a caller without
 * CAP_FSETID drops the set-user-ID bit, and the set-group-ID bit of a
 * group-executable file or of a file whose group the caller is not in
 * (the kernel's setattr_should_drop_suidgid()); a change by anyone
 * drops file capabilities (security.capability).  An access ACL set
 * by a caller outside the file's group, without CAP_FSETID, drops
 * set-group-ID (posix_acl_update_mode()).  CAP_FSETID is taken to be
 * uid 0, the one hsmfs can see in a request; the caller's groups are
 * its primary group and, only when that one does not decide, the
 * supplementary groups the kernel shows of its process.
 *
 * The kernel caches the mode it last saw for attr_timeout and is not
 * told of a change made here: a caller that gets true back from these
 * invalidates the kernel's attributes of the file.
 *
 * No locks; two system calls (fstat, and fchmod or fremovexattr only
 * when there is something to drop).
 */
#ifndef HSMFS_PRIVS_H
#define HSMFS_PRIVS_H

#include <stdbool.h>
#include <sys/stat.h>

struct fuse_req;

/*
 * fd, a descriptor of the store file (any access mode, O_PATH too), is
 * about to be changed by req's caller; always: the kernel marked the
 * change as one that drops them (a truncate's KILL_SUIDGID), whoever the
 * caller is.  True if the file's mode changed.
 */
bool privs_kill(struct fuse_req *req, int fd, bool always);

/*
 * req's caller has just set an access ACL on the store file of fd:
 * set-group-ID dropped as the kernel drops it.  True if the mode changed.
 */
bool privs_acl_set(struct fuse_req *req, int fd);

/*
 * May req's caller write a file of st's owner and mode, by its mode bits
 * (owner, then group, then others; no ACL)?  Root may.
 */
bool privs_may_write(struct fuse_req *req, const struct stat *st);

/* Does the file of fd have anything privs_kill() would drop for someone? */
bool privs_any(int fd);

#endif
