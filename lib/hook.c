/* hook.c - the hook client library; see include/hsmfs/hook.h */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "hsmfs/hook.h"
#include "proto.h"

struct hsmfs_hook {
	int fd;
	/* what it connected with, to connect again (hsmfs_hook_next()) */
	char *mountpoint, *name, *subtree;
	uint32_t kind, mask;
	int64_t dialed_ms;   /* when this connection was made (CLOCK_MONOTONIC) */
	unsigned quick;      /* connections in a row that lasted under QUICK_MS */
	struct proto_welcome welcome;
	uint16_t last_flags; /* of the last EVENT hsmfs_hook_next() returned */
	uint64_t fan_mnt;    /* a fanotify mount's id (its socket is a file of it), 0: none */
	uint8_t buf[HSMFS_MAX_FRAME + 1];
};

static int send_buf(struct hsmfs_hook *h, const uint8_t *buf, int n)
{
	if (n < 0)
		return n;
	return send(h->fd, buf, n, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* recv one frame, and at most one passed descriptor. */
static ssize_t recv_frame(struct hsmfs_hook *h, int *ret_fd)
{
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(sizeof(int) * 4)];
	} cb;
	struct iovec iov = { h->buf, sizeof(h->buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = cb.b, .msg_controllen = sizeof(cb.b) };
	struct cmsghdr *cm;
	ssize_t n;

	*ret_fd = -1;
	do
		n = recvmsg(h->fd, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int fds[4];

			memcpy(fds, CMSG_DATA(cm), nfd * sizeof(int));
			for (int i = 0; i < nfd; i++) {
				if (*ret_fd < 0)
					*ret_fd = fds[i];
				else
					close(fds[i]);
			}
		}
	}
	if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		if (*ret_fd >= 0)
			close(*ret_fd);
		*ret_fd = -1;
		return -EBADMSG;
	}
	return n;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x00001000U
#endif

/* The id of the mount at path (statx), 0 if none can be told. */
static uint64_t mount_id(const char *path)
{
	struct statx stx;

	if (statx(AT_FDCWD, path, AT_NO_AUTOMOUNT, STATX_MNT_ID, &stx) ||
	    !(stx.stx_mask & STATX_MNT_ID))
		return 0;
	return stx.stx_mnt_id;
}

/* Connect h to its mount and be welcomed: h->fd and h->welcome set, or -errno. */
static int dial(struct hsmfs_hook *h)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[4300], *dir, dcopy[4300];
	ssize_t n;
	int dfd = -1, res, pfd;

	n = getxattr(h->mountpoint, "user.hsmfs.socket", path, sizeof(path) - 1);
	if (n >= 0) {
		path[n] = '\0';
	} else if (errno == ENODATA || errno == ENOTSUP) {
		struct stat st;

		/*
		 * A fanotify mount is the store itself, bound (hsmfs(8)
		 * BACKENDS): its state directory holds the socket
		 */
		uint64_t id = mount_id(h->mountpoint);

		n = snprintf(path, sizeof(path), "%s/.hsmfs/hook.sock", h->mountpoint);
		if ((size_t)n >= sizeof(path) || stat(path, &st) || !S_ISSOCK(st.st_mode))
			return -ENOTCONN;
		/* connected again only to the same mount */
		if (h->fan_mnt && id != h->fan_mnt)
			return -ESTALE;
		h->fan_mnt = id;
	} else {
		return -errno;
	}
	if ((size_t)n < sizeof(sa.sun_path)) {
		memcpy(sa.sun_path, path, n + 1);
	} else {
		/* long store paths: reach the socket through its directory */
		snprintf(dcopy, sizeof(dcopy), "%s", path);
		dir = dirname(dcopy);
		dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0)
			return -errno;
		snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s",
			 dfd, strrchr(path, '/') + 1);
	}
	h->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	res = h->fd < 0 || connect(h->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ?
		      -errno : 0;
	if (dfd >= 0)
		close(dfd);
	if (res)
		goto fail;
	struct proto_hello hello = {
		1, HSMFS_PROTO_VERSION, h->kind, h->mask,
		{ h->name, (uint16_t)strlen(h->name) },
		{ h->subtree, (uint16_t)strlen(h->subtree) },
	};
	res = send_buf(h, h->buf, proto_enc_hello(h->buf, &hello));
	if (res)
		goto fail;
	n = recv_frame(h, &pfd);
	if (pfd >= 0)
		close(pfd);
	if (n < 0) {
		res = n;
		goto fail;
	}
	if (proto_dec_welcome(h->buf, n, &h->welcome)) {
		res = -EPROTO; /* an ERROR frame, or garbage */
		goto fail;
	}
	h->dialed_ms = mono_ms();
	return 0;
fail:
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
	return res;
}

int hsmfs_hook_connect(const char *mountpoint, uint32_t kind, uint32_t mask,
		       const char *name, const char *subtree,
		       struct hsmfs_hook **ret)
{
	struct hsmfs_hook *h = calloc(1, sizeof(*h));
	int res;

	if (!h)
		return -ENOMEM;
	h->fd = -1;
	h->kind = kind;
	h->mask = mask;
	h->mountpoint = strdup(mountpoint);
	h->name = strdup(name ? name : "");
	h->subtree = strdup(subtree ? subtree : "");
	if (!h->mountpoint || !h->name || !h->subtree) {
		hsmfs_hook_close(h);
		return -ENOMEM;
	}
	res = dial(h);
	if (res) {
		hsmfs_hook_close(h);
		return res;
	}
	*ret = h;
	return 0;
}

/*
 * The daemon closed the connection: it was unmounted, or it died and
 * its keeper started another (hsmfs(8), RESTARTS).  Connect again, at
 * the same descriptor number (a caller may poll it): the socket's name
 * is asked of the mount, which waits for the new daemon; an unmounted
 * mount has none.  A fanotify mount waits for nothing: its socket is
 * tried again while the same mount is there, FAN_WAIT_MS at most.
 * Daemons that die within a second of their start are followed as the keeper follows them: QUICK_MAX such connections in a
 * row, and the next one is not made (the keeper gives up after as many;
 * a daemon that closes on every hook at once is not asked for ever).
 * 0, or -ECONNRESET.
 */
#define QUICK_MS 1000
#define QUICK_MAX 5

#define FAN_WAIT_MS 30000

/*
 * A fanotify mount's socket is a file of its store, which no request
 * waits on: refused until the next daemon listens there, or accepted by
 * a dying one and then closed.  The mountpoint's mount, still the one
 * first connected to, says the mount is still there.
 */
static bool may_wait(const struct hsmfs_hook *h, int res)
{
	if (res != -ECONNREFUSED && res != -ENOTCONN && res != -ENOENT && res != -ECONNRESET &&
	    res != -EPIPE)
		return false;
	return h->fan_mnt && mount_id(h->mountpoint) == h->fan_mnt;
}

static int redial(struct hsmfs_hook *h)
{
	struct hsmfs_hook t;
	int64_t until = mono_ms() + FAN_WAIT_MS;
	int res;

	if (mono_ms() - h->dialed_ms >= QUICK_MS)
		h->quick = 0;
	else if (++h->quick > QUICK_MAX)
		return -ECONNRESET;
	for (unsigned ms = 10;; ms = ms < 200 ? ms * 2 : 200) {
		t = *h;
		res = dial(&t);
		if (!res)
			break;
		if (!may_wait(h, res) || mono_ms() >= until)
			return -ECONNRESET;
		usleep(ms * 1000);
	}
	if (dup3(t.fd, h->fd, O_CLOEXEC) < 0) {
		close(t.fd);
		return -ECONNRESET;
	}
	close(t.fd);
	h->welcome = t.welcome;
	h->dialed_ms = t.dialed_ms;
	return 0;
}

static void copy_str(char *dst, size_t size, struct proto_str s)
{
	size_t n = s.len < size - 1 ? s.len : size - 1;

	if (n)
		memcpy(dst, s.p, n);
	dst[n] = '\0';
}

int hsmfs_hook_next(struct hsmfs_hook *h, struct hsmfs_event *ev)
{
	for (;;) {
		struct proto_event pe;
		struct proto_cancel pc;
		uint16_t type;
		int fd;
		ssize_t n = recv_frame(h, &fd);

		if (n == -ECONNRESET && !redial(h))
			continue;
		if (n < 0)
			return n;
		if (proto_peek(h->buf, n, &type)) {
			if (fd >= 0)
				close(fd);
			return -EBADMSG;
		}
		if (type == HSMFS_MSG_EVENT && !proto_dec_event(h->buf, n, &pe)) {
			memset(ev, 0, offsetof(struct hsmfs_event, path));
			ev->id = pe.id;
			ev->type = pe.type;
			ev->pid = pe.pid;
			ev->uid = pe.uid;
			ev->gid = pe.gid;
			ev->file_id = pe.file_id;
			ev->file_size = pe.file_size;
			ev->start = pe.start;
			ev->end = pe.end;
			ev->hint_start = pe.hint_start;
			ev->hint_end = pe.hint_end;
			copy_str(ev->path, sizeof(ev->path), pe.path);
			copy_str(ev->origin, sizeof(ev->origin), pe.origin);
			copy_str(ev->version, sizeof(ev->version), pe.version);
			ev->fd = fd;
			h->last_flags = pe.flags;
			return 0;
		}
		if (fd >= 0)
			close(fd);
		if (type == HSMFS_MSG_CANCEL && !proto_dec_cancel(h->buf, n, &pc)) {
			memset(ev, 0, sizeof(*ev));
			ev->id = pc.id;
			ev->type = HSMFS_EV_CANCEL;
			ev->fd = -1;
			return 0;
		}
		if (type == HSMFS_MSG_ERROR)
			return -EPROTO;
		return -EBADMSG;
	}
}

int hsmfs_hook_allow(struct hsmfs_hook *h, uint64_t id, uint64_t filled_start,
		     uint64_t filled_end, uint16_t flags)
{
	struct proto_answer a = { id, HSMFS_ALLOW, 0, filled_start, filled_end, flags };
	uint8_t buf[64];

	return send_buf(h, buf, proto_enc_answer(buf, &a));
}

int hsmfs_hook_deny(struct hsmfs_hook *h, uint64_t id, int err)
{
	struct proto_answer a = { id, HSMFS_DENY, (uint32_t)err, 0, 0, 0 };
	uint8_t buf[64];

	return send_buf(h, buf, proto_enc_answer(buf, &a));
}

int hsmfs_hook_progress(struct hsmfs_hook *h, uint64_t id, uint64_t bytes_done)
{
	struct proto_progress p = { id, bytes_done };
	uint8_t buf[64];

	return send_buf(h, buf, proto_enc_progress(buf, &p));
}

int hsmfs_hook_filled(struct hsmfs_hook *h, uint64_t id, uint64_t filled_start,
		      uint64_t filled_end)
{
	struct proto_filled f = { id, filled_start, filled_end };
	uint8_t buf[64];

	if (h->welcome.version < 5)
		return -EOPNOTSUPP; /* the mount would close the connection */
	return send_buf(h, buf, proto_enc_filled(buf, &f));
}

int hsmfs_hook_archived(struct hsmfs_hook *h, uint64_t id, const char *version,
			const char *origin)
{
	struct proto_archived a = { id, { version, (uint16_t)strlen(version) },
				    { origin ? origin : "", (uint16_t)(origin ? strlen(origin) : 0) } };
	uint8_t *buf;
	int res;

	if (h->welcome.version < 6)
		return -EOPNOTSUPP;
	if (strlen(version) > HSMFS_MAX_PATH || (origin && strlen(origin) > HSMFS_MAX_PATH))
		return -EMSGSIZE;
	buf = malloc(HSMFS_MAX_FRAME);
	if (!buf)
		return -ENOMEM;
	res = proto_enc_archived(buf, &a);
	res = res < 0 ? res : send_buf(h, buf, res);
	free(buf);
	return res;
}

int hsmfs_hook_stats(struct hsmfs_hook *h, const char *counters)
{
	size_t n = strlen(counters);
	struct proto_stats m = { { counters, (uint16_t)n } };
	uint8_t *buf;
	int res;

	if (h->welcome.version < 7)
		return -EOPNOTSUPP;
	if (n > HSMFS_MAX_STATS)
		return -EMSGSIZE;
	buf = malloc(HSMFS_MAX_FRAME);
	if (!buf)
		return -ENOMEM;
	res = proto_enc_stats(buf, &m);
	res = res < 0 ? res : send_buf(h, buf, res);
	free(buf);
	return res;
}

uint16_t hsmfs_hook_event_flags(const struct hsmfs_hook *h)
{
	return h->last_flags;
}

int hsmfs_hook_fd(const struct hsmfs_hook *h)
{
	return h->fd;
}

uint32_t hsmfs_hook_timeout_ms(const struct hsmfs_hook *h)
{
	return h->welcome.timeout_ms;
}

uint32_t hsmfs_hook_chunk(const struct hsmfs_hook *h)
{
	return h->welcome.chunk;
}

void hsmfs_hook_close(struct hsmfs_hook *h)
{
	if (!h)
		return;
	if (h->fd >= 0)
		close(h->fd);
	free(h->mountpoint);
	free(h->name);
	free(h->subtree);
	free(h);
}
