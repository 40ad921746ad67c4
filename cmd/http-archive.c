/* http-archive.c - hsmfs-http's archives: see http-archive.h */
#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http-archive.h"
#include "http-file.h"
#include "http-list.h"
#include "http-multipart.h"
#include "http-request.h"

static void http_date(int64_t t, char *buf, size_t size)
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, size, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

int http_archive(CURL *c, const struct hsmfs_event *ev, uint16_t flags, const char *url,
		 bool s3, bool honoured, uint64_t read_back_max, uint64_t part_size,
		 void (*progress)(void *arg, uint64_t bytes), void *arg,
		 struct http_archive_out *out)
{
	struct curl_slist *hdrs = NULL, *put = NULL;
	char before_lastmod[128] = "", before_etag[1024] = "";
	long long before_length = -1;
	int64_t mtime = (int64_t)ev->end;
	struct upload up = { ev->fd, 0, ev->file_size, progress, arg, 0 };
	bool overwrite = flags & HSMFS_EVENT_OVERWRITE, fresh = flags & HSMFS_EVENT_NEW;
	char line[1200], cond[1200] = "", date[64];
	struct seen s;
	int err, same;

	memset(out, 0, sizeof(*out));
	if (ev->fd < 0)
		return EBADF;
	if (!strncmp(url, "file://", 7))
		return archive_file(ev, flags, url, out);
	hdrs = curl_slist_append(hdrs, HTTP_IDENTITY);
	if (s3)
		hdrs = curl_slist_append(hdrs, HTTP_S3_EMPTY_PAYLOAD);
	/* 1. what the origin holds now */
	err = request(c, "HEAD", url, hdrs, &s, out->why, sizeof(out->why));
	if (err)
		goto out;
	if (s.status != 200 && s.status != 404) {
		snprintf(out->why, sizeof(out->why), "HEAD %s: status %ld", url, s.status);
		err = s.status >= 500 ? EAGAIN : EACCES;
		goto out;
	}
	if (s.status == 200) {
		snprintf(before_etag, sizeof(before_etag), "%s", s.etag);
		snprintf(before_lastmod, sizeof(before_lastmod), "%s", s.lastmod);
		before_length = s.length;
	}
	/* 2. the recorded version, or nothing for a new file: else compare */
	if (!overwrite) {
		bool as_recorded = fresh ? s.status == 404 :
				   s.status == 200 && ev->version[0] &&
				   !strcmp(validator(&s, ev->version), ev->version);

		if (!as_recorded && s.status == 404) {
			snprintf(out->why, sizeof(out->why), "%s is gone from the origin", url);
			err = ESTALE;
			goto out;
		}
		if (!as_recorded && ev->version[0] == '\0' && !fresh) {
			/* no version recorded: nothing to be conditional on */
			as_recorded = true;
		}
		if (!as_recorded) {
			same = same_bytes(c, url, ev, hdrs, out->why, sizeof(out->why), NULL);
			if (same < 0) {
				err = -same;
				goto out;
			}
			if (!same) {
				snprintf(out->why, sizeof(out->why),
					 "%s is not the recorded version (%s, recorded %s)", url,
					 validator(&s, ev->version)[0] ?
						validator(&s, ev->version) : "none",
					 ev->version[0] ? ev->version : "none");
				err = ESTALE;
				goto out;
			}
			/* archived already (a repeat after a crash): its version is ours */
			snprintf(out->version, sizeof(out->version), "%s",
				 validator(&s, ev->version));
			goto done;
		}
	}
	/* 3. the upload, conditional where the server honours it */
	put = curl_slist_append(put, HTTP_IDENTITY);
	if (s3) /* the body is not signed: its hash would need a read of it first */
		put = curl_slist_append(put, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (!overwrite && fresh)
		snprintf(cond, sizeof(cond), "If-None-Match: *");
	else if (!overwrite && ev->version[0] == '"')
		snprintf(cond, sizeof(cond), "If-Match: %s", ev->version);
	else if (!overwrite && before_etag[0])
		/* a date recorded (a listing's): on the ETag the check just saw */
		snprintf(cond, sizeof(cond), "If-Match: %s", before_etag);
	if (cond[0])
		put = curl_slist_append(put, cond);
	/*
	 * A new version never carries the old validator: nginx's ETag is
	 * hex(mtime)-hex(size) and its Last-Modified the mtime to the
	 * second, so bytes changed with size and mtime kept (cp -p, rsync
	 * -t, touch -r) would keep both.  With the size unchanged, the
	 * origin's mtime goes a second past the one it has if the file's
	 * is not later: validators of one size only grow, so no version
	 * gets an earlier one's either (hsmfs-http(1): the cost).
	 */
	if (before_lastmod[0] && (before_length < 0 || (uint64_t)before_length == ev->file_size)) {
		time_t was = curl_getdate(before_lastmod, NULL);

		if (was >= 0 && (int64_t)was >= mtime)
			mtime = (int64_t)was + 1;
	}
	http_date(mtime, date, sizeof(date));
	snprintf(line, sizeof(line), "Date: %s", date);
	if (!s3) /* S3 takes Date for the request's time (a skew is refused) */
		put = curl_slist_append(put, line);
	if (s3) {
		put = s3_meta_headers(put, ev);
	}
	put = curl_slist_append(put, "Expect:");
	if (s3 && part_size && ev->file_size > part_size) {
		err = s3_multipart(c, ev, url, part_size, cond[0] ? cond : NULL, progress, arg,
				   out);
		if (err)
			goto out;
		if (honoured)
			goto done;
		goto verify;
	}
	for (int again = 0; again < 2; again++) {
		up.pos = up.told = 0;
		prepare(c, url, &s, put);
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, read_cb);
		curl_easy_setopt(c, CURLOPT_READDATA, &up);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)ev->file_size);
		/* fewer, larger reads of the snapshot: 64 KiB each cost a round of callbacks */
		curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
		err = perform(c, &s, out->why, sizeof(out->why));
		curl_easy_setopt(c, CURLOPT_UPLOAD, 0L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, NULL);
		if (err || s.status != 409 || s3)
			break;
		/* a WebDAV collection missing (a directory made on the mount) */
		make_collections(c, url, hdrs);
	}
	if (err)
		goto out;
	if (s.status == 412) {
		snprintf(out->why, sizeof(out->why), "PUT %s: precondition failed (412)", url);
		err = ESTALE;
		goto out;
	}
	if (s.status / 100 != 2) {
		snprintf(out->why, sizeof(out->why), "PUT %s: status %ld", url, s.status);
		err = s.status >= 500 ? EAGAIN : s.status == 413 ? EFBIG :
		      s.status == 507 ? ENOSPC : EACCES;
		goto out;
	}
	if (progress)
		progress(arg, ev->file_size);
	/*
	 * 4. The new version: an ETag where the server gives one (nginx's
	 * is its size and mtime, its Last-Modified the mtime alone, to the
	 * second: the ETag tells more changes apart), else the date: the
	 * PUT's ETag, else a HEAD's.  (A listing that records dates, nginx's,
	 * gives another kind of version: the mount's refresh takes the
	 * listed mtime, which the PUT's Date set, as the same version.)
	 */
verify:
	if (!honoured && ev->file_size > read_back_max) {
		/*
		 * Too big to read back (--read-back-max): the validators as
		 * our PUT made them.  Not a proof against a writer of the
		 * same length whose PUT set the same second (hsmfs-http(1)).
		 */
		err = request(c, "HEAD", url, hdrs, &s, out->why, sizeof(out->why));
		if (err)
			goto out;
		if (s.status != 200 || s.length < 0 || (uint64_t)s.length != ev->file_size ||
		    (!s3 && strcmp(s.lastmod, date)) ||
		    (before_etag[0] && !strcmp(s.etag, before_etag))) {
			snprintf(out->why, sizeof(out->why),
				 "%s after our PUT: status %ld, length %lld of %llu, dated %s (we "
				 "sent %s): another writer's version", url, s.status, s.length,
				 (unsigned long long)ev->file_size, s.lastmod, s3 ? "none" : date);
			err = s.status == 200 ? ESTALE : EIO;
			goto out;
		}
	} else if (!honoured) {
		/*
		 * The origin ignores If-Match (nginx's dav module): another
		 * writer's PUT may have landed over ours, its whole upload
		 * being the window.  The proof that the object now there is
		 * ours: a GET of it compared byte for byte with the snapshot,
		 * the version taken from that same response (never from a
		 * HEAD, which could see a later one).  Other bytes: a
		 * conflict, theirs at the origin, ours on the mount.
		 */
		struct seen g;

		same = same_bytes(c, url, ev, hdrs, out->why, sizeof(out->why), &g);
		if (same < 0) {
			err = -same;
			goto out;
		}
		if (!same) {
			snprintf(out->why, sizeof(out->why),
				 "%s holds another writer's bytes after our PUT (%s)", url,
				 g.etag[0] ? g.etag : g.lastmod);
			err = ESTALE;
			goto out;
		}
		s = g;
	} else if (!s.etag[0]) {
		/* conditions honoured: the PUT's ETag, else a HEAD's */
		err = request(c, "HEAD", url, hdrs, &s, out->why, sizeof(out->why));
		if (err)
			goto out;
		if (s.status != 200 || (s.length >= 0 && (uint64_t)s.length != ev->file_size)) {
			snprintf(out->why, sizeof(out->why),
				 "HEAD %s after the upload: status %ld, length %lld of %llu", url,
				 s.status, s.length, (unsigned long long)ev->file_size);
			err = s.status == 200 ? ESTALE : EIO;
			goto out;
		}
	}
	/*
	 * 4. The new version: an ETag where the server gives one (nginx's is
	 * its size and mtime, its Last-Modified the mtime alone, to the
	 * second: the ETag tells more changes apart), else the date.
	 */
	snprintf(out->version, sizeof(out->version), "%s", s.etag[0] ? s.etag : s.lastmod);
done:
	if (fresh)
		snprintf(out->origin, sizeof(out->origin), "%s", url);
out:
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	curl_slist_free_all(put);
	return err;
}

int http_conditions_probe(CURL *c, const char *scratch_url, bool s3, char *why, size_t wlen)
{
	struct curl_slist *h = curl_slist_append(NULL, HTTP_IDENTITY);
	struct upload up = { -1, 0, 0, NULL, NULL, 0 };
	struct seen s;
	int err;

	if (s3) {
		h = curl_slist_append(h, HTTP_S3_EMPTY_PAYLOAD);
	}
	h = curl_slist_append(h, "If-Match: \"hsmfs-probe-matches-nothing\"");
	h = curl_slist_append(h, "Expect:");
	prepare(c, scratch_url, &s, h);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, read_cb);
	curl_easy_setopt(c, CURLOPT_READDATA, &up);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)0);
	err = perform(c, &s, why, wlen);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 0L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, NULL);
	if (!err && s.status / 100 == 2) {
		struct curl_slist *d = curl_slist_append(NULL, HTTP_IDENTITY);

		if (s3)
			d = curl_slist_append(d, HTTP_S3_EMPTY_PAYLOAD);
		(void)request(c, "DELETE", scratch_url, d, &s, NULL, 0);
		curl_slist_free_all(d);
		s.status = 200;
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(h);
	if (err)
		return -err;
	if (s.status == 412)
		return 1;
	if (s.status == 200)
		return 0;
	snprintf(why, wlen, "PUT %s with a failing If-Match: status %ld", scratch_url, s.status);
	return -EIO;
}
