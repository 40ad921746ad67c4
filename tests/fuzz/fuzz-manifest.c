/*
 * fuzz-manifest.c - the import parsers (manifest lines and nginx JSON
 * listings) against arbitrary input.  Built as a libFuzzer target with
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct manifest_entry e;
	char err[200];

	if (!manifest_parse_line((const char *)data, size, &e, err, sizeof(err))) {
		if (manifest_check_path(e.path, strlen(e.path), err, sizeof(err)))
			abort();
		manifest_entry_free(&e);
	}
	manifest_parse_nginx((const char *)data, size, on_entry, NULL, err, sizeof(err));
	return 0;
}

#ifndef HSMFS_LIBFUZZER
int main(int argc, char **argv)
{
	static uint8_t buf[1 << 20];
	int i, n = 0;

	for (i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		size_t len;

		if (!f) {
			perror(argv[i]);
			return 1;
		}
		len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		LLVMFuzzerTestOneInput(buf, len);
		n++;
	}
	printf("1..1\nok 1 - %d corpus inputs replayed\n", n);
	return 0;
}
#endif
