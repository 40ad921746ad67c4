/*
 * status.c - hsmfsctl status [--json] PATH...: each file's state, the
 * bytes of it present and its archive's side, read from the mount's
 * virtual extended attributes (hsmfs(8)), with totals.  (status -s
 * STORE, of an unmounted store: archive.c.)
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "ctl.h"

struct totals {
	unsigned long long files, size, present;
};

static ssize_t xattr(const char *p, const char *name, char *buf, size_t size)
{
	ssize_t n = hlgetxattr(p, name, buf, size - 1);

	buf[n > 0 ? n : 0] = '\0';
	return n;
}

/* Times status_file() reads a file's state and bytes again while they move. */
#define STATUS_TRIES 8

static int status_file(const char *p, const struct stat *st, bool json,
		       struct totals *t, bool *first)
{
	char state[64], again[64], present[32], origin[4200], filling[64], aerr[128];
	unsigned long long pr, done = 0, bytes = 0;
	const char *arch;
	bool fetching;

	/*
	 * The state and the bytes present, as one: read the state again
	 * after the bytes, until it did not move between (a fill committed
	 * between the two showed "placeholder" with bytes present)
	 */
	for (int tries = 0;; tries++) {
		if (xattr(p, "user.hsmfs.state", state, sizeof(state)) < 0) {
			int e = errno;

			if (!fanotify_mount_said(p))
				fprintf(stderr, "hsmfsctl: '%s' is not on an hsmfs mount: %s\n", p,
					strerror(e));
			return -1;
		}
		xattr(p, "user.hsmfs.present", present, sizeof(present));
		if (tries == STATUS_TRIES || xattr(p, "user.hsmfs.state", again, sizeof(again)) < 0 ||
		    !strcmp(state, again))
			break;
	}
	if (xattr(p, "user.hsmfs.origin", origin, sizeof(origin)) < 0)
		origin[0] = '\0';
	/* fills under way: "DONE BYTES", as far as the hook has reported */
	fetching = xattr(p, "user.hsmfs.filling", filling, sizeof(filling)) > 0 &&
		   sscanf(filling, "%llu %llu", &done, &bytes) == 2;
	pr = strtoull(present, NULL, 10);
	/* the archive's side of the state (hsmfs(8), ARCHIVE) */
	arch = strstr(state, "conflict") ? "conflict" : strstr(state, "archiving") ? "archiving" :
	       strstr(state, "new") ? "new" : !strncmp(state, "dirty", 5) ? "dirty" :
	       origin[0] ? "clean" : "";
	if (xattr(p, "user.hsmfs.archive_error", aerr, sizeof(aerr)) < 0)
		aerr[0] = '\0';
	t->files++;
	t->size += st->st_size;
	t->present += pr;
	if (json) {
		printf("%s\n  {\"path\": ", *first ? "" : ",");
		json_str(p);
		printf(", \"size\": %lld, \"present\": %llu, \"state\": ",
		       (long long)st->st_size, pr);
		json_str(state);
		printf(", \"origin\": ");
		json_str(origin);
		if (arch[0]) {
			printf(", \"archive\": ");
			json_str(arch);
		}
		if (aerr[0]) {
			printf(", \"archive_error\": ");
			json_str(aerr);
		}
		if (fetching)
			printf(", \"fetching\": {\"done\": %llu, \"bytes\": %llu}", done, bytes);
		printf("}");
	} else {
		char a[32], b[32];

		printf("%-20s %14llu %14lld %5.1f%%  %s", state, pr, (long long)st->st_size,
		       st->st_size ? 100.0 * pr / st->st_size : 100.0, p);
		if (fetching) {
			human(a, sizeof(a), (long long)done);
			human(b, sizeof(b), (long long)bytes);
			printf("  (fetching: %s of %s)", a, b);
		}
		if (aerr[0] && strcmp(arch, "clean"))
			printf("  (archive failed: %s)", aerr);
		putchar('\n');
	}
	*first = false;
	return 0;
}

static int status_walk(const char *p, bool json, struct totals *t, bool *first)
{
	struct stat st;
	DIR *d;
	struct dirent *de;
	int res = 0;

	if (lstat(p, &st) < 0) {
		fprintf(stderr, "hsmfsctl: '%s': %s\n", p, strerror(errno));
		return -1;
	}
	if (S_ISREG(st.st_mode))
		return status_file(p, &st, json, t, first);
	if (!S_ISDIR(st.st_mode))
		return 0;
	{
		char state[64];

		/* a directory not listed yet: looking in would list it */
		if (xattr(p, "user.hsmfs.state", state, sizeof(state)) > 0 &&
		    !strcmp(state, "unlisted")) {
			if (!json)
				printf("%-20s %14s %14s %6s  %s/\n", "unlisted", "-", "-", "", p);
			return 0;
		}
		/* listed from a page's links (hsmfs-http(1)): some names may be missing */
		if (!json && strstr(state, ",partial"))
			printf("%-20s %14s %14s %6s  %s/\n", "listed,partial", "-", "-", "", p);
	}
	d = opendir(p);
	if (!d) {
		fprintf(stderr, "hsmfsctl: '%s': %s\n", p, strerror(errno));
		return -1;
	}
	while ((de = readdir(d))) {
		char child[PATH_MAX];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    state_dir_shown(p, de->d_name))
			continue;
		snprintf(child, sizeof(child), "%s/%s", p, de->d_name);
		if (status_walk(child, json, t, first))
			res = -1;
	}
	closedir(d);
	return res;
}

int cmd_status(int argc, char **argv)
{
	struct totals t = { 0 };
	bool json = false, first = true;
	int i, npaths = 0, res = 0;

	if (argc == 3 && !strcmp(argv[1], "-s"))
		return cmd_status_store(argv[2]);
	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--json"))
			json = true;
		else
			npaths++;
	if (!npaths) {
		fprintf(stderr, "hsmfsctl: status needs at least one PATH\n");
		return X_USAGE;
	}
	/* each PATH on a mount, before any table: none is news of a mount */
	for (i = 1; i < argc; i++) {
		char state[64];
		struct stat st;
		int e;

		/* a link or a device has no state to show, on a mount or not */
		if (!strcmp(argv[i], "--json") ||
		    (!lstat(argv[i], &st) && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) ||
		    xattr(argv[i], "user.hsmfs.state", state, sizeof(state)) >= 0)
			continue;
		e = errno;
		if (e != ENODATA && e != ENOTSUP)
			fprintf(stderr, "hsmfsctl: '%s': %s\n", argv[i], strerror(e));
		else if (!fanotify_mount_said(argv[i]))
			fprintf(stderr, "hsmfsctl: '%s' is not on an hsmfs mount\n", argv[i]);
		return X_STORE;
	}
	if (json)
		printf("{\"files\": [");
	else
		printf("%-20s %14s %14s %6s  %s\n", "STATE", "PRESENT", "SIZE", "", "PATH");
	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], "--json") && status_walk(argv[i], json, &t, &first))
			res = X_STORE;
	if (json)
		printf("\n], \"total\": {\"files\": %llu, \"size\": %llu, \"present\": %llu}}\n",
		       t.files, t.size, t.present);
	else
		printf("%-20s %14llu %14llu %5.1f%%  %llu file%s\n", "total", t.present, t.size,
		       t.size ? 100.0 * t.present / t.size : 100.0, t.files,
		       t.files == 1 ? "" : "s");
	return res;
}
