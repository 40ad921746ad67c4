/* http-file.c - hsmfs-http's archives to a file:// origin: see http-file.h */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http-file.h"

static void file_version(const struct stat *st, char *buf, size_t size)
{
	snprintf(buf, size, "%lld%09ld-%lld", (long long)st->st_mtim.tv_sec,
		 st->st_mtim.tv_nsec, (long long)st->st_size);
}

/* Is v a version archive_file() made ("MTIME_NS-SIZE")? */
static bool file_made(const char *v)
{
	size_t n = strspn(v, "0123456789");

	return n && v[n] == '-' && v[n + 1] && strspn(v + n + 1, "0123456789") == strlen(v + n + 1);
}

/* Is the file at fd byte for byte the snapshot? */
static bool same_file(int fd, const struct hsmfs_event *ev)
{
	char a[65536], b[65536];
	uint64_t off = 0;
	struct stat st;

	if (fstat(fd, &st) || (uint64_t)st.st_size != ev->file_size)
		return false;
	while (off < ev->file_size) {
		size_t want = ev->file_size - off < sizeof(a) ? (size_t)(ev->file_size - off) :
								 sizeof(a);

		if (pread(fd, a, want, (off_t)off) != (ssize_t)want ||
		    pread(ev->fd, b, want, (off_t)off) != (ssize_t)want || memcmp(a, b, want))
			return false;
		off += want;
	}
	return true;
}

int archive_file(const struct hsmfs_event *ev, uint16_t flags, const char *url,
		 struct http_archive_out *out)
{
	char *path = curl_unescape(url + 7, 0), *dir = NULL, *tmp = NULL;
	struct stat st;
	int fd = -1, dfd = -1, err = 0;
	char buf[65536];
	uint64_t off = 0;

	if (!path)
		return ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && !fstat(fd, &st) && !(flags & HSMFS_EVENT_OVERWRITE)) {
		char cur[64];

		file_version(&st, cur, sizeof(cur));
		/* not the recorded version (or there at all, for a new file) */
		if ((flags & HSMFS_EVENT_NEW) ||
		    (file_made(ev->version) && strcmp(cur, ev->version))) {
			if (!same_file(fd, ev)) {
				snprintf(out->why, sizeof(out->why),
					 "'%s' is not the recorded version (%s, recorded '%s')",
					 path, cur, ev->version);
				err = ESTALE;
			} else {
				snprintf(out->version, sizeof(out->version), "%s", cur);
			}
			goto out; /* the same bytes: archived already */
		}
	} else if (fd < 0 && errno == ENOENT && !(flags & HSMFS_EVENT_NEW) &&
		   file_made(ev->version) && !(flags & HSMFS_EVENT_OVERWRITE)) {
		snprintf(out->why, sizeof(out->why), "'%s' is gone from the origin", path);
		err = ESTALE;
		goto out;
	}
	dir = strdup(path);
	if (!dir || asprintf(&tmp, "%s.hsmfs-XXXXXX", path) < 0) {
		tmp = NULL;
		err = ENOMEM;
		goto out;
	}
	if (fd >= 0)
		close(fd);
	/* its directories, as a PUT makes them (made on the mount) */
	for (char *q = strchr(dir + 1, '/'); q; q = strchr(q + 1, '/')) {
		*q = '\0';
		mkdir(dir, 0755);
		*q = '/';
	}
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		err = errno;
		snprintf(out->why, sizeof(out->why), "cannot create '%s': %s", tmp, strerror(err));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	while (off < ev->file_size) {
		size_t want = ev->file_size - off < sizeof(buf) ? (size_t)(ev->file_size - off) :
								   sizeof(buf);
		ssize_t r = pread(ev->fd, buf, want, (off_t)off), w;

		if (r <= 0) {
			err = r < 0 ? errno : ENODATA; /* the snapshot is shorter than it said */
			goto out;
		}
		errno = 0;
		w = write(fd, buf, (size_t)r);
		if (w != r) {
			err = w < 0 && errno ? errno : ENOSPC;
			goto out;
		}
		off += (uint64_t)r;
	}
	fchmod(fd, (mode_t)(ev->start & 07777));
	futimens(fd, (struct timespec[2]){ { 0, UTIME_OMIT }, { (time_t)ev->end, 0 } });
	if (fsync(fd) || rename(tmp, path)) {
		err = errno;
		goto out;
	}
	free(tmp);
	tmp = NULL;
	dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0)
		fsync(dfd);
	if (fstat(fd, &st)) {
		err = errno;
		goto out;
	}
	file_version(&st, out->version, sizeof(out->version));
out:
	if (err && !out->why[0])
		snprintf(out->why, sizeof(out->why), "%s", strerror(err));
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	free(dir);
	curl_free(path);
	if (!err && (flags & HSMFS_EVENT_NEW))
		snprintf(out->origin, sizeof(out->origin), "%s", url);
	return err;
}

/* file://: a directory made with its parents, or removed if empty */
int dir_file(const char *url, bool made, struct http_archive_out *out)
{
	char *d = curl_unescape(url + 7, 0);
	int err = 0;

	if (!d)
		return ENOMEM;
	if (made) {
		for (char *p = d + 1; *p; p++)
			if (*p == '/') {
				*p = '\0';
				mkdir(d, 0755);
				*p = '/';
			}
		if (mkdir(d, 0755) && errno != EEXIST)
			err = errno;
	} else if (rmdir(d)) {
		if (errno == ENOTEMPTY || errno == EEXIST)
			err = ENOTEMPTY;
		else if (errno != ENOENT)
			err = errno;
	}
	if (err == ENOTEMPTY)
		snprintf(out->why, sizeof(out->why), "'%s' is not empty: kept", d);
	else if (err)
		snprintf(out->why, sizeof(out->why), "'%s': %s", d, strerror(err));
	curl_free(d);
	return err;
}

/* file://: the object's removal or rename (no validator but our own) */
int name_file(const struct hsmfs_event *ev, const char *from, const char *to,
	      struct http_archive_out *out)
{
	char *f = curl_unescape(from + 7, 0), *t = to ? curl_unescape(to + 7, 0) : NULL;
	struct stat st;
	char cur[64];
	int err = 0;

	if (!f || (to && !t)) {
		err = ENOMEM;
		goto out;
	}
	if (lstat(f, &st)) {
		/* gone: removed, or moved already (a repeat after a crash) */
		if (t && !lstat(t, &st)) {
			file_version(&st, out->version, sizeof(out->version));
			snprintf(out->origin, sizeof(out->origin), "%s", to);
		} else {
			err = ENOENT;
		}
		goto out;
	}
	file_version(&st, cur, sizeof(cur));
	if (ev->version[0] && strcmp(cur, ev->version)) {
		snprintf(out->why, sizeof(out->why), "'%s' is not the recorded version", f);
		err = ESTALE;
		goto out;
	}
	if (!t) {
		err = unlink(f) ? errno : 0;
		goto out;
	}
	{
		char *dir = strdup(t), *slash = dir ? strrchr(dir, '/') : NULL;

		/* the new name's directories, as a PUT into them makes them */
		for (char *p = dir ? dir + 1 : NULL; p && slash && p < slash; p++)
			if (*p == '/') {
				*p = '\0';
				mkdir(dir, 0755);
				*p = '/';
			}
		if (slash) {
			*slash = '\0';
			mkdir(dir, 0755);
		}
		free(dir);
	}
	if (rename(f, t) || lstat(t, &st)) {
		err = errno;
		goto out;
	}
	file_version(&st, out->version, sizeof(out->version));
	snprintf(out->origin, sizeof(out->origin), "%s", to);
out:
	if (err && !out->why[0])
		snprintf(out->why, sizeof(out->why), "%s", strerror(err));
	curl_free(f);
	curl_free(t);
	return err;
}
