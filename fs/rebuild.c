/* rebuild.c - see rebuild.h */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "meta.h"
#include "rebuild.h"
#include "store.h"

static int mark_one(int dfd, const char *name, struct meta *m, uint64_t *found)
{
	char val[8300], *nl;
	struct meta_file f = { 0 };
	struct stat st;
	ssize_t n;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return 0; /* vanished or unreadable: nothing to rebuild */
	n = fgetxattr(fd, STORE_MARKER_XATTR, val, sizeof(val) - 1);
	if (n < 0 || fstat(fd, &st) < 0) {
		close(fd);
		return 0;
	}
	close(fd);
	val[n] = '\0';
	nl = strchr(val, '\n');
	if (nl)
		*nl++ = '\0';
	f.ino = st.st_ino;
	f.size = st.st_size;
	f.mtime = st.st_mtim.tv_sec;
	f.mode = st.st_mode & 07777;
	f.state = META_PLACEHOLDER;
	f.origin = val[0] ? val : NULL;
	f.version = nl && *nl ? nl : NULL;
	(*found)++;
	return meta_put(m, &f);
}

/* A directory marked unlisted is unlisted again (not empty and listed). */
static int mark_dir(int dfd, struct meta *m, uint64_t *found)
{
	char val[8300], proc[32];
	struct meta_file f = { 0 };
	struct stat st;
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dfd);
	n = getxattr(proc, STORE_UNLISTED_XATTR, val, sizeof(val) - 1);
	if (n < 0 || fstat(dfd, &st) < 0)
		return 0;
	val[n] = '\0';
	f.ino = st.st_ino;
	f.mtime = st.st_mtim.tv_sec;
	f.mode = st.st_mode & 07777;
	f.state = META_DIR_UNLISTED;
	f.origin = val[0] ? val : NULL;
	(*found)++;
	return meta_put(m, &f);
}

static int walk(int dfd, struct meta *m, uint64_t *found, int depth, int is_root)
{
	DIR *d;
	struct dirent *de;
	int res = 0, fd;

	if (depth > 4096)
		return -ELOOP;
	res = mark_dir(dfd, m, found);
	if (res)
		return res;
	fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while (!res && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (is_root && !strcmp(de->d_name, STORE_STATE_DIR)))
			continue;
		if (de->d_type == DT_DIR) {
			int sub = openat(dirfd(d), de->d_name,
					 O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub >= 0) {
				res = walk(sub, m, found, depth + 1, 0);
				close(sub);
			}
		} else if (de->d_type == DT_REG || de->d_type == DT_UNKNOWN) {
			struct stat st;

			if (de->d_type == DT_UNKNOWN &&
			    (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			     !S_ISREG(st.st_mode)))
				continue;
			res = mark_one(dirfd(d), de->d_name, m, found);
		}
	}
	closedir(d);
	return res;
}

int rebuild_from_marks(int root_fd, struct meta *m, uint64_t *ret_found)
{
	uint64_t found = 0;
	int res = meta_begin(m);

	if (res)
		return res;
	res = walk(root_fd, m, &found, 0, 1);
	if (res) {
		meta_rollback(m);
		return res;
	}
	res = meta_commit(m);
	if (res)
		meta_rollback(m);
	else
		*ret_found = found;
	return res;
}
