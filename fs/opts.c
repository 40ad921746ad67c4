/* opts.c - see opts.h */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"

/* Options fstab, mount(8) and mount.fuse3 hand to every helper. */
static const char *const ignored_opts[] = {
	"defaults", "_netdev", "nofail", "noauto", "auto",
	"user",     "users",   "nouser", NULL,
};

/* Options passed through to libfuse / the kernel unchanged. */
static const char *const kernel_flags[] = {
	"rw",      "ro",      "suid",       "nosuid",     "dev",
	"nodev",   "exec",    "noexec",     "async",      "sync",
	"dirsync", "norelatime", "nostrictatime", "allow_other",
	"allow_root", "default_permissions", "auto_unmount", NULL,
};
static const char *const kernel_keyed[] = {
	"fsname=", "subtype=", "max_read=", NULL,
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static bool in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (!strcmp(*list, s))
			return true;
	return false;
}

static bool has_prefix_in(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (!strncmp(*list, s, strlen(*list)))
			return true;
	return false;
}

int opts_parse_size(const char *s, unsigned long long *ret)
{
	unsigned long long v, mul = 1;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': mul = 1ULL << 10; end++; break;
	case 'm': case 'M': mul = 1ULL << 20; end++; break;
	case 'g': case 'G': mul = 1ULL << 30; end++; break;
	case 't': case 'T': mul = 1ULL << 40; end++; break;
	default: return -EINVAL;
	}
	if (*end)
		return -EINVAL;
	if (v && mul > ULLONG_MAX / v)
		return -EINVAL;
	*ret = v * mul;
	return 0;
}

static int parse_seconds(const char *s, double *ret)
{
	char *end;
	double v;

	if (!*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v >= 0.0) || v > OPTS_TIMEOUT_MAX)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *ret)
{
	unsigned long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* Append ",s" (or "s") to the growing kernel option list. */
static int append_kopt(struct hsmfs_opts *o, const char *s)
{
	size_t have = strlen(o->fuse_opts), add = strlen(s);
	char *n = realloc(o->fuse_opts, have + add + 2);

	if (!n)
		return -ENOMEM;
	if (have)
		n[have++] = ',';
	memcpy(n + have, s, add + 1);
	o->fuse_opts = n;
	return 0;
}

/*
 * The first option seen that only a remount takes (user_id=, group_id=:
 * the kernel's own, which mount(8) copies from the live mount), for
 * the error if it is not one.
 */
struct remount_only {
	char first[64];
};

/* One option of an -o list, already unescaped. */
static int parse_one(struct hsmfs_opts *o, const char *opt, bool *saw_dp,
		     struct remount_only *ro_only, char *err, size_t errlen)
{
	const char *val = strchr(opt, '=');
	size_t keylen = val ? (size_t)(val - opt) : strlen(opt);

	if (val)
		val++;
	if (!*opt)
		return 0; /* "a,,b" */
	if (!strcmp(opt, "nofail") || !strcmp(opt, "_netdev"))
		o->background = true; /* and otherwise ignored */
	if (in_list(ignored_opts, opt) || !strncmp(opt, "x-", 2) ||
	    !strncmp(opt, "comment=", 8))
		return 0;

#define KEY(k) (keylen == strlen(k) && !strncmp(opt, k, keylen))
	if (KEY("entry_timeout") || KEY("attr_timeout") ||
	    KEY("negative_timeout")) {
		double *dst = KEY("entry_timeout") ? &o->entry_timeout :
			      KEY("attr_timeout")  ? &o->attr_timeout :
						     &o->negative_timeout;
		if (!val || parse_seconds(val, dst))
			return fail(err, errlen,
				    "option '%s' needs seconds from 0 to %.0f",
				    opt, OPTS_TIMEOUT_MAX);
		return 0;
	}
	if (KEY("fd_cache")) {
		if (!val || parse_uint(val, OPTS_FD_CACHE_MIN, OPTS_FD_CACHE_MAX,
				       &o->fd_cache))
			return fail(err, errlen,
				    "option '%s' needs a number from %d to %d",
				    opt, OPTS_FD_CACHE_MIN, OPTS_FD_CACHE_MAX);
		return 0;
	}
	if (KEY("export_keep")) {
		if (!val || parse_uint(val, 0, OPTS_EXPORT_KEEP_MAX, &o->export_keep))
			return fail(err, errlen,
				    "option '%s' needs a number from 0 to %u",
				    opt, OPTS_EXPORT_KEEP_MAX);
		return 0;
	}
	if (KEY("max_threads")) {
		if (!val || parse_uint(val, 1, OPTS_THREADS_MAX, &o->max_threads))
			return fail(err, errlen,
				    "option '%s' needs a number from 1 to %d", opt,
				    OPTS_THREADS_MAX);
		return 0;
	}
	if (KEY("timeout")) {
		if (!val || parse_seconds(val, &o->timeout) || o->timeout < 0.001)
			return fail(err, errlen,
				    "option '%s' needs seconds from 0.001 to %.0f",
				    opt, OPTS_TIMEOUT_MAX);
		return 0;
	}
	if (KEY("progress_floor")) {
		if (!val || opts_parse_size(val, &o->progress_floor) ||
		    o->progress_floor > (1ull << 40))
			return fail(err, errlen,
				    "option '%s' needs bytes a second, such as 16k (0: any progress)",
				    opt);
		return 0;
	}
	if (KEY("archive_after")) {
		if (!val || parse_seconds(val, &o->archive_after))
			return fail(err, errlen,
				    "option '%s' needs seconds from 0 to %.0f",
				    opt, OPTS_TIMEOUT_MAX);
		return 0;
	}
	if (KEY("dir_ttl")) {
		if (!val || parse_seconds(val, &o->dir_ttl))
			return fail(err, errlen,
				    "option '%s' needs seconds from 0 to %.0f (0: never)",
				    opt, OPTS_TIMEOUT_MAX);
		return 0;
	}
	if (KEY("hook")) {
		if (!val || !*val)
			return fail(err, errlen, "option 'hook=' needs a command");
		free(o->hook);
		o->hook = strdup(val);
		return o->hook ? 0 : fail(err, errlen, "out of memory");
	}
	if (KEY("log")) {
		/* absolute: a daemon restarted in the background runs from / */
		if (!val || val[0] != '/')
			return fail(err, errlen, "option 'log=' needs an absolute path");
		free(o->log_file);
		o->log_file = strdup(val);
		return o->log_file ? 0 : fail(err, errlen, "out of memory");
	}
	if (KEY("log_level")) {
		static const char *const names[] = { "err", "warn", "info", "debug" };

		for (int i = 0; val && i < 4; i++)
			if (!strcmp(val, names[i])) {
				o->log_level = i;
				return 0;
			}
		return fail(err, errlen, "option 'log_level' needs err, warn, info or debug");
	}
	if (KEY("origin")) {
		if (!val || !*val)
			return fail(err, errlen, "option 'origin=' needs a URL");
		free(o->origin);
		o->origin = strdup(val);
		return o->origin ? 0 : fail(err, errlen, "out of memory");
	}
	if (KEY("nohook")) {
		if (val && (!strcmp(val, "wait") || !strcmp(val, "fail"))) {
			o->nohook_fail = !strcmp(val, "fail");
			return 0;
		}
		return fail(err, errlen, "option '%s' needs 'wait' or 'fail'", opt);
	}
	if (KEY("noprefetch") && !val) {
		o->prefetch = 0;
		return 0;
	}
	if (KEY("prefetch")) {
		if (!val || parse_uint(val, 0, OPTS_PREFETCH_MAX, &o->prefetch))
			return fail(err, errlen,
				    "option '%s' needs a number from 0 to %d", opt,
				    OPTS_PREFETCH_MAX);
		return 0;
	}
	if (KEY("max_pending_user")) {
		if (!val || parse_uint(val, 1, OPTS_PENDING_MAX, &o->max_pending_user))
			return fail(err, errlen,
				    "option '%s' needs a number from 1 to %d", opt,
				    OPTS_PENDING_MAX);
		return 0;
	}
	if (KEY("max_pending")) {
		if (!val || parse_uint(val, 1, OPTS_PENDING_MAX, &o->max_pending))
			return fail(err, errlen,
				    "option '%s' needs a number from 1 to %d", opt,
				    OPTS_PENDING_MAX);
		return 0;
	}
	if (KEY("chunk")) {
		unsigned long long c;

		if (!val || opts_parse_size(val, &c) || c < OPTS_CHUNK_MIN ||
		    c > OPTS_CHUNK_MAX || (c & (c - 1)))
			return fail(err, errlen,
				    "option '%s' needs a power of two from 4k to 1G",
				    opt);
		o->chunk = c;
		return 0;
	}
	if (KEY("first_fill")) {
		unsigned long long c;

		if (!val || opts_parse_size(val, &c) || (c && c < OPTS_CHUNK_MIN) ||
		    c > OPTS_CHUNK_MAX || (c & (c - 1)))
			return fail(err, errlen,
				    "option '%s' needs 0 or a power of two from 4k to 1G",
				    opt);
		o->first_fill = c;
		return 0;
	}
	if (KEY("readahead")) {
		unsigned long long c;

		if (!val || opts_parse_size(val, &c) || c < 4096 || c > OPTS_CHUNK_MAX ||
		    (c & 1023))
			return fail(err, errlen,
				    "option '%s' needs a size from 4k to 1G, in whole KiB", opt);
		o->readahead = c;
		return 0;
	}
	if (KEY("cache_max")) {
		/* its minimum, two chunks, is checked once chunk= is known */
		if (!val || opts_parse_size(val, &o->cache_max) || !o->cache_max)
			return fail(err, errlen, "option '%s' needs a size (k, M, G, T)", opt);
		return 0;
	}
	if (KEY("cache_min_free")) {
		size_t n = val ? strlen(val) : 0;

		o->cache_min_free = 0;
		o->cache_min_free_pct = 0;
		if (n > 1 && val[n - 1] == '%') {
			char num[16];

			if (n - 1 < sizeof(num)) {
				memcpy(num, val, n - 1);
				num[n - 1] = '\0';
				if (!parse_uint(num, 1, 99, &o->cache_min_free_pct))
					return 0;
			}
		} else if (val && !opts_parse_size(val, &o->cache_min_free)) {
			return 0;
		}
		return fail(err, errlen,
			    "option '%s' needs a size (k, M, G, T) or a percentage from 1%% to 99%%",
			    opt);
	}
	if (!val && (KEY("check_origin") || KEY("nocheck_origin"))) {
		o->background = KEY("nocheck_origin");
		return 0;
	}
	if (KEY("backend")) {
		if (!val || (strcmp(val, "fuse") && strcmp(val, "fanotify")))
			return fail(err, errlen, "option '%s' needs 'fuse' or 'fanotify'", opt);
		o->fanotify = !strcmp(val, "fanotify");
		return 0;
	}
	if (!val && (KEY("restart") || KEY("norestart"))) {
		o->norestart = KEY("norestart");
		return 0;
	}
	if (!val && KEY("thin")) {
		o->thin = true;
		return 0;
	}
	if (!val && (KEY("passthrough") || KEY("nopassthrough"))) {
		o->nopassthrough = KEY("nopassthrough");
		return 0;
	}
	if (KEY("cold_reads")) {
		if (!val || (strcmp(val, "direct") && strcmp(val, "cached")))
			return fail(err, errlen,
				    "option '%s' needs 'direct' or 'cached'", opt);
		o->cold_direct = !strcmp(val, "direct");
		return 0;
	}
	if (!val && KEY("store_shared")) {
		o->store_shared = true;
		return 0;
	}
	if (!val && (KEY("writeback") || KEY("nowriteback"))) {
		o->writeback = KEY("writeback");
		return 0;
	}
	if (!val && KEY("no_default_permissions")) {
		o->no_default_perms = true;
		return 0;
	}
	/*
	 * Access times are the daemon's (opts.h): the last of these wins,
	 * and opts_parse() gives the kernel noatime once.
	 */
	if (!val && (KEY("noatime") || KEY("atime") || KEY("relatime") || KEY("strictatime"))) {
		o->noatime = KEY("noatime");
		return 0;
	}
	if (!val && (KEY("nodiratime") || KEY("diratime"))) {
		o->nodiratime = KEY("nodiratime");
		return 0;
	}
	if (!val && KEY("remount")) {
		o->remount = true;
		return 0;
	}
	if (val && (KEY("user_id") || KEY("group_id"))) {
		if (!ro_only->first[0])
			snprintf(ro_only->first, sizeof(ro_only->first), "%s", opt);
		return 0;
	}
#undef KEY

	if ((!val && in_list(kernel_flags, opt)) ||
	    (val && has_prefix_in(kernel_keyed, opt))) {
		if (!strcmp(opt, "allow_other"))
			o->allow_other = true;
		else if (!strcmp(opt, "ro"))
			o->read_only = true;
		else if (!strcmp(opt, "rw"))
			o->read_only = false;
		else if (!strcmp(opt, "default_permissions"))
			*saw_dp = true;
		if (val && !val[0])
			return fail(err, errlen, "option '%s' needs a value",
				    opt);
		return append_kopt(o, opt) ? fail(err, errlen, "out of memory") : 0;
	}
	return fail(err, errlen, "unknown option '%s' (see hsmfs --help)", opt);
}

/* Split an -o argument at unescaped commas; "\," and "\\" escape. */
static int parse_list(struct hsmfs_opts *o, const char *list, bool *saw_dp,
		      struct remount_only *ro_only, char *err, size_t errlen)
{
	char *buf = malloc(strlen(list) + 1), *w;
	const char *r;
	int res = 0;

	if (!buf)
		return fail(err, errlen, "out of memory");
	for (r = list;;) {
		w = buf;
		while (*r && *r != ',') {
			if (*r == '\\' && r[1])
				r++;
			*w++ = *r++;
		}
		*w = '\0';
		res = parse_one(o, buf, saw_dp, ro_only, err, errlen);
		if (res || !*r)
			break;
		r++;
	}
	free(buf);
	return res;
}

static void set_defaults(struct hsmfs_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->ready_fd = -1;
	o->log_level = -1;
	o->entry_timeout = -1; /* the defaults depend on store_shared */
	o->attr_timeout = -1;
	o->negative_timeout = -1;
	o->timeout = 30.0;
	o->archive_after = -1; /* only when asked */
	o->progress_floor = OPTS_PROGRESS_FLOOR;
	o->max_pending = 1024;
	o->prefetch = OPTS_PREFETCH_DEFAULT;
	o->export_keep = OPTS_EXPORT_KEEP_DEFAULT;
	o->chunk = 1ULL << 20;
	o->first_fill = OPTS_FIRST_FILL_DEFAULT;
}

int opts_parse(int argc, char *const argv[], struct hsmfs_opts *ret, char *err,
	       size_t errlen)
{
	struct remount_only ro_only = { "" };
	struct hsmfs_opts o;
	bool saw_dp = false, no_more_flags = false;
	int i, res = 0;

	set_defaults(&o);
	o.fuse_opts = calloc(1, 1);
	if (!o.fuse_opts)
		return fail(err, errlen, "out of memory");

	for (i = 1; i < argc && !res; i++) {
		const char *a = argv[i];

		if (no_more_flags || a[0] != '-' || !a[1]) {
			char **slot = !o.store ? &o.store :
				      !o.mountpoint ? &o.mountpoint : NULL;

			if (!slot)
				res = fail(err, errlen,
					   "unexpected argument '%s'", a);
			else if (!(*slot = strdup(a)))
				res = fail(err, errlen, "out of memory");
			continue;
		}
		if (!strcmp(a, "--")) {
			no_more_flags = true;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			o.show_help = true;
		} else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			o.show_version = true;
		} else if (!strcmp(a, "-f")) {
			o.foreground = true;
		} else if (!strcmp(a, "-d") || !strcmp(a, "--debug")) {
			o.debug = o.foreground = true;
		} else if (!strcmp(a, "-s")) {
			o.single_thread = true;
		} else if (!strcmp(a, "-o") || !strcmp(a, "--ready-fd")) {
			if (i + 1 >= argc) {
				res = fail(err, errlen, "option '%s' needs a value", a);
				break;
			}
			if (a[1] == 'o') {
				res = parse_list(&o, argv[++i], &saw_dp, &ro_only, err, errlen);
			} else {
				unsigned fd;

				if (parse_uint(argv[++i], 0, INT_MAX, &fd))
					res = fail(err, errlen,
						   "--ready-fd needs a descriptor number");
				else
					o.ready_fd = fd;
			}
		} else if (!strncmp(a, "-o", 2)) {
			res = parse_list(&o, a + 2, &saw_dp, &ro_only, err, errlen);
		} else if (!strncmp(a, "--ready-fd=", 11)) {
			unsigned fd;

			if (parse_uint(a + 11, 0, INT_MAX, &fd))
				res = fail(err, errlen,
					   "--ready-fd needs a descriptor number");
			else
				o.ready_fd = fd;
		} else {
			res = fail(err, errlen, "unknown option '%s' (see hsmfs --help)", a);
		}
	}

	if (!res && ro_only.first[0] && !o.remount)
		res = fail(err, errlen, "unknown option '%s' (see hsmfs --help)", ro_only.first);
	if (!res && !o.show_help && !o.show_version) {
		if (!o.store)
			res = fail(err, errlen, "missing STORE and MOUNTPOINT (see hsmfs --help)");
		else if (!o.mountpoint)
			res = fail(err, errlen, "missing MOUNTPOINT (see hsmfs --help)");
	}
	if (!res && o.allow_other && !o.no_default_perms && !saw_dp &&
	    append_kopt(&o, "default_permissions"))
		res = fail(err, errlen, "out of memory");
	o.default_perms = saw_dp || (o.allow_other && !o.no_default_perms);
	/*
	 * noatime shown in the mount's flags (/proc/self/mountinfo);
	 * nodiratime is the daemon's alone: the fusermount3 of Debian 12
	 * refuses it ("unknown option"), and the kernel keeps no atime of a
	 * FUSE directory anyway
	 */
	if (!res && o.noatime && append_kopt(&o, "noatime"))
		res = fail(err, errlen, "out of memory");
	if (!res && o.no_default_perms && saw_dp)
		res = fail(err, errlen,
			   "default_permissions and no_default_permissions contradict each other");
	if (o.entry_timeout < 0)
		o.entry_timeout = o.store_shared ? OPTS_SHARED_TIMEOUT : OPTS_CACHE_DEFAULT;
	if (o.attr_timeout < 0)
		o.attr_timeout = o.store_shared ? OPTS_SHARED_TIMEOUT : OPTS_CACHE_DEFAULT;
	if (o.negative_timeout < 0 && o.store_shared)
		o.negative_timeout = 0;
	/* a fill is a chunk: a cache that cannot hold two could never turn over */
	if (!res && o.cache_max && o.cache_max < 2 * o.chunk)
		res = fail(err, errlen,
			   "cache_max=%llu is less than two chunks (chunk=%llu): it needs at least %llu",
			   o.cache_max, o.chunk, 2 * o.chunk);

	/*
	 * What the fanotify front end does not do yet (hsmfs(8) FANOTIFY BACKEND):
	 * refused in one line, never ignored
	 */
	if (!res && o.fanotify) {
		/*
		 * dir_ttl: a listing again would make names users could open
		 * before their marks, and no event asks for one on this mount
		 */
		const char *no = o.archive_after >= 0 ? "archive_after" :
				 o.dir_ttl > 0 ? "dir_ttl" : NULL;

		if (no)
			res = fail(err, errlen, "backend=fanotify does not support %s yet", no);
	}
	/*
	 * The kernel answers lseek(SEEK_DATA) and st_blocks of a fanotify
	 * mount's files itself: a range holding no blocks is a hole to cp,
	 * tar and bsdtar, which copy zeros for it.  So an eviction keeps
	 * the blocks it empties, and a cache limit could free nothing,
	 * unless the user says thin and takes that.
	 */
	if (!res && o.thin && !o.fanotify)
		res = fail(err, errlen, "option 'thin' is backend=fanotify's (a FUSE mount "
			   "answers lseek itself)");
	if (!res && o.fanotify && !o.thin &&
	    (o.cache_max || o.cache_min_free || o.cache_min_free_pct))
		res = fail(err, errlen, "backend=fanotify: %s needs thin: without it every file "
			   "keeps blocks for all its bytes, so an eviction frees none (hsmfs(8) "
			   "FANOTIFY BACKEND)", o.cache_max ? "cache_max" : "cache_min_free");

	if (res) {
		opts_free(&o);
		set_defaults(ret);
		return res;
	}
	*ret = o;
	return 0;
}

void opts_free(struct hsmfs_opts *o)
{
	if (!o)
		return;
	free(o->store);
	free(o->mountpoint);
	free(o->fuse_opts);
	free(o->hook);
	free(o->origin);
	free(o->log_file);
	o->store = o->mountpoint = o->fuse_opts = o->hook = o->origin = o->log_file = NULL;
}

bool opts_fuse_conf_allows_other(const char *text)
{
	const char *line = text;

	while (line && *line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);

		while (len && (*line == ' ' || *line == '\t'))
			line++, len--;
		while (len && (line[len - 1] == ' ' || line[len - 1] == '\t' ||
			       line[len - 1] == '\r'))
			len--;
		if (len == 16 && !strncmp(line, "user_allow_other", 16))
			return true;
		line = end ? end + 1 : NULL;
	}
	return false;
}
