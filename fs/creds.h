/*
 * creds.h - creating as the caller: a daemon running as root serves
 * several users (allow_other), and what it creates must belong to the
 * caller, as on a local filesystem.
 *
 * creds_as_caller() switches the calling thread's filesystem uid and
 * gid and its supplementary groups to the request's caller (raw
 * syscalls: per thread, where glibc's wrappers change every thread), so
 * that the store's own rules apply as they would to the caller: the
 * set-user-ID and set-group-ID bits it asked for, the group of a
 * set-group-ID parent.  Creating as root and changing the owner
 * afterwards would clear them.  creds_as_daemon() switches back.
 *
 * Only a daemon running as root switches (creds_init()), and not for a
 * caller that is root with group 0: otherwise both calls are no-ops.
 *
 * Threads: the switch is the calling thread's only; every
 * creds_as_caller() that returned 0 is followed, in the same thread and
 * before the thread serves anything else, by creds_as_daemon().  No
 * locks.
 */
#ifndef HSMFS_CREDS_H
#define HSMFS_CREDS_H

#include <stdbool.h>
#include <sys/types.h>

struct fuse_req;

/*
 * Supplementary groups a creation carries.  A caller in more (or whose
 * groups the kernel cannot say) creates with its primary group only.
 */
#define CREDS_GROUPS_MAX 256

/* What creds_as_caller() saved, for creds_as_daemon(). */
struct creds {
	bool switched;                 /* the thread runs as the caller */
	int ngroups;                   /* the daemon's own groups, to restore */
	gid_t groups[CREDS_GROUPS_MAX];
};

/* Once, before the session starts: does the daemon run as root? */
void creds_init(void);

/*
 * Switch this thread to req's caller, saving the daemon's identity in
 * *ret.  0 (switched, or nothing to switch) or -errno (not switched).
 */
int creds_as_caller(struct fuse_req *req, struct creds *ret);

/* Back to the daemon's identity saved in *c (no-op if nothing was switched). */
void creds_as_daemon(struct creds *c);

#endif
