/*
 * http-config.h - hsmfs-http's configuration: the options it runs with
 * (cfg), read from its command line, and what every part of the program
 * uses with them: its connection to the mount (hook), its log line, a
 * path's URL below the origin.
 *
 * http_config_parse() reads the options, up to the mount point; then,
 * once the chain of proxies is made (main()), http_config_keys() reads
 * the keys --aws-sigv4 signs with.  Each returns -1 to go on, else the
 * exit status, with a line said on standard error (or the usage).
 *
 * Shares cfg, hook and state_dir.  main() sets them before any thread
 * starts; after that they are only read, but for cfg.honoured, written by
 * probe_conditions() (http-start.h) inside a pthread_once that each
 * archive to an http(s) URL passes before it reads it.  No locks: logf_() and join_url()
 * may be called from any thread.
 */
#ifndef HSMFS_HTTP_CONFIG_H
#define HSMFS_HTTP_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "hsmfs/hook.h"

#define MAX_CONNECTIONS 64

struct http_config {
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
};

extern struct http_config cfg;
extern struct hsmfs_hook *hook;  /* the mount's, from hsmfs_hook_connect() */
extern const char *state_dir;    /* --state-dir */

/* One line on standard error, "hsmfs-http: " first. */
void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* base + "/" + path, each byte outside the unreserved set %-encoded (malloc'ed) */
char *join_url(const char *base, const char *path);

int http_config_parse(int argc, char **argv);
int http_config_keys(void);

#endif
