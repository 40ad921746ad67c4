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
 * The parts, each calling only those listed after it:
 *   hsmfs-http.c     main(): the options, the chain, libcurl, the threads
 *   http-lister.c    the listers: listings, lookups, archives, names
 *   http-start.c     the origin's probes; the multipart uploads a crash
 *                    left, aborted
 *   http-fetch.c     the fetcher: its slots, attempts, retries, answers
 *   http-queue.c     the events waiting, taken from the hook's socket
 *   http-xfer.c      a fill's transfer: its response judged, its body
 *                    written; every handle's settings
 *   http-chain.c     requests through the chain of proxies; its STATS
 *   http-config.c    the options (cfg), the hook, the log line
 * with the modules below them: http-archive.c (and http-names.c,
 * http-multipart.c, http-file.c, http-request.c), http-list.c,
 * http-journal.c, http-proxy.c, http-answer.c.
 *
 * CURLcode never goes into an answer: answers carry errnos.
 */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "hsmfs/hook.h"
#include "ctlsock.h"
#include "store.h" /* STORE_STATE_DIR */

#define FUSE_SUPER_MAGIC 0x65735546
#include "http-chain.h"
#include "http-config.h"
#include "http-fetch.h"
#include "http-list.h"
#include "http-lister.h"
#include "http-proxy.h"
#include "http-queue.h"
#include "http-start.h"
#include "http-xfer.h"

static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

static void share_lock(CURL *c, curl_lock_data d, curl_lock_access a, void *u)
{
	pthread_mutex_lock(&share_locks[d]);
}

static void share_unlock(CURL *c, curl_lock_data d, void *u)
{
	pthread_mutex_unlock(&share_locks[d]);
}

/*
 * A fanotify mount's origin (a bind of the store, or the store itself
 * while its tree is listed): asked through its control socket, in the
 * state directory of mnt itself, never one above it, nor a FUSE mount's
 * (a look there is a lookup the mount may answer by asking this hook).
 * Its length, or -1.
 */
static ssize_t fan_origin(const char *mnt, char *buf, size_t size)
{
	char real[PATH_MAX], dir[PATH_MAX], own[PATH_MAX + sizeof(STORE_STATE_DIR) + 1];
	struct statfs sf;

	if (statfs(mnt, &sf) || sf.f_type == FUSE_SUPER_MAGIC || !realpath(mnt, real))
		return -1;
	snprintf(own, sizeof(own), "%s%s" STORE_STATE_DIR, real, real[1] ? "/" : "");
	if (!ctlsock_find(real, true, dir, sizeof(dir)) || strcmp(dir, own))
		return -1;
	return ctlsock_ask(dir, real, true, CTLSOCK_GET, "user.hsmfs.origin", NULL, 0, buf, size);
}

int main(int argc, char **argv)
{
	pthread_t threads[MAX_CONNECTIONS], fetch_thread;
	int res;

	res = http_config_parse(argc, argv);
	if (res >= 0)
		return res;
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
	res = http_config_keys();
	if (res >= 0)
		return res;
	if (!cfg.origin[0]) {
		ssize_t n = getxattr(cfg.mountpoint, "user.hsmfs.origin", cfg.origin,
				     sizeof(cfg.origin) - 1);

		if (n < 0 && (errno == ENODATA || errno == ENOTSUP))
			n = fan_origin(cfg.mountpoint, cfg.origin, sizeof(cfg.origin) - 1);
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
