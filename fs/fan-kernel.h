/*
 * fan-kernel.h - the fanotify front end's kernel objects (fan.h says
 * what the front end is): the pre-content group, the daemon's private
 * clone of the store's mount, the bind mount users see, marks; and the
 * definitions of the kernel ABI Debian 12's headers predate (Linux
 * 6.14: pre-content events, ranges, errnos in a denial).
 *
 * K's fields are set once at start-up by one thread, before the reader
 * thread starts, and closed after it ended (fan_stop()).
 */
#ifndef HSMFS_FAN_KERNEL_H
#define HSMFS_FAN_KERNEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/fanotify.h>

#ifndef FAN_PRE_ACCESS
#define FAN_PRE_ACCESS 0x00100000
#endif
#ifndef FAN_EVENT_INFO_TYPE_RANGE
#define FAN_EVENT_INFO_TYPE_RANGE 6
#endif
#ifndef FAN_DENY_ERRNO
#define FAN_ERRNO_SHIFT 24
#define FAN_DENY_ERRNO(err) (FAN_DENY | ((uint32_t)(err) << FAN_ERRNO_SHIFT))
#endif

/* FAN_EVENT_INFO_TYPE_RANGE: the bytes a pre-content event is about. */
struct fan_info_range {
	struct fanotify_event_info_header hdr;
	uint32_t pad;
	uint64_t offset;
	uint64_t count;
};

/* What the front end marks a missing file with. */
#define FAN_MISSING_MASK FAN_PRE_ACCESS
/* What it watches every file of the database for (the notification group). */
#define FAN_CHANGED_MASK (FAN_MODIFY | FAN_CLOSE_WRITE)

struct fan_kernel {
	int group;     /* the FAN_CLASS_PRE_CONTENT group (the keeper holds it too), or -1 */
	int tree;      /* the daemon's detached clone of the store's mount (O_PATH), or -1 */
	int treedir;   /* its root opened to read (open_by_handle_at() takes no O_PATH), or -1 */
	int notify;    /* the notification group of the users' changes (file ids), or -1 */
	char *mnt;     /* the mountpoint (real path): fan_mountpoint(), or the bind */
	bool bound;    /* the bind is this front end's still (fan_unmount()) */
	char *store;   /* the store's real path */
	uint64_t mnt_id; /* its mount's id (statx STATX_MNT_ID) */
	_Atomic uint64_t marked, unmarked;
};

extern struct fan_kernel K;

/*
 * The group and the daemon's private tree, before the inode table:
 * one clear line in err and -errno where the kernel, the privileges or
 * the store's filesystem cannot do it.  group: the keeper's (a daemon
 * taking over: keeper.h), or -1 to make one.  *ret_root: an O_PATH
 * descriptor of the clone's root, for the inode table (the caller owns it).
 */
int fan_setup(const char *store_path, int group, int *ret_root, char *err, size_t errlen);

/*
 * The bind mount of the store at mnt (read-only with ro): 0 or -errno,
 * said in err.  Its order, each step a crash point (fault.h): the bind
 * made detached and its id recorded in the saved region
 * (FAULT_FAN_BIND_RECORDED: the keeper finds nothing at the mountpoint,
 * and the mount fails), then moved to the mountpoint (FAULT_FAN_BOUND:
 * the keeper finds the bind, and the next daemon serves it).
 */
int fan_mount(const char *store_path, const char *mnt, bool ro, char *err, size_t errlen);

/*
 * The notification group that reports the users' changes of the files
 * of the database (FAN_CHANGED_MASK, inode marks: fan_watch_fd()), with
 * file ids; the daemon's own, through its clone, ignored.  Before the
 * marks.  notify: the keeper's, or -1 to make one.  0 or -errno, said
 * in err.
 */
int fan_watch_changes(int notify, char *err, size_t errlen);

/* A daemon taking over: the bind at mnt is the keeper's, and this front end's. */
int fan_adopt_mount(const char *mnt, char *err, size_t errlen);

/* The mountpoint given back (lazily), if it is still this front end's. */
void fan_unmount(void);

/* Mark or unmark the file open as fd (O_PATH will do): 0 or -errno. */
int fan_mark_fd(int fd, bool add);

/* Watch the file open as fd for the users' changes: 0 or -errno. */
int fan_watch_fd(int fd);

/*
 * The mountpoint, before the keeper starts (keeper.h): the daemon binds
 * the store there later (fan_mount()), and the keeper finds that bind by
 * the id the daemon records (saved.h), to see it go or to end it.
 */
void fan_mountpoint(const char *mnt);

/* Is the mountpoint still the bind mount this front end made (or, in
 * the keeper, its daemon)? */
bool fan_still_mounted(void);

#endif
