/*
 * http-fetch.h - hsmfs-http's fetcher: the one thread that runs every
 * fill (PRE_ACCESS) through one libcurl multi handle, a slot a transfer,
 * cfg.connections slots; unless there is one only, one of them is kept
 * for a reader's fill (the mount's own take the others).  A slot takes a
 * job off fills or later (http-queue.h), asks its range (widened to
 * --align blocks, with If-Range on the recorded version, through a
 * member of the chain), writes it as it arrives (http-xfer.h), then
 * answers the event: allowed, denied with an errno, or again after a
 * backoff, or at once through the chain's next member.  A changed
 * origin marks the file stale (user.hsmfs.stale).  fetcher() returns
 * once the events are done and every queued fill is answered.
 *
 * Shares slots and multi: main() sets them up before it starts the
 * fetcher and cleans them up once it returned; in between only the
 * fetcher touches them.  It takes qlock only to take a job and to see
 * whether the events are done.
 */
#ifndef HSMFS_HTTP_FETCH_H
#define HSMFS_HTTP_FETCH_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

#include "http-config.h"
#include "http-queue.h"
#include "http-xfer.h"

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

extern struct slot slots[MAX_CONNECTIONS];
extern CURLM *multi;              /* the fetcher's */

/* The fetcher thread's function (arg unused). */
void *fetcher(void *arg);

#endif
