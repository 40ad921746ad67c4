/*
 * The event engine without a mount: a store in a temporary directory,
 * the inode table, the database, the engine and the hook transport,
 * started as main.c starts them, and hooks of our own speaking the
 * protocol's frames on the engine's socket.  It links the engine's
 * library alone (no libfuse) and is its front end (front.h): callers
 * are engine entry points called from test threads, without a request
 * (they wait in the calling thread) or with a fake one (they park).
 *
 * Covered: the decision rule when several hooks must answer (every one
 * is counted, deny wins in any order, QUIET is per hook and per file),
 * a hook that does not answer (the timeout fails the caller, another
 * hook's allow does not), PRE_ACCESS fills (the bytes a hook writes are
 * what the store holds after; a deny fails the read and commits
 * nothing), and PROGRESS (progress extends a fill's time, a PROGRESS
 * without progress does not), and the front end's interface (a missing
 * read with a request parks and is answered once through front.reply,
 * from the store descriptor it gave, or with the hook's errno; a fill's
 * commit and an eviction say what the kernel holds stale), and parked
 * requests (a request with a
 * handle does not hold its thread: it parks, and its continuation
 * gets the hooks' answer; one user's parked requests are bounded by
 * max_parked_user, another user's are not; an interrupted caller leaves),
 * and lazy directories (an unlisted directory is listed by a fill hook's
 * PRE_DIR before it is used: the store then holds exactly the names the
 * listing gives, as placeholders of its sizes and versions, and nobody
 * is asked again; concurrent first looks wait for one listing; a deny or
 * a bad listing fails the look and leaves the directory unlisted and
 * empty; a refresh adds, removes and replaces what the origin changed
 * and tells the kernel so, but the user's change wins: a file changed
 * through the mount is kept as the user left it, dirty in memory or in
 * its row, and a name removed through the mount while the refresh was
 * asked is not made again), and archives (an ARCHIVE event carries a
 * read-only snapshot; the archive hook and every watcher must allow;
 * an allow without ARCHIVED, a deny or a hook gone archive nothing, and
 * a hook gone hands the same snapshot to the next; a change after the
 * snapshot keeps the file dirty and archives it again; ESTALE is a
 * conflict, kept until resolved), and names (the ops a sync applies, in
 * order, each with its object; a rename's answer moves the recorded
 * object; a removal in conflict is dropped and counted).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "answer.h"
#include "cache.h"
#include "events.h"
#include "evict.h"
#include "fstate.h"
#include "park.h"
#include "hooks.h"
#include "inode.h"
#include "saved.h"
#include "log.h"
#include "manifest.h"
#include "meta.h"
#include "names.h"
#include "place.h"
#include "proto.h"
#include "store.h"
#include "tap.h"

#define TIMEOUT_S 1.0

static struct store store;
static struct meta *meta;
static char dir[] = "/tmp/hsmfs-test-engine-XXXXXX";

/* --- the engine's front end (front.h): no kernel, invalidations recorded --- */

/* The names a refresh told the kernel to drop: "name name ". */
static pthread_mutex_t inval_lock = PTHREAD_MUTEX_INITIALIZER;
static char invalidated[1024];
/* invalidations asked, by kind */
static unsigned inval_count[INVAL_FILES_LATER + 1];

static void record_invalidate(const struct inval *iv)
{
	pthread_mutex_lock(&inval_lock);
	inval_count[iv->kind]++;
	if (iv->kind == INVAL_ENTRY &&
	    strlen(invalidated) + strlen(iv->name) + 2 < sizeof(invalidated)) {
		strcat(invalidated, iv->name);
		strcat(invalidated, " ");
	}
	pthread_mutex_unlock(&inval_lock);
}

static unsigned invalidations(enum inval_kind kind)
{
	unsigned n;

	pthread_mutex_lock(&inval_lock);
	n = inval_count[kind];
	pthread_mutex_unlock(&inval_lock);
	return n;
}

/* Was name's entry invalidated since invalidated[] was emptied? */
static bool was_invalidated(const char *name)
{
	char key[300];
	bool found;

	snprintf(key, sizeof(key), " %s ", name);
	pthread_mutex_lock(&inval_lock);
	{
		char all[sizeof(invalidated) + 1];

		snprintf(all, sizeof(all), " %s", invalidated);
		found = strstr(all, key) != NULL;
	}
	pthread_mutex_unlock(&inval_lock);
	return found;
}

/* the FUSE session ended (unmounted): set by a test, read by the timer */
static atomic_bool session_ended;
static bool exiting(void) { return atomic_load(&session_ended); }

/*
 * Requests with a handle: the engine never looks into struct front_req,
 * it asks front.caller and front.interrupted, so a fake one stands in.
 */
struct fake_req {
	uid_t uid;
	pid_t pid;
	bool interrupted;
	/* the continuation's result: set once, by whichever thread */
	bool done;
	int res;
	int calls;
	/* a parked read's reply (front.reply): the range of fd it gave */
	int fd;
	uint64_t off, len;
};

static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t req_cond = PTHREAD_COND_INITIALIZER;

static void fake_caller(struct front_req *req, struct caller *ret)
{
	const struct fake_req *r = (const struct fake_req *)req;

	ret->pid = r->pid;
	ret->uid = r->uid;
	ret->gid = r->uid;
}

static bool fake_interrupted(struct front_req *req)
{
	struct fake_req *r = (struct fake_req *)req;
	bool i;

	pthread_mutex_lock(&req_lock);
	i = r->interrupted;
	pthread_mutex_unlock(&req_lock);
	return i;
}

static void fake_cont(void *arg, int res)
{
	struct fake_req *r = arg;

	pthread_mutex_lock(&req_lock);
	r->calls++;
	r->res = res;
	r->done = true;
	pthread_cond_broadcast(&req_cond);
	pthread_mutex_unlock(&req_lock);
}

/* A parked read answered (front.reply): recorded as its request's continuation. */
static void fake_reply(struct front_req *req, struct inode *in, int fd, uint64_t off,
		       uint64_t len, int res)
{
	struct fake_req *r = (struct fake_req *)req;

	pthread_mutex_lock(&req_lock);
	r->fd = fd;
	r->off = off;
	r->len = len;
	pthread_mutex_unlock(&req_lock);
	fake_cont(r, res);
}

/* Wait up to ms for r's continuation: its result, or 1 if it did not come. */
static int fake_wait(struct fake_req *r, int ms)
{
	struct timespec ts;
	int res;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&req_lock);
	while (!r->done && pthread_cond_timedwait(&req_cond, &req_lock, &ts) == 0)
		;
	res = r->done ? r->res : 1;
	pthread_mutex_unlock(&req_lock);
	return res;
}

static int start_engine(void)
{
	char err[256], path[512];
	struct events_config ecfg = {
		.max_pending = 64,
		.timeout = TIMEOUT_S,
		.progress_floor = 0,
		.chunk = 65536,
		.kernel_ra = 128 << 10,
		.store_path = dir,
		.front = {
			.reply = fake_reply,
			.caller = fake_caller,
			.interrupted = fake_interrupted,
			.exiting = exiting,
			.invalidate = record_invalidate,
		},
		.max_parked_user = 2,
	};
	struct cache_config ccfg = { .chunk = 65536 };
	int res;

	if (!mkdtemp(dir))
		return -errno;
	res = store_open(dir, &store, err, sizeof(err));
	if (res)
		return res;
	snprintf(path, sizeof(path), "%s/%s/meta.db", dir, STORE_STATE_DIR);
	res = meta_open(path, &meta);
	if (res)
		return res;
	{ bool fr; saved_open_region(-1, &fr); uint64_t rn; res = inode_table_init(store.root_fd, 64, 0, false, &rn); }
	if (res)
		return res;
	ecfg.meta = meta;
	ecfg.state_fd = store.state_fd;
	res = events_init(&ecfg);
	if (res)
		return res;
	ccfg.store_fd = store.root_fd;
	ccfg.state_fd = store.state_fd;
	ccfg.meta = meta;
	res = cache_init(&ccfg);
	if (res)
		return res;
	snprintf(path, sizeof(path), "%s/%s", dir, STORE_STATE_DIR);
	return hooks_start(store.state_fd, path, 65536, (uint32_t)(TIMEOUT_S * 1000),
			   &(const struct hooks_handlers){ .joined = events_hook_joined,
							   .left = events_hook_left,
							   .answer = events_answer,
							   .progress = events_progress,
							   .filled = events_filled,
							   .archived = events_archived });
}

/* --- a hook of our own: raw frames on the engine's socket --- */

struct hook_conn {
	int fd;
};

static int hook_connect(uint32_t kind, uint32_t mask, const char *name, struct hook_conn *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct proto_hello hello = {
		.version_min = 1, .version_max = HSMFS_PROTO_VERSION, .kind = kind, .mask = mask,
		.name = { name, (uint16_t)strlen(name) },
	};
	struct proto_welcome w;
	uint8_t buf[HSMFS_MAX_FRAME];
	ssize_t n;
	int len;

	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", hooks_socket_path());
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	len = proto_enc_hello(buf, &hello);
	if (len < 0 || send(c->fd, buf, len, 0) != len)
		return -EIO;
	n = recv(c->fd, buf, sizeof(buf), 0);
	if (n <= 0 || proto_dec_welcome(buf, n, &w))
		return -EPROTO;
	return 0;
}

static void hook_close(struct hook_conn *c)
{
	close(c->fd);
	c->fd = -1;
}

/*
 * The next event (or -ETIMEDOUT after ms); *fd gets its descriptor or -1.
 * A CANCEL frame is skipped.
 */
static int hook_next(struct hook_conn *c, struct proto_event *ev, char *path, int *fd,
		     int ms)
{
	static __thread uint8_t buf[HSMFS_MAX_FRAME];
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	char cbuf[CMSG_SPACE(sizeof(int))];

	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				      .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *cm;
		uint16_t type;
		ssize_t n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);

		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (n == 0)
			return -ECONNRESET;
		*fd = -1;
		cm = CMSG_FIRSTHDR(&msg);
		if (cm && cm->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(cm), sizeof(int));
		if (proto_peek(buf, n, &type))
			return -EPROTO;
		if (type != HSMFS_MSG_EVENT) {
			if (*fd >= 0)
				close(*fd);
			continue;
		}
		if (proto_dec_event(buf, n, ev))
			return -EPROTO;
		memcpy(path, ev->path.p, ev->path.len);
		path[ev->path.len] = 0;
		return 0;
	}
}

static int hook_answer(struct hook_conn *c, uint64_t id, int err, uint64_t fs, uint64_t fe,
		       uint16_t flags)
{
	struct proto_answer a = { .id = id, .verdict = err ? HSMFS_DENY : HSMFS_ALLOW,
				  .error = (uint32_t)err, .filled_start = fs,
				  .filled_end = fe, .flags = flags };
	uint8_t buf[HSMFS_MAX_FRAME];
	int len = proto_enc_answer(buf, &a);

	return len > 0 && send(c->fd, buf, len, MSG_NOSIGNAL) == len ? 0 : -EIO;
}

static int hook_progress(struct hook_conn *c, uint64_t id, uint64_t done)
{
	struct proto_progress p = { .id = id, .bytes_done = done };
	uint8_t buf[HSMFS_MAX_FRAME];
	int len = proto_enc_progress(buf, &p);

	return len > 0 && send(c->fd, buf, len, MSG_NOSIGNAL) == len ? 0 : -EIO;
}

static int hook_archived_at(struct hook_conn *c, uint64_t id, const char *version,
			    const char *origin)
{
	struct proto_archived a = { .id = id, .version = { version, (uint16_t)strlen(version) },
				    .origin = { origin, (uint16_t)strlen(origin) } };
	uint8_t buf[HSMFS_MAX_FRAME];
	int len = proto_enc_archived(buf, &a);

	return len > 0 && send(c->fd, buf, len, MSG_NOSIGNAL) == len ? 0 : -EIO;
}

static int hook_archived(struct hook_conn *c, uint64_t id, const char *version)
{
	return hook_archived_at(c, id, version, "");
}

/* --- files in the store --- */

/* Place e in the store's root as an import does, and look it up. */
static struct inode *place(const struct manifest_entry *e)
{
	enum place_outcome out;
	char err[256];
	struct inode *in;
	struct stat st;
	bool created;
	int dfd = openat(store.root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd < 0 || meta_begin(meta))
		return NULL;
	if (place_entry(meta, dfd, e->path, e->path, e, false, NULL, NULL, &created, &out, err,
			sizeof(err)) || meta_commit(meta)) {
		printf("# cannot make '%s': %s\n", e->path, err);
		meta_rollback(meta);
		close(dfd);
		return NULL;
	}
	close(dfd);
	if (inode_lookup(inode_root(), e->path, &st, &in))
		return NULL;
	return in;
}

/* A placeholder of size bytes (an origin, a version), looked up. */
static struct inode *placeholder(const char *name, uint64_t size)
{
	struct manifest_entry e = { .path = (char *)name, .size = size, .mode = 0644,
				    .url = "http://127.0.0.1:1/x", .version = "v1" };
	struct inode *in = place(&e);

	return in && !events_load(in) ? in : NULL;
}

/* A resident file of size bytes (no row: PRE_MODIFY asks the watchers). */
static struct inode *resident(const char *name, uint64_t size)
{
	int fd = openat(store.root_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	struct inode *in;
	struct stat st;

	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		return NULL;
	close(fd);
	if (inode_lookup(inode_root(), name, &st, &in))
		return NULL;
	return in;
}

static int store_bytes(const char *name, uint64_t off, void *buf, size_t len)
{
	int fd = openat(store.root_fd, name, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = pread(fd, buf, len, (off_t)off);
	close(fd);
	return n == (ssize_t)len ? 0 : -EIO;
}

/* --- lazy directories in the store --- */

/* An unlisted directory name in the root, its names listed from origin. */
static struct inode *lazy_dir(const char *name, const char *origin)
{
	struct manifest_entry e = { .path = (char *)name, .mode = 0755, .url = (char *)origin,
				    .is_dir = true };
	struct inode *in = place(&e);

	/* as user.hsmfs.reload after an import: the engine looks again */
	if (in)
		events_dir_forget(in);
	return in;
}

/* The names in the store directory path, sorted, each followed by a blank. */
static const char *names_in(const char *path)
{
	static char out[1024];
	char full[600];
	struct dirent **v;
	int n;

	snprintf(full, sizeof(full), "%s/%s", dir, path);
	out[0] = 0;
	n = scandir(full, &v, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		if (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, "..") &&
		    strlen(out) + strlen(v[i]->d_name) + 2 < sizeof(out)) {
			strcat(out, v[i]->d_name);
			strcat(out, " ");
		}
		free(v[i]);
	}
	if (n >= 0)
		free(v);
	return n < 0 ? "(none)" : out;
}

/* The row of path below the store root, *st its attributes: 0 or -errno. */
static int row_of(const char *path, struct stat *st, struct meta_file *ret)
{
	if (fstatat(store.root_fd, path, st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return meta_get(meta, st->st_ino, ret);
}

/* Is path a placeholder of size bytes and version v, nothing present? */
static bool is_placeholder(const char *path, uint64_t size, const char *v)
{
	struct meta_file f;
	struct stat st;
	bool is;

	if (row_of(path, &st, &f))
		return false;
	is = S_ISREG(st.st_mode) && f.state == META_PLACEHOLDER && f.size == size &&
	     (uint64_t)st.st_size == size && f.version && !strcmp(f.version, v) &&
	     !f.present.n;
	meta_file_free(&f);
	return is;
}

/* The state of path's row (enum meta_state), or 0 without one. */
static uint32_t state_of(const char *path)
{
	struct meta_file f;
	struct stat st;
	uint32_t state;

	if (row_of(path, &st, &f))
		return 0;
	state = f.state;
	meta_file_free(&f);
	return state;
}

/*
 * The fill hook f takes the next event, which must be a PRE_DIR of path
 * from origin, writes text into its descriptor as hsmfs-http does (JSON
 * Lines) and answers err.  0, or -1 when no such event came.
 */
static int list_answer(struct hook_conn *f, const char *path, const char *origin,
		       const char *text, int err)
{
	char p[HSMFS_MAX_PATH + 1];
	struct proto_event ev;
	ssize_t len = (ssize_t)strlen(text);
	int fd, res;

	if (hook_next(f, &ev, p, &fd, 2000))
		return -1;
	res = ev.type == HSMFS_EV_PRE_DIR && fd >= 0 && !strcmp(p, path) &&
	      ev.origin.len == strlen(origin) && !memcmp(ev.origin.p, origin, ev.origin.len) &&
	      ev.start == 0 && ev.end == 0 ? 0 : -1;
	if (fd >= 0) {
		if (pwrite(fd, text, (size_t)len, 0) != len)
			res = -1;
		close(fd);
	}
	hook_answer(f, ev.id, err, 0, 0, 0);
	return res;
}

/*
 * A change through the mount while the file is not open (written, then
 * closed; the kernel still knows the inode): the user's bytes at off.
 */
static int user_writes(struct inode *in, const char *path, uint64_t off, const char *data)
{
	int fd = openat(store.root_fd, path, O_WRONLY | O_CLOEXEC);
	size_t len = strlen(data);
	struct events_change ch;
	ssize_t n;

	if (fd < 0)
		return -errno;
	events_change_begin(in, &ch, off, off + len);
	n = pwrite(fd, data, len, (off_t)off);
	events_wrote(in, &ch, off, n > 0 ? (uint64_t)n : 0);
	close(fd);
	return n == (ssize_t)len ? 0 : -EIO;
}

/* --- callers on threads of their own --- */

struct call {
	pthread_t t;
	struct inode *in;
	int kind; /* 0: PRE_MODIFY, 1: PRE_ACCESS */
	uint64_t off, len;
	int res;
	double took; /* seconds */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *call_main(void *arg)
{
	struct call *c = arg;
	double t0 = now_s();
	bool held = false;

	if (c->kind == 0)
		c->res = events_pre_modify(c->in, c->off, c->off + c->len, NULL);
	else {
		c->res = events_pre_access(c->in, c->off, c->len, NULL, &held);
		if (held)
			events_read_done(c->in);
	}
	c->took = now_s() - t0;
	return NULL;
}

static void call_start(struct call *c, struct inode *in, int kind, uint64_t off, uint64_t len)
{
	memset(c, 0, sizeof(*c));
	c->in = in;
	c->kind = kind;
	c->off = off;
	c->len = len;
	pthread_create(&c->t, NULL, call_main, c);
}

static int call_end(struct call *c)
{
	pthread_join(c->t, NULL);
	return c->res;
}

/* --- the cases --- */

#define PM HSMFS_MASK(HSMFS_EV_PRE_MODIFY)
#define PA HSMFS_MASK(HSMFS_EV_PRE_ACCESS)

static void decision_rule(void)
{
	struct hook_conn a, b;
	struct proto_event ea, eb;
	char pa[HSMFS_MAX_PATH + 1], pb[HSMFS_MAX_PATH + 1];
	int fda, fdb, order;
	struct inode *in = resident("modified", 8192);
	struct call c;

	ok(in != NULL, "a resident file in the store");
	ok(!hook_connect(HSMFS_KIND_WATCH, PM, "watch-a", &a) &&
	   !hook_connect(HSMFS_KIND_WATCH, PM, "watch-b", &b), "two watchers of changes join");

	call_start(&c, in, 0, 0, 100);
	ok(!hook_next(&a, &ea, pa, &fda, 2000) && !hook_next(&b, &eb, pb, &fdb, 2000) &&
	   ea.type == HSMFS_EV_PRE_MODIFY && ea.id == eb.id && !strcmp(pa, "modified") &&
	   ea.start == 0 && ea.end == 100, "PRE_MODIFY reaches both, with its range and path");
	hook_answer(&a, ea.id, 0, 0, 0, 0);
	hook_answer(&b, eb.id, 0, 0, 0, 0);
	ok(call_end(&c) == 0, "both allow: the change goes on");

	for (order = 0; order < 2; order++) {
		call_start(&c, in, 0, 10, 10);
		hook_next(&a, &ea, pa, &fda, 2000);
		hook_next(&b, &eb, pb, &fdb, 2000);
		if (order == 0) {
			hook_answer(&a, ea.id, EPERM, 0, 0, 0);
			hook_answer(&b, eb.id, 0, 0, 0, 0);
		} else {
			hook_answer(&b, eb.id, 0, 0, 0, 0);
			usleep(20000); /* the allow is read first */
			hook_answer(&a, ea.id, EPERM, 0, 0, 0);
		}
		ok(call_end(&c) == -EPERM, "deny wins, %s", order ? "after an allow" :
			"before an allow");
	}

	/* a allows with QUIET: only b is asked about this file from now on */
	call_start(&c, in, 0, 0, 1);
	hook_next(&a, &ea, pa, &fda, 2000);
	hook_next(&b, &eb, pb, &fdb, 2000);
	hook_answer(&a, ea.id, 0, 0, 0, HSMFS_ANSWER_QUIET);
	hook_answer(&b, eb.id, 0, 0, 0, 0);
	ok(call_end(&c) == 0, "allowed, a quieted the file");
	call_start(&c, in, 0, 0, 1);
	ok(!hook_next(&b, &eb, pb, &fdb, 2000), "the next change asks b");
	ok(hook_next(&a, &ea, pa, &fda, 200) == -ETIMEDOUT, "and not a, which quieted it");
	hook_answer(&b, eb.id, EACCES, 0, 0, 0);
	ok(call_end(&c) == -EACCES, "b alone decides: its deny stands");
	call_start(&c, in, 0, 0, 1);
	hook_next(&b, &eb, pb, &fdb, 2000);
	hook_answer(&b, eb.id, EROFS, 0, 0, 0);
	ok(call_end(&c) == -EIO, "a deny with an errno outside the list reaches the caller as EIO");
	{
		struct inode *other = resident("other", 10);

		call_start(&c, other, 0, 0, 1);
		ok(!hook_next(&a, &ea, pa, &fda, 2000) && !strcmp(pa, "other"),
		   "QUIET is per file: a change of another file asks a");
		hook_next(&b, &eb, pb, &fdb, 2000);
		hook_answer(&a, ea.id, 0, 0, 0, 0);
		hook_answer(&b, eb.id, 0, 0, 0, 0);
		ok(call_end(&c) == 0, "and both allow it");
		inode_forget(other, 1);
	}

	/* a hook that does not answer: the timeout fails the change */
	call_start(&c, in, 0, 0, 1);
	hook_next(&b, &eb, pb, &fdb, 2000);
	hook_answer(&b, eb.id, 0, 0, 0, 0);
	/* a is quiet for "modified": ask about a fresh file */
	call_end(&c);
	{
		struct inode *f = resident("silent", 10);

		call_start(&c, f, 0, 0, 1);
		hook_next(&a, &ea, pa, &fda, 2000);
		hook_next(&b, &eb, pb, &fdb, 2000);
		hook_answer(&b, eb.id, 0, 0, 0, 0);
		call_end(&c);
		ok(c.res == -EIO && c.took >= TIMEOUT_S * 0.9 && c.took < TIMEOUT_S * 3,
		   "one hook silent, one allowing: EIO after the timeout (%.2f s of %.1f)",
		   c.took, TIMEOUT_S);
		inode_forget(f, 1);
	}
	/* a hook that leaves unanswered: it did not allow */
	{
		struct inode *f = resident("left", 10);

		call_start(&c, f, 0, 0, 1);
		hook_next(&a, &ea, pa, &fda, 2000);
		hook_next(&b, &eb, pb, &fdb, 2000);
		hook_answer(&b, eb.id, 0, 0, 0, 0);
		hook_close(&a);
		call_end(&c);
		ok(c.res != 0, "a hook that leaves without answering did not allow (%d)",
		   c.res);
		inode_forget(f, 1);
	}
	hook_close(&b);
	inode_forget(in, 1);
}

static void fills(void)
{
	static char page[65536], back[65536];
	struct hook_conn f;
	struct proto_event ev;
	char path[HSMFS_MAX_PATH + 1];
	struct inode *in;
	struct call c;
	int fd;

	ok(!hook_connect(HSMFS_KIND_FILL, PA, "fill", &f), "a fill hook joins");
	in = placeholder("lazy", 3 * 65536);
	ok(in != NULL, "a placeholder of three chunks");

	call_start(&c, in, 1, 100, 10);
	ok(!hook_next(&f, &ev, path, &fd, 2000) && ev.type == HSMFS_EV_PRE_ACCESS &&
	   fd >= 0 && ev.start <= 100 && ev.end >= 110 && ev.file_size == 3 * 65536 &&
	   !strcmp(path, "lazy") && ev.version.len == 2, "PRE_ACCESS with a descriptor, "
	   "a range covering the read, the recorded size and version");
	for (size_t i = 0; i < sizeof(page); i++)
		page[i] = (char)(i * 7 + 1);
	ok(pwrite(fd, page + ev.hint_start % 65536, ev.hint_end - ev.hint_start,
		  (off_t)ev.hint_start) == (ssize_t)(ev.hint_end - ev.hint_start),
	   "the hook writes the hint [%llu, %llu)", (unsigned long long)ev.hint_start,
	   (unsigned long long)ev.hint_end);
	close(fd);
	hook_answer(&f, ev.id, 0, ev.hint_start, ev.hint_end, 0);
	ok(call_end(&c) == 0, "allowed: the read goes on");
	ok(!store_bytes("lazy", 0, back, 65536) && !memcmp(back, page, 65536),
	   "the store holds the bytes the hook wrote");

	/* a deny fails the read and commits nothing */
	call_start(&c, in, 1, 65536 + 5, 10);
	hook_next(&f, &ev, path, &fd, 2000);
	pwrite(fd, page, 65536, 65536);
	close(fd);
	hook_answer(&f, ev.id, ENODATA, 0, 0, 0);
	ok(call_end(&c) == -ENODATA, "a denied fill fails the read with the hook's errno");
	memset(back, 1, sizeof(back));
	ok(!store_bytes("lazy", 65536, back, 65536) && back[0] == 0 && back[65535] == 0,
	   "and nothing of it is in the store");

	/* PROGRESS: progress extends the fill's time, the same figure again does not */
	call_start(&c, in, 1, 2 * 65536, 10);
	hook_next(&f, &ev, path, &fd, 2000);
	for (int i = 1; i <= 4; i++) {
		usleep((useconds_t)(TIMEOUT_S * 0.6e6));
		hook_progress(&f, ev.id, (uint64_t)i * 4096);
	}
	pwrite(fd, page, ev.hint_end - ev.hint_start, (off_t)ev.hint_start);
	close(fd);
	hook_answer(&f, ev.id, 0, ev.hint_start, ev.hint_end, 0);
	call_end(&c);
	ok(c.res == 0 && c.took > TIMEOUT_S * 2,
	   "a fill that reports progress outlives its timeout (%.2f s of %.1f)", c.took,
	   TIMEOUT_S);

	call_start(&c, in, 1, 100, 10);
	call_end(&c);
	ok(c.res == 0 && c.took < TIMEOUT_S / 2, "a present range asks nobody");
	inode_forget(in, 1);
	in = placeholder("stalled", 65536);
	call_start(&c, in, 1, 0, 10);
	hook_next(&f, &ev, path, &fd, 2000);
	for (int i = 0; i < 4; i++) {
		usleep((useconds_t)(TIMEOUT_S * 0.4e6));
		hook_progress(&f, ev.id, 4096); /* the same figure: no progress */
	}
	call_end(&c);
	ok(c.res == -EIO && c.took < TIMEOUT_S * 1.5,
	   "PROGRESS without progress does not extend it: EIO at the timeout (%.2f s)",
	   c.took);
	close(fd);
	hook_close(&f);
	inode_forget(in, 1);
}

/*
 * The engine as a front end sees it (front.h): a read with a request
 * parks and is answered through front.reply; a fill's commit and an
 * eviction say, as data, what the kernel holds stale.
 */
static void front_end(void)
{
	static char page[65536], back[8192], zero[8192];
	struct fake_req r = { .uid = 1000, .pid = 20 }, r2 = { .uid = 1000, .pid = 21 };
	char path[HSMFS_MAX_PATH + 1];
	struct hook_conn f;
	struct proto_event ev;
	struct inode *in;
	struct stat st;
	unsigned attr0, data0;
	uint64_t freed = 0;
	bool held = false;
	int fd = -1, sfd, res;

	ok(!hook_connect(HSMFS_KIND_FILL, PA, "fill", &f), "a fill hook joins");
	in = placeholder("front", 65536);
	sfd = in ? open_store(in, O_RDONLY) : -1;
	ok(sfd >= 0, "a placeholder, and its store descriptor");
	attr0 = invalidations(INVAL_ATTR);
	res = events_read(in, 4096, 8192, (struct front_req *)&r, sfd, &held);
	ok(res == EVENTS_PARKED && fake_wait(&r, 0) == 1,
	   "a missing read with a request parks, unanswered (%d)", res);
	ok(!hook_next(&f, &ev, path, &fd, 2000) && ev.type == HSMFS_EV_PRE_ACCESS &&
	   ev.start <= 4096 && ev.end >= 12288, "its PRE_ACCESS reaches the fill hook");
	for (size_t i = 0; i < sizeof(page); i++)
		page[i] = (char)(i * 13 + 5);
	pwrite(fd, page + ev.hint_start, ev.hint_end - ev.hint_start, (off_t)ev.hint_start);
	close(fd);
	hook_answer(&f, ev.id, 0, ev.hint_start, ev.hint_end, 0);
	res = fake_wait(&r, 2000);
	ok(res == 0 && r.calls == 1 && r.fd == sfd && r.off == 4096 && r.len == 8192,
	   "the engine answers it once through front.reply: [4096, 12288) of its store "
	   "descriptor (res %d, calls %d)", res, r.calls);
	ok(pread(sfd, back, sizeof(back), 4096) == sizeof(back) &&
	   !memcmp(back, page + 4096, sizeof(back)), "which holds the hook's bytes");
	ok(invalidations(INVAL_ATTR) > attr0,
	   "the fill's commit tells the front end the file's attributes changed");

	data0 = invalidations(INVAL_DATA);
	res = fstatat(store.root_fd, "front", &st, 0);
	{
		struct meta_victim v = { .ino = res ? 0 : st.st_ino, .path = "front" };

		res = evict_victim(&v, false, &freed);
	}
	ok(res == 0 && freed > 0, "the evictor takes the file back (%d, %llu bytes)", res,
	   (unsigned long long)freed);
	ok(invalidations(INVAL_DATA) > data0, "and tells the front end to drop its pages");
	ok(pread(sfd, back, sizeof(back), 4096) == sizeof(back) &&
	   !memcmp(back, zero, sizeof(back)), "its bytes are out of the store");
	res = events_read(in, 4096, 8192, (struct front_req *)&r2, sfd, &held);
	ok(res == EVENTS_PARKED && !hook_next(&f, &ev, path, &fd, 2000),
	   "a read of it parks and asks the fill hook again");
	if (fd >= 0)
		close(fd);
	hook_answer(&f, ev.id, EIO, 0, 0, 0);
	res = fake_wait(&r2, 2000);
	ok(res == -EIO && r2.calls == 1,
	   "a denied fill fails the parked read through front.reply (%d)", res);
	close(sfd);
	hook_close(&f);
	inode_forget(in, 1);
}

/*
 * A front end without interrupts (front.h: every callback but reply and
 * caller may be NULL; the fanotify front end has none): a read parked on
 * an event over several of the timer's ticks, which look for interrupted
 * waiters, is answered once its fill is (the engine called a NULL
 * front.interrupted on the first tick before).
 */
static void front_without_interrupts(void)
{
	struct fake_req r = { .uid = 1000, .pid = 30 };
	bool (*saved)(struct front_req *);
	char path[HSMFS_MAX_PATH + 1];
	static char page[65536];
	struct hook_conn f;
	struct proto_event ev;
	struct inode *in;
	bool held = false;
	int fd = -1, sfd, res;

	ok(!hook_connect(HSMFS_KIND_FILL, PA, "fill", &f), "a fill hook joins");
	in = placeholder("noint", 65536);
	sfd = in ? open_store(in, O_RDONLY) : -1;
	elock();
	saved = S.cfg.front.interrupted;
	S.cfg.front.interrupted = NULL;
	eunlock();
	res = events_read(in, 0, 4096, (struct front_req *)&r, sfd, &held);
	ok(res == EVENTS_PARKED && !hook_next(&f, &ev, path, &fd, 2000),
	   "with no front.interrupted, a missing read parks and asks the hook (%d)", res);
	usleep(3 * 100 * 1000); /* three of the timer's ticks (TICK_MS) */
	if (fd >= 0) {
		pwrite(fd, page, ev.hint_end - ev.hint_start, (off_t)ev.hint_start);
		close(fd);
	}
	hook_answer(&f, ev.id, 0, ev.hint_start, ev.hint_end, 0);
	res = fake_wait(&r, 2000);
	ok(res == 0 && r.calls == 1, "it is answered once after the timer's ticks (%d)", res);
	elock();
	S.cfg.front.interrupted = saved;
	eunlock();
	if (sfd >= 0)
		close(sfd);
	hook_close(&f);
	if (in)
		inode_forget(in, 1);
}

static void parking(void)
{
	/*
	 * Users 1000 and 1001 count in different shares: the share is the
	 * top six bits of uid * 2^64/phi, and consecutive uids step it by 39.
	 */
	struct fake_req r[6] = {
		{ .uid = 1000, .pid = 10 }, { .uid = 1000, .pid = 11 },
		{ .uid = 1000, .pid = 12 }, { .uid = 1001, .pid = 13 },
		{ .uid = 1000, .pid = 14 }, { .uid = 1002, .pid = 15 },
	};
	struct inode *in[6];
	struct proto_event ev[6];
	char path[HSMFS_MAX_PATH + 1], name[16], asked[6][HSMFS_MAX_PATH + 1];
	struct hook_conn w;
	double t0;
	int res[6], fd, n = 0;

	ok(!hook_connect(HSMFS_KIND_WATCH, PM, "watch", &w), "a PRE_MODIFY watcher joins");
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "parked%d", i);
		in[i] = resident(name, 4096);
	}
	t0 = now_s();
	for (int i = 0; i < 4; i++)
		res[i] = events_modify(in[i], 0, 1, (struct front_req *)&r[i], fake_cont, &r[i]);
	ok(res[0] == EVENTS_PARKED && res[1] == EVENTS_PARKED && now_s() - t0 < TIMEOUT_S / 2,
	   "two changes of user 1000 park at once: the calling thread is not held");
	ok(res[2] == -EAGAIN, "the third of user 1000 is over max_parked_user=2: EAGAIN (%d)",
	   res[2]);
	ok(res[3] == EVENTS_PARKED, "user 1001 is under its own bound: it parks");
	for (int i = 0; i < 4; i++)
		if (!hook_next(&w, &ev[n], asked[n], &fd, n < 3 ? 2000 : 300))
			n++;
	ok(n == 3 && strcmp(asked[0], "parked2") && strcmp(asked[1], "parked2") &&
	   strcmp(asked[2], "parked2"),
	   "the watcher is asked three times, never about the refused change (%d)", n);
	ok(fake_wait(&r[0], 100) == 1 && fake_wait(&r[3], 0) == 1,
	   "no continuation runs before the hook answers");
	for (int i = 0; i < n; i++)
		hook_answer(&w, ev[i].id, !strcmp(asked[i], "parked1") ? EPERM : 0, 0, 0, 0);
	ok(fake_wait(&r[0], 2000) == 0 && fake_wait(&r[3], 2000) == 0,
	   "the allows reach the parked changes' continuations");
	ok(fake_wait(&r[1], 2000) == -EPERM, "and the deny reaches its own");
	ok(r[0].calls == 1 && r[1].calls == 1 && r[2].calls == 0 && r[3].calls == 1,
	   "each continuation once; none for the refused change");

	/* the places came back: user 1000 parks again */
	res[4] = events_modify(in[4], 0, 1, (struct front_req *)&r[4], fake_cont, &r[4]);
	ok(res[4] == EVENTS_PARKED, "answered, user 1000's places are free again");
	hook_next(&w, &ev[4], path, &fd, 2000);
	hook_answer(&w, ev[4].id, 0, 0, 0, 0);
	ok(fake_wait(&r[4], 2000) == 0, "and that change is allowed");

	/* an interrupted caller leaves its event before the timeout */
	res[5] = events_modify(in[5], 0, 1, (struct front_req *)&r[5], fake_cont, &r[5]);
	hook_next(&w, &ev[5], path, &fd, 2000);
	t0 = now_s();
	pthread_mutex_lock(&req_lock);
	r[5].interrupted = true;
	pthread_mutex_unlock(&req_lock);
	ok(res[5] == EVENTS_PARKED && fake_wait(&r[5], 2000) == -EINTR &&
	   now_s() - t0 < TIMEOUT_S * 0.9, "an interrupted parked change ends EINTR (%.2f s)",
	   now_s() - t0);
	hook_close(&w);
	for (int i = 0; i < 6; i++)
		inode_forget(in[i], 1);
}

#define PD HSMFS_MASK(HSMFS_EV_PRE_DIR)
#define ORIGIN "http://127.0.0.1:1/listed/"

static void lazy_dirs(void)
{
	/* what the origin lists, first and at the refresh (hsmfs-http's lines) */
	static const char first[] =
		"{\"path\": \"keep\", \"size\": 100, \"version\": \"v1\", \"mtime\": 1700000000, "
		"\"url\": \"" ORIGIN "keep\"}\n"
		"{\"path\": \"chg\", \"size\": 200, \"version\": \"v1\", \"url\": \"" ORIGIN "chg\"}\n"
		"{\"path\": \"drop\", \"size\": 300, \"version\": \"v1\", \"url\": \"" ORIGIN "drop\"}\n"
		"{\"path\": \"dirty-chg\", \"size\": 400, \"version\": \"v1\", "
		"\"url\": \"" ORIGIN "dirty-chg\"}\n"
		"{\"path\": \"dirty-drop\", \"size\": 500, \"version\": \"v1\", "
		"\"url\": \"" ORIGIN "dirty-drop\"}\n"
		"{\"path\": \"dirty-gone\", \"size\": 800, \"version\": \"v1\", "
		"\"url\": \"" ORIGIN "dirty-gone\"}\n"
		"{\"path\": \"unlinked\", \"size\": 600, \"version\": \"v1\", "
		"\"url\": \"" ORIGIN "unlinked\"}\n"
		"{\"path\": \"empty\", \"size\": 0, \"url\": \"" ORIGIN "empty\"}\n"
		"{\"path\": \"sub\", \"type\": \"dir\", \"url\": \"" ORIGIN "sub/\"}\n";
	static const char second[] =
		"{\"path\": \"keep\", \"size\": 100, \"version\": \"v1\", \"mtime\": 1700000000, "
		"\"url\": \"" ORIGIN "keep\"}\n"
		"{\"path\": \"chg\", \"size\": 250, \"version\": \"v2\", \"url\": \"" ORIGIN "chg\"}\n"
		"{\"path\": \"dirty-chg\", \"size\": 450, \"version\": \"v2\", "
		"\"url\": \"" ORIGIN "dirty-chg\"}\n"
		"{\"path\": \"unlinked\", \"size\": 650, \"version\": \"v2\", "
		"\"url\": \"" ORIGIN "unlinked\"}\n"
		"{\"path\": \"empty\", \"size\": 0, \"url\": \"" ORIGIN "empty\"}\n"
		"{\"path\": \"sub\", \"type\": \"dir\", \"url\": \"" ORIGIN "sub/\"}\n"
		"{\"path\": \"new\", \"size\": 700, \"version\": \"v1\", \"url\": \"" ORIGIN "new\"}\n";
	struct fake_req r = { .uid = 2000, .pid = 20 }, r2 = { .uid = 2000, .pid = 21 };
	struct inode *d, *denied, *dd, *dc, *dg;
	struct stat st, keep_st, chg_st, dc_st, dd_st, dg_st;
	char path[HSMFS_MAX_PATH + 1], back[8];
	struct proto_event ev;
	struct meta_file f;
	struct names_user u;
	struct hook_conn h;
	int fd, res;

	ok(!hook_connect(HSMFS_KIND_FILL, PA | PD, "lister", &h), "a fill hook of PRE_DIR joins");
	d = lazy_dir("listed", ORIGIN);
	ok(d && state_of("listed") == META_DIR_UNLISTED && !strcmp(names_in("listed"), ""),
	   "an unlisted directory, empty in the store");
	if (!ok(d && !events_dir_known(d), "its names are not known")) {
		hook_close(&h);
		return;
	}

	/*
	 * The first look lists it; a concurrent one waits for that listing.
	 * Looks at names come with a FUSE request (there is no waiting in
	 * the calling thread here): they park.
	 */
	res = events_dir(d, (struct front_req *)&r, fake_cont, &r);
	ok(res == EVENTS_PARKED && !hook_next(&h, &ev, path, &fd, 2000) &&
	   ev.type == HSMFS_EV_PRE_DIR && fd >= 0 && !strcmp(path, "listed") &&
	   ev.origin.len == strlen(ORIGIN) && !memcmp(ev.origin.p, ORIGIN, ev.origin.len),
	   "the first look parks and raises PRE_DIR to the fill hook, with a descriptor, the "
	   "path and the directory's origin");
	res = events_dir(d, (struct front_req *)&r2, fake_cont, &r2);
	ok(res == EVENTS_PARKED, "a second look meanwhile parks too (%d)", res);
	{
		struct proto_event ev2;
		int fd2;

		ok(hook_next(&h, &ev2, path, &fd2, 200) == -ETIMEDOUT,
		   "and asks for no listing of its own");
	}
	ok(fake_wait(&r, 100) == 1 && fake_wait(&r2, 0) == 1 && !strcmp(names_in("listed"), ""),
	   "nothing is shown before the hook answers");
	ok(pwrite(fd, first, strlen(first), 0) == (ssize_t)strlen(first),
	   "the hook writes the listing");
	close(fd);
	hook_answer(&h, ev.id, 0, 0, 0, 0);
	ok(fake_wait(&r, 2000) == 0 && fake_wait(&r2, 2000) == 0 && r.calls == 1 &&
	   r2.calls == 1, "allowed: both looks go on, once each, when it is committed");
	ok(!strcmp(names_in("listed"),
		   "chg dirty-chg dirty-drop dirty-gone drop empty keep sub unlinked "),
	   "the store holds exactly the listed names (%s)", names_in("listed"));
	ok(is_placeholder("listed/keep", 100, "v1") && is_placeholder("listed/chg", 200, "v1") &&
	   is_placeholder("listed/drop", 300, "v1") &&
	   is_placeholder("listed/unlinked", 600, "v1"),
	   "each file is a placeholder of its listed size and version");
	res = row_of("listed/keep", &keep_st, &f);
	ok(!res && f.origin && !strcmp(f.origin, ORIGIN "keep") &&
	   keep_st.st_mtime == 1700000000 && (keep_st.st_mode & 07777) == 0644,
	   "with its url as origin, its mtime, mode 0644");
	if (!res)
		meta_file_free(&f);
	ok(state_of("listed/empty") == META_RESIDENT &&
	   !fstatat(store.root_fd, "listed/empty", &st, 0) && st.st_size == 0,
	   "an empty file is resident");
	res = row_of("listed/sub", &st, &f);
	ok(!res && S_ISDIR(st.st_mode) && f.state == META_DIR_UNLISTED && f.origin &&
	   !strcmp(f.origin, ORIGIN "sub/"), "a directory is unlisted, with its url");
	if (!res)
		meta_file_free(&f);
	ok(state_of("listed") == META_DIR_LISTED && events_dir_known(d),
	   "the directory is listed, in the database and in memory");
	memset(&r, 0, sizeof(r));
	r.uid = 2000;
	res = events_dir(d, (struct front_req *)&r, fake_cont, &r);
	ok(res == 0 && hook_next(&h, &ev, path, &fd, 200) == -ETIMEDOUT && r.calls == 0,
	   "a later look goes on at once and asks nobody (%d)", res);

	/* a deny fails the look with the hook's errno and makes no names */
	denied = lazy_dir("denied", ORIGIN "denied/");
	memset(&r2, 0, sizeof(r2));
	r2.uid = 2000;
	res = events_dir(denied, (struct front_req *)&r2, fake_cont, &r2);
	ok(res == EVENTS_PARKED &&
	   !list_answer(&h, "denied", ORIGIN "denied/",
			"{\"path\": \"x\", \"size\": 1, \"url\": \"" ORIGIN "denied/x\"}\n", EACCES),
	   "a PRE_DIR the hook writes a listing for, and denies");
	ok(fake_wait(&r2, 2000) == -EACCES, "the look fails with the hook's errno");
	ok(!strcmp(names_in("denied"), "") && state_of("denied") == META_DIR_UNLISTED &&
	   !events_dir_known(denied), "no names are made: the directory stays unlisted");
	memset(&r2, 0, sizeof(r2));
	r2.uid = 2000;
	res = events_dir(denied, (struct front_req *)&r2, fake_cont, &r2);
	ok(res == EVENTS_PARKED &&
	   !list_answer(&h, "denied", ORIGIN "denied/",
			"{\"path\": \"x\", \"size\": 1}\n{\"path\": \"a/b\", \"size\": 1}\n", 0),
	   "the next look asks again; the hook allows a listing with a path in it");
	ok(fake_wait(&r2, 2000) == -EIO && !strcmp(names_in("denied"), "") &&
	   state_of("denied") == META_DIR_UNLISTED,
	   "a bad listing fails the look with EIO and makes no names either");
	memset(&r2, 0, sizeof(r2));
	r2.uid = 2000;
	res = events_dir_refresh(denied, (struct front_req *)&r2, fake_cont, &r2);
	ok(res == EVENTS_UNLISTED && r2.calls == 0,
	   "a refresh of an unlisted directory leaves it to its first look (%d)", res);
	res = events_dir_refresh(inode_root(), (struct front_req *)&r2, fake_cont, &r2);
	ok(res == -ENODATA && r2.calls == 0,
	   "a refresh of a directory that is not lazy: ENODATA (%d)", res);

	/*
	 * The user changes three files (not open any more): dirty-chg and
	 * dirty-gone are written and synced (their rows say dirty; the
	 * kernel forgets the inodes), dirty-drop is written and still known
	 * to the kernel (dirty in memory, perhaps not in its row yet).
	 */
	ok(!inode_lookup(d, "dirty-chg", &dc_st, &dc) && !events_load(dc) &&
	   !user_writes(dc, "listed/dirty-chg", 0, "mine") && !events_fsync(dc) &&
	   state_of("listed/dirty-chg") == META_DIRTY,
	   "the user writes dirty-chg: its row is dirty once synced");
	inode_forget(dc, 1);
	ok(!inode_lookup(d, "dirty-gone", &dg_st, &dg) && !events_load(dg) &&
	   !user_writes(dg, "listed/dirty-gone", 5, "gone") && !events_fsync(dg) &&
	   state_of("listed/dirty-gone") == META_DIRTY,
	   "the user writes dirty-gone: its row is dirty once synced");
	inode_forget(dg, 1);
	ok(!inode_lookup(d, "dirty-drop", &dd_st, &dd) && !events_load(dd) &&
	   !user_writes(dd, "listed/dirty-drop", 10, "ours"),
	   "the user writes dirty-drop, and keeps it in the kernel's cache");
	fstatat(store.root_fd, "listed/chg", &chg_st, 0);

	/* the refresh: the origin drops three names, adds one, changes three */
	pthread_mutex_lock(&inval_lock);
	invalidated[0] = 0;
	pthread_mutex_unlock(&inval_lock);
	memset(&r, 0, sizeof(r));
	r.uid = 2000;
	res = events_dir_refresh(d, (struct front_req *)&r, fake_cont, &r);
	ok(res == EVENTS_PARKED && !hook_next(&h, &ev, path, &fd, 2000) &&
	   ev.type == HSMFS_EV_PRE_DIR && !strcmp(path, "listed"),
	   "a refresh of the listed directory asks the hook for a listing (%d)", res);
	/* meanwhile the user removes a name the refresh would make again */
	names_user_begin(&u, inode_ino(d), "unlinked", 0, NULL);
	fstatat(store.root_fd, "listed/unlinked", &st, 0);
	res = unlinkat(store.root_fd, "listed/unlinked", 0);
	names_user_end(&u);
	events_unlinked(NULL, st.st_ino, true, NULL);
	pwrite(fd, second, strlen(second), 0);
	close(fd);
	hook_answer(&h, ev.id, 0, 0, 0, 0);
	ok(!res && fake_wait(&r, 3000) == 0, "the user removes 'unlinked' meanwhile; the "
	   "refresh is allowed and committed");
	ok(!strcmp(names_in("listed"), "chg dirty-chg dirty-drop dirty-gone empty keep new sub "),
	   "names: the added appears, the dropped clean one goes (%s)", names_in("listed"));
	ok(is_placeholder("listed/new", 700, "v1"), "the added is a placeholder of its size");
	ok(is_placeholder("listed/chg", 250, "v2") &&
	   !fstatat(store.root_fd, "listed/chg", &st, 0) && st.st_ino != chg_st.st_ino,
	   "the changed is a new placeholder of the new size and version");
	ok(!fstatat(store.root_fd, "listed/keep", &st, 0) && st.st_ino == keep_st.st_ino &&
	   is_placeholder("listed/keep", 100, "v1"), "the unchanged is left as it was");
	res = row_of("listed/dirty-chg", &st, &f);
	ok(!res && st.st_ino == dc_st.st_ino && f.state == META_DIRTY && f.version &&
	   !strcmp(f.version, "v1") && st.st_size == 400 &&
	   !store_bytes("listed/dirty-chg", 0, back, 4) && !memcmp(back, "mine", 4),
	   "changed at the origin, the user's dirty file is kept as the user left it");
	if (!res)
		meta_file_free(&f);
	ok(!fstatat(store.root_fd, "listed/dirty-drop", &st, 0) && st.st_ino == dd_st.st_ino &&
	   !store_bytes("listed/dirty-drop", 10, back, 4) && !memcmp(back, "ours", 4),
	   "dropped at the origin, the user's changed file stays with the user's bytes");
	ok(!fstatat(store.root_fd, "listed/dirty-gone", &st, 0) && st.st_ino == dg_st.st_ino &&
	   state_of("listed/dirty-gone") == META_DIRTY &&
	   !store_bytes("listed/dirty-gone", 5, back, 4) && !memcmp(back, "gone", 4),
	   "and so does one the kernel forgot, by its dirty row");
	ok(fstatat(store.root_fd, "listed/unlinked", &st, 0) < 0 && errno == ENOENT,
	   "the name the user removed during the refresh is not made again");
	ok(was_invalidated("chg") && was_invalidated("drop") && was_invalidated("new") &&
	   !was_invalidated("keep") && !was_invalidated("dirty-chg") &&
	   !was_invalidated("dirty-drop") && !was_invalidated("dirty-gone") &&
	   !was_invalidated("unlinked"),
	   "the kernel is told of the names that changed, only those (%s)", invalidated);
	ok(state_of("listed") == META_DIR_LISTED && events_dir_known(d),
	   "the directory is still listed");
	hook_close(&h);
	inode_forget(dd, 1);
	inode_forget(denied, 1);
	inode_forget(d, 1);
}

/* --- archive --- */

/* The archive of in asked, as hsmfsctl archive asks it: r's continuation gets it. */
static int ask_archive(struct inode *in, struct fake_req *r)
{
	memset(r, 0, sizeof(*r));
	return events_archive(in, (struct front_req *)r, fake_cont, r);
}

/* The state of in: its row's, as the writer committed it. */
static bool row_says(const char *path, uint32_t state, const char *version)
{
	struct meta_file f;
	struct stat st;
	bool yes;

	if (row_of(path, &st, &f))
		return false;
	yes = f.state == state && (!version || (f.version && !strcmp(f.version, version)));
	meta_file_free(&f);
	return yes;
}

static void archiving(void)
{
	struct hook_conn a, a2, w;
	struct proto_event ev;
	char path[HSMFS_MAX_PATH + 1], got[64];
	struct fake_req r;
	struct inode *in;
	int fd, res;

	in = placeholder("arch", 8);
	ok(in && !user_writes(in, "arch", 0, "mine....") && !events_fsync(in) &&
	   row_says("arch", META_DIRTY, "v1"), "a file changed through the mount is dirty");
	ok(ask_archive(in, &r) == EVENTS_PARKED && fake_wait(&r, 3000) == -ENOTCONN,
	   "with no archive hook its archive fails at once: ENOTCONN");

	ok(!hook_connect(HSMFS_KIND_FILL, HSMFS_MASK(HSMFS_EV_ARCHIVE), "archiver", &a) &&
	   !hook_connect(HSMFS_KIND_WATCH, HSMFS_MASK(HSMFS_EV_ARCHIVE), "veto", &w),
	   "an archive hook and a watcher of archives join");
	res = ask_archive(in, &r);
	ok(res == EVENTS_PARKED && !hook_next(&a, &ev, path, &fd, 2000) &&
	   ev.type == HSMFS_EV_ARCHIVE && fd >= 0 && ev.file_size == 8 &&
	   !strcmp(path, "arch") && ev.version.len == 2 && !memcmp(ev.version.p, "v1", 2),
	   "ARCHIVE: a descriptor, the size, path and recorded version");
	ok(pread(fd, got, 8, 0) == 8 && !memcmp(got, "mine....", 8) &&
	   pwrite(fd, "x", 1, 0) < 0, "its descriptor reads the snapshot, and only reads");
	close(fd);
	hook_archived(&a, ev.id, "v2");
	hook_answer(&a, ev.id, 0, 0, 0, 0);
	ok(fake_wait(&r, 300) == 1, "the archive hook's allow alone does not decide it");
	ok(!hook_next(&w, &ev, path, &fd, 2000) && ev.type == HSMFS_EV_ARCHIVE && fd < 0,
	   "the watcher has it too, without a descriptor");
	hook_answer(&w, ev.id, EACCES, 0, 0, 0);
	ok(fake_wait(&r, 3000) == -EACCES && row_says("arch", META_DIRTY, NULL),
	   "the watcher's deny wins: not archived, still dirty");
	hook_close(&w);

	/* an allow without ARCHIVED: the hook did not say where the bytes are */
	ask_archive(in, &r);
	hook_next(&a, &ev, path, &fd, 2000);
	close(fd);
	hook_answer(&a, ev.id, 0, 0, 0, 0);
	ok(fake_wait(&r, 3000) == -EPROTO && row_says("arch", META_DIRTY, NULL),
	   "an allow without ARCHIVED is not an archive (EPROTO)");

	/* the archive hook leaves mid-upload: another gets the same snapshot */
	ask_archive(in, &r);
	hook_next(&a, &ev, path, &fd, 2000);
	close(fd);
	hook_close(&a);
	ok(!hook_connect(HSMFS_KIND_FILL, HSMFS_MASK(HSMFS_EV_ARCHIVE), "archiver2", &a2) &&
	   !hook_next(&a2, &ev, path, &fd, 2000) && ev.type == HSMFS_EV_ARCHIVE &&
	   pread(fd, got, 8, 0) == 8 && !memcmp(got, "mine....", 8),
	   "its hook left: the next archive hook gets the same snapshot");
	close(fd);
	/* a user change after the snapshot: the version is recorded, the file stays dirty */
	ok(!user_writes(in, "arch", 0, "MINE"), "the user writes meanwhile");
	hook_archived(&a2, ev.id, "v3");
	hook_answer(&a2, ev.id, 0, 0, 0, 0);
	ok(!hook_next(&a2, &ev, path, &fd, 3000) && pread(fd, got, 8, 0) == 8 &&
	   !memcmp(got, "MINE....", 8) && ev.version.len == 2 && !memcmp(ev.version.p, "v3", 2),
	   "changed after its snapshot: archived again, the later bytes, on the version just made");
	close(fd);
	ok(fake_wait(&r, 200) == 1, "the request waits for that one");
	hook_archived(&a2, ev.id, "v4");
	hook_answer(&a2, ev.id, 0, 0, 0, 0);
	ok(fake_wait(&r, 3000) == 0 && row_says("arch", META_RESIDENT, "v4"),
	   "then it is clean, its row resident at the new version");
	/*
	 * Its caller interrupted (Ctrl-C, hsmfsctl's --timeout): answered
	 * EINTR at the next tick, not when the upload ends; the upload goes on.
	 */
	ok(!user_writes(in, "arch", 0, "Mine...."), "changed once more");
	ask_archive(in, &r);
	ok(!hook_next(&a2, &ev, path, &fd, 2000) && ev.type == HSMFS_EV_ARCHIVE,
	   "its upload begins");
	close(fd);
	pthread_mutex_lock(&req_lock);
	r.interrupted = true;
	pthread_mutex_unlock(&req_lock);
	ok(fake_wait(&r, 1000) == -EINTR, "its caller interrupted: answered EINTR at once, "
	   "the upload under way");
	hook_archived(&a2, ev.id, "v4b");
	hook_answer(&a2, ev.id, 0, 0, 0, 0);
	for (int i = 0; i < 300 && !row_says("arch", META_RESIDENT, "v4b"); i++)
		usleep(10000);
	ok(row_says("arch", META_RESIDENT, "v4b") && r.calls == 1,
	   "the upload's answer is read: archived, and the caller answered once (%d)", r.calls);
	/*
	 * The session ends (an unmount) while the upload runs: requests'
	 * waits end, but the upload is the daemon's, it finishes
	 * (t0460 lost it now and then under load: the timer failed it EIO).
	 */
	ok(!user_writes(in, "arch", 0, "MINE...."), "changed again");
	ask_archive(in, &r);
	ok(!hook_next(&a2, &ev, path, &fd, 2000) && ev.type == HSMFS_EV_ARCHIVE,
	   "its upload begins");
	close(fd);
	atomic_store(&session_ended, true);
	ok(fake_wait(&r, 600) == 1, "unmounted: the upload under way is not failed (6 timer ticks)");
	hook_archived(&a2, ev.id, "v5");
	hook_answer(&a2, ev.id, 0, 0, 0, 0);
	ok(fake_wait(&r, 3000) == 0 && row_says("arch", META_RESIDENT, "v5"),
	   "its answer is read: archived");
	atomic_store(&session_ended, false);

	ok(ask_archive(in, &r) == 0, "a clean file's archive is done at once");

	/* a conflict: kept, shown, not archived again */
	ok(!user_writes(in, "arch", 0, "again"), "the user changes it again");
	ask_archive(in, &r);
	hook_next(&a2, &ev, path, &fd, 2000);
	close(fd);
	hook_answer(&a2, ev.id, ESTALE, 0, 0, 0);
	ok(fake_wait(&r, 3000) == -ESTALE, "a deny with ESTALE is a conflict");
	ok(ask_archive(in, &r) == -ESTALE, "in conflict, it is not archived again");
	ok(!events_fsync(in) && !store_bytes("arch", 0, got, 5) && !memcmp(got, "again", 5),
	   "and its bytes are the user's");
	{
		struct meta_file f;
		struct stat st;

		res = row_of("arch", &st, &f);
		ok(!res && f.state == META_DIRTY && (f.flags & META_F_CONFLICT),
		   "its row says dirty, in conflict");
		if (!res)
			meta_file_free(&f);
	}
	memset(&r, 0, sizeof(r));
	res = events_resolve(in, (struct front_req *)&r, fake_cont, &r);
	ok(res == EVENTS_PARKED && !hook_next(&a2, &ev, path, &fd, 2000) &&
	   (ev.flags & HSMFS_EVENT_OVERWRITE), "resolved for the local bytes: an unconditional archive");
	close(fd);
	hook_archived(&a2, ev.id, "v5");
	hook_answer(&a2, ev.id, 0, 0, 0, 0);
	ok(fake_wait(&r, 3000) == 0 && row_says("arch", META_RESIDENT, "v5"), "and clean after");
	hook_close(&a2);
	inode_forget(in, 1);
}

/*
 * Names (the ops table) applied at a sync, in order: a removal, then a
 * rename whose answer moves the file's recorded object; a removal the
 * hook calls a conflict is dropped, counted, and does not stop the ops
 * after it.  Content archives the sync also asks for are denied here.
 */
/*
 * A removed file's inode still held (a queue's reference) after the
 * kernel forgot it, while the store gives its number to a new file: the
 * new file gets an inode, a node id and a state of its own (inode.h).
 * Before, the table found the removed file's inode by the number and the
 * new file took over its node id and its state (a placeholder's ranges:
 * reads of zeros, or fills of another file's bytes).
 */
static void number_reused(void)
{
	struct inode *a = placeholder("reuse-a", 5000), *held, *b = NULL;
	struct stat st;
	uint64_t a_ino;

	if (!ok(a != NULL && inode_state(a) != NULL, "a placeholder with its state loaded"))
		return;
	a_ino = inode_ino(a);
	inode_ref(a); /* a queue's hold */
	held = inode_hold_name(inode_root(), "reuse-a", true, &st);
	ok(held == a && unlinkat(store.root_fd, "reuse-a", 0) == 0, "removed from the store");
	events_unlinked(held, st.st_ino, false, NULL);
	inode_name_gone(held, inode_root(), "reuse-a", st.st_nlink);
	inode_release(held);
	inode_forget(a, 1); /* the kernel forgot it: its pinned descriptor closes */
	for (int i = 0; i < 50 && !b; i++) {
		char name[32];

		snprintf(name, sizeof(name), "reuse-b%d", i);
		b = resident(name, 100);
		if (b && inode_ino(b) != a_ino) {
			inode_forget(b, 1);
			unlinkat(store.root_fd, name, 0);
			b = NULL;
		}
	}
	if (!b) {
		ok(1, "# SKIP the store gave no new file the removed one's number");
	} else {
		ok(b != a && inode_nodeid(b) != inode_nodeid(a),
		   "a new file of a removed file's number has an inode and a node id of its own");
		ok(events_load(b) == 0 && inode_state(b) == NULL,
		   "and no state (a plain file), not the removed placeholder's");
		ok(inode_fd_get(a) < 0, "the removed file's node id reaches nothing (ESTALE)");
		inode_forget(b, 1);
	}
	inode_release(a);
}

static void names(void)
{
	char path[HSMFS_MAX_PATH + 1], seen[1024] = "";
	struct events_stats st0, st1;
	struct proto_event ev;
	struct meta_file f;
	struct hook_conn a;
	struct fake_req r;
	struct inode *in;
	struct stat sst;
	uint64_t n = 1;
	int fd;

	in = placeholder("ren", 4);
	ok(in != NULL && !hook_connect(HSMFS_KIND_FILL, HSMFS_MASK(HSMFS_EV_ARCHIVE) |
				       HSMFS_MASK(HSMFS_EV_ARCHIVE_NAME), "namer", &a),
	   "a file with an origin, and an archive hook of names");
	ok(!meta_op_add(meta, META_OP_DELETE, 991, "gone", "http://o/gone", "g1") &&
	   !meta_op_add(meta, META_OP_MKDIR, 0, "d/e", NULL, NULL) &&
	   !meta_op_add(meta, META_OP_RENAME, inode_ino(in), "ren2", NULL, NULL) &&
	   !meta_op_add(meta, META_OP_RMDIR, 0, "d", NULL, NULL) &&
	   !meta_op_add(meta, META_OP_DELETE, 992, "theirs", "http://o/theirs", "t1"),
	   "five name changes recorded: a removal, a directory made, a rename, a directory "
	   "removed, a removal");
	elock();
	st0 = S.st;
	eunlock();
	memset(&r, 0, sizeof(r));
	ok(events_sync((struct front_req *)&r, true, fake_cont, &r) == EVENTS_PARKED, "a sync");
	for (int i = 0; i < 20 && fake_wait(&r, 1) == 1; i++) {
		if (hook_next(&a, &ev, path, &fd, 2000))
			break;
		if (fd >= 0)
			close(fd);
		if (ev.type != HSMFS_EV_ARCHIVE_NAME) {
			hook_answer(&a, ev.id, EACCES, 0, 0, 0);
			continue;
		}
		if (strlen(seen) < sizeof(seen) - 256)
			snprintf(seen + strlen(seen), 256, "%llu:%.60s:%.*s:%.*s ",
				 (unsigned long long)ev.start, path,
				 (int)(ev.origin.len < 60 ? ev.origin.len : 60), ev.origin.p,
				 (int)(ev.version.len < 60 ? ev.version.len : 60), ev.version.p);
		if (!strcmp(path, "ren2"))
			hook_archived_at(&a, ev.id, "r2", "http://o/ren2");
		/* a directory refused (an origin without them): dropped, not retried */
		hook_answer(&a, ev.id, !strcmp(path, "theirs") ? ESTALE :
				       !strcmp(path, "d/e") ? EINVAL : 0, 0, 0, 0);
	}
	fake_wait(&r, 3000);
	ok(!strcmp(seen, "1:gone:http://o/gone:g1 3:d/e:: 2:ren2:http://127.0.0.1:1/x:v1 "
			 "4:d:: 1:theirs:http://o/theirs:t1 "),
	   "the hook is asked in order, each with its object and version, directories "
	   "with their path alone, a refused one once (%s)", seen);
	if (meta_op_count(meta, &n))
		n = UINT64_MAX;
	ok(n == 0, "every op is done or dropped (%llu left)", (unsigned long long)n);
	ok(!row_of("ren", &sst, &f) && f.origin && !strcmp(f.origin, "http://o/ren2") &&
	   f.version && !strcmp(f.version, "r2"), "the renamed file's object is recorded where "
	   "the hook moved it");
	meta_file_free(&f);
	elock();
	st1 = S.st;
	eunlock();
	ok(st1.conflicts == st0.conflicts + 1, "the removal the origin had changed: a conflict");
	hook_close(&a);
	inode_forget(in, 1);
}

int main(void)
{
	int res;

	setvbuf(stdout, NULL, _IOLBF, 0); /* a crash keeps the lines before it */
	log_set_level(LOG_LVL_ERR);
	res = start_engine();
	if (!ok(res == 0, "the engine starts on a store in %s (%d)", dir, res))
		return tap_done();
	decision_rule();
	fills();
	front_end();
	front_without_interrupts();
	parking();
	lazy_dirs();
	archiving();
	names();
	number_reused();
	hooks_stop();
	events_shutdown();
	cache_shutdown();
	meta_close(meta);
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)!system(cmd);
	}
	return tap_done();
}
