/*
 * http-proxy.h - hsmfs-http's chain of proxies (--proxy), in CernVM-FS's
 * syntax: "http://a:3128|http://b:3128;http://c:3128;DIRECT".
 *
 *  - ';' separates groups, tried in order: the chain fails over to the
 *    next group when no member of the one in use can take a request.
 *  - '|' separates the members of a group, which share the load by host:
 *    each host orders a group's members by a hash of its own name with
 *    the member's (rendezvous hashing) and keeps to the first that works,
 *    so a proxy's cache stays warm with the same hosts' ranges, the
 *    hosts spread over the group, and the hosts of a member that fails
 *    spread over the others.
 *  - DIRECT is the origin itself, with no proxy.  Without it in the
 *    chain the origin is never asked directly.
 *
 * A member through which a request failed at the transport (the caller
 * decides: not reached, connection broken, a 502, 503 or 504) is skipped
 * for skip_ms; once the chain has moved off its first group it goes back
 * to it after reset_ms (the first group is the site's choice, the others
 * stand in).  A request asks proxy_pick() again after each failure, with
 * the members it has tried: it fails only when every member of the chain
 * failed it.  When every member is being skipped, the one skipped the
 * longest is tried anyway: the chain never refuses a request untried.
 *
 * Pure (no libcurl): the caller sends the request and reports the end.
 * Locking: one mutex of the chain's, taken inside each call and never
 * held across one; every call may come from any thread.
 */
#ifndef HSMFS_HTTP_PROXY_H
#define HSMFS_HTTP_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROXY_MAX 64 /* members of a chain: a bit each in a tried set */

struct proxy_chain;

/*
 * Parse spec.  host: this host's name (the key of the balance within a
 * group).  NULL with a one-line reason in err when spec is not a chain.
 */
struct proxy_chain *proxy_chain_new(const char *spec, const char *host, uint64_t skip_ms,
				    uint64_t reset_ms, char *err, size_t errlen);
void proxy_chain_free(struct proxy_chain *pc);

unsigned proxy_count(const struct proxy_chain *pc);
/* Member i's proxy URL, "" for DIRECT (the caller's "no proxy"). */
const char *proxy_url(const struct proxy_chain *pc, int i);

/*
 * The member to send a request through at now_ms, not one of tried (bit
 * i: member i failed this request already), or -1 when every member
 * failed it.
 */
int proxy_pick(struct proxy_chain *pc, uint64_t tried, uint64_t now_ms);

/*
 * A request through member i ended: ok, or failed at the transport (the
 * member is skipped from now on for skip_ms).  bytes: body bytes it
 * received, hit_bytes of them from the proxy's own cache.  true when
 * that changed whether the member is skipped (for the caller to say so).
 */
bool proxy_done(struct proxy_chain *pc, int i, bool ok, uint64_t bytes, uint64_t hit_bytes,
		uint64_t now_ms);

struct proxy_stat {
	char url[256];      /* "DIRECT" for DIRECT */
	unsigned group;     /* 0: the first */
	bool skipped;       /* failed, skipped until its time is up */
	bool current;       /* of the group in use */
	uint64_t requests, failures, bytes, hit_bytes;
	uint64_t switches;  /* the chain's failovers and returns, the same in each row */
};

/* The members' state and counters at now_ms: up to max rows, the count. */
unsigned proxy_stats(struct proxy_chain *pc, struct proxy_stat *out, unsigned max,
		     uint64_t now_ms);

#endif
