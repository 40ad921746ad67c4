/*
 * manifest.h - one line of an import manifest (JSON Lines).
 *
 * Pure module: no I/O.  Each line is one JSON object describing a file:
 *   {"path": "dir/name", "size": 123, "mtime": 1700000000, "mode": "0644",
 *    "url": "https://...", "version": "\"etag\"", "sha256": "hex",
 *    "chunk_size": 1048576, "chunk_sha256": ["hex", ...]}
 * chunk_sha256 is the digest of each chunk_size bytes of the file in
 * order, the last one short: ceil(size / chunk_size) of them, chunk_size
 * a power of two from 4 KiB to 1 GiB; both keys or neither.
 * "holes": [[offset, length], ...] are ranges the origin declares zeros
 * (a sparse file's holes): within the size, in any order, merged; the
 * mount never fetches them and shows them as holes (SEEK_HOLE, st_blocks).
 * A directory is {"path": "dir/sub", "type": "dir"} (size optional and
 * ignored; "url" is where its names are listed, for a hook's PRE_DIR).
 * path and size (of a file) are required; unknown keys are ignored (forward
 * compatible).  Strict JSON otherwise: one object, nothing after it but
 * blanks.  Paths are validated: relative, no empty, "." or ".."
 * components, components of at most 255 bytes, at most 4095 bytes in all,
 * no NUL, and not inside the reserved ".hsmfs".
 *
 * On error manifest_parse_line() returns -EINVAL and a lowercase reason
 * in err (no "file:line", which the caller adds).
 */
#ifndef HSMFS_MANIFEST_H
#define HSMFS_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ranges.h"

#define MANIFEST_MAX_LINE (1024 * 1024) /* chunk digests: 67 bytes a chunk */
#define MANIFEST_CHUNK_MIN 4096u
#define MANIFEST_CHUNK_MAX (1u << 30)

struct manifest_entry {
	char *path;     /* owned */
	uint64_t size;
	int64_t mtime;  /* seconds; 0 if absent */
	bool has_mtime;
	uint32_t mode;  /* permission bits; 0644 if absent */
	char *url;      /* owned, NULL if absent */
	char *version;  /* owned, NULL if absent */
	char *sha256;   /* owned, NULL if absent; 64 lowercase hex */
	uint32_t chunk_size;   /* 0: no chunk digests */
	uint32_t nchunks;
	/*
	 * Owned, or NULL: as meta_file.chunks has them, chunk_size as a u32
	 * (little-endian) then the nchunks digests of 32 bytes.
	 */
	uint8_t *chunks;
	size_t chunks_len;
	bool is_dir;    /* "type": "dir" */
	/*
	 * Owned, NULL if absent: "partial" on the line of path "." of a
	 * listing: the directory's names are only those a page linked to
	 * (hsmfs-hooks(7)); its value says what the listing came from.
	 */
	char *partial;
	struct rangeset holes; /* "holes": declared zeros, within [0, size) */
};

/* Parse line[0..len) into *ret (freed with manifest_entry_free). */
int manifest_parse_line(const char *line, size_t len, struct manifest_entry *ret,
			char *err, size_t errlen);
void manifest_entry_free(struct manifest_entry *e);

/* The path rules above; 0 or -EINVAL with the reason. */
int manifest_check_path(const char *path, size_t len, char *err, size_t errlen);

/*
 * An nginx JSON autoindex listing (autoindex_format json): an array of
 * {"name", "type", "mtime", "size"} objects.  cb is called for each
 * file and directory entry, in order; a non-zero return stops the parse
 * and is returned.  Names must be one valid path component.  Returns 0,
 * cb's value, or -EINVAL with the reason in err.
 */
typedef int (*manifest_listing_cb)(void *arg, const char *name, bool is_dir,
				   const char *mtime, uint64_t size);
int manifest_parse_nginx(const char *json, size_t len, manifest_listing_cb cb,
			 void *arg, char *err, size_t errlen);

/*
 * An HTML directory index: nginx's autoindex, Apache's mod_autoindex,
 * python3 -m http.server, lighttpd... recognised by its <title>, which
 * begins "Index of " or "Directory listing for " (any other page is not a
 * listing: -EINVAL).  cb is called for each link to a name of the
 * directory: a relative href of one path component, %-decoded, a
 * directory when it ends in '/'; parent, sorting and absolute links are
 * passed over, and a name linked twice in a row is given once.  An index
 * gives no exact sizes: cb gets MANIFEST_SIZE_UNKNOWN and mtime "" (the
 * caller asks each file with a HEAD).  Returns 0, cb's value, or -EINVAL
 * with the reason in err.
 */
#define MANIFEST_SIZE_UNKNOWN UINT64_MAX
int manifest_parse_html(const char *html, size_t len, manifest_listing_cb cb, void *arg,
			char *err, size_t errlen);

/* Is the HTML page html[0..len) a directory index (its <title>, as above)? */
bool manifest_html_is_index(const char *html, size_t len);

/*
 * The links of any HTML page (one that is not an index: a directory's
 * index.html) to names of its directory, to cb as manifest_parse_html()
 * gives them; a link that cannot be read is passed over, and a name may
 * come more than once.  Returns 0 or cb's value.
 */
int manifest_parse_page_links(const char *html, size_t len, manifest_listing_cb cb, void *arg);

/*
 * A directory listing of either kind: nginx's JSON when its first byte
 * past white space is '[', else an HTML index.  As the two above.
 */
int manifest_parse_listing(const char *text, size_t len, manifest_listing_cb cb, void *arg,
			   char *err, size_t errlen);

/*
 * One page of an S3 ListObjectsV2 reply (XML).  cb is called for each
 * <Contents> with its Key, Size, ETag and LastModified (entities
 * decoded).  *ret_truncated tells whether another page follows, and its
 * NextContinuationToken is copied to token (tokensize bytes).  Returns
 * 0, cb's value, or -EINVAL with the reason in err.
 */
typedef int (*manifest_s3_cb)(void *arg, const char *key, uint64_t size,
			      const char *etag, const char *last_modified);
int manifest_parse_s3(const char *xml, size_t len, manifest_s3_cb cb, void *arg,
		      bool *ret_truncated, char *token, size_t tokensize, char *err,
		      size_t errlen);

/*
 * The <CommonPrefixes> of the same reply (a listing with a delimiter):
 * cb for each <Prefix>, entities decoded.  0, cb's value, or -EINVAL.
 */
typedef int (*manifest_prefix_cb)(void *arg, const char *prefix);
int manifest_parse_s3_prefixes(const char *xml, size_t len, manifest_prefix_cb cb,
			       void *arg);

/*
 * ": CODE: MESSAGE" from an S3 error response's body (<Code>, <Message>),
 * control bytes replaced, into out (size bytes); "" when it has neither.
 */
void manifest_s3_error(const char *body, char *out, size_t size);

#endif
