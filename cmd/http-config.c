/* http-config.c - hsmfs-http's options: see http-config.h */
#include <curl/curl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-config.h"
#include "http-list.h"

struct http_config cfg = { .connections = 8, .retries = 4, .connect_timeout = 10,
			   .part_size = 64 << 20, .read_back_max = 16 << 20,
			   .low_speed_limit = 1024, .low_speed_time = 30,
			   .proxy_retry = 60, .proxy_reset = 300, .proxy_timeout = 10 };

struct hsmfs_hook *hook;
const char *state_dir;          /* --state-dir */
static const char *keys_file;   /* --aws-keys-file */

void logf_(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("hsmfs-http: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* base + "/" + path, each byte outside the unreserved set %-encoded */
char *join_url(const char *base, const char *path)
{
	size_t bl = strlen(base);
	char *esc = http_escape(path, "/"), *u = NULL;

	if (esc && asprintf(&u, "%s%s%s", base, bl && base[bl - 1] != '/' ? "/" : "", esc) < 0)
		u = NULL;
	free(esc);
	return u;
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

/* The options, up to the mount point: -1 to go on, else the exit status. */
int http_config_parse(int argc, char **argv)
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
	int opt;

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
			if (end == optarg || (*end && end[1]) ||
			    (v && (v < 4096 || (v & (v - 1))))) {
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
	return -1;
}

/* The keys --aws-sigv4 signs with: -1 to go on, else the exit status. */
int http_config_keys(void)
{
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
			logf_("--aws-sigv4 needs keys: --aws-keys-file, or AWS_ACCESS_KEY_ID and "
			      "AWS_SECRET_ACCESS_KEY");
			return 1;
		}
		free(id);
		free(secret);
	}
	return -1;
}
