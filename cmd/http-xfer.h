/*
 * http-xfer.h - one transfer of a fill, and the settings every handle of
 * hsmfs-http starts from.
 *
 * A fill's callbacks judge each response once its headers are complete,
 * before any byte of its body is kept (http-answer.h), keep the body's
 * bytes inside the range, gathered into writes of up to WBUF bytes
 * through the event's descriptor, say FILLED once a reader's bytes are
 * in and PROGRESS as bytes arrive.  A 200 of a proven length is stopped
 * once the range is in (cut).  setup_handle() gives a handle those
 * callbacks and the program's bounds, TLS, credentials and proxy; a
 * lister's (shared) also the listers' connection cache, whose callbacks
 * the caller replaces.
 *
 * Shares struct xfer (a fetcher's slot holds one, http-fetch.h) and
 * share, the listers' libcurl share (connections, DNS, TLS sessions):
 * made by main() before any thread starts, locked by libcurl through the
 * lock functions main() gives it.  An xfer is touched only by the thread
 * that performs its handle (the fetcher).
 */
#ifndef HSMFS_HTTP_XFER_H
#define HSMFS_HTTP_XFER_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hsmfs/hook.h"
#include "http-answer.h"

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

extern CURLSH *share;

/* Write what x gathered.  false (x->io_error set) on a failed write. */
bool flush_body(struct xfer *x);

/* A lister's handle (shared: the listers' connection cache) or a fill's. */
void setup_handle(CURL *c, bool shared);

#endif
