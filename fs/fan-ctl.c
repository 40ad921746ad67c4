/* fan-ctl.c - see fan-ctl.h */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctlsock.h"
#include "events.h"
#include "fan-ctl.h"
#include "fan.h"
#include "fault.h"
#include "inode.h"
#include "log.h"
#include "saved.h"
#include "stats.h"

#define CTL_CLIENTS 16
#define PREFIX "user.hsmfs."

static struct {
	int listen_fd, state_fd;
	int wake[2];
	bool handover;    /* hsmfsctl restart answered: hand over (ctl thread only) */
	pthread_t thread;
	bool running;
} C = { .listen_fd = -1, .state_fd = -1, .wake = { -1, -1 } };

/* user.hsmfs.stats: the engine's figures (this front end has none of its own). */
static ssize_t stats_get(char *buf, size_t size)
{
	struct stats_snapshot s;

	events_stats_snapshot(&s);
	return events_stats_value(&s, buf, size);
}

/* user.hsmfs.evict: value empty for the whole file, or "START-END" in bytes. */
static int evict(struct inode *in, const char *value, size_t size)
{
	unsigned long long a = 0, b = 0;
	char v[64];

	snprintf(v, sizeof(v), "%.*s", (int)(size < 63 ? size : 63), value);
	if (size && sscanf(v, "%llu-%llu", &a, &b) != 2)
		return -EINVAL;
	/* open or not, the lease tells (fan.c): an open file is not evicted */
	return events_evict(in, a, b, false);
}

/*
 * user.hsmfs.restart of the root: "ok", then the daemon hands over to
 * the hsmfs binary installed now (keeper.h) once the answer is sent.
 * -ESRCH: no keeper (-o norestart).
 */
static ssize_t restart(struct inode *in, char *buf, size_t size)
{
	if (in != inode_root())
		return -ENODATA;
	if (!saved_head()->kept)
		return -ESRCH;
	if (size < 2)
		return size ? -ERANGE : 2;
	memcpy(buf, "ok", 2);
	C.handover = true;
	return 2;
}

/* A request about the file of fd: as ctlsock.h; the value into buf. */
static ssize_t serve_one(const struct ctlsock_req *q, const char *value, int fd, char *buf)
{
	const char *verb = q->name + sizeof(PREFIX) - 1;
	struct inode *in;
	struct stat st;
	ssize_t res;
	int e;

	if (strncmp(q->name, PREFIX, sizeof(PREFIX) - 1))
		return -EOPNOTSUPP; /* the store's own attributes: the kernel's, through the mount */
	in = fan_inode_of(fd, &st, &e);
	if (!in)
		return e;
	if (q->op == CTLSOCK_GET) {
		if (!strcmp(verb, "refresh") || !strcmp(verb, "archive") || !strcmp(verb, "sync") ||
		    !strcmp(verb, "resolve_local") || !strcmp(verb, "resolve_origin"))
			res = -EOPNOTSUPP;
		else if (!strcmp(verb, "restart"))
			res = restart(in, buf, q->size);
		else if (in == inode_root() && !strcmp(verb, "stats"))
			res = stats_get(buf, q->size);
		else
			res = events_xattr(in, (uint64_t)st.st_size, q->name, q->size ? buf : NULL,
					   q->size);
	} else if (q->op == CTLSOCK_SET) {
		if (!strcmp(verb, "pin") || !strcmp(verb, "unpin"))
			res = events_pin(in, verb[0] == 'p');
		else if (!strcmp(verb, "stale"))
			res = events_mark_stale(in);
		else if (!strcmp(verb, "evict"))
			res = evict(in, value, q->value_len);
		else if (!strcmp(verb, "reload"))
			res = -EOPNOTSUPP;
		else
			res = -EPERM;
	} else {
		res = -EINVAL;
	}
	fan_inode_put(in);
	return res;
}

/* One packet of client c read and answered: false when c is gone. */
static bool serve(int c)
{
	char rbuf[sizeof(struct ctlsock_req) + CTLSOCK_MAX_VALUE];
	char obuf[sizeof(struct ctlsock_rep) + CTLSOCK_MAX_VALUE];
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { rbuf, sizeof(rbuf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct ctlsock_req q = { 0 };
	struct ctlsock_rep rep = { .res = -EINVAL };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);
	int fd = -1;

	if (n <= 0)
		return false;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
			int extra = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < extra; i++) {
				int got;

				memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				if (fd < 0)
					fd = got;
				else
					close(got);
			}
		}
	if ((size_t)n >= sizeof(q) && fd >= 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		memcpy(&q, rbuf, sizeof(q));
		q.name[sizeof(q.name) - 1] = '\0';
		if (q.value_len <= (size_t)n - sizeof(q) && q.size <= CTLSOCK_MAX_VALUE)
			rep.res = serve_one(&q, rbuf + sizeof(q), fd, obuf + sizeof(rep));
	}
	if (fd >= 0)
		close(fd);
	memcpy(obuf, &rep, sizeof(rep));
	n = sizeof(rep) + (rep.res > 0 && q.op == CTLSOCK_GET && q.size ? (size_t)rep.res : 0);
	/* a client that does not read its answers is dropped, never waited for */
	if (send(c, obuf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n)
		return false;
	if (C.handover)
		fan_handover(); /* answered first */
	return true;
}

static void *ctl_main(void *arg)
{
	struct pollfd p[2 + CTL_CLIENTS];
	unsigned n = 2;

	(void)arg;
	p[0] = (struct pollfd){ .fd = C.wake[0], .events = POLLIN };
	p[1] = (struct pollfd){ .fd = C.listen_fd, .events = POLLIN };
	for (;;) {
		if (poll(p, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_err("backend=fanotify: the control socket: poll: %s", strerror(errno));
			break;
		}
		if (p[0].revents)
			break;
		for (unsigned i = 2; i < n; i++) {
			if (!p[i].revents || serve(p[i].fd))
				continue;
			close(p[i].fd);
			p[i--] = p[--n];
		}
		if (p[1].revents & POLLIN) {
			int c = accept4(C.listen_fd, NULL, NULL, SOCK_CLOEXEC);

			/* more clients than places: the newest waits for none, it is closed */
			if (c >= 0 && n < 2 + CTL_CLIENTS)
				p[n++] = (struct pollfd){ .fd = c, .events = POLLIN };
			else if (c >= 0)
				close(c);
		}
	}
	for (unsigned i = 2; i < n; i++)
		close(p[i].fd);
	return NULL;
}

int fan_ctl_start(int state_fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int res;

	/* through /proc so that the store's path length does not matter */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/" CTLSOCK_NAME, state_fd);
	C.listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (C.listen_fd < 0)
		return -errno;
	unlinkat(state_fd, CTLSOCK_NAME, 0); /* a dead daemon's; the store's lock is ours */
	old = umask(0077);
	res = bind(C.listen_fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (res < 0 || listen(C.listen_fd, 16) < 0 || pipe2(C.wake, O_CLOEXEC) < 0) {
		res = -errno;
		fan_ctl_stop();
		return res;
	}
	C.state_fd = state_fd;
	res = pthread_create(&C.thread, NULL, ctl_main, NULL);
	if (res) {
		fan_ctl_stop();
		return -res;
	}
	C.running = true;
	return 0;
}

void fan_ctl_stop(void)
{
	if (C.running) {
		if (write(C.wake[1], "x", 1) < 0)
			log_err("backend=fanotify: cannot stop the control socket: %s", strerror(errno));
		pthread_join(C.thread, NULL);
		C.running = false;
		fault_delay(FAULT_CTL_STOPPED);
	}
	if (C.listen_fd >= 0) {
		close(C.listen_fd);
		if (C.state_fd >= 0)
			unlinkat(C.state_fd, CTLSOCK_NAME, 0);
	}
	for (int i = 0; i < 2; i++) {
		if (C.wake[i] >= 0)
			close(C.wake[i]);
		C.wake[i] = -1;
	}
	C.listen_fd = C.state_fd = -1;
}
