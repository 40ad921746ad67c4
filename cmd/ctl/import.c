/*
 * import.c - hsmfsctl import (-s STORE | -m MOUNTPOINT) MANIFEST|- |
 * --listing URL [--sync]: placeholders made in a store, or in the store
 * of a live mount, from a JSON Lines manifest or an origin's listing
 * (origin-walk.c).  Everything is read and checked before anything is
 * written; then import_apply(), which refresh uses too, writes it in
 * batches of one transaction each.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ctl.h"
#include "import-sync.h"
#include "listings.h"
#include "manifest.h"
#include "meta.h"
#include "origin-walk.h"
#include "place.h"
#include "store-tree.h"

static int cmp_items(const void *a, const void *b)
{
	const struct item *x = *(struct item *const *)a, *y = *(struct item *const *)b;
	int c = strcmp(x->e.path, y->e.path);

	return c ? c : (int)x->line - (int)y->line;
}

/*
 * Apply the import r to its store, in batches, each one transaction
 * (a failed batch is undone); a sync removes first what its listing no
 * longer has (sync_prune()) and never makes over a user's file
 * (sync_keep()).  On a live mount the kernel is told of every change.
 * Counts in r; returns an exit code (X_*), having said why.
 */
int import_apply(struct import_run *r)
{
	char err[512], dbpath[PATH_MAX + 32];
	struct item *items = r->items;
	size_t n = r->n, i, bad = 0;
	struct meta *m = NULL;
	int root = -1, lockfd = -1, rc = X_OK_;
	bool fresh;

	r->sorted = malloc((n ? n : 1) * sizeof(*r->sorted));
	if (!r->sorted) {
		fprintf(stderr, "hsmfsctl: out of memory\n");
		return X_STORE;
	}
	for (i = 0; i < n; i++)
		r->sorted[i] = &items[i];
	qsort(r->sorted, n, sizeof(*r->sorted), cmp_items);
	for (i = 1; i < n; i++) {
		const char *a = r->sorted[i - 1]->e.path, *b = r->sorted[i]->e.path;
		size_t la = strlen(a);

		if (!strcmp(a, b))
			fprintf(stderr, "%s:%u: duplicate path '%s' (first at line %u)\n",
				r->src, r->sorted[i]->line, b, r->sorted[i - 1]->line), bad++;
		else if (!strncmp(a, b, la) && b[la] == '/' && !r->sorted[i - 1]->e.is_dir)
			fprintf(stderr, "%s:%u: '%s' is a file in this manifest (line %u), not a directory\n",
				r->src, r->sorted[i]->line, a, r->sorted[i - 1]->line), bad++;
	}
	if (bad) {
		fprintf(stderr, "hsmfsctl: %zu bad line%s in '%s'; nothing imported\n", bad,
			bad == 1 ? "" : "s", r->src);
		rc = X_INPUT;
		goto out;
	}

	/* the store: locked when unmounted, so no daemon runs meanwhile */
	root = open(r->store, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		fprintf(stderr, "hsmfsctl: store '%s': %s\n", r->store, strerror(errno));
		rc = X_STORE;
		goto out;
	}
	snprintf(dbpath, sizeof(dbpath), "%s/.hsmfs", r->store);
	mkdir(dbpath, 0700);
	if (!r->mnt) {
		snprintf(dbpath, sizeof(dbpath), "%s/.hsmfs/lock", r->store);
		lockfd = open(dbpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
			fprintf(stderr, "hsmfsctl: store '%s' is mounted; %s with -m MOUNTPOINT\n",
				r->store, r->sync ? "refresh through the mount" : "import");
			rc = X_STORE;
			goto out;
		}
	}
	snprintf(dbpath, sizeof(dbpath), "%s/.hsmfs/meta.db", r->store);
	/* a store no daemon served yet: its first mount is not after a crash */
	fresh = !r->mnt && access(dbpath, F_OK) < 0 && errno == ENOENT;
	if (meta_open(dbpath, &m)) {
		fprintf(stderr, "hsmfsctl: cannot open '%s': %s\n", dbpath, meta_errmsg(m));
		rc = X_STORE;
		goto out;
	}
	if (r->sync && sync_prune(r, root, m)) {
		rc = X_PARTIAL;
		goto out;
	}

	/* apply in batches, each one transaction; a failed batch is undone */
	for (i = 0; i < n; i += BATCH) {
		size_t end = i + BATCH < n ? i + BATCH : n, j;
		bool created[BATCH], changed[BATCH], made[BATCH];
		int res = meta_begin(m);

		for (j = i; !res && j < end; j++) {
			enum keep k = r->sync ? sync_keep(r, root, m, &items[j]) : K_APPLY;

			tty_progress(false, "%s: %zu / %zu files", r->sync ? "refresh" : "import", j, n);
			enum place_outcome o = PLACE_SAME;

			created[j - i] = false;
			if (k == K_APPLY)
				res = import_one(root, r->mnt, m, &items[j], &created[j - i], &o,
						 err, sizeof(err));
			if (res) {
				tty_progress_end();
				fprintf(stderr, "%s:%u: %s\n", r->src, items[j].line, err);
				break;
			}
			r->nnew += k == K_APPLY && o == PLACE_NEW;
			r->nchanged += k == K_APPLY && o == PLACE_CHANGED;
			r->nsame += k == K_SAME || (k == K_APPLY && o == PLACE_SAME);
			changed[j - i] = k == K_APPLY && o == PLACE_CHANGED && !items[j].e.is_dir;
			made[j - i] = k == K_APPLY && o == PLACE_NEW;
		}
		if (!res)
			res = meta_commit(m);
		if (res) {
			meta_rollback(m);
			for (size_t k = i; k < j || (k == j && k < end && created[k - i]); k++)
				if (created[k - i])
					remove_path(root, items[k].e.path, items[k].e.is_dir);
			/* names a look meanwhile may have cached: asked again */
			if (r->mnt)
				reload(r->mnt, NULL);
			fprintf(stderr, "hsmfsctl: import stopped; lines %u to %u were not imported\n",
				items[i].line, items[n - 1].line);
			rc = i || r->nremoved ? X_PARTIAL : X_INPUT;
			goto out;
		}
		/* a live mount re-reads the state of changed files and drops their cache */
		for (j = i; r->mnt && j < end; j++)
			if (changed[j - i] && reload(r->mnt, items[j].e.path))
				rc = X_PARTIAL;
		/*
		 * and drops what its kernel holds of the directories that
		 * gained names (their listings, and names it knew missing)
		 */
		if (r->mnt && reload_made(r->mnt, items + i, made, end - i))
			rc = X_PARTIAL;
	}
	tty_progress_end();
	/* directories imported unlisted: the live mount lists them on first look */
	for (i = 0; r->mnt && i < n; i++)
		if (items[i].e.is_dir) {
			reload(r->mnt, NULL);
			break;
		}
	if (atomic_load(&place_unmarked))
		fprintf(stderr, "hsmfsctl: warning: cannot mark placeholders in the store (%s); "
			"a lost database could not be rebuilt\n",
			strerror(atomic_load(&place_unmarked)));
	if (fresh) {
		/* the mark a clean unmount leaves (fs/check.h) */
		snprintf(dbpath, sizeof(dbpath), "%s/.hsmfs/clean", r->store);
		int cfd = open(dbpath, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);

		if (cfd >= 0) {
			fsync(cfd);
			close(cfd);
		}
	}
out:
	free(r->sorted);
	r->sorted = NULL;
	meta_close(m);
	if (root >= 0)
		close(root);
	if (lockfd >= 0)
		close(lockfd);
	return rc;
}

int cmd_import(int argc, char **argv)
{
	const char *store = NULL, *mnt = NULL, *file = NULL, *listing = NULL;
	struct s3opts so = { .page = 1000 };
	char store_buf[PATH_MAX], err[512], *base = NULL;
	struct item *items = NULL;
	size_t n = 0, cap = 0;
	unsigned lineno = 0, bad = 0;
	struct import_run r = { 0 };
	char *line = NULL;
	size_t linecap = 0;
	ssize_t len;
	FILE *f;
	int rc = X_OK_;
	bool sync = false;

	for (int i2 = 1; i2 < argc; i2++) {
		if (!strcmp(argv[i2], "-s") && i2 + 1 < argc)
			store = argv[++i2];
		else if (!strcmp(argv[i2], "-m") && i2 + 1 < argc)
			mnt = argv[++i2];
		else if (!strcmp(argv[i2], "--listing") && i2 + 1 < argc)
			listing = argv[++i2];
		else if (!strcmp(argv[i2], "--sync"))
			sync = true;
		else if (!strcmp(argv[i2], "--s3"))
			so.s3 = true;
		else if (!strcmp(argv[i2], "--aws-sigv4") && i2 + 1 < argc)
			so.sigv4 = argv[++i2];
		else if (!strcmp(argv[i2], "--aws-keys-file") && i2 + 1 < argc)
			so.keys_file = argv[++i2];
		else if (!strcmp(argv[i2], "--page-size") && i2 + 1 < argc)
			so.page = atoi(argv[++i2]) > 0 ? atoi(argv[i2]) : 1000;
		else if (!file && (argv[i2][0] != '-' || !strcmp(argv[i2], "-")))
			file = argv[i2];
		else {
			fprintf(stderr, "hsmfsctl: import: unexpected argument '%s'\n", argv[i2]);
			return X_USAGE;
		}
	}
	if (!file == !listing || !!store == !!mnt) {
		fprintf(stderr, "hsmfsctl: import needs a manifest or --listing URL, and one of -s STORE or -m MOUNTPOINT\n");
		return X_USAGE;
	}
	if (sync && !listing) {
		fprintf(stderr, "hsmfsctl: import --sync needs --listing URL (what a manifest "
			"no longer names is not known to be gone)\n");
		return X_USAGE;
	}
	if (mnt) {
		ssize_t sn = hgetxattr(mnt, "user.hsmfs.store", store_buf, sizeof(store_buf) - 1);

		if (sn < 0) {
			int e = errno;

			if (!fanotify_mount_said(mnt))
				fprintf(stderr, "hsmfsctl: '%s' is not an hsmfs mount: %s\n", mnt,
					strerror(e));
			return X_STORE;
		}
		store_buf[sn] = '\0';
		store = store_buf;
	}

	/* 1. read and check everything; nothing is written unless all is good */
	if (listing) {
		file = listing;
		if (collect(listing, &so, NULL, false, &items, &n, &cap)) {
			tty_progress_end();
			fprintf(stderr, "hsmfsctl: nothing imported\n");
			rc = X_INPUT;
			goto out;
		}
		goto apply;
	}
	f = strcmp(file, "-") ? fopen(file, "r") : stdin;
	if (!f) {
		fprintf(stderr, "hsmfsctl: manifest '%s': %s\n", file, strerror(errno));
		return X_INPUT;
	}
	while ((len = getline(&line, &linecap, f)) >= 0) {
		lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			len--;
		if (!len || line[strspn(line, " \t")] == '\n')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			items = realloc(items, cap * sizeof(*items));
			if (!items) {
				fprintf(stderr, "hsmfsctl: out of memory\n");
				return X_STORE;
			}
		}
		if (manifest_parse_line(line, len, &items[n].e, err, sizeof(err))) {
			fprintf(stderr, "%s:%u: %s\n", file, lineno, err);
			bad++;
			continue;
		}
		items[n++].line = lineno;
	}
	free(line);
	if (f != stdin)
		fclose(f);
	if (bad) {
		fprintf(stderr, "hsmfsctl: %u bad line%s in '%s'; nothing imported\n", bad,
			bad == 1 ? "" : "s", file);
		rc = X_INPUT;
		goto out;
	}
apply:
	if (sync && asprintf(&base, "%s%s", listing,
			     listing[strlen(listing) - 1] == '/' ? "" : "/") < 0) {
		rc = X_STORE;
		goto out;
	}
	r = (struct import_run){ .store = store, .mnt = mnt, .src = file, .items = items, .n = n,
				 .sync = sync, .base = base, .sub = "" };
	rc = import_apply(&r);
	if (rc == X_INPUT || rc == X_STORE)
		goto out;
	if (sync)
		printf("imported %zu file%s: %zu new, %zu changed, %zu unchanged, %zu removed, "
		       "%zu kept\n", n, n == 1 ? "" : "s", r.nnew, r.nchanged, r.nsame,
		       r.nremoved, r.nkept);
	else
		printf("imported %zu file%s: %zu new, %zu changed, %zu unchanged\n", n,
		       n == 1 ? "" : "s", r.nnew, r.nchanged, r.nsame);
	/* what refresh lists again */
	if (listing && rc == X_OK_)
		listing_record(store, listing, &so);
out:
	items_free(items, n);
	free(base);
	return rc;
}
