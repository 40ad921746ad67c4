/* test-http-journal: hsmfs-http's journal of S3 multipart uploads */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../cmd/http-journal.h"
#include "tap.h"

static off_t size_of(const char *p)
{
	struct stat st;

	return stat(p, &st) < 0 ? -1 : st.st_size;
}

int main(void)
{
	char dir[] = "/tmp/hsmfs-journal-XXXXXX", path[64];
	char **urls, **ids;
	size_t n;

	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/j", dir);
	ok(http_journal_open(path) == 0 && size_of(path) == -1, "opened: no file yet");
	ok(http_journal_leftovers(&urls, &ids, &n) == 0 && n == 0, "no file: nothing left");
	ok(http_journal_begun("http://h/b/a", "id1") == 0 && size_of(path) > 0,
	   "an upload begun: the file made");
	ok(http_journal_begun("http://h/b/c", "id2") == 0, "a second");
	ok(http_journal_ended("id1") == 0 && size_of(path) > 0, "one ended: kept");
	ok(http_journal_leftovers(&urls, &ids, &n) == 0 && n == 1 && !strcmp(ids[0], "id2") &&
		   !strcmp(urls[0], "http://h/b/c"),
	   "a crash now leaves the other, with its URL");
	for (size_t i = 0; i < n; i++) {
		free(urls[i]);
		free(ids[i]);
	}
	free(urls);
	free(ids);
	ok(http_journal_ended("id2") == 0 && size_of(path) == 0, "none unfinished: emptied");
	ok(http_journal_begun("http://h/b/d", "id3") == 0 && http_journal_settled(1) == 0 &&
		   http_journal_ended("id3") == 0 && size_of(path) > 0,
	   "a leftover kept: never emptied meanwhile");
	ok(http_journal_begun("http://h/b/e", "bad id") != 0, "an id with a space: refused");
	ok(http_journal_settled(0) == 0 && size_of(path) == -1, "all settled: the file goes");
	rmdir(dir);
	return tap_done();
}
