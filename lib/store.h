/*
 * store.h - the backing directory and hsmfs's private corner of it.
 *
 * STORE/.hsmfs/ holds hsmfs's own state (a lock file now; the metadata
 * database later).  It is created mode 0700 on first mount and is never
 * visible or reachable through the mount: the operations layer refuses
 * the name STORE_STATE_DIR in the root directory.
 *
 * One daemon per store: store_open() takes an exclusive flock(2) on
 * STORE/.hsmfs/lock that lives as long as the returned lock descriptor
 * (inherited across fork, so the daemonized child keeps it).
 */
#ifndef HSMFS_STORE_H
#define HSMFS_STORE_H

#include <stddef.h>
#include <sys/types.h>

#define STORE_STATE_DIR ".hsmfs"
#define STORE_LOCK_FILE "lock"
/*
 * How long store_open() waits for the lock's holder when no mount of
 * the store is left (unmounted: its daemon, and its keeper, still wind
 * down after umount(2) returned) before it says the store is held.
 */
#define STORE_LOCK_WAIT_MS 5000
/*
 * How long it waits for a holder whose mount of the store is still
 * there before it refuses: an unmount may be under way (umount &, then
 * mount at once: xfstests generic/604).
 */
#define STORE_LIVE_WAIT_MS 1000
#define STORE_LOCK_POLL_MS 10

/*
 * Every file that may have missing ranges carries this xattr in the
 * store (value: store_marker()'s), set at import and removed once all
 * its bytes are present.  It is the second source of truth: if the
 * database is lost, the files that carry it are placeholders again,
 * never files of zeros.
 *
 * It must cost no data block: a placeholder that did (ext4 keeps an
 * xattr that does not fit in the inode in a block of its own, counted
 * in st_blocks) would hold a block per file, and a cache of many small
 * files would fill with marks.  So its value is at most
 * STORE_MARKER_MAX bytes, which stay in the inode on ext4 with 256-byte
 * inodes (room for 52 beside its name), xfs and btrfs, and cost nothing
 * on tmpfs.  The database has the file's origin and version; the mark
 * has them only when they fit (see store_marker()).
 */
#define STORE_MARKER_XATTR "user.hsmfs.placeholder"
#define STORE_MARKER_MAX 40

/*
 * The mark's value for a file of origin and version (either NULL):
 * "origin\nversion" when that fits in STORE_MARKER_MAX bytes, else
 * "\nversion", else empty.  A database rebuilt from a mark without an
 * origin fetches the file by its path from the mount's origin; one
 * without a version takes the origin's current one (every byte is
 * fetched again after a rebuild, so versions never mix in a file).
 * buf has STORE_MARKER_MAX + 1 bytes; returns the value's length.
 */
size_t store_marker(char buf[STORE_MARKER_MAX + 1], const char *origin, const char *version);

/*
 * A file's row is keyed by its inode number (meta.h), and the store
 * gives a freed number to its next new file at once (ext4 does).  So a
 * file is kept from being freed until its row is gone: store_hold()
 * before the unlink or the rename over it, store_release() after the
 * row's removal; else a file made in between would find the removed
 * one's row (a placeholder's: it would be filled with another file's
 * bytes, or fail).  An O_PATH descriptor of (dirfd, name), or -1 when
 * nothing is there to hold.  A removal through the mount needs none:
 * the kernel looked the file up, so the daemon pins it (inode.h) until
 * the kernel forgets it, which is after the removal's reply.
 */
int store_hold(int dirfd, const char *name);
void store_release(int fd);

/*
 * Every directory whose names are not listed yet carries this xattr in
 * the store (value: its listing origin), set when it is made and
 * removed once its listing is committed: a lost database makes it
 * unlisted again, never an empty directory.
 */
#define STORE_UNLISTED_XATTR "user.hsmfs.unlisted"

struct store {
	int root_fd;  /* O_PATH|O_DIRECTORY descriptor of STORE */
	int state_fd; /* O_PATH|O_DIRECTORY descriptor of STORE/.hsmfs */
	int lock_fd;  /* STORE/.hsmfs/lock, flock'ed exclusively */
};

/*
 * Open the store directory at path, create STORE/.hsmfs if missing and
 * take the lock.  Returns 0 and fills *ret, or -errno with a one-line
 * reason in err: -EBUSY when another daemon holds the store (its pid in
 * the message when known).  *ret is untouched on failure.
 * A holder with a mount of the store (a fuse mount whose source is
 * path, in its mount table, or ours if that cannot be read) is waited
 * for up to STORE_LIVE_WAIT_MS, then refused; one without (unmounted,
 * exiting, not mounted yet) up to STORE_LOCK_WAIT_MS.
 */
int store_open(const char *path, struct store *ret, char *err, size_t errlen);
/* The same with the lock already held by held_fd (a keeper's, keeper.h). */
int store_open_held(const char *path, int held_fd, struct store *ret, char *err,
		    size_t errlen);

/* Record the serving daemon's pid in the lock file (for messages). */
void store_write_pid(const struct store *s, pid_t pid);

/* Close all descriptors except root_fd, whose ownership the caller took. */
void store_close(struct store *s);

#endif
