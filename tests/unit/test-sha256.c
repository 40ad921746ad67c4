/* Unit tests for sha256.c: FIPS 180-4 example vectors, any split of the input. */
#include <stdio.h>
#include <string.h>

#include "sha256.h"

static int n, failed;

static void ok(int cond, const char *what)
{
	printf("%sok %d - %s\n", cond ? "" : "not ", ++n, what);
	failed |= !cond;
}

static void digest(const void *p, size_t len, size_t piece, char out[65])
{
	struct sha256 s;
	const char *c = p;

	sha256_init(&s);
	for (size_t i = 0; i < len; i += piece)
		sha256_update(&s, c + i, len - i < piece ? len - i : piece);
	sha256_hex(&s, out);
}

int main(void)
{
	static char big[1000000];
	char h[65];
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

	digest("", 0, 1, h);
	ok(!strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "empty");
	digest("abc", 3, 3, h);
	ok(!strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "abc");
	for (size_t piece = 1; piece <= 64; piece *= 3) {
		digest(two, strlen(two), piece, h);
		ok(!strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
		   "two blocks, fed in pieces");
	}
	memset(big, 'a', sizeof(big));
	digest(big, sizeof(big), 4096, h);
	ok(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
	   "a million 'a'");
	digest(big, 55, 55, h); /* padding fits the block exactly */
	ok(!strcmp(h, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"), "55 bytes");
	digest(big, 56, 56, h); /* padding needs a second block */
	ok(!strcmp(h, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"), "56 bytes");
	printf("1..%d\n", n);
	return failed;
}
