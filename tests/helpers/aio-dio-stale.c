/*
 * aio-dio-stale FILE SECONDS: is a file's page cache coherent with
 * asynchronous O_DIRECT writes?  Readers loop reading FILE through the
 * page cache while the main thread writes the whole file with one
 * io_submit(2) of an O_DIRECT open, a new byte pattern each round,
 * waits for it, then opens FILE again without O_DIRECT and reads it:
 * every byte must be the round's.  Exit 0: coherent for SECONDS; 1:
 * stale bytes read (the offset said); 2: a call failed.
 *
 * Raw system calls (linux/aio_abi.h): no libaio needed.
 */
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SIZE (640 * 1024)
#define READERS 2

static const char *path;
static atomic_bool stop;

static void *reader(void *arg)
{
	char *buf = malloc(SIZE);

	(void)arg;
	while (buf && !atomic_load(&stop)) {
		int fd = open(path, O_RDONLY);

		if (fd < 0)
			break;
		if (pread(fd, buf, SIZE, 0) < 0)
			perror("pread");
		close(fd);
	}
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	aio_context_t ctx = 0;
	pthread_t t[READERS];
	struct io_event ev;
	struct iocb cb, *cbs[1] = { &cb };
	char *buf, *check;
	time_t end;
	int res = 0, round = 0;

	if (argc != 3)
		return fprintf(stderr, "usage: aio-dio-stale FILE SECONDS\n"), 2;
	path = argv[1];
	end = time(NULL) + atoi(argv[2]);
	if (posix_memalign((void **)&buf, 4096, SIZE) || !(check = malloc(SIZE)))
		return 2;
	if (syscall(SYS_io_setup, 1, &ctx) < 0)
		return perror("io_setup"), 2;
	memset(buf, 0, SIZE);
	{
		int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);

		if (fd < 0 || write(fd, buf, SIZE) != SIZE || close(fd))
			return perror(path), 2;
	}
	for (int i = 0; i < READERS; i++)
		pthread_create(&t[i], NULL, reader, NULL);
	while (!res && time(NULL) < end) {
		int fd = open(path, O_RDWR | O_DIRECT);
		unsigned char pat = (unsigned char)(0x11 * (1 + round++ % 14));

		if (fd < 0) {
			res = 2;
			break;
		}
		memset(buf, pat, SIZE);
		memset(&cb, 0, sizeof(cb));
		cb.aio_fildes = (uint32_t)fd;
		cb.aio_lio_opcode = IOCB_CMD_PWRITE;
		cb.aio_buf = (uint64_t)(uintptr_t)buf;
		cb.aio_nbytes = SIZE;
		if (syscall(SYS_io_submit, ctx, 1, cbs) != 1 ||
		    syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) != 1 || ev.res != SIZE) {
			perror("io_submit");
			res = 2;
		}
		close(fd);
		fd = open(path, O_RDONLY);
		if (!res && (fd < 0 || pread(fd, check, SIZE, 0) != SIZE))
			res = 2;
		for (int i = 0; !res && i < SIZE; i++)
			if ((unsigned char)check[i] != pat) {
				printf("round %d: stale byte 0x%02x at %d, written 0x%02x\n", round,
				       (unsigned char)check[i], i, pat);
				res = 1;
			}
		if (fd >= 0)
			close(fd);
	}
	atomic_store(&stop, true);
	for (int i = 0; i < READERS; i++)
		pthread_join(t[i], NULL);
	if (!res)
		printf("%d rounds, every byte read back as written\n", round);
	syscall(SYS_io_destroy, ctx);
	free(buf);
	free(check);
	return res;
}
