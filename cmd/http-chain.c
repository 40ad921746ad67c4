/* http-chain.c - hsmfs-http's requests through its chain of proxies: see http-chain.h */
#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "hsmfs/hook.h"
#include "http-chain.h"
#include "http-config.h"
#include "http-proxy.h"

struct proxy_chain *chain; /* --proxy's, or NULL */

bool transient(CURLcode rc)
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
bool proxy_failed(int i, CURLcode rc, long code)
{
	if (rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_PROXY || transient(rc))
		return true;
	return rc == CURLE_OK && proxy_url(chain, i)[0] &&
	       (code == 502 || code == 503 || code == 504);
}

/*
 * Send c's next request through member i: its proxy, and through a proxy
 * its bounds.  A proxy that does not take the connection, or sends
 * nothing, for --proxy-timeout seconds has failed: the next member takes
 * the request well within the mount's timeout= (a hung proxy would
 * otherwise hold it for the low-speed time, 30 s, and the read fail).
 */
void use_member(CURL *c, int i)
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
void proxy_end(int i, bool ok, uint64_t bytes, uint64_t hit, CURLcode rc, long code)
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
CURLcode chain_perform(CURL *c)
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
void send_stats(void)
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
