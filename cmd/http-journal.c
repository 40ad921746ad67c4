/* http-journal.c - see http-journal.h */
#include "http-journal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
	pthread_mutex_t lock;
	int fd;                 /* -1: not made yet */
	unsigned open;          /* begun, not ended (and leftovers kept) */
	char path[PATH_MAX + 64];
} J = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

int http_journal_open(const char *path)
{
	if (snprintf(J.path, sizeof(J.path), "%s", path) >= (int)sizeof(J.path)) {
		J.path[0] = '\0';
		return ENAMETOOLONG;
	}
	return 0;
}

static int put(const char *kind, const char *id, const char *url)
{
	char line[9000];
	int n = snprintf(line, sizeof(line), "%s %s%s%s\n", kind, id, url ? " " : "",
			 url ? url : "");
	int err = 0;

	if (!J.path[0])
		return 0;
	if (n <= 0 || n >= (int)sizeof(line) || strchr(id, ' ') || strchr(id, '\n'))
		return EINVAL;
	pthread_mutex_lock(&J.lock);
	if (J.fd < 0 && url)
		J.fd = open(J.path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (J.fd < 0 || write(J.fd, line, (size_t)n) != n || (url && fdatasync(J.fd) < 0))
		err = errno ? errno : EIO;
	if (url && !err)
		J.open++;
	else if (!url && J.open && !--J.open && J.fd >= 0 && ftruncate(J.fd, 0) < 0)
		err = errno;
	pthread_mutex_unlock(&J.lock);
	return err;
}

int http_journal_begun(const char *url, const char *id)
{
	return put("B", id, url);
}

int http_journal_ended(const char *id)
{
	return put("E", id, NULL);
}

int http_journal_leftovers(char ***ret_urls, char ***ret_ids, size_t *ret_n)
{
	char line[9000], **ids = NULL, **urls = NULL;
	size_t n = 0;
	int err = 0;
	FILE *f;

	*ret_urls = *ret_ids = NULL;
	*ret_n = 0;
	if (!J.path[0] || !(f = fopen(J.path, "re")))
		return !J.path[0] || errno == ENOENT ? 0 : errno;
	while (!err && fgets(line, sizeof(line), f)) {
		char *id = line + 2, *url;

		line[strcspn(line, "\n")] = '\0';
		if (line[0] == 'B' && line[1] == ' ' && (url = strchr(id, ' '))) {
			char **ni = realloc(ids, (n + 1) * sizeof(*ids)), **nu;

			if (ni)
				ids = ni;
			nu = ni ? realloc(urls, (n + 1) * sizeof(*urls)) : NULL;
			if (nu)
				urls = nu;
			*url++ = '\0';
			if (!ni || !nu) {
				err = ENOMEM;
			} else if (!(ids[n] = strdup(id)) || !(urls[n] = strdup(url))) {
				free(ids[n]);
				err = ENOMEM;
			} else {
				n++;
			}
		} else if (line[0] == 'E' && line[1] == ' ') {
			for (size_t i = 0; i < n; i++)
				if (ids[i] && !strcmp(ids[i], id)) {
					free(ids[i]);
					ids[i] = NULL;
				}
		}
	}
	fclose(f);
	/* the ended ones out */
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		if (ids[i]) {
			ids[k] = ids[i];
			urls[k++] = urls[i];
		} else {
			free(urls[i]);
		}
	}
	if (err) {
		for (size_t i = 0; i < k; i++) {
			free(ids[i]);
			free(urls[i]);
		}
		free(ids);
		free(urls);
		return err;
	}
	*ret_urls = urls;
	*ret_ids = ids;
	*ret_n = k;
	return 0;
}

int http_journal_settled(unsigned left)
{
	int err = 0;

	pthread_mutex_lock(&J.lock);
	J.open += left; /* kept for the next start: never emptied meanwhile */
	if (!left && J.path[0] && unlink(J.path) < 0 && errno != ENOENT)
		err = errno;
	pthread_mutex_unlock(&J.lock);
	return err;
}
