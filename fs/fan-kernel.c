/*
 * fan-kernel.c - the fanotify front end's kernel objects (fan.h): the
 * pre-content group, the daemon's detached clone of the store's mount
 * with its ignore mark, the bind mount users see, and marks by
 * descriptor.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fan-kernel.h"
#include "fault.h"
#include "inode.h"
#include "log.h"
#include "saved.h"
#include "store.h"

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x00001000U
#endif
/* <linux/mount.h>'s, which glibc 2.36's <sys/mount.h> cannot sit beside */
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
struct fan_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

struct fan_kernel K = { .group = -1, .tree = -1, .treedir = -1, .notify = -1 };

#define PROBE_NAME STORE_STATE_DIR "/fanotify-probe"

/* err gets the line, the caller returns res */
#define SAY(res, ...) (snprintf(err, errlen, __VA_ARGS__), (res))

/*
 * Can the store's filesystem raise pre-content events?  A file of the
 * state directory marked and unmarked: EINVAL where the kernel knows no
 * FAN_PRE_ACCESS, EOPNOTSUPP where the filesystem does not allow it.
 */
static int probe_mark(const char *store_path, char *err, size_t errlen)
{
	int fd = openat(K.tree, PROBE_NAME, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
	int res = 0;

	if (fd < 0)
		return SAY(-errno, "cannot make a file in '%s/" STORE_STATE_DIR "'",
			   store_path);
	close(fd);
	if (fanotify_mark(K.group, FAN_MARK_ADD | FAN_MARK_DONT_FOLLOW, FAN_PRE_ACCESS, K.tree,
			  PROBE_NAME)) {
		res = -errno;
		if (res == -EINVAL)
			snprintf(err, errlen, "backend=fanotify needs fanotify pre-content events "
				 "(Linux 6.14 or later)");
		else if (res == -EOPNOTSUPP || res == -ENOTSUP)
			snprintf(err, errlen,
				 "backend=fanotify: the filesystem of '%s' has no pre-content events "
				 "(ext4, xfs and btrfs have)", store_path);
		else
			snprintf(err, errlen, "backend=fanotify: cannot mark a file of '%s': %s",
				 store_path, strerror(-res));
	} else {
		fanotify_mark(K.group, FAN_MARK_REMOVE | FAN_MARK_DONT_FOLLOW, FAN_PRE_ACCESS,
			      K.tree, PROBE_NAME);
	}
	unlinkat(K.tree, PROBE_NAME, 0);
	return res;
}

int fan_setup(const char *store_path, int group, int *ret_root, char *err, size_t errlen)
{
	int res;

	*ret_root = -1;
	K.store = strdup(store_path);
	if (!K.store)
		return SAY(-ENOMEM, "out of memory");
	if (group >= 0) {
		/* the keeper's: its marks and its events waiting stay */
		K.group = group;
		goto clone;
	}
	/*
	 * Unlimited marks and queue: a mark per missing file, and no event
	 * lost to a full queue (a lost one is allowed by the kernel)
	 */
	/*
	 * Events' descriptors read-only: the daemon only looks at them (its
	 * writes go through its clone), and a read-write one cannot be
	 * opened on a read-only mount (the kernel then denies the event)
	 */
	K.group = fanotify_init(FAN_CLASS_PRE_CONTENT | FAN_CLOEXEC | FAN_UNLIMITED_MARKS |
					FAN_UNLIMITED_QUEUE,
				O_RDONLY | O_LARGEFILE | O_CLOEXEC);
	if (K.group < 0) {
		res = -errno;
		if (res == -EPERM)
			return SAY(res, "backend=fanotify needs CAP_SYS_ADMIN (mount it as root)");
		return SAY(res, "backend=fanotify: this kernel has no fanotify pre-content groups: %s",
			   strerror(-res));
	}
clone:
	K.tree = (int)syscall(SYS_open_tree, AT_FDCWD, store_path,
			      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (K.tree < 0) {
		res = -errno;
		snprintf(err, errlen, "backend=fanotify: cannot clone the mount of '%s': %s",
			 store_path, strerror(-res));
		goto fail;
	}
	res = group >= 0 ? 0 : probe_mark(store_path, err, errlen);
	if (res)
		goto fail;
	/* the daemon's own reads and writes, through the clone, raise nothing */
	if (fanotify_mark(K.group, FAN_MARK_ADD | FAN_MARK_MOUNT | FAN_MARK_IGNORE_SURV,
			  FAN_PRE_ACCESS, K.tree, ".")) {
		res = -errno;
		snprintf(err, errlen, "backend=fanotify: cannot exempt the daemon's own view of '%s': %s",
			 store_path, strerror(-res));
		goto fail;
	}
	*ret_root = openat(K.tree, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	K.treedir = openat(K.tree, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*ret_root < 0 || K.treedir < 0) {
		res = -errno;
		snprintf(err, errlen, "backend=fanotify: cannot open '%s': %s", store_path,
			 strerror(-res));
		goto fail;
	}
	return 0;
fail:
	if (*ret_root >= 0)
		close(*ret_root);
	if (K.treedir >= 0)
		close(K.treedir);
	if (K.tree >= 0)
		close(K.tree);
	close(K.group);
	K.tree = K.treedir = K.group = -1;
	return res;
}

static int mount_id(const char *path, uint64_t *ret)
{
	struct statx stx;

	if (statx(AT_FDCWD, path, AT_NO_AUTOMOUNT | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx))
		return -errno;
	if (!(stx.stx_mask & STATX_MNT_ID))
		return -EOPNOTSUPP;
	*ret = stx.stx_mnt_id;
	return 0;
}

int fan_mount(const char *store_path, const char *mnt, bool ro, char *err, size_t errlen)
{
	struct fan_mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY };
	struct statx stx;
	uint64_t below, id;
	int res, fd;

	if ((res = mount_id(mnt, &below)))
		return SAY(res, "cannot look at the mountpoint '%s'", mnt);
	if (!K.mnt && !(K.mnt = strdup(mnt)))
		return SAY(-ENOMEM, "out of memory");
	/*
	 * A bind made detached (as mount --bind makes it: not recursive),
	 * read-only there with ro, its id recorded for the keeper, and only
	 * then put at the mountpoint: whenever this daemon dies, the keeper
	 * knows every bind users may have reached, and ends it (keeper.h)
	 */
	fd = (int)syscall(SYS_open_tree, AT_FDCWD, store_path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (fd < 0)
		return SAY(-errno, "cannot bind '%s' at '%s': %s", store_path, mnt, strerror(errno));
	if (ro && syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof(attr))) {
		res = -errno;
		close(fd);
		return SAY(res, "cannot make '%s' read-only: %s", mnt, strerror(-res));
	}
	if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) || !(stx.stx_mask & STATX_MNT_ID)) {
		res = errno ? -errno : -EOPNOTSUPP;
		close(fd);
		return SAY(res, "cannot find the mount made for '%s'", mnt);
	}
	id = stx.stx_mnt_id;
	__atomic_store_n(&saved_head()->fan_mnt_id, id, __ATOMIC_SEQ_CST);
	fault_named(FAULT_FAN_BIND_RECORDED);
	if (syscall(SYS_move_mount, fd, "", AT_FDCWD, mnt, MOVE_MOUNT_F_EMPTY_PATH)) {
		res = -errno;
		__atomic_store_n(&saved_head()->fan_mnt_id, 0, __ATOMIC_SEQ_CST);
		close(fd);
		return SAY(res, "cannot bind '%s' at '%s': %s", store_path, mnt, strerror(-res));
	}
	close(fd);
	fault_named(FAULT_FAN_BOUND);
	K.mnt_id = id;
	K.bound = true;
	if ((res = mount_id(mnt, &id)) || id != K.mnt_id || id == below) {
		fan_unmount();
		return SAY(res ? res : -EIO, "cannot find the mount made at '%s'", mnt);
	}
	return 0;
}

int fan_watch_changes(int notify, char *err, size_t errlen)
{
	int res;

	/*
	 * File ids, not descriptors: a truncate(2) is reported with no
	 * path, which a group of descriptors never gets.  The keeper's
	 * keeps its marks and the changes queued while no daemon ran.
	 */
	K.notify = notify >= 0 ? notify : fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID | FAN_CLOEXEC | FAN_NONBLOCK |
					 FAN_UNLIMITED_QUEUE | FAN_UNLIMITED_MARKS,
				 O_RDONLY | O_LARGEFILE | O_CLOEXEC);
	if (K.notify < 0)
		return SAY(-errno, "backend=fanotify: cannot watch the changes: %s", strerror(errno));
	/* the daemon's own writes, through its clone, are not the user's */
	if (fanotify_mark(K.notify, FAN_MARK_ADD | FAN_MARK_MOUNT | FAN_MARK_IGNORE_SURV,
			  FAN_CHANGED_MASK, K.tree, ".")) {
		res = -errno;
		close(K.notify);
		K.notify = -1;
		return SAY(res, "backend=fanotify: cannot watch the changes: %s", strerror(-res));
	}
	return 0;
}

int fan_adopt_mount(const char *mnt, char *err, size_t errlen)
{
	int res;

	K.mnt = strdup(mnt);
	if (!K.mnt)
		return SAY(-ENOMEM, "out of memory");
	if ((res = mount_id(mnt, &K.mnt_id)))
		return SAY(res, "cannot look at the mountpoint '%s': %s", mnt, strerror(-res));
	/* unmounted since the keeper looked: not this front end's to serve, or to unmount */
	if (K.mnt_id != saved_head()->fan_mnt_id)
		return SAY(-ENOENT, "the mount at '%s' is gone", mnt);
	K.bound = true;
	return 0;
}

void fan_mountpoint(const char *mnt)
{
	if (!K.mnt)
		K.mnt = strdup(mnt);
}

bool fan_still_mounted(void)
{
	uint64_t id;

	/*
	 * The keeper: the daemon it started binds the store after the
	 * tree's walk (fan_mount()), and says so in the saved region
	 */
	if (!K.bound && K.mnt && saved_head()->fan_mnt_id) {
		K.mnt_id = saved_head()->fan_mnt_id;
		K.bound = true;
	}
	return K.bound && K.mnt && !mount_id(K.mnt, &id) && id == K.mnt_id;
}

void fan_unmount(void)
{
	if (fan_still_mounted() && umount2(K.mnt, MNT_DETACH))
		log_warn("cannot unmount '%s': %s", K.mnt, strerror(errno));
	K.bound = false;
}

int fan_mark_fd(int fd, bool add)
{
	char path[32];

	/* an O_PATH descriptor is reached by its /proc link (inode.h) */
	inode_proc_path(fd, path);
	if (fanotify_mark(K.group, add ? FAN_MARK_ADD : FAN_MARK_REMOVE, FAN_MISSING_MASK,
			  AT_FDCWD, path))
		return -errno;
	atomic_fetch_add(add ? &K.marked : &K.unmarked, 1);
	return 0;
}

int fan_watch_fd(int fd)
{
	char path[32];

	if (K.notify < 0)
		return 0;
	inode_proc_path(fd, path);
	return fanotify_mark(K.notify, FAN_MARK_ADD, FAN_CHANGED_MASK, AT_FDCWD, path) ? -errno : 0;
}
