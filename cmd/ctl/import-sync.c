/*
 * import-sync.c - what a sync (import --sync, refresh) adds to an import
 * (import-sync.h): what the listing no longer names removed, the user's
 * files kept.
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
#include <unistd.h>

#include "../http-list.h"
#include "ctl.h"
#include "import-sync.h"
#include "meta.h"
#include "origin-walk.h"
#include "store.h"
#include "store-tree.h"

/* Both NULL, or the same string. */
static bool str_same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static int cmp_path_key(const void *key, const void *elem)
{
	return strcmp(key, (*(struct item *const *)elem)->e.path);
}

/* Does the import name path? */
static bool run_names(const struct import_run *r, const char *path)
{
	return r->n && bsearch(path, r->sorted, r->n, sizeof(*r->sorted), cmp_path_key);
}

/* Does it name something below the directory dir (its path ending in '/')? */
static bool run_names_below(const struct import_run *r, const char *dir)
{
	size_t lo = 0, hi = r->n, ld = strlen(dir);

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(r->sorted[mid]->e.path, dir) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->n && !strncmp(r->sorted[lo]->e.path, dir, ld);
}

/* A name the refresh leaves as it is, and why: said once, counted. */
static void kept(struct import_run *r, const char *rel, const char *why)
{
	printf("kept '%s': %s\n", rel, why);
	r->nkept++;
}

/*
 * Is the managed file rel (row, st: its row and the store's stat) the
 * user's to keep, whatever the origin did?  Changed or made through the
 * mount (dirty, new, in conflict: in the database, or, on a live mount,
 * in the daemon's memory, which the database may lag), pinned, or with
 * a second name a user linked.  Sets why (a static string) when it is.
 */
static bool users(const struct import_run *r, const char *rel, const struct meta_file *row,
		  const struct stat *st, const char **why)
{
	char p[PATH_MAX + 4200], state[256] = "";
	ssize_t sn;

	if (r->mnt) {
		snprintf(p, sizeof(p), "%s/%s", r->mnt, rel);
		sn = hlgetxattr(p, "user.hsmfs.state", state, sizeof(state) - 1);
		state[sn > 0 ? sn : 0] = '\0';
	}
	if (row->state == META_DIRTY || (row->flags & (META_F_NEW | META_F_CONFLICT)) ||
	    !strncmp(state, "dirty", 5) || strstr(state, ",new") || strstr(state, "conflict"))
		*why = "changed through the mount";
	else if ((row->flags & META_F_PINNED) || strstr(state, "pinned"))
		*why = "pinned (hsmfsctl unpin, then refresh again)";
	else if (st->st_nlink > 1)
		*why = "a user linked it (it has more than one name)";
	else if (strstr(state, "passthrough"))
		*why = "open in passthrough mode (close it, then refresh again)";
	else
		return false;
	return true;
}

/*
 * A file of a live mount about to be removed (p: its path on the mount,
 * st: its store file), asked again just before: changed, made, pinned,
 * linked or open for passthrough since the sync first looked?  why says.
 */
static bool busy_now(const char *p, const struct stat *st, const char **why)
{
	char state[256];
	ssize_t sn = hlgetxattr(p, "user.hsmfs.state", state, sizeof(state) - 1);

	state[sn > 0 ? sn : 0] = '\0';
	if (!strncmp(state, "dirty", 5) || strstr(state, ",new") || strstr(state, "conflict"))
		*why = "changed through the mount meanwhile";
	else if (strstr(state, "pinned"))
		*why = "pinned meanwhile";
	else if (st->st_nlink > 1)
		*why = "a user linked it meanwhile";
	else if (strstr(state, "passthrough"))
		*why = "open in passthrough mode (close it, then refresh again)";
	else
		return false;
	return true;
}

/*
 * A sync is about to make item it: K_APPLY (make it as an import does),
 * K_SAME (the user's file, of the origin's version still: nothing to
 * do), or K_KEEP (the user's, or not a managed file: said, kept).
 */
enum keep sync_keep(struct import_run *r, int root, struct meta *m,
			   const struct item *it)
{
	const char *why = NULL;
	struct meta_file row;
	struct stat st;
	bool same;
	int res;

	if (fstatat(root, it->e.path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return K_APPLY; /* new (import_one says why if it cannot be) */
	if (!S_ISREG(st.st_mode)) {
		kept(r, it->e.path, "not a file here (made through the mount)");
		return K_KEEP;
	}
	res = meta_get(m, st.st_ino, &row);
	if (res == -ENOENT) {
		kept(r, it->e.path, "not from the origin (made through the mount)");
		return K_KEEP;
	}
	if (res)
		return K_APPLY; /* import_one reports the database */
	same = str_same(row.origin, it->e.url) && str_same(row.version, it->e.version) &&
	       (row.state == META_DIRTY ? row.osize : row.size) == it->e.size;
	if (!str_same(row.origin, it->e.url)) {
		why = "not this listing's file (renamed here through the mount, "
		      "or imported from elsewhere)";
	} else if (same && row.state != META_DIRTY &&
		   !(row.flags & (META_F_NEW | META_F_CONFLICT))) {
		/* import_one leaves it as it is: the mount need not be asked */
	} else if (users(r, it->e.path, &row, &st, &why) && same) {
		meta_file_free(&row);
		return K_SAME; /* the origin's version is the one it started from */
	}
	meta_file_free(&row);
	if (!why)
		return K_APPLY;
	kept(r, it->e.path, why);
	return K_KEEP;
}

/* A file a sync removes: its path and store inode number. */
struct gone {
	char *rel;  /* owned */
	uint64_t ino;
};

struct gones {
	struct gone *v;
	size_t n, cap;
};

/*
 * Find below the store directory rel (fd dfd, which this closes) the
 * files the sync's listing no longer names: managed, clean, from this
 * listing (their origin the URL their path has in it), not the user's
 * (users()).  Directories with a row of their own (listed lazily, by
 * the daemon) are theirs, not walked.  0 or -errno (said why).
 */
static int sync_find(struct import_run *r, struct meta *m, int dfd, char *rel, size_t cap,
		     int depth, struct gones *g)
{
	size_t rl = strlen(rel);
	struct dirent *de;
	int res = 0;
	DIR *d = fdopendir(dfd);

	if (!d) {
		res = -errno;
		close(dfd);
		fprintf(stderr, "hsmfsctl: '%s/%s': %s\n", r->store, rel, strerror(-res));
		return res;
	}
	while (!res && (de = readdir(d))) {
		struct meta_file row;
		struct stat st;
		char *url, *esc;
		const char *why = NULL;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (!rl && !strcmp(de->d_name, STORE_STATE_DIR)))
			continue;
		if (rl + strlen(de->d_name) + 2 > cap ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		snprintf(rel + rl, cap - rl, "%s", de->d_name);
		if (S_ISDIR(st.st_mode)) {
			int sfd;

			if (r->shallow || depth > 4096)
				continue;
			if (!meta_get(m, st.st_ino, &row)) {
				meta_file_free(&row); /* listed lazily: the daemon's */
				continue;
			}
			strcat(rel, "/");
			sfd = openat(dirfd(d), de->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			res = sfd < 0 ? 0 : sync_find(r, m, sfd, rel, cap, depth + 1, g);
			rel[rl] = '\0';
			continue;
		}
		if (!S_ISREG(st.st_mode) || run_names(r, rel) || meta_get(m, st.st_ino, &row))
			continue;
		if (!row.origin || strncmp(row.origin, r->base, strlen(r->base))) {
			meta_file_free(&row); /* another listing's, or none's */
			continue;
		}
		esc = http_escape(rel, "/");
		if (!esc || asprintf(&url, "%s%s", r->base, esc) < 0) {
			free(esc);
			meta_file_free(&row);
			res = -ENOMEM;
			break;
		}
		free(esc);
		if (strcmp(url, row.origin))
			why = "renamed here through the mount";
		else
			users(r, rel, &row, &st, &why);
		free(url);
		meta_file_free(&row);
		if (why) {
			kept(r, rel, why);
			continue;
		}
		if (g->n == g->cap) {
			struct gone *nv = realloc(g->v, (g->cap = g->cap ? 2 * g->cap : 64) *
						  sizeof(*nv));

			if (!nv) {
				res = -ENOMEM;
				break;
			}
			g->v = nv;
		}
		g->v[g->n].ino = st.st_ino;
		if (!(g->v[g->n].rel = strdup(rel))) {
			res = -ENOMEM;
			break;
		}
		g->n++;
	}
	rel[rl] = '\0';
	closedir(d);
	if (res == -ENOMEM)
		fprintf(stderr, "hsmfsctl: out of memory\n");
	return res;
}

#define SYNC_TRASH "sync-trash"

/*
 * Files a sync took out of the tree (moved to STORE/.hsmfs/sync-trash,
 * named by inode number) and whose rows go: rows deleted in one
 * transaction, then the files.  A sync stopped between the two (a
 * crash) is finished so at the next one: the files were gone from the
 * origin.  tfd: the trash directory.  0 or -errno (said why).
 */
static int trash_empty(struct meta *m, int tfd)
{
	int fd = openat(tfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), res = 0;
	struct dirent *de;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	unsigned n = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	res = meta_begin(m);
	while (!res && (de = readdir(d))) {
		struct stat st;

		if (de->d_name[0] != '.' && !fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			res = meta_delete(m, st.st_ino, NULL);
	}
	if (!res)
		res = meta_commit(m);
	if (res) {
		meta_rollback(m);
		fprintf(stderr, "hsmfsctl: database: %s\n", meta_errmsg(m));
	}
	rewinddir(d);
	while (!res && (de = readdir(d)))
		if (de->d_name[0] != '.')
			n += unlinkat(dirfd(d), de->d_name, 0) == 0;
	closedir(d);
	if (n)
		fprintf(stderr, "hsmfsctl: finished removing %u file%s an earlier refresh "
			"stopped removing\n", n, n == 1 ? "" : "s");
	return res;
}

/*
 * Remove the files g found (sync_find()), BATCH at a time, each batch
 * atomic: its files moved into the trash, the store synced, their rows
 * deleted in one transaction, then the files unlinked; a batch that
 * fails is moved back.  On a live mount each file is marked stale
 * first (a reader that holds it open gets EIO for what it lacks, never
 * zeros), and each directory that lost names is reloaded at the end.
 * Directories emptied that the listing does not name go too.  0 or -1
 * (said why).
 */
static int sync_remove(struct import_run *r, int root, struct meta *m, struct gones *g)
{
	char p[PATH_MAX + 4200], tname[32], *name, **dirs = NULL;
	int tfd, sfd, res = 0;
	size_t i, nd = 0;
	bool *moved;

	if (!g->n)
		return 0;
	moved = calloc(BATCH, sizeof(*moved));
	dirs = calloc(g->n, sizeof(*dirs));
	snprintf(p, sizeof(p), "%s/%s", STORE_STATE_DIR, SYNC_TRASH);
	tfd = openat(root, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	sfd = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!moved || !dirs || tfd < 0 || sfd < 0) {
		fprintf(stderr, "hsmfsctl: cannot remove what the origin no longer has: %s\n",
			!moved || !dirs ? "out of memory" : strerror(errno));
		res = -1;
		goto out;
	}
	for (i = 0; !res && i < g->n; i += BATCH) {
		size_t end = i + BATCH < g->n ? i + BATCH : g->n, j;

		res = meta_begin(m);
		for (j = i; !res && j < end; j++) {
			struct gone *x = &g->v[j];
			struct stat st, before;
			int dfd;

			moved[j - i] = false;
			if (r->mnt && !fstatat(root, x->rel, &st, AT_SYMLINK_NOFOLLOW) &&
			    st.st_ino == x->ino) {
				const char *why = NULL;

				snprintf(p, sizeof(p), "%s/%s", r->mnt, x->rel);
				hlsetxattr(p, "user.hsmfs.stale", "1", 1, 0);
				/*
				 * The user's change wins: looked at again now, just
				 * before it goes (the first look was a batch ago)
				 */
				if (busy_now(p, &st, &why)) {
					kept(r, x->rel, why);
					continue;
				}
				before = st;
			} else {
				memset(&before, 0, sizeof(before));
				before.st_ino = x->ino;
				fstatat(root, x->rel, &before, AT_SYMLINK_NOFOLLOW);
			}
			snprintf(p, sizeof(p), "%s", x->rel);
			dfd = open_parent(root, p, &name, NULL);
			if (dfd < 0)
				continue;
			snprintf(tname, sizeof(tname), "%llu", (unsigned long long)x->ino);
			if (renameat2(dfd, name, tfd, tname, RENAME_NOREPLACE) < 0) {
				close(dfd);
				continue;
			}
			/*
			 * the file looked at, not one a user put under its name
			 * since, nor written since it was looked at (a write
			 * moves its mtime; the rename moved its ctime): else it
			 * goes back
			 */
			if (fstatat(tfd, tname, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_ino != x->ino ||
			    st.st_size != before.st_size ||
			    st.st_mtim.tv_sec != before.st_mtim.tv_sec ||
			    st.st_mtim.tv_nsec != before.st_mtim.tv_nsec) {
				renameat2(tfd, tname, dfd, name, RENAME_NOREPLACE);
				close(dfd);
				kept(r, x->rel, "changed through the mount meanwhile");
				continue;
			}
			close(dfd);
			moved[j - i] = true;
			res = meta_delete(m, x->ino, NULL);
		}
		/* the moves reach the disk before the rows say the files are gone */
		if (!res && syncfs(sfd) < 0)
			res = -errno;
		if (!res)
			res = meta_commit(m);
		if (res) {
			fprintf(stderr, "hsmfsctl: cannot remove what the origin no longer has: %s\n",
				res == -EIO ? meta_errmsg(m) : strerror(-res));
			meta_rollback(m);
			for (size_t k = i; k < j; k++) {
				int dfd;

				if (!moved[k - i])
					continue;
				snprintf(p, sizeof(p), "%s", g->v[k].rel);
				snprintf(tname, sizeof(tname), "%llu", (unsigned long long)g->v[k].ino);
				dfd = open_parent(root, p, &name, NULL);
				if (dfd >= 0) {
					renameat2(tfd, tname, dfd, name, RENAME_NOREPLACE);
					close(dfd);
				}
			}
			res = -1;
			break;
		}
		for (j = i; j < end; j++) {
			char *sl;

			if (!moved[j - i])
				continue;
			snprintf(tname, sizeof(tname), "%llu", (unsigned long long)g->v[j].ino);
			unlinkat(tfd, tname, 0);
			r->nremoved++;
			/*
			 * up from its directory: each one it leaves empty that
			 * the listing does not name goes; p ends as the deepest
			 * one left ("": the root), which the mount reloads
			 */
			snprintf(p, sizeof(p), "%s", g->v[j].rel);
			for (;;) {
				char q[sizeof(p) + 1];
				struct meta_file row;
				struct stat st;

				if (!(sl = strrchr(p, '/'))) {
					p[0] = '\0';
					break;
				}
				*sl = '\0';
				snprintf(q, sizeof(q), "%s/", p);
				if ((size_t)(sl - p) < strlen(r->sub) || run_names_below(r, q) ||
				    fstatat(root, p, &st, AT_SYMLINK_NOFOLLOW) < 0)
					break;
				if (!meta_get(m, st.st_ino, &row)) {
					meta_file_free(&row); /* listed lazily: the daemon's */
					break;
				}
				if (unlinkat(root, p, AT_REMOVEDIR) < 0)
					break;
			}
			if (r->mnt && p[0]) {
				if (!(dirs[nd] = strdup(p)))
					break;
				nd++;
			}
		}
	}
	if (r->mnt && (r->nremoved || res)) {
		/* the kernel's names (every one, the root's reload) and listings */
		if (reload(r->mnt, NULL))
			res = -1;
		if (nd)
			qsort(dirs, nd, sizeof(*dirs), cmp_str);
		for (i = 0; i < nd; i++)
			if ((!i || strcmp(dirs[i], dirs[i - 1])) && reload(r->mnt, dirs[i]))
				res = -1;
	}
out:
	for (i = 0; dirs && i < nd; i++)
		free(dirs[i]);
	free(dirs);
	free(moved);
	if (tfd >= 0)
		close(tfd);
	if (sfd >= 0)
		close(sfd);
	return res;
}

/*
 * Before a sync makes anything: an earlier one's trash emptied, then
 * what the listing no longer has below r->sub found and removed.  0 or
 * -1 (said why).
 */
int sync_prune(struct import_run *r, int root, struct meta *m)
{
	char rel[4200], p[64];
	struct gones g = { 0 };
	int res, tfd, dfd;

	snprintf(p, sizeof(p), "%s/%s", STORE_STATE_DIR, SYNC_TRASH);
	if (mkdirat(root, p, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "hsmfsctl: cannot make '%s/%s': %s\n", r->store, p, strerror(errno));
		return -1;
	}
	tfd = openat(root, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	res = tfd < 0 ? -errno : trash_empty(m, tfd);
	if (tfd >= 0)
		close(tfd);
	if (res)
		return -1;
	snprintf(rel, sizeof(rel), "%s", r->sub);
	dfd = openat(root, rel[0] ? rel : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -1; /* nothing of it here yet */
	res = sync_find(r, m, dfd, rel, sizeof(rel), 0, &g);
	if (!res)
		res = sync_remove(r, root, m, &g);
	for (size_t i = 0; i < g.n; i++)
		free(g.v[i].rel);
	free(g.v);
	return res ? -1 : 0;
}
