/*
 * http-chain.h - hsmfs-http's use of its chain of proxies (--proxy).  The
 * chain itself, its order and its skips, is http-proxy.h's; here a
 * request is sent through a member with libcurl (use_member()), its end
 * judged (proxy_failed()) and counted (proxy_end()), a lister's request
 * tried through member after member (chain_perform(), http-list.h's
 * http_perform), and the chain's counters go to the mount as STATS
 * (send_stats(), for hsmfsctl stats).
 *
 * Shares chain: NULL without --proxy, made by main() before any thread
 * starts.  The chain locks itself (http-proxy.h) and use_member() sets
 * only the handle it is given, so these may be called from any thread,
 * but send_stats(): the fetcher's, whose statics keep what it last sent.
 */
#ifndef HSMFS_HTTP_CHAIN_H
#define HSMFS_HTTP_CHAIN_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

#include "http-proxy.h"

extern struct proxy_chain *chain; /* --proxy's, or NULL */

/* A failure another attempt may get past: the connection lost or silent. */
bool transient(CURLcode rc);
bool proxy_failed(int i, CURLcode rc, long code);
void use_member(CURL *c, int i);
void proxy_end(int i, bool ok, uint64_t bytes, uint64_t hit, CURLcode rc, long code);
CURLcode chain_perform(CURL *c);
void send_stats(void);

#endif
