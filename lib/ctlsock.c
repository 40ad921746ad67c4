/* ctlsock.c - see ctlsock.h */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctlsock.h"
#include "store.h"

bool ctlsock_find(const char *path, bool follow, char *dir, size_t dirlen)
{
	char cur[PATH_MAX], sock[PATH_MAX + 32];
	struct stat st;

	if (follow) {
		if (!realpath(path, cur))
			return false;
	} else {
		/* the directory holding the name, then the name itself, not followed */
		const char *sl = strrchr(path, '/'), *base = sl ? sl + 1 : path;
		char parent[PATH_MAX];
		size_t n;

		snprintf(parent, sizeof(parent), "%.*s", sl ? (int)(sl - path) : 1,
			 sl ? path : ".");
		if (!realpath(parent[0] ? parent : "/", cur))
			return false;
		n = strlen(cur);
		if (*base && strcmp(base, ".") && strcmp(base, "..") &&
		    (size_t)snprintf(cur + n, sizeof(cur) - n, "%s%s", cur[1] ? "/" : "", base) >=
			    sizeof(cur) - n)
			return false;
		if (!strcmp(base, "..") && !realpath(path, cur))
			return false;
	}
	for (;;) {
		char *sl;

		/* a symlink's own name holds no state directory */
		if (lstat(cur, &st) || !S_ISDIR(st.st_mode))
			goto up;

		/*
		 * the socket, or where it would be: a store's state directory
		 * (its daemon between two, or not answering: ENOTCONN)
		 */
		snprintf(sock, sizeof(sock), "%s%s" STORE_STATE_DIR "/%s", cur, cur[1] ? "/" : "",
			 CTLSOCK_NAME);
		if (stat(sock, &st) || !S_ISSOCK(st.st_mode))
			snprintf(sock, sizeof(sock), "%s%s" STORE_STATE_DIR "/" STORE_LOCK_FILE, cur,
				 cur[1] ? "/" : "");
		if (!stat(sock, &st)) {
			snprintf(dir, dirlen, "%s%s" STORE_STATE_DIR, cur, cur[1] ? "/" : "");
			return true;
		}
up:
		sl = strrchr(cur, '/');
		if (!sl || !cur[1])
			return false;
		sl[sl == cur] = '\0';
	}
}

/* The cached connection: to the socket in conn_dir, one request at a time. */
static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static int conn_fd = -1;
static char conn_dir[PATH_MAX];

static int dial(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int dfd, fd;

	if (conn_fd >= 0 && !strcmp(conn_dir, dir))
		return conn_fd;
	if (conn_fd >= 0)
		close(conn_fd);
	conn_fd = -1;
	/* through /proc so that the store's path length does not matter */
	dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/" CTLSOCK_NAME, dfd);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		close(fd);
		fd = -1;
		errno = e == ECONNREFUSED || e == ENOENT ? ENOTCONN : e;
	}
	if (fd < 0) {
		int e = errno;

		close(dfd);
		return -e;
	}
	close(dfd);
	snprintf(conn_dir, sizeof(conn_dir), "%s", dir);
	conn_fd = fd;
	return fd;
}

static ssize_t ask_once(int sfd, int file, const struct ctlsock_req *q, const void *value,
			void *buf, size_t size)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	char rbuf[sizeof(struct ctlsock_rep) + CTLSOCK_MAX_VALUE];
	struct iovec iov[2] = { { (void *)q, sizeof(*q) }, { (void *)value, q->value_len } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = q->value_len ? 2 : 1,
			     .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	struct ctlsock_rep rep;
	ssize_t n;

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &file, sizeof(int));
	if (sendmsg(sfd, &mh, MSG_NOSIGNAL) < 0)
		return -errno;
	n = recv(sfd, rbuf, sizeof(rbuf), 0);
	if (n < 0)
		return -errno;
	if ((size_t)n < sizeof(rep))
		return -ECONNRESET; /* the daemon went */
	memcpy(&rep, rbuf, sizeof(rep));
	if (rep.res > 0 && q->op == CTLSOCK_GET && q->size) {
		if ((size_t)rep.res > size || (size_t)n - sizeof(rep) < (size_t)rep.res)
			return -ERANGE;
		memcpy(buf, rbuf + sizeof(rep), (size_t)rep.res);
	}
	return (ssize_t)rep.res;
}

ssize_t ctlsock_ask(const char *dir, const char *path, bool follow, uint32_t op,
		    const char *name, const void *value, size_t value_len, void *buf,
		    size_t size)
{
	struct ctlsock_req q = { .op = op };
	ssize_t res;
	int file, sfd;

	if (strlen(name) >= sizeof(q.name) || value_len > CTLSOCK_MAX_VALUE)
		return -ERANGE;
	snprintf(q.name, sizeof(q.name), "%s", name);
	q.size = size > CTLSOCK_MAX_VALUE ? CTLSOCK_MAX_VALUE : (uint32_t)size;
	q.value_len = (uint32_t)value_len;
	file = open(path, O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
	if (file < 0)
		return -errno;
	pthread_mutex_lock(&conn_lock);
	sfd = dial(dir);
	res = sfd < 0 ? sfd : ask_once(sfd, file, &q, value, buf, size);
	if (res == -ECONNRESET || res == -EPIPE) {
		/* a cached connection to a daemon gone: once more, to the next */
		close(conn_fd);
		conn_fd = -1;
		sfd = dial(dir);
		res = sfd < 0 ? sfd : ask_once(sfd, file, &q, value, buf, size);
		if (res == -ECONNRESET || res == -EPIPE) {
			/* the socket of a daemon that went and had not closed it yet */
			close(conn_fd);
			conn_fd = -1;
			res = -ENOTCONN;
		}
	}
	pthread_mutex_unlock(&conn_lock);
	close(file);
	return res;
}
