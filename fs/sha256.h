/*
 * sha256.h - SHA-256 (FIPS 180-4), for verifying files against the
 * digest a manifest recorded.
 *
 * Pure module: no I/O, no locks, no allocation.  Feed bytes with
 * sha256_update() in any pieces; sha256_final() gives the digest, and
 * sha256_hex() its 64 lowercase hex digits (the manifest's form).
 */
#ifndef HSMFS_SHA256_H
#define HSMFS_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
	uint32_t h[8];     /* the state */
	uint64_t len;      /* bytes fed so far */
	uint8_t buf[64];   /* a block not yet complete */
	size_t nbuf;       /* bytes in buf */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
void sha256_final(struct sha256 *s, uint8_t out[32]);
/* The digest of what was fed, as 64 hex digits and a NUL; s is spent. */
void sha256_hex(struct sha256 *s, char out[65]);

#endif
