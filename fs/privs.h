/*
 * privs.h - what the kernel does to a file's privileges when it is
 * changed, done by hsmfs where the mount took that job over (FUSE
 * HANDLE_KILLPRIV_V2: the kernel then stops asking for
 * security.capability before every write, one round trip each).
 *
 * A write or truncate by a caller without CAP_FSETID drops the
 * set-user-ID bit, and the set-group-ID bit of a group-executable file
 * (or of a file whose group the writer is not in); a change by anyone
 * drops file capabilities (security.capability).  CAP_FSETID is taken to
 * be uid 0, the one hsmfs can see in a request.
 *
 * No locks; two system calls (fstat, and fchmod or fremovexattr only
 * when there is something to drop).
 */
#ifndef HSMFS_PRIVS_H
#define HSMFS_PRIVS_H

#include <stdbool.h>

struct fuse_ctx;

/*
 * fd, a descriptor of the store file (any access mode), is about to be
 * changed by ctx's caller; always: the kernel marked the change as one
 * that drops them (a truncate's KILL_SUIDGID), whoever the caller is.
 */
void privs_kill(const struct fuse_ctx *ctx, int fd, bool always);

/* Does the file of fd have anything privs_kill() would drop for someone? */
bool privs_any(int fd);

#endif
