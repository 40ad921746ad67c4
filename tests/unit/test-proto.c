/*
 * Unit tests for lib/proto.c: every message round-trips, and every
 * decoder rejects a wrong length field, a short frame, a trailing byte,
 * a wrong type, an oversized frame and a string running off the end.
 */
#include <errno.h>
#include <string.h>

#include "proto.h"
#include "tap.h"

static uint8_t buf[HSMFS_MAX_FRAME + 16];

#define S(lit) ((struct proto_str){ lit, sizeof(lit) - 1 })

static int str_eq(struct proto_str s, const char *lit)
{
	return s.len == strlen(lit) && !memcmp(s.p, lit, s.len);
}

typedef int (*decoder)(const uint8_t *, size_t, void *);

/* Mutations of a valid frame of length n: all must be rejected. */
static void hostile(const char *what, decoder dec, void *out, int n)
{
	uint8_t copy[HSMFS_MAX_FRAME + 16];
	int bad = 0;

	memcpy(copy, buf, n);
	/* short: one byte less, length field fixed up */
	copy[0] = n - 1;
	copy[1] = (n - 1) >> 8;
	if (dec(copy, n - 1, out) != -EBADMSG)
		bad |= 1;
	/* trailing byte */
	copy[0] = n + 1;
	copy[1] = (n + 1) >> 8;
	copy[n] = 0;
	if (dec(copy, n + 1, out) != -EBADMSG)
		bad |= 2;
	/* length field disagrees with the packet */
	memcpy(copy, buf, n);
	copy[0] ^= 1;
	if (dec(copy, n, out) != -EBADMSG)
		bad |= 4;
	/* wrong type */
	memcpy(copy, buf, n);
	copy[4] ^= 0x40;
	if (dec(copy, n, out) != -EBADMSG)
		bad |= 8;
	/* header only */
	if (dec(buf, 4, out) != -EBADMSG)
		bad |= 16;
	ok(!bad, "%s: hostile frames rejected (mask %d)", what, bad);
}

int main(void)
{
	int n;
	uint16_t t;

	struct proto_hello h = { 1, 3, HSMFS_KIND_FILL, HSMFS_MASK_ALL,
				 S("mirror"), S("sub/dir") }, h2;
	n = proto_enc_hello(buf, &h);
	ok(n == 8 + 16 + 2 + 6 + 2 + 7, "hello encodes to %d bytes", n);
	ok(proto_peek(buf, n, &t) == 0 && t == HSMFS_MSG_HELLO, "peek hello");
	ok(proto_dec_hello(buf, n, &h2) == 0 && h2.version_min == 1 &&
		   h2.version_max == 3 && h2.kind == HSMFS_KIND_FILL &&
		   h2.mask == HSMFS_MASK_ALL && str_eq(h2.name, "mirror") &&
		   str_eq(h2.subtree, "sub/dir"),
	   "hello round trip");
	hostile("hello", (decoder)proto_dec_hello, &h2, n);
	/* a string length that runs off the end */
	buf[24] = 0xff;
	ok(proto_dec_hello(buf, n, &h2) == -EBADMSG, "hello: string past the end");

	struct proto_welcome w = { 1, HSMFS_MAX_FRAME, 1 << 20, 30000 }, w2;
	n = proto_enc_welcome(buf, &w);
	ok(proto_dec_welcome(buf, n, &w2) == 0 && !memcmp(&w, &w2, sizeof(w)),
	   "welcome round trip");
	hostile("welcome", (decoder)proto_dec_welcome, &w2, n);

	struct proto_event e = { .id = 0x1122334455667788ULL, .type = HSMFS_EV_PRE_ACCESS,
				 .pid = 42, .uid = 1000, .gid = 100, .file_id = 77,
				 .file_size = 5ULL << 32, .start = 4096, .end = 8192,
				 .hint_start = 0, .hint_end = 1 << 20,
				 .path = S("dir/f ü"), .origin = S("http://x/y"),
				 .version = S("\"etag\""), .flags = HSMFS_EVENT_HAS_FD },
			   e2;
	n = proto_enc_event(buf, &e);
	ok(proto_dec_event(buf, n, &e2) == 0 && e2.id == e.id && e2.type == e.type &&
		   e2.pid == 42 && e2.uid == 1000 && e2.gid == 100 &&
		   e2.file_id == 77 && e2.file_size == e.file_size &&
		   e2.start == 4096 && e2.end == 8192 && e2.hint_end == 1 << 20 &&
		   str_eq(e2.path, "dir/f ü") && str_eq(e2.origin, "http://x/y") &&
		   str_eq(e2.version, "\"etag\"") && e2.flags == HSMFS_EVENT_HAS_FD,
	   "event round trip");
	hostile("event", (decoder)proto_dec_event, &e2, n);

	struct proto_answer a = { 9, HSMFS_DENY, EBUSY, 1, 2, HSMFS_ANSWER_QUIET }, a2;
	n = proto_enc_answer(buf, &a);
	ok(n == 8 + 32, "answer is 40 bytes");
	ok(proto_dec_answer(buf, n, &a2) == 0 && a2.id == 9 && a2.verdict == HSMFS_DENY &&
		   a2.error == EBUSY && a2.filled_start == 1 && a2.filled_end == 2 &&
		   a2.flags == HSMFS_ANSWER_QUIET,
	   "answer round trip");
	hostile("answer", (decoder)proto_dec_answer, &a2, n);

	struct proto_progress p = { 5, 12345 }, p2;
	n = proto_enc_progress(buf, &p);
	ok(proto_dec_progress(buf, n, &p2) == 0 && p2.id == 5 && p2.bytes_done == 12345,
	   "progress round trip");
	hostile("progress", (decoder)proto_dec_progress, &p2, n);

	struct proto_filled f = { 7, 4096, 131072 }, f2;
	n = proto_enc_filled(buf, &f);
	ok(n == 8 + 24, "filled is 32 bytes");
	ok(proto_dec_filled(buf, n, &f2) == 0 && f2.id == 7 && f2.filled_start == 4096 &&
		   f2.filled_end == 131072,
	   "filled round trip");
	hostile("filled", (decoder)proto_dec_filled, &f2, n);

	{
		static const char text[] = "proxy_up{proxy=\"http://a:3128\"} 1\n";
		struct proto_stats s = { { text, sizeof(text) - 1 } }, s2;

		n = proto_enc_stats(buf, &s);
		ok(n == 8 + 2 + (int)sizeof(text) - 1 && proto_dec_stats(buf, n, &s2) == 0 &&
			   s2.counters.len == sizeof(text) - 1 &&
			   !memcmp(s2.counters.p, text, s2.counters.len),
		   "stats round trip");
		hostile("stats", (decoder)proto_dec_stats, &s2, n);
	}

	struct proto_cancel c = { 6, HSMFS_CANCEL_TIMEOUT }, c2;
	n = proto_enc_cancel(buf, &c);
	ok(proto_dec_cancel(buf, n, &c2) == 0 && c2.id == 6 && c2.reason == 1,
	   "cancel round trip");
	hostile("cancel", (decoder)proto_dec_cancel, &c2, n);

	struct proto_error er = { HSMFS_ERR_VERSION, S("no common version") }, er2;
	n = proto_enc_error(buf, &er);
	ok(proto_dec_error(buf, n, &er2) == 0 && er2.code == 1 &&
		   str_eq(er2.message, "no common version"),
	   "error round trip");
	hostile("error", (decoder)proto_dec_error, &er2, n);

	/* event names: every type of protocol.h, and an unknown one */
	ok(!strcmp(proto_event_name(HSMFS_EV_PRE_ACCESS), "PRE_ACCESS") &&
		   !strcmp(proto_event_name(HSMFS_EV_PRE_MODIFY), "PRE_MODIFY") &&
		   !strcmp(proto_event_name(HSMFS_EV_OPEN_PERM), "OPEN_PERM") &&
		   !strcmp(proto_event_name(HSMFS_EV_ACCESS_PERM), "ACCESS_PERM") &&
		   !strcmp(proto_event_name(HSMFS_EV_PRE_DIR), "PRE_DIR") &&
		   !strcmp(proto_event_name(HSMFS_EV_PRE_LOOKUP), "PRE_LOOKUP"),
	   "event names as hsmfs-hooks(7) spells them");
	ok(!strcmp(proto_event_name(0), "UNKNOWN") && !strcmp(proto_event_name(99), "UNKNOWN"),
	   "an undefined event type is UNKNOWN");

	/* limits */
	static char big[HSMFS_MAX_FRAME];
	memset(big, 'x', sizeof(big));
	struct proto_error huge = { 1, { big, 65535 } };
	ok(proto_enc_error(buf, &huge) == -EMSGSIZE, "encoder refuses a frame over the maximum");
	ok(proto_peek(buf, HSMFS_MAX_FRAME + 1, &t) == -EBADMSG, "peek refuses oversized packets");
	ok(proto_peek(buf, 7, &t) == -EBADMSG, "peek refuses packets shorter than a header");
	return tap_done();
}
