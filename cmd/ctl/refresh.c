/*
 * refresh.c - hsmfsctl refresh [--recursive] DIR... | -s STORE: the
 * directories a mount listed lazily listed again from the origin (the
 * daemon does it, asked through user.hsmfs.refresh), and the trees
 * imported with --listing listed again and synced as import --sync
 * does (import_apply()).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "ctl.h"
#include "import-sync.h"
#include "listings.h"
#include "origin-walk.h"

/*
 * One directory: 1 listed again (descend), 0 not listed yet (its first
 * look lists it: nothing below it to refresh), -1 failed (said why).
 */
static int refresh_one(const char *path)
{
	char val[64];
	ssize_t n = hgetxattr(path, "user.hsmfs.refresh", val, sizeof(val) - 1);

	if (n < 0 && errno == ENODATA)
		return 1; /* not from an origin (made through the mount): below it may be */
	if (n < 0) {
		fprintf(stderr, "hsmfsctl: refresh '%s': %s\n", path,
			errno == EOPNOTSUPP || errno == ENOTSUP ? "not an hsmfs mount" :
								 strerror(errno));
		return -1;
	}
	val[n] = '\0';
	return strcmp(val, "unlisted") ? 1 : 0;
}

/* A name of a directory as a refresh found it, for the summary. */
struct dirent_seen {
	char *name;
	bool dir;
	uint64_t size;
	int64_t mtime;
};

static int cmp_seen(const void *a, const void *b)
{
	return strcmp(((const struct dirent_seen *)a)->name, ((const struct dirent_seen *)b)->name);
}

static void seen_free(struct dirent_seen *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
}

/* The names of the listed directory path, sorted; NULL and 0 if it cannot be read. */
static struct dirent_seen *seen_of(const char *path, size_t *ret_n)
{
	struct dirent_seen *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d = opendir(path);

	*ret_n = 0;
	if (!d)
		return NULL;
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (n == cap) {
			struct dirent_seen *more = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v));

			if (!more)
				break;
			v = more;
		}
		v[n] = (struct dirent_seen){ strdup(de->d_name), S_ISDIR(st.st_mode),
					     (uint64_t)st.st_size, st.st_mtim.tv_sec };
		if (v[n].name)
			n++;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmp_seen);
	*ret_n = n;
	return v;
}

/* What a refresh of the lazy directories did, for its summary line. */
static struct {
	unsigned dirs;
	size_t nnew, nremoved, nchanged;
} lazy;

/* Count the difference between a directory's names before and after. */
static void seen_diff(const struct dirent_seen *a, size_t na, const struct dirent_seen *b,
		      size_t nb)
{
	size_t i = 0, j = 0;

	while (i < na || j < nb) {
		int c = i == na ? 1 : j == nb ? -1 : strcmp(a[i].name, b[j].name);

		if (c < 0) {
			lazy.nremoved++;
			i++;
		} else if (c > 0) {
			lazy.nnew++;
			j++;
		} else {
			lazy.nchanged += a[i].dir != b[j].dir ||
					 (!a[i].dir && (a[i].size != b[j].size ||
							a[i].mtime != b[j].mtime));
			i++;
			j++;
		}
	}
}

/* Is path a directory not listed yet (whose first look would list it)? */
static bool unlisted_dir(const char *path)
{
	char val[32];
	ssize_t n = hgetxattr(path, "user.hsmfs.state", val, sizeof(val) - 1);

	return n == 8 && !memcmp(val, "unlisted", 8);
}

static int refresh_tree(const char *path, bool recursive, int depth)
{
	struct dirent_seen *before = NULL, *after;
	size_t nbefore = 0, nafter;
	int res, bad;
	struct dirent *de;
	DIR *d;

	/* its names before, unless reading them would list it the first time */
	if (!unlisted_dir(path))
		before = seen_of(path, &nbefore);
	res = refresh_one(path);
	bad = res < 0;
	if (res > 0 && before) {
		lazy.dirs++;
		after = seen_of(path, &nafter);
		seen_diff(before, nbefore, after, nafter);
		seen_free(after, nafter);
	} else if (res > 0) {
		lazy.dirs++; /* unlisted, names looked up: listed, then refreshed (not diffed) */
	}
	seen_free(before, nbefore);
	tty_progress(false, "refresh: %u directories listed again (%s)", lazy.dirs, path);
	if (res <= 0 || !recursive)
		return bad;
	if (depth > 4096 || !(d = opendir(path))) {
		fprintf(stderr, "hsmfsctl: refresh '%s': %s\n", path, strerror(errno));
		return 1;
	}
	while ((de = readdir(d))) {
		char sub[PATH_MAX];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= (int)sizeof(sub))
			continue;
		if (de->d_type == DT_DIR ||
		    (de->d_type == DT_UNKNOWN && !lstat(sub, &st) && S_ISDIR(st.st_mode)))
			bad |= refresh_tree(sub, true, depth + 1);
	}
	closedir(d);
	return bad;
}

/*
 * The imported trees below dir (a directory of a mount; or, with
 * store_opt, the whole unmounted store) follow their origin: each
 * listing the store recorded (import --listing) is listed again and
 * applied as import --sync applies it, below dir only (recursive: and
 * below its directories).  Says what it kept and why, then one line of
 * totals.  Nothing recorded: nothing to do, nothing said (but for a
 * store named).  Returns an exit code.
 */
static int refresh_imported(const char *dir, const char *store_opt, bool recursive)
{
	char mnt[PATH_MAX], sub[PATH_MAX] = "", store[PATH_MAX];
	struct listing_rec *recs = NULL;
	size_t nrec = 0, nnew = 0, nremoved = 0, nchanged = 0, nkept = 0;
	int rc = X_OK_, res;

	if (store_opt) {
		snprintf(store, sizeof(store), "%s", store_opt);
	} else {
		ssize_t sn;

		if (mount_of(dir, mnt, sizeof(mnt), sub, sizeof(sub)))
			return X_OK_; /* refresh_tree() said why */
		sn = hgetxattr(mnt, "user.hsmfs.store", store, sizeof(store) - 1);
		if (sn < 0)
			return X_OK_;
		store[sn] = '\0';
	}
	res = listing_recs_read(store, &recs, &nrec);
	if (res) {
		fprintf(stderr, "hsmfsctl: refresh '%s': cannot read the recorded listings: %s\n",
			dir, strerror(-res));
		return X_STORE;
	}
	if (!nrec && store_opt) {
		fprintf(stderr, "hsmfsctl: refresh: store '%s' has no listing recorded (import "
			"--listing records one)\n", store);
		return X_INPUT;
	}
	for (size_t i = 0; i < nrec; i++) {
		const char *url = recs[i].url;
		struct item *items = NULL;
		size_t n = 0, cap = 0;
		char *base = NULL;

		if (asprintf(&base, "%s%s", url, url[strlen(url) - 1] == '/' ? "" : "/") < 0) {
			rc = X_PARTIAL;
			break;
		}
		if (collect(url, &recs[i].so, sub, !recursive, &items, &n, &cap)) {
			fprintf(stderr, "hsmfsctl: refresh '%s': nothing changed from '%s'\n", dir,
				url);
			rc = X_PARTIAL;
		} else {
			struct import_run r = { .store = store, .mnt = store_opt ? NULL : mnt,
						.src = url, .items = items, .n = n, .sync = true,
						.base = base, .sub = sub, .shallow = !recursive };

			if (import_apply(&r))
				rc = rc == X_OK_ ? X_PARTIAL : rc;
			nnew += r.nnew;
			nremoved += r.nremoved;
			nchanged += r.nchanged;
			nkept += r.nkept;
		}
		items_free(items, n);
		free(base);
	}
	listing_recs_free(recs, nrec);
	if (nrec) {
		tty_progress_end();
		printf("refreshed %s: %zu new, %zu removed, %zu changed", dir, nnew, nremoved,
		       nchanged);
		if (nkept)
			printf(", %zu kept (the user's, above)", nkept);
		putchar('\n');
	}
	return rc;
}

int cmd_refresh(int argc, char **argv)
{
	const char *store = NULL;
	bool recursive = false;
	int i, bad = 0, rc = X_OK_;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--recursive") || !strcmp(argv[i], "-r")) {
			recursive = true;
		} else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
			store = argv[++i];
		} else {
			fprintf(stderr, "hsmfsctl: refresh: unknown option '%s'\n", argv[i]);
			return X_USAGE;
		}
	}
	if (store) {
		if (i != argc) {
			fprintf(stderr, "hsmfsctl: refresh -s STORE takes no directory (the whole "
				"store is refreshed)\n");
			return X_USAGE;
		}
		return refresh_imported(store, store, true);
	}
	if (i == argc) {
		fprintf(stderr, "hsmfsctl: refresh needs a directory\n");
		return X_USAGE;
	}
	for (; i < argc; i++) {
		int r;

		lazy.dirs = 0;
		lazy.nnew = lazy.nremoved = lazy.nchanged = 0;
		bad |= refresh_tree(argv[i], recursive, 0);
		tty_progress_end();
		if (lazy.dirs)
			printf("refreshed %s: %u director%s listed again: %zu new, %zu removed, "
			       "%zu changed\n", argv[i], lazy.dirs, lazy.dirs == 1 ? "y" : "ies",
			       lazy.nnew, lazy.nremoved, lazy.nchanged);
		r = refresh_imported(argv[i], NULL, recursive);
		if (r != X_OK_ && rc == X_OK_)
			rc = r;
	}
	tty_progress_end();
	return rc != X_OK_ ? rc : bad ? X_PARTIAL : X_OK_;
}
