/*
 * meta.h - per-file state in STORE/.hsmfs/meta.db (SQLite, WAL).
 *
 * One row per file that is not plainly resident, keyed by the store's
 * inode number, so the state follows the file through rename and hard
 * links.  A file with no row is resident: a plain directory mounted with
 * hsmfs has an empty table and costs no metadata at all.
 *
 * SQLite's result codes never leave this module: every function returns
 * 0 or -errno (-ENOENT: no row; -EIO: database failure; -ENOMEM).  The
 * module prints nothing; meta_errmsg() gives the last SQLite message
 * for the caller to log once.
 *
 * Schema versioning: PRAGMA user_version holds META_SCHEMA_VERSION;
 * meta_open() migrates older versions forward inside one transaction
 * and refuses newer ones (-EPROTO).  A file that is not a database or is
 * corrupt gives -EBADMSG, so the caller can move it aside.
 *
 * Locking: one connection per struct meta, serialized by an internal
 * mutex; every function is safe to call from any thread.  A transaction
 * (meta_begin() to meta_commit() or meta_rollback()) holds that mutex
 * throughout, so it contains its own thread's writes and no other's:
 * another thread's meta_put() waits for the commit rather than joining
 * a transaction that may yet roll back.
 */
#ifndef HSMFS_META_H
#define HSMFS_META_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "ranges.h"

#define META_SCHEMA_VERSION 9

enum meta_state {
	META_PLACEHOLDER = 1, /* nothing present yet */
	META_PARTIAL = 2,     /* some ranges present */
	META_RESIDENT = 3,    /* all present, still has an origin (evictable) */
	META_DIRTY = 4,       /* changed through the mount: never refetched */
	/* directories (lazy listing, dirs.c); origin: where names are listed */
	META_DIR_UNLISTED = 5, /* names not known yet: a hook lists them first */
	META_DIR_LISTED = 6,   /* listed (atime: when, ms); plain from now on */
};

#define META_F_PINNED 0x1 /* keep fully present; never evict */
#define META_F_STALE 0x2  /* origin changed under us: reads fail */
#define META_F_CONFLICT 0x4 /* dirty, and the origin changed under the
			     * change: not archived until resolved */
#define META_F_NEW 0x8    /* made on the mount: the origin never had it */
#define META_F_PARTIAL 0x10 /* a directory listed from a page's links, not
			     * an index (hsmfs-hooks(7) "partial") */
#define META_F_LINKED 0x20  /* given another name (a hard link): the origin,
			     * which has no links, holds one name only */

struct meta_file {
	uint64_t ino;        /* store inode number (key) */
	uint64_t size;       /* logical size */
	uint64_t osize;      /* the recorded version's size (the origin's): a
			      * dirty file's may differ from size; a clean
			      * row's is size, whatever is passed */
	int64_t mtime;       /* seconds */
	uint32_t mode;       /* permission bits */
	uint32_t state;      /* enum meta_state */
	uint32_t flags;      /* META_F_* */
	char *origin;        /* owned; NULL if none */
	char *version;       /* owned; NULL if none */
	char *sha256;        /* owned; NULL if none */
	/*
	 * The manifest's chunk digests, owned, or NULL: a u32 chunk size
	 * (little-endian) then a 32-byte sha256 for each chunk of the
	 * recorded version (meta_chunks_*).
	 */
	void *chunks;
	size_t chunks_len;
	struct rangeset present;
	int64_t atime;       /* last use (open, close, fill), ms since the epoch */
	uint64_t gen;        /* changes whenever import (re)creates the row */
	char *path;          /* owned; last known path below the store root,
			      * a hint checked against ino before use; or NULL */
	uint64_t blocks;     /* allocated bytes in the store (st_blocks * 512) */
	/*
	 * Fills and evictions change the store file's ctime, which no
	 * system call can set back.  When the store's ctime is still
	 * ctime_real (ns since the epoch; the one the daemon's own last
	 * change left), the mount shows ctime_shown instead (the one before
	 * the daemon's changes).  0: none.
	 */
	int64_t ctime_real, ctime_shown;
};

/* An eviction candidate (see meta_lru). */
struct meta_victim {
	uint64_t ino, blocks;
	int64_t atime;
	char *path; /* owned */
};

struct meta;

int meta_open(const char *path, struct meta **ret);
void meta_close(struct meta *m);
const char *meta_errmsg(struct meta *m);

/* Fill *ret (caller frees with meta_file_free) or -ENOENT. */
int meta_get(struct meta *m, uint64_t ino, struct meta_file *ret);
/* Insert or replace the whole row. */
int meta_put(struct meta *m, const struct meta_file *f);
/*
 * Update present ranges, state, flags and sizes of the row of ino, but
 * only if it is still generation gen: a re-import that changed the file
 * wins over a late write-behind.  -ENOENT if no row matched.
 */
int meta_set_present(struct meta *m, uint64_t ino, const struct rangeset *rs,
		     uint32_t state, uint32_t flags, uint64_t size, uint64_t osize,
		     uint64_t gen,
		     int64_t atime, uint64_t blocks, int64_t ctime_real,
		     int64_t ctime_shown);
/*
 * Delete the row of ino; *ret_cached (may be NULL) gets the allocated
 * bytes it counted against the cache (0 for dirty files or no row).
 */
int meta_delete(struct meta *m, uint64_t ino, uint64_t *ret_cached);

/*
 * Up to limit eviction candidates, least recently used first, after
 * skipping skip of them: clean, unpinned rows with allocated bytes and
 * a known path.  Free the array with meta_victims_free().
 */
int meta_lru(struct meta *m, unsigned limit, uint64_t skip, struct meta_victim **ret,
	     size_t *ret_n);
void meta_victims_free(struct meta_victim *v, size_t n);
/*
 * Up to limit files to archive, dirty (in conflict too) with a path, of
 * inode numbers above after, by inode number: the next page starts
 * after the last row's (a row leaving the set meanwhile, archived or
 * removed, makes no page skip another, as an offset would).
 */
int meta_dirty(struct meta *m, unsigned limit, uint64_t after, struct meta_victim **ret,
	       size_t *ret_n);
/* The rows of files given another name (META_F_LINKED), paged as meta_dirty(). */
int meta_linked(struct meta *m, unsigned limit, uint64_t after, struct meta_victim **ret,
		size_t *ret_n);
/*
 * Names changed on the mount, to be applied at the origin in order (the
 * ops table, namer.c): a removal of a file the origin has (path: the
 * path it had; origin, version: its object then; no origin: the removal
 * of a file whose first upload was in flight, which the namer holds
 * until that upload ended, and its archiver records its own removal
 * with the object if the upload landed), a rename (path:
 * its new path; its object is the file's when applied), or a directory
 * made or removed (path; no object), or an unanswered landing (path:
 * where a new file's first upload may have made its object, which is
 * not the file's any more: removed there unless the file ino is at path
 * on the mount again; meta_landing_set()).
 */
#define META_OP_DELETE 1
#define META_OP_RENAME 2
#define META_OP_MKDIR 3
#define META_OP_RMDIR 4
#define META_OP_UNLAND 5
struct meta_op {
	int64_t seq;
	uint32_t kind;
	uint64_t ino;
	char *path, *origin, *version; /* owned, may be NULL */
};
int meta_op_add(struct meta *m, uint32_t kind, uint64_t ino, const char *path,
		const char *origin, const char *version);
/*
 * A rename of from to to: a rename op for each file at or below from
 * that has an origin (before meta_rename(), in its transaction); with
 * ino not 0, of the file ino only, if its row is at from (a file's
 * rename: another row that has the path, the writer's or a stale one,
 * does not move with it).
 */
int meta_op_renamed(struct meta *m, const char *from, const char *to, uint64_t ino);
/* The oldest op (-ENOENT: none); free with meta_op_free(). */
int meta_op_first(struct meta *m, struct meta_op *ret);
int meta_op_done(struct meta *m, int64_t seq);
int meta_op_count(struct meta *m, uint64_t *ret);
/*
 * Must an upload of the file ino to path wait for ops?  An op of path (a
 * removal of it, a rename onto it), or a move of that file (one recorded
 * for an earlier upload of it, which must be applied, or found moot,
 * before another object of it exists: else it moves the new one).
 */
int meta_op_before(struct meta *m, const char *path, uint64_t ino, bool *ret);
/* Drop the rename ops of the file ino (removed: they are moot). */
int meta_op_drop_renames(struct meta *m, uint64_t ino);
/*
 * Is an op of a file (a removal, a rename, an unlanding), or a removal of
 * a directory below the directory below, recorded after seq?
 */
int meta_op_files_after(struct meta *m, int64_t seq, const char *below, bool *ret);
void meta_op_free(struct meta_op *op);
/*
 * Parked ops: an op the origin will not take, which waiting does not
 * change (a directory removed on the mount that holds objects the mount
 * does not have there; a file removed on the mount that another writer
 * changed at the origin).  The origin differs from the mount there, so
 * a sync fails while one is parked.
 *   - meta_op_park(seq, why): the op leaves the queue for the parked
 *     list, in one transaction;
 *   - meta_ops_unpark(): every parked op back at the queue's end, in
 *     their order (a sync tries them again: the user may have mended the
 *     origin), in one transaction;
 *   - meta_parked_list(): cb(path, why) for each, oldest first (cb runs
 *     with the database locked: it must not call meta).
 */
int meta_op_park(struct meta *m, int64_t seq, const char *why);
int meta_ops_unpark(struct meta *m);
int meta_parked_count(struct meta *m, uint64_t *ret);
int meta_parked_list(struct meta *m, void (*cb)(void *arg, const char *path, const char *why),
		     void *arg);

/*
 * Landings: an upload may reach the origin and then not be answered
 * (the daemon killed, the hook killed or timed out), so the origin holds
 * the file's bytes under a version the row does not know, and, for a
 * new file's first upload, an object the row does not know of at all.
 * Where each upload goes is recorded, durably, before it is asked, and
 * stays until an upload is recorded:
 *   - meta_landing_set(): the upload goes to path now; *ret_here: an
 *     earlier one went there too (what is there may be its: this upload
 *     replaces it, it is no conflict); one that went elsewhere becomes
 *     an UNLAND op;
 *   - meta_landing_has(): is one recorded (a removal or a move of the
 *     file's object is then not conditional on the recorded version,
 *     which may be older than the object's);
 *   - meta_landing_clear(): recorded (or refused: nothing landed; or
 *     the object moved or removed unconditionally);
 *   - meta_landing_left(path, skip): the names at or below path were
 *     renamed on the mount: the landings there of files with no object
 *     recorded (new ones: their objects have no move to follow them)
 *     become UNLAND ops, after the caller's other ops of that change
 *     (in its transaction), except those of the files in skip (their
 *     uploads are in flight: the archiver settles theirs when each ends);
 *   - meta_landing_gone(ino): a new file removed (or renamed) while no
 *     upload of it was in flight: its landing becomes an UNLAND op;
 *   - meta_landing_orphans(): at start, landings of files removed, or
 *     of new files no longer at that path (a crash while their uploads
 *     were in flight): the same (in the caller's transaction).
 */
int meta_landing_set(struct meta *m, uint64_t ino, const char *path, bool *ret_here);
int meta_landing_has(struct meta *m, uint64_t ino, bool *ret);
int meta_landing_clear(struct meta *m, uint64_t ino);
int meta_landing_left(struct meta *m, const char *path, const uint64_t *skip, size_t nskip);
int meta_landing_gone(struct meta *m, uint64_t ino);
int meta_landing_orphans(struct meta *m);

/*
 * An archive put the file at its origin: record where and as which
 * version (the manifest's sha256, of another version, goes), if the row
 * is still generation gen (-ENOENT otherwise).
 */
int meta_set_version(struct meta *m, uint64_t ino, uint64_t gen, const char *origin,
		     const char *version);

/* Sum of the allocated bytes of clean rows: the cache's size. */
int meta_cached_total(struct meta *m, uint64_t *ret);

/*
 * Each row whose origin begins with prefix: cb with its ino, path (may be
 * NULL), state, origin and version, in ino order; a non-zero return stops
 * and is returned.  Its strings live until cb returns.  0 or -errno.
 */
int meta_origins(struct meta *m, const char *prefix,
		 int (*cb)(void *arg, uint64_t ino, const char *path, uint32_t state,
			   const char *origin, const char *version),
		 void *arg);
/* Every origin that begins with from begins with to instead.  0 or -errno. */
int meta_rebase_origin(struct meta *m, const char *from, const char *to);
/* A path was renamed through the mount: rows at or below it follow (ino: as meta_op_renamed()). */
int meta_rename(struct meta *m, const char *from, const char *to, uint64_t ino);
int meta_set_path(struct meta *m, uint64_t ino, const char *path);

/*
 * Group many writes of one thread in one transaction.  After a failed
 * meta_commit() call meta_rollback() (a no-op if SQLite already rolled
 * back, or if no transaction is open).  -EINVAL: begin within a
 * transaction, or commit outside one.
 */
int meta_begin(struct meta *m);
int meta_commit(struct meta *m);
void meta_rollback(struct meta *m);

/*
 * Call cb for every row's (ino, gen, size, state), in ino order, with no
 * lock held across calls (the rows are read first).  A non-zero return
 * from cb stops and is returned.
 */
int meta_list(struct meta *m, int (*cb)(void *arg, uint64_t ino, uint64_t gen,
					uint64_t size, uint32_t state),
	      void *arg);

/* Delete the row of ino only if it is still generation gen. */
int meta_delete_gen(struct meta *m, uint64_t ino, uint64_t gen);

/* Count rows (for status and tests). */
int meta_count(struct meta *m, uint64_t *ret);
/* 1 if some directory row (META_DIR_*) exists, else 0 (an index lookup). */
int meta_count_dirs(struct meta *m, uint64_t *ret);
/* Count rows with a ctime_real (a full scan: once, at mount). */
int meta_count_ctimes(struct meta *m, uint64_t *ret);

void meta_file_free(struct meta_file *f);
const char *meta_state_name(uint32_t state);

#endif
