/*
 * hsmfs-http - the built-in fill hook: fetches missing ranges from
 * HTTP(S), S3-compatible and file:// origins with libcurl.
 *
 *   hsmfs-http [OPTIONS] MOUNTPOINT
 *
 * Threads.  One fetcher thread receives the events (the hook's socket
 * is one more descriptor its poll waits on: an event starts its request
 * with no thread to wake first) and runs every fill through one libcurl
 * multi handle: at most --connections transfers at once, each with the
 * event's hint range as a Range request, written through the event's
 * descriptor as it arrives (gathered into writes of up to 256 KiB), then
 * answered.
 * A reader's fill goes first; the mount's own (pid 0) take at most
 * --connections - 1 transfers (see struct jobq).  The multi handle keeps
 * the connections: an origin that speaks HTTP/2 (https, by ALPN) carries
 * all of them as streams of one connection, others get up to
 * --connections kept-alive HTTP/1.1 connections.  A retry waits in its slot without holding the
 * thread.  Listings and lookups (PRE_DIR, PRE_LOOKUP: several requests
 * each, in http-list.c) run on --connections lister threads of their own,
 * with blocking easy handles and a connection cache shared among them.
 * The URL of a file is its manifest url, else the mount's origin= (or
 * --origin) joined with its path.
 *
 * Consistency: with a recorded version (an ETag, or a Last-Modified
 * date) the request carries If-Range, so a changed object comes back as
 * a whole 200 instead of a range of other bytes.  Every response, of
 * every attempt, is judged once its headers are complete and before its
 * first body byte is kept, by the one rule of http-answer.h (the range
 * asked, the recorded size and version, no coding).  A response that
 * proves a change aborts the transfer, marks the file stale and denies
 * the event with EIO; one that proves nothing is refused the same way,
 * without marking the file.  A 200 to a range request means this server
 * ignored Range for this response: the hint range is cut out of the
 * body; the next request asks a range again.  A body shorter or longer
 * than it said is an error, not data.
 *
 * CURLcode stays in this file; answers carry errnos.
 */
#include <assert.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "hsmfs/hook.h"
#include "http-answer.h"
#include "http-archive.h"
#include "http-journal.h"
#include "http-list.h"
#include "http-proxy.h"
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
	const char *proxy;       /* a chain (http-proxy.h), or NULL: curl's *_proxy */
	uint64_t align;          /* requests of whole aligned blocks this size, 0: not */
	bool align_set;
	unsigned proxy_retry, proxy_reset; /* seconds */
	unsigned proxy_timeout;  /* a proxy silent this long failed (seconds) */
	const char *netrc_file;
	char *bearer;
	const char *aws_sigv4;
	char *aws_userpwd;
	bool s3;                 /* the origin is a bucket: list with ListObjectsV2 */
	unsigned list_page;      /* ListObjectsV2 max-keys, 0: the server's */
	bool no_s3_meta;         /* listings keep ListObjectsV2's times, HEAD no object */
	uint64_t part_size;      /* S3 multipart uploads of files over this */
	bool verbose;
	bool honoured;           /* the origin refuses a failing If-Match (412) */
	uint64_t read_back_max;  /* conditions ignored: read back objects up to this */
} cfg = { .connections = 8, .retries = 4, .connect_timeout = 10, .part_size = 64 << 20,
	  .read_back_max = 16 << 20,
	  .low_speed_limit = 1024, .low_speed_time = 30,
	  .proxy_retry = 60, .proxy_reset = 300, .proxy_timeout = 10 };

static struct hsmfs_hook *hook;
static struct proxy_chain *chain; /* --proxy's, or NULL */
static CURLSH *share;
static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

/*
 * Events waiting: fills for the fetcher, listings for the listers.  A
 * fill no process caused (pid 0: the mount's sibling prefetch, the rest
 * of a chunk after a reader's part) waits in later: the fetcher takes
 * a reader's fill first, and keeps a slot that only a reader's fill may
 * take, so that one never waits for the mount's guesses to finish.
 */
struct job {
	struct hsmfs_event ev;
	uint16_t flags;   /* the event's (HSMFS_EVENT_OVERWRITE) */
	struct job *next;
};
struct jobq {
	struct job *head, *tail;
};
static struct jobq fills, later, lists;  /* under qlock */
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER; /* lists grew, or done */
static bool done;                 /* no more events: finish what is queued */
static CURLM *multi;              /* the fetcher's */
static int hook_end;              /* hsmfs_hook_next()'s error that ended the events */


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
	uint64_t req_lo, req_hi; /* the range asked: [lo, hi) widened to --align blocks */
	uint64_t body_start;     /* file offset of the first body byte */
	uint64_t body_len;       /* body bytes the answer says, UINT64_MAX: not said */
	uint64_t body_pos;       /* body bytes seen */
	uint64_t filled;         /* bytes written inside [lo, hi) */
	bool overflow;           /* more body than asked */
	bool cut;                /* a whole object's 200 stopped once the range was in */
	int io_error;            /* errno of a failed pwrite */
	struct http_answer ans;  /* the headers of the response being received */
	bool checked;            /* ans was judged: verdict, why */
	enum http_verdict verdict;
	char why[HTTP_FIELD + 200];
	double last_progress;
	bool is_file;            /* file:// has no headers: its body is the range */
	char errbody[2048];      /* the start of an error response's body */
	size_t nerr;
	bool told;               /* FILLED sent for this attempt */
	bool hit;                /* the proxy answered from its cache (X-Cache) */
	uint64_t *received;      /* bytes received for the event, all attempts */
	uint64_t reported;       /* *received as last sent in PROGRESS */
	/*
	 * Body bytes gathered for one pwrite: libcurl hands the body over
	 * in pieces of at most 16 KiB, and each write(2) to the staging
	 * file has its own cost (the file's times, a journal handle).
	 */
	char *wbuf;              /* WBUF bytes, the slot's */
	size_t wlen;             /* gathered, for [woff, woff + wlen) */
	uint64_t woff;
};

#define WBUF (256u << 10)

/* Write what x gathered.  false (x->io_error set) on a failed write. */
static bool flush_body(struct xfer *x)
{
	for (size_t p = 0; p < x->wlen;) {
		/* a short write goes on; its error (ENOSPC) ends the fill */
		ssize_t w = pwrite(x->ev->fd, x->wbuf + p, x->wlen - p, (off_t)(x->woff + p));

		if (w <= 0) {
			x->io_error = w < 0 ? errno : EIO;
			x->wlen = 0;
			return false;
		}
		p += (size_t)w;
	}
	x->woff += x->wlen;
	x->wlen = 0;
	return true;
}

/*
 * The response's headers are complete: judge them (http-answer.h)
 * before any byte of its body is kept.
 */
static void judge(struct xfer *x)
{
	struct http_ask ask = { .lo = x->req_lo, .hi = x->req_hi, .size = x->ev->file_size,
				.version = x->ev->version };

	x->checked = true;
	x->why[0] = '\0';
	if (x->is_file) {
		/* file:// sends exactly the range asked */
		x->verdict = HTTP_KEEP;
		x->body_start = x->lo;
		x->body_len = x->hi - x->lo;
		return;
	}
	x->verdict = http_answer_check(&ask, &x->ans, &x->body_start, &x->body_len, x->why,
				       sizeof(x->why));
}

/*
 * Is header line b a cache's "served from my copy": squid's "X-Cache: HIT
 * from NAME", nginx's "X-Cache-Status: HIT" (as doc/examples/ has it
 * add), Varnish's and CDNs' "X-Cache: HIT"?  A collapsed request squid
 * joined to another's fetch says MISS: such bytes count as the origin's.
 */
static bool cache_hit(const char *b, size_t len)
{
	size_t n;

	if (len > 8 && !strncasecmp(b, "x-cache:", 8))
		n = 8;
	else if (len > 15 && !strncasecmp(b, "x-cache-status:", 15))
		n = 15;
	else
		return false;
	while (n < len && (b[n] == ' ' || b[n] == '\t'))
		n++;
	return len - n >= 3 && !strncasecmp(b + n, "HIT", 3);
}

static size_t on_header(char *b, size_t sz, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = sz * n;

	if (len > 6 && !strncasecmp(b, "HTTP/", 5)) {
		/* a new response (after a redirect or 100): start over */
		x->checked = false;
		x->nerr = 0;
		x->errbody[0] = '\0';
	}
	http_answer_header(&x->ans, b, len);
	if (cache_hit(b, len))
		x->hit = true;
	if (len <= 2 && (len == 0 || b[0] == '\r' || b[0] == '\n'))
		judge(x); /* the blank line: the headers are complete */
	return len;
}

/*
 * Once the bytes a reader waits for are in, and more of the range is to
 * come, write them and say so (FILLED): the reader goes on now, not
 * when the whole range is in.  Kept bytes run on from lo, so [lo, woff)
 * is written.  A mount older than protocol version 5 refuses nothing:
 * the call sends nothing there.
 */
static void tell_filled(struct xfer *x)
{
	const struct hsmfs_event *ev = x->ev;
	uint64_t upto = x->woff + x->wlen;

	if (x->told || !ev->pid || x->lo > ev->start || upto < ev->end ||
	    (upto >= x->hi && x->req_hi == x->hi) || x->body_len == UINT64_MAX)
		return;
	x->told = true;
	if (flush_body(x))
		hsmfs_hook_filled(hook, ev->id, x->lo, x->woff);
}

static size_t on_body(char *b, size_t sz, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = sz * n;

	if (!x->checked)
		judge(x);
	if (x->verdict == HTTP_NOT_DATA) {
		/* an error's body explains it (S3's XML); it is never data */
		size_t room = sizeof(x->errbody) - 1 - x->nerr, take = len < room ? len : room;

		memcpy(x->errbody + x->nerr, b, take);
		x->nerr += take;
		x->errbody[x->nerr] = '\0';
		return len;
	}
	if (x->verdict != HTTP_KEEP)
		return 0; /* aborts the transfer: not one byte it does not prove */
	uint64_t off = x->body_start + x->body_pos;
	uint64_t s = off > x->lo ? off : x->lo;
	uint64_t e = off + len < x->hi ? off + len : x->hi;

	x->body_pos += len;
	*x->received += len;
	if (x->body_pos > x->body_len)
		x->overflow = true;
	if (s < e) {
		/* kept bytes are contiguous: each piece goes on where the last ended */
		assert(!x->wlen || x->woff + x->wlen == s);
		if (!x->wlen)
			x->woff = s;
		for (uint64_t p = s; p < e;) {
			size_t take = WBUF - x->wlen < e - p ? WBUF - x->wlen : (size_t)(e - p);

			memcpy(x->wbuf + x->wlen, b + (p - off), take);
			x->wlen += take;
			p += take;
			if (x->wlen == WBUF && !flush_body(x))
				return 0;
		}
		x->filled += e - s;
		tell_filled(x);
	}
	if (x->filled == x->hi - x->lo && x->body_len != UINT64_MAX &&
	    x->body_start + x->body_len > x->req_hi) {
		/* a 200 of a proven length: the rest is not wanted, stop here */
		x->cut = true;
		return 0;
	}
	return len;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
		       curl_off_t ultotal, curl_off_t ulnow)
{
	struct xfer *x = arg;
	double t = mono_s();

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

/* A lister's handle (shared: the listers' connection cache) or a fill's. */
static void setup_handle(CURL *c, bool shared)
{
	if (shared) {
		curl_easy_setopt(c, CURLOPT_SHARE, share);
		/*
		 * The shared connection cache keeps as many idle connections
		 * as a handle's MAXCONNECTS (5 by default): with more threads
		 * than that, every request past the fifth closed a connection
		 * and the next opened one (a round trip more each: measured
		 * through wanproxy.py).
		 */
		curl_easy_setopt(c, CURLOPT_MAXCONNECTS, (long)cfg.connections * 2);
	} else {
		/* a new transfer waits for a connection that may multiplex it */
		curl_easy_setopt(c, CURLOPT_PIPEWAIT, 1L);
	}
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
	if (chain)
		/*
		 * the chain's choice now, with the usual bounds (an upload's
		 * answer may take a while); fills, listings and lookups set
		 * their own member and its bounds (use_member())
		 */
		curl_easy_setopt(c, CURLOPT_PROXY, proxy_url(chain, proxy_pick(chain, 0, mono_ms())));
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

/*
 * Did a request through member i of the chain fail at the transport, so
 * that the member is skipped and the request goes on through the next?
 * Not reached, the connection broken or silent (transient()), or a
 * proxy's own 502, 503 or 504: it could not get an answer from the
 * origin, and the next member may.  DIRECT's 5xx is the origin's answer.
 */
static bool proxy_failed(int i, CURLcode rc, long code)
{
	if (rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_PROXY || transient(rc))
		return true;
	return rc == CURLE_OK && proxy_url(chain, i)[0] && (code == 502 || code == 503 || code == 504);
}

/*
 * Send c's next request through member i: its proxy, and through a proxy
 * its bounds.  A proxy that does not take the connection, or sends
 * nothing, for --proxy-timeout seconds has failed: the next member takes
 * the request well within the mount's timeout= (a hung proxy would
 * otherwise hold it for the low-speed time, 30 s, and the read fail).
 */
static void use_member(CURL *c, int i)
{
	const char *url = proxy_url(chain, i);
	long t = cfg.proxy_timeout;

	curl_easy_setopt(c, CURLOPT_PROXY, url);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT,
			 url[0] && t < cfg.connect_timeout ? t : cfg.connect_timeout);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
			 url[0] && t < cfg.low_speed_time ? t : cfg.low_speed_time);
}

/* A request through member i ended (ok: not proxy_failed()): counted, a failure said once. */
static void proxy_end(int i, bool ok, uint64_t bytes, uint64_t hit, CURLcode rc, long code)
{
	if (!proxy_done(chain, i, ok, bytes, hit, (uint64_t)mono_ms()) || ok)
		return;
	logf_("proxy %s failed (%s): skipped for %u s", proxy_url(chain, i)[0] ?
	      proxy_url(chain, i) : "DIRECT", rc != CURLE_OK ? curl_easy_strerror(rc) :
	      code == 502 ? "HTTP 502" : code == 503 ? "HTTP 503" : "HTTP 504", cfg.proxy_retry);
}

/*
 * The listers' requests (http-list.h's http_perform) through the chain:
 * through each member in turn until one does not fail at the transport.
 */
static CURLcode chain_perform(CURL *c)
{
	CURLcode rc = CURLE_COULDNT_CONNECT;
	uint64_t tried = 0;

	for (;;) {
		int i = proxy_pick(chain, tried, (uint64_t)mono_ms());
		curl_off_t got = 0;
		long code = 0;
		bool failed;

		if (i < 0)
			return rc; /* each member failed it: the last failure */
		use_member(c, i);
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		curl_easy_getinfo(c, CURLINFO_SIZE_DOWNLOAD_T, &got);
		failed = proxy_failed(i, rc, code);
		proxy_end(i, !failed, (uint64_t)got, 0, rc, code);
		if (!failed)
			return rc;
		tried |= 1ull << i;
	}
}

/*
 * One fill in the fetcher: its transfer (or the wait before a retry).
 * Only the fetcher thread touches a slot.
 */
struct slot {
	CURL *c;
	struct job *j;             /* NULL: free */
	char *url;
	bool is_file;
	unsigned attempt;
	uint64_t received;         /* bytes received for the event, all attempts */
	uint64_t reported;         /* received as last sent in PROGRESS */
	uint64_t retry_at;         /* monotonic ms of the next attempt, 0: none */
	int proxy;                 /* the chain's member of this attempt */
	uint64_t tried;            /* members that failed it, this round */
	bool failover;             /* the next attempt goes through another member */
	struct curl_slist *hdrs;
	char range[64], ifrange[1100];
	bool later;                /* its job came from later */
	struct xfer x;
	char *wbuf;                /* x.wbuf */
};

static struct slot slots[MAX_CONNECTIONS];

/* Start an attempt at s's range. */
static void attempt(struct slot *s)
{
	const struct hsmfs_event *ev = &s->j->ev;
	CURL *c = s->c;

	memset(&s->x, 0, sizeof(s->x));
	s->x.wbuf = s->wbuf;
	s->x.ev = ev;
	s->x.lo = ev->hint_start;
	s->x.hi = ev->hint_end;
	s->x.req_lo = s->x.lo;
	s->x.req_hi = s->x.hi;
	if (cfg.align && !s->is_file) {
		/*
		 * Whole aligned blocks: every host asks a tier the same
		 * ranges.  Only [lo, hi) is written (the rest may be present,
		 * or a user's); the reader goes at FILLED once its bytes are in.
		 */
		s->x.req_lo = s->x.lo / cfg.align * cfg.align;
		s->x.req_hi = (s->x.hi + cfg.align - 1) / cfg.align * cfg.align;
		if (s->x.req_hi > ev->file_size)
			s->x.req_hi = ev->file_size;
	}
	s->x.is_file = s->is_file;
	s->x.received = &s->received;
	s->x.reported = s->reported;
	if (chain) {
		s->proxy = proxy_pick(chain, s->tried, (uint64_t)mono_ms());
		if (s->proxy < 0) {
			s->tried = 0; /* a new round: each member again */
			s->proxy = proxy_pick(chain, 0, (uint64_t)mono_ms());
		}
		use_member(c, s->proxy);
	}
	curl_easy_setopt(c, CURLOPT_URL, s->url);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &s->x);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s->x);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s->x);
	/* every request asks its range: a server's 200 is per response */
	snprintf(s->range, sizeof(s->range), "%llu-%llu",
		 (unsigned long long)s->x.req_lo, (unsigned long long)s->x.req_hi - 1);
	curl_easy_setopt(c, CURLOPT_RANGE, s->range);
	curl_slist_free_all(s->hdrs);
	s->hdrs = NULL;
	if (ev->version[0] && !s->is_file) {
		snprintf(s->ifrange, sizeof(s->ifrange), "If-Range: %s", ev->version);
		s->hdrs = curl_slist_append(s->hdrs, s->ifrange);
	}
	if (!s->is_file)
		s->hdrs = curl_slist_append(s->hdrs, HTTP_IDENTITY);
	if (cfg.aws_sigv4 && !s->is_file)
		s->hdrs = curl_slist_append(s->hdrs, HTTP_S3_EMPTY_PAYLOAD);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, s->hdrs);
	curl_multi_add_handle(multi, c);
}

/*
 * An attempt ended with rc: 0 (allowed: [x.lo, x.hi) filled) or an errno
 * to deny, or -1 when a retry is due at s->retry_at.
 */
static int attempt_done(struct slot *s, CURLcode rc)
{
	const struct hsmfs_event *ev = &s->j->ev;
	struct xfer *x = &s->x;
	long code = 0;

	curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &code);
	flush_body(x); /* of this attempt: a retry writes its bytes again */
	if (x->io_error) {
		logf_("'%s': writing the store: %s", ev->path, strerror(x->io_error));
		return x->io_error == ENOSPC ? ENOSPC : EIO;
	}
	if (x->checked && x->verdict == HTTP_CHANGED) {
		char p[8300];

		logf_("'%s': origin changed (HTTP %ld: %s); refusing to mix versions",
		      ev->path, code, x->why);
		/* status shows it stale until it is imported again */
		snprintf(p, sizeof(p), "%s/%s", cfg.mountpoint, ev->path);
		setxattr(p, "user.hsmfs.stale", "1", 1, 0);
		return EIO;
	}
	if (x->checked && x->verdict == HTTP_UNPROVEN) {
		logf_("'%s': HTTP %ld does not prove its bytes (%s); refused", ev->path, code,
		      x->why);
		return EIO;
	}
	if (x->cut && rc == CURLE_WRITE_ERROR)
		rc = CURLE_OK; /* stopped on purpose, the range in hand */
	if (chain) {
		bool failed = proxy_failed(s->proxy, rc, code);

		proxy_end(s->proxy, !failed, x->body_pos, x->hit ? x->body_pos : 0, rc, code);
		if (failed) {
			s->tried |= 1ull << s->proxy;
			if (proxy_pick(chain, s->tried, (uint64_t)mono_ms()) >= 0) {
				/* at once through the next member: not a retry */
				s->reported = x->reported;
				s->retry_at = (uint64_t)mono_ms();
				s->failover = true;
				return -1;
			}
			s->tried = 0; /* each member failed it: a retry, as without a chain */
		}
	}
	if (rc != CURLE_OK || code >= 500 || code == 429) {
		if ((transient(rc) || code >= 500 || code == 429) && s->attempt < cfg.retries) {
			unsigned ms = 200u << (s->attempt < 6 ? s->attempt : 6);

			logf_("'%s': %s, retry %u of %u in %u ms", ev->path,
			      rc != CURLE_OK ? curl_easy_strerror(rc) : "server error",
			      s->attempt + 1, cfg.retries, ms);
			s->reported = x->reported;
			s->retry_at = (uint64_t)mono_ms() + ms;
			return -1;
		}
		logf_("'%s': %s (HTTP %ld)", ev->path,
		      rc != CURLE_OK ? curl_easy_strerror(rc) : "server error", code);
		/* a stalled origin (the low-speed limit) is a timeout, not data */
		return rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO;
	}
	if (s->is_file && code == 0) {
		/* file:// honours ranges: the body was exactly the range */
	} else if (code == 404 || code == 410) {
		logf_("'%s': missing at origin (HTTP %ld)", ev->path, code);
		return EIO;
	} else if (code == 401 || code == 403) {
		char why[600];

		manifest_s3_error(x->errbody, why, sizeof(why));
		logf_("'%s': origin refused access (HTTP %ld)%s", ev->path, code, why);
		return EACCES;
	} else if (!x->checked || x->verdict != HTTP_KEEP) {
		logf_("'%s': unexpected HTTP %ld", ev->path, code);
		return EIO;
	} else if (code == 200) {
		/* the server ignored Range (the answer was checked): cut */
		static bool said;

		if (!said) {
			said = true;
			logf_("origin of '%s' ignores Range requests (HTTP 200): the range is cut "
			      "out of the whole body; every request still asks for its range",
			      ev->path);
		}
	}
	if (x->overflow || x->filled != x->hi - x->lo ||
	    (!x->cut && x->body_pos != (x->body_len == UINT64_MAX ? ev->file_size : x->body_len))) {
		logf_("'%s': body of %llu bytes does not fill [%llu, %llu)", ev->path,
		      (unsigned long long)x->body_pos, (unsigned long long)x->lo,
		      (unsigned long long)x->hi);
		return EIO;
	}
	return 0;
}

/* Answer s's event (its bytes written: the descriptor is closed first). */
static void slot_end(struct slot *s, int err)
{
	struct job *j = s->j;

	if (j->ev.fd >= 0)
		close(j->ev.fd);
	if (err)
		hsmfs_hook_deny(hook, j->ev.id, err);
	else
		hsmfs_hook_allow(hook, j->ev.id, s->x.lo, s->x.hi, 0);
	curl_slist_free_all(s->hdrs);
	s->hdrs = NULL;
	curl_easy_setopt(s->c, CURLOPT_HTTPHEADER, NULL);
	free(s->url);
	s->url = NULL;
	free(j);
	s->j = NULL;
}

/* Take j into the free slot s and start its first attempt. */
static void slot_begin(struct slot *s, struct job *j)
{
	const struct hsmfs_event *ev = &j->ev;

	s->j = j;
	s->attempt = 0;
	s->received = s->reported = 0;
	s->retry_at = 0;
	s->tried = 0;
	s->failover = false;
	if (ev->fd < 0) {
		slot_end(s, EBADF);
		return;
	}
	s->url = ev->origin[0] ? strdup(ev->origin) :
		 cfg.origin[0] ? join_url(cfg.origin, ev->path) : NULL;
	if (!s->url) {
		logf_("'%s': no url and no origin to fetch it from", ev->path);
		slot_end(s, EIO);
		return;
	}
	s->is_file = !strncmp(s->url, "file:", 5);
	attempt(s);
}

/*
 * A CANCEL: the event is given up (its answer would be ignored), so a
 * job of it still queued is dropped, never fetched.  One under way
 * finishes (stopping it would cost an HTTP/1.1 connection).  Under qlock.
 */
static bool jobq_drop(struct jobq *q, uint64_t id)
{
	struct job **pp, *prev = NULL;

	for (pp = &q->head; *pp; prev = *pp, pp = &(*pp)->next) {
		struct job *j = *pp;

		if (j->ev.id != id)
			continue;
		*pp = j->next;
		if (q->tail == j)
			q->tail = prev;
		if (j->ev.fd >= 0)
			close(j->ev.fd);
		free(j);
		return true;
	}
	return false;
}

static struct job *jobq_take(struct jobq *q)
{
	struct job *j = q->head;

	if (j) {
		q->head = j->next;
		if (!q->head)
			q->tail = NULL;
	}
	return j;
}

/* Queue one event: a fill for the fetcher (the caller), a listing for a lister. */
static void take_event(struct hsmfs_event *ev)
{
	struct job *j;
	struct jobq *q;

	if (ev->type == HSMFS_EV_CANCEL) {
		pthread_mutex_lock(&qlock);
		if ((jobq_drop(&fills, ev->id) || jobq_drop(&later, ev->id)) && cfg.verbose)
			logf_("event %llu cancelled before its transfer began",
			      (unsigned long long)ev->id);
		pthread_mutex_unlock(&qlock);
		return;
	}
	if (ev->type != HSMFS_EV_PRE_ACCESS && ev->type != HSMFS_EV_PRE_DIR &&
	    ev->type != HSMFS_EV_PRE_LOOKUP && ev->type != HSMFS_EV_ARCHIVE &&
	    ev->type != HSMFS_EV_ARCHIVE_NAME) {
		if (ev->fd >= 0)
			close(ev->fd);
		return;
	}
	j = malloc(sizeof(*j));
	if (!j) {
		hsmfs_hook_deny(hook, ev->id, EAGAIN);
		if (ev->fd >= 0)
			close(ev->fd);
		return;
	}
	j->ev = *ev;
	j->flags = hsmfs_hook_event_flags(hook);
	j->next = NULL;
	q = ev->type != HSMFS_EV_PRE_ACCESS ? &lists : ev->pid ? &fills : &later;
	pthread_mutex_lock(&qlock);
	if (q->tail)
		q->tail->next = j;
	else
		q->head = j;
	q->tail = j;
	if (q == &lists)
		pthread_cond_signal(&qcond);
	pthread_mutex_unlock(&qlock);
}

/*
 * Take every event waiting on the hook's socket, without blocking (a
 * SEQPACKET socket that polls readable holds a whole message).  When the
 * mount is gone, no more come: the listers are told, the fetcher finishes
 * what is queued.
 */
static void take_events(void)
{
	struct pollfd p = { .fd = hsmfs_hook_fd(hook), .events = POLLIN };
	struct hsmfs_event ev;

	while (!done && poll(&p, 1, 0) > 0) {
		int res = hsmfs_hook_next(hook, &ev);

		if (res) {
			pthread_mutex_lock(&qlock);
			hook_end = res;
			done = true;
			pthread_cond_broadcast(&qcond);
			pthread_mutex_unlock(&qlock);
			return;
		}
		take_event(&ev);
	}
}

/* s as a Prometheus label value (\\, \" and \n escaped) into out. */
static void label(char *out, size_t cap, const char *s)
{
	size_t n = 0;

	for (; *s && n + 3 < cap; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n')
			out[n++] = '\\';
		out[n++] = *s == '\n' ? 'n' : *s;
	}
	out[n] = '\0';
}

/*
 * The chain's counters to the mount (STATS, for hsmfsctl stats), at most
 * once a second and only when they changed.  The fetcher's.
 */
static void send_stats(void)
{
	static char last[HSMFS_MAX_STATS + 1];
	static int64_t sent_at;
	struct proxy_stat st[PROXY_MAX];
	char text[HSMFS_MAX_STATS + 1], l[600];
	uint64_t tier = 0, all = 0;
	size_t len = 0;
	unsigned n;

	if (!chain || mono_ms() - sent_at < 1000)
		return;
	sent_at = mono_ms();
	n = proxy_stats(chain, st, PROXY_MAX, (uint64_t)mono_ms());
	for (unsigned i = 0; i < n; i++) {
		label(l, sizeof(l), st[i].url);
		len += snprintf(text + len, len < sizeof(text) ? sizeof(text) - len : 0,
				"proxy_requests_total{proxy=\"%s\",group=\"%u\"} %llu\n"
				"proxy_failures_total{proxy=\"%s\"} %llu\n"
				"proxy_bytes_total{proxy=\"%s\"} %llu\n"
				"proxy_hit_bytes_total{proxy=\"%s\"} %llu\n"
				"proxy_up{proxy=\"%s\"} %d\n"
				"proxy_in_use{proxy=\"%s\"} %d\n",
				l, st[i].group, (unsigned long long)st[i].requests,
				l, (unsigned long long)st[i].failures,
				l, (unsigned long long)st[i].bytes,
				l, (unsigned long long)st[i].hit_bytes,
				l, !st[i].skipped, l, st[i].current);
		tier += st[i].hit_bytes;
		all += st[i].bytes;
	}
	if (n)
		len += snprintf(text + len, len < sizeof(text) ? sizeof(text) - len : 0,
				"proxy_switches_total %llu\ntier_bytes_total %llu\n"
				"origin_bytes_total %llu\n", (unsigned long long)st[0].switches,
				(unsigned long long)tier, (unsigned long long)(all - tier));
	if (len >= sizeof(text) || !strcmp(text, last))
		return; /* too many members to say, or nothing new */
	if (hsmfs_hook_stats(hook, text) == 0)
		memcpy(last, text, len + 1);
}

/*
 * The fetcher: takes events, fills free slots from the queue, starts
 * retries that are due, drives the transfers and ends those done; sleeps in
 * curl_multi_poll() until a socket (the hook's too) is ready or a retry
 * is due.  Once the events end it finishes what was queued and returns.
 */
static void *fetcher(void *arg)
{
	/* the hook's socket; revents: curl_multi_poll() found it readable
	 * (set at first: events may be waiting already) */
	struct curl_waitfd hw = { .fd = hsmfs_hook_fd(hook), .events = CURL_WAIT_POLLIN,
				  .revents = CURL_WAIT_POLLIN };

	(void)arg;
	for (;;) {
		uint64_t now = (uint64_t)mono_ms(), next = 0;
		bool busy = false, again = false, quit;
		unsigned nlater = 0;
		struct CURLMsg *m;
		int running, left;

		if (hw.revents) {
			hw.revents = 0; /* curl_multi_poll() keeps it when nothing was ready */
			take_events();
		}
		send_stats();
		for (unsigned i = 0; i < cfg.connections; i++)
			nlater += slots[i].j && slots[i].later;
		for (unsigned i = 0; i < cfg.connections; i++) {
			struct slot *s = &slots[i];

			if (!s->j) {
				/* a job that ends at once (no URL) leaves it free */
				for (;;) {
					struct job *j;
					bool l = false;

					pthread_mutex_lock(&qlock);
					j = jobq_take(&fills);
					if (!j && (cfg.connections == 1 || nlater + 1 < cfg.connections)) {
						j = jobq_take(&later);
						l = j != NULL;
					}
					pthread_mutex_unlock(&qlock);
					if (!j)
						break;
					s->later = l;
					slot_begin(s, j);
					if (s->j) {
						nlater += l;
						break;
					}
				}
			} else if (s->retry_at && s->retry_at <= now) {
				s->retry_at = 0;
				s->attempt += !s->failover;
				s->failover = false;
				attempt(s);
			}
			if (s->retry_at && (!next || s->retry_at < next))
				next = s->retry_at;
			busy |= s->j != NULL;
		}
		curl_multi_perform(multi, &running);
		while ((m = curl_multi_info_read(multi, &left))) {
			struct slot *s = NULL;
			CURL *c = m->easy_handle;
			CURLcode rc = m->data.result;
			int err;

			if (m->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&s);
			curl_multi_remove_handle(multi, c); /* m is gone from here */
			err = attempt_done(s, rc);
			if (err >= 0) {
				slot_end(s, err);
				again = true; /* a slot is free: the queue may fill it */
			} else if (!next || s->retry_at < next) {
				next = s->retry_at;
			}
		}
		pthread_mutex_lock(&qlock);
		quit = done && !fills.head && !later.head;
		pthread_mutex_unlock(&qlock);
		if (quit && !busy && !again)
			break;
		if (again)
			continue;
		now = (uint64_t)mono_ms();
		curl_multi_poll(multi, &hw, done ? 0 : 1,
				!next ? 1000 : next <= now ? 0 : next - now < 1000 ? (int)(next - now) : 1000,
				NULL);
	}
	return NULL;
}

static void tell_progress(void *arg, uint64_t bytes)
{
	hsmfs_hook_progress(hook, *(uint64_t *)arg, bytes);
}

/*
 * An ARCHIVE: the snapshot to the file's URL (http-archive.h), retried
 * with backoff on a server error or a lost connection; ESTALE (a
 * conflict) and other refusals are final.
 */
static void probe_conditions(void);
static pthread_once_t probed = PTHREAD_ONCE_INIT;

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
		err = http_archive(lc, &j->ev, j->flags, url, cfg.s3, cfg.honoured, cfg.read_back_max, cfg.part_size,
				   tell_progress,
				   &j->ev.id, &out);
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

/* An ARCHIVE_NAME: the object removed or moved (http-archive.h). */
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
		      j->ev.start == HSMFS_NAME_RENAMED ? "rename" : "removal", j->ev.path, out.why);
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
static void *lister(void *arg)
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

/* A probe's response headers: the Content-Type's value kept. */
static size_t probe_header(char *b, size_t sz, size_t n, void *arg)
{
	char *type = arg;
	size_t len = sz * n;

	if (len > 13 && !strncasecmp(b, "content-type:", 13)) {
		size_t v = 13;

		while (v < len && b[v] == ' ')
			v++;
		snprintf(type, 128, "%.*s", (int)(len - v), b + v);
		type[strcspn(type, "\r\n;")] = '\0';
	}
	return len;
}

static int probe_entry(void *arg, const char *name, bool is_dir, const char *mtime,
		       uint64_t size)
{
	(void)arg, (void)name, (void)is_dir, (void)mtime, (void)size;
	return 0;
}

/* An HTML root: is it a directory index (its GET parsed, no HEADs)?  why if not. */
static void probe_html(CURL *c, const char *url, char *why, size_t whylen)
{
	struct http_body b = { .max = 64 << 20 };
	char err[256] = "";
	long code = 0;
	CURLcode rc;

	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	rc = http_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (rc != CURLE_OK)
		snprintf(why, whylen, "%s", curl_easy_strerror(rc));
	else if (code != 200)
		snprintf(why, whylen, "HTTP %ld", code);
	else if (!manifest_html_is_index(b.p ? b.p : "", b.n))
		/* below the root such a page is listed from its links; the root
		 * itself is more likely a wrong URL */
		snprintf(why, whylen, "it answers with an HTML page, not a directory index "
			 "(nginx: an `index` no file has, index .hsmfs-no-index;, with autoindex "
			 "on; autoindex_format json;)");
	else if (manifest_parse_html(b.p ? b.p : "", b.n, probe_entry, NULL, err, sizeof(err)))
		snprintf(why, whylen, "%s", err);
	free(b.p);
}

/*
 * The mount's first start, its root never listed (HSMFS_PROBE=1,
 * hsmfs-hooks(7)): does the origin's root answer as a listing?  One HEAD,
 * so a huge root is not listed twice: of the root's URL (nginx: 2xx and
 * JSON, the autoindex's type; an HTML page is read and must be an index),
 * or of the bucket (S3).  A wrong path, a
 * bucket that is not there, an origin down or unknown, a page that is no
 * listing: one line on standard error and false; the mount then fails
 * with that line rather than every later look with EIO.
 */
static bool probe_origin(void)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	char why[512] = "", type[128] = "";
	size_t ol = strlen(cfg.origin);
	bool slash = ol && cfg.origin[ol - 1] == '/';
	char *url = NULL;
	CURLcode rc = CURLE_OUT_OF_MEMORY;
	long code = 0;

	char *kp = NULL;

	if (cfg.s3 && http_s3_split(cfg.origin, &url, &kp))
		url = NULL; /* the bucket (of the prefix the origin may be) */
	else if (cfg.s3)
		free(kp);
	else if (asprintf(&url, "%s%s", cfg.origin, slash ? "" : "/") < 0)
		url = NULL;
	hdrs = curl_slist_append(NULL, HTTP_IDENTITY);
	if (cfg.s3 && hdrs)
		hdrs = curl_slist_append(hdrs, HTTP_S3_EMPTY_PAYLOAD);
	if (c && url && hdrs) {
		setup_handle(c, true);
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, probe_header);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, (void *)type);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
		/* within the mount's wait for its hook (timeout=, 30 s by default) */
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
		rc = http_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	}
	if (rc != CURLE_OK)
		snprintf(why, sizeof(why), "%s", curl_easy_strerror(rc));
	else if (!strncmp(url, "file:", 5))
		; /* a directory there: its listing is read as it is */
	else if (code < 200 || code > 299)
		snprintf(why, sizeof(why), "HTTP %ld", code);
	else if (!cfg.s3 && strstr(type, "text/html"))
		probe_html(c, url, why, sizeof(why));
	else if (!cfg.s3 && !strstr(type, "json"))
		snprintf(why, sizeof(why), "it answers %s, not a listing (nginx: autoindex on; "
			 "with autoindex_format json; for exact sizes)", type[0] ? type : "with no type");
	if (c)
		curl_easy_cleanup(c);
	curl_slist_free_all(hdrs);
	if (why[0])
		logf_("cannot list the origin '%s': %s; check -o origin=%s", cfg.origin, why,
		      cfg.s3 ? " and the S3 options" : "");
	free(url);
	return !why[0];
}

/*
 * Does the origin honour conditions on PUT (http_conditions_probe())?
 * Into cfg.honoured, said on standard error.  Not known (an error, a
 * refusal): not honoured, so archives read their objects back.  Asked
 * once, before the first archive (pthread_once: a mount that only
 * reads never writes its origin).
 */
/*
 * The journal of S3 multipart uploads (http-archive.h): "B ID URL" once
 * one is created (synced: a crash after it must find it), "E ID" once it
 * is completed or aborted.  Each start aborts those begun and never
 * ended (a crash, a kill: their parts are kept, and paid for, until
 * then).  One file a mount point and origin, in --state-dir: no other
 * hsmfs-http serves that mount meanwhile.  It is made at the first
 * upload, emptied whenever none is unfinished, and removed at the start
 * once what it held is settled.
 */
static const char *state_dir; /* --state-dir */

/* 64-bit FNV-1a: the journal's name for a mount point and origin */
static uint64_t fnv(const char *a, const char *b)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *p = a; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	h = (h ^ '\n') * 0x100000001b3ull;
	for (const char *p = b; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	return h;
}

static int mkdirs(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) < 0 && errno != EEXIST) {
			*p = '/';
			return -1;
		}
		*p = '/';
	}
	return mkdir(path, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

static void journal_start(void)
{
	char dir[PATH_MAX], real[PATH_MAX], file[PATH_MAX + 64];
	const char *home = getenv("HOME"), *xdg = getenv("XDG_STATE_HOME");
	char **urls = NULL, **ids = NULL;
	unsigned left = 0, aborted = 0;
	size_t n = 0;
	CURL *c;
	int err;

	if (state_dir)
		snprintf(dir, sizeof(dir), "%s", state_dir);
	else if (xdg && xdg[0] == '/')
		snprintf(dir, sizeof(dir), "%s/hsmfs-http", xdg);
	else if (home && home[0] == '/')
		snprintf(dir, sizeof(dir), "%s/.local/state/hsmfs-http", home);
	else {
		logf_("no --state-dir, XDG_STATE_HOME or HOME: multipart uploads a crash leaves "
		      "are not aborted at the next start");
		return;
	}
	if (!realpath(cfg.mountpoint, real))
		snprintf(real, sizeof(real), "%s", cfg.mountpoint);
	snprintf(file, sizeof(file), "%s/multipart-%016llx", dir,
		 (unsigned long long)fnv(real, cfg.origin));
	if (mkdirs(dir) < 0 || (errno = http_journal_open(file))) {
		logf_("cannot keep a journal of multipart uploads in '%s': %s", dir,
		      strerror(errno));
		return;
	}
	/* what the last one left: each begun and never ended, aborted */
	err = http_journal_leftovers(&urls, &ids, &n);
	if (err)
		logf_("cannot read the journal of multipart uploads '%s': %s", file,
		      strerror(err));
	c = n ? curl_easy_init() : NULL;
	if (c) {
		setup_handle(c, true);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	}
	for (size_t i = 0; i < n; i++) {
		err = c ? http_multipart_abort(c, urls[i], ids[i]) : ENOMEM;
		if (err) {
			logf_("cannot abort the multipart upload %s of %s a crash left: %s", ids[i],
			      urls[i], strerror(err));
			left++;
		} else {
			aborted++;
		}
		free(ids[i]);
		free(urls[i]);
	}
	free(ids);
	free(urls);
	if (c)
		curl_easy_cleanup(c);
	if (aborted)
		logf_("aborted %u multipart upload%s a crash left unfinished", aborted,
		      aborted == 1 ? "" : "s");
	/* the file goes once every one is settled (else kept for the next start) */
	err = err ? err : http_journal_settled(left);
	if (err)
		logf_("cannot settle the journal of multipart uploads '%s': %s", file,
		      strerror(err));
}

static void probe_conditions(void)
{
	CURL *c = curl_easy_init();
	char why[512] = "", *url = NULL;
	int r = -ENOMEM;

	if (c) {
		char *slash = strrchr(cfg.origin, '/');

		/* a scratch name beside the origin's files: in its directory */
		if (asprintf(&url, "%.*s/.hsmfs-probe-%ld",
			     slash && slash[1] == '\0' ? (int)(slash - cfg.origin) :
							  (int)strlen(cfg.origin),
			     cfg.origin, (long)getpid()) < 0)
			url = NULL;
	}
	if (c && url) {
		setup_handle(c, true);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
		r = http_conditions_probe(c, url, cfg.s3, why, sizeof(why));
	}
	cfg.honoured = r == 1;
	logf_("origin '%s': conditional PUT %s%s%s", cfg.origin,
	      r == 1 ? "honoured (If-Match refused with 412)" :
	      r == 0 ? "not honoured: each archive reads its object back" :
		       "not known: each archive reads its object back", r < 0 ? "; " : "",
	      r < 0 ? why : "");
	if (c)
		curl_easy_cleanup(c);
	free(url);
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
"                        bytes/s for S seconds (default 1024 and 30)\n"
"  --cacert FILE         trust this CA bundle\n"
"  --insecure            do not verify TLS certificates\n"
"  --proxy CHAIN         a proxy, or a chain of them: 'P1|P2;P3;DIRECT' ('|'\n"
"                        shares a group by host, ';' fails over, DIRECT is the\n"
"                        origin; default: the usual *_proxy environment variables)\n"
"  --proxy-retry S       a failed proxy is skipped this long (default 60)\n"
"  --proxy-reset S       back to the first group this long after leaving it\n"
"                        (default 300)\n"
"  --proxy-timeout S     a proxy that takes no connection or sends nothing\n"
"                        this long failed (default 10)\n"
"  --align SIZE          ask whole aligned blocks of SIZE (k, m; 0: off;\n"
"                        default 1m with --proxy, else 0)\n"
"  --netrc-file FILE     credentials by host\n"
"  --bearer-file FILE    send the token in FILE as a bearer token\n"
"  --aws-sigv4 PROVIDER1:PROVIDER2:REGION:SERVICE\n"
"                        sign requests (S3 SigV4: aws:amz:REGION:s3); keys from --aws-keys-file\n"
"                        (two lines: key id, secret) or AWS_ACCESS_KEY_ID and\n"
"                        AWS_SECRET_ACCESS_KEY\n"
"  --s3                  the origin is an S3 bucket's URL: list directories\n"
"                        with ListObjectsV2 (implied by --aws-sigv4)\n"
"  --read-back-max MIB   an origin that ignores If-Match: objects up to this\n"
"                        are read back after their PUT, larger ones checked\n"
"                        by their validators (default 16; hsmfs-http(1))\n"
"  --part-size MIB       S3: archive files over this as multipart uploads of\n"
"                        parts this size, 4 at a time (default 64, at least 5)\n"
"  --page-size N         keys a ListObjectsV2 page asks for (default: the\n"
"                        server's, 1000 on S3)\n"
"  --no-s3-metadata      list S3 directories without a HEAD of each object:\n"
"                        the upload's time for mtime, 0644 for mode\n"
"  --state-dir DIR       S3: where multipart uploads are journalled, so that\n"
"                        those a crash leaves are aborted at the next start\n"
"                        (default $XDG_STATE_HOME/hsmfs-http, else\n"
"                        ~/.local/state/hsmfs-http)\n"
"  --verbose             log every transfer\n"
"  -h, --help            this text;  -V, --version  the version\n"
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
		{ "proxy-retry", required_argument, NULL, 'y' },
		{ "proxy-reset", required_argument, NULL, 'z' },
		{ "align", required_argument, NULL, 'A' },
		{ "proxy-timeout", required_argument, NULL, 'T' },
		{ "netrc-file", required_argument, NULL, 'n' },
		{ "bearer-file", required_argument, NULL, 'b' },
		{ "aws-sigv4", required_argument, NULL, 's' },
		{ "aws-keys-file", required_argument, NULL, 'K' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "s3", no_argument, NULL, '3' },
		{ "page-size", required_argument, NULL, 'P' },
		{ "no-s3-metadata", no_argument, NULL, 'N' },
		{ "part-size", required_argument, NULL, 'M' },
		{ "read-back-max", required_argument, NULL, 'B' },
		{ "state-dir", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *keys_file = NULL;
	pthread_t threads[MAX_CONNECTIONS], fetch_thread;
	int opt, res;

	while ((opt = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
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
		case 'y': cfg.proxy_retry = (unsigned)atoi(optarg); break;
		case 'z': cfg.proxy_reset = (unsigned)atoi(optarg); break;
		case 'T': cfg.proxy_timeout = atoi(optarg) > 0 ? (unsigned)atoi(optarg) : 1; break;
		case 'A': {
			char *end;
			unsigned long long v = strtoull(optarg, &end, 10);

			v <<= *end == 'k' || *end == 'K' ? 10 : *end == 'm' || *end == 'M' ? 20 :
			      *end == 'g' || *end == 'G' ? 30 : 0;
			if (end == optarg || (*end && end[1]) || (v && (v < 4096 || (v & (v - 1))))) {
				logf_("--align needs 0 or a power of two of 4k or more (k, m, g)");
				return 1;
			}
			cfg.align = v;
			cfg.align_set = true;
			break;
		}
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
		case 'N': cfg.no_s3_meta = true; break;
		case 'B': cfg.read_back_max = strtoull(optarg, NULL, 10) << 20; break;
		case 'M':
			cfg.part_size = strtoull(optarg, NULL, 10) << 20;
			if (cfg.part_size < (5ull << 20)) {
				logf_("--part-size is in MiB, 5 at least (S3's smallest part)");
				return 1;
			}
			break;
		case 'S': state_dir = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V':
			printf("hsmfs-http %s (%s)\n", HSMFS_VERSION, curl_version());
			return 0;
		default: usage(stderr); return 1;
		}
	}
	if (optind != argc - 1 || cfg.connections < 1 ||
	    cfg.connections > MAX_CONNECTIONS) {
		usage(stderr);
		return 1;
	}
	cfg.mountpoint = argv[optind];
	if (cfg.proxy) {
		char host[256] = "", err[300];

		gethostname(host, sizeof(host) - 1);
		chain = proxy_chain_new(cfg.proxy, host, cfg.proxy_retry * 1000ull,
					cfg.proxy_reset * 1000ull, err, sizeof(err));
		if (!chain) {
			logf_("--proxy %s", err);
			return 1;
		}
		http_perform = chain_perform;
		if (!cfg.align_set)
			cfg.align = 1 << 20;
		if (cfg.aws_sigv4)
			logf_("warning: --aws-sigv4 with --proxy: each signed request is unique "
			      "(its date is signed), so no shared cache can serve it to another "
			      "host; see hsmfs-http(1), PROXIES");
	}
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
	/*
	 * Keep freed heap: with glibc's default trimming the fetcher's
	 * receive buffers go back to the kernel between transfers and are
	 * faulted in again by the next recv() (doc/benchmarks.md, http-cold).
	 */
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	mallopt(M_MMAP_THRESHOLD, 4 << 20);
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

	if (cfg.origin[0] && getenv("HSMFS_PROBE") && !strcmp(getenv("HSMFS_PROBE"), "1") &&
	    !probe_origin())
		return HSMFS_HOOK_REFUSED;
	if (cfg.s3)
		journal_start();
	res = hsmfs_hook_connect(cfg.mountpoint, HSMFS_KIND_FILL,
				 HSMFS_MASK(HSMFS_EV_PRE_ACCESS) | HSMFS_MASK(HSMFS_EV_PRE_DIR) |
				 HSMFS_MASK(HSMFS_EV_PRE_LOOKUP) | HSMFS_MASK(HSMFS_EV_ARCHIVE) |
					 HSMFS_MASK(HSMFS_EV_ARCHIVE_NAME),
				 "hsmfs-http", NULL, &hook);
	if (res) {
		logf_("cannot connect to '%s': %s", cfg.mountpoint, strerror(-res));
		return 1;
	}
	multi = curl_multi_init();
	if (!multi) {
		logf_("cannot initialise libcurl");
		return 1;
	}
	/* HTTP/1.1: a connection a transfer; HTTP/2: streams of one */
	curl_multi_setopt(multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)cfg.connections);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)cfg.connections * 2);
	for (unsigned i = 0; i < cfg.connections; i++) {
		slots[i].c = curl_easy_init();
		slots[i].wbuf = malloc(WBUF);
		if (!slots[i].c || !slots[i].wbuf) {
			logf_("cannot initialise libcurl or its buffers");
			return 1;
		}
		setup_handle(slots[i].c, false);
		curl_easy_setopt(slots[i].c, CURLOPT_PRIVATE, (char *)&slots[i]);
	}
	pthread_create(&fetch_thread, NULL, fetcher, NULL);
	for (unsigned i = 0; i < cfg.connections; i++)
		pthread_create(&threads[i], NULL, lister, NULL);
	pthread_join(fetch_thread, NULL);
	for (unsigned i = 0; i < cfg.connections; i++)
		pthread_join(threads[i], NULL);
	for (unsigned i = 0; i < cfg.connections; i++) {
		curl_easy_cleanup(slots[i].c);
		free(slots[i].wbuf);
	}
	curl_multi_cleanup(multi);
	hsmfs_hook_close(hook);
	curl_share_cleanup(share);
	curl_global_cleanup();
	free(cfg.bearer);
	free(cfg.aws_userpwd);
	proxy_chain_free(chain);
	return hook_end == -ECONNRESET ? 0 : 1;
}
