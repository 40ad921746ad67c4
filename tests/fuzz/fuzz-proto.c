/*
 * fuzz-proto.c - the hook protocol decoders against arbitrary packets.
 *
 * Built two ways: with clang -fsanitize=fuzzer as a libFuzzer target
 * (meson option fuzz=true), and always as a replay program that runs
 * every file named on its command line through the same entry point, so
 * the corpus in tests/fuzz/corpus-proto/ is a regression test in
 * `meson test`.  Any decoded string must lie inside the packet.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static void in_packet(const uint8_t *pkt, size_t len, struct proto_str s)
{
	if (s.len && ((const uint8_t *)s.p < pkt ||
		      (const uint8_t *)s.p + s.len > pkt + len))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	union {
		struct proto_hello h;
		struct proto_welcome w;
		struct proto_event e;
		struct proto_answer a;
		struct proto_progress p;
		struct proto_filled f;
		struct proto_cancel c;
		struct proto_error er;
	} m;
	uint16_t type;
	uint8_t out[HSMFS_MAX_FRAME];

	if (proto_peek(data, size, &type))
		return 0;
	switch (type) {
	case HSMFS_MSG_HELLO:
		if (!proto_dec_hello(data, size, &m.h)) {
			in_packet(data, size, m.h.name);
			in_packet(data, size, m.h.subtree);
			/* re-encoding a decoded frame gives the same bytes */
			if (proto_enc_hello(out, &m.h) != (int)size ||
			    memcmp(out + 8, data + 8, size - 8))
				abort();
		}
		break;
	case HSMFS_MSG_WELCOME: proto_dec_welcome(data, size, &m.w); break;
	case HSMFS_MSG_EVENT:
		if (!proto_dec_event(data, size, &m.e)) {
			in_packet(data, size, m.e.path);
			in_packet(data, size, m.e.origin);
			in_packet(data, size, m.e.version);
		}
		break;
	case HSMFS_MSG_ANSWER: proto_dec_answer(data, size, &m.a); break;
	case HSMFS_MSG_PROGRESS: proto_dec_progress(data, size, &m.p); break;
	case HSMFS_MSG_FILLED: proto_dec_filled(data, size, &m.f); break;
	case HSMFS_MSG_CANCEL: proto_dec_cancel(data, size, &m.c); break;
	case HSMFS_MSG_ERROR:
		if (!proto_dec_error(data, size, &m.er))
			in_packet(data, size, m.er.message);
		break;
	default: break;
	}
	return 0;
}

#include "replay.h"
