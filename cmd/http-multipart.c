/* http-multipart.c - S3 multipart uploads: see http-multipart.h */
#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "http-journal.h"
#include "http-list.h"
#include "http-multipart.h"
#include "http-request.h"

#define PARTS_AT_ONCE 4
#define PARTS_MAX 10000       /* S3's */

/* The text between <tag> and </tag> in body, into out ("" if none). */
static void xml_value(const char *body, const char *tag, char *out, size_t size)
{
	char open[64], close[64];
	const char *a, *b;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	out[0] = '\0';
	a = body ? strstr(body, open) : NULL;
	b = a ? strstr(a, close) : NULL;
	if (a && b) {
		a += strlen(open);
		snprintf(out, size, "%.*s", (int)(b - a) < (int)size - 1 ? (int)(b - a) :
			 (int)size - 1, a);
	}
	/* &quot; is how S3 writes an ETag's quotes in XML */
	for (char *q; (q = strstr(out, "&quot;"));) {
		*q = '"';
		memmove(q + 1, q + 6, strlen(q + 6) + 1);
	}
}

/* One part in flight: its handle, its slice of the snapshot, its answer. */
struct part {
	CURL *c;
	struct upload up;
	struct seen s;
	struct curl_slist *h;
	char url[8400];
};

/* A request of method to url with body (may be NULL), the answer's body in *ret. */
static int s3_call(CURL *c, const char *method, const char *url, const char *body,
		   struct curl_slist *h, struct seen *s, struct http_body *ret, char *why,
		   size_t wlen)
{
	int err;

	prepare(c, url, s, h);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, ret);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	err = perform(c, s, why, wlen);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, NULL);
	return err;
}

/*
 * The file's mtime and permission bits as the object's metadata
 * (x-amz-meta-mtime in seconds, x-amz-meta-mode in octal with the file
 * type, as rclone writes them): given back by listings (http-list.c).
 */
struct curl_slist *s3_meta_headers(struct curl_slist *h, const struct hsmfs_event *ev)
{
	char line[64];

	snprintf(line, sizeof(line), "x-amz-meta-mtime: %llu", (unsigned long long)ev->end);
	h = h ? curl_slist_append(h, line) : NULL;
	snprintf(line, sizeof(line), "x-amz-meta-mode: %o",
		 (unsigned)(S_IFREG | (ev->start & 07777)));
	return h ? curl_slist_append(h, line) : NULL;
}

/*
 * A multipart upload (S3) of the snapshot in parts of part bytes,
 * PARTS_AT_ONCE at a time, each on a handle of its own (a copy of c's
 * settings: the signature, the keys); aborted on any failure, so that
 * no part is left behind.  0 with the object's ETag in out->version, or
 * an errno.
 */
int s3_multipart(CURL *c, const struct hsmfs_event *ev, const char *url,
		 uint64_t part, const char *cond,
		 void (*progress)(void *arg, uint64_t bytes), void *arg,
		 struct http_archive_out *out)
{
	struct curl_slist *h = NULL, *ch = NULL;
	bool journalled = false;
	struct http_body b = { NULL, 0, 1 << 20 };
	char id[1024], u[8400], v[1024], *xml = NULL;
	unsigned nparts = (unsigned)((ev->file_size + part - 1) / part), next = 0, done = 0;
	char (*etags)[1024] = NULL;
	struct part slots[PARTS_AT_ONCE] = { 0 };
	CURLM *multi = NULL;
	struct seen s;
	size_t xlen = 0;
	int err = 0;

	if (nparts > PARTS_MAX) {
		snprintf(out->why, sizeof(out->why), "%u parts: more than S3 takes", nparts);
		return EFBIG;
	}
	h = curl_slist_append(h, HTTP_IDENTITY);
	h = curl_slist_append(h, HTTP_S3_EMPTY_PAYLOAD);
	h = s3_meta_headers(h, ev); /* an object's metadata are given when it is begun */
	snprintf(u, sizeof(u), "%s?uploads", url);
	err = s3_call(c, "POST", u, "", h, &s, &b, out->why, sizeof(out->why));
	xml_value(b.p, "UploadId", id, sizeof(id));
	free(b.p);
	b.p = NULL;
	b.n = 0;
	if (!err && (s.status != 200 || !id[0])) {
		snprintf(out->why, sizeof(out->why), "CreateMultipartUpload %s: status %ld", url,
			 s.status);
		err = s.status >= 500 ? EAGAIN : EACCES;
	}
	if (err)
		goto out;
	/* aborted at the next start if never ended; not begun unless it can be */
	err = http_journal_begun(url, id);
	journalled = !err;
	if (err) {
		snprintf(out->why, sizeof(out->why),
			 "cannot journal the multipart upload of %s: %s", url, strerror(err));
		err = EIO;
		goto abort;
	}
	etags = calloc(nparts, sizeof(*etags));
	multi = curl_multi_init();
	if (!etags || !multi) {
		err = ENOMEM;
		goto abort;
	}
	/* the parts, PARTS_AT_ONCE at a time */
	while (done < nparts && !err) {
		int running, left;
		struct CURLMsg *m;

		for (unsigned i = 0; i < PARTS_AT_ONCE && next < nparts; i++) {
			struct part *p = &slots[i];
			uint64_t off = (uint64_t)next * part;

			if (p->c)
				continue;
			p->c = curl_easy_duphandle(c);
			if (!p->c) {
				err = ENOMEM;
				break;
			}
			p->up = (struct upload){ ev->fd, off, off + part < ev->file_size ?
					off + part : ev->file_size, NULL, NULL, 0 };
			p->h = curl_slist_append(NULL, HTTP_IDENTITY);
			p->h = curl_slist_append(p->h, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
			p->h = curl_slist_append(p->h, "Expect:");
			snprintf(p->url, sizeof(p->url), "%s?partNumber=%u&uploadId=%s", url,
				 next + 1, id);
			prepare(p->c, p->url, &p->s, p->h);
			curl_easy_setopt(p->c, CURLOPT_UPLOAD, 1L);
			curl_easy_setopt(p->c, CURLOPT_READFUNCTION, read_cb);
			curl_easy_setopt(p->c, CURLOPT_READDATA, &p->up);
			curl_easy_setopt(p->c, CURLOPT_INFILESIZE_LARGE,
					 (curl_off_t)(p->up.size - p->up.pos));
			curl_easy_setopt(p->c, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
			curl_easy_setopt(p->c, CURLOPT_PRIVATE, (char *)(uintptr_t)(next + 1));
			curl_multi_add_handle(multi, p->c);
			next++;
		}
		curl_multi_perform(multi, &running);
		while ((m = curl_multi_info_read(multi, &left))) {
			char *num = NULL;
			long status = 0;
			struct part *p = NULL;

			if (m->msg != CURLMSG_DONE)
				continue;
			for (unsigned i = 0; i < PARTS_AT_ONCE; i++)
				if (slots[i].c == m->easy_handle)
					p = &slots[i];
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &num);
			curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
			if (m->data.result != CURLE_OK || status != 200 || !p || !p->s.etag[0]) {
				snprintf(out->why, sizeof(out->why),
					 "part %u of %s: %s, status %ld",
					 (unsigned)(uintptr_t)num, url,
					 curl_easy_strerror(m->data.result), status);
				err = status >= 500 || m->data.result != CURLE_OK ? EAGAIN : EACCES;
			} else {
				snprintf(etags[(uintptr_t)num - 1], sizeof(*etags), "%s",
					 p->s.etag);
				done++;
				if (progress)
					progress(arg, done * part < ev->file_size ? done * part :
								  ev->file_size);
			}
			if (p) {
				curl_multi_remove_handle(multi, p->c);
				curl_easy_cleanup(p->c);
				curl_slist_free_all(p->h);
				memset(p, 0, sizeof(*p));
			}
		}
		if (running && !err)
			curl_multi_poll(multi, NULL, 0, 1000, NULL);
	}
	if (err)
		goto abort;
	/* the whole: its parts in order, and its ETag */
	xml = malloc((size_t)nparts * 1100 + 128);
	if (!xml) {
		err = ENOMEM;
		goto abort;
	}
	xlen = (size_t)sprintf(xml, "<CompleteMultipartUpload>");
	for (unsigned i = 0; i < nparts; i++)
		xlen += (size_t)sprintf(xml + xlen, "<Part><PartNumber>%u</PartNumber>"
					"<ETag>%s</ETag></Part>", i + 1, etags[i]);
	sprintf(xml + xlen, "</CompleteMultipartUpload>");
	snprintf(u, sizeof(u), "%s?uploadId=%s", url, id);
	/* the write's condition, judged when the object is made (S3 since 2024) */
	ch = curl_slist_append(NULL, HTTP_IDENTITY);
	ch = ch ? curl_slist_append(ch, HTTP_S3_EMPTY_PAYLOAD) : NULL;
	if (ch && cond)
		ch = curl_slist_append(ch, cond);
	if (!ch) {
		err = ENOMEM;
		goto abort;
	}
	err = s3_call(c, "POST", u, xml, ch, &s, &b, out->why, sizeof(out->why));
	xml_value(b.p, "ETag", v, sizeof(v));
	if (!err && s.status == 412) {
		snprintf(out->why, sizeof(out->why), "CompleteMultipartUpload %s: precondition "
			 "failed (412)", url);
		err = ESTALE;
	} else if (!err && (s.status != 200 || !v[0] || (b.p && strstr(b.p, "<Error>")))) {
		/* a 200 may still carry an error (S3 says so in the body) */
		snprintf(out->why, sizeof(out->why), "CompleteMultipartUpload %s: status %ld%s",
			 url, s.status,
			 b.p && strstr(b.p, "<Error>") ? ", an error in its body" : "");
		err = s.status >= 500 || (b.p && strstr(b.p, "<Error>")) ? EAGAIN : EACCES;
	}
	if (!err) {
		snprintf(out->version, sizeof(out->version), "%s", v);
		out->parts = nparts;
		(void)http_journal_ended(id); /* an "E" lost: aborted again at the start (404) */
		goto out;
	}
abort:
	/* AbortMultipartUpload: its parts are not left to be paid for */
	if (!http_multipart_abort(c, url, id) && journalled)
		(void)http_journal_ended(id);
out:
	for (unsigned i = 0; i < PARTS_AT_ONCE; i++)
		if (slots[i].c) {
			curl_multi_remove_handle(multi, slots[i].c);
			curl_easy_cleanup(slots[i].c);
			curl_slist_free_all(slots[i].h);
		}
	if (multi)
		curl_multi_cleanup(multi);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(h);
	curl_slist_free_all(ch);
	free(b.p);
	free(xml);
	free(etags);
	return err;
}

int http_multipart_abort(CURL *c, const char *url, const char *id)
{
	struct http_body ab = { NULL, 0, 1 << 20 };
	struct curl_slist *h = curl_slist_append(NULL, HTTP_IDENTITY);
	char u[8400];
	struct seen s;
	int err;

	h = h ? curl_slist_append(h, HTTP_S3_EMPTY_PAYLOAD) : NULL;
	if (!h)
		return ENOMEM;
	snprintf(u, sizeof(u), "%s?uploadId=%s", url, id);
	err = s3_call(c, "DELETE", u, NULL, h, &s, &ab, NULL, 0);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(h);
	free(ab.p);
	/* 204: aborted; 404 (NoSuchUpload): ended already */
	return err ? err : s.status / 100 == 2 || s.status == 404 ? 0 : EIO;
}
