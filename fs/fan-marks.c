/*
 * fan-marks.c - the marks of the files not all present, made from the
 * metadata database at start (fan.h): by each row's recorded path,
 * checked against its inode number, and by one walk of the tree for
 * the rows whose path is stale (moved beside the mount).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fan-kernel.h"
#include "fault.h"
#include "fan-marks.h"
#include "hashset.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "ranges.h"
#include "store.h"

struct wanted {
	struct hashset inos; /* inode numbers of files not found yet; value: missing */
	unsigned long unlisted; /* directories whose names are not known yet */
	bool keep_thin;      /* thin (opts.h): no blocks given */
	size_t thin;         /* marked without all their blocks (allocate()) */
	size_t foreign;      /* not the row's file (mark_at()) */
};

static int want_row(void *arg, uint64_t ino, uint64_t gen, uint64_t size, uint32_t state)
{
	struct wanted *w = arg;

	size_t pos;

	(void)gen;
	(void)size;
	w->unlisted += state == META_DIR_UNLISTED;
	if (state == META_DIR_UNLISTED || state == META_DIR_LISTED)
		return 0;
	if (hashset_add(&w->inos, ino, &pos) < 0)
		return -ENOMEM;
	/*
	 * missing: a changed file may have bytes not fetched too (its
	 * ranges, read below, say); one found by the walk is taken so
	 */
	*hashset_val(&w->inos, pos) = state != META_RESIDENT;
	return 0;
}

/*
 * Blocks for every byte of a missing file, before its mark (fallocate(2)
 * raises an event on a marked one).  A range not fetched yet is data:
 * no lseek(2) or FIEMAP asks the hooks, and a tool that sees fewer
 * blocks than the size (cp, tar --sparse) looks for holes and copies
 * zeros for them; allocated, unwritten blocks read as the file's own
 * bytes through the events.  Where the store cannot hold them, the
 * file stays thin (said once, counted).
 */
static void allocate(struct wanted *w, int fd, const struct stat *st)
{
	int res = w->keep_thin || (uint64_t)st->st_blocks * 512 >= (uint64_t)st->st_size ? 0 :
		  fan_give_blocks(fd);

	if (res < 0 && !w->thin++)
		log_warn("backend=fanotify: cannot allocate the blocks of a file not fetched yet "
			 "(%s): a tool that skips holes may copy zeros for its missing bytes",
			 strerror(-res));
}

int fan_give_blocks(int fd)
{
	char path[32];
	struct stat st;
	int wfd, res = 0;

	inode_proc_path(fd, path);
	wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (wfd < 0)
		return -errno;
	fault_delay(FAULT_BLOCKS_GIVING);
	/* the times as they are now: a user's, set just before, win */
	if (fstat(wfd, &st) < 0) {
		res = -errno;
	} else if ((uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size) {
		if (fallocate(wfd, FALLOC_FL_KEEP_SIZE, 0, st.st_size) < 0) {
			res = -errno;
		} else {
			/*
			 * a fallocate sets the times: put back (its change time
			 * is the kernel's); both set, so that it is not a
			 * modification to the watch of changes (times_kept(),
			 * commit.c)
			 */
			struct timespec t[2] = { st.st_atim, st.st_mtim };

			futimens(wfd, t);
		}
	}
	close(wfd);
	return res;
}

/* Mark the regular file at dirfd/name if it is one of w's; 1 marked, 0 not, -errno. */
static int mark_at(struct wanted *w, int dirfd, const char *name)
{
	struct stat st;
	int fd, res = 0;

	size_t pos;

	fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (!fstat(fd, &st) && S_ISREG(st.st_mode) &&
	    (pos = hashset_find(&w->inos, st.st_ino)) != HASHSET_NONE) {
		bool missing = *hashset_val(&w->inos, pos);
		char path[32];

		/*
		 * A file with bytes missing was made a placeholder, and carries
		 * the mark (store.h); one without it is not the row's file but
		 * another that took its number (the row's removed beside the
		 * mount): never filled over
		 */
		inode_proc_path(fd, path);
		if (missing && getxattr(path, STORE_MARKER_XATTR, NULL, 0) < 0 && errno != ERANGE) {
			if (!w->foreign++)
				log_warn("backend=fanotify: a file of the store has the number of a "
					 "row with bytes missing but is not a placeholder: not marked");
			hashset_remove(&w->inos, st.st_ino);
			close(fd);
			return 0;
		}
		/* watched first: no change between the two goes unseen */
		res = fan_watch_fd(fd);
		if (!res && missing) {
			allocate(w, fd, &st);
			res = fan_mark_fd(fd, true);
		}
		if (!res) {
			hashset_remove(&w->inos, st.st_ino);
			res = missing;
		}
	}
	close(fd);
	return res;
}

/* One walk of the tree below dirfd for what the paths did not find. */
static int walk(struct wanted *w, int dirfd, bool top, long *marked)
{
	DIR *d;
	struct dirent *de;
	int fd, res = 0;

	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while (!res && w->inos.n && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (top && !strcmp(de->d_name, STORE_STATE_DIR)))
			continue;
		if (de->d_type == DT_DIR) {
			int sub = openat(dirfd, de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW |
								  O_CLOEXEC);

			if (sub >= 0) {
				res = walk(w, sub, false, marked);
				close(sub);
			}
		} else if (de->d_type == DT_REG || de->d_type == DT_UNKNOWN) {
			int r = mark_at(w, dirfd, de->d_name);

			if (r < 0)
				res = r;
			else
				*marked += r;
		}
	}
	closedir(d);
	return res;
}

static int count_unlisted(void *arg, uint64_t ino, uint64_t gen, uint64_t size, uint32_t state)
{
	(void)ino;
	(void)gen;
	(void)size;
	*(unsigned long *)arg += state == META_DIR_UNLISTED;
	return 0;
}

long fan_count_unlisted(struct meta *m, unsigned long *ret_unlisted)
{
	*ret_unlisted = 0;
	return meta_list(m, count_unlisted, ret_unlisted);
}

long fan_mark_missing(struct meta *m, bool thin, unsigned long *ret_unlisted)
{
	struct wanted w;
	uint64_t *inos = NULL;
	size_t n = 0, pos;
	long marked = 0;
	int res;

	hashset_init(&w.inos, SIZE_MAX, true, NULL);
	w.keep_thin = thin;
	w.thin = 0;
	w.foreign = 0;
	w.unlisted = 0;
	res = meta_list(m, want_row, &w);
	if (res)
		goto out;
	/* the recorded paths first: one open each */
	inos = malloc((w.inos.n ? w.inos.n : 1) * sizeof(*inos));
	if (!inos) {
		res = -ENOMEM;
		goto out;
	}
	HASHSET_EACH(&w.inos, at)
		inos[n++] = hashset_key(&w.inos, at);
	for (size_t i = 0; i < n; i++) {
		struct meta_file f;
		int r;

		if (meta_get(m, inos[i], &f))
			continue;
		pos = hashset_find(&w.inos, inos[i]);
		if (pos != HASHSET_NONE)
			*hashset_val(&w.inos, pos) = !rs_contains(&f.present, 0, f.size);
		r = f.path ? mark_at(&w, K.tree, f.path) : 0;
		meta_file_free(&f);
		if (r < 0) {
			res = r;
			goto out;
		}
		marked += r;
	}
	if (w.inos.n) {
		size_t left = w.inos.n;

		res = walk(&w, K.tree, true, &marked);
		if (w.inos.n)
			log_warn("backend=fanotify: %zu file%s of the database not found in the store "
				 "(%zu found by a walk)", w.inos.n, w.inos.n == 1 ? "" : "s",
				 left - w.inos.n);
	}
	if (w.thin)
		log_warn("backend=fanotify: %zu file%s not fetched yet without all their blocks",
			 w.thin, w.thin == 1 ? "" : "s");
	*ret_unlisted = w.unlisted;
out:
	free(inos);
	hashset_free(&w.inos);
	return res ? res : marked;
}
