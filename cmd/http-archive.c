/* http-archive.c - hsmfs-http's archives: see http-archive.h */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http-archive.h"
#include "http-journal.h"
#include "http-list.h"

/* What one request saw: its status and validators. */
struct seen {
	long status;
	char etag[1024], lastmod[128];
	long long length;  /* Content-Length, -1: none */
};

static void field(char *dst, size_t size, const char *v, size_t n)
{
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	while (n && *v == ' ') {
		v++;
		n--;
	}
	if (n >= size)
		n = size - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

static size_t on_header(char *b, size_t sz, size_t n, void *arg)
{
	struct seen *s = arg;
	size_t len = sz * n;

	if (len > 5 && !strncmp(b, "HTTP/", 5)) {
		/* a status line: a new response (a redirect, a 100) */
		s->etag[0] = s->lastmod[0] = '\0';
		s->length = -1;
		s->status = 0;
	} else if (len > 5 && !strncasecmp(b, "ETag:", 5)) {
		field(s->etag, sizeof(s->etag), b + 5, len - 5);
	} else if (len > 14 && !strncasecmp(b, "Last-Modified:", 14)) {
		field(s->lastmod, sizeof(s->lastmod), b + 14, len - 14);
	} else if (len > 15 && !strncasecmp(b, "Content-Length:", 15)) {
		char v[32];

		field(v, sizeof(v), b + 15, len - 15);
		s->length = atoll(v);
	}
	return len;
}

static size_t discard(char *b, size_t sz, size_t n, void *arg)
{
	(void)b;
	(void)arg;
	return sz * n;
}

/* A body compared with the snapshot as it comes. */
struct cmp {
	int fd;
	uint64_t pos, size;
	bool differs;
};

static size_t compare_cb(char *b, size_t sz, size_t n, void *arg)
{
	struct cmp *c = arg;
	size_t len = sz * n, done = 0;
	char buf[65536];

	while (done < len && !c->differs) {
		size_t want = len - done < sizeof(buf) ? len - done : sizeof(buf);
		ssize_t r;

		if (c->pos + want > c->size) {
			c->differs = true; /* longer */
			break;
		}
		r = pread(c->fd, buf, want, (off_t)c->pos);
		if (r != (ssize_t)want || memcmp(buf, b + done, want))
			c->differs = true;
		c->pos += want;
		done += want;
	}
	return c->differs ? 0 : len; /* 0 stops the transfer */
}

/* The snapshot as a PUT's body. */
struct upload {
	int fd;
	uint64_t pos, size;
	void (*progress)(void *arg, uint64_t bytes);
	void *arg;
	uint64_t told;
};

static size_t read_cb(char *b, size_t sz, size_t n, void *arg)
{
	struct upload *u = arg;
	size_t want = sz * n;
	ssize_t r;

	if (u->pos >= u->size)
		return 0;
	if (want > u->size - u->pos)
		want = (size_t)(u->size - u->pos);
	r = pread(u->fd, b, want, (off_t)u->pos);
	if (r <= 0)
		return CURL_READFUNC_ABORT;
	u->pos += (uint64_t)r;
	if (u->progress && u->pos - u->told >= (1u << 20)) {
		u->told = u->pos;
		u->progress(u->arg, u->pos);
	}
	return (size_t)r;
}

/* The handle reset to a plain request of url with our callbacks. */
static void prepare(CURL *c, const char *url, struct seen *s, struct curl_slist *hdrs)
{
	memset(s, 0, sizeof(*s));
	s->length = -1;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, NULL);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 0L);
	curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(c, CURLOPT_RANGE, NULL);
	curl_easy_setopt(c, CURLOPT_TIMECONDITION, (long)CURL_TIMECOND_NONE);
}

static int perform(CURL *c, struct seen *s, char *why, size_t wlen)
{
	CURLcode rc = curl_easy_perform(c);

	if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR) {
		if (why)
			snprintf(why, wlen, "%s", curl_easy_strerror(rc));
		return rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &s->status);
	return 0;
}

/* The recorded kind of validator of what s saw ("" if none). */
static const char *validator(const struct seen *s, const char *recorded)
{
	if (recorded[0] && recorded[0] != '"' && strncmp(recorded, "W/", 2))
		return s->lastmod; /* a date was recorded */
	return s->etag[0] ? s->etag : s->lastmod;
}

/* Is v a version archive_file() made ("MTIME_NS-SIZE")? */
static bool file_made(const char *v)
{
	size_t n = strspn(v, "0123456789");

	return n && v[n] == '-' && v[n + 1] && strspn(v + n + 1, "0123456789") == strlen(v + n + 1);
}

static int request(CURL *c, const char *method, const char *url, struct curl_slist *h,
		   struct seen *s, char *why, size_t wlen);

/* Is the object at url byte for byte the snapshot?  1 yes, 0 no, or -errno. */
static int same_bytes(CURL *c, const char *url, const struct hsmfs_event *ev,
		      struct curl_slist *hdrs, char *why, size_t wlen, struct seen *ret_seen)
{
	struct cmp cm = { ev->fd, 0, ev->file_size, false };
	struct seen s;
	int err;

	prepare(c, url, &s, hdrs);
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, NULL);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, compare_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &cm);
	err = perform(c, &s, why, wlen);
	if (err)
		return -err;
	if (s.status / 100 != 2) {
		/* no answer to the question: not a conflict (gone since, or a 5xx) */
		snprintf(why, wlen, "GET %s to compare: status %ld", url, s.status);
		return s.status == 404 || s.status >= 500 ? -EAGAIN : -EIO;
	}
	if (ret_seen)
		*ret_seen = s;
	return !cm.differs && cm.pos == cm.size;
}

/* WebDAV without create_full_put_path: each collection of url's path, made. */
static void make_collections(CURL *c, const char *url, struct curl_slist *hdrs)
{
	const char *p = strstr(url, "://");
	char *u = strdup(url);
	struct seen s;

	p = p ? strchr(p + 3, '/') : NULL;
	if (!u || !p) {
		free(u);
		return;
	}
	for (char *q = u + (p - url) + 1; (q = strchr(q, '/')); q++) {
		char keep = q[1];

		q[1] = '\0';
		prepare(c, u, &s, hdrs);
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "MKCOL");
		(void)perform(c, &s, NULL, 0); /* 405: there already */
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
		q[1] = keep;
	}
	free(u);
}

static void http_date(int64_t t, char *buf, size_t size)
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, size, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* ---------------------------------------------------------------- file:// */

static void file_version(const struct stat *st, char *buf, size_t size)
{
	snprintf(buf, size, "%lld%09ld-%lld", (long long)st->st_mtim.tv_sec,
		 st->st_mtim.tv_nsec, (long long)st->st_size);
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

static int archive_file(const struct hsmfs_event *ev, uint16_t flags, const char *url,
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

/* ---------------------------------------------------------------- S3 multipart */

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
 * A multipart upload (S3) of the snapshot in parts of part bytes,
 * PARTS_AT_ONCE at a time, each on a handle of its own (a copy of c's
 * settings: the signature, the keys); aborted on any failure, so that
 * no part is left behind.  0 with the object's ETag in out->version, or
 * an errno.
 */
/*
 * The file's mtime and permission bits as the object's metadata
 * (x-amz-meta-mtime in seconds, x-amz-meta-mode in octal with the file
 * type, as rclone writes them): given back by listings (http-list.c).
 */
static struct curl_slist *s3_meta_headers(struct curl_slist *h, const struct hsmfs_event *ev)
{
	char line[64];

	snprintf(line, sizeof(line), "x-amz-meta-mtime: %llu", (unsigned long long)ev->end);
	h = h ? curl_slist_append(h, line) : NULL;
	snprintf(line, sizeof(line), "x-amz-meta-mode: %o",
		 (unsigned)(S_IFREG | (ev->start & 07777)));
	return h ? curl_slist_append(h, line) : NULL;
}

static int s3_multipart(CURL *c, const struct hsmfs_event *ev, const char *url,
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
		snprintf(out->why, sizeof(out->why), "cannot journal the multipart upload of %s: %s",
			 url, strerror(err));
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
			snprintf(p->url, sizeof(p->url), "%s?partNumber=%u&uploadId=%s", url, next + 1,
				 id);
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
				snprintf(out->why, sizeof(out->why), "part %u of %s: %s, status %ld",
					 (unsigned)(uintptr_t)num, url,
					 curl_easy_strerror(m->data.result), status);
				err = status >= 500 || m->data.result != CURLE_OK ? EAGAIN : EACCES;
			} else {
				snprintf(etags[(uintptr_t)num - 1], sizeof(*etags), "%s", p->s.etag);
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
		snprintf(out->why, sizeof(out->why), "CompleteMultipartUpload %s: status %ld%s", url,
			 s.status, b.p && strstr(b.p, "<Error>") ? ", an error in its body" : "");
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

/* ---------------------------------------------------------------- http */

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
					 validator(&s, ev->version)[0] ? validator(&s, ev->version) :
									  "none",
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
		    (!s3 && strcmp(s.lastmod, date)) || (before_etag[0] && !strcmp(s.etag, before_etag))) {
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

/* ---------------------------------------------------------------- names */

/* A request of method to url with extra headers h: 0 with s, or an errno. */

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

/* file://: a directory made with its parents, or removed if empty */
static int dir_file(const char *url, bool made, struct http_archive_out *out)
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
			snprintf(out->why, sizeof(out->why), "%s is not empty at the origin (or not "
				 "a JSON listing): kept", url);
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

/* A request of method to url with extra headers h: 0 with s, or an errno. */
static int request(CURL *c, const char *method, const char *url, struct curl_slist *h,
		   struct seen *s, char *why, size_t wlen)
{
	int err;

	prepare(c, url, s, h);
	if (!strcmp(method, "HEAD"))
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	else
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	err = perform(c, s, why, wlen);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	return err;
}

/* file://: the object's removal or rename (no validator but our own) */
static int name_file(const struct hsmfs_event *ev, const char *from, const char *to,
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
			snprintf(out->version, sizeof(out->version), "%s", validator(&s, ev->version));
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
			snprintf(out->why, sizeof(out->why), "HEAD %s after the move: status %ld", to,
				 s.status);
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
