/*
 * proto.h - encode and decode hook protocol frames (hsmfs/protocol.h).
 *
 * Pure module: no I/O, no allocation.  Encoders write into a caller's
 * buffer of HSMFS_MAX_FRAME bytes and return the frame length, or
 * -EMSGSIZE if the message does not fit (a string too long).  Decoders
 * take one received packet and return 0 or -EBADMSG: the length field
 * must equal the packet size, the frame must be within HSMFS_MAX_FRAME,
 * the body must be exactly as long as the message (no short reads, no
 * bytes left over).  Decoded strings point into the packet and are NUL
 * terminated copies only where the struct says so.
 */
#ifndef HSMFS_PROTO_H
#define HSMFS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "hsmfs/protocol.h"

struct proto_str {
	const char *p; /* into the packet; not NUL-terminated */
	uint16_t len;
};

struct proto_hello {
	uint32_t version_min, version_max, kind, mask;
	struct proto_str name, subtree;
};

struct proto_welcome {
	uint32_t version, max_frame, chunk, timeout_ms;
};

struct proto_event {
	uint64_t id;
	uint32_t type, pid, uid, gid;
	uint64_t file_id, file_size, start, end, hint_start, hint_end;
	struct proto_str path, origin, version;
	uint16_t flags;
};

struct proto_answer {
	uint64_t id;
	uint32_t verdict, error;
	uint64_t filled_start, filled_end;
	uint16_t flags;
};

struct proto_progress {
	uint64_t id, bytes_done;
};

struct proto_filled {
	uint64_t id, filled_start, filled_end;
};

struct proto_archived {
	uint64_t id;
	struct proto_str version, origin;
};

struct proto_stats {
	struct proto_str counters;
};

struct proto_cancel {
	uint64_t id;
	uint32_t reason;
};

struct proto_error {
	uint32_t code;
	struct proto_str message;
};

/*
 * The name of event type type as hsmfs-hooks(7) spells it ("PRE_ACCESS"),
 * or "UNKNOWN" for a type the protocol does not define.  Static storage.
 */
const char *proto_event_name(uint32_t type);

/* Type of a packet after checking its header (-EBADMSG if bad). */
int proto_peek(const uint8_t *pkt, size_t len, uint16_t *ret_type);

int proto_enc_hello(uint8_t *buf, const struct proto_hello *m);
int proto_enc_welcome(uint8_t *buf, const struct proto_welcome *m);
int proto_enc_event(uint8_t *buf, const struct proto_event *m);
int proto_enc_answer(uint8_t *buf, const struct proto_answer *m);
int proto_enc_progress(uint8_t *buf, const struct proto_progress *m);
int proto_enc_filled(uint8_t *buf, const struct proto_filled *m);
int proto_enc_archived(uint8_t *buf, const struct proto_archived *m);
int proto_enc_stats(uint8_t *buf, const struct proto_stats *m);
int proto_enc_cancel(uint8_t *buf, const struct proto_cancel *m);
int proto_enc_error(uint8_t *buf, const struct proto_error *m);

int proto_dec_hello(const uint8_t *pkt, size_t len, struct proto_hello *ret);
int proto_dec_welcome(const uint8_t *pkt, size_t len, struct proto_welcome *ret);
int proto_dec_event(const uint8_t *pkt, size_t len, struct proto_event *ret);
int proto_dec_answer(const uint8_t *pkt, size_t len, struct proto_answer *ret);
int proto_dec_progress(const uint8_t *pkt, size_t len, struct proto_progress *ret);
int proto_dec_filled(const uint8_t *pkt, size_t len, struct proto_filled *ret);
int proto_dec_archived(const uint8_t *pkt, size_t len, struct proto_archived *ret);
int proto_dec_stats(const uint8_t *pkt, size_t len, struct proto_stats *ret);
int proto_dec_cancel(const uint8_t *pkt, size_t len, struct proto_cancel *ret);
int proto_dec_error(const uint8_t *pkt, size_t len, struct proto_error *ret);

#endif
