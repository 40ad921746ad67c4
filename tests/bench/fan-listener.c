/*
 * fan-listener - the kernel's own pre-content HSM, for comparison.
 *
 *   fan-listener DIR [--ignore FILE]...
 *
 * Opens a FAN_CLASS_PRE_CONTENT group, marks DIR for FAN_PRE_ACCESS on
 * its children (an inode mark with FAN_EVENT_ON_CHILD), optionally puts
 * ignore marks on FILEs (the way an HSM tells the kernel a file is
 * resident), prints "ready" on stdout and answers FAN_ALLOW to every
 * event until killed.  Counts events and prints the count on SIGTERM.
 * Exits 77 where the kernel or the privileges do not allow it (kernels
 * before 6.14 know no FAN_PRE_ACCESS; fanotify needs CAP_SYS_ADMIN).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <unistd.h>

#ifndef FAN_PRE_ACCESS
#define FAN_PRE_ACCESS 0x00100000 /* Linux 6.14 */
#endif
#ifndef FAN_MARK_IGNORE_SURV
#define FAN_MARK_IGNORE_SURV (0x00000400 | FAN_MARK_IGNORED_SURV_MODIFY)
#endif

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	static char buf[64 * 1024] __attribute__((aligned(8)));
	unsigned long long events = 0;
	struct sigaction sa = { .sa_handler = on_term };
	int fan;

	if (argc < 2) {
		fprintf(stderr, "usage: fan-listener DIR [--ignore FILE]...\n");
		return 2;
	}
	fan = fanotify_init(FAN_CLASS_PRE_CONTENT | FAN_CLOEXEC, O_RDONLY | O_LARGEFILE);
	if (fan < 0) {
		fprintf(stderr, "fan-listener: fanotify_init: %s\n", strerror(errno));
		return errno == EPERM || errno == EINVAL || errno == ENOSYS ? 77 : 1;
	}
	if (fanotify_mark(fan, FAN_MARK_ADD | FAN_MARK_ONLYDIR,
			  FAN_PRE_ACCESS | FAN_EVENT_ON_CHILD, AT_FDCWD, argv[1]) < 0) {
		fprintf(stderr, "fan-listener: mark '%s': %s\n", argv[1], strerror(errno));
		return errno == EINVAL || errno == EPERM || errno == EOPNOTSUPP ? 77 : 1;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--ignore"))
			continue;
		if (fanotify_mark(fan, FAN_MARK_ADD | FAN_MARK_IGNORE_SURV, FAN_PRE_ACCESS,
				  AT_FDCWD, argv[i + 1]) < 0) {
			fprintf(stderr, "fan-listener: ignore mark '%s': %s\n", argv[i + 1],
				strerror(errno));
			return 1;
		}
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("ready\n");
	fflush(stdout);
	while (!stop) {
		ssize_t n = read(fan, buf, sizeof(buf));
		struct fanotify_event_metadata *m = (void *)buf;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("fan-listener: read");
			return 1;
		}
		for (; FAN_EVENT_OK(m, n); m = FAN_EVENT_NEXT(m, n)) {
			struct fanotify_response r = { .fd = m->fd, .response = FAN_ALLOW };

			if (m->fd >= 0) {
				if (write(fan, &r, sizeof(r)) < 0)
					perror("fan-listener: answer");
				close(m->fd);
			}
			events++;
		}
	}
	fprintf(stderr, "fan-listener: %llu events\n", events);
	return 0;
}
