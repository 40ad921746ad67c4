/* hooks.c - see hooks.h */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "hooks.h"
#include "log.h"
#include "ready.h"

#define SOCKET_NAME "hook.sock"

static struct {
	int listen_fd;
	int state_fd;              /* borrowed: STORE/.hsmfs */
	pthread_t acceptor;
	bool running;
	char path[4200];           /* for user.hsmfs.socket */
	uint32_t chunk, timeout_ms;
	uint32_t unsupported;      /* events no hook may subscribe to (hooks_refuse()) */
	struct hooks_handlers on;  /* where frames go (hooks_start) */
	pthread_mutex_t lock;      /* guards nconn, conns and each one's stats */
	pthread_cond_t gone;       /* a connection thread finished */
	unsigned nconn;
	struct hook *conns[HOOKS_MAX]; /* live connections, for hooks_stop() */
} H = { .listen_fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER,
	.gone = PTHREAD_COND_INITIALIZER };

void hooks_refuse(uint32_t mask)
{
	H.unsupported = mask;
}

const char *hooks_socket_path(void)
{
	return H.path;
}

static int send_frame(int fd, const uint8_t *buf, int len, int pass_fd)
{
	struct iovec iov = { (void *)buf, (size_t)len };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} c;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (pass_fd >= 0) {
		memset(&c, 0, sizeof(c));
		msg.msg_control = c.b;
		msg.msg_controllen = sizeof(c.b);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
	}
	if (sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

int hooks_send_event(struct hook *h, const struct proto_event *ev, int fd)
{
	uint8_t buf[HSMFS_MAX_FRAME];
	int n = proto_enc_event(buf, ev);

	if (n < 0)
		return n;
	return send_frame(h->fd, buf, n, fd);
}

int hooks_send_welcome(struct hook *h, const uint8_t *frame, int len)
{
	return send_frame(h->fd, frame, len, -1);
}

void hooks_send_cancel(struct hook *h, uint64_t id, uint32_t reason)
{
	uint8_t buf[64];
	struct proto_cancel c = { id, reason };
	int n = proto_enc_cancel(buf, &c);

	if (n > 0)
		send_frame(h->fd, buf, n, -1);
}

/* Tell the peer why, log once, and let the caller close. */
static void refuse(int fd, const char *who, uint32_t code, const char *why)
{
	uint8_t buf[512];
	struct proto_error e = { code, { why, (uint16_t)strlen(why) } };
	int n = proto_enc_error(buf, &e);

	if (n > 0)
		send_frame(fd, buf, n, -1);
	log_warn("hook %s: %s; connection closed", who, why);
}

static void copy_str(char *dst, size_t size, struct proto_str s)
{
	size_t n = s.len < size - 1 ? s.len : size - 1;

	if (n)
		memcpy(dst, s.p, n);
	dst[n] = '\0';
}

/* A hook name: printable, so that it cannot forge log or status lines. */
static bool valid_name(struct proto_str s, size_t max)
{
	if (s.len > max)
		return false;
	for (size_t i = 0; i < s.len; i++)
		if ((unsigned char)s.p[i] < 0x20 || s.p[i] == 0x7f)
			return false;
	return true;
}

/*
 * The subtree of a HELLO in the form paths are matched in: relative to
 * the mount root, no leading, trailing or doubled '/' ("/a/b/", "a//b"
 * and "a/b" are one subtree; "/" and "" the whole mount).  A component
 * "." or "..", a NUL or a control character is refused: -EINVAL.
 */
static int norm_subtree(struct proto_str in, char *out, size_t size)
{
	size_t n = 0, i = 0;

	if (in.len >= size)
		return -EINVAL;
	while (i < in.len) {
		size_t j;

		while (i < in.len && in.p[i] == '/')
			i++;
		for (j = i; j < in.len && in.p[j] != '/'; j++)
			if ((unsigned char)in.p[j] < 0x20)
				return -EINVAL;
		if (j == i)
			break;
		if ((j - i == 1 && in.p[i] == '.') ||
		    (j - i == 2 && in.p[i] == '.' && in.p[i + 1] == '.'))
			return -EINVAL;
		if (n)
			out[n++] = '/';
		memcpy(out + n, in.p + i, j - i);
		n += j - i;
		i = j;
	}
	out[n] = '\0';
	return 0;
}

/*
 * Are the n bytes at p counters as STATS carries them: lines of
 * name{labels} number, a name of [a-z_][a-z0-9_]*, no control bytes?
 */
static bool stats_ok(const char *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		size_t start = i, sp = 0;

		if (!(p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z')))
			return false;
		while (i < n && (p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z') ||
				 (p[i] >= '0' && p[i] <= '9')))
			i++;
		for (; i < n && p[i] != '\n'; i++) {
			if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
				return false;
			if (p[i] == ' ')
				sp = i;
		}
		if (!sp || sp + 1 >= i || i - start > 1024)
			return false; /* no number after the last space */
		for (size_t k = sp + 1; k < i; k++)
			if (!((p[k] >= '0' && p[k] <= '9') || p[k] == '-' || p[k] == '.' || p[k] == 'e'))
				return false;
		i++; /* the newline */
	}
	return true;
}

/* A hook's STATS: kept, replacing the last. */
static void keep_stats(struct hook *h, const struct proto_stats *m)
{
	char *s = strndup(m->counters.p, m->counters.len), *old;

	if (!s)
		return; /* no memory: the last ones stay */
	pthread_mutex_lock(&H.lock);
	old = h->stats;
	h->stats = s;
	pthread_mutex_unlock(&H.lock);
	free(old);
}

ssize_t hooks_stats(char *out, size_t cap)
{
	size_t len = 0;

	pthread_mutex_lock(&H.lock);
	for (unsigned i = 0; i < HOOKS_MAX; i++) {
		const struct hook *h = H.conns[i];

		for (const char *l = h ? h->stats : NULL; l && *l;) {
			size_t n = strcspn(l, "\n");

			len += snprintf(out && len < cap ? out + len : NULL,
					out && len < cap ? cap - len : 0,
					"%s\t%d\t%.*s\n", h->name, (int)h->pid, (int)n, l);
			l += n + (l[n] == '\n');
		}
	}
	pthread_mutex_unlock(&H.lock);
	return out && len >= cap ? -ERANGE : (ssize_t)len;
}

static void *conn_main(void *arg)
{
	struct hook *h = arg;
	uint8_t *buf = malloc(HSMFS_MAX_FRAME + 1);
	char who[HSMFS_MAX_NAME + 32];
	bool joined = false;

	snprintf(who, sizeof(who), "pid %d", (int)h->pid);
	while (buf) {
		struct proto_hello hello;
		uint32_t version;
		struct proto_answer ans;
		struct proto_progress prog;
		struct proto_filled filled;
		struct proto_archived archived;
		struct proto_stats stats;
		uint16_t type;
		ssize_t n = recv(h->fd, buf, HSMFS_MAX_FRAME + 1, MSG_TRUNC);

		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (!joined && (errno == EAGAIN || errno == EWOULDBLOCK))
				refuse(h->fd, who, HSMFS_ERR_STATE, "no HELLO in time");
			break;
		}
		if (n > HSMFS_MAX_FRAME) {
			refuse(h->fd, who, HSMFS_ERR_MALFORMED, "frame over the maximum size");
			break;
		}
		if (proto_peek(buf, n, &type)) {
			refuse(h->fd, who, HSMFS_ERR_MALFORMED, "frame length does not match the packet");
			break;
		}
		if (!joined) {
			if (type != HSMFS_MSG_HELLO) {
				refuse(h->fd, who, HSMFS_ERR_STATE, "first frame must be HELLO");
				break;
			}
			if (proto_dec_hello(buf, n, &hello)) {
				refuse(h->fd, who, HSMFS_ERR_MALFORMED, "malformed HELLO");
				break;
			}
			/* the highest version both speak; version 1 is the oldest */
			version = hello.version_max < HSMFS_PROTO_VERSION ?
					  hello.version_max : HSMFS_PROTO_VERSION;
			if (hello.version_min > HSMFS_PROTO_VERSION || version < 1) {
				refuse(h->fd, who, HSMFS_ERR_VERSION, "no common protocol version");
				break;
			}
			if ((hello.kind != HSMFS_KIND_FILL && hello.kind != HSMFS_KIND_WATCH) ||
			    !valid_name(hello.name, HSMFS_MAX_NAME) ||
			    norm_subtree(hello.subtree, h->subtree, sizeof(h->subtree))) {
				refuse(h->fd, who, HSMFS_ERR_MALFORMED, "bad kind, name or subtree in HELLO");
				break;
			}
			if (hello.mask & H.unsupported) {
				refuse(h->fd, who, HSMFS_ERR_UNSUPPORTED,
				       "this mount cannot raise an event of the mask");
				break;
			}
			h->kind = hello.kind;
			h->version = version;
			h->mask = hello.mask & (version >= 6 ? HSMFS_MASK_V6 :
						version >= 4 ? HSMFS_MASK_V4 :
						version >= 3 ? HSMFS_MASK_V3 :
						version >= 2 ? HSMFS_MASK_V2 : HSMFS_MASK_ALL);
			copy_str(h->name, sizeof(h->name), hello.name);
			snprintf(who, sizeof(who), "'%s' (pid %d)", h->name, (int)h->pid);

			struct proto_welcome w = { version, HSMFS_MAX_FRAME,
						   H.chunk, H.timeout_ms };
			int wn = proto_enc_welcome(buf, &w);

			/* joined: it may stay silent as long as it likes */
			setsockopt(h->fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 0, 0 },
				   sizeof(struct timeval));
			/*
			 * WELCOME goes out as the hook joins, under the engine's
			 * lock: once the hook has it, no change or read goes
			 * unasked.
			 */
			if (H.on.joined(h, buf, wn))
				break;
			joined = true;
			ready_hook_joined(h->pid);
			continue;
		}
		switch (type) {
		case HSMFS_MSG_ANSWER:
			if (proto_dec_answer(buf, n, &ans)) {
				refuse(h->fd, who, HSMFS_ERR_MALFORMED, "malformed ANSWER");
				goto out;
			}
			H.on.answer(h, &ans);
			break;
		case HSMFS_MSG_PROGRESS:
			if (proto_dec_progress(buf, n, &prog)) {
				refuse(h->fd, who, HSMFS_ERR_MALFORMED, "malformed PROGRESS");
				goto out;
			}
			H.on.progress(h, &prog);
			break;
		case HSMFS_MSG_FILLED:
			if (h->version < 5)
				goto unknown; /* a hook of an older version does not send it */
			if (proto_dec_filled(buf, n, &filled)) {
				refuse(h->fd, who, HSMFS_ERR_MALFORMED, "malformed FILLED");
				goto out;
			}
			H.on.filled(h, &filled);
			break;
		case HSMFS_MSG_ARCHIVED:
			if (h->version < 6 || !H.on.archived)
				goto unknown;
			if (proto_dec_archived(buf, n, &archived)) {
				refuse(h->fd, who, HSMFS_ERR_MALFORMED, "malformed ARCHIVED");
				goto out;
			}
			H.on.archived(h, &archived);
			break;
		case HSMFS_MSG_STATS:
			if (h->version < 7)
				goto unknown;
			if (proto_dec_stats(buf, n, &stats) ||
			    !stats_ok(stats.counters.p, stats.counters.len)) {
				refuse(h->fd, who, HSMFS_ERR_MALFORMED, "malformed STATS");
				goto out;
			}
			keep_stats(h, &stats);
			break;
		case HSMFS_MSG_HELLO:
			refuse(h->fd, who, HSMFS_ERR_STATE, "HELLO sent twice");
			goto out;
		default:
unknown:
			refuse(h->fd, who, HSMFS_ERR_UNKNOWN, "unknown or unexpected message type");
			goto out;
		}
	}
out:
	if (joined)
		H.on.left(h);
	pthread_mutex_lock(&H.lock);
	for (unsigned i = 0; i < HOOKS_MAX; i++)
		if (H.conns[i] == h)
			H.conns[i] = NULL;
	close(h->fd);
	free(h->stats);
	free(h);
	free(buf);
	H.nconn--;
	pthread_cond_broadcast(&H.gone);
	pthread_mutex_unlock(&H.lock);
	return NULL;
}

static void *accept_main(void *arg)
{
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		pthread_attr_t attr;
		pthread_t t;
		struct hook *h;
		int fd = accept4(H.listen_fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
			    errno == ENFILE)
				continue;
			break; /* shut down */
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
		    (cred.uid != 0 && cred.uid != geteuid())) {
			char who[64];

			snprintf(who, sizeof(who), "pid %d uid %u", (int)cred.pid,
				 (unsigned)cred.uid);
			refuse(fd, who, HSMFS_ERR_DENIED,
			       "only the mount's owner and root may connect");
			close(fd);
			continue;
		}
		pthread_mutex_lock(&H.lock);
		if (H.nconn >= HOOKS_MAX) {
			pthread_mutex_unlock(&H.lock);
			refuse(fd, "(over the limit)", HSMFS_ERR_STATE, "too many hook connections");
			close(fd);
			continue;
		}
		H.nconn++;
		pthread_mutex_unlock(&H.lock);
		h = calloc(1, sizeof(*h));
		if (!h) {
			close(fd);
			pthread_mutex_lock(&H.lock);
			H.nconn--;
			pthread_mutex_unlock(&H.lock);
			continue;
		}
		/* a connection that says nothing must not hold a place for long */
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO,
			   &(struct timeval){ HOOKS_HELLO_TIMEOUT, 0 }, sizeof(struct timeval));
		h->fd = fd;
		h->pid = cred.pid;
		h->uid = cred.uid;
		pthread_mutex_lock(&H.lock);
		for (unsigned i = 0; i < HOOKS_MAX; i++)
			if (!H.conns[i]) {
				H.conns[i] = h;
				break;
			}
		pthread_mutex_unlock(&H.lock);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 256 * 1024);
		if (pthread_create(&t, &attr, conn_main, h)) {
			pthread_mutex_lock(&H.lock);
			for (unsigned i = 0; i < HOOKS_MAX; i++)
				if (H.conns[i] == h)
					H.conns[i] = NULL;
			H.nconn--;
			pthread_mutex_unlock(&H.lock);
			close(fd);
			free(h);
		}
		pthread_attr_destroy(&attr);
	}
	return NULL;
}

int hooks_start(int state_fd, const char *state_path, uint32_t chunk,
		uint32_t timeout_ms, const struct hooks_handlers *on)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int fd, res;

	H.on = *on;
	H.chunk = chunk;
	H.timeout_ms = timeout_ms;
	snprintf(H.path, sizeof(H.path), "%s/%s", state_path, SOCKET_NAME);
	/* through /proc so that the store's path length does not matter */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s",
		 state_fd, SOCKET_NAME);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlinkat(state_fd, SOCKET_NAME, 0); /* left by a crashed daemon; we hold the lock */
	old = umask(0077);
	res = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (res < 0 || listen(fd, 64) < 0) {
		res = -errno;
		close(fd);
		return res;
	}
	H.listen_fd = fd;
	H.state_fd = state_fd;
	if (pthread_create(&H.acceptor, NULL, accept_main, NULL)) {
		close(fd);
		H.listen_fd = -1;
		return -EAGAIN;
	}
	H.running = true;
	return 0;
}

void hooks_stop(void)
{
	if (!H.running)
		return;
	shutdown(H.listen_fd, SHUT_RDWR);
	pthread_join(H.acceptor, NULL);
	/* end every connection and wait for its thread: none may outlive us */
	pthread_mutex_lock(&H.lock);
	for (unsigned i = 0; i < HOOKS_MAX; i++)
		if (H.conns[i])
			shutdown(H.conns[i]->fd, SHUT_RDWR);
	while (H.nconn)
		pthread_cond_wait(&H.gone, &H.lock);
	pthread_mutex_unlock(&H.lock);
	close(H.listen_fd);
	unlinkat(H.state_fd, SOCKET_NAME, 0);
	H.listen_fd = -1;
	H.running = false;
}
