/* http-lister.c - hsmfs-http's listers: see http-lister.h */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hsmfs/hook.h"
#include "http-archive.h"
#include "http-config.h"
#include "http-list.h"
#include "http-lister.h"
#include "http-names.h"
#include "http-queue.h"
#include "http-start.h"
#include "http-xfer.h"

static void tell_progress(void *arg, uint64_t bytes)
{
	hsmfs_hook_progress(hook, *(uint64_t *)arg, bytes);
}

/* probe_conditions(), once, before the first archive to an http(s) origin */
static pthread_once_t probed = PTHREAD_ONCE_INIT;

/*
 * An ARCHIVE: the snapshot to the file's URL (http-archive.h), retried
 * with backoff on a server error or a lost connection; ESTALE (a
 * conflict) and other refusals are final.
 */

static void archive_job(CURL *lc, struct job *j)
{
	struct http_archive_out out = { .why = "out of memory" };
	char *url = j->ev.origin[0] ? strdup(j->ev.origin) :
		    cfg.origin[0] ? join_url(cfg.origin, j->ev.path) : NULL;
	int err = url ? 0 : ENOMEM;

	if (!j->ev.origin[0] && !cfg.origin[0]) {
		/* never a URL made of the path alone: its first name would be a host */
		snprintf(out.why, sizeof(out.why), "no origin to archive to (--origin, or the "
			 "mount's origin=)");
		err = EINVAL;
	}

	if (url && !err && !strncmp(url, "http", 4))
		pthread_once(&probed, probe_conditions);
	for (unsigned attempt = 0; url && !err;) {
		err = http_archive(lc, &j->ev, j->flags, url, cfg.s3, cfg.honoured,
				   cfg.read_back_max, cfg.part_size, tell_progress, &j->ev.id,
				   &out);
		if ((err != EAGAIN && err != EIO && err != ETIMEDOUT) || attempt >= cfg.retries)
			break;
		logf_("archive of '/%s': %s; again in %u s", j->ev.path, out.why, 1u << attempt);
		sleep(1u << attempt++);
		err = 0;
	}
	if (err) {
		logf_("archive of '/%s': %s", j->ev.path, out.why);
		hsmfs_hook_deny(hook, j->ev.id, err);
	} else if (hsmfs_hook_archived(hook, j->ev.id, out.version, out.origin) == 0) {
		if (cfg.verbose)
			logf_("archived '/%s' to %s as %s%s%.0u%s", j->ev.path, url, out.version,
			      out.parts ? " (a multipart upload of " : "", out.parts,
			      out.parts ? " parts)" : "");
		hsmfs_hook_allow(hook, j->ev.id, 0, 0, 0);
	} else {
		hsmfs_hook_deny(hook, j->ev.id, EIO);
	}
	free(url);
}

/* An ARCHIVE_NAME of a directory: made or removed at the origin. */
static void dir_job(CURL *lc, struct job *j)
{
	struct http_archive_out out = { .why = "out of memory" };
	bool made = j->ev.start == HSMFS_NAME_MKDIR;
	char *url = NULL;
	int err = 0;

	if (!cfg.origin[0]) {
		snprintf(out.why, sizeof(out.why), "no origin (--origin, or the mount's origin=)");
		err = EINVAL;
	} else if (!j->ev.path[0]) {
		snprintf(out.why, sizeof(out.why), "the root is not made or removed");
		err = EINVAL;
	} else {
		char *u = join_url(cfg.origin, j->ev.path);

		/* a collection's URL ends in "/" */
		if (!u || asprintf(&url, "%s/", u) < 0) {
			url = NULL;
			err = ENOMEM;
		}
		free(u);
	}
	for (unsigned attempt = 0; !err;) {
		err = http_archive_dir(lc, url, made, cfg.s3, &out);
		if ((err != EAGAIN && err != EIO && err != ETIMEDOUT) || attempt >= cfg.retries)
			break;
		sleep(1u << attempt++);
		err = 0;
	}
	/* not empty there: the daemon asks again after the ops recorded since, or says so */
	if ((err || out.why[0]) && err != ENOTEMPTY)
		logf_("directory '/%s' %s at the origin: %s", j->ev.path,
		      made ? "made" : "removed", out.why);
	if (err)
		hsmfs_hook_deny(hook, j->ev.id, err);
	else
		hsmfs_hook_allow(hook, j->ev.id, 0, 0, 0);
	free(url);
}

/* An ARCHIVE_NAME: the object removed or moved (http-names.h). */
static void name_job(CURL *lc, struct job *j)
{
	if (j->ev.start == HSMFS_NAME_MKDIR || j->ev.start == HSMFS_NAME_RMDIR) {
		dir_job(lc, j);
		return;
	}

	struct http_archive_out out = { .why = "out of memory" };
	char *to = j->ev.start == HSMFS_NAME_RENAMED && cfg.origin[0] ?
			   join_url(cfg.origin, j->ev.path) : NULL;
	int err = j->ev.start == HSMFS_NAME_RENAMED && !to ? ENOMEM : 0;

	/*
	 * A removal with no object recorded: whatever is at the path's URL
	 * (an upload the mount never heard the answer of, hsmfs-hooks(7))
	 */
	if (j->ev.start == HSMFS_NAME_REMOVED && !j->ev.origin[0] && cfg.origin[0]) {
		char *url = join_url(cfg.origin, j->ev.path);

		if (!url || strlen(url) >= sizeof(j->ev.origin))
			err = url ? ENAMETOOLONG : ENOMEM;
		else
			memcpy(j->ev.origin, url, strlen(url) + 1);
		free(url);
	}

	if (j->ev.start == HSMFS_NAME_RENAMED && !cfg.origin[0]) {
		snprintf(out.why, sizeof(out.why), "no origin to move to (--origin, or the "
			 "mount's origin=)");
		err = EINVAL;
	}

	for (unsigned attempt = 0; !err && (j->ev.start != HSMFS_NAME_RENAMED || to);) {
		err = http_archive_name(lc, &j->ev, to, cfg.s3, &out);
		if ((err != EAGAIN && err != EIO && err != ETIMEDOUT) || attempt >= cfg.retries)
			break;
		sleep(1u << attempt++);
		err = 0;
	}
	if (err && err != ENOENT)
		logf_("%s of '/%s' at the origin: %s",
		      j->ev.start == HSMFS_NAME_RENAMED ? "rename" : "removal", j->ev.path,
		      out.why);
	if (err)
		hsmfs_hook_deny(hook, j->ev.id, err);
	else if (j->ev.start == HSMFS_NAME_RENAMED &&
		 hsmfs_hook_archived(hook, j->ev.id, out.version, out.origin))
		hsmfs_hook_deny(hook, j->ev.id, EIO);
	else
		hsmfs_hook_allow(hook, j->ev.id, 0, 0, 0);
	free(to);
}

/* A lister: PRE_DIR, PRE_LOOKUP and ARCHIVE events, one at a time. */
void *lister(void *arg)
{
	(void)arg;
	for (;;) {
		struct job *j;
		char why[512];
		CURL *lc;
		int err;

		pthread_mutex_lock(&qlock);
		while (!lists.head && !done)
			pthread_cond_wait(&qcond, &qlock);
		j = jobq_take(&lists);
		pthread_mutex_unlock(&qlock);
		if (!j)
			break;
		why[0] = '\0';
		lc = curl_easy_init(); /* its own callbacks; the listers' connections */
		if (lc)
			setup_handle(lc, true);
		if (lc && (j->ev.type == HSMFS_EV_ARCHIVE || j->ev.type == HSMFS_EV_ARCHIVE_NAME)) {
			if (j->ev.type == HSMFS_EV_ARCHIVE)
				archive_job(lc, j);
			else
				name_job(lc, j);
			curl_easy_cleanup(lc);
			if (j->ev.fd >= 0)
				close(j->ev.fd);
			free(j);
			continue;
		}
		if (!lc)
			err = ENOMEM;
		else if (j->ev.fd < 0)
			err = EBADF;
		else if (j->ev.type == HSMFS_EV_PRE_LOOKUP)
			err = http_lookup(lc, &j->ev, cfg.origin, cfg.s3, why, sizeof(why));
		else
			err = http_list(lc, &j->ev, cfg.origin, cfg.s3, cfg.list_page,
					cfg.s3 && !cfg.no_s3_meta, why, sizeof(why));
		if (err && err != EBADF)
			logf_("%s '/%s': %s", j->ev.type == HSMFS_EV_PRE_LOOKUP ? "lookup of" :
			      "listing", j->ev.path, why[0] ? why : strerror(err));
		if (lc)
			curl_easy_cleanup(lc);
		if (j->ev.fd >= 0)
			close(j->ev.fd);
		if (err)
			hsmfs_hook_deny(hook, j->ev.id, err);
		else
			hsmfs_hook_allow(hook, j->ev.id, 0, 0, 0);
		free(j);
	}
	return NULL;
}
