/* meta.c - see meta.h */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockcheck.h"
#include "meta.h"

/*
 * The write-ahead log: checkpointed every 256 pages (1 MiB of 4 KiB
 * pages), its file kept at, and preallocated to, 2 MiB.
 */
#define META_LOG_PAGES 256
#define META_LOG_RESERVE 2097152
#define STR_(x) #x
#define STR(x) STR_(x)

enum { Q_GET, Q_PUT, Q_PRESENT, Q_DELETE, Q_COUNT, Q_LIST, Q_DELGEN, Q_LRU,
       Q_TOTAL, Q_RENAME, Q_SETPATH, Q_ANYCTIME, Q_ANYDIR, Q_SETVERSION, Q_DIRTY,
       Q_OPADD, Q_OPFIRST, Q_OPDONE, Q_OPRENAMED, Q_OPCOUNT, Q_OPBEFORE, Q_OPFILESAFTER, Q_OPDROPRENAMES, Q_ORIGINS, Q_REBASE,
       Q_LANDGET, Q_LANDSET, Q_LANDCLEAR, Q_LANDBELOW, Q_LANDOPS_INO,
       Q_PARK, Q_UNPARK, Q_UNPARKED, Q_PARKCOUNT, Q_PARKLIST, Q_LINKED, Q_N };

static const char *const queries[Q_N] = {
	[Q_GET] = "SELECT size, mtime, mode, state, flags, origin, version, "
		  "sha256, present, atime, gen, path, blocks, ctime_real, ctime_shown, "
		  "coalesce(osize, size), chunks FROM files WHERE ino = ?1",
	[Q_PUT] = "INSERT OR REPLACE INTO files (ino, size, mtime, mode, state, "
		  "flags, origin, version, sha256, present, atime, gen, path, "
		  "blocks, ctime_real, ctime_shown, osize, chunks) VALUES (?1, ?2, ?3, ?4, "
		  "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
	[Q_PRESENT] = "UPDATE files SET present = ?2, state = ?3, flags = ?4, "
		      "size = ?5, atime = max(atime, ?7), blocks = ?8, "
		      "ctime_real = ?9, ctime_shown = ?10, osize = ?11 "
		      "WHERE ino = ?1 AND gen = ?6",
	[Q_DELETE] = "DELETE FROM files WHERE ino = ?1 RETURNING state, blocks",
	[Q_COUNT] = "SELECT count(*) FROM files",
	[Q_LIST] = "SELECT ino, gen, size, state FROM files ORDER BY ino",
	[Q_DELGEN] = "DELETE FROM files WHERE ino = ?1 AND gen = ?2",
	/* eviction candidates: clean, unpinned, with an origin and bytes */
	[Q_LRU] = "SELECT ino, path, blocks, atime FROM files "
		  "WHERE state <> 4 AND flags & 1 = 0 AND blocks > 0 "
		  "AND path IS NOT NULL ORDER BY atime, ino LIMIT ?1 OFFSET ?2",
	[Q_TOTAL] = "SELECT total(blocks) FROM files WHERE state <> 4",
	/* ?1 itself and everything below ?1/ ('0' sorts right after '/') */
	[Q_RENAME] = "UPDATE files SET path = ?2 || substr(path, length(?1) + 1) "
		     "WHERE (path = ?1 OR (path > ?1 || '/' AND path < ?1 || '0')) "
		     "AND (?3 = 0 OR ino = ?3)",
	[Q_SETPATH] = "UPDATE files SET path = ?2 WHERE ino = ?1",
	[Q_ANYCTIME] = "SELECT count(*) FROM files WHERE ctime_real <> 0",
	/* directory rows (states 5 and 6): through the partial index */
	[Q_ANYDIR] = "SELECT count(*) FROM (SELECT 1 FROM files WHERE state >= 5 LIMIT 1)",
	[Q_OPADD] = "INSERT INTO ops (kind, ino, path, origin, version) VALUES (?1, ?2, ?3, ?4, ?5)",
	[Q_OPFIRST] = "SELECT seq, kind, ino, path, origin, version FROM ops ORDER BY seq LIMIT 1",
	[Q_OPDONE] = "DELETE FROM ops WHERE seq = ?1",
	/* a rename of ?1 to ?2: each file at or below it with an origin, its new path */
	[Q_OPRENAMED] = "INSERT INTO ops (kind, ino, path) SELECT 2, ino, "
			"?2 || substr(path, length(?1) + 1) FROM files "
			"WHERE (path = ?1 OR (path > ?1 || '/' AND path < ?1 || '0')) "
			"AND state < 5 AND origin IS NOT NULL AND (?3 = 0 OR ino = ?3) "
			"ORDER BY path",
	[Q_OPCOUNT] = "SELECT count(*) FROM ops",
	[Q_PARK] = "INSERT OR REPLACE INTO parked (seq, kind, ino, path, origin, version, why) "
		   "SELECT seq, kind, ino, path, origin, version, ?2 FROM ops WHERE seq = ?1",
	[Q_UNPARK] = "INSERT INTO ops (kind, ino, path, origin, version) "
		     "SELECT kind, ino, path, origin, version FROM parked ORDER BY seq",
	[Q_UNPARKED] = "DELETE FROM parked",
	[Q_PARKCOUNT] = "SELECT count(*) FROM parked",
	[Q_PARKLIST] = "SELECT path, why FROM parked ORDER BY seq",
	/* kind 2: META_OP_RENAME */
	[Q_OPBEFORE] = "SELECT count(*) FROM (SELECT 1 FROM ops WHERE path = ?1 UNION ALL "
		       "SELECT 1 FROM ops WHERE ino = ?2 AND kind = 2 LIMIT 1)",
	/* kinds 1 and 2: META_OP_DELETE and META_OP_RENAME */
	/* kind 2: META_OP_RENAME */
	[Q_OPDROPRENAMES] = "DELETE FROM ops WHERE ino = ?1 AND kind = 2",
	/* kinds 1, 2, 5: a file's; 4 (META_OP_RMDIR) below ?2 */
	[Q_OPFILESAFTER] = "SELECT count(*) FROM (SELECT 1 FROM ops WHERE seq > ?1 AND "
			   "(kind IN (1, 2, 5) OR (kind = 4 AND path > ?2 || '/' AND "
			   "path < ?2 || '0')) LIMIT 1)",
	/* where a new file's first upload may have made its object (meta_landing_set) */
	[Q_LANDGET] = "SELECT path FROM landings WHERE ino = ?1",
	[Q_LANDSET] = "INSERT OR REPLACE INTO landings (ino, path) VALUES (?1, ?2)",
	[Q_LANDCLEAR] = "DELETE FROM landings WHERE ino = ?1",
	/* the landings at or below ?1 of files with no object recorded (new ones) */
	[Q_LANDBELOW] = "SELECT l.ino FROM landings AS l LEFT JOIN files AS f ON f.ino = l.ino "
			"WHERE (l.path = ?1 OR (l.path > ?1 || '/' AND l.path < ?1 || '0')) "
			"AND f.origin IS NULL ORDER BY l.path",
	/* kind 5: META_OP_UNLAND */
	[Q_LANDOPS_INO] = "INSERT INTO ops (kind, ino, path) SELECT 5, ino, path FROM landings "
			  "WHERE ino = ?1",
	/* the rows whose origin begins with ?1, and that prefix made ?2 */
	[Q_ORIGINS] = "SELECT ino, path, state, origin, version FROM files "
		      "WHERE substr(origin, 1, length(?1)) = ?1 ORDER BY ino",
	[Q_REBASE] = "UPDATE files SET origin = ?2 || substr(origin, length(?1) + 1) "
		     "WHERE substr(origin, 1, length(?1)) = ?1",
	/* an archive's version: the manifest's digest was of the old one */
	[Q_SETVERSION] = "UPDATE files SET origin = ?2, version = ?3, sha256 = NULL, chunks = NULL "
			 "WHERE ino = ?1 AND gen = ?4",
	/* files given another name (flags 32: META_F_LINKED), with a path */
	/*
	 * these two are paged by inode number (after ?2), not by an
	 * offset: a row leaving the set while a caller pages through it
	 * (archived, unlinked) must not make the next page skip others
	 */
	[Q_LINKED] = "SELECT ino, path, blocks, atime FROM files "
		     "WHERE flags & 32 AND state < 5 AND path IS NOT NULL AND ino > ?2 "
		     "ORDER BY ino LIMIT ?1",
	/* files to archive: dirty (in conflict too), with a path */
	[Q_DIRTY] = "SELECT ino, path, blocks, atime FROM files "
		    "WHERE state = 4 AND path IS NOT NULL AND ino > ?2 "
		    "ORDER BY ino LIMIT ?1",
};

/* Each step brings the schema from version i to i + 1. */
static const char *const migrations[] = {
	/* 0 -> 1 */
	"CREATE TABLE files ("
	" ino INTEGER PRIMARY KEY,"
	" size INTEGER NOT NULL,"
	" mtime INTEGER NOT NULL DEFAULT 0,"
	" mode INTEGER NOT NULL DEFAULT 420,"
	" state INTEGER NOT NULL,"
	" flags INTEGER NOT NULL DEFAULT 0,"
	" origin TEXT, version TEXT, sha256 TEXT,"
	" present BLOB NOT NULL DEFAULT x'',"
	" atime INTEGER NOT NULL DEFAULT 0,"
	" gen INTEGER NOT NULL DEFAULT 0);",
	/* 1 -> 2: where the file is (for eviction), its allocated bytes */
	"ALTER TABLE files ADD COLUMN path TEXT;"
	"ALTER TABLE files ADD COLUMN blocks INTEGER NOT NULL DEFAULT 0;"
	"CREATE INDEX files_path ON files (path);",
	/* 2 -> 3: the change time the mount shows (see meta_file.ctime_real) */
	"ALTER TABLE files ADD COLUMN ctime_real INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE files ADD COLUMN ctime_shown INTEGER NOT NULL DEFAULT 0;",
	/* 3 -> 4: directory rows (META_DIR_*), which older versions must not read */
	"CREATE INDEX files_dirs ON files (state) WHERE state >= 5;",
	/* 4 -> 5: the recorded version's size where the file's differs (NULL: the same) */
	"ALTER TABLE files ADD COLUMN osize INTEGER;",
	/* 5 -> 6: names changed on the mount, to be applied at the origin, in order */
	"CREATE TABLE ops (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind INTEGER NOT NULL,"
	" ino INTEGER NOT NULL, path TEXT, origin TEXT, version TEXT);",
	/* 6 -> 7: the manifest's chunk digests (meta_file.chunks) */
	"ALTER TABLE files ADD COLUMN chunks BLOB;",
	/* 7 -> 8: where a new file's first upload may have made its object */
	"CREATE TABLE landings (ino INTEGER PRIMARY KEY, path TEXT NOT NULL);",
	/* 8 -> 9: ops found by path (each archive asks) and by file, not by a scan */
	"CREATE INDEX ops_path ON ops (path);"
	"CREATE INDEX ops_ino ON ops (ino);"
	/* and ops the origin would not take, and why (meta_op_park()) */
	"CREATE TABLE parked (seq INTEGER PRIMARY KEY, kind INTEGER NOT NULL,"
	" ino INTEGER NOT NULL, path TEXT, origin TEXT, version TEXT, why TEXT NOT NULL);",
};

struct meta {
	sqlite3 *db;
	sqlite3_stmt *q[Q_N];
	pthread_mutex_t lock;      /* recursive: a transaction holds it */
	bool in_txn;               /* meta_begin() holds lock; its owner's */
	char errmsg[256];
};

/* Every statement runs under m->lock, and may block (lockcheck.h). */
static void mlock(struct meta *m)
{
	may_block("SQLite");
	lk_lock(&m->lock, LK_META);
}

static void munlock(struct meta *m)
{
	lk_unlock(&m->lock, LK_META);
}

static int to_errno(struct meta *m, int rc)
{
	if (m->db)
		snprintf(m->errmsg, sizeof(m->errmsg), "%s", sqlite3_errmsg(m->db));
	switch (rc) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW: return 0;
	case SQLITE_NOMEM: return -ENOMEM;
	case SQLITE_NOTADB:
	case SQLITE_CORRUPT: return -EBADMSG;
	case SQLITE_FULL: return -ENOSPC;
	case SQLITE_BUSY:
	case SQLITE_LOCKED: return -EBUSY;
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_AUTH: return -EACCES;
	case SQLITE_CANTOPEN: return -ENOENT;
	default: return -EIO;
	}
}

const char *meta_errmsg(struct meta *m)
{
	return m ? m->errmsg : "out of memory";
}

static int exec(struct meta *m, const char *sql)
{
	return to_errno(m, sqlite3_exec(m->db, sql, NULL, NULL, NULL));
}

static int migrate(struct meta *m)
{
	sqlite3_stmt *st;
	int version, res, rc;
	char sql[64];

	rc = sqlite3_prepare_v2(m->db, "PRAGMA user_version", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return to_errno(m, rc);
	rc = sqlite3_step(st);
	version = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
	sqlite3_finalize(st);
	if (version < 0)
		return to_errno(m, rc);
	if (version > META_SCHEMA_VERSION) {
		snprintf(m->errmsg, sizeof(m->errmsg),
			 "schema version %d is newer than this hsmfs (%d)",
			 version, META_SCHEMA_VERSION);
		return -EPROTO;
	}
	if (version == META_SCHEMA_VERSION)
		return 0;
	res = exec(m, "BEGIN IMMEDIATE");
	for (; !res && version < META_SCHEMA_VERSION; version++)
		res = exec(m, migrations[version]);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", version);
	if (!res)
		res = exec(m, sql);
	if (!res)
		return exec(m, "COMMIT");
	exec(m, "ROLLBACK");
	return res;
}

/*
 * Room for the write-ahead log on a full filesystem.  An eviction must be
 * recorded before it frees a byte, so a full store would otherwise stay
 * full.  Blocks allocated past the log's end (FALLOC_FL_KEEP_SIZE) are
 * SQLite's alone: it rewinds the log after each checkpoint and writes
 * over them again, and trims it back to this size (journal_size_limit)
 * after a transaction that outgrew it.  Best effort: a filesystem that
 * cannot preallocate just goes without.
 */
static int rows_of(struct meta *m, int q, unsigned limit, uint64_t skip,
		   struct meta_victim **ret, size_t *ret_n);
static int two_texts(struct meta *m, int q, const char *a, const char *b);
static int renamed(struct meta *m, int q, const char *from, const char *to, uint64_t ino);

static void reserve_log(const char *dbpath)
{
	char wal[4096];
	int fd;

	if (snprintf(wal, sizeof(wal), "%s-wal", dbpath) >= (int)sizeof(wal))
		return;
	fd = open(wal, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	(void)fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, META_LOG_RESERVE);
	close(fd);
}

int meta_open(const char *path, struct meta **ret)
{
	struct meta *m = calloc(1, sizeof(*m));
	pthread_mutexattr_t ma;
	int res, rc, i;

	if (!m)
		return -ENOMEM;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&m->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	rc = sqlite3_open_v2(path, &m->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				     SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		res = to_errno(m, rc);
		goto fail;
	}
	sqlite3_busy_timeout(m->db, 5000);
	/*
	 * WAL: readers (hsmfsctl) never block the daemon.  FULL, not
	 * NORMAL: a commit is durable when it returns, which the engine's
	 * durability order needs (an eviction's record before its punch,
	 * an fsync's state before the fsync returns).  NORMAL survives a
	 * daemon crash but may roll back the last commits on power loss.
	 */
	res = exec(m, "PRAGMA journal_mode = WAL");
	if (!res)
		res = exec(m, "PRAGMA synchronous = FULL");
	if (!res)
		res = migrate(m);
	/* the log's size: its room kept (see reserve_log()), bigger trimmed */
	if (!res)
		res = exec(m, "PRAGMA wal_autocheckpoint = " STR(META_LOG_PAGES));
	if (!res)
		res = exec(m, "PRAGMA journal_size_limit = " STR(META_LOG_RESERVE));
	if (!res)
		reserve_log(path);
	for (i = 0; !res && i < Q_N; i++)
		res = to_errno(m, sqlite3_prepare_v3(m->db, queries[i], -1,
						     SQLITE_PREPARE_PERSISTENT,
						     &m->q[i], NULL));
	if (res)
		goto fail;
	*ret = m;
	return 0;
fail:
	meta_close(m);
	return res;
}

void meta_close(struct meta *m)
{
	if (!m)
		return;
	for (int i = 0; i < Q_N; i++)
		sqlite3_finalize(m->q[i]);
	sqlite3_close(m->db);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static char *col_text(sqlite3_stmt *st, int i, int *oom)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	char *r;

	if (!t)
		return NULL;
	r = strdup((const char *)t);
	if (!r)
		*oom = 1;
	return r;
}

int meta_get(struct meta *m, uint64_t ino, struct meta_file *ret)
{
	struct meta_file f = { .ino = ino };
	sqlite3_stmt *st = m->q[Q_GET];
	int rc, res = 0, oom = 0;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		f.size = sqlite3_column_int64(st, 0);
		f.mtime = sqlite3_column_int64(st, 1);
		f.mode = sqlite3_column_int(st, 2);
		f.state = sqlite3_column_int(st, 3);
		f.flags = sqlite3_column_int(st, 4);
		f.origin = col_text(st, 5, &oom);
		f.version = col_text(st, 6, &oom);
		f.sha256 = col_text(st, 7, &oom);
		res = rs_decode(sqlite3_column_blob(st, 8),
				sqlite3_column_bytes(st, 8), &f.present);
		if (res == -EINVAL) {
			/* a damaged range list: trust nothing in it */
			rs_clear(&f.present);
			res = 0;
		}
		f.atime = sqlite3_column_int64(st, 9);
		f.gen = sqlite3_column_int64(st, 10);
		f.path = col_text(st, 11, &oom);
		f.blocks = sqlite3_column_int64(st, 12);
		f.ctime_real = sqlite3_column_int64(st, 13);
		f.ctime_shown = sqlite3_column_int64(st, 14);
		f.osize = sqlite3_column_int64(st, 15);
		if (sqlite3_column_bytes(st, 16) > 0) {
			int n = sqlite3_column_bytes(st, 16);
			const void *b = sqlite3_column_blob(st, 16);

			f.chunks = b ? malloc(n) : NULL;
			if (f.chunks) {
				memcpy(f.chunks, b, n);
				f.chunks_len = n;
			} else {
				oom = 1;
			}
		}
		if (oom)
			res = -ENOMEM;
	} else {
		res = rc == SQLITE_DONE ? -ENOENT : to_errno(m, rc);
	}
	sqlite3_reset(st);
	munlock(m);
	if (res) {
		meta_file_free(&f);
		return res;
	}
	*ret = f;
	return 0;
}

static int bind_ranges(sqlite3_stmt *st, int i, const struct rangeset *rs)
{
	size_t n = rs_encode_size(rs);
	uint8_t *buf = malloc(n ? n : 1);

	if (!buf)
		return -ENOMEM;
	rs_encode(rs, buf);
	sqlite3_bind_blob(st, i, buf, n, free);
	return 0;
}

/* A dirty file's recorded size where it differs from its own; else NULL. */
static void bind_osize(sqlite3_stmt *st, int i, uint32_t state, uint64_t size, uint64_t osize)
{
	if (state == META_DIRTY && osize != size)
		sqlite3_bind_int64(st, i, (sqlite3_int64)osize);
	else
		sqlite3_bind_null(st, i);
}

int meta_put(struct meta *m, const struct meta_file *f)
{
	sqlite3_stmt *st = m->q[Q_PUT];
	int res;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)f->ino);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)f->size);
	sqlite3_bind_int64(st, 3, f->mtime);
	sqlite3_bind_int(st, 4, f->mode);
	sqlite3_bind_int(st, 5, f->state);
	sqlite3_bind_int(st, 6, f->flags);
	sqlite3_bind_text(st, 7, f->origin, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 8, f->version, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 9, f->sha256, -1, SQLITE_TRANSIENT);
	res = bind_ranges(st, 10, &f->present);
	sqlite3_bind_int64(st, 11, f->atime);
	sqlite3_bind_int64(st, 12, (sqlite3_int64)f->gen);
	sqlite3_bind_text(st, 13, f->path, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 14, (sqlite3_int64)f->blocks);
	sqlite3_bind_int64(st, 15, f->ctime_real);
	sqlite3_bind_int64(st, 16, f->ctime_shown);
	bind_osize(st, 17, f->state, f->size, f->osize);
	if (f->chunks_len)
		sqlite3_bind_blob(st, 18, f->chunks, (int)f->chunks_len, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 18);
	if (!res)
		res = to_errno(m, sqlite3_step(st));
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

int meta_set_present(struct meta *m, uint64_t ino, const struct rangeset *rs,
		     uint32_t state, uint32_t flags, uint64_t size, uint64_t osize,
		     uint64_t gen, int64_t atime, uint64_t blocks, int64_t ctime_real,
		     int64_t ctime_shown)
{
	sqlite3_stmt *st = m->q[Q_PRESENT];
	int res;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	res = bind_ranges(st, 2, rs);
	sqlite3_bind_int(st, 3, state);
	sqlite3_bind_int(st, 4, flags);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)size);
	sqlite3_bind_int64(st, 6, (sqlite3_int64)gen);
	sqlite3_bind_int64(st, 7, atime);
	sqlite3_bind_int64(st, 8, (sqlite3_int64)blocks);
	sqlite3_bind_int64(st, 9, ctime_real);
	sqlite3_bind_int64(st, 10, ctime_shown);
	bind_osize(st, 11, state, size, osize);
	if (!res)
		res = to_errno(m, sqlite3_step(st));
	if (!res && sqlite3_changes(m->db) == 0)
		res = -ENOENT;
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

int meta_delete(struct meta *m, uint64_t ino, uint64_t *ret_cached)
{
	sqlite3_stmt *st = m->q[Q_DELETE];
	int rc, res;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	rc = sqlite3_step(st);
	if (ret_cached)
		*ret_cached = rc == SQLITE_ROW && sqlite3_column_int(st, 0) != META_DIRTY
				      ? (uint64_t)sqlite3_column_int64(st, 1) : 0;
	while (rc == SQLITE_ROW)
		rc = sqlite3_step(st);
	res = to_errno(m, rc);
	sqlite3_reset(st);
	munlock(m);
	return res;
}

int meta_list(struct meta *m, int (*cb)(void *arg, uint64_t ino, uint64_t gen,
					uint64_t size, uint32_t state),
	      void *arg)
{
	struct row {
		uint64_t ino, gen, size;
		uint32_t state;
	} *rows = NULL, *nr;
	size_t n = 0, cap = 0, i;
	sqlite3_stmt *st = m->q[Q_LIST];
	int rc, res = 0;

	mlock(m);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			nr = realloc(rows, cap * sizeof(*rows));
			if (!nr) {
				res = -ENOMEM;
				break;
			}
			rows = nr;
		}
		rows[n].ino = sqlite3_column_int64(st, 0);
		rows[n].gen = sqlite3_column_int64(st, 1);
		rows[n].size = sqlite3_column_int64(st, 2);
		rows[n].state = sqlite3_column_int(st, 3);
		n++;
	}
	if (!res && rc != SQLITE_DONE)
		res = to_errno(m, rc);
	sqlite3_reset(st);
	munlock(m);
	for (i = 0; !res && i < n; i++)
		res = cb(arg, rows[i].ino, rows[i].gen, rows[i].size, rows[i].state);
	free(rows);
	return res;
}

int meta_delete_gen(struct meta *m, uint64_t ino, uint64_t gen)
{
	sqlite3_stmt *st = m->q[Q_DELGEN];
	int res;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)gen);
	res = to_errno(m, sqlite3_step(st));
	sqlite3_reset(st);
	munlock(m);
	return res;
}

/* Run query q, which yields one number. */
static int one_number(struct meta *m, int q, uint64_t *ret)
{
	sqlite3_stmt *st = m->q[q];
	int rc, res;

	mlock(m);
	rc = sqlite3_step(st);
	res = rc == SQLITE_ROW ? 0 : to_errno(m, rc);
	if (!res)
		*ret = (uint64_t)sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	munlock(m);
	return res;
}

int meta_count_ctimes(struct meta *m, uint64_t *ret)
{
	return one_number(m, Q_ANYCTIME, ret);
}

int meta_count_dirs(struct meta *m, uint64_t *ret)
{
	return one_number(m, Q_ANYDIR, ret);
}

int meta_count(struct meta *m, uint64_t *ret)
{
	return one_number(m, Q_COUNT, ret);
}

int meta_lru(struct meta *m, unsigned limit, uint64_t skip, struct meta_victim **ret,
	     size_t *ret_n)
{
	return rows_of(m, Q_LRU, limit, skip, ret, ret_n);
}

int meta_dirty(struct meta *m, unsigned limit, uint64_t after, struct meta_victim **ret,
	       size_t *ret_n)
{
	return rows_of(m, Q_DIRTY, limit, after, ret, ret_n);
}

int meta_linked(struct meta *m, unsigned limit, uint64_t after, struct meta_victim **ret,
		size_t *ret_n)
{
	return rows_of(m, Q_LINKED, limit, after, ret, ret_n);
}

int meta_op_add(struct meta *m, uint32_t kind, uint64_t ino, const char *path,
		const char *origin, const char *version)
{
	sqlite3_stmt *st = m->q[Q_OPADD];
	int res;

	mlock(m);
	sqlite3_bind_int(st, 1, (int)kind);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)ino);
	sqlite3_bind_text(st, 3, path, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, version, -1, SQLITE_STATIC);
	res = to_errno(m, sqlite3_step(st));
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

int meta_op_renamed(struct meta *m, const char *from, const char *to, uint64_t ino)
{
	return renamed(m, Q_OPRENAMED, from, to, ino);
}

_Static_assert(META_OP_UNLAND == 5, "the kind in Q_LAND* and Q_OPFILESAFTER");

/* Run the statement q with ?1 bound to ino, ?2 to text (NULL: unbound, so NULL): 0 or -errno. */
static int by_ino(struct meta *m, int q, uint64_t ino, const char *text)
{
	sqlite3_stmt *st = m->q[q];
	int res;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	if (text)
		sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
	res = to_errno(m, sqlite3_step(st));
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

/* Is a landing of ino recorded (*ret_found), and is it at path (*ret_at)? */
static int landing_of(struct meta *m, uint64_t ino, const char *path, bool *ret_found,
		      bool *ret_at)
{
	sqlite3_stmt *st = m->q[Q_LANDGET];
	int rc, res;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	rc = sqlite3_step(st);
	*ret_found = rc == SQLITE_ROW;
	*ret_at = false;
	if (rc == SQLITE_ROW && path) {
		const char *p = (const char *)sqlite3_column_text(st, 0);

		*ret_at = p && !strcmp(p, path);
	}
	res = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : to_errno(m, rc);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

int meta_landing_set(struct meta *m, uint64_t ino, const char *path, bool *ret_here)
{
	bool found, here;
	int res = landing_of(m, ino, path, &found, &here);

	if (!res && found && !here)
		res = by_ino(m, Q_LANDOPS_INO, ino, NULL);
	if (!res && !here)
		res = by_ino(m, Q_LANDSET, ino, path);
	if (!res)
		*ret_here = here;
	return res;
}

int meta_landing_has(struct meta *m, uint64_t ino, bool *ret)
{
	bool at;

	return landing_of(m, ino, NULL, ret, &at);
}

int meta_landing_clear(struct meta *m, uint64_t ino)
{
	return by_ino(m, Q_LANDCLEAR, ino, NULL);
}

int meta_landing_gone(struct meta *m, uint64_t ino)
{
	int res = by_ino(m, Q_LANDOPS_INO, ino, NULL);

	return res ? res : by_ino(m, Q_LANDCLEAR, ino, NULL);
}

int meta_landing_left(struct meta *m, const char *path, const uint64_t *skip, size_t nskip)
{
	sqlite3_stmt *st = m->q[Q_LANDBELOW];
	uint64_t *inos = NULL;
	size_t n = 0, cap = 0;
	int rc, res = 0;

	mlock(m); /* recursive: the caller's transaction holds it too */
	sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
	while (!res && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t ino = (uint64_t)sqlite3_column_int64(st, 0);
		bool skipped = false;

		for (size_t i = 0; i < nskip; i++)
			skipped |= skip[i] == ino;
		if (skipped)
			continue;
		if (n == cap) {
			uint64_t *p = realloc(inos, (cap = cap ? 2 * cap : 8) * sizeof(*p));

			if (!p) {
				res = -ENOMEM;
				break;
			}
			inos = p;
		}
		inos[n++] = ino;
	}
	if (!res && rc != SQLITE_DONE)
		res = to_errno(m, rc);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	for (size_t i = 0; !res && i < n; i++)
		res = meta_landing_gone(m, inos[i]);
	munlock(m);
	free(inos);
	return res;
}

int meta_landing_orphans(struct meta *m)
{
	int res;

	mlock(m);
	/* no row (removed), or a new file's row at another path */
	res = exec(m, "CREATE TEMP TABLE IF NOT EXISTS orphans (ino INTEGER PRIMARY KEY);"
		      "DELETE FROM orphans;"
		      "INSERT INTO orphans SELECT l.ino FROM landings AS l "
		      "LEFT JOIN files AS f ON f.ino = l.ino WHERE f.ino IS NULL OR "
		      "(f.origin IS NULL AND f.path IS NOT l.path);"
		      "INSERT INTO ops (kind, ino, path) SELECT 5, ino, path FROM landings "
		      "WHERE ino IN orphans ORDER BY path;"
		      "DELETE FROM landings WHERE ino IN orphans;"
		      "DELETE FROM orphans;");
	munlock(m);
	return res;
}

int meta_op_first(struct meta *m, struct meta_op *ret)
{
	sqlite3_stmt *st = m->q[Q_OPFIRST];
	int rc, res = 0, oom = 0;

	memset(ret, 0, sizeof(*ret));
	mlock(m);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		ret->seq = sqlite3_column_int64(st, 0);
		ret->kind = (uint32_t)sqlite3_column_int(st, 1);
		ret->ino = (uint64_t)sqlite3_column_int64(st, 2);
		ret->path = col_text(st, 3, &oom);
		ret->origin = col_text(st, 4, &oom);
		ret->version = col_text(st, 5, &oom);
	} else {
		res = rc == SQLITE_DONE ? -ENOENT : to_errno(m, rc);
	}
	sqlite3_reset(st);
	munlock(m);
	if (!res && oom) {
		meta_op_free(ret);
		res = -ENOMEM;
	}
	return res;
}

int meta_op_done(struct meta *m, int64_t seq)
{
	sqlite3_stmt *st = m->q[Q_OPDONE];
	int res;

	mlock(m);
	sqlite3_bind_int64(st, 1, seq);
	res = to_errno(m, sqlite3_step(st));
	sqlite3_reset(st);
	munlock(m);
	return res;
}

int meta_op_count(struct meta *m, uint64_t *ret)
{
	return one_number(m, Q_OPCOUNT, ret);
}

int meta_op_park(struct meta *m, int64_t seq, const char *why)
{
	sqlite3_stmt *st = m->q[Q_PARK];
	int res = meta_begin(m);

	if (res)
		return res;
	sqlite3_bind_int64(st, 1, seq);
	sqlite3_bind_text(st, 2, why, -1, SQLITE_STATIC);
	res = to_errno(m, sqlite3_step(st));
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (!res) {
		st = m->q[Q_OPDONE];
		sqlite3_bind_int64(st, 1, seq);
		res = to_errno(m, sqlite3_step(st));
		sqlite3_reset(st);
	}
	if (!res)
		return meta_commit(m);
	meta_rollback(m);
	return res;
}

int meta_ops_unpark(struct meta *m)
{
	uint64_t n = 0;
	int res = meta_parked_count(m, &n);

	if (res || !n)
		return res; /* none: no write, no sync of the log */
	res = meta_begin(m);
	if (res)
		return res;
	res = to_errno(m, sqlite3_step(m->q[Q_UNPARK]));
	sqlite3_reset(m->q[Q_UNPARK]);
	if (!res) {
		res = to_errno(m, sqlite3_step(m->q[Q_UNPARKED]));
		sqlite3_reset(m->q[Q_UNPARKED]);
	}
	if (!res)
		return meta_commit(m);
	meta_rollback(m);
	return res;
}

int meta_parked_count(struct meta *m, uint64_t *ret)
{
	return one_number(m, Q_PARKCOUNT, ret);
}

int meta_parked_list(struct meta *m, void (*cb)(void *arg, const char *path, const char *why),
		     void *arg)
{
	sqlite3_stmt *st = m->q[Q_PARKLIST];
	int rc;

	mlock(m);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *path = (const char *)sqlite3_column_text(st, 0);
		const char *why = (const char *)sqlite3_column_text(st, 1);

		cb(arg, path ? path : "", why ? why : "");
	}
	rc = to_errno(m, rc);
	sqlite3_reset(st);
	munlock(m);
	return rc;
}

int meta_op_before(struct meta *m, const char *path, uint64_t ino, bool *ret)
{
	sqlite3_stmt *st = m->q[Q_OPBEFORE];
	int rc, res;

	mlock(m);
	sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)ino);
	rc = sqlite3_step(st);
	res = rc == SQLITE_ROW ? 0 : to_errno(m, rc);
	if (!res)
		*ret = sqlite3_column_int64(st, 0) != 0;
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

_Static_assert(META_OP_DELETE == 1 && META_OP_RENAME == 2, "the kinds in Q_OP* statements");

int meta_op_drop_renames(struct meta *m, uint64_t ino)
{
	sqlite3_stmt *st = m->q[Q_OPDROPRENAMES];
	int rc;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return rc == SQLITE_DONE ? 0 : to_errno(m, rc);
}

int meta_op_files_after(struct meta *m, int64_t seq, const char *below, bool *ret)
{
	sqlite3_stmt *st = m->q[Q_OPFILESAFTER];
	int rc, res;

	mlock(m);
	sqlite3_bind_int64(st, 1, seq);
	sqlite3_bind_text(st, 2, below ? below : "", -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	res = rc == SQLITE_ROW ? 0 : to_errno(m, rc);
	if (!res)
		*ret = sqlite3_column_int64(st, 0) != 0;
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

void meta_op_free(struct meta_op *op)
{
	free(op->path);
	free(op->origin);
	free(op->version);
	memset(op, 0, sizeof(*op));
}

int meta_set_version(struct meta *m, uint64_t ino, uint64_t gen, const char *origin,
		     const char *version)
{
	sqlite3_stmt *st = m->q[Q_SETVERSION];
	int res;

	mlock(m);
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	sqlite3_bind_text(st, 2, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, version, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)gen);
	res = to_errno(m, sqlite3_step(st));
	if (!res && sqlite3_changes(m->db) == 0)
		res = -ENOENT;
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

/* Rows of query q (ino, path, blocks, atime), limit after skip. */
static int rows_of(struct meta *m, int q, unsigned limit, uint64_t skip,
		   struct meta_victim **ret, size_t *ret_n)
{
	sqlite3_stmt *st = m->q[q];
	struct meta_victim *v = calloc(limit ? limit : 1, sizeof(*v));
	size_t n = 0;
	int rc, res = 0, oom = 0;

	if (!v)
		return -ENOMEM;
	mlock(m);
	sqlite3_bind_int64(st, 1, limit);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)skip);
	while (n < limit && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		v[n].ino = sqlite3_column_int64(st, 0);
		v[n].path = col_text(st, 1, &oom);
		v[n].blocks = sqlite3_column_int64(st, 2);
		v[n].atime = sqlite3_column_int64(st, 3);
		n++;
	}
	if (n < limit && rc != SQLITE_DONE)
		res = to_errno(m, rc);
	sqlite3_reset(st);
	munlock(m);
	if (oom && !res)
		res = -ENOMEM;
	if (res) {
		meta_victims_free(v, n);
		return res;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

void meta_victims_free(struct meta_victim *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i].path);
	free(v);
}

int meta_cached_total(struct meta *m, uint64_t *ret)
{
	return one_number(m, Q_TOTAL, ret);
}

/* q (Q_RENAME, Q_OPRENAMED) of from to to, of the file ino only (0: all below from) */
static int renamed(struct meta *m, int q, const char *from, const char *to, uint64_t ino)
{
	sqlite3_stmt *st = m->q[q];
	int res;

	mlock(m);
	sqlite3_bind_text(st, 1, from, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, to, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)ino);
	res = to_errno(m, sqlite3_step(st));
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

static int two_texts(struct meta *m, int q, const char *a, const char *b)
{
	sqlite3_stmt *st = m->q[q];
	int res;

	mlock(m);
	sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
	res = to_errno(m, sqlite3_step(st));
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

int meta_origins(struct meta *m, const char *prefix,
		 int (*cb)(void *arg, uint64_t ino, const char *path, uint32_t state,
			   const char *origin, const char *version),
		 void *arg)
{
	sqlite3_stmt *st = m->q[Q_ORIGINS];
	int rc, res = 0;

	mlock(m);
	sqlite3_bind_text(st, 1, prefix, -1, SQLITE_STATIC);
	while (!res && (rc = sqlite3_step(st)) == SQLITE_ROW)
		res = cb(arg, (uint64_t)sqlite3_column_int64(st, 0),
			 (const char *)sqlite3_column_text(st, 1), (uint32_t)sqlite3_column_int(st, 2),
			 (const char *)sqlite3_column_text(st, 3),
			 (const char *)sqlite3_column_text(st, 4));
	if (!res && rc != SQLITE_DONE)
		res = to_errno(m, rc);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	munlock(m);
	return res;
}

int meta_rebase_origin(struct meta *m, const char *from, const char *to)
{
	return two_texts(m, Q_REBASE, from, to);
}

int meta_rename(struct meta *m, const char *from, const char *to, uint64_t ino)
{
	return renamed(m, Q_RENAME, from, to, ino);
}

int meta_set_path(struct meta *m, uint64_t ino, const char *path)
{
	return by_ino(m, Q_SETPATH, ino, path); /* NULL: ?2 unbound, NULL */
}

int meta_begin(struct meta *m)
{
	int res;

	mlock(m);
	res = m->in_txn ? -EINVAL : exec(m, "BEGIN IMMEDIATE");
	if (res) {
		munlock(m);
		return res;
	}
	m->in_txn = true; /* and the lock stays held until the end */
	return 0;
}

/* The transaction is over: give back the hold meta_begin() took.  Locked. */
static void end_txn(struct meta *m)
{
	m->in_txn = false;
	munlock(m);
}

int meta_commit(struct meta *m)
{
	int res;

	mlock(m);
	if (!m->in_txn) {
		munlock(m);
		return -EINVAL;
	}
	res = exec(m, "COMMIT");
	/* SQLite may have rolled back itself (a full disk, for one) */
	if (!res || sqlite3_get_autocommit(m->db))
		end_txn(m);
	munlock(m);
	return res;
}

void meta_rollback(struct meta *m)
{
	mlock(m);
	if (m->in_txn) {
		/* keeps errmsg: the caller logs why it rolled back */
		if (!sqlite3_get_autocommit(m->db))
			sqlite3_exec(m->db, "ROLLBACK", NULL, NULL, NULL);
		end_txn(m);
	}
	munlock(m);
}

void meta_file_free(struct meta_file *f)
{
	if (!f)
		return;
	free(f->origin);
	free(f->version);
	free(f->sha256);
	free(f->chunks);
	f->chunks = NULL;
	f->chunks_len = 0;
	free(f->path);
	f->origin = f->version = f->sha256 = f->path = NULL;
	rs_clear(&f->present);
}

const char *meta_state_name(uint32_t state)
{
	switch (state) {
	case META_PLACEHOLDER: return "placeholder";
	case META_PARTIAL: return "partial";
	case META_RESIDENT: return "resident";
	case META_DIRTY: return "dirty";
	case META_DIR_UNLISTED: return "unlisted";
	case META_DIR_LISTED: return "listed";
	default: return "unknown";
	}
}
