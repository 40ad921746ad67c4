/*
 * act.c - hsmfsctl evict, pin, unpin and prefetch PATH...: one function
 * for the four, each file or tree named asked of the mount through its
 * virtual extended attributes; pin and prefetch read the files whole,
 * --jobs N at a time, with a progress line and its ETA on a terminal.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "clock.h"
#include "ctl.h"

struct act {
	const char *what;          /* evict, pin, unpin, prefetch */
	const char *range;         /* evict: "A-B" or NULL */
	bool tty;                  /* progress bar on stderr */
	unsigned long long total, done, files, skipped, failed;
	double started, shown;
	/*
	 * The ETA: each fetched file's seconds t against its bytes s, fitted
	 * as t = per_file + s * per_byte (least squares), so that many small
	 * files (their cost is per file) and a few large ones (per byte)
	 * are both foreseen; the rest is shared by the jobs.
	 */
	double fit_n, fit_s, fit_t, fit_ss, fit_st;
	unsigned long long fit_bytes;   /* bytes of the files fitted */
	/* prefetch and pin: the files, fetched by jobs threads */
	pthread_mutex_t lock;      /* the counters and the output */
	char **paths;
	off_t *sizes;
	size_t n, cap, next;
	unsigned jobs;
};

/* A file of s bytes took t seconds to fetch.  a->lock held. */
static void fitted(struct act *a, double s, double t)
{
	a->fit_n++;
	a->fit_s += s;
	a->fit_t += t;
	a->fit_ss += s * s;
	a->fit_st += s * t;
	a->fit_bytes += (unsigned long long)s;
}

/* Seconds left: the fit over the files fetched, else the byte rate. */
static double eta(const struct act *a, double elapsed)
{
	double n = a->fit_n, per_byte = 0, per_file, var = n * a->fit_ss - a->fit_s * a->fit_s;
	double files_left = (double)a->n - n, bytes_left = (double)(a->total - a->fit_bytes);

	if (n < 2)
		return a->done && a->total > a->done ?
			       (a->total - a->done) * elapsed / a->done : 0;
	if (var > 0)
		per_byte = (n * a->fit_st - a->fit_s * a->fit_t) / var;
	if (per_byte < 0)
		per_byte = 0;
	per_file = (a->fit_t - per_byte * a->fit_s) / n;
	if (per_file < 0)
		per_file = 0;
	if (files_left < 0)
		files_left = 0;
	if (bytes_left < 0)
		bytes_left = 0;
	return (files_left * per_file + bytes_left * per_byte) / (a->jobs ? a->jobs : 1);
}

/* The progress line, at most ten times a second.  a->lock held. */
static void progress(struct act *a, const char *p, bool end)
{
	double now = mono_s(), t = now - a->started, rate = t > 0 ? a->done / t : 0;

	if (!a->tty || (!end && now - a->shown < 0.1))
		return;
	a->shown = now;
	fprintf(stderr, "\r%-40.40s %6llu / %zu files %8.1f / %.1f MiB  %6.1f MiB/s  ETA %4.0fs%s",
		p, (unsigned long long)a->fit_n, a->n, a->done / 1048576.0,
		a->total / 1048576.0, rate / 1048576.0, end ? 0.0 : eta(a, t), end ? "\n" : "");
}

static int fetch_all(struct act *a, const char *p, const struct stat *st)
{
	enum { BUF = 1 << 20 };
	/* the call's own, no larger than the file: jobs read at once (the bytes are thrown away) */
	size_t len = st->st_size < BUF ? (size_t)st->st_size : BUF;
	off_t off = 0;
	char *buf;
	int fd = open(p, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	buf = malloc(len ? len : 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (off < st->st_size) {
		ssize_t n = pread(fd, buf, len, off);

		if (n <= 0) {
			int e = n < 0 ? errno : EIO;

			free(buf);
			close(fd);
			return -e;
		}
		off += n;
		pthread_mutex_lock(&a->lock);
		a->done += n;
		progress(a, p, false);
		pthread_mutex_unlock(&a->lock);
	}
	free(buf);
	close(fd);
	return 0;
}

/*
 * A file was read whole: where its manifest gave a sha256 the daemon
 * checks it before it calls the file resident (until then "partial").
 * Wait for its word: 0, or -EBADMSG when the file came out stale.
 */
static int verified(const char *p)
{
	char v[128];

	for (int i = 0; i < 6000; i++) { /* 2 minutes for a large file */
		ssize_t n = hlgetxattr(p, "user.hsmfs.state", v, sizeof(v) - 1);

		if (n < 0)
			return errno == ENODATA ? 0 : -errno;
		v[n] = '\0';
		if (strstr(v, "stale"))
			return -EBADMSG;
		if (strncmp(v, "partial", 7))
			return 0;
		usleep(20000);
	}
	return -ETIMEDOUT;
}

/* Why the daemon refused to evict p (EBUSY), from its state. */
static const char *busy_why(const char *p)
{
	char v[128];
	ssize_t n = hlgetxattr(p, "user.hsmfs.state", v, sizeof(v) - 1);

	if (n < 0)
		return "dirty, pinned, open or being filled";
	v[n] = '\0';
	if (!strncmp(v, "dirty", 5))
		return "dirty: changed through the mount, its bytes are the only copy";
	if (strstr(v, "pinned"))
		return "pinned (hsmfsctl unpin first)";
	if (strstr(v, "passthrough"))
		return "open in passthrough mode";
	return "open or being filled";
}

static int act_file(struct act *a, const char *p, const struct stat *st)
{
	int res = 0;

	pthread_mutex_lock(&a->lock);
	a->files++;
	pthread_mutex_unlock(&a->lock);
	if (!strcmp(a->what, "evict")) {
		const char *v = a->range ? a->range : "";

		if (hlsetxattr(p, "user.hsmfs.evict", v, strlen(v), 0) < 0)
			res = -errno;
	} else if (!strcmp(a->what, "unpin")) {
		if (hlsetxattr(p, "user.hsmfs.unpin", "1", 1, 0) < 0)
			res = -errno;
	} else {
		if (!strcmp(a->what, "pin") && hlsetxattr(p, "user.hsmfs.pin", "1", 1, 0) < 0)
			res = -errno;
		double t0 = mono_s();

		if (!res)
			res = fetch_all(a, p, st);
		if (!res) {
			pthread_mutex_lock(&a->lock);
			fitted(a, (double)st->st_size, mono_s() - t0);
			pthread_mutex_unlock(&a->lock);
			res = verified(p);
		} else if (res == -EIO) {
			/* a fill that would complete it with the wrong digest fails */
			char v[128];
			ssize_t n = hlgetxattr(p, "user.hsmfs.state", v, sizeof(v) - 1);

			if (n > 0 && memmem(v, (size_t)n, "stale", 5))
				res = -EBADMSG;
		}
		if (!res && !a->tty) {
			pthread_mutex_lock(&a->lock);
			printf("%s %s (%lld bytes)\n", !strcmp(a->what, "pin") ? "pinned" :
			       "prefetched", p, (long long)st->st_size);
			pthread_mutex_unlock(&a->lock);
		}
	}
	pthread_mutex_lock(&a->lock);
	if (res == -ENODATA) {
		a->skipped++; /* not managed by hsmfs: nothing to do */
		res = 0;
	} else if (res) {
		a->failed++;
		fprintf(stderr, "%shsmfsctl: %s '%s': %s\n", a->tty ? "\n" : "", a->what, p,
			res == -EBUSY ? busy_why(p) :
			res == -EBADMSG ? "its bytes do not match the manifest's sha256: stale" :
			strerror(-res));
	}
	pthread_mutex_unlock(&a->lock);
	return res;
}

static int walk_files(struct act *a, const char *p, bool list_only)
{
	struct stat st;
	struct dirent *de;
	DIR *d;

	if (lstat(p, &st) < 0) {
		fprintf(stderr, "hsmfsctl: '%s': %s\n", p, strerror(errno));
		a->failed++;
		return -1;
	}
	if (S_ISREG(st.st_mode)) {
		if (list_only) {
			/* fetching: list the files for the jobs */
			if (a->n == a->cap) {
				size_t cap = a->cap ? 2 * a->cap : 256;
				char **np = realloc(a->paths, cap * sizeof(*np));
				off_t *ns = np ? realloc(a->sizes, cap * sizeof(*ns)) : NULL;

				if (np)
					a->paths = np;
				if (!ns) {
					fprintf(stderr, "hsmfsctl: out of memory\n");
					a->failed++;
					return -1;
				}
				a->sizes = ns;
				a->cap = cap;
			}
			a->paths[a->n] = strdup(p);
			if (!a->paths[a->n]) {
				a->failed++;
				return -1;
			}
			a->sizes[a->n++] = st.st_size;
			a->total += st.st_size;
		} else {
			act_file(a, p, &st);
		}
		return 0;
	}
	if (!S_ISDIR(st.st_mode) || !(d = opendir(p)))
		return 0;
	while ((de = readdir(d))) {
		char child[PATH_MAX];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    state_dir_shown(p, de->d_name))
			continue;
		snprintf(child, sizeof(child), "%s/%s", p, de->d_name);
		walk_files(a, child, list_only);
	}
	closedir(d);
	return 0;
}

/* A prefetch job: fetch files from the shared list until none is left. */
static void *fetch_job(void *arg)
{
	struct act *a = arg;

	for (;;) {
		struct stat st = { .st_mode = S_IFREG };
		size_t i;

		pthread_mutex_lock(&a->lock);
		i = a->next < a->n ? a->next++ : a->n;
		pthread_mutex_unlock(&a->lock);
		if (i == a->n)
			return NULL;
		st.st_size = a->sizes[i];
		act_file(a, a->paths[i], &st);
	}
}

static void fetch_listed(struct act *a)
{
	pthread_t t[64];
	unsigned n = 0;

	while (n < a->jobs - 1 && n < a->n && !pthread_create(&t[n], NULL, fetch_job, a))
		n++;
	fetch_job(a);
	while (n)
		pthread_join(t[--n], NULL);
	for (size_t i = 0; i < a->n; i++)
		free(a->paths[i]);
	free(a->paths);
	free(a->sizes);
}

/* evict, pin, unpin or prefetch: argv[0] says which */
int cmd_act(int argc, char **argv)
{
	const char *what = argv[0];
	struct act a = { .what = what, .tty = isatty(STDERR_FILENO), .started = mono_s(),
			 .lock = PTHREAD_MUTEX_INITIALIZER, .jobs = 4 };
	bool fetching = !strcmp(what, "prefetch") || !strcmp(what, "pin");
	int i, npaths = 0;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--range") && i + 1 < argc && !strcmp(what, "evict")) {
			a.range = argv[++i];
		} else if (!strcmp(argv[i], "--jobs") && i + 1 < argc && fetching) {
			char *end;
			unsigned long j = strtoul(argv[++i], &end, 10);

			if (*end || !j || j > 64) {
				fprintf(stderr, "hsmfsctl: --jobs needs a number from 1 to 64\n");
				return X_USAGE;
			}
			a.jobs = (unsigned)j;
			argv[i - 1] = argv[i] = NULL; /* not paths */
		} else {
			npaths++;
		}
	}
	if (!npaths) {
		fprintf(stderr, "hsmfsctl: %s needs at least one PATH\n", what);
		return X_USAGE;
	}
	for (i = 1; i < argc; i++) {
		if (!argv[i])
			continue;
		if (!strcmp(argv[i], "--range")) {
			i++;
			continue;
		}
		walk_files(&a, argv[i], fetching);
	}
	if (fetching)
		fetch_listed(&a);
	if (a.total)
		progress(&a, "done", true);
	printf("%s: %llu file%s, %llu not managed by hsmfs, %llu failed\n", what, a.files,
	       a.files == 1 ? "" : "s", a.skipped, a.failed);
	return a.failed ? X_PARTIAL : 0;
}
