/* bdi.c - see bdi.h */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "bdi.h"
#include "log.h"

#define FUSE_SUPER_MAGIC 0x65735546

static struct {
	pthread_t thread;
	bool started;
	char *mnt;
	uint64_t bytes;
} B;

static void *bdi_main(void *arg)
{
	char path[96], old[32] = "?", val[32];
	struct statfs sfs;
	struct stat st;
	ssize_t n;
	int fd;

	(void)arg;
	/*
	 * The first statfs returns once the kernel has the INIT reply (or the
	 * mount is gone).  Then the mount must still be there on both sides of
	 * the stat, so that its device is ours and not that of the directory
	 * under it: a FUSE mount, on an anonymous device (major 0).
	 */
	if (statfs(B.mnt, &sfs) || sfs.f_type != FUSE_SUPER_MAGIC || stat(B.mnt, &st) ||
	    statfs(B.mnt, &sfs) || sfs.f_type != FUSE_SUPER_MAGIC || major(st.st_dev) != 0)
		return NULL;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb",
		 major(st.st_dev), minor(st.st_dev));
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0 && (n = pread(fd, old, sizeof(old) - 1, 0)) > 0)
		old[n - (old[n - 1] == '\n')] = '\0';
	snprintf(val, sizeof(val), "%llu\n", (unsigned long long)(B.bytes / 1024));
	if (fd < 0 || pwrite(fd, val, strlen(val), 0) != (ssize_t)strlen(val)) {
		log_warn("readahead=%lluk not set: writing %s needs root (%s); "
			 "the kernel's readahead stays %s KiB",
			 (unsigned long long)(B.bytes / 1024), path, strerror(errno), old);
	} else {
		log_info("kernel readahead of the mount: %s KiB (was %s KiB)",
			 strtok(val, "\n"), old);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

int bdi_readahead_start(const char *mnt, uint64_t bytes)
{
	int res;

	B.mnt = strdup(mnt);
	if (!B.mnt)
		return -ENOMEM;
	B.bytes = bytes;
	res = pthread_create(&B.thread, NULL, bdi_main, NULL);
	if (res) {
		free(B.mnt);
		B.mnt = NULL;
		return -res;
	}
	B.started = true;
	return 0;
}

void bdi_readahead_stop(void)
{
	if (!B.started)
		return;
	pthread_join(B.thread, NULL);
	B.started = false;
	free(B.mnt);
	B.mnt = NULL;
}
