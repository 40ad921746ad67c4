/*
 * fuzz-manifest.c - the import parsers (manifest lines, nginx JSON and
 * S3 ListObjectsV2 listings, any HTML page's links) against arbitrary input.  Built as a libFuzzer target with
 * -Dfuzz=true and always as a corpus replayer run by `meson test`.
 * Every path the line parser accepts must pass the path rules again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"

static int on_entry(void *arg, const char *name, bool is_dir, const char *mtime,
		    uint64_t size)
{
	char err[200];

	if (manifest_check_path(name, strlen(name), err, sizeof(err)) &&
	    strcmp(name, ".hsmfs"))
		abort(); /* the listing parser let a bad name through */
	return 0;
}

static int on_s3(void *arg, const char *key, uint64_t size, const char *etag,
		 const char *lm)
{
	return strlen(key) + strlen(etag) + strlen(lm) > (1 << 20); /* touch them */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct manifest_entry e;
	char err[200];

	if (!manifest_parse_line((const char *)data, size, &e, err, sizeof(err))) {
		/* "." only as the directory's own "partial" line */
		if (strcmp(e.path, ".") ? manifest_check_path(e.path, strlen(e.path), err,
							      sizeof(err)) != 0 : !e.partial)
			abort();
		manifest_entry_free(&e);
	}
	manifest_parse_nginx((const char *)data, size, on_entry, NULL, err, sizeof(err));
	manifest_parse_html((const char *)data, size, on_entry, NULL, err, sizeof(err));
	manifest_parse_page_links((const char *)data, size, on_entry, NULL);
	{
		char token[64];
		bool more;

		manifest_parse_s3((const char *)data, size, on_s3, NULL, &more, token,
				  sizeof(token), err, sizeof(err));
	}
	return 0;
}

#include "replay.h"
