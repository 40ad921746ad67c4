/* place.c - see place.h */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "place.h"
#include "store.h"

_Atomic int place_unmarked;

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

uint64_t place_new_gen(void)
{
	uint64_t g;

	if (getrandom(&g, sizeof(g), 0) != sizeof(g))
		g = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
	return g;
}

/*
 * The row of a new entry, with a new generation: written, or with defer
 * handed back (its path a copy) for the caller to write.
 */
static int put_row(struct meta *m, struct meta_file *row, struct meta_file *defer,
		   char *err, size_t errlen)
{
	int res;

	row->gen = place_new_gen();
	if (defer) {
		*defer = *row;
		defer->path = strdup(row->path);
		if (!defer->path) {
			defer->ino = 0;
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		return 0;
	}
	res = meta_put(m, row);
	if (res)
		snprintf(err, errlen, "database: %s", meta_errmsg(m));
	return res;
}

static int place_dir(struct meta *m, int dfd, const char *name, const char *relpath,
		     const struct manifest_entry *e, bool adopt, struct meta_file *defer,
		     bool *created, enum place_outcome *out, char *err, size_t errlen)
{
	struct meta_file row, old;
	struct stat st;
	int fd, res;

	if (mkdirat(dfd, name, e->mode == 0644 ? 0755 : e->mode) == 0) {
		*created = true;
		*out = PLACE_NEW;
	} else if (errno != EEXIST) {
		res = -errno;
		snprintf(err, errlen, "cannot make directory '%s': %s", relpath, strerror(-res));
		return res;
	}
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		res = errno == ENOTDIR || errno == ELOOP ? -EEXIST : -errno;
		snprintf(err, errlen, "'%s' exists and is not a directory", relpath);
		if (fd >= 0)
			close(fd);
		return res;
	}
	if (!*created) {
		res = meta_get(m, st.st_ino, &old);
		if (!res) {
			meta_file_free(&old);
			close(fd);
			*out = PLACE_SAME;
			return 0;
		}
		if (res != -ENOENT) {
			close(fd);
			snprintf(err, errlen, "database: %s", meta_errmsg(m));
			return res;
		}
		if (!adopt) {
			/* a plain directory the user made: its names are known */
			close(fd);
			*out = PLACE_SAME;
			return 0;
		}
		*out = PLACE_NEW;
	}
	if (fsetxattr(fd, STORE_UNLISTED_XATTR, e->url ? e->url : "",
		      e->url ? strlen(e->url) : 0, 0) < 0)
		atomic_store_explicit(&place_unmarked, errno, memory_order_relaxed);
	close(fd);
	memset(&row, 0, sizeof(row));
	row.ino = st.st_ino;
	row.mtime = e->has_mtime ? e->mtime : st.st_mtim.tv_sec;
	row.mode = st.st_mode & 07777;
	row.state = META_DIR_UNLISTED;
	row.origin = e->url;
	row.path = (char *)relpath;
	return put_row(m, &row, defer, err, errlen);
}

/* Give the unnamed file fd the name name in dfd (EEXIST if taken).  0 or -errno. */
static int name_unnamed(int fd, int dfd, const char *name)
{
	char proc[32];

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW) == 0)
		return 0;
	/* no /proc: the same with CAP_DAC_READ_SEARCH */
	if (errno == ENOENT && linkat(fd, "", dfd, name, AT_EMPTY_PATH) == 0)
		return 0;
	return -errno;
}

static int place_file(struct meta *m, int dfd, const char *name, const char *relpath,
		      const struct manifest_entry *e, bool adopt, place_check_fn check,
		      void *arg, struct meta_file *defer, bool *created,
		      enum place_outcome *out, char *err, size_t errlen)
{
	struct meta_file row, old;
	struct stat st;
	bool exists, unnamed = false;
	int fd, res;

	exists = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
	if (exists && !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "'%s' exists and is not a regular file", relpath);
		return -EEXIST;
	}
	if (exists) {
		res = meta_get(m, st.st_ino, &old);
		if (res == -ENOENT && !adopt) {
			snprintf(err, errlen,
				 "'%s' exists and is not managed by hsmfs (its data would be lost)",
				 relpath);
			return -EEXIST;
		}
		if (res && res != -ENOENT) {
			snprintf(err, errlen, "database: %s", meta_errmsg(m));
			return res;
		}
		if (!res) {
			bool same = old.size == e->size && same_str(old.version, e->version) &&
				    same_str(old.origin, e->url);

			meta_file_free(&old);
			if (same) {
				*out = PLACE_SAME;
				return 0;
			}
			if (check && (res = check(arg, relpath, err, errlen)))
				return res;
		}
		/* the file looked at, not one put under its name since (a live
		 * mount's user may have): nonblocking, in case that is a FIFO */
		fd = openat(dfd, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0) {
			struct stat now;

			if (fstat(fd, &now) < 0 || now.st_ino != st.st_ino ||
			    now.st_dev != st.st_dev) {
				close(fd);
				snprintf(err, errlen, "'%s' was replaced while it was imported",
					 relpath);
				return -EBUSY;
			}
		}
		*out = PLACE_CHANGED;
	} else {
		/*
		 * Made unnamed, and named once sized and marked: a reader of
		 * the directory (sibling prefetch, a lookup) never finds it
		 * without its mark, which says it is no plain file while its
		 * row is still to be written (the row comes after a sync).
		 */
		fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, e->mode);
		unnamed = fd >= 0;
		if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
			/* no O_TMPFILE here: named at once */
			fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				    e->mode);
			*created = fd >= 0;
		}
		*out = PLACE_NEW;
	}
	if (fd < 0) {
		res = -errno;
		snprintf(err, errlen, "cannot create '%s': %s", relpath, strerror(-res));
		return res;
	}
	/* a changed file loses every byte it had: a placeholder again */
	struct timespec tv[2] = { { 0, UTIME_OMIT }, { e->mtime, 0 } };
	/* a new file has its mode already (the daemon's umask is 0; hsmfsctl's
	 * is checked below, by fstat) */
	if ((*out == PLACE_CHANGED && ftruncate(fd, 0) < 0) || ftruncate(fd, e->size) < 0 ||
	    (e->has_mtime && futimens(fd, tv) < 0) || fstat(fd, &st) < 0 ||
	    ((st.st_mode & 07777) != e->mode && (fchmod(fd, e->mode) < 0 || fstat(fd, &st) < 0))) {
		res = -errno;
		snprintf(err, errlen, "cannot size '%s': %s", relpath, strerror(-res));
		close(fd);
		return res;
	}
	if (e->size) {
		char mark[STORE_MARKER_MAX + 1];
		size_t mn = store_marker(mark, e->url, e->version);

		if (fsetxattr(fd, STORE_MARKER_XATTR, mark, mn, 0) < 0)
			atomic_store_explicit(&place_unmarked, errno, memory_order_relaxed);
	}
	if (unnamed && (res = name_unnamed(fd, dfd, name)) < 0) {
		snprintf(err, errlen, "cannot create '%s': %s", relpath, strerror(-res));
		close(fd);
		return res;
	}
	*created |= unnamed;
	close(fd);
	memset(&row, 0, sizeof(row));
	row.ino = st.st_ino;
	row.size = e->size;
	row.mtime = st.st_mtim.tv_sec;
	row.mode = e->mode;
	/* the origin's declared holes are present already: zeros, never fetched */
	row.present = e->holes; /* e's, as the strings below */
	if (rs_contains(&e->holes, 0, e->size))
		row.state = META_RESIDENT; /* empty, or all holes */
	else
		row.state = e->holes.n ? META_PARTIAL : META_PLACEHOLDER;
	row.origin = e->url;
	row.version = e->version;
	row.sha256 = e->sha256;
	row.path = (char *)relpath;
	row.chunks = e->chunks;
	row.chunks_len = e->chunks_len;
	return put_row(m, &row, defer, err, errlen);
}

int place_listed(struct meta *m, int dfd)
{
	struct meta_file row;
	struct stat st;
	char proc[32];
	int res;

	if (fstat(dfd, &st) < 0)
		return -errno;
	res = meta_get(m, st.st_ino, &row);
	if (res)
		return res == -ENOENT ? 0 : res;
	if (row.state == META_DIR_UNLISTED) {
		uint64_t cached;

		/*
		 * Its names are the import's now, not a hook's listing of that
		 * origin (a wrong one, maybe: a failed first mount's): a plain
		 * directory, no row, which refresh lists again from the
		 * import's recorded listing, never from that origin.
		 */
		res = meta_delete(m, row.ino, &cached);
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dfd);
		if (!res)
			removexattr(proc, STORE_UNLISTED_XATTR);
	}
	meta_file_free(&row);
	return res;
}

int place_entry(struct meta *m, int dfd, const char *name, const char *relpath,
		const struct manifest_entry *e, bool adopt, place_check_fn check,
		void *arg, bool *created, enum place_outcome *out, char *err,
		size_t errlen)
{
	*created = false;
	if (e->is_dir)
		return place_dir(m, dfd, name, relpath, e, adopt, NULL, created, out, err,
				 errlen);
	return place_file(m, dfd, name, relpath, e, adopt, check, arg, NULL, created, out,
			  err, errlen);
}

int place_entry_deferred(struct meta *m, int dfd, const char *name, const char *relpath,
			 const struct manifest_entry *e, bool adopt, struct meta_file *row,
			 bool *created, enum place_outcome *out, char *err, size_t errlen)
{
	memset(row, 0, sizeof(*row));
	*created = false;
	if (e->is_dir)
		return place_dir(m, dfd, name, relpath, e, adopt, row, created, out, err,
				 errlen);
	return place_file(m, dfd, name, relpath, e, adopt, NULL, NULL, row, created, out,
			  err, errlen);
}
