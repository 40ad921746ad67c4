/*
 * archive.c - hsmfsctl archive, resolve, sync and unmount: a mount's
 * changes sent to its origin, asked through the mount's virtual extended
 * attributes (user.hsmfs.archive and the resolve ones of a file,
 * user.hsmfs.sync of the root: hsmfs(8)), and a mount's end that says
 * whether they got there.
 *
 * A wait is bounded by --timeout: SIGALRM, with no SA_RESTART and again
 * every DEADLINE_AGAIN_MS after the deadline (so that a getxattr begun
 * just after the first one is interrupted too), makes the kernel send the
 * daemon an interrupt, which it answers with EINTR at once (archive.h:
 * archive_interrupts; the uploads go on).  So a command returns when it
 * was told to, not when the origin is done.  Ctrl-C works the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ctl.h"
#include "meta.h"
#include "store.h"

/* ------------------------------------------------------------ deadline */

#define DEADLINE_AGAIN_MS 100
#define UNMOUNT_SYNC_S 60.0 /* hsmfsctl unmount's sync, unless --timeout */
#define UNMOUNT_SHOWN 10    /* paths named of what is not at the origin */

static volatile sig_atomic_t timed_out;

static void on_alarm(int sig)
{
	(void)sig;
	timed_out = 1;
}

/* What follows ends by secs from now (0: no bound). */
static void deadline_arm(double secs)
{
	struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART: EINTR */
	struct itimerval it = { .it_interval = { 0, DEADLINE_AGAIN_MS * 1000 } };

	if (secs <= 0)
		return;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	it.it_value.tv_sec = (time_t)secs;
	it.it_value.tv_usec = (suseconds_t)((secs - (double)(time_t)secs) * 1e6);
	if (!it.it_value.tv_sec && !it.it_value.tv_usec)
		it.it_value.tv_usec = 1;
	setitimer(ITIMER_REAL, &it, NULL);
}

static void deadline_disarm(void)
{
	struct itimerval it = { 0 };

	setitimer(ITIMER_REAL, &it, NULL);
}

/* --timeout's SECONDS: a number >= 0, or -1. */
static double parse_secs(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	return *s && !*end && v >= 0 && v < 1e7 ? v : -1;
}

/* ------------------------------------------------------------ archive */

struct archive_run {
	const char *verb;    /* "archive", "resolve" */
	const char *xattr;   /* user.hsmfs.archive, user.hsmfs.resolve_local */
	bool tty;
	bool take;           /* resolve --take-origin */
	double timeout;      /* --timeout, 0: none */
	unsigned done, failed, skipped;
};

static const char *archive_why(int e)
{
	switch (e) {
	case ESTALE: return "conflict: the origin changed under the local change "
			    "(hsmfsctl resolve --keep-local to overwrite it, "
			    "--take-origin to drop it)";
	case ENOTCONN: return "no archive hook is connected to the mount";
	case EOPNOTSUPP: return "not an hsmfs mount";
	case ESHUTDOWN: return "the mount is shutting down";
	default: return strerror(e);
	}
}

/*
 * The mount's hook's last line of output, as ", the hook said: ..." into
 * buf, or "" (none, or not the caller's to read): an origin's own reason
 * (Couldn't connect to server) for an error the kernel can only call EIO.
 */
static const char *hook_said(const char *path, int e, char *buf, size_t len)
{
	char said[512], root[PATH_MAX], rel[PATH_MAX];
	ssize_t n = -1;

	buf[0] = '\0';
	if (e == ESTALE || e == EEXIST || e == EMLINK || e == ENOTCONN || e == EPERM || e == EACCES || e == EINTR ||
	    e == ENODATA || e == ETIMEDOUT)
		return buf;
	if (!mount_of(path, root, sizeof(root), rel, sizeof(rel)))
		n = hgetxattr(root, "user.hsmfs.hook_said", said, sizeof(said) - 1);
	if (n > 0) {
		said[n] = '\0';
		said[strcspn(said, "\n")] = '\0';
		if (said[0])
			snprintf(buf, len, "; the hook said: %s", said);
	}
	return buf;
}

/* One file: 0 archived (or clean), 1 nothing to archive, -1 failed (said why). */
static int archive_one(struct archive_run *r, const char *path)
{
	char val[64], said[600];
	ssize_t n = hgetxattr(path, r->xattr, val, sizeof(val) - 1);

	if (n < 0 && errno == ENODATA && !r->take)
		return 1; /* a plain file: no origin, not made on the mount */
	if (n < 0) {
		int e = errno == ENOTSUP ? EOPNOTSUPP : errno;

		if (r->tty)
			fputc('\n', stderr);
		if (e == EINTR && timed_out) {
			fprintf(stderr, "hsmfsctl: %s '%s': not done within %g s (its upload goes "
					"on)\n", r->verb, path, r->timeout);
			return -1;
		}
		fprintf(stderr, "hsmfsctl: %s '%s': %s%s\n", r->verb, path,
			!r->take ? archive_why(e) :
			e == ENODATA ? "not a file of a directory listed from an origin "
				       "(a file imported or made on the mount has no listing to take)" :
			e == EBUSY ? "open, being changed or being archived: close it and try again" :
				     archive_why(e),
			hook_said(path, e, said, sizeof(said)));
		return -1;
	}
	return 0;
}

static void archive_tree(struct archive_run *r, const char *path, bool recursive, int depth)
{
	struct stat st;
	struct dirent *de;
	DIR *d;
	int res;

	if (timed_out) {
		r->failed++; /* not asked: not done */
		return;
	}
	if (lstat(path, &st)) {
		fprintf(stderr, "hsmfsctl: %s '%s': %s\n", r->verb, path, strerror(errno));
		r->failed++;
		return;
	}
	if (S_ISREG(st.st_mode)) {
		res = archive_one(r, path);
		r->done += res == 0;
		r->failed += res < 0;
		r->skipped += res > 0;
		if (r->tty)
			fprintf(stderr, "\r%s: %u done, %u failed", r->verb, r->done, r->failed);
		return;
	}
	if (!S_ISDIR(st.st_mode) || !recursive || depth > 4096)
		return;
	if (!(d = opendir(path))) {
		fprintf(stderr, "hsmfsctl: %s '%s': %s\n", r->verb, path, strerror(errno));
		r->failed++;
		return;
	}
	while ((de = readdir(d)) && !timed_out) {
		char sub[PATH_MAX];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) < (int)sizeof(sub))
			archive_tree(r, sub, true, depth + 1);
	}
	closedir(d);
}

/*
 * hsmfsctl archive [-r] [--timeout S] PATH...: each changed or new file
 * to its origin; resolve --keep-local|--take-origin PATH...: settle
 * conflicts.
 */
static int archive_paths(int argc, char **argv, bool resolve)
{
	struct archive_run r = { resolve ? "resolve" : "archive",
				 resolve ? "user.hsmfs.resolve_local" : "user.hsmfs.archive",
				 isatty(STDERR_FILENO), false, 0, 0, 0, 0 };
	bool recursive = false;
	unsigned sides = 0;
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!resolve && (!strcmp(argv[i], "-r") || !strcmp(argv[i], "--recursive"))) {
			recursive = true;
		} else if (!strcmp(argv[i], "--timeout") && i + 1 < argc &&
			   (r.timeout = parse_secs(argv[i + 1])) >= 0) {
			i++;
		} else if (resolve && !strcmp(argv[i], "--keep-local")) {
			sides |= 1;
		} else if (resolve && !strcmp(argv[i], "--take-origin")) {
			sides |= 2;
			r.take = true;
			r.xattr = "user.hsmfs.resolve_origin";
		} else {
			fprintf(stderr, "hsmfsctl: %s: unknown option or bad value '%s'\n", r.verb,
				argv[i]);
			return X_USAGE;
		}
	}
	if (resolve && sides != 1 && sides != 2) {
		fprintf(stderr, "hsmfsctl: resolve needs one of --keep-local (the local bytes go "
				"to the origin) and --take-origin (the origin's replace them)\n");
		return X_USAGE;
	}
	if (i == argc) {
		fprintf(stderr, "hsmfsctl: %s needs a path\n", r.verb);
		return X_USAGE;
	}
	deadline_arm(r.timeout);
	for (; i < argc; i++)
		archive_tree(&r, argv[i], recursive, 0);
	deadline_disarm();
	if (r.tty)
		fputc('\n', stderr);
	return r.failed ? X_PARTIAL : X_OK_;
}

/* hsmfsctl archive and resolve: one function, told which */
int cmd_archive(int argc, char **argv)
{
	return archive_paths(argc, argv, false);
}

int cmd_resolve(int argc, char **argv)
{
	return archive_paths(argc, argv, true);
}

/* ---------------------------------------------------------------- sync */

/* Every changed file of mount mnt archived within secs (0: no bound): 0 or an errno. */
static int sync_mount(const char *mnt, double secs)
{
	char val[64];
	int e = 0;

	deadline_arm(secs);
	if (hgetxattr(mnt, "user.hsmfs.sync", val, sizeof(val) - 1) < 0)
		e = errno == ENOTSUP ? EOPNOTSUPP : errno == EINTR && timed_out ? ETIMEDOUT : errno;
	deadline_disarm();
	return e;
}

/* Why sync of mnt failed with e, for "hsmfsctl: sync 'MNT': ...". */
static void sync_say(const char *verb, const char *mnt, int e)
{
	char said[600];

	fprintf(stderr, "hsmfsctl: %s '%s': %s%s\n", verb, mnt,
		e == ENODATA ? "not the root of an hsmfs mount" :
		e == ESTALE ? "a file is in conflict (hsmfsctl status shows which)" :
		e == EMLINK ? "a file has several names (hard links), and the origin holds it "
			      "under one of them only: the mount's log names each" :
		e == EEXIST ? "the origin keeps names the mount removed, holding objects the "
			      "mount does not have (another writer's?): the mount's log names "
			      "each; mend them at the origin and sync again" :
		e == ETIMEDOUT ? "not done within the time given (the uploads go on)" :
		e == EACCES ? "some changed files are other users' (not yours to write): left "
			      "for their owners, root or the mount's owner to archive" :
				 archive_why(e),
		hook_said(mnt, e, said, sizeof(said)));
}

/* hsmfsctl sync [--timeout S] MOUNTPOINT: every changed file archived, or why not. */
int cmd_sync(int argc, char **argv)
{
	double secs = 0;
	int e;

	if (argc == 4 && !strcmp(argv[1], "--timeout") && (secs = parse_secs(argv[2])) >= 0) {
		argv += 2;
		argc -= 2;
	}
	if (argc != 2 || secs < 0) {
		fprintf(stderr, "hsmfsctl: sync needs a mount point (and --timeout SECONDS at "
				"most)\n");
		return X_USAGE;
	}
	e = sync_mount(argv[1], secs);
	if (e) {
		sync_say("sync", argv[1], e);
		return X_PARTIAL;
	}
	return X_OK_;
}

/* ------------------------------------------------------------- unmount */

/* Unmount mnt as mount(8) would for this user: 0, or -1 (said why). */
static int unmount_path(const char *mnt, bool lazy)
{
	static const char *const tools[] = { "fusermount3", "fusermount" };
	int status = 0;

	if (geteuid() == 0) {
		if (!umount2(mnt, lazy ? MNT_DETACH : 0))
			return 0;
		fprintf(stderr, "hsmfsctl: unmount '%s': %s\n", mnt,
			errno == EBUSY ? "busy: a file or directory under it is in use "
					 "(close it, or --lazy)" : strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
		pid_t pid = fork();

		if (pid < 0)
			break;
		if (!pid) {
			if (lazy)
				execlp(tools[i], tools[i], "-u", "-z", mnt, (char *)NULL);
			else
				execlp(tools[i], tools[i], "-u", mnt, (char *)NULL);
			_exit(127);
		}
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
			continue; /* not installed: the older name */
		if (WIFEXITED(status) && !WEXITSTATUS(status))
			return 0;
		break; /* it said why */
	}
	fprintf(stderr, "hsmfsctl: unmount '%s': not unmounted\n", mnt);
	return -1;
}

/*
 * The store's lock, once its daemon has let it go (it exits after the
 * unmount, its last uploads and records done), within secs: the
 * descriptor, or -1 (errno EWOULDBLOCK: still held; ENOENT: no store).
 */
static int store_wait(const char *store, double secs)
{
	char path[PATH_MAX + 32];
	int64_t end = mono_ms() + (int64_t)(secs * 1000);
	int fd;

	snprintf(path, sizeof(path), "%s/%s/lock", store, STORE_STATE_DIR);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (mono_ms() >= end) {
			close(fd);
			errno = EWOULDBLOCK;
			return -1;
		}
		usleep(20000);
	}
	return fd;
}

/*
 * What the store still holds for its origin: files changed or new and
 * not archived (their number, and the first UNMOUNT_SHOWN paths into
 * shown) and name changes not yet applied.  0 or -1.
 */
static void print_parked(void *arg, const char *path, const char *why)
{
	(void)arg;
	printf("%-20s %14s  %s (%s)\n", "differs", "-", path, why);
}

static int store_pending(const char *store, uint64_t *files, uint64_t *names,
			 char *shown[UNMOUNT_SHOWN], bool print)
{
	char path[PATH_MAX + 32];
	struct meta *m = NULL;
	uint64_t after = 0, parked = 0;
	int res;

	*files = *names = 0;
	snprintf(path, sizeof(path), "%s/%s/meta.db", store, STORE_STATE_DIR);
	res = meta_open(path, &m);
	for (;;) {
		struct meta_victim *v = NULL;
		size_t n = 0;

		if (res || (res = meta_dirty(m, 256, after, &v, &n)))
			break;
		for (size_t i = 0; i < n; i++) {
			struct meta_file f;

			if (shown && *files + i < UNMOUNT_SHOWN)
				shown[*files + i] = strdup(v[i].path ? v[i].path : "?");
			if (print && !meta_get(m, v[i].ino, &f)) {
				printf("%-20s %14llu  %s\n",
				       f.flags & META_F_CONFLICT ? "dirty,conflict" :
				       f.flags & META_F_NEW ? "dirty,new" : "dirty",
				       (unsigned long long)f.size, v[i].path ? v[i].path : "?");
				meta_file_free(&f);
			}
		}
		*files += n;
		if (n)
			after = v[n - 1].ino; /* the next page (meta.h) */
		meta_victims_free(v, n);
		if (n < 256)
			break;
	}
	if (!res)
		res = meta_op_count(m, names);
	if (!res)
		res = meta_parked_count(m, &parked);
	if (!res && print)
		res = meta_parked_list(m, print_parked, NULL);
	*names += parked;
	meta_close(m);
	return res ? -1 : 0;
}

/* hsmfsctl status -s STORE: what an unmounted store holds for its origin. */
int cmd_status_store(const char *store)
{
	uint64_t files, names;
	int lockfd = store_wait(store, 0);

	if (lockfd < 0) {
		fprintf(stderr, "hsmfsctl: status -s '%s': %s\n", store,
			errno == ENOENT ? "not an hsmfs store" :
			errno == EWOULDBLOCK ? "mounted: ask hsmfsctl status on the mount" :
					       strerror(errno));
		return X_STORE;
	}
	printf("%-20s %14s  %s\n", "STATE", "SIZE", "PATH");
	if (store_pending(store, &files, &names, NULL, true)) {
		fprintf(stderr, "hsmfsctl: status -s '%s': cannot read its database\n", store);
		close(lockfd);
		return X_STORE;
	}
	close(lockfd);
	printf("%llu file%s and %llu name change%s not at the origin\n",
	       (unsigned long long)files, files == 1 ? "" : "s", (unsigned long long)names,
	       names == 1 ? "" : "s");
	return X_OK_;
}

/*
 * hsmfsctl unmount [--timeout S] [--lazy] MOUNTPOINT: a sync bounded by
 * S (60 s; 0: none at all), the unmount, then the store's own word on
 * what is not at the origin once its daemon has ended: exit 0 (every
 * change there), 4 (some not: named), 3 (not unmounted).
 */
int cmd_unmount(int argc, char **argv)
{
	double secs = UNMOUNT_SYNC_S;
	const char *mnt = NULL;
	char store[PATH_MAX], *shown[UNMOUNT_SHOWN] = { 0 };
	uint64_t files = 0, names = 0;
	bool lazy = false, known = false;
	ssize_t n;
	int e, lockfd;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--timeout") && i + 1 < argc &&
		    (secs = parse_secs(argv[i + 1])) >= 0) {
			i++;
		} else if (!strcmp(argv[i], "--lazy") || !strcmp(argv[i], "-z")) {
			lazy = true;
		} else if (argv[i][0] != '-' && !mnt) {
			mnt = argv[i];
		} else {
			mnt = NULL;
			break;
		}
	}
	if (!mnt) {
		fprintf(stderr, "hsmfsctl: unmount needs a mount point (and --timeout SECONDS, "
				"--lazy)\n");
		return X_USAGE;
	}
	/* the root of a mount: its sync attribute answers a size query at once */
	if (hgetxattr(mnt, "user.hsmfs.sync", NULL, 0) < 0) {
		fprintf(stderr, "hsmfsctl: unmount '%s': %s\n", mnt,
			errno == ENODATA ? "not the root of an hsmfs mount" :
			errno == ENOTSUP ? "not an hsmfs mount" : strerror(errno));
		return X_STORE;
	}
	n = hgetxattr(mnt, "user.hsmfs.store", store, sizeof(store) - 1);
	store[n > 0 ? n : 0] = '\0';
	e = secs > 0 ? sync_mount(mnt, secs) : 0;
	if (e)
		sync_say("unmount: sync", mnt, e);
	if (unmount_path(mnt, lazy))
		return X_STORE;
	/* the daemon's last uploads and records: its store, once it has ended */
	lockfd = store[0] ? store_wait(store, secs > 10 ? secs : 10) : -1;
	if (lockfd >= 0) {
		known = !store_pending(store, &files, &names, shown, false);
		close(lockfd);
	}
	if (known && !files && !names) {
		printf("hsmfsctl: unmounted '%s': every change is at the origin\n", mnt);
		return X_OK_;
	}
	if (!known) {
		/* sync's word alone (the store is not the caller's to read, or busy) */
		bool synced = secs > 0 && !e;

		printf("hsmfsctl: unmounted '%s': %s\n", mnt,
		       synced ? "every change is at the origin (the sync said so)" :
		       e ? "some changes may not be at the origin (the sync said why)" :
			   "not synced, and the store's record could not be read");
		return synced ? X_OK_ : X_PARTIAL;
	}
	printf("hsmfsctl: unmounted '%s': %llu file%s and %llu name change%s not at the origin "
	       "yet: the next mount archives them (with write-back), or hsmfsctl sync after it\n",
	       mnt, (unsigned long long)files, files == 1 ? "" : "s", (unsigned long long)names,
	       names == 1 ? "" : "s");
	for (unsigned i = 0; i < UNMOUNT_SHOWN && shown[i]; i++) {
		printf("  not archived: %s\n", shown[i]);
		free(shown[i]);
	}
	if (files > UNMOUNT_SHOWN)
		printf("  and %llu more\n", (unsigned long long)(files - UNMOUNT_SHOWN));
	return X_PARTIAL;
}
