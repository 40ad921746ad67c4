/*
 * store-tree.c - an import's writes to a store's tree, and the live
 * mount told of them (store-tree.h).
 */
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

#include "ctl.h"
#include "meta.h"
#include "origin-walk.h"
#include "place.h"
#include "store-tree.h"

/*
 * An import puts entries below these directories: each, if unlisted, is
 * listed from now on (place_listed), once an import (the inode numbers
 * seen so far are remembered).
 */
static struct {
	uint64_t *ino;
	size_t n, cap;
} seen_dirs;

static int listed_once(struct meta *m, int dfd)
{
	struct stat st;

	if (!m || fstat(dfd, &st) < 0)
		return 0;
	for (size_t i = seen_dirs.n; i-- > 0 && seen_dirs.n - i <= 64;)
		if (seen_dirs.ino[i] == st.st_ino)
			return 0; /* the last few: an import goes directory by directory */
	if (seen_dirs.n == seen_dirs.cap) {
		size_t cap = seen_dirs.cap ? 2 * seen_dirs.cap : 256;
		uint64_t *v = realloc(seen_dirs.ino, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		seen_dirs.ino = v;
		seen_dirs.cap = cap;
	}
	seen_dirs.ino[seen_dirs.n++] = st.st_ino;
	return place_listed(m, dfd);
}

/*
 * Open (creating) the directory of path below root, never following a
 * symlink; with m, each directory on the way that is unlisted becomes
 * listed (the manifest says what is in it).
 */
int open_parent(int root, char *path, char **ret_name, struct meta *m)
{
	char *slash, *comp = path;
	int dfd = dup(root);

	if (dfd >= 0 && listed_once(m, dfd) < 0) {
		close(dfd);
		return -EIO;
	}

	while (dfd >= 0 && (slash = strchr(comp, '/'))) {
		int nfd;

		*slash = '\0';
		nfd = openat(dfd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT) {
			if (mkdirat(dfd, comp, 0755) < 0 && errno != EEXIST) {
				*slash = '/';
				close(dfd);
				return -errno;
			}
			nfd = openat(dfd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		*slash = '/';
		close(dfd);
		if (nfd < 0)
			return errno == ELOOP || errno == ENOTDIR ? -ENOTDIR : -errno;
		dfd = nfd;
		comp = slash + 1;
		if (listed_once(m, dfd) < 0) {
			close(dfd);
			return -EIO;
		}
	}
	*ret_name = comp;
	return dfd;
}

/*
 * A file open in passthrough mode is read by the kernel from the store
 * itself: emptied now, it would read as zeros until closed.
 */
static int not_passthrough(void *arg, const char *relpath, char *err, size_t errlen)
{
	const char *mnt = arg;
	char mp[PATH_MAX + 4200], state[256];
	ssize_t sn;

	if (!mnt)
		return 0;
	snprintf(mp, sizeof(mp), "%s/%s", mnt, relpath);
	sn = hgetxattr(mp, "user.hsmfs.state", state, sizeof(state) - 1);
	state[sn > 0 ? sn : 0] = 0;
	if (strstr(state, "passthrough")) {
		snprintf(err, errlen, "'%s' is open in passthrough mode; close it, "
			 "then import it again", relpath);
		return -EBUSY;
	}
	return 0;
}

/*
 * The live mount mnt re-reads rel (NULL: the root) from its store: a
 * file's state, or a directory's names.  A file being filled answers
 * EBUSY for a while: asked again.  0, or -1 (said).
 */
int reload(const char *mnt, const char *rel)
{
	char p[PATH_MAX + 4200];

	snprintf(p, sizeof(p), "%s%s%s", mnt, rel ? "/" : "", rel ? rel : "");
	for (int tries = 0; hsetxattr(p, "user.hsmfs.reload", "1", 1, 0) < 0; tries++) {
		if (errno != EBUSY || tries == 100) {
			fprintf(stderr, "hsmfsctl: '%s': the mount did not reload it: %s\n", p,
				strerror(errno));
			return -1;
		}
		usleep(50000); /* a fill of the old version is finishing */
	}
	return 0;
}

int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * After a batch of n items went into the store of the live mount mnt,
 * made[k] where item k is a new name: the mount drops what its kernel
 * holds of each directory that gained a name, made ones included (their
 * listings, links and times), and every name it knew missing (the
 * root's reload, first).  0, or -1: a reload failed (said).
 */
int reload_made(const char *mnt, const struct item *items, const bool *made, size_t n)
{
	char **dirs = NULL;
	size_t nd = 0, cap = 0, k;
	bool oom = false;
	int res = 0;

	for (k = 0; k < n && !made[k]; k++)
		;
	if (k == n)
		return 0;
	res = reload(mnt, NULL);
	/* every directory above a new name: open_parent() may have made them */
	for (k = 0; k < n && !oom; k++) {
		const char *path = items[k].e.path, *sl;

		for (sl = made[k] ? strchr(path, '/') : NULL; sl; sl = strchr(sl + 1, '/')) {
			if (nd == cap) {
				char **m = realloc(dirs, (cap = cap ? 2 * cap : 64) * sizeof(*dirs));

				if (!m) {
					oom = true;
					break;
				}
				dirs = m;
			}
			if (!(dirs[nd] = strndup(path, (size_t)(sl - path)))) {
				oom = true;
				break;
			}
			nd++;
		}
	}
	if (oom) {
		fprintf(stderr, "hsmfsctl: out of memory: the mount may show the import late\n");
		res = -1;
	}
	if (nd)
		qsort(dirs, nd, sizeof(*dirs), cmp_str);
	for (k = 0; k < nd; k++)
		if ((!k || strcmp(dirs[k], dirs[k - 1])) && reload(mnt, dirs[k]))
			res = -1;
	for (k = 0; k < nd; k++)
		free(dirs[k]);
	free(dirs);
	return res;
}

/*
 * Make one placeholder (or unlisted directory).  *created is set when a
 * new entry was made (so a failed batch can remove it again).
 */
int import_one(int root, const char *mnt, struct meta *m, struct item *it,
		      bool *created, enum place_outcome *out, char *err, size_t errlen)
{
	char *name = NULL, path[4200];
	int dfd, res;

	*created = false;
	snprintf(path, sizeof(path), "%s", it->e.path);
	dfd = open_parent(root, path, &name, m);
	if (dfd == -EIO) {
		snprintf(err, errlen, "database: %s", meta_errmsg(m));
		return dfd;
	}
	if (dfd < 0) {
		snprintf(err, errlen, "cannot make the directories of '%s': %s",
			 it->e.path, dfd == -ENOTDIR ? "a component is not a directory (or is a symlink)" :
							strerror(-dfd));
		return dfd;
	}
	res = place_entry(m, dfd, name, it->e.path, &it->e, false, not_passthrough,
			  (void *)mnt, created, out, err, errlen);
	close(dfd);
	return res;
}

int remove_path(int root, const char *rel, bool is_dir)
{
	char path[4200], *name;
	int dfd, res;

	snprintf(path, sizeof(path), "%s", rel);
	dfd = open_parent(root, path, &name, NULL);
	if (dfd < 0)
		return dfd;
	res = unlinkat(dfd, name, is_dir ? AT_REMOVEDIR : 0) < 0 ? -errno : 0;
	close(dfd);
	return res;
}
