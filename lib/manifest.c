/* manifest.c - see manifest.h */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "manifest.h"
#include "ranges.h"

struct p {
	const char *s, *end;
	char *err;
	size_t errlen;
};

static int fail(struct p *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int fail(struct p *p, const char *fmt, ...)
{
	va_list ap;

	if (p->errlen) {
		va_start(ap, fmt);
		vsnprintf(p->err, p->errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static void ws(struct p *p)
{
	while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\r' ||
				 *p->s == '\n'))
		p->s++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int hex4(struct p *p, unsigned *ret)
{
	unsigned v = 0;

	if (p->end - p->s < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int h = hexval(p->s[i]);

		if (h < 0)
			return -1;
		v = v << 4 | h;
	}
	p->s += 4;
	*ret = v;
	return 0;
}

/* A JSON string into a new buffer (*ret, length *ret_len). */
static int string(struct p *p, char **ret, size_t *ret_len)
{
	char *out, *w;

	if (p->s >= p->end || *p->s != '"')
		return fail(p, "expected a string");
	p->s++;
	out = w = malloc(p->end - p->s + 1);
	if (!out)
		return fail(p, "out of memory");
	while (p->s < p->end && *p->s != '"') {
		unsigned char c = *p->s++;

		if (c < 0x20) {
			free(out);
			return fail(p, "control character in a string");
		}
		if (c != '\\') {
			*w++ = c;
			continue;
		}
		if (p->s >= p->end)
			break;
		c = *p->s++;
		switch (c) {
		case '"': case '\\': case '/': *w++ = c; break;
		case 'b': *w++ = '\b'; break;
		case 'f': *w++ = '\f'; break;
		case 'n': *w++ = '\n'; break;
		case 'r': *w++ = '\r'; break;
		case 't': *w++ = '\t'; break;
		case 'u': {
			unsigned u, lo;

			if (hex4(p, &u))
				goto bad_escape;
			if (u >= 0xd800 && u < 0xdc00) {
				if (p->end - p->s < 6 || p->s[0] != '\\' || p->s[1] != 'u')
					goto bad_escape;
				p->s += 2;
				if (hex4(p, &lo) || lo < 0xdc00 || lo >= 0xe000)
					goto bad_escape;
				u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
			} else if (u >= 0xdc00 && u < 0xe000) {
				goto bad_escape;
			}
			if (!u) {
				/* every string is a C string: a NUL would cut it short */
				free(out);
				return fail(p, "NUL (\\u0000) in a string");
			}
			if (u < 0x80) {
				*w++ = u;
			} else if (u < 0x800) {
				*w++ = 0xc0 | u >> 6;
				*w++ = 0x80 | (u & 0x3f);
			} else if (u < 0x10000) {
				*w++ = 0xe0 | u >> 12;
				*w++ = 0x80 | ((u >> 6) & 0x3f);
				*w++ = 0x80 | (u & 0x3f);
			} else {
				*w++ = 0xf0 | u >> 18;
				*w++ = 0x80 | ((u >> 12) & 0x3f);
				*w++ = 0x80 | ((u >> 6) & 0x3f);
				*w++ = 0x80 | (u & 0x3f);
			}
			break;
		}
		default:
			goto bad_escape;
		}
	}
	if (p->s >= p->end) {
		free(out);
		return fail(p, "unterminated string");
	}
	p->s++;
	*w = '\0';
	*ret = out;
	*ret_len = w - out;
	return 0;
bad_escape:
	free(out);
	return fail(p, "bad escape in a string");
}

/* A JSON number that must be an integer. */
static int integer(struct p *p, const char *key, int64_t *ret)
{
	const char *start = p->s;
	char buf[32], *end;
	long long v;

	if (p->s < p->end && *p->s == '-')
		p->s++;
	while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
		p->s++;
	if (p->s < p->end && (*p->s == '.' || *p->s == 'e' || *p->s == 'E'))
		return fail(p, "'%s' must be a whole number", key);
	if (p->s == start && p->s >= p->end)
		return fail(p, "the line ends where '%s' should have its value (truncated?)", key);
	if (p->s == start || p->s - start >= (long)sizeof(buf) ||
	    (p->s - start == 1 && *start == '-'))
		return fail(p, "'%s' must be a number", key);
	memcpy(buf, start, p->s - start);
	buf[p->s - start] = '\0';
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (errno || *end)
		return fail(p, "'%s' is out of range", key);
	if (buf[0] == '0' && buf[1])
		return fail(p, "'%s' has a leading zero", key);
	*ret = v;
	return 0;
}

/* Skip any JSON value of a key we do not know. */
static int skip_value(struct p *p, int depth)
{
	char *s;
	size_t n;

	ws(p);
	if (depth > 32)
		return fail(p, "nested too deeply");
	if (p->s >= p->end)
		return fail(p, "expected a value");
	if (*p->s == '"') {
		if (string(p, &s, &n))
			return -EINVAL;
		free(s);
		return 0;
	}
	if (*p->s == '{' || *p->s == '[') {
		char close = *p->s == '{' ? '}' : ']';

		p->s++;
		ws(p);
		if (p->s < p->end && *p->s == close) {
			p->s++;
			return 0;
		}
		for (;;) {
			if (close == '}') {
				ws(p);
				if (string(p, &s, &n))
					return -EINVAL;
				free(s);
				ws(p);
				if (p->s >= p->end || *p->s++ != ':')
					return fail(p, "expected ':'");
			}
			if (skip_value(p, depth + 1))
				return -EINVAL;
			ws(p);
			if (p->s < p->end && *p->s == ',') {
				p->s++;
				continue;
			}
			if (p->s < p->end && *p->s == close) {
				p->s++;
				return 0;
			}
			return fail(p, "expected ',' or '%c'", close);
		}
	}
	if (p->end - p->s >= 4 && !strncmp(p->s, "true", 4)) {
		p->s += 4;
		return 0;
	}
	if (p->end - p->s >= 5 && !strncmp(p->s, "false", 5)) {
		p->s += 5;
		return 0;
	}
	if (p->end - p->s >= 4 && !strncmp(p->s, "null", 4)) {
		p->s += 4;
		return 0;
	}
	while (p->s < p->end && strchr("-+.eE0123456789", *p->s))
		p->s++;
	return 0;
}

int manifest_check_path(const char *path, size_t len, char *err, size_t errlen)
{
	struct p p = { .err = err, .errlen = errlen };
	size_t i = 0;

	if (!len)
		return fail(&p, "empty path");
	if (memchr(path, '\0', len))
		return fail(&p, "NUL byte in path");
	if (path[0] == '/')
		return fail(&p, "absolute path '%.*s'", (int)len, path);
	if (len > 4095)
		return fail(&p, "path longer than 4095 bytes");
	while (i < len) {
		size_t j = i;

		while (j < len && path[j] != '/')
			j++;
		if (j == i)
			return fail(&p, "empty component in '%.*s'", (int)len, path);
		if (j - i > 255)
			return fail(&p, "component longer than 255 bytes");
		if ((j - i == 1 && path[i] == '.') ||
		    (j - i == 2 && path[i] == '.' && path[i + 1] == '.'))
			return fail(&p, "'.' or '..' component in '%.*s'", (int)len, path);
		if (i == 0 && j - i == 6 && !memcmp(path, ".hsmfs", 6))
			return fail(&p, "'.hsmfs' is reserved");
		if (j == len - 1)
			return fail(&p, "trailing '/' in '%.*s'", (int)len, path);
		i = j + 1;
	}
	return 0;
}

/*
 * The start of an array (what for: its key or a phrase, for the
 * message): 1 when an element follows, 0 for "[]", or -EINVAL (said).
 */
static int array_open(struct p *p, const char *what)
{
	if (p->s >= p->end || *p->s++ != '[')
		return fail(p, "%s must be an array", what);
	ws(p);
	if (p->s < p->end && *p->s == ']') {
		p->s++;
		return 0;
	}
	return 1;
}

/* After an element: 1 when another follows, 0 at the "]", or -EINVAL. */
static int array_next(struct p *p, const char *key)
{
	ws(p);
	if (p->s < p->end && *p->s == ',') {
		p->s++;
		return 1;
	}
	if (p->s < p->end && *p->s == ']') {
		p->s++;
		return 0;
	}
	return fail(p, "expected ',' or ']' in '%s'", key);
}

/*
 * "chunk_sha256": an array of 64-lowercase-hex strings, into
 * e->chunk_sha256 (32 bytes each) and e->nchunks.  0 or -EINVAL (said).
 */
static int digest_array(struct p *p, struct manifest_entry *e)
{
	size_t cap = 0;
	int more = array_open(p, "'chunk_sha256'");

	while (more > 0) {
		char *hex;
		size_t n;

		ws(p);
		if (string(p, &hex, &n))
			return -EINVAL;
		if (n != 64 || strspn(hex, "0123456789abcdef") != 64) {
			free(hex);
			return fail(p, "each 'chunk_sha256' must be 64 lowercase hex digits");
		}
		if (!e->chunks || e->nchunks == cap) {
			uint8_t *grown;

			cap = cap ? 2 * cap : 16;
			grown = realloc(e->chunks, 4 + cap * 32);
			if (!grown) {
				free(hex);
				return fail(p, "out of memory");
			}
			e->chunks = grown;
		}
		for (size_t i = 0; i < 32; i++)
			e->chunks[4 + (size_t)e->nchunks * 32 + i] =
				(uint8_t)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
		e->nchunks++;
		e->chunks_len = 4 + (size_t)e->nchunks * 32;
		free(hex);
		more = array_next(p, "chunk_sha256");
	}
	return more;
}

/*
 * "holes": an array of [offset, length] pairs, into e->holes (merged);
 * each within [0, 2^63), length > 0.  Checked against the size once
 * both are read.  0 or -EINVAL (said).
 */
static int hole_array(struct p *p, struct manifest_entry *e)
{
	int more = array_open(p, "'holes'");

	while (more > 0) {
		int64_t off, len;

		ws(p);
		if (p->s >= p->end || *p->s++ != '[')
			return fail(p, "each of 'holes' must be an [offset, length] pair");
		ws(p);
		if (integer(p, "holes", &off))
			return -EINVAL;
		ws(p);
		if (p->s >= p->end || *p->s++ != ',')
			return fail(p, "each of 'holes' must be an [offset, length] pair");
		ws(p);
		if (integer(p, "holes", &len))
			return -EINVAL;
		ws(p);
		if (p->s >= p->end || *p->s++ != ']')
			return fail(p, "each of 'holes' must be an [offset, length] pair");
		if (off < 0 || len <= 0 || len > INT64_MAX - off)
			return fail(p, "a hole must have an offset >= 0 and a length > 0");
		if (rs_add(&e->holes, (uint64_t)off, (uint64_t)(off + len)))
			return fail(p, "out of memory");
		more = array_next(p, "holes");
	}
	return more;
}

int manifest_parse_line(const char *line, size_t len, struct manifest_entry *ret,
			char *err, size_t errlen)
{
	struct p p = { line, line + len, err, errlen };
	struct manifest_entry e = { .mode = 0644 };
	bool has_path = false, has_size = false, has_type = false, has_chunks = false;
	bool has_holes = false;
	int res = -EINVAL;

	if (len > MANIFEST_MAX_LINE)
		return fail(&p, "line longer than %d bytes", MANIFEST_MAX_LINE);
	ws(&p);
	if (p.s >= p.end || *p.s != '{')
		return fail(&p, "expected a JSON object");
	p.s++;
	ws(&p);
	if (p.s < p.end && *p.s == '}') {
		p.s++;
		goto end;
	}
	for (;;) {
		char *key, *sval;
		size_t klen, slen;
		int64_t v;

		ws(&p);
		if (string(&p, &key, &klen))
			goto out;
		ws(&p);
		if (p.s >= p.end || *p.s++ != ':') {
			free(key);
			fail(&p, "expected ':' after a key");
			goto out;
		}
		ws(&p);
		char **dst = !strcmp(key, "path")    ? &e.path :
			     !strcmp(key, "url")     ? &e.url :
			     !strcmp(key, "version") ? &e.version :
			     !strcmp(key, "sha256")  ? &e.sha256 :
			     !strcmp(key, "partial") ? &e.partial : NULL;
		if (dst) {
			if (*dst) {
				fail(&p, "duplicate key '%s'", key);
				free(key);
				goto out;
			}
			if (p.s < p.end && *p.s == 'n' && dst != &e.path &&
			    p.end - p.s >= 4 && !strncmp(p.s, "null", 4)) {
				p.s += 4;
			} else if (string(&p, &sval, &slen)) {
				free(key);
				goto out;
			} else {
				*dst = sval;
				if (dst == &e.path) {
					has_path = true;
					/* "." is the directory itself: a "partial" line */
					if (strcmp(sval, ".") &&
					    manifest_check_path(sval, slen, err, errlen)) {
						free(key);
						goto out;
					}
				} else if (memchr(sval, '\0', slen)) {
					fail(&p, "NUL byte in '%s'", key);
					free(key);
					goto out;
				}
			}
		} else if (!strcmp(key, "size") || !strcmp(key, "mtime")) {
			bool is_size = key[0] == 's';

			if ((is_size && has_size) || (!is_size && e.has_mtime)) {
				fail(&p, "duplicate key '%s'", key);
				free(key);
				goto out;
			}
			if (integer(&p, key, &v)) {
				free(key);
				goto out;
			}
			if (is_size) {
				if (v < 0) {
					fail(&p, "negative size");
					free(key);
					goto out;
				}
				e.size = v;
				has_size = true;
			} else {
				e.mtime = v;
				e.has_mtime = true;
			}
		} else if (!strcmp(key, "chunk_size")) {
			if (e.chunk_size) {
				fail(&p, "duplicate key '%s'", key);
				free(key);
				goto out;
			}
			if (integer(&p, key, &v)) {
				free(key);
				goto out;
			}
			if (v < MANIFEST_CHUNK_MIN || v > MANIFEST_CHUNK_MAX || (v & (v - 1))) {
				fail(&p, "'chunk_size' must be a power of two from 4096 to 2^30");
				free(key);
				goto out;
			}
			e.chunk_size = (uint32_t)v;
		} else if (!strcmp(key, "chunk_sha256")) {
			if (has_chunks) {
				fail(&p, "duplicate key '%s'", key);
				free(key);
				goto out;
			}
			has_chunks = true;
			if (digest_array(&p, &e)) {
				free(key);
				goto out;
			}
		} else if (!strcmp(key, "holes")) {
			if (has_holes) {
				fail(&p, "duplicate key '%s'", key);
				free(key);
				goto out;
			}
			has_holes = true;
			if (hole_array(&p, &e)) {
				free(key);
				goto out;
			}
		} else if (!strcmp(key, "type")) {
			if (has_type) {
				fail(&p, "duplicate key '%s'", key);
				free(key);
				goto out;
			}
			if (string(&p, &sval, &slen)) {
				free(key);
				goto out;
			}
			has_type = true;
			if (!strcmp(sval, "dir") || !strcmp(sval, "directory")) {
				e.is_dir = true;
			} else if (strcmp(sval, "file")) {
				free(sval);
				fail(&p, "'type' must be \"file\" or \"dir\"");
				free(key);
				goto out;
			}
			free(sval);
		} else if (!strcmp(key, "mode")) {
			if (p.s < p.end && *p.s == '"') {
				char *end;

				if (string(&p, &sval, &slen)) {
					free(key);
					goto out;
				}
				errno = 0;
				v = strtol(sval, &end, 8);
				if (!slen || *end || errno || v < 0 || v > 07777) {
					free(sval);
					fail(&p, "'mode' must be octal permission bits");
					free(key);
					goto out;
				}
				free(sval);
			} else if (integer(&p, key, &v) || v < 0 || v > 07777) {
				fail(&p, "'mode' must be permission bits");
				free(key);
				goto out;
			}
			e.mode = v;
		} else if (skip_value(&p, 0)) {
			free(key);
			goto out;
		}
		free(key);
		ws(&p);
		if (p.s < p.end && *p.s == ',') {
			p.s++;
			continue;
		}
		if (p.s < p.end && *p.s == '}') {
			p.s++;
			break;
		}
		fail(&p, "expected ',' or '}'");
		goto out;
	}
end:
	ws(&p);
	if (p.s != p.end) {
		fail(&p, "text after the JSON object");
		goto out;
	}
	if (!has_path) {
		fail(&p, "missing 'path'");
		goto out;
	}
	if (!strcmp(e.path, ".") != !!e.partial) {
		fail(&p, e.partial ? "'partial' is said of the path \".\" only" :
				     "'.' or '..' component in '.'");
		goto out;
	}
	if (e.is_dir && e.sha256) {
		fail(&p, "a directory has no 'sha256'");
		goto out;
	}
	if (!has_size && !e.is_dir) {
		fail(&p, "missing 'size'");
		goto out;
	}
	if (e.sha256 && (strlen(e.sha256) != 64 ||
			 strspn(e.sha256, "0123456789abcdef") != 64)) {
		fail(&p, "'sha256' must be 64 lowercase hex digits");
		goto out;
	}
	if (!e.chunk_size != !has_chunks) {
		fail(&p, "'chunk_size' and 'chunk_sha256' go together");
		goto out;
	}
	if (has_holes && e.is_dir) {
		fail(&p, "a directory has no 'holes'");
		goto out;
	}
	if (e.holes.n && e.holes.v[e.holes.n - 1].end > e.size) {
		fail(&p, "a hole ends at %llu, past the size %llu",
		     (unsigned long long)e.holes.v[e.holes.n - 1].end, (unsigned long long)e.size);
		goto out;
	}
	if (has_chunks && e.is_dir) {
		fail(&p, "a directory has no 'chunk_sha256'");
		goto out;
	}
	if (has_chunks && (uint64_t)e.nchunks != (e.size + e.chunk_size - 1) / e.chunk_size) {
		fail(&p, "'chunk_sha256' has %u digests, a file of %llu bytes %llu", e.nchunks,
		     (unsigned long long)e.size,
		     (unsigned long long)((e.size + e.chunk_size - 1) / e.chunk_size));
		goto out;
	}
	if (has_chunks && !e.chunks) {
		/* an empty file: its chunk size alone */
		e.chunks = malloc(4);
		if (!e.chunks) {
			fail(&p, "out of memory");
			goto out;
		}
		e.chunks_len = 4;
	}
	for (int i = 0; has_chunks && i < 4; i++)
		e.chunks[i] = (uint8_t)(e.chunk_size >> (8 * i));
	*ret = e;
	return 0;
out:
	manifest_entry_free(&e);
	return res;
}

void manifest_entry_free(struct manifest_entry *e)
{
	if (!e)
		return;
	free(e->path);
	free(e->url);
	free(e->version);
	free(e->sha256);
	free(e->partial);
	e->partial = NULL;
	free(e->chunks);
	rs_clear(&e->holes);
	e->path = e->url = e->version = e->sha256 = NULL;
	e->chunks = NULL;
	e->chunks_len = 0;
	e->nchunks = e->chunk_size = 0;
}

int manifest_parse_nginx(const char *json, size_t len, manifest_listing_cb cb,
			 void *arg, char *err, size_t errlen)
{
	struct p p = { json, json + len, err, errlen };

	ws(&p);
	if (p.s >= p.end || *p.s++ != '[')
		return fail(&p, "listing is not a JSON array");
	ws(&p);
	if (p.s < p.end && *p.s == ']') {
		p.s++;
		goto end;
	}
	for (;;) {
		char *name = NULL, *type = NULL, *mtime = NULL;
		int64_t size = 0;
		int res = 0;

		ws(&p);
		if (p.s >= p.end || *p.s++ != '{')
			return fail(&p, "expected an object in the listing");
		for (;;) {
			char *key, *val;
			size_t klen, vlen;

			ws(&p);
			if (p.s < p.end && *p.s == '}') {
				p.s++;
				break;
			}
			if (string(&p, &key, &klen))
				goto bad;
			ws(&p);
			if (p.s >= p.end || *p.s++ != ':') {
				free(key);
				fail(&p, "expected ':' after a key");
				goto bad;
			}
			ws(&p);
			char **dst = !strcmp(key, "name") ? &name :
				     !strcmp(key, "type") ? &type :
				     !strcmp(key, "mtime") ? &mtime : NULL;
			if (dst) {
				if (*dst || string(&p, &val, &vlen)) {
					if (*dst)
						fail(&p, "duplicate key '%s'", key);
					free(key);
					goto bad;
				}
				*dst = val;
			} else if (!strcmp(key, "size")) {
				if (integer(&p, key, &size) || size < 0) {
					if (size < 0)
						fail(&p, "negative size");
					free(key);
					goto bad;
				}
			} else if (skip_value(&p, 0)) {
				free(key);
				goto bad;
			}
			free(key);
			ws(&p);
			if (p.s < p.end && *p.s == ',')
				p.s++;
		}
		if (!name || !type) {
			fail(&p, "listing entry without name or type");
			goto bad;
		}
		if (!name[0] || strchr(name, '/') || !strcmp(name, ".") ||
		    !strcmp(name, "..") || strlen(name) > 255) {
			char shown[64];
			size_t k;

			/* named, but never with a byte that could forge a line */
			for (k = 0; name[k] && k < sizeof(shown) - 1; k++)
				shown[k] = (unsigned char)name[k] < 0x20 || name[k] == 0x7f ?
						   '?' : name[k];
			shown[k] = '\0';
			fail(&p, "bad name in listing: '%s'%s", shown, name[k] ? "..." : "");
			goto bad;
		}
		if (!strcmp(type, "file") || !strcmp(type, "directory"))
			res = cb(arg, name, type[0] == 'd', mtime ? mtime : "",
				 (uint64_t)size);
		free(name);
		free(type);
		free(mtime);
		if (res)
			return res;
		ws(&p);
		if (p.s < p.end && *p.s == ',') {
			p.s++;
			continue;
		}
		if (p.s < p.end && *p.s == ']') {
			p.s++;
			break;
		}
		return fail(&p, "expected ',' or ']' in the listing");
bad:
		free(name);
		free(type);
		free(mtime);
		return -EINVAL;
	}
end:
	ws(&p);
	if (p.s != p.end)
		return fail(&p, "text after the listing");
	return 0;
}

/* The first occurrence of needle in [s, end), ASCII case ignored, or NULL. */
static const char *find_ci(const char *s, const char *end, const char *needle)
{
	size_t n = strlen(needle);

	for (; s && (size_t)(end - s) >= n; s++)
		if (!strncasecmp(s, needle, n))
			return s;
	return NULL;
}

/* Code point v as UTF-8 at out (4 bytes of room): its length, or 0 (not one). */
static size_t utf8_put(unsigned long v, char *out)
{
	if (!v || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	if (v < 0x80) {
		out[0] = (char)v;
		return 1;
	}
	if (v < 0x800) {
		out[0] = (char)(0xc0 | v >> 6);
		out[1] = (char)(0x80 | (v & 0x3f));
		return 2;
	}
	if (v < 0x10000) {
		out[0] = (char)(0xe0 | v >> 12);
		out[1] = (char)(0x80 | ((v >> 6) & 0x3f));
		out[2] = (char)(0x80 | (v & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | v >> 18);
	out[1] = (char)(0x80 | ((v >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((v >> 6) & 0x3f));
	out[3] = (char)(0x80 | (v & 0x3f));
	return 4;
}

/*
 * An href's value [s, end) as a name: HTML entities (&amp; &lt; &gt;
 * &quot; &apos;, &#N; &#xH; as UTF-8), a leading "./" dropped, then
 * %-escapes decoded into out (size bytes).  1: a name; 0: not a name of
 * the directory (absolute, another site's, a query such as a sorting
 * link, a fragment, a NUL); -1: a link that cannot be read (an unknown
 * entity, a bad escape, too long), which fails the listing: a name
 * passed over would be taken for one the origin removed.
 */
static int href_decode(const char *s, const char *end, char *out, size_t size)
{
	char tmp[4096], *t = tmp;
	size_t n = 0, k = 0;
	const char *colon, *slash;

	while (s < end) {
		if (n + 5 >= sizeof(tmp))
			return -1;
		if (*s != '&') {
			tmp[n++] = *s++;
			continue;
		}
		static const struct { const char *name; char c; } ents[] = {
			{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' },
			{ "&apos;", '\'' },
		};
		size_t i;

		for (i = 0; i < sizeof(ents) / sizeof(ents[0]); i++) {
			size_t el = strlen(ents[i].name);

			if ((size_t)(end - s) >= el && !strncmp(s, ents[i].name, el)) {
				tmp[n++] = ents[i].c;
				s += el;
				break;
			}
		}
		if (i < sizeof(ents) / sizeof(ents[0]))
			continue;
		if (end - s > 3 && s[1] == '#') {
			const char *q = s + 2;
			bool hex = *q == 'x' || *q == 'X';
			unsigned long v = 0;
			size_t u;

			q += hex;
			while (q < end && *q != ';' && (hex ? hexval(*q) >= 0 : (*q >= '0' && *q <= '9')) &&
			       v <= 0x10ffff)
				v = v * (hex ? 16 : 10) + (unsigned)hexval(*q++);
			if (q < end && *q == ';' && (u = utf8_put(v, tmp + n))) {
				n += u;
				s = q + 1;
				continue;
			}
		}
		return -1;
	}
	/* absolute, another site's (a scheme: a colon before any slash), a query or a fragment */
	colon = memchr(t, ':', n);
	slash = memchr(t, '/', n);
	if (!n || t[0] == '/' || (colon && (!slash || colon < slash)) || memchr(t, '?', n) ||
	    memchr(t, '#', n))
		return 0;
	if (n >= 2 && t[0] == '.' && t[1] == '/') {
		t += 2; /* Apache writes "./a:b" for a name with a colon: no scheme */
		n -= 2;
	}
	for (size_t i = 0; i < n; i++) {
		if (k + 1 >= size)
			return -1;
		if (t[i] == '%') {
			int hi = i + 2 < n ? hexval(t[i + 1]) : -1, lo = hi >= 0 ? hexval(t[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				return -1;
			if (hi == 0 && lo == 0)
				return 0; /* a NUL: no name of a directory has one */
			out[k++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			out[k++] = t[i];
		}
	}
	out[k] = '\0';
	return 1;
}

bool manifest_html_is_index(const char *html, size_t len)
{
	const char *end = html + len, *t = find_ci(html, end, "<title>");

	return t && ((end - (t + 7) >= 9 && !strncasecmp(t + 7, "Index of ", 9)) ||
		     (end - (t + 7) >= 22 && !strncasecmp(t + 7, "Directory listing for ", 22)));
}

/*
 * The links of [s, end) to names of the directory, to cb.  strict: a
 * link that cannot be read fails (-EINVAL, err); else it is passed over.
 */
static int html_links(const char *s, const char *end, bool strict, manifest_listing_cb cb,
		      void *arg, char *err, size_t errlen)
{
	char last[4096] = "";

	while ((s = find_ci(s, end, "<a ")) != NULL) {
		const char *tag_end = memchr(s, '>', end - s), *h;
		char name[4096];
		bool is_dir;
		size_t n;
		int res;

		if (!tag_end)
			break;
		h = find_ci(s, tag_end, "href=");
		s = tag_end + 1;
		if (!h || h + 6 >= tag_end || (h[5] != '"' && h[5] != '\''))
			continue;
		{
			const char *v = h + 6, *q = memchr(v, h[5], tag_end - v);
			int d = q ? href_decode(v, q, name, sizeof(name)) : 0;

			if (d < 0 && !strict)
				continue;
			if (d < 0) {
				if (errlen)
					snprintf(err, errlen, "a link it cannot read: '%.*s'",
						 (int)(q - v < 100 ? q - v : 100), v);
				return -EINVAL;
			}
			if (!d)
				continue;
		}
		n = strlen(name);
		is_dir = n && name[n - 1] == '/';
		if (is_dir)
			name[--n] = '\0';
		if (!n || n > 255 || strchr(name, '/') || !strcmp(name, ".") ||
		    !strcmp(name, "..") || !strcmp(name, last))
			continue; /* the parent, a deeper path, or the same name again */
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
				goto next; /* no byte that could forge a line */
		snprintf(last, sizeof(last), "%s", name);
		res = cb(arg, name, is_dir, "", is_dir ? 0 : MANIFEST_SIZE_UNKNOWN);
		if (res)
			return res;
next:;
	}
	return 0;
}

int manifest_parse_html(const char *html, size_t len, manifest_listing_cb cb, void *arg,
			char *err, size_t errlen)
{
	if (!manifest_html_is_index(html, len)) {
		if (errlen)
			snprintf(err, errlen, "an HTML page, not a directory index (no <title>Index "
				 "of ...)");
		return -EINVAL;
	}
	return html_links(html, html + len, true, cb, arg, err, errlen);
}

int manifest_parse_page_links(const char *html, size_t len, manifest_listing_cb cb, void *arg)
{
	return html_links(html, html + len, false, cb, arg, NULL, 0);
}

int manifest_parse_listing(const char *text, size_t len, manifest_listing_cb cb, void *arg,
			   char *err, size_t errlen)
{
	size_t i = 0;

	while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' ||
			   text[i] == '\n'))
		i++;
	if (i < len && text[i] == '[')
		return manifest_parse_nginx(text, len, cb, arg, err, errlen);
	return manifest_parse_html(text, len, cb, arg, err, errlen);
}

/* Text of the first <tag>...</tag> inside [s, end), entities decoded. */
static char *xml_text(const char *s, const char *end, const char *tag)
{
	char open[64], close[64], *out, *w;
	const char *a, *b;
	size_t ol;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	ol = strlen(open);
	a = memmem(s, end - s, open, ol);
	if (!a)
		return NULL;
	a += ol;
	b = memmem(a, end - a, close, strlen(close));
	if (!b)
		return NULL;
	out = w = malloc(b - a + 1);
	if (!out)
		return NULL;
	while (a < b) {
		static const struct { const char *e; char c; } ents[] = {
			{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' },
			{ "&quot;", '"' }, { "&apos;", '\'' },
		};
		size_t k;

		if (*a != '&') {
			*w++ = *a++;
			continue;
		}
		for (k = 0; k < sizeof(ents) / sizeof(ents[0]); k++) {
			size_t n = strlen(ents[k].e);

			if ((size_t)(b - a) >= n && !memcmp(a, ents[k].e, n)) {
				*w++ = ents[k].c;
				a += n;
				break;
			}
		}
		if (k < sizeof(ents) / sizeof(ents[0]))
			continue;
		if (b - a > 3 && a[1] == '#') {
			/* numeric: only what fits one byte is kept as is */
			char *e;
			long v = a[2] == 'x' ? strtol(a + 3, &e, 16) : strtol(a + 2, &e, 10);

			if (e < b && *e == ';' && v > 0 && v < 128) {
				*w++ = (char)v;
				a = e + 1;
				continue;
			}
		}
		free(out);
		return NULL; /* an entity we do not know: refuse, do not guess */
	}
	*w = '\0';
	return out;
}

int manifest_parse_s3(const char *xml, size_t len, manifest_s3_cb cb, void *arg,
		      bool *ret_truncated, char *token, size_t tokensize, char *err,
		      size_t errlen)
{
	struct p p = { xml, xml + len, err, errlen };
	const char *s = xml, *end = xml + len, *c;
	char *t;
	int res = 0;

	if (!memmem(xml, len, "<ListBucketResult", 17))
		return fail(&p, "not an S3 ListObjectsV2 reply");
	while ((c = memmem(s, end - s, "<Contents>", 10))) {
		const char *ce = memmem(c, end - c, "</Contents>", 11);
		char *key, *size, *etag, *lm, *e;
		unsigned long long v;

		if (!ce)
			return fail(&p, "unterminated <Contents>");
		key = xml_text(c, ce, "Key");
		size = xml_text(c, ce, "Size");
		etag = xml_text(c, ce, "ETag");
		lm = xml_text(c, ce, "LastModified");
		errno = 0;
		v = size ? strtoull(size, &e, 10) : 0;
		if (!key || !size || errno || *e || size[0] == '-' || !size[0])
			res = fail(&p, "a <Contents> without a valid Key or Size");
		else
			res = cb(arg, key, v, etag ? etag : "", lm ? lm : "");
		free(key);
		free(size);
		free(etag);
		free(lm);
		if (res)
			return res;
		s = ce + 11;
	}
	t = xml_text(xml, end, "IsTruncated");
	*ret_truncated = t && !strcmp(t, "true");
	free(t);
	if (*ret_truncated) {
		t = xml_text(xml, end, "NextContinuationToken");
		if (!t || strlen(t) >= tokensize) {
			free(t);
			return fail(&p, "truncated listing without a usable continuation token");
		}
		memcpy(token, t, strlen(t) + 1);
		free(t);
	}
	return 0;
}

int manifest_parse_s3_prefixes(const char *xml, size_t len, manifest_prefix_cb cb,
			       void *arg)
{
	const char *s = xml, *end = xml + len, *c;
	int res = 0;

	while (!res && (c = memmem(s, end - s, "<CommonPrefixes>", 16))) {
		const char *ce = memmem(c, end - c, "</CommonPrefixes>", 17);
		char *prefix;

		if (!ce)
			return -EINVAL;
		prefix = xml_text(c, ce, "Prefix");
		if (!prefix)
			return -EINVAL;
		res = cb(arg, prefix);
		free(prefix);
		s = ce + 17;
	}
	return res;
}

/*
 * ": CODE: MESSAGE" from an S3 error body (<Code>, <Message>), printable
 * bytes only, or "" when there is none.
 */
void manifest_s3_error(const char *body, char *out, size_t size)
{
	const char *tags[2] = { "Code", "Message" };
	size_t n = 0;

	out[0] = '\0';
	for (unsigned t = 0; t < 2 && n + 3 < size; t++) {
		char open[16], close[16];
		const char *a, *e;

		snprintf(open, sizeof(open), "<%s>", tags[t]);
		snprintf(close, sizeof(close), "</%s>", tags[t]);
		a = strstr(body, open);
		e = a ? strstr(a, close) : NULL;
		if (!a || !e)
			continue;
		a += strlen(open);
		out[n++] = ':';
		out[n++] = ' ';
		for (; a < e && n + 1 < size; a++)
			out[n++] = (unsigned char)*a < 0x20 || *a == 0x7f ? '?' : *a;
		out[n] = '\0';
	}
}
