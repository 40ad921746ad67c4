/*
 * pingpong - the physical floor of an event round trip: N ping-pongs of
 * a 64-byte message over a SOCK_SEQPACKET socketpair between two
 * processes, printing each round trip in nanoseconds, one per line.
 * With two CPU numbers, the first process runs on CPU_A and the second
 * on CPU_B (the same number: both ends share one core); without, the
 * scheduler places them.
 *
 *   pingpong N [CPU_A CPU_B]
 */
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 10000, sv[2];
	bool pin = argc > 3;
	char buf[64] = { 0 };

	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
		return 1;
	if (fork() == 0) {
		if (pin && pin_to(atoi(argv[3])) < 0)
			_exit(1);
		close(sv[0]);
		while (read(sv[1], buf, sizeof(buf)) > 0)
			if (write(sv[1], buf, sizeof(buf)) < 0)
				break;
		_exit(0);
	}
	close(sv[1]);
	if (pin && pin_to(atoi(argv[2])) < 0) {
		perror("pingpong: sched_setaffinity");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct timespec a, b;

		clock_gettime(CLOCK_MONOTONIC, &a);
		if (write(sv[0], buf, sizeof(buf)) < 0 || read(sv[0], buf, sizeof(buf)) <= 0)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL +
					 (b.tv_nsec - a.tv_nsec));
	}
	close(sv[0]);
	wait(NULL);
	return 0;
}
