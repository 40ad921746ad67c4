/* proto.c - see proto.h */
#include <errno.h>
#include <string.h>

#include "proto.h"

const char *proto_event_name(uint32_t type)
{
	switch (type) {
	case HSMFS_EV_PRE_ACCESS:
		return "PRE_ACCESS";
	case HSMFS_EV_PRE_MODIFY:
		return "PRE_MODIFY";
	case HSMFS_EV_OPEN_PERM:
		return "OPEN_PERM";
	case HSMFS_EV_ACCESS_PERM:
		return "ACCESS_PERM";
	case HSMFS_EV_PRE_DIR:
		return "PRE_DIR";
	case HSMFS_EV_PRE_LOOKUP:
		return "PRE_LOOKUP";
	case HSMFS_EV_ARCHIVE:
		return "ARCHIVE";
	case HSMFS_EV_ARCHIVE_NAME:
		return "ARCHIVE_NAME";
	}
	return "UNKNOWN";
}

/* A cursor over a frame; any overrun sets bad and sticks. */
struct cur {
	uint8_t *w;       /* encoding: output buffer */
	const uint8_t *r; /* decoding: input packet */
	size_t len;       /* bytes available */
	size_t pos;
	int bad;
};

static void put(struct cur *c, uint64_t v, int n)
{
	if (c->bad || c->pos + n > c->len) {
		c->bad = 1;
		return;
	}
	for (int i = 0; i < n; i++)
		c->w[c->pos++] = v >> (8 * i);
}

static void put_str(struct cur *c, struct proto_str s)
{
	put(c, s.len, 2);
	if (c->bad || c->pos + s.len > c->len) {
		c->bad = 1;
		return;
	}
	if (s.len)
		memcpy(c->w + c->pos, s.p, s.len);
	c->pos += s.len;
}

static uint64_t get(struct cur *c, int n)
{
	uint64_t v = 0;

	if (c->bad || c->pos + n > c->len) {
		c->bad = 1;
		return 0;
	}
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | c->r[c->pos + i];
	c->pos += n;
	return v;
}

static struct proto_str get_str(struct cur *c)
{
	struct proto_str s = { NULL, 0 };
	uint16_t n = get(c, 2);

	if (c->bad || c->pos + n > c->len) {
		c->bad = 1;
		return s;
	}
	s.p = (const char *)c->r + c->pos;
	s.len = n;
	c->pos += n;
	return s;
}

static struct cur enc_begin(uint8_t *buf, uint16_t type, uint16_t flags)
{
	struct cur c = { .w = buf, .len = HSMFS_MAX_FRAME };

	put(&c, 0, 4); /* length, patched by enc_end */
	put(&c, type, 2);
	put(&c, flags, 2);
	return c;
}

static int enc_end(struct cur *c)
{
	size_t n = c->pos;

	if (c->bad)
		return -EMSGSIZE;
	c->pos = 0;
	put(c, n, 4);
	return (int)n;
}

int proto_peek(const uint8_t *pkt, size_t len, uint16_t *ret_type)
{
	struct cur c = { .r = pkt, .len = len };
	uint32_t flen;

	if (len < HSMFS_HDR_SIZE || len > HSMFS_MAX_FRAME)
		return -EBADMSG;
	flen = get(&c, 4);
	if (flen != len)
		return -EBADMSG;
	*ret_type = get(&c, 2);
	return 0;
}

/* Start decoding a frame of the given type; returns its flags in *flags. */
static int dec_begin(struct cur *c, const uint8_t *pkt, size_t len,
		     uint16_t type, uint16_t *flags)
{
	uint16_t t;

	if (proto_peek(pkt, len, &t) || t != type)
		return -EBADMSG;
	*c = (struct cur){ .r = pkt, .len = len, .pos = 6 };
	*flags = get(c, 2);
	return 0;
}

static int dec_end(const struct cur *c)
{
	return c->bad || c->pos != c->len ? -EBADMSG : 0;
}

int proto_enc_hello(uint8_t *buf, const struct proto_hello *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_HELLO, 0);

	put(&c, m->version_min, 4);
	put(&c, m->version_max, 4);
	put(&c, m->kind, 4);
	put(&c, m->mask, 4);
	put_str(&c, m->name);
	put_str(&c, m->subtree);
	return enc_end(&c);
}

int proto_dec_hello(const uint8_t *pkt, size_t len, struct proto_hello *ret)
{
	struct proto_hello m;
	struct cur c;
	uint16_t flags;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_HELLO, &flags))
		return -EBADMSG;
	m.version_min = get(&c, 4);
	m.version_max = get(&c, 4);
	m.kind = get(&c, 4);
	m.mask = get(&c, 4);
	m.name = get_str(&c);
	m.subtree = get_str(&c);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_welcome(uint8_t *buf, const struct proto_welcome *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_WELCOME, 0);

	put(&c, m->version, 4);
	put(&c, m->max_frame, 4);
	put(&c, m->chunk, 4);
	put(&c, m->timeout_ms, 4);
	return enc_end(&c);
}

int proto_dec_welcome(const uint8_t *pkt, size_t len, struct proto_welcome *ret)
{
	struct proto_welcome m;
	struct cur c;
	uint16_t flags;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_WELCOME, &flags))
		return -EBADMSG;
	m.version = get(&c, 4);
	m.max_frame = get(&c, 4);
	m.chunk = get(&c, 4);
	m.timeout_ms = get(&c, 4);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_event(uint8_t *buf, const struct proto_event *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_EVENT, m->flags);

	put(&c, m->id, 8);
	put(&c, m->type, 4);
	put(&c, m->pid, 4);
	put(&c, m->uid, 4);
	put(&c, m->gid, 4);
	put(&c, m->file_id, 8);
	put(&c, m->file_size, 8);
	put(&c, m->start, 8);
	put(&c, m->end, 8);
	put(&c, m->hint_start, 8);
	put(&c, m->hint_end, 8);
	put_str(&c, m->path);
	put_str(&c, m->origin);
	put_str(&c, m->version);
	return enc_end(&c);
}

int proto_dec_event(const uint8_t *pkt, size_t len, struct proto_event *ret)
{
	struct proto_event m;
	struct cur c;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_EVENT, &m.flags))
		return -EBADMSG;
	m.id = get(&c, 8);
	m.type = get(&c, 4);
	m.pid = get(&c, 4);
	m.uid = get(&c, 4);
	m.gid = get(&c, 4);
	m.file_id = get(&c, 8);
	m.file_size = get(&c, 8);
	m.start = get(&c, 8);
	m.end = get(&c, 8);
	m.hint_start = get(&c, 8);
	m.hint_end = get(&c, 8);
	m.path = get_str(&c);
	m.origin = get_str(&c);
	m.version = get_str(&c);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_answer(uint8_t *buf, const struct proto_answer *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_ANSWER, m->flags);

	put(&c, m->id, 8);
	put(&c, m->verdict, 4);
	put(&c, m->error, 4);
	put(&c, m->filled_start, 8);
	put(&c, m->filled_end, 8);
	return enc_end(&c);
}

int proto_dec_answer(const uint8_t *pkt, size_t len, struct proto_answer *ret)
{
	struct proto_answer m;
	struct cur c;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_ANSWER, &m.flags))
		return -EBADMSG;
	m.id = get(&c, 8);
	m.verdict = get(&c, 4);
	m.error = get(&c, 4);
	m.filled_start = get(&c, 8);
	m.filled_end = get(&c, 8);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_progress(uint8_t *buf, const struct proto_progress *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_PROGRESS, 0);

	put(&c, m->id, 8);
	put(&c, m->bytes_done, 8);
	return enc_end(&c);
}

int proto_dec_progress(const uint8_t *pkt, size_t len, struct proto_progress *ret)
{
	struct proto_progress m;
	struct cur c;
	uint16_t flags;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_PROGRESS, &flags))
		return -EBADMSG;
	m.id = get(&c, 8);
	m.bytes_done = get(&c, 8);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_filled(uint8_t *buf, const struct proto_filled *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_FILLED, 0);

	put(&c, m->id, 8);
	put(&c, m->filled_start, 8);
	put(&c, m->filled_end, 8);
	return enc_end(&c);
}

int proto_dec_filled(const uint8_t *pkt, size_t len, struct proto_filled *ret)
{
	struct proto_filled m;
	struct cur c;
	uint16_t flags;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_FILLED, &flags))
		return -EBADMSG;
	m.id = get(&c, 8);
	m.filled_start = get(&c, 8);
	m.filled_end = get(&c, 8);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_archived(uint8_t *buf, const struct proto_archived *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_ARCHIVED, 0);

	put(&c, m->id, 8);
	put_str(&c, m->version);
	put_str(&c, m->origin);
	return enc_end(&c);
}

int proto_dec_archived(const uint8_t *pkt, size_t len, struct proto_archived *ret)
{
	struct proto_archived m;
	struct cur c;
	uint16_t flags;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_ARCHIVED, &flags))
		return -EBADMSG;
	m.id = get(&c, 8);
	m.version = get_str(&c);
	m.origin = get_str(&c);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_stats(uint8_t *buf, const struct proto_stats *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_STATS, 0);

	put_str(&c, m->counters);
	return enc_end(&c);
}

int proto_dec_stats(const uint8_t *pkt, size_t len, struct proto_stats *ret)
{
	struct proto_stats m;
	struct cur c;
	uint16_t flags;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_STATS, &flags))
		return -EBADMSG;
	m.counters = get_str(&c);
	if (dec_end(&c) || m.counters.len > HSMFS_MAX_STATS)
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_cancel(uint8_t *buf, const struct proto_cancel *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_CANCEL, 0);

	put(&c, m->id, 8);
	put(&c, m->reason, 4);
	return enc_end(&c);
}

int proto_dec_cancel(const uint8_t *pkt, size_t len, struct proto_cancel *ret)
{
	struct proto_cancel m;
	struct cur c;
	uint16_t flags;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_CANCEL, &flags))
		return -EBADMSG;
	m.id = get(&c, 8);
	m.reason = get(&c, 4);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int proto_enc_error(uint8_t *buf, const struct proto_error *m)
{
	struct cur c = enc_begin(buf, HSMFS_MSG_ERROR, 0);

	put(&c, m->code, 4);
	put_str(&c, m->message);
	return enc_end(&c);
}

int proto_dec_error(const uint8_t *pkt, size_t len, struct proto_error *ret)
{
	struct proto_error m;
	struct cur c;
	uint16_t flags;

	if (dec_begin(&c, pkt, len, HSMFS_MSG_ERROR, &flags))
		return -EBADMSG;
	m.code = get(&c, 4);
	m.message = get_str(&c);
	if (dec_end(&c))
		return -EBADMSG;
	*ret = m;
	return 0;
}
