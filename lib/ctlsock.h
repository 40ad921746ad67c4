/*
 * ctlsock.h - the control socket of a backend=fanotify mount: what
 * hsmfsctl asks of the mount's daemon where no extended attribute
 * reaches it (the mount is a bind of the store, so a user.hsmfs.*
 * attribute is the store file's own, not the daemon's).
 *
 * The socket is STATE/ctl.sock (MOUNTPOINT/.hsmfs/ctl.sock through the
 * bind), SOCK_SEQPACKET, in the state directory, which only root can
 * enter: the same reach as the mount (root only).  One request a
 * packet, one reply a packet, in order; a connection asks any number.
 *
 * A request names its file by a descriptor passed with it (SCM_RIGHTS,
 * O_PATH will do): the daemon finds the file itself, and a name
 * changed between the asking and the answer cannot make it another
 * file's.  It asks one user.hsmfs.* attribute, as getxattr(2) or
 * setxattr(2) would on a FUSE mount (hsmfs(8) lists them); the reply
 * is the value's length (a get) or 0, or -errno: -EOPNOTSUPP for what
 * the daemon of a fanotify mount does not do.
 *
 * The client side is pure but for its socket and descriptor calls; it
 * holds no state but one cached connection, under a lock of its own.
 */
#ifndef HSMFS_CTLSOCK_H
#define HSMFS_CTLSOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CTLSOCK_NAME "ctl.sock"
#define CTLSOCK_MAX_NAME 64     /* an attribute's name, its NUL included */
#define CTLSOCK_MAX_VALUE 8192  /* a value, either way */

enum { CTLSOCK_GET = 1, CTLSOCK_SET = 2 };

struct ctlsock_req {
	uint32_t op;              /* CTLSOCK_* */
	uint32_t size;            /* a get: the room for the value (0: its length only) */
	uint32_t value_len;       /* a set: the bytes after this header */
	uint32_t pad;
	char name[CTLSOCK_MAX_NAME];
};

struct ctlsock_rep {
	int64_t res;              /* the value's length (its bytes follow), 0, or -errno */
};

/*
 * The directory holding the control socket of the fanotify mount path
 * is on (its state directory, through the mount), into dir; false if
 * path is on none.  A store's state directory without the socket (its
 * daemon between two, or gone) counts: asking it then is -ENOTCONN,
 * never the store file's own attribute.  Not for a FUSE mount's paths:
 * it looks up names.  follow: path's last component a symlink is
 * followed.
 */
bool ctlsock_find(const char *path, bool follow, char *dir, size_t dirlen);

/*
 * Ask the daemon whose socket is in dir about path: op, name, and for a
 * set the value.  A get's value into buf[0..size).  The reply's res, or
 * -errno of the asking (-ENOTCONN: no daemon listens, or the one
 * asked went without an answer, once asked again).
 */
ssize_t ctlsock_ask(const char *dir, const char *path, bool follow, uint32_t op,
		    const char *name, const void *value, size_t value_len, void *buf,
		    size_t size);

#endif
