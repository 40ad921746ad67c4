/*
 * opts.h - command line of the hsmfs daemon.
 *
 * Pure module: no I/O, no FUSE, no allocation that outlives the
 * struct (opts_free releases everything).  It understands the argument
 * order mount.fuse3 uses ("hsmfs STORE MOUNTPOINT -o OPTS"), the usual
 * FUSE flags, and sorts every -o option into one of three kinds:
 *
 *   - ignored: options that fstab and mount(8) hand to every helper
 *     (defaults, _netdev, nofail, noauto, auto, user, users, nouser,
 *     x-*, comment=...).  They mean nothing to the daemon.
 *   - kernel: standard FUSE mount options, passed to libfuse verbatim
 *     in opts->fuse_opts (ro, rw, allow_other, default_permissions,
 *     fsname=, subtype=, nosuid, ...); the access-time ones are the
 *     daemon's (noatime, nodiratime), the kernel given only the flags
 *     they leave, once, for the mount's flags to show them.
 *   - hsmfs: our own, parsed into typed fields.
 *
 * Anything else is an error naming the option.  Errors are returned as
 * -EINVAL with a one-line, lowercase message (no "hsmfs:" prefix, no
 * full stop) in the caller's buffer; this module prints nothing.
 *
 * Invariants after a successful opts_parse():
 *   - store and mountpoint are set unless help or version was asked;
 *   - fuse_opts is a comma list (possibly empty, never NULL) that
 *     contains "default_permissions" whenever allow_other is set and
 *     no_default_permissions was not given;
 *   - numeric fields are within the documented ranges.
 */
#ifndef HSMFS_OPTS_H
#define HSMFS_OPTS_H

#include <stdbool.h>
#include <stddef.h>

/* Bounds of the numeric options, documented in hsmfs(8). */
#define OPTS_TIMEOUT_MAX 86400.0 /* entry/attr/negative cache, seconds */
/*
 * The kernel's caches of names and attributes by default: long, since
 * the daemon tells the kernel of every change it makes itself and every
 * other change comes through the mount (store_shared: short).
 */
#define OPTS_CACHE_DEFAULT 3600.0
#define OPTS_SHARED_TIMEOUT 1.0  /* store_shared: entry and attr */
#define OPTS_PROGRESS_FLOOR (16u << 10) /* progress_floor= default, bytes a second */
#define OPTS_FD_CACHE_MIN 16
/* the default fd_cache: a quarter of RLIMIT_NOFILE (raised to its hard
 * limit at start: fdlimit.h), at most this: a bound whatever the limit */
#define OPTS_FD_CACHE_AUTO_MAX 4096
#define OPTS_FD_CACHE_MAX 1000000
#define OPTS_EXPORT_KEEP_DEFAULT 65536u /* about 200 bytes each (inode.h) */
#define OPTS_EXPORT_KEEP_MAX (1u << 20) /* well below SAVED_NODES_MAX */
#define OPTS_THREADS_MAX 256
#define OPTS_PENDING_MAX 65536
#define OPTS_PREFETCH_MAX 64     /* sibling files asked ahead at most */
#define OPTS_PREFETCH_DEFAULT 8
#define OPTS_CHUNK_MIN 4096ULL
#define OPTS_CHUNK_MAX (1ULL << 30)
#define OPTS_FIRST_FILL_DEFAULT (8ULL << 10)

struct hsmfs_opts {
	char *store;             /* first non-option argument (as given) */
	char *mountpoint;        /* second non-option argument (as given) */
	bool foreground;         /* -f: do not daemonize */
	bool debug;              /* -d: FUSE debug output, implies -f */
	bool single_thread;      /* -s */
	bool show_help;          /* -h, --help */
	bool show_version;       /* -V, --version */
	int ready_fd;            /* --ready-fd N, -1 if absent */
	bool allow_other;        /* allow_other was given */
	bool read_only;          /* ro was given (and not undone by rw) */
	bool no_default_perms;   /* no_default_permissions was given */
	bool default_perms;      /* the kernel checks permissions (given, or
				  * implied by allow_other) */
	bool writeback;          /* writeback cache (default off) */
	bool background;         /* nocheck_origin (or nofail, _netdev where they
				  * reach hsmfs): an origin that cannot be
				  * listed at mount is not a failed mount */
	bool norestart;          /* no keeper: a crash ends the mount (keeper.h) */
	bool fanotify;           /* backend=fanotify: no FUSE; the store's tree
				  * bound at the mountpoint, its misses
				  * raised by the kernel's fanotify
				  * pre-content events (fan.h); default
				  * backend=fuse */
	bool thin;               /* backend=fanotify: a file's missing bytes
				  * hold no blocks of the store (evictions
				  * free them); default: every file keeps
				  * blocks for all its bytes, so that no tool
				  * takes them for holes (fan-marks.h) */
	bool nopassthrough;      /* never kernel passthrough (default: where allowed) */
	bool cold_direct;        /* cold_reads=direct: a read-only open of a file
				  * with bytes missing bypasses the mount's page
				  * cache (default cached) */
	bool remount;            /* remount: change the flags of the live mount at
				  * mountpoint (ro, rw, nosuid, ...: fuse_opts,
				  * noatime, nodiratime) and exit; every other
				  * option keeps the value the mount started
				  * with.  mount(8) adds the mount's own
				  * user_id= and group_id=, accepted only here. */
	bool noatime;            /* noatime (the last of noatime, atime, relatime,
				  * strictatime): the daemon's reads and
				  * listings of the store leave access times
				  * as they are (O_NOATIME); otherwise the
				  * store's own mount decides.  The kernel
				  * never updates a FUSE file's atime itself. */
	bool nodiratime;         /* nodiratime: the same, for directories only */
	bool store_shared;       /* store_shared: another program changes the
				  * store beside the mount: short caches, no
				  * cached directory listings */
	double entry_timeout;    /* seconds, default OPTS_CACHE_DEFAULT (1
				  * with store_shared) */
	double attr_timeout;     /* seconds, as entry_timeout */
	double negative_timeout; /* seconds; -1 (the default without
				  * store_shared, 0 with it): entry_timeout
				  * where the kernel can drop every name at
				  * once (Linux 6.16), else 0 (op_init) */
	unsigned fd_cache;       /* max cached O_PATH fds, 0 = auto */
	unsigned export_keep;    /* forgotten inodes kept for file handles;
				  * 0: no export support (default
				  * OPTS_EXPORT_KEEP_DEFAULT) */
	unsigned max_threads;    /* FUSE worker threads, 0 = libfuse default */
	double timeout;          /* seconds an event may take, default 30 */
	unsigned long long progress_floor; /* bytes/s a PROGRESS must show to
				  * extend the timeout, default 16 KiB, 0: any */
	double dir_ttl;          /* a listed directory is listed again on a look
				  * this long after its listing, 0: never */
	bool nohook_fail;        /* nohook=fail: no fill hook fails at once */
	double archive_after;    /* archive_after=: a dirty file is archived this
				  * long after its last change or close; -1
				  * (default): only when asked */
	unsigned max_pending;    /* event slots, default 1024 */
	unsigned max_pending_user; /* requests one user may park; 0: default */
	unsigned prefetch;       /* sibling files asked ahead, 0: off (default 8) */
	unsigned long long chunk; /* hint alignment, default 1 MiB */
	unsigned long long first_fill; /* a miss's own fill at most, 0: its chunk */
	unsigned long long readahead;  /* the bdi's read_ahead (bytes), 0: as it is */
	char *hook;              /* hook=COMMAND to start and supervise, or NULL */
	char *origin;            /* origin=URL base for files with no url, or NULL */
	char *log_file;          /* log=PATH: the log goes there, or NULL */
	int log_level;           /* log_level=: a LOG_LVL_* (log.h), -1: the default */
	unsigned long long cache_max;      /* cache_max=SIZE, 0 = no limit */
	unsigned long long cache_min_free; /* cache_min_free=SIZE, 0 = none */
	unsigned cache_min_free_pct;       /* cache_min_free=N%, 0 = none */
	char *fuse_opts;         /* kernel options for libfuse, never NULL */
};

/*
 * Parse argv (argv[0] is the program name) into *ret.  On success
 * returns 0 and *ret owns its strings (free with opts_free).  On error
 * returns -EINVAL, writes a message to err[errlen], and leaves *ret
 * zeroed so that opts_free(ret) is still safe.
 */
int opts_parse(int argc, char *const argv[], struct hsmfs_opts *ret, char *err,
	       size_t errlen);

/* Release what opts_parse allocated.  Accepts a zeroed struct. */
void opts_free(struct hsmfs_opts *o);

/*
 * Parse a size such as "4096", "64k", "1M", "2G" (powers of 1024) into
 * *ret.  Returns 0 or -EINVAL; *ret untouched on error.
 */
int opts_parse_size(const char *s, unsigned long long *ret);

/*
 * Does /etc/fuse.conf-style text contain an uncommented
 * "user_allow_other" line?  Pure helper for the allow_other check.
 */
bool opts_fuse_conf_allows_other(const char *text);

#endif
