/*
 * replay.h - the corpus replayer shared by every fuzz target: without
 * HSMFS_LIBFUZZER, main() runs each file named on the command line
 * through LLVMFuzzerTestOneInput() and reports one TAP line.
 */
#ifndef HSMFS_FUZZ_REPLAY_H
#define HSMFS_FUZZ_REPLAY_H

#ifndef HSMFS_LIBFUZZER
#include <stdio.h>

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

#endif
