/*
 * ops-xattr.h - what ops-xattr.c (extended attributes, the virtual ones
 * of hsmfsctl included) gives the rest of the daemon.
 *
 * ops_may_archive() is the engine's front.may_archive (front.h): asked
 * from an archiver thread, without S.lock, while req is parked (not
 * answered: sync.c keeps it so).
 */
#ifndef HSMFS_OPS_XATTR_H
#define HSMFS_OPS_XATTR_H

#include <stdbool.h>

struct front_req;
struct inode;

/*
 * May req's caller publish in's bytes at the origin (hsmfsctl archive, a
 * sync by another user)?  Root, the mount's owner, or a caller who may
 * write the file: a daemon running as root asks the kernel as the caller
 * (ACLs and supplementary groups count); a user's own daemon
 * (allow_other) looks at the mode.
 */
bool ops_may_archive(struct front_req *r, struct inode *in);

#endif
