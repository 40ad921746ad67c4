/*
 * hsmfs-http - the built-in fill hook: fetches missing ranges from
 * HTTP(S), S3-compatible and file:// origins with libcurl.
 *
 *   hsmfs-http [OPTIONS] MOUNTPOINT
 *
 * The main thread receives events; --connections worker threads, each
 * with its own easy handle and one shared connection and DNS cache,
 * fetch the event's hint range with a Range request, write it through
 * the event's descriptor and answer.  The URL of a file is its manifest
 * url, else the mount's origin= (or --origin) joined with its path.
 *
 * Consistency: with a recorded version (an ETag, or a Last-Modified
 * date) the request carries If-Range, so a changed object comes back as
 * a whole 200 instead of a range of other bytes.  Every response, 200
 * or 206, of every attempt, is checked before its first body byte is
 * written: its validator of the recorded version's kind (ETag with an
 * ETag, Last-Modified with a date) must equal it.  One that differs
 * means the object changed: the transfer is aborted, the file marked
 * stale, the event denied with EIO; one without that validator cannot
 * be checked and is refused the same way, without marking the file.
 * Servers that ignore If-Range (some S3-compatible stores answer 206
 * with the new object's bytes) are caught by this.  A 200 to a range
 * request means this server ignored Range for this response: the hint
 * range is cut out of the body; the next request asks a range again.
 * A body shorter or longer than asked is an error, not data.
 *
 * CURLcode stays in this file; answers carry errnos.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "hsmfs/hook.h"
#include "http-list.h"
#include "manifest.h"

#define MAX_CONNECTIONS 64

static struct {
	const char *mountpoint;
	char origin[4096];       /* base URL for files without one */
	unsigned connections;
	unsigned retries;
	long connect_timeout;
	long low_speed_limit, low_speed_time;
	const char *cacert;
	bool insecure;
	const char *proxy;
	const char *netrc_file;
	char *bearer;
	const char *aws_sigv4;
	char *aws_userpwd;
	bool s3;                 /* the origin is a bucket: list with ListObjectsV2 */
	unsigned list_page;      /* ListObjectsV2 max-keys, 0: the server's */
	bool verbose;
} cfg = { .connections = 8, .retries = 4, .connect_timeout = 10,
	  .low_speed_limit = 1, .low_speed_time = 30 };

static struct hsmfs_hook *hook;
static CURLSH *share;
static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

/* the queue of events waiting for a worker */
static struct job {
	struct hsmfs_event ev;
	struct job *next;
} *queue_head, *queue_tail;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static bool done;


static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("hsmfs-http: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void share_lock(CURL *c, curl_lock_data d, curl_lock_access a, void *u)
{
	pthread_mutex_lock(&share_locks[d]);
}

static void share_unlock(CURL *c, curl_lock_data d, void *u)
{
	pthread_mutex_unlock(&share_locks[d]);
}

/* base + "/" + path, each byte outside the unreserved set %-encoded */
static char *join_url(const char *base, const char *path)
{
	size_t bl = strlen(base);
	char *esc = http_escape(path, "/"), *u = NULL;

	if (esc && asprintf(&u, "%s%s%s", base, bl && base[bl - 1] != '/' ? "/" : "", esc) < 0)
		u = NULL;
	free(esc);
	return u;
}

struct xfer {
	const struct hsmfs_event *ev;
	uint64_t lo, hi;         /* the range to fill */
	uint64_t body_start;     /* file offset of the first body byte */
	uint64_t body_pos;       /* body bytes seen */
	uint64_t filled;         /* bytes written inside [lo, hi) */
	bool range_reply;        /* 206 with Content-Range */
	bool overflow;           /* more body than asked */
	int io_error;            /* errno of a failed pwrite */
	bool checked;            /* the response's validator was checked */
	int version_error;       /* EIO: changed (ESTALE) or not checkable */
	bool changed;            /* the validator differs: the object changed */
	char validator[1024];    /* ETag, else Last-Modified, of the reply */
	char etag[1024], lastmod[1024];
	double last_progress;
	bool is_file;            /* file:// has no validators */
	long status;             /* of the response being received */
	char errbody[2048];      /* the start of an error response's body */
	size_t nerr;
	uint64_t *received;      /* bytes received for the event, all attempts */
	uint64_t reported;       /* *received as last sent in PROGRESS */
};

static void trim_copy(char *dst, size_t size, const char *v, size_t n)
{
	while (n && (*v == ' ' || *v == '\t'))
		v++, n--;
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	snprintf(dst, size, "%.*s", (int)n, v);
}

static size_t on_header(char *b, size_t sz, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = sz * n;
	unsigned long long a, e;

	if (len > 6 && !strncasecmp(b, "HTTP/", 5)) {
		/* a new response (after a redirect or 100): start over */
		x->range_reply = false;
		x->checked = false;
		x->status = 0;
		x->nerr = 0;
		x->errbody[0] = '\0';
		sscanf(b + 5, "%*s %ld", &x->status);
		x->etag[0] = x->lastmod[0] = '\0';
	} else if (len > 14 && !strncasecmp(b, "Content-Range:", 14)) {
		if (sscanf(b + 14, " bytes %llu-%llu", &a, &e) == 2) {
			x->range_reply = true;
			x->body_start = a;
		}
	} else if (len > 5 && !strncasecmp(b, "ETag:", 5)) {
		trim_copy(x->etag, sizeof(x->etag), b + 5, len - 5);
	} else if (len > 14 && !strncasecmp(b, "Last-Modified:", 14)) {
		trim_copy(x->lastmod, sizeof(x->lastmod), b + 14, len - 14);
	}
	return len;
}

/*
 * Is the recorded version an HTTP date (then it is compared with
 * Last-Modified) rather than an ETag ("..." or W/"...")?
 */
static bool version_is_date(const char *v)
{
	return v[0] != '"' && strncmp(v, "W/", 2) && strstr(v, "GMT");
}

/*
 * The response's headers are complete: check its validator against the
 * recorded version before any byte of it is written.  false: abort.
 */
static bool check_version(struct xfer *x)
{
	const char *want = x->ev->version, *got;

	x->checked = true;
	/* an error's body is not the object's: the status decides it */
	if (!want[0] || x->is_file || x->status < 200 || x->status > 299)
		return true;
	got = version_is_date(want) ? x->lastmod : x->etag;
	if (!got[0]) {
		x->version_error = 1; /* nothing to compare: not checkable */
		return false;
	}
	if (strcmp(got, want)) {
		x->changed = true;
		return false;
	}
	return true;
}

static size_t on_body(char *b, size_t sz, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = sz * n;

	if (!x->is_file && (x->status < 200 || x->status > 299)) {
		/* an error's body explains it (S3's XML); it is never data */
		size_t room = sizeof(x->errbody) - 1 - x->nerr, take = len < room ? len : room;

		memcpy(x->errbody + x->nerr, b, take);
		x->nerr += take;
		x->errbody[x->nerr] = '\0';
		return len;
	}
	if (!x->checked && !check_version(x))
		return 0; /* aborts the transfer: not one byte of another version */
	uint64_t off = x->body_start + x->body_pos;
	uint64_t s = off > x->lo ? off : x->lo;
	uint64_t e = off + len < x->hi ? off + len : x->hi;

	x->body_pos += len;
	*x->received += len;
	if (x->range_reply && off + len > x->hi)
		x->overflow = true;
	if (s < e) {
		for (uint64_t p = s; p < e;) {
			/* a short write goes on; its error (ENOSPC) ends the fill */
			ssize_t w = pwrite(x->ev->fd, b + (p - off), e - p, p);

			if (w <= 0) {
				x->io_error = w < 0 ? errno : EIO;
				return 0; /* aborts the transfer */
			}
			p += w;
		}
		x->filled += e - s;
	}
	return len;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
		       curl_off_t ultotal, curl_off_t ulnow)
{
	struct xfer *x = arg;
	struct timespec ts;
	double t;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	t = ts.tv_sec + ts.tv_nsec / 1e9;
	/*
	 * PROGRESS means bytes advanced: a stalled origin sends none, so the
	 * event's timeout (and the low-speed limit) bound the wait.
	 */
	if (t - x->last_progress >= 1.0 && *x->received > x->reported) {
		x->last_progress = t;
		x->reported = *x->received;
		hsmfs_hook_progress(hook, x->ev->id, x->reported);
	}
	return 0;
}

static void setup_handle(CURL *c)
{
	curl_easy_setopt(c, CURLOPT_SHARE, share);
	/*
	 * The shared connection cache keeps as many idle connections as a
	 * handle's MAXCONNECTS (5 by default): with more workers than that,
	 * every request past the fifth closed a connection and the next
	 * opened one (a round trip more each: measured through wanproxy.py).
	 */
	curl_easy_setopt(c, CURLOPT_MAXCONNECTS, (long)cfg.connections * 2);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, cfg.connect_timeout);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, cfg.low_speed_limit);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, cfg.low_speed_time);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	/* fewer, larger writes into the store: chunks are a MiB or more */
	curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "hsmfs-http/" HSMFS_VERSION);
	if (cfg.cacert)
		curl_easy_setopt(c, CURLOPT_CAINFO, cfg.cacert);
	if (cfg.insecure) {
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (cfg.proxy)
		curl_easy_setopt(c, CURLOPT_PROXY, cfg.proxy);
	if (cfg.netrc_file) {
		curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_OPTIONAL);
		curl_easy_setopt(c, CURLOPT_NETRC_FILE, cfg.netrc_file);
	}
	if (cfg.bearer) {
		curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
		curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, cfg.bearer);
	}
	if (cfg.aws_sigv4) {
		curl_easy_setopt(c, CURLOPT_AWS_SIGV4, cfg.aws_sigv4);
		curl_easy_setopt(c, CURLOPT_USERPWD, cfg.aws_userpwd);
	}
	if (cfg.verbose)
		curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
}

static bool transient(CURLcode rc)
{
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

/* Fetch one event's range; returns 0 (allowed) or an errno to deny. */
static int fetch(CURL *c, const struct hsmfs_event *ev, uint64_t *ret_lo,
		 uint64_t *ret_hi)
{
	char range[64], ifrange[1100], *url;
	struct curl_slist *hdrs = NULL;
	bool is_file;
	int err = EIO;

	url = ev->origin[0] ? strdup(ev->origin) :
	      cfg.origin[0] ? join_url(cfg.origin, ev->path) : NULL;
	if (!url) {
		logf_("'%s': no url and no origin to fetch it from", ev->path);
		return EIO;
	}
	is_file = !strncmp(url, "file:", 5);
	uint64_t received = 0, reported = 0;

	for (unsigned attempt = 0;; attempt++) {
		/* file:// sends the range with no Content-Range: it starts at lo */
		struct xfer x = { .ev = ev, .lo = ev->hint_start, .hi = ev->hint_end,
				  .body_start = is_file ? ev->hint_start : 0, .is_file = is_file,
				  .received = &received, .reported = reported };
		long code = 0;
		CURLcode rc;

		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
		/* every request asks its range: a server's 200 is per response */
		snprintf(range, sizeof(range), "%llu-%llu",
			 (unsigned long long)x.lo, (unsigned long long)x.hi - 1);
		curl_easy_setopt(c, CURLOPT_RANGE, range);
		curl_slist_free_all(hdrs);
		hdrs = NULL;
		if (ev->version[0] && !is_file) {
			snprintf(ifrange, sizeof(ifrange), "If-Range: %s", ev->version);
			hdrs = curl_slist_append(hdrs, ifrange);
		}
		if (cfg.aws_sigv4 && !is_file)
			hdrs = curl_slist_append(hdrs, HTTP_S3_EMPTY_PAYLOAD);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		if (x.io_error) {
			logf_("'%s': writing the store: %s", ev->path, strerror(x.io_error));
			err = x.io_error == ENOSPC ? ENOSPC : EIO;
			break;
		}
		if (x.changed) {
			char p[8300];

			logf_("'%s': origin changed (HTTP %ld with %s %s, recorded %s); refusing to mix versions",
			      ev->path, code, version_is_date(ev->version) ? "Last-Modified" : "ETag",
			      version_is_date(ev->version) ? x.lastmod : x.etag, ev->version);
			/* status shows it stale until it is imported again */
			snprintf(p, sizeof(p), "%s/%s", cfg.mountpoint, ev->path);
			setxattr(p, "user.hsmfs.stale", "1", 1, 0);
			err = EIO;
			break;
		}
		if (x.version_error) {
			logf_("'%s': HTTP %ld has no %s to check the recorded version %s against; refused",
			      ev->path, code, version_is_date(ev->version) ? "Last-Modified" : "ETag",
			      ev->version);
			err = EIO;
			break;
		}
		if (rc != CURLE_OK || code >= 500 || code == 429) {
			if ((transient(rc) || code >= 500 || code == 429) &&
			    attempt < cfg.retries) {
				unsigned ms = 200u << (attempt < 6 ? attempt : 6);

				logf_("'%s': %s, retry %u of %u in %u ms", ev->path,
				      rc != CURLE_OK ? curl_easy_strerror(rc) : "server error",
				      attempt + 1, cfg.retries, ms);
				reported = x.reported;
				usleep(ms * 1000);
				continue;
			}
			logf_("'%s': %s (HTTP %ld)", ev->path,
			      rc != CURLE_OK ? curl_easy_strerror(rc) : "server error", code);
			/* a stalled origin (the low-speed limit) is a timeout, not data */
			err = rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO;
			break;
		}
		if (is_file && code == 0) {
			/* file:// honours ranges: the body was exactly the range */
		} else if (code == 404 || code == 410) {
			logf_("'%s': missing at origin (HTTP %ld)", ev->path, code);
			err = EIO;
			break;
		} else if (code == 401 || code == 403) {
			char why[600];

			manifest_s3_error(x.errbody, why, sizeof(why));
			logf_("'%s': origin refused access (HTTP %ld)%s", ev->path, code, why);
			err = EACCES;
			break;
		} else if (code == 200) {
			/* the server ignored Range (its validator was checked): cut */
			static atomic_bool said;

			if (!atomic_exchange(&said, true)) {
				logf_("origin of '%s' ignores Range requests (HTTP 200): the range is cut "
				      "out of the whole body; every request still asks for its range",
				      ev->path);
			}
		} else if (code != 206) {
			logf_("'%s': unexpected HTTP %ld", ev->path, code);
			err = EIO;
			break;
		}
		if (x.overflow || x.filled != x.hi - x.lo) {
			logf_("'%s': body of %llu bytes does not fill [%llu, %llu)", ev->path,
			      (unsigned long long)x.body_pos, (unsigned long long)x.lo,
			      (unsigned long long)x.hi);
			err = EIO;
			break;
		}
		*ret_lo = x.lo;
		*ret_hi = x.hi;
		err = 0;
		break;
	}
	curl_slist_free_all(hdrs);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	free(url);
	return err;
}

static void *worker(void *arg)
{
	CURL *c = curl_easy_init();

	if (!c)
		return NULL;
	setup_handle(c);
	for (;;) {
		struct job *j;
		uint64_t lo = 0, hi = 0;
		int err;

		pthread_mutex_lock(&qlock);
		while (!queue_head && !done)
			pthread_cond_wait(&qcond, &qlock);
		j = queue_head;
		if (j) {
			queue_head = j->next;
			if (!queue_head)
				queue_tail = NULL;
		}
		pthread_mutex_unlock(&qlock);
		if (!j)
			break;
		if (j->ev.fd >= 0 && (j->ev.type == HSMFS_EV_PRE_DIR ||
				      j->ev.type == HSMFS_EV_PRE_LOOKUP)) {
			char why[512];
			CURL *lc = curl_easy_init(); /* its own callbacks; same connections */

			if (lc)
				setup_handle(lc);
			if (!lc)
				err = ENOMEM;
			else if (j->ev.type == HSMFS_EV_PRE_LOOKUP)
				err = http_lookup(lc, &j->ev, cfg.origin, cfg.s3, why, sizeof(why));
			else
				err = http_list(lc, &j->ev, cfg.origin, cfg.s3, cfg.list_page, why,
						sizeof(why));
			if (err)
				logf_("%s '/%s': %s", j->ev.type == HSMFS_EV_PRE_LOOKUP ? "lookup of" :
				      "listing", j->ev.path, why[0] ? why : strerror(err));
			curl_easy_cleanup(lc);
		} else {
			err = j->ev.fd >= 0 ? fetch(c, &j->ev, &lo, &hi) : EBADF;
		}
		if (j->ev.fd >= 0)
			close(j->ev.fd);
		if (err)
			hsmfs_hook_deny(hook, j->ev.id, err);
		else
			hsmfs_hook_allow(hook, j->ev.id, lo, hi, 0);
		free(j);
	}
	curl_easy_cleanup(c);
	return NULL;
}

static char *read_secret(const char *path)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return strdup(buf);
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: hsmfs-http [OPTIONS] MOUNTPOINT\n"
"  --origin URL          base URL for files imported without a url\n"
"                        (default: the mount's origin= option)\n"
"  --connections N       parallel transfers (default 8)\n"
"  --retries N           retries of resets, timeouts and 5xx (default 4)\n"
"  --connect-timeout S   (default 10)\n"
"  --low-speed-limit B --low-speed-time S   abort transfers slower than B\n"
"                        bytes/s for S seconds (default 1 and 30)\n"
"  --cacert FILE         trust this CA bundle\n"
"  --insecure            do not verify TLS certificates\n"
"  --proxy URL           (default: the usual *_proxy environment variables)\n"
"  --netrc-file FILE     credentials by host\n"
"  --bearer-file FILE    send the token in FILE as a bearer token\n"
"  --aws-sigv4 P:R:S     sign requests (S3 SigV4); keys from --aws-keys-file\n"
"                        (two lines: key id, secret) or AWS_ACCESS_KEY_ID and\n"
"                        AWS_SECRET_ACCESS_KEY\n"
"  --s3                  the origin is an S3 bucket's URL: list directories\n"
"                        with ListObjectsV2 (implied by --aws-sigv4)\n"
"  --page-size N         keys a ListObjectsV2 page asks for (default: the\n"
"                        server's, 1000 on S3)\n"
"  --verbose             log every transfer\n"
"See hsmfs-http(1).\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "origin", required_argument, NULL, 'o' },
		{ "connections", required_argument, NULL, 'c' },
		{ "retries", required_argument, NULL, 'r' },
		{ "connect-timeout", required_argument, NULL, 't' },
		{ "low-speed-limit", required_argument, NULL, 'l' },
		{ "low-speed-time", required_argument, NULL, 'L' },
		{ "cacert", required_argument, NULL, 'C' },
		{ "insecure", no_argument, NULL, 'k' },
		{ "proxy", required_argument, NULL, 'x' },
		{ "netrc-file", required_argument, NULL, 'n' },
		{ "bearer-file", required_argument, NULL, 'b' },
		{ "aws-sigv4", required_argument, NULL, 's' },
		{ "aws-keys-file", required_argument, NULL, 'K' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "s3", no_argument, NULL, '3' },
		{ "page-size", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *keys_file = NULL;
	pthread_t threads[MAX_CONNECTIONS];
	struct hsmfs_event ev;
	int opt, res;

	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 'o': snprintf(cfg.origin, sizeof(cfg.origin), "%s", optarg); break;
		case 'c': cfg.connections = atoi(optarg); break;
		case 'r': cfg.retries = atoi(optarg); break;
		case 't': cfg.connect_timeout = atol(optarg); break;
		case 'l': cfg.low_speed_limit = atol(optarg); break;
		case 'L': cfg.low_speed_time = atol(optarg); break;
		case 'C': cfg.cacert = optarg; break;
		case 'k': cfg.insecure = true; break;
		case 'x': cfg.proxy = optarg; break;
		case 'n': cfg.netrc_file = optarg; break;
		case 'b':
			cfg.bearer = read_secret(optarg);
			if (!cfg.bearer) {
				logf_("cannot read bearer token file '%s'", optarg);
				return 1;
			}
			break;
		case 's': cfg.aws_sigv4 = optarg; cfg.s3 = true; break;
		case 'K': keys_file = optarg; break;
		case 'v': cfg.verbose = true; break;
		case '3': cfg.s3 = true; break;
		case 'P': cfg.list_page = atoi(optarg) > 0 ? atoi(optarg) : 0; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 1;
		}
	}
	if (optind != argc - 1 || cfg.connections < 1 ||
	    cfg.connections > MAX_CONNECTIONS) {
		usage(stderr);
		return 1;
	}
	cfg.mountpoint = argv[optind];
	if (cfg.aws_sigv4) {
		char *id = NULL, *secret = NULL;

		if (keys_file) {
			char *all = read_secret(keys_file), *nl = all ? strchr(all, '\n') : NULL;

			if (nl) {
				*nl = '\0';
				id = strdup(all);
				secret = strdup(nl + 1);
			}
			free(all);
		} else if (getenv("AWS_ACCESS_KEY_ID") && getenv("AWS_SECRET_ACCESS_KEY")) {
			id = strdup(getenv("AWS_ACCESS_KEY_ID"));
			secret = strdup(getenv("AWS_SECRET_ACCESS_KEY"));
		}
		if (!id || !secret || asprintf(&cfg.aws_userpwd, "%s:%s", id, secret) < 0) {
			logf_("--aws-sigv4 needs keys: --aws-keys-file, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
			return 1;
		}
		free(id);
		free(secret);
	}
	if (!cfg.origin[0]) {
		ssize_t n = getxattr(cfg.mountpoint, "user.hsmfs.origin", cfg.origin,
				     sizeof(cfg.origin) - 1);

		cfg.origin[n > 0 ? n : 0] = '\0';
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		logf_("cannot initialise libcurl");
		return 1;
	}
	share = curl_share_init();
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&share_locks[i], NULL);
	curl_share_setopt(share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);

	res = hsmfs_hook_connect(cfg.mountpoint, HSMFS_KIND_FILL,
				 HSMFS_MASK(HSMFS_EV_PRE_ACCESS) | HSMFS_MASK(HSMFS_EV_PRE_DIR) |
				 HSMFS_MASK(HSMFS_EV_PRE_LOOKUP),
				 "hsmfs-http", NULL, &hook);
	if (res) {
		logf_("cannot connect to '%s': %s", cfg.mountpoint, strerror(-res));
		return 1;
	}
	for (unsigned i = 0; i < cfg.connections; i++)
		pthread_create(&threads[i], NULL, worker, NULL);
	while ((res = hsmfs_hook_next(hook, &ev)) == 0) {
		struct job *j;

		if (ev.type != HSMFS_EV_PRE_ACCESS && ev.type != HSMFS_EV_PRE_DIR &&
		    ev.type != HSMFS_EV_PRE_LOOKUP) {
			if (ev.fd >= 0)
				close(ev.fd);
			continue; /* CANCEL: the transfer finishes; its answer is ignored */
		}
		j = malloc(sizeof(*j));
		if (!j) {
			hsmfs_hook_deny(hook, ev.id, EAGAIN);
			if (ev.fd >= 0)
				close(ev.fd);
			continue;
		}
		j->ev = ev;
		j->next = NULL;
		pthread_mutex_lock(&qlock);
		if (queue_tail)
			queue_tail->next = j;
		else
			queue_head = j;
		queue_tail = j;
		pthread_cond_signal(&qcond);
		pthread_mutex_unlock(&qlock);
	}
	pthread_mutex_lock(&qlock);
	done = true;
	pthread_cond_broadcast(&qcond);
	pthread_mutex_unlock(&qlock);
	for (unsigned i = 0; i < cfg.connections; i++)
		pthread_join(threads[i], NULL);
	hsmfs_hook_close(hook);
	curl_share_cleanup(share);
	curl_global_cleanup();
	free(cfg.bearer);
	free(cfg.aws_userpwd);
	return res == -ECONNRESET ? 0 : 1;
}
