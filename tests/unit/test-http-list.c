/*
 * test-http-list.c - an S3 origin's URL split into its bucket and the
 * key prefix below it (http_s3_split, http-list.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../cmd/http-list.h"
#include "tap.h"

static const struct {
	const char *origin, *bucket, *prefix;
} rows[] = {
	/* path-style: the first segment is the bucket */
	{ "http://127.0.0.1:9000/bkt/", "http://127.0.0.1:9000/bkt", "" },
	{ "http://127.0.0.1:9000/bkt", "http://127.0.0.1:9000/bkt", "" },
	{ "http://127.0.0.1:9000/bkt/sub/", "http://127.0.0.1:9000/bkt", "sub/" },
	{ "http://127.0.0.1:9000/bkt/sub", "http://127.0.0.1:9000/bkt", "sub/" },
	{ "http://h/bkt/a/b%20c/", "http://h/bkt", "a/b c/" },
	{ "http://user:pw@minio.local:9000/bkt/x/", "http://user:pw@minio.local:9000/bkt", "x/" },
	{ "https://s3.eu-west-1.amazonaws.com/bkt/p/", "https://s3.eu-west-1.amazonaws.com/bkt",
	  "p/" },
	/* virtual-hosted on AWS: the host names the bucket, the path is the prefix */
	{ "https://bkt.s3.amazonaws.com/", "https://bkt.s3.amazonaws.com", "" },
	{ "https://bkt.s3.eu-west-1.amazonaws.com/logs/2026/",
	  "https://bkt.s3.eu-west-1.amazonaws.com", "logs/2026/" },
	{ "https://bkt.s3-eu-west-1.amazonaws.com/p", "https://bkt.s3-eu-west-1.amazonaws.com", "p/" },
	{ "https://bkt.s3.amazonaws.com", "https://bkt.s3.amazonaws.com", "" },
};

int main(void)
{
	char *b, *p;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int res = http_s3_split(rows[i].origin, &b, &p);

		ok(!res && !strcmp(b, rows[i].bucket) && !strcmp(p, rows[i].prefix),
		   "%s: bucket %s, prefix '%s' (%s, '%s')", rows[i].origin, rows[i].bucket,
		   rows[i].prefix, res ? "-" : b, res ? "-" : p);
		free(b);
		free(p);
	}
	ok(http_s3_split("no-scheme/bkt", &b, &p) == -EINVAL && !b && !p, "no scheme: EINVAL");
	return tap_done();
}
