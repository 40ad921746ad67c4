/* http-xfer.c - a fill's transfer and every handle's settings: see http-xfer.h */
#include <assert.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "clock.h"
#include "hsmfs/hook.h"
#include "http-answer.h"
#include "http-chain.h"
#include "http-config.h"
#include "http-list.h"
#include "http-proxy.h"
#include "http-xfer.h"

CURLSH *share;

/* Write what x gathered.  false (x->io_error set) on a failed write. */
bool flush_body(struct xfer *x)
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
void setup_handle(CURL *c, bool shared)
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
		curl_easy_setopt(c, CURLOPT_PROXY,
				 proxy_url(chain, proxy_pick(chain, 0, mono_ms())));
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
