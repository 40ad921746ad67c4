/* http-names.c - hsmfs-http's names and directories at the origin: see http-names.h */
#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-file.h"
#include "http-list.h"
#include "http-names.h"
#include "http-request.h"

/* GET url into b (at most 1 MiB): 0 with s, or an errno. */
static int get_body(CURL *c, const char *url, struct curl_slist *h, struct http_body *b,
		    struct seen *s, char *why, size_t wlen)
{
	int err;

	prepare(c, url, s, h);
	b->max = 1 << 20;
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	err = perform(c, s, why, wlen);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, NULL);
	return err;
}

/* Is the body an empty JSON array ("[]", any white space)? */
static bool empty_array(const struct http_body *b)
{
	const char *p = b->p ? b->p : "";

	p += strspn(p, " \t\r\n");
	if (*p++ != '[')
		return false;
	p += strspn(p, " \t\r\n");
	if (*p++ != ']')
		return false;
	return p[strspn(p, " \t\r\n")] == '\0';
}

int http_archive_dir(CURL *c, const char *url, bool made, bool s3,
		     struct http_archive_out *out)
{
	struct curl_slist *hdrs = NULL;
	struct http_body b = { 0 };
	struct seen s;
	int err;

	memset(out, 0, sizeof(*out));
	if (!strncmp(url, "file://", 7))
		return dir_file(url, made, out);
	hdrs = curl_slist_append(hdrs, HTTP_IDENTITY);
	if (s3)
		hdrs = curl_slist_append(hdrs, HTTP_S3_EMPTY_PAYLOAD);
	if (made && s3) {
		/* the marker: an empty object whose key ends in "/" */
		struct curl_slist *h = curl_slist_append(NULL, HTTP_IDENTITY);

		h = curl_slist_append(h, HTTP_S3_EMPTY_PAYLOAD);
		h = curl_slist_append(h, "Content-Length: 0");
		err = request(c, "PUT", url, h, &s, out->why, sizeof(out->why));
		curl_slist_free_all(h);
	} else if (made) {
		err = request(c, "MKCOL", url, hdrs, &s, out->why, sizeof(out->why));
		if (!err && s.status == 409) {
			/* its parents first */
			make_collections(c, url, hdrs);
			err = request(c, "MKCOL", url, hdrs, &s, out->why, sizeof(out->why));
		}
		if (!err && s.status == 405)
			s.status = 201; /* there already */
	} else if (s3) {
		/*
		 * removed: its marker.  Keys below it are other objects, which
		 * a DELETE of the marker leaves, and which keep the prefix
		 * listed: nothing the mount never saw goes.
		 */
		err = request(c, "DELETE", url, hdrs, &s, out->why, sizeof(out->why));
	} else {
		/* removed: only what the origin lists as empty */
		err = get_body(c, url, hdrs, &b, &s, out->why, sizeof(out->why));
		if (!err && s.status == 200 && empty_array(&b)) {
			struct curl_slist *h = curl_slist_append(NULL, HTTP_IDENTITY);

			h = curl_slist_append(h, "Depth: infinity");
			err = request(c, "DELETE", url, h, &s, out->why, sizeof(out->why));
			curl_slist_free_all(h);
		} else if (!err && s.status == 200) {
			snprintf(out->why, sizeof(out->why),
				 "%s is not empty at the origin (or not a JSON listing): kept",
				 url);
			err = ENOTEMPTY;
		}
	}
	free(b.p);
	if (!err && s.status == 404)
		s.status = 204; /* gone already */
	if (!err && s.status / 100 != 2) {
		snprintf(out->why, sizeof(out->why), "%s %s: status %ld",
			 made ? (s3 ? "PUT" : "MKCOL") : "DELETE", url, s.status);
		err = s.status >= 500 ? EAGAIN : EACCES;
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	return err;
}

int http_archive_name(CURL *c, const struct hsmfs_event *ev, const char *to, bool s3,
		      struct http_archive_out *out)
{
	const char *from = ev->origin;
	struct curl_slist *hdrs = NULL, *h2 = NULL;
	char line[4300];
	struct seen s;
	int err;

	memset(out, 0, sizeof(*out));
	if (!from[0]) {
		snprintf(out->why, sizeof(out->why), "no URL recorded");
		return EINVAL;
	}
	if (ev->start == HSMFS_NAME_REMOVED)
		to = NULL;
	if (!strncmp(from, "file://", 7))
		return name_file(ev, from, to, out);
	if (to && !strcmp(from, to)) {
		snprintf(out->version, sizeof(out->version), "%s", ev->version);
		snprintf(out->origin, sizeof(out->origin), "%s", to);
		return 0;
	}
	hdrs = curl_slist_append(hdrs, HTTP_IDENTITY);
	if (s3)
		hdrs = curl_slist_append(hdrs, HTTP_S3_EMPTY_PAYLOAD);
	/* 1. the object as it is now */
	err = request(c, "HEAD", from, hdrs, &s, out->why, sizeof(out->why));
	if (err)
		goto out;
	if (s.status == 404) {
		/* removed, or moved already (a repeat after a crash) */
		if (to && !(err = request(c, "HEAD", to, hdrs, &s, out->why, sizeof(out->why))) &&
		    s.status == 200 && (!ev->version[0] ||
					!strcmp(validator(&s, ev->version), ev->version))) {
			snprintf(out->version, sizeof(out->version), "%s",
				 validator(&s, ev->version));
			snprintf(out->origin, sizeof(out->origin), "%s", to);
		} else if (!err) {
			err = ENOENT;
		}
		goto out;
	}
	if (s.status != 200) {
		snprintf(out->why, sizeof(out->why), "HEAD %s: status %ld", from, s.status);
		err = s.status >= 500 ? EAGAIN : EACCES;
		goto out;
	}
	if (ev->version[0] && strcmp(validator(&s, ev->version), ev->version)) {
		snprintf(out->why, sizeof(out->why), "%s is not the recorded version", from);
		err = ESTALE;
		goto out;
	}
	/* 2. removed, moved (WebDAV), or copied and removed (S3) */
	for (struct curl_slist *h = hdrs; h; h = h->next)
		h2 = curl_slist_append(h2, h->data);
	if (ev->version[0] == '"') {
		snprintf(line, sizeof(line), "If-Match: %s", ev->version);
		h2 = curl_slist_append(h2, line);
	}
	if (to && !s3) {
		snprintf(line, sizeof(line), "Destination: %s", to);
		h2 = curl_slist_append(h2, line);
		h2 = curl_slist_append(h2, "Overwrite: T");
		err = request(c, "MOVE", from, h2, &s, out->why, sizeof(out->why));
	} else if (to) {
		const char *p = strstr(from, "://");

		p = p ? strchr(p + 3, '/') : NULL;
		snprintf(line, sizeof(line), "x-amz-copy-source: %s", p ? p : "/");
		curl_slist_free_all(h2);
		h2 = curl_slist_append(NULL, HTTP_IDENTITY);
		h2 = curl_slist_append(h2, HTTP_S3_EMPTY_PAYLOAD);
		h2 = curl_slist_append(h2, line);
		err = request(c, "PUT", to, h2, &s, out->why, sizeof(out->why));
		if (!err && s.status / 100 == 2)
			err = request(c, "DELETE", from, hdrs, &s, out->why, sizeof(out->why));
	} else {
		err = request(c, "DELETE", from, h2, &s, out->why, sizeof(out->why));
	}
	if (err)
		goto out;
	if (s.status == 412) {
		snprintf(out->why, sizeof(out->why), "%s: precondition failed (412)", from);
		err = ESTALE;
		goto out;
	}
	if (s.status / 100 != 2 && s.status != 404) {
		snprintf(out->why, sizeof(out->why), "%s %s: status %ld", to ? "MOVE" : "DELETE",
			 from, s.status);
		err = s.status >= 500 ? EAGAIN : EACCES;
		goto out;
	}
	/* 3. a rename's object: its version at its new URL */
	if (to) {
		err = request(c, "HEAD", to, hdrs, &s, out->why, sizeof(out->why));
		if (!err && s.status != 200) {
			snprintf(out->why, sizeof(out->why), "HEAD %s after the move: status %ld",
				 to, s.status);
			err = EIO;
		}
		if (!err) {
			snprintf(out->version, sizeof(out->version), "%s",
				 validator(&s, ev->version));
			snprintf(out->origin, sizeof(out->origin), "%s", to);
		}
	}
out:
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	curl_slist_free_all(h2);
	return err;
}
