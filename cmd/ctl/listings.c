/*
 * listings.c - the listings a store took (listings.h): read, written
 * whole, one writer at a time.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "listings.h"
#include "origin-walk.h"
#include "store.h"

/*
 * STORE/.hsmfs/listings: the listings import --listing took, which
 * hsmfsctl refresh lists again.  One line each, fields split by tabs:
 *   nginx URL
 *   s3 URL PAGE SIGV4 KEYSFILE     ("-": none; never a key itself)
 * A line per URL (an import again replaces its line).  Written whole
 * to a new file that is synced and renamed over the old one.
 */
#define LISTINGS_FILE "listings"

void listing_recs_free(struct listing_rec *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].url);
		free((char *)v[i].so.sigv4);
		free((char *)v[i].so.keys_file);
	}
	free(v);
}

/*
 * The listings recorded in the store: *ret (caller frees with
 * listing_recs_free()) and *ret_n, both set only on success.  A store
 * with none gives 0 and an empty list; lines not understood are passed
 * over.  0 or -errno.
 */
int listing_recs_read(const char *store, struct listing_rec **ret, size_t *ret_n)
{
	char path[PATH_MAX + 64], *line = NULL;
	struct listing_rec *v = NULL;
	size_t n = 0, cap = 0;
	ssize_t len;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", store, STORE_STATE_DIR, LISTINGS_FILE);
	f = fopen(path, "re");
	if (!f && errno != ENOENT)
		return -errno;
	while (f && (len = getline(&line, &cap, f)) >= 0) {
		char *fld[5] = { 0 }, *save, *t = strtok_r(line, "\t\n", &save);
		struct listing_rec *nv;
		int k = 0;

		for (; t && k < 5; t = strtok_r(NULL, "\t\n", &save))
			fld[k++] = t;
		if (k < 2 || (strcmp(fld[0], "nginx") && (strcmp(fld[0], "s3") || k != 5)))
			continue;
		nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv)
			goto oom;
		v = nv;
		memset(&v[n], 0, sizeof(v[n]));
		v[n].so.page = 1000;
		v[n].url = strdup(fld[1]);
		if (!v[n++].url)
			goto oom;
		if (k == 5) {
			v[n - 1].so.s3 = true;
			v[n - 1].so.page = atoi(fld[2]) > 0 ? (unsigned)atoi(fld[2]) : 1000;
			if ((strcmp(fld[3], "-") && !(v[n - 1].so.sigv4 = strdup(fld[3]))) ||
			    (strcmp(fld[4], "-") && !(v[n - 1].so.keys_file = strdup(fld[4]))))
				goto oom;
		}
	}
	free(line);
	if (f)
		fclose(f);
	*ret = v;
	*ret_n = n;
	return 0;
oom:
	free(line);
	fclose(f);
	listing_recs_free(v, n);
	return -ENOMEM;
}

/*
 * Write the listings v[0..n) as the store's record: a new file synced
 * and renamed over the old one, and the rename synced.  0 or -errno.
 */
int listing_recs_write(const char *store, const struct listing_rec *v, size_t n)
{
	char path[PATH_MAX + 64], tmp[PATH_MAX + 72];
	int fd, res;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", store, STORE_STATE_DIR, LISTINGS_FILE);
	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	fchmod(fd, 0644);
	f = fdopen(fd, "w");
	if (!f) {
		res = -errno;
		close(fd);
		unlink(tmp);
		return res;
	}
	for (size_t i = 0; i < n; i++) {
		if (v[i].so.s3)
			fprintf(f, "s3\t%s\t%u\t%s\t%s\n", v[i].url, v[i].so.page,
				v[i].so.sigv4 ? v[i].so.sigv4 : "-",
				v[i].so.keys_file ? v[i].so.keys_file : "-");
		else
			fprintf(f, "nginx\t%s\n", v[i].url);
	}
	res = fflush(f) || fsync(fileno(f)) ? -errno : 0;
	if (fclose(f) && !res)
		res = -errno;
	if (!res && rename(tmp, path) < 0)
		res = -errno;
	if (res) {
		unlink(tmp);
		return res;
	}
	/* the rename reaches the disk */
	snprintf(path, sizeof(path), "%s/%s", store, STORE_STATE_DIR);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	return 0;
}

/*
 * The listings' read-modify-write, one at a time: two imports (one of
 * them into a live mount, under no store lock) would lose one's record.
 * A descriptor to close to let go, or -1 (then unlocked: said).
 */
int listings_lock(const char *store)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "%s/%s/%s.lock", store, STORE_STATE_DIR, LISTINGS_FILE);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0 && flock(fd, LOCK_EX) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/*
 * Record that the store took the listing at url (with so's options) for
 * refresh: its line added, or replaced.  Prints a warning and returns
 * -1 when it cannot (the import itself stands).
 */
int listing_record(const char *store, const char *url, const struct s3opts *so)
{
	char path[PATH_MAX + 64], keys[PATH_MAX] = "-";
	struct listing_rec *v = NULL, *nv;
	size_t n = 0, k = 0;
	int res, lockfd;

	if (strpbrk(url, "\t\n\r") || (so->sigv4 && strpbrk(so->sigv4, "\t\n\r"))) {
		fprintf(stderr, "hsmfsctl: warning: a tab or newline in the listing's URL or "
			"options: not recorded, refresh cannot list it again\n");
		return -1;
	}
	if (so->keys_file && !realpath(so->keys_file, keys))
		snprintf(keys, sizeof(keys), "%s", so->keys_file);
	lockfd = listings_lock(store);
	res = listing_recs_read(store, &v, &n);
	/* the others as they were, this one (again) last */
	for (size_t i = 0; !res && i < n; i++) {
		if (!strcmp(v[i].url, url)) {
			free(v[i].url);
			free((char *)v[i].so.sigv4);
			free((char *)v[i].so.keys_file);
		} else {
			v[k++] = v[i];
		}
	}
	n = res ? n : k;
	if (!res && !(nv = realloc(v, (n + 1) * sizeof(*v))))
		res = -ENOMEM;
	if (!res) {
		v = nv;
		v[n] = (struct listing_rec){ .url = strdup(url), .so = *so };
		v[n].so.sigv4 = so->sigv4 ? strdup(so->sigv4) : NULL;
		v[n].so.keys_file = so->s3 && strcmp(keys, "-") ? strdup(keys) : NULL;
		n++;
		res = v[n - 1].url ? listing_recs_write(store, v, n) : -ENOMEM;
	}
	listing_recs_free(v, n);
	if (lockfd >= 0)
		close(lockfd);
	if (!res)
		return 0;
	snprintf(path, sizeof(path), "%s/%s/%s", store, STORE_STATE_DIR, LISTINGS_FILE);
	fprintf(stderr, "hsmfsctl: warning: cannot record the listing in '%s': %s; refresh "
		"cannot list it again\n", path, strerror(-res));
	return -1;
}
