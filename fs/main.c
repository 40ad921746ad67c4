/*
 * main.c - the hsmfs daemon: check the command line, take the store,
 * mount, daemonize once the kernel has spoken to us, serve (serve.c),
 * and undo it all in the reverse order: the stages of daemon.h.
 *
 * Exit codes (hsmfs(8)): 0 clean unmount; 1 bad usage or option;
 * 2 store unusable or already mounted; 3 mountpoint unusable; 4 the
 * mount itself failed; 5 the daemon failed while serving; 6 the hook
 * refused the mount before it was ready (supervise.h: a wrong origin).
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"
#include "fdlimit.h"
#include "fault.h"
#include "inode.h"
#include "inode-save.h"
#include "fan-kernel.h"
#include "fan-marks.h"
#include "fan.h"
#include "keeper.h"
#include "meta.h"
#include "ops-io.h"
#include "saved.h"
#include "rebuild.h"
#include "log.h"
#include "ops.h"
#include "opts.h"
#include "bdi.h"
#include "store.h"
#include "supervise.h"

static void usage(void)
{
	printf(
"usage: hsmfs STORE MOUNTPOINT [-f] [-d] [-s] [-o OPTION[,OPTION...]]\n"
"\n"
"Mount STORE at MOUNTPOINT, passing every operation through to STORE.\n"
"\n"
"  -f                 stay in the foreground\n"
"  -d                 print FUSE requests and debug lines (implies -f)\n"
"  -s                 serve with a single thread\n"
"  --ready-fd N       write \"ready\\n\" to descriptor N once the mount is live\n"
"                     (with hook=, once the hook has joined too)\n"
"  -h, --help         this text\n"
"  -V, --version      print the version\n"
"\n"
"hsmfs options (-o):\n"
"  entry_timeout=S    seconds the kernel caches names (default 3600)\n"
"  attr_timeout=S     seconds the kernel caches attributes (default 3600)\n"
"  negative_timeout=S seconds the kernel caches missing names (default:\n"
"                     entry_timeout on Linux 6.16 and later, else 0)\n"
"  store_shared       another program changes the store beside the mount:\n"
"                     names and attributes cached 1 s, missing names and\n"
"                     directory listings not at all\n"
"  fd_cache=N         idle store descriptors kept open (default RLIMIT_NOFILE/4, at most 4096)\n"
"  export_keep=N      inodes the kernel forgot kept so that file handles\n"
"                     (NFS, open_by_handle_at) still open (default 65536;\n"
"                     0: no export support)\n"
"  max_threads=N      worker threads (default 10)\n"
"  writeback          use the kernel's writeback cache\n"
"  nopassthrough      never let the kernel read and write resident files\n"
"                     itself (FUSE passthrough, root mounts, Linux 6.9)\n"
"  cold_reads=direct|cached\n"
"                     a read-only open of a file with bytes missing reads\n"
"                     past the mount's page cache, or through it (default)\n"
"  timeout=S          seconds a hook may take per event (default 30)\n"
"  progress_floor=SIZE  a hook's PROGRESS extends the timeout only at this\n"
"                     many bytes a second or more (default 16k, 0: any)\n"
"  nohook=wait|fail   with no fill hook: wait up to the timeout, or fail now\n"
"  max_pending=N      events in flight at once (default 1024)\n"
"  max_pending_user=N requests one user may have waiting for hooks\n"
"                     (default: max_pending; a quarter with allow_other)\n"
"  chunk=SIZE         alignment of fill hints (default 1M)\n"
"  dir_ttl=SECONDS    list a listed directory again on a look after this (0: never)\n"
"  archive_after=SECONDS  archive a changed file this long after its last\n"
"                     change or close (default: only hsmfsctl archive, sync)\n"
"  first_fill=SIZE    a random read's miss fetches the aligned blocks of this\n"
"                     size around it, a reader going on fetches by chunks\n"
"                     (default 8k; 0: a miss fetches its chunk)\n"
"  readahead=SIZE     the kernel's readahead window of the mount (root only;\n"
"                     default: the kernel's, 128k)\n"
"  cache_max=SIZE     evict least recently used files past this many\n"
"                     allocated bytes of fetched data (default: no limit)\n"
"  cache_min_free=SIZE|N%%  keep this much of the store's filesystem free\n"
"  hook=COMMAND       start COMMAND MOUNTPOINT as a hook, restart it if it exits\n"
"  origin=URL         base URL for files imported without one (for hsmfs-http)\n"
"  nocheck_origin     a new mount whose origin cannot be listed mounts anyway\n"
"                     (its looks fail until it answers); check_origin undoes\n"
"  log=FILE           log to FILE once mounted (default: syslog, else\n"
"                     STORE/.hsmfs/hsmfs.log in the background)\n"
"  log_level=LEVEL    err, warn, info (default) or debug\n"
"  no_default_permissions  with allow_other, let hsmfs run every access\n"
"                     with its own rights instead of the kernel's checks\n"
"\n"
"FUSE options passed to the kernel: ro, rw, allow_other, allow_root,\n"
"default_permissions, fsname=, subtype=, max_read=, auto_unmount,\n"
"[no]suid, [no]dev, [no]exec, sync, async, dirsync.\n"
"Access times: noatime, nodiratime (the daemon's reads leave them),\n"
"atime, relatime, strictatime (the store's mount decides).\n"
"remount: change the live mount's flags (ro, rw, ...) and exit (root only).\n"
"Ignored, for fstab: defaults, _netdev, nofail, [no]auto, [no]user, users,\n"
"x-*, comment=.  See hsmfs(8).\n");
}

/* Mountpoint checks: one clear line for each way it can be wrong. */
static int check_mountpoint(const char *mnt)
{
	struct stat st;

	if (stat(mnt, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			log_err("mountpoint '%s' is not a directory", mnt);
			return -ENOTDIR;
		}
		return 0;
	}
	if (errno == ENOTCONN) {
		log_err("mountpoint '%s' is a stale FUSE mount (transport endpoint is not connected); clear it with 'fusermount3 -u %s' (as root: 'umount -l %s')",
			mnt, mnt, mnt);
		return -ENOTCONN;
	}
	if (errno == ENOENT)
		log_err("mountpoint '%s' does not exist", mnt);
	else
		log_err("mountpoint '%s': %s", mnt, strerror(errno));
	return -errno;
}

static bool user_allow_other(void)
{
	char buf[8192];
	ssize_t n;
	int fd = open("/etc/fuse.conf", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return opts_fuse_conf_allows_other(buf);
}

/* "a,b" -> "a\,b": libfuse splits -o lists at unescaped commas. */
static char *escape_commas(const char *s)
{
	char *r = malloc(2 * strlen(s) + 1), *w = r;

	if (!r)
		return NULL;
	for (; *s; s++) {
		if (*s == ',' || *s == '\\')
			*w++ = '\\';
		*w++ = *s;
	}
	*w = '\0';
	return r;
}

/*
 * Open STORE/.hsmfs/meta.db; a file that is not a database is moved
 * aside (never trusted: every file it described becomes unknown, so
 * nothing is served as present) and a new one is made.
 */
static int open_meta(const char *store_path, int root_fd, struct meta **ret)
{
	uint64_t found = 0;
	char path[PATH_MAX + 64], aside[PATH_MAX + 96];
	int res;

	snprintf(path, sizeof(path), "%s/%s/meta.db", store_path, STORE_STATE_DIR);
	res = meta_open(path, ret);
	if (res != -EBADMSG)
		return res;
	snprintf(aside, sizeof(aside), "%s.corrupt-%ld", path, (long)time(NULL));
	if (rename(path, aside) < 0)
		return -errno;
	for (int i = 0; i < 2; i++) {
		char p[PATH_MAX + 80];

		snprintf(p, sizeof(p), "%s%s", path, i ? "-shm" : "-wal");
		unlink(p);
	}
	res = meta_open(path, ret);
	if (!res)
		res = rebuild_from_marks(root_fd, *ret, &found);
	log_err("metadata database '%s' was corrupt: moved aside to '%s', %llu placeholder%s recreated from the store's marks%s",
		path, aside, (unsigned long long)found, found == 1 ? "" : "s",
		res ? " (incomplete)" : "");
	return res;
}

static unsigned default_fd_cache(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur / 4 > OPTS_FD_CACHE_AUTO_MAX)
		return OPTS_FD_CACHE_AUTO_MAX;
	return rl.rlim_cur / 4 < OPTS_FD_CACHE_MIN ? OPTS_FD_CACHE_MIN :
						     rl.rlim_cur / 4;
}

/*
 * Fork; the parent waits until the child has seen FUSE INIT (or died)
 * and exits 0 only then, so "hsmfs ... && ls MNT" never races.  The
 * child writes "W" lines (warnings the parent prints on its terminal),
 * then "R" (ready), or "E" and why the mount failed (ready.h): the
 * parent prints that line and exits with the daemon's status.
 * Returns the descriptor the child must write to, in the child only.
 */
static int daemonize(int state_fd)
{
	int pfd[2], devnull;
	pid_t pid;
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		log_err("cannot daemonize: %s", strerror(errno));
		exit(EXIT_SERVE);
	}
	pid = fork();
	if (pid < 0) {
		log_err("cannot daemonize: %s", strerror(errno));
		exit(EXIT_SERVE);
	}
	if (pid > 0) {
		char buf[4096], why[1024] = "";
		size_t used = 0;
		ssize_t n;
		int status;

		close(pfd[1]);
		/* "W" (warnings) and "I" lines (notes) until "R" (ready) or "E" and why (failed) */
		for (;;) {
			char *nl;

			n = read(pfd[0], buf + used, sizeof(buf) - 1 - used);
			if (n <= 0)
				break;
			used += (size_t)n;
			buf[used] = '\0';
			while (used && (buf[0] == 'W' || buf[0] == 'I') &&
			       (nl = memchr(buf, '\n', used))) {
				*nl = '\0';
				fprintf(stderr, "hsmfs: %s%s\n", buf[0] == 'W' ? "warning: " : "",
					buf + 1);
				used -= (size_t)(nl + 1 - buf);
				memmove(buf, nl + 1, used);
			}
			if (used && buf[0] == 'R')
				_exit(0);
			if (used == sizeof(buf) - 1)
				used = 0; /* a line too long: dropped */
		}
		if (used && buf[0] == 'E') {
			buf[used] = '\0';
			snprintf(why, sizeof(why), "%.*s", (int)sizeof(why) - 1, buf + 1);
		}
		waitpid(pid, &status, 0);
		if (why[0])
			log_err("%s", why);
		else
			log_err("the daemon exited before the mount became ready");
		_exit(WIFEXITED(status) && WEXITSTATUS(status) ?
			      WEXITSTATUS(status) : EXIT_SERVE);
	}
	close(pfd[0]);
	setsid();
	if (chdir("/") < 0) {
		/* cannot happen; harmless either way */
	}
	devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		dup2(devnull, STDERR_FILENO);
		if (devnull > STDERR_FILENO)
			close(devnull);
	}
	log_to_syslog("hsmfs", state_fd);
	return pfd[1];
}

#define FUSE_SUPER_MAGIC 0x65735546

/*
 * -o remount (mount -o remount,ro MNT runs mount.fuse3, which runs hsmfs
 * with the live mount's options and remount): the flags of the mount at
 * o->mountpoint changed by mount(2) MS_REMOUNT, which FUSE applies (ro,
 * nosuid, nodev, noexec, sync, dirsync, noatime, nodiratime) while it
 * ignores the options; the daemon that serves the mount is not asked,
 * and keeps every option it started with.  Only root may (fusermount3
 * has no remount).  0, or EXIT_REMOUNT said in one line.
 */
static int remount(const struct hsmfs_opts *o)
{
	static const struct {
		const char *name;
		unsigned long set, clear;
	} flags[] = {
		{ "ro", MS_RDONLY, 0 },          { "rw", 0, MS_RDONLY },
		{ "nosuid", MS_NOSUID, 0 },      { "suid", 0, MS_NOSUID },
		{ "nodev", MS_NODEV, 0 },        { "dev", 0, MS_NODEV },
		{ "noexec", MS_NOEXEC, 0 },      { "exec", 0, MS_NOEXEC },
		{ "sync", MS_SYNCHRONOUS, 0 },   { "async", 0, MS_SYNCHRONOUS },
		{ "dirsync", MS_DIRSYNC, 0 },
	};
	/* without an atime flag a remount keeps the mount's: one is always given */
	unsigned long mf = MS_REMOUNT | (o->noatime ? MS_NOATIME : MS_RELATIME) |
			   (o->nodiratime ? MS_NODIRATIME : 0);
	char *list = strdup(o->fuse_opts), *save = NULL;
	struct statfs sf;

	if (!list) {
		log_err("out of memory");
		return EXIT_REMOUNT;
	}
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
		for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
			if (!strcmp(t, flags[i].name))
				mf = (mf | flags[i].set) & ~flags[i].clear;
	free(list);
	if (statfs(o->mountpoint, &sf) < 0 || sf.f_type != FUSE_SUPER_MAGIC) {
		log_err("cannot remount '%s': not a mounted hsmfs", o->mountpoint);
		return EXIT_REMOUNT;
	}
	if (mount(NULL, o->mountpoint, NULL, mf, NULL) < 0) {
		if (errno == EPERM)
			log_err("cannot remount '%s': only root can; a user's mount is unmounted "
				"(fusermount3 -u) and mounted again", o->mountpoint);
		else
			log_err("cannot remount '%s': %s", o->mountpoint, strerror(errno));
		return EXIT_REMOUNT;
	}
	return 0;
}

/*
 * The first daemon serves on the session its keeper mounted with: that
 * session holds the mountpoint, which only fuse_session_unmount() frees,
 * and unmounting is the keeper's.  So the daemon leaves it as it is at
 * exit (it has no destroy handler to call), held here.
 */
static struct fuse_session *kept_session;

/* The command line; --help, --version and -o remount end here. */
static bool options_run(struct daemon *d)
{
	char err[512];
	int res;

	if (opts_parse(d->argc, d->argv, &d->o, err, sizeof(err))) {
		log_err("%s", err);
		d->rc = EXIT_USAGE;
		return false;
	}
	if (d->o.show_help || d->o.show_version) {
		if (d->o.show_help)
			usage();
		else
			printf("hsmfs %s (libfuse %s)\n", HSMFS_VERSION,
			       fuse_pkgversion());
		opts_free(&d->o);
		return false;
	}
	if (d->o.remount) {
		d->rc = remount(&d->o);
		opts_free(&d->o);
		return false;
	}
	/* before any descriptor is counted (default_fd_cache()) or held */
	res = fdlimit_raise();
	if (res)
		log_warn("cannot raise the descriptor limit to its hard limit: %s, ignoring",
			 strerror(-res));
	if (d->o.debug)
		log_set_level(LOG_LVL_DEBUG); /* -d: the daemon's own debug lines too */
	if (d->o.log_level >= 0)
		log_set_level((enum log_level)d->o.log_level);
	return true;
}

static void options_undo(struct daemon *d)
{
	opts_free(&d->o);
}

/* Started by a keeper (keeper.h): its mount, its lock, its saved region. */
static bool keeper_run(struct daemon *d)
{
	int res;

	d->takeover = keeper_inherited(&d->kfuse, &d->knotify, &d->klock, &d->ksaved, &d->kmnt,
				       &d->in_syslog);
	d->kept = d->takeover || !d->o.norestart;
	d->keeper_up = d->takeover;
	if (d->takeover) {
		d->o.foreground = true;
		d->o.ready_fd = -1; /* the first daemon's, long gone */
		/* syslog, or the store's log file once the store is open */
		if (d->in_syslog && !access("/dev/log", W_OK))
			log_to_syslog("hsmfs", -1);
	}
	if (d->kept && !d->takeover)
		d->ksaved = saved_make();
	res = d->ksaved >= 0 || !d->kept ?
		      saved_open_region(d->kept ? d->ksaved : -1, &d->fresh) : d->ksaved;
	if (res) {
		log_err("cannot map the table of what the kernel holds: %s", strerror(-res));
		d->rc = EXIT_SERVE;
		return false;
	}
	if (d->takeover && d->fresh) {
		log_err("the keeper's table is empty: nothing to take over");
		d->rc = EXIT_SERVE;
		return false;
	}
	/* before anything is opened: the numbers of the last daemon's handles */
	if (d->takeover && saved_reserve() < 0)
		log_warn("cannot keep the open handles' numbers: %s", strerror(errno));
	if (d->takeover) {
		fault_named(FAULT_TAKE_RESERVED);
		fault_delay(FAULT_TAKE_RESERVED);
	}
	return true;
}

/* The hook, the store and the mountpoint, before anything is taken. */
static bool checks_run(struct daemon *d)
{
	char err[512];

	/* a hook that cannot run fails the mount now, not its first use */
	if (d->o.hook && !d->takeover && supervise_check(d->o.hook, err, sizeof(err))) {
		log_err("%s", err);
		d->rc = EXIT_USAGE;
		return false;
	}
	d->store_path = realpath(d->o.store, NULL);
	if (!d->store_path) {
		log_err("store '%s': %s", d->o.store,
			errno == ENOENT ? "no such directory" : strerror(errno));
		d->rc = EXIT_STORE;
		return false;
	}
	/* a takeover must not look: the mountpoint is ours, and unserved */
	if (!d->takeover && check_mountpoint(d->o.mountpoint)) {
		d->rc = EXIT_MNT;
		goto fail;
	}
	d->mnt_path = d->takeover ? (char *)d->kmnt : realpath(d->o.mountpoint, NULL);
	if (!d->mnt_path) {
		log_err("mountpoint '%s': %s", d->o.mountpoint, strerror(errno));
		d->rc = EXIT_MNT;
		goto fail;
	}
	if (!d->takeover) {
		/*
		 * The keeper runs this command line again for each daemon, in
		 * "/" (daemonize()): STORE and MOUNTPOINT as real paths, or a
		 * restart of "hsmfs store mnt" found no store and the mount
		 * ended.  The first two arguments that are not options.
		 */
		int pos = 0;

		for (int i = 1; i < d->argc && pos < 2; i++) {
			if (!strcmp(d->argv[i], "-o") || !strcmp(d->argv[i], "--ready-fd")) {
				i++;
				continue;
			}
			if (d->argv[i][0] == '-')
				continue;
			d->argv[i] = pos++ ? d->mnt_path : d->store_path;
		}
	}
	{
		size_t n = strlen(d->store_path);

		if (strcmp(d->mnt_path, d->store_path) &&
		    !strncmp(d->mnt_path, d->store_path, n) &&
		    (d->mnt_path[n] == '/' || n == 1)) {
			log_err("mountpoint '%s' is inside the store '%s'; choose one outside it",
				d->o.mountpoint, d->o.store);
			d->rc = EXIT_MNT;
			goto fail;
		}
	}
	if (d->o.allow_other && getuid() != 0 && !user_allow_other()) {
		log_err("allow_other needs 'user_allow_other' in /etc/fuse.conf when mounting as a user; ask root to add it, or drop allow_other");
		d->rc = EXIT_USAGE;
		goto fail;
	}
	return true;
fail:
	free(d->store_path);
	free(d->mnt_path);
	return false;
}

static void checks_undo(struct daemon *d)
{
	free(d->store_path);
	free(d->mnt_path);
}

/* The store, locked (a takeover's lock is the keeper's), and how it was left. */
static bool store_run(struct daemon *d)
{
	char err[512];
	int res;

	log_set_mount(d->mnt_path);
	if (d->takeover && d->o.log_file && (res = log_to_path(d->o.log_file)) < 0)
		log_err("log=%s: %s", d->o.log_file, strerror(-res));
	res = store_open_held(d->store_path, d->takeover ? d->klock : -1, &d->store, err,
			      sizeof(err));
	if (res) {
		log_err("%s", err);
		d->rc = EXIT_STORE;
		return false;
	}
	if (d->takeover && d->in_syslog && access("/dev/log", W_OK))
		log_to_syslog("hsmfs", d->store.state_fd); /* no syslog: the store's log file */
	umask(0); /* modes arrive from the kernel with the caller's umask applied */
	d->was_clean = check_was_clean(d->store.state_fd);
	return true;
}

static void store_undo(struct daemon *d)
{
	/* the root's descriptor is the inode table's once it took it */
	if (!d->table && d->store.root_fd >= 0)
		close(d->store.root_fd);
	store_close(&d->store);
}

/* The metadata database (open_meta()). */
static bool database_run(struct daemon *d)
{
	int res = open_meta(d->store_path, d->store.root_fd, &d->meta);

	if (res) {
		log_err("cannot open the metadata database in '%s/%s': %s",
			d->store_path, STORE_STATE_DIR,
			d->meta ? meta_errmsg(d->meta) : strerror(-res));
		d->rc = EXIT_STORE;
		meta_close(d->meta);
		return false;
	}
	if (!d->was_clean) {
		uint64_t rows = 0;

		/* a new store (no rows yet) has nothing an unclean stop could have left */
		if (!meta_count(d->meta, &rows) && !rows)
			d->was_clean = true;
	}
	return true;
}

static void database_undo(struct daemon *d)
{
	meta_close(d->meta);
}

/* The inode table: a takeover's rebuilt, a new mount's with the last one's handles. */
static bool table_run(struct daemon *d)
{
	uint64_t n;
	int res;

	if (d->o.fanotify) {
		char err[512];
		int root;

		/* the daemon's own view of the store, where it raises no events (fan.h) */
		res = fan_setup(d->store_path, d->takeover ? d->kfuse : -1, &root, err,
				sizeof(err));
		if (res) {
			log_err("%s", err);
			d->rc = EXIT_MOUNT;
			return false;
		}
		close(d->store.root_fd);
		d->store.root_fd = root;
	}
	res = inode_table_init(d->store.root_fd,
			       d->o.fd_cache ? d->o.fd_cache : default_fd_cache(),
			       d->o.export_keep, d->takeover, &d->restored);
	if (res) {
		log_err("cannot set up inode table: %s", strerror(-res));
		d->rc = EXIT_STORE;
		return false;
	}
	d->table = true; /* the table owns store.root_fd now */
	/* a daemon taking over, or no handles: the table is removed, unread */
	res = inode_table_load(d->store.state_fd, !d->takeover && d->o.export_keep, &n);
	if (res)
		log_warn("cannot read the file handles of the last mount (%s/%s/nodes): %s, "
			 "ignoring: they are stale", d->store_path, STORE_STATE_DIR, strerror(-res));
	else if (n)
		log_debug("file handles of the last mount: %llu nodes", (unsigned long long)n);
	if (d->takeover)
		fault_named(FAULT_TAKE_RESTORED);
	return true;
}

static void table_undo(struct daemon *d)
{
	if (d->serving && (d->rc == 0 || d->rc == EXIT_HOOK) && d->o.export_keep) {
		uint64_t n;

		/* the handles of this mount for the next: inode-save.h */
		int r = inode_table_save(d->store.state_fd, &n);

		if (r)
			log_warn("cannot save the file handles for the next mount (%s/%s/nodes): %s, "
				 "ignoring: they will be stale", d->store_path, STORE_STATE_DIR,
				 strerror(-r));
	}
	inode_table_destroy();
}

static void mount_undo(struct daemon *d);

/*
 * backend=fanotify: the signals and the changes' group; a daemon taking
 * over adopts the keeper's bind.  A new mount's files are marked and the
 * store bound after the hooks start (fan_tree_run(), serve.c): the tree
 * is listed first.
 */
static bool fan_mount_run(struct daemon *d)
{
	char err[512];
	int res;

	if ((res = fan_signals())) {
		log_err("backend=fanotify: cannot take the signals: %s", strerror(-res));
		d->rc = EXIT_MOUNT;
		goto fail;
	}
	/* a read-only mount changes nothing: no watch */
	if (!d->o.read_only &&
	    (res = fan_watch_changes(d->takeover ? d->knotify : -1, err, sizeof(err)))) {
		log_err("%s", err);
		d->rc = EXIT_MOUNT;
		goto fail;
	}
	if (d->takeover) {
		/* the keeper's group kept its marks, and the mountpoint is bound */
		if ((res = fan_adopt_mount(d->mnt_path, err, sizeof(err)))) {
			/*
			 * unmounted while no daemon served it: the user's end of
			 * the mount, as when the daemon sees it (the keeper's end
			 * denies what is left)
			 */
			if (res == -ENOENT) {
				log_info("%s: unmounted while the daemon restarted", err);
				d->rc = 0;
			} else {
				log_err("%s", err);
				d->rc = EXIT_SERVE;
			}
			goto fail;
		}
		return true; /* fan_start() says so, having taken over the events */
	}
	fan_mountpoint(d->mnt_path); /* for the keeper, which the bind comes after */
	/* from here on no error is the terminal's: log= takes the lines (ready.h: the walk's) */
	if (d->o.log_file && (res = log_to_path(d->o.log_file)) < 0) {
		log_err("log=%s: %s", d->o.log_file, strerror(-res));
		d->rc = EXIT_USAGE;
		goto fail;
	}
	return true;
fail:
	fan_stop(!d->takeover); /* a takeover's mount is the keeper's to end */
	return false;
}

/* The FUSE session: mounted at the mountpoint, or the keeper's mount attached (a takeover). */
static bool mount_run(struct daemon *d)
{
	char *esc;
	int res;

	if (d->o.fanotify)
		return fan_mount_run(d);

	esc = escape_commas(d->store_path);
	if (!esc || asprintf(&d->fsname, "-ofsname=%s", esc) < 0)
		d->fsname = NULL;
	free(esc);
	if (!d->fsname || fuse_opt_add_arg(&d->args, d->argv[0]) ||
	    (d->o.fuse_opts[0] && (fuse_opt_add_arg(&d->args, "-o") ||
				   fuse_opt_add_arg(&d->args, d->o.fuse_opts))) ||
	    (!strstr(d->o.fuse_opts, "subtype=") &&
	     fuse_opt_add_arg(&d->args, "-osubtype=hsmfs")) ||
	    (!strstr(d->o.fuse_opts, "fsname=") && fuse_opt_add_arg(&d->args, d->fsname)) ||
	    (d->o.debug && fuse_opt_add_arg(&d->args, "-d"))) {
		log_err("out of memory");
		d->rc = EXIT_SERVE;
		goto fail;
	}

	d->ocfg = (struct ops_config){
		.entry_timeout = d->o.entry_timeout,
		.attr_timeout = d->o.attr_timeout,
		.negative_timeout = d->o.negative_timeout,
		.dir_ttl = d->o.dir_ttl,
		.cache_dirs = !d->o.store_shared,
		.writeback = d->o.writeback,
		/*
		 * the kernel caches a passthrough file's pages itself.  It
		 * reads a passed-through store file with the opener's flags,
		 * never O_NOATIME: under noatime the store's own mount decides
		 * those reads' atime (hsmfs(8)), native speed is kept
		 */
		.passthrough = !d->o.nopassthrough && !d->o.writeback,
		.default_perms = d->o.default_perms,
		.cold_direct = d->o.cold_direct,
		.noatime = d->o.noatime,
		.nodiratime = d->o.nodiratime,
		.export = d->o.export_keep > 0,
	};

	d->se = fuse_session_new(&d->args, ops_table(), ops_table_size(), NULL);
	if (!d->se) {
		log_err("cannot start a FUSE session with options '%s'",
			d->o.fuse_opts);
		d->rc = EXIT_USAGE;
		goto fail;
	}
	if (fuse_set_signal_handlers(d->se)) {
		log_err("cannot install signal handlers");
		d->rc = EXIT_SERVE;
		goto fail;
	}
	d->handlers = true;
	if (d->takeover) {
		res = ops_io_attach(d->se, d->kfuse, true);
		if (res) {
			log_err("cannot take over the mount at '%s': %s", d->mnt_path,
				strerror(-res));
			d->rc = EXIT_SERVE;
			goto fail;
		}
		log_info("took over the mount at '%s' (%llu remembered inodes)", d->mnt_path,
			 (unsigned long long)d->restored);
	} else if (fuse_session_mount(d->se, d->mnt_path)) {
		log_err("cannot mount '%s' at '%s' (see the message above)",
			d->store_path, d->mnt_path);
		d->rc = EXIT_MOUNT;
		goto fail;
	} else {
		d->mounted = true;
	}
	/* from here on no error is the terminal's: log= takes the lines */
	if (d->o.log_file && !d->takeover && (res = log_to_path(d->o.log_file)) < 0) {
		log_err("log=%s: %s", d->o.log_file, strerror(-res));
		d->rc = EXIT_USAGE;
		goto fail;
	}
	return true;
fail:
	mount_undo(d);
	return false;
}

/*
 * After the unmount, the threads that act on the mount end (the
 * invalidator's and readahead='s, which serve started: each one's last
 * call waits for the unmount at most), then the session, then the
 * operations' buffers.
 */
static void mount_undo(struct daemon *d)
{
	if (d->o.fanotify) {
		/*
		 * unmounts and denies what is left where the mount ends: no
		 * keeper, or one that ends with this daemon (keeper.h)
		 */
		fan_stop(!d->keeper_up || d->rc == 0 || d->rc == EXIT_HOOK);
		return;
	}
	if (d->mounted)
		fuse_session_unmount(d->se);
	ops_inval_stop(); /* its last invalidation waited for the unmount at most */
	bdi_readahead_stop(); /* its statfs returns once the mount is gone */
	if (d->handlers)
		fuse_remove_signal_handlers(d->se);
	if (d->se && d->kept && !d->takeover)
		kept_session = d->se; /* the keeper's: see kept_session */
	else if (d->se)
		fuse_session_destroy(d->se);
	ops_shutdown();
	fuse_opt_free_args(&d->args);
	free(d->fsname);
}

/*
 * Into the background (daemonize()), and a keeper's process holding the
 * mount when it is kept; the database is opened again in the daemon.
 */
static bool daemonize_run(struct daemon *d)
{
	int res;

	if (d->o.foreground && !(d->kept && !d->takeover))
		return true;
	/*
	 * SQLite's locks are POSIX record locks, owned by the process
	 * that took them: a connection carried across fork() would lose
	 * them when the parent exits, and hsmfsctl, finding the database
	 * unlocked, would delete the log under us.  Opened before the
	 * mount to report errors early; opened again in the child.
	 */
	meta_close(d->meta);
	d->meta = NULL;
	if (!d->o.foreground)
		d->daemon_fd = daemonize(d->store.state_fd);
	if (d->kept) {
		/* this process keeps the mount; the daemon is its child */
		keeper_start(&(struct keeper_args){
			.se = d->se, .fanotify = d->o.fanotify,
			.fuse_fd = d->o.fanotify ? K.group : fuse_session_fd(d->se),
			.notify_fd = d->o.fanotify ? K.notify : -1,
			.lock_fd = d->store.lock_fd,
			.saved_fd = d->ksaved, .mnt = d->mnt_path, .argv = d->argv,
			.syslog = !d->o.foreground,
			.close_fds = { d->daemon_fd, d->o.ready_fd } });
		d->mounted = false; /* the keeper unmounts */
		d->keeper_up = true;
	}
	res = open_meta(d->store_path, d->store.root_fd, &d->meta);
	if (res) {
		log_err("cannot open the metadata database in '%s/%s': %s", d->store_path,
			STORE_STATE_DIR, d->meta ? meta_errmsg(d->meta) : strerror(-res));
		d->rc = EXIT_STORE;
		return false;
	}
	return true;
}

int main(int argc, char *argv[])
{
	struct daemon d = {
		.argc = argc,
		.argv = argv,
		.store = { -1, -1, -1 },
		.was_clean = true,
		.fresh = true,
		.kfuse = -1,
		.knotify = -1,
		.klock = -1,
		.ksaved = -1,
		.daemon_fd = -1,
		.args = FUSE_ARGS_INIT(0, NULL),
	};

	/* each stage that stops has undone its own work: the ones before it are undone here */
	if (!options_run(&d))
		return d.rc;
	if (!keeper_run(&d) || !checks_run(&d))
		goto options;
	if (!store_run(&d))
		goto checks;
	if (!database_run(&d))
		goto store;
	if (!table_run(&d))
		goto database;
	if (!mount_run(&d))
		goto table;
	/* serve returns when the mount ends: the shutdown is the same ladder */
	if (daemonize_run(&d) && serve_run(&d))
		serve_undo(&d);
	mount_undo(&d);
table:
	table_undo(&d);
database:
	database_undo(&d);
store:
	store_undo(&d);
checks:
	checks_undo(&d);
options:
	options_undo(&d);
	return d.rc;
}
