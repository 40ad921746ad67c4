/*
 * main.c - the hsmfs daemon: check the command line, take the store,
 * mount, daemonize once the kernel has spoken to us, serve.
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
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
#include "fdlimit.h"
#include "dirs.h"
#include "cache.h"
#include "answer.h"
#include "events.h"
#include "fault.h"
#include "evict.h"
#include "hooks.h"
#include "inode.h"
#include "inode-save.h"
#include "keeper.h"
#include "meta.h"
#include "ops-io.h"
#include "saved.h"
#include "rebuild.h"
#include "log.h"
#include "ops-adopt.h"
#include "ops.h"
#include "opts.h"
#include "passthrough.h"
#include "prefetch.h"
#include "bdi.h"
#include "store.h"
#include "ready.h"
#include "supervise.h"
#include "writeback.h"

enum { EXIT_USAGE = 1, EXIT_STORE = 2, EXIT_MNT = 3, EXIT_MOUNT = 4,
       EXIT_SERVE = 5, EXIT_HOOK = KEEPER_STOP, EXIT_REMOUNT = 7 };

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
		/* "W" lines (warnings) until "R" (ready) or "E" and why (failed) */
		for (;;) {
			char *nl;

			n = read(pfd[0], buf + used, sizeof(buf) - 1 - used);
			if (n <= 0)
				break;
			used += (size_t)n;
			buf[used] = '\0';
			while (used && buf[0] == 'W' && (nl = memchr(buf, '\n', used))) {
				*nl = '\0';
				fprintf(stderr, "hsmfs: warning: %s\n", buf + 1);
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

static pthread_t main_thread;
static atomic_bool hook_refused;

/*
 * The supervised hook refused the mount before it was ready (supervise.h):
 * the daemon ends as on SIGTERM, sent to the thread that runs the loop
 * (libfuse's workers block signals; its wait there is interruptible).
 */
static void end_refused(void)
{
	atomic_store(&hook_refused, true);
	pthread_kill(main_thread, SIGTERM);
}

/* The hook transport hands what hooks say to the engine (answer.h). */
static const struct hooks_handlers engine_answers = {
	.joined = events_hook_joined,
	.left = events_hook_left,
	.answer = events_answer,
	.progress = events_progress,
	.filled = events_filled,
	.archived = events_archived,
};

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

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *lcfg;
	struct fuse_session *se = NULL;
	struct hsmfs_opts o;
	struct ops_config ocfg;
	struct store store = { -1, -1, -1 };
	struct meta *meta = NULL;
	bool cache_up = false, events_up = false, hooks_up = false, hook_up = false, was_clean = true;
	char err[512], *store_path = NULL, *mnt_path = NULL, *esc, *fsname = NULL;
	bool mounted = false, handlers = false, table = false, fresh = true;
	bool takeover = false, kept = false, in_syslog = false, serving = false;
	int res, rc = 0, daemon_fd = -1, kfuse = -1, klock = -1, ksaved = -1;
	const char *kmnt = NULL;
	uint64_t restored = 0;

	if (opts_parse(argc, argv, &o, err, sizeof(err))) {
		log_err("%s", err);
		return EXIT_USAGE;
	}
	if (o.show_help || o.show_version) {
		if (o.show_help)
			usage();
		else
			printf("hsmfs %s (libfuse %s)\n", HSMFS_VERSION,
			       fuse_pkgversion());
		goto out;
	}
	if (o.remount) {
		rc = remount(&o);
		goto out;
	}
	/* before any descriptor is counted (default_fd_cache()) or held */
	res = fdlimit_raise();
	if (res)
		log_warn("cannot raise the descriptor limit to its hard limit: %s, ignoring",
			 strerror(-res));
	if (o.debug)
		log_set_level(LOG_LVL_DEBUG); /* -d: the daemon's own debug lines too */
	if (o.log_level >= 0)
		log_set_level((enum log_level)o.log_level);
	/* started by a keeper (keeper.h): its mount, its lock, its saved region */
	takeover = keeper_inherited(&kfuse, &klock, &ksaved, &kmnt, &in_syslog);
	kept = takeover || !o.norestart;
	if (takeover) {
		o.foreground = true;
		o.ready_fd = -1; /* the first daemon's, long gone */
		/* syslog, or the store's log file once the store is open */
		if (in_syslog && !access("/dev/log", W_OK))
			log_to_syslog("hsmfs", -1);
	}
	if (kept && !takeover)
		ksaved = saved_make();
	res = ksaved >= 0 || !kept ? saved_open_region(kept ? ksaved : -1, &fresh) : ksaved;
	if (res) {
		log_err("cannot map the table of what the kernel holds: %s", strerror(-res));
		rc = EXIT_SERVE;
		goto out;
	}
	if (takeover && fresh) {
		log_err("the keeper's table is empty: nothing to take over");
		rc = EXIT_SERVE;
		goto out;
	}
	/* before anything is opened: the numbers of the last daemon's handles */
	if (takeover && saved_reserve() < 0)
		log_warn("cannot keep the open handles' numbers: %s", strerror(errno));
	if (takeover)
		fault_named(FAULT_TAKE_RESERVED);

	/* a hook that cannot run fails the mount now, not its first use */
	if (o.hook && !takeover && supervise_check(o.hook, err, sizeof(err))) {
		log_err("%s", err);
		rc = EXIT_USAGE;
		goto out;
	}
	store_path = realpath(o.store, NULL);
	if (!store_path) {
		log_err("store '%s': %s", o.store,
			errno == ENOENT ? "no such directory" : strerror(errno));
		rc = EXIT_STORE;
		goto out;
	}
	/* a takeover must not look: the mountpoint is ours, and unserved */
	if (!takeover && check_mountpoint(o.mountpoint)) {
		rc = EXIT_MNT;
		goto out;
	}
	mnt_path = takeover ? (char *)kmnt : realpath(o.mountpoint, NULL);
	if (!mnt_path) {
		log_err("mountpoint '%s': %s", o.mountpoint, strerror(errno));
		rc = EXIT_MNT;
		goto out;
	}
	if (!takeover) {
		/*
		 * The keeper runs this command line again for each daemon, in
		 * "/" (daemonize()): STORE and MOUNTPOINT as real paths, or a
		 * restart of "hsmfs store mnt" found no store and the mount
		 * ended.  The first two arguments that are not options.
		 */
		int pos = 0;

		for (int i = 1; i < argc && pos < 2; i++) {
			if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--ready-fd")) {
				i++;
				continue;
			}
			if (argv[i][0] == '-')
				continue;
			argv[i] = pos++ ? mnt_path : store_path;
		}
	}
	{
		size_t n = strlen(store_path);

		if (strcmp(mnt_path, store_path) &&
		    !strncmp(mnt_path, store_path, n) &&
		    (mnt_path[n] == '/' || n == 1)) {
			log_err("mountpoint '%s' is inside the store '%s'; choose one outside it",
				o.mountpoint, o.store);
			rc = EXIT_MNT;
			goto out;
		}
	}
	if (o.allow_other && getuid() != 0 && !user_allow_other()) {
		log_err("allow_other needs 'user_allow_other' in /etc/fuse.conf when mounting as a user; ask root to add it, or drop allow_other");
		rc = EXIT_USAGE;
		goto out;
	}

	log_set_mount(mnt_path);
	if (takeover && o.log_file && (res = log_to_path(o.log_file)) < 0)
		log_err("log=%s: %s", o.log_file, strerror(-res));
	res = store_open_held(store_path, takeover ? klock : -1, &store, err, sizeof(err));
	if (res) {
		log_err("%s", err);
		rc = EXIT_STORE;
		goto out;
	}
	if (takeover && in_syslog && access("/dev/log", W_OK))
		log_to_syslog("hsmfs", store.state_fd); /* no syslog: the store's log file */
	umask(0); /* modes arrive from the kernel with the caller's umask applied */
	was_clean = check_was_clean(store.state_fd);
	res = open_meta(store_path, store.root_fd, &meta);
	if (res) {
		log_err("cannot open the metadata database in '%s/%s': %s",
			store_path, STORE_STATE_DIR, meta ? meta_errmsg(meta) : strerror(-res));
		rc = EXIT_STORE;
		goto out;
	}
	if (!was_clean) {
		uint64_t rows = 0;

		/* a new store (no rows yet) has nothing an unclean stop could have left */
		if (!meta_count(meta, &rows) && !rows)
			was_clean = true;
	}

	res = inode_table_init(store.root_fd,
			       o.fd_cache ? o.fd_cache : default_fd_cache(), o.export_keep, takeover,
			       &restored);
	if (res) {
		log_err("cannot set up inode table: %s", strerror(-res));
		rc = EXIT_STORE;
		goto out;
	}
	table = true; /* the table owns store.root_fd now */
	{
		uint64_t n;

		/* a daemon taking over, or no handles: the table is removed, unread */
		res = inode_table_load(store.state_fd, !takeover && o.export_keep, &n);
		if (res)
			log_warn("cannot read the file handles of the last mount (%s/%s/nodes): %s, "
				 "ignoring: they are stale", store_path, STORE_STATE_DIR, strerror(-res));
		else if (n)
			log_debug("file handles of the last mount: %llu nodes", (unsigned long long)n);
	}
	if (takeover)
		fault_named(FAULT_TAKE_RESTORED);

	esc = escape_commas(store_path);
	if (!esc || asprintf(&fsname, "-ofsname=%s", esc) < 0)
		fsname = NULL;
	free(esc);
	if (!fsname || fuse_opt_add_arg(&args, argv[0]) ||
	    (o.fuse_opts[0] && (fuse_opt_add_arg(&args, "-o") ||
				fuse_opt_add_arg(&args, o.fuse_opts))) ||
	    (!strstr(o.fuse_opts, "subtype=") &&
	     fuse_opt_add_arg(&args, "-osubtype=hsmfs")) ||
	    (!strstr(o.fuse_opts, "fsname=") && fuse_opt_add_arg(&args, fsname)) ||
	    (o.debug && fuse_opt_add_arg(&args, "-d"))) {
		log_err("out of memory");
		rc = EXIT_SERVE;
		goto out;
	}

	ocfg = (struct ops_config){
		.entry_timeout = o.entry_timeout,
		.attr_timeout = o.attr_timeout,
		.negative_timeout = o.negative_timeout,
		.dir_ttl = o.dir_ttl,
		.cache_dirs = !o.store_shared,
		.writeback = o.writeback,
		/*
		 * the kernel caches a passthrough file's pages itself.  It
		 * reads a passed-through store file with the opener's flags,
		 * never O_NOATIME: under noatime the store's own mount decides
		 * those reads' atime (hsmfs(8)), native speed is kept
		 */
		.passthrough = !o.nopassthrough && !o.writeback,
		.default_perms = o.default_perms,
		.cold_direct = o.cold_direct,
		.noatime = o.noatime,
		.nodiratime = o.nodiratime,
		.export = o.export_keep > 0,
	};

	se = fuse_session_new(&args, ops_table(), ops_table_size(), NULL);
	if (!se) {
		log_err("cannot start a FUSE session with options '%s'",
			o.fuse_opts);
		rc = EXIT_USAGE;
		goto out;
	}
	if (fuse_set_signal_handlers(se)) {
		log_err("cannot install signal handlers");
		rc = EXIT_SERVE;
		goto out;
	}
	handlers = true;
	if (takeover) {
		res = ops_io_attach(se, kfuse, true);
		if (res) {
			log_err("cannot take over the mount at '%s': %s", mnt_path, strerror(-res));
			rc = EXIT_SERVE;
			goto out;
		}
		log_info("took over the mount at '%s' (%llu remembered inodes)", mnt_path,
			 (unsigned long long)restored);
	} else if (fuse_session_mount(se, mnt_path)) {
		log_err("cannot mount '%s' at '%s' (see the message above)",
			store_path, mnt_path);
		rc = EXIT_MOUNT;
		goto out;
	} else {
		mounted = true;
	}
	/* from here on no error is the terminal's: log= takes the lines */
	if (o.log_file && !takeover && (res = log_to_path(o.log_file)) < 0) {
		log_err("log=%s: %s", o.log_file, strerror(-res));
		rc = EXIT_USAGE;
		goto out;
	}
	if (!o.foreground || (kept && !takeover)) {
		/*
		 * SQLite's locks are POSIX record locks, owned by the process
		 * that took them: a connection carried across fork() would lose
		 * them when the parent exits, and hsmfsctl, finding the database
		 * unlocked, would delete the log under us.  Opened before the
		 * mount to report errors early; opened again in the child.
		 */
		meta_close(meta);
		meta = NULL;
		if (!o.foreground)
			daemon_fd = daemonize(store.state_fd);
		if (kept) {
			/* this process keeps the mount; the daemon is its child */
			keeper_start(&(struct keeper_args){
				.se = se, .fuse_fd = fuse_session_fd(se), .lock_fd = store.lock_fd,
				.saved_fd = ksaved, .mnt = mnt_path, .argv = argv,
				.syslog = !o.foreground,
				.close_fds = { daemon_fd, o.ready_fd } });
			mounted = false; /* the keeper unmounts */
		}
		res = open_meta(store_path, store.root_fd, &meta);
		if (res) {
			log_err("cannot open the metadata database in '%s/%s': %s", store_path,
				STORE_STATE_DIR, meta ? meta_errmsg(meta) : strerror(-res));
			rc = EXIT_STORE;
			goto out;
		}
	}
	if (!takeover) {
		res = ops_io_attach(se, fuse_session_fd(se), false);
		if (res) {
			log_err("cannot serve the mount: %s", strerror(-res));
			rc = EXIT_SERVE;
			goto out;
		}
	}
	serving = true;
	/* the process that holds the mount: the keeper, when there is one */
	store_write_pid(&store, kept ? getppid() : getpid());
	/* with hook=, ready once the hook joined too (ready.h) */
	ready_init(o.ready_fd, daemon_fd, o.hook != NULL, o.timeout);
	ops_init(&ocfg);
	ops_set_session(se);
	{
		struct events_config ecfg = {
			.max_pending = o.max_pending,
			.seq_base = saved_head()->restarts << 28,
			.takeover = takeover,
			.timeout = o.timeout,
			.progress_floor = o.progress_floor,
			.nohook_fail = o.nohook_fail,
			.chunk = o.chunk,
			.first_fill = o.first_fill,
			/* the window the kernel reads ahead in (bdi.h) */
			.kernel_ra = o.readahead ? o.readahead : 128 << 10,
			.dir_ttl = o.dir_ttl,
			.writeback_on = o.archive_after >= 0,
			.writeback = o.archive_after,
			/* a mount with an origin archives what is made on it */
			.track_new = o.origin != NULL || o.archive_after >= 0,
			.meta = meta,
			.store_path = store_path,
			.origin = o.origin,
			.invalidate = ops_invalidate,
			.invalidate_files_later = ops_invalidate_files_later,
			.subscriptions_changed = pt_subscriptions_changed,
			.invalidate_entry = ops_invalidate_entry,
			.invalidate_attr = ops_invalidate_attr,
			.invalidate_names = ops_invalidate_names,
			.reply = ops_read_reply,
			.exiting = ops_exiting,
			.caller = ops_caller,
			.interrupted = ops_interrupted,
			.may_archive = ops_may_archive,
			/* on a shared mount one user gets a quarter of the places */
			.max_parked_user = o.max_pending_user ? o.max_pending_user :
					   o.allow_other ? (o.max_pending + 3) / 4 : 0,
			.state_fd = store.state_fd,
			.cache_limited = o.cache_max || o.cache_min_free ||
					 o.cache_min_free_pct,
		};
		struct cache_config ccfg = {
			.max = o.cache_max,
			.min_free = o.cache_min_free,
			.min_free_pct = o.cache_min_free_pct,
			.chunk = o.chunk,
			.store_fd = store.root_fd,
			.state_fd = store.state_fd,
			.meta = meta,
			.on = { .sync = writeback_sync, .evict = evict_victim,
				/* write-back on: changed files make room too */
				.archive = o.archive_after >= 0 ? archive_pressure : NULL },
		};
		char state_path[PATH_MAX + 16];

		res = events_init(&ecfg);
		if (!res) {
			res = cache_init(&ccfg);
			cache_up = !res;
		}
		if (!res) {
			events_up = true;
			snprintf(state_path, sizeof(state_path), "%s/%s",
				 store_path, STORE_STATE_DIR);
			res = hooks_start(store.state_fd, state_path, o.chunk,
					  (uint32_t)(o.timeout * 1000), &engine_answers);
			hooks_up = !res;
		}
		if (!res)
			res = prefetch_init(o.prefetch);
		if (res) {
			log_err("cannot start the event engine: %s", strerror(-res));
			rc = EXIT_SERVE;
			goto out;
		}
	}
	if (takeover) {
		/*
		 * The removals the last daemon made and did not record, first:
		 * a claim of a file removed since is then of no row, and not
		 * made again.
		 */
		unsigned n = ops_resend_removals();

		if (n)
			log_info("recorded %u removal%s the last daemon made in the store", n,
				 n == 1 ? "" : "s");
	}
	if (takeover) {
		/*
		 * The user's changes the last daemon answered and never
		 * committed, committed now: before the check below compares
		 * the rows with the store, and before any read may fill.
		 */
		unsigned n = events_replay_claims();

		if (n) {
			writeback_sync();
			log_info("took over %u change%s not yet recorded", n, n == 1 ? "" : "s");
		}
	}
	if (!was_clean) {
		uint64_t rows = 0;

		uint64_t *keep = NULL;
		size_t nkeep = takeover ? ops_resend_removals_begun(&keep) : 0;

		if (!meta_count(meta, &rows) && rows && check_start(store.root_fd, meta, keep, nkeep))
			log_warn("cannot start the consistency check, ignoring");
		free(keep);
	}
	if (o.hook) {
		/*
		 * A new mount whose root was never listed asks its hook whether
		 * it can serve it: a wrong origin fails the mount in one line,
		 * not every later look with EIO; with nofail or _netdev it is
		 * retried in the background instead.
		 */
		main_thread = pthread_self();
		res = supervise_start(o.hook, mnt_path,
				      !takeover && !o.background && dirs_root_unlisted(),
				      end_refused);
		if (res) {
			log_err("cannot supervise hook '%s': %s", o.hook, strerror(-res));
			rc = EXIT_SERVE;
			goto out;
		}
		hook_up = true;
	}

	if (o.readahead && bdi_readahead_start(mnt_path, o.readahead))
		log_warn("cannot start setting readahead=, ignoring");
	if (takeover) {
		ops_adopt_opens();
		fault_named(FAULT_TAKE_ADOPTED);
	}

	if (o.single_thread) {
		res = fuse_session_loop(se);
	} else {
		lcfg = fuse_loop_cfg_create();
		if (!lcfg) {
			log_err("out of memory");
			res = -ENOMEM;
		} else {
			if (o.max_threads)
				fuse_loop_cfg_set_max_threads(lcfg, o.max_threads);
			res = fuse_session_loop_mt(se, lcfg);
			fuse_loop_cfg_destroy(lcfg);
		}
	}
	if (atomic_load(&hook_refused)) {
		rc = EXIT_HOOK; /* said: supervise.c logged it, ready.c told the parent */
	} else if (res < 0) {
		log_err("serving failed: %s", strerror(-res));
		rc = EXIT_SERVE;
	}
	if (kept && ops_handover_asked()) {
		/*
		 * hsmfsctl restart: what the writer holds is committed, the rest
		 * is left as a crash leaves it, for the next daemon (keeper.h):
		 * requests parked on hooks are the kernel's to send again.
		 */
		writeback_sync();
		log_info("handing over to the next daemon");
		_exit(KEEPER_HANDOVER);
	}

out:
	prefetch_shutdown(); /* before the engine: it starts fills */
	/* the uploads under way finish while their hooks are still there */
	if (events_up)
		archive_shutdown();
	if (hook_up)
		supervise_stop();
	ready_shutdown(); /* after the hook's last word: it may join late */
	if (hooks_up)
		hooks_stop();
	check_stop();
	if (cache_up)
		cache_shutdown();
	if (events_up) {
		events_shutdown();
		if ((rc == 0 || rc == EXIT_HOOK) && serving)
			check_mark_clean(store.state_fd);
	}
	if (mounted)
		fuse_session_unmount(se);
	ops_inval_stop(); /* its last invalidation waited for the unmount at most */
	bdi_readahead_stop(); /* its statfs returns once the mount is gone */
	if (handlers)
		fuse_remove_signal_handlers(se);
	if (se && kept && !takeover)
		kept_session = se; /* the keeper's: see kept_session */
	else if (se)
		fuse_session_destroy(se);
	ops_shutdown();
	if (table && serving && (rc == 0 || rc == EXIT_HOOK) && o.export_keep) {
		uint64_t n;

		/* the handles of this mount for the next: inode-save.h */
		int r = inode_table_save(store.state_fd, &n);

		if (r)
			log_warn("cannot save the file handles for the next mount (%s/%s/nodes): %s, "
				 "ignoring: they will be stale", store_path, STORE_STATE_DIR,
				 strerror(-r));
	}
	if (table)
		inode_table_destroy();
	else if (store.root_fd >= 0)
		close(store.root_fd);
	meta_close(meta);
	store_close(&store);
	fuse_opt_free_args(&args);
	free(fsname);
	free(store_path);
	free(mnt_path);
	opts_free(&o);
	return rc;
}
