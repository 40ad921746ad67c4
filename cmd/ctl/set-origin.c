/*
 * set-origin.c - hsmfsctl set-origin -s STORE FROM TO: an unmounted
 * store's origin moved.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ctl.h"
#include "listings.h"
#include "meta.h"
#include "store.h"

struct rebase {
	int root;                  /* the store */
	const char *from, *to;
	size_t files, dirs, unmarked;
};

/*
 * One row moved to the new origin: its marker in the store (the URL a
 * lost database is rebuilt from) follows; the row itself is rewritten
 * by meta_rebase_origin() in the same transaction.
 */
static int rebase_one(void *arg, uint64_t ino, const char *path, uint32_t state,
		      const char *origin, const char *version)
{
	struct rebase *r = arg;
	bool dir = state == META_DIR_UNLISTED || state == META_DIR_LISTED;
	char url[8300];
	struct stat st;
	int fd, n;

	if (dir)
		r->dirs++;
	else
		r->files++;
	n = snprintf(url, sizeof(url), "%s%s", r->to, origin + strlen(r->from));
	if (!dir && n < (int)sizeof(url)) {
		/* a file's mark stays small (store.h): its URL only if it fits */
		char mark[STORE_MARKER_MAX + 1];

		n = (int)store_marker(mark, url, version);
		memcpy(url, mark, (size_t)n + 1);
	}
	if (!path || n >= (int)sizeof(url)) {
		r->unmarked++;
		return 0;
	}
	fd = path[0] ? openat(r->root, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
					     (dir ? O_DIRECTORY : 0)) :
		       dup(r->root);
	if (fd < 0 || fstat(fd, &st) || st.st_ino != ino) {
		r->unmarked++; /* moved: found by its ino at the next rebuild */
	} else if (state == META_DIR_UNLISTED) {
		if (fsetxattr(fd, STORE_UNLISTED_XATTR, url, (size_t)n, 0))
			r->unmarked++;
	} else if (!dir && fgetxattr(fd, STORE_MARKER_XATTR, NULL, 0) >= 0) {
		if (fsetxattr(fd, STORE_MARKER_XATTR, url, (size_t)n, 0))
			r->unmarked++;
	}
	if (fd >= 0)
		close(fd);
	return 0;
}

/*
 * hsmfsctl set-origin -s STORE FROM TO: the origin moved (another host,
 * another path).  Every file and directory whose URL begins with FROM
 * begins with TO instead: in the database, in the store's markers and
 * in the listings refresh takes.  The store must not be mounted.  The
 * bytes present stay; the versions recorded stay too, so a file the new
 * origin serves in another version is refused there (stale) until a
 * refresh takes it.
 */
int cmd_set_origin(int argc, char **argv)
{
	struct rebase r = { .root = -1 };
	struct listing_rec *v = NULL;
	const char *store = NULL;
	char path[PATH_MAX + 64];
	struct meta *m = NULL;
	size_t nv = 0, moved = 0;
	int lockfd = -1, lockfd2, res, rc = X_OK_;

	if (argc == 5 && !strcmp(argv[1], "-s")) {
		store = argv[2];
		r.from = argv[3];
		r.to = argv[4];
	}
	if (!store || !r.from[0] || !r.to[0]) {
		fprintf(stderr, "hsmfsctl: set-origin needs -s STORE FROM TO\n");
		return X_USAGE;
	}
	r.root = open(store, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/%s/lock", store, STORE_STATE_DIR);
	if (r.root >= 0)
		lockfd = open(path, O_RDWR | O_CLOEXEC);
	if (r.root < 0 || lockfd < 0) {
		fprintf(stderr, "hsmfsctl: '%s' is not an hsmfs store: %s\n", store, strerror(errno));
		rc = X_STORE;
		goto out;
	}
	if (flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "hsmfsctl: store '%s' is mounted: unmount it first\n", store);
		rc = X_STORE;
		goto out;
	}
	snprintf(path, sizeof(path), "%s/%s/meta.db", store, STORE_STATE_DIR);
	res = meta_open(path, &m);
	if (!res)
		res = meta_begin(m);
	if (!res)
		res = meta_origins(m, r.from, rebase_one, &r);
	if (!res)
		res = meta_rebase_origin(m, r.from, r.to);
	if (!res)
		res = meta_commit(m);
	else if (m)
		meta_rollback(m);
	if (res) {
		fprintf(stderr, "hsmfsctl: set-origin '%s': %s\n", store, m ? meta_errmsg(m) :
			strerror(-res));
		rc = X_STORE;
		goto out;
	}
	/* the listings refresh takes again */
	lockfd2 = listings_lock(store);
	if (!listing_recs_read(store, &v, &nv)) {
		for (size_t i = 0; i < nv; i++) {
			char *u;

			if (strncmp(v[i].url, r.from, strlen(r.from)) ||
			    asprintf(&u, "%s%s", r.to, v[i].url + strlen(r.from)) < 0)
				continue;
			free(v[i].url);
			v[i].url = u;
			moved++;
		}
		if (moved && listing_recs_write(store, v, nv))
			fprintf(stderr, "hsmfsctl: warning: cannot rewrite the listings of '%s': "
				"refresh lists them from '%s'\n", store, r.from);
		listing_recs_free(v, nv);
	}
	if (lockfd2 >= 0)
		close(lockfd2);
	printf("set-origin: %zu file%s and %zu director%s now at %s%s", r.files,
	       r.files == 1 ? "" : "s", r.dirs, r.dirs == 1 ? "y" : "ies", r.to,
	       moved ? ", and the listings refresh takes" : "");
	if (r.unmarked)
		printf(" (%zu not found in the store by their path: marked at the next "
		       "rebuild)", r.unmarked);
	printf("\n");
out:
	meta_close(m);
	if (lockfd >= 0)
		close(lockfd);
	if (r.root >= 0)
		close(r.root);
	return rc;
}
