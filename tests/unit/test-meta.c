/*
 * Unit tests for lib/meta.c against a real SQLite database in a
 * temporary directory: round trips, updates, deletes, migration of an
 * older stored schema, refusal of a newer one, garbage files.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meta.h"
#include "tap.h"

static char dir[] = "/tmp/hsmfs-meta-XXXXXX";
static struct meta *shared;

static char *db(const char *name)
{
	static char p[256];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

/* Writes a row from another thread (see the transaction test). */
static void *put_5000(void *arg)
{
	struct meta_file f = { .ino = 5000, .size = 1, .state = META_PLACEHOLDER };

	*(int *)arg = meta_put(shared, &f);
	return NULL;
}

static void collect_parked(void *arg, const char *path, const char *why)
{
	char *seen = arg;
	size_t n = strlen(seen);

	snprintf(seen + n, 64 - n, "%s:%s;", path, why);
}

int main(void)
{
	struct meta *m = NULL;
	struct meta_file f = { 0 }, g = { 0 };
	uint64_t n = 0;

	if (!mkdtemp(dir))
		return 1;
	ok(meta_open(db("a.db"), &m) == 0, "create a new database");
	shared = m;
	ok(meta_count(m, &n) == 0 && n == 0, "new database is empty");
	ok(meta_get(m, 42, &g) == -ENOENT, "no row: ENOENT (the file is resident)");

	f.ino = 42;
	f.size = 5ULL << 30;
	f.mtime = 1700000000;
	f.mode = 0640;
	f.state = META_PARTIAL;
	f.flags = META_F_PINNED;
	f.origin = "http://127.0.0.1/x y";
	f.version = "\"abc\"";
	f.sha256 = NULL;
	rs_add(&f.present, 0, 4096);
	rs_add(&f.present, 1 << 20, 2 << 20);
	f.atime = 17;
	f.gen = 5;
	ok(meta_put(m, &f) == 0, "put a row");
	ok(meta_get(m, 42, &g) == 0 && g.size == f.size && g.mtime == f.mtime &&
		   g.mode == 0640 && g.state == META_PARTIAL &&
		   g.flags == META_F_PINNED && !strcmp(g.origin, f.origin) &&
		   !strcmp(g.version, f.version) && g.sha256 == NULL &&
		   g.present.n == 2 && rs_total(&g.present) == 4096 + (1 << 20) &&
		   g.atime == 17 && g.gen == 5,
	   "get returns every field");
	meta_file_free(&g);

	rs_add(&f.present, 4096, 1 << 20);
	ok(meta_set_present(m, 42, &f.present, META_RESIDENT, 0, f.size, f.size, 5, 0, 0, 7, 3) == 0,
	   "update present ranges");
	ok(meta_get(m, 42, &g) == 0 && g.present.n == 1 && g.state == META_RESIDENT &&
	   g.ctime_real == 7 && g.ctime_shown == 3,
	   "updated ranges merged, state and change times changed");
	meta_file_free(&g);
	ok(meta_set_present(m, 42, &f.present, META_DIRTY, 0, f.size + 8, f.size, 5, 0, 0, 7, 3) ==
		   0 && meta_get(m, 42, &g) == 0 && g.size == f.size + 8 && g.osize == f.size,
	   "a dirty row keeps the recorded version's size beside its own");
	meta_file_free(&g);
	ok(meta_set_present(m, 42, &f.present, META_RESIDENT, 0, f.size, 1, 5, 0, 0, 7, 3) == 0 &&
		   meta_get(m, 42, &g) == 0 && g.osize == f.size,
	   "a clean row's recorded size is its size");
	meta_file_free(&g);
	ok(meta_set_present(m, 43, &f.present, META_RESIDENT, 0, f.size, f.size, 5, 0, 0, 0, 0) == -ENOENT,
	   "update of a missing row: ENOENT");
	ok(meta_set_present(m, 42, &f.present, META_PARTIAL, 0, f.size, f.size, 6, 0, 0, 0, 0) == -ENOENT,
	   "update for another generation does not apply");

	ok(meta_begin(m) == 0, "begin");
	for (uint64_t i = 100; i < 1100; i++) {
		f.ino = i;
		meta_put(m, &f);
	}
	ok(meta_commit(m) == 0 && meta_count(m, &n) == 0 && n == 1001,
	   "1000 rows in one transaction");
	meta_begin(m);
	meta_delete(m, 100, NULL);
	meta_rollback(m);
	ok(meta_get(m, 100, &g) == 0, "rollback keeps the row");
	meta_file_free(&g);
	ok(meta_delete(m, 100, NULL) == 0 && meta_get(m, 100, &g) == -ENOENT, "delete");

	/* a transaction holds its own thread's writes, and no other's */
	pthread_t t;
	int put_res = -1;

	ok(meta_begin(m) == 0 && meta_begin(m) == -EINVAL, "no transaction within one");
	meta_delete(m, 101, NULL);
	pthread_create(&t, NULL, put_5000, &put_res);
	usleep(50000); /* let it reach the lock (it waits either way) */
	meta_rollback(m);
	pthread_join(t, NULL);
	ok(put_res == 0 && meta_get(m, 5000, &g) == 0, "another thread's write outlives a rollback");
	meta_file_free(&g);
	ok(meta_get(m, 101, &g) == 0, "while the transaction's own is undone");
	meta_file_free(&g);
	ok(meta_commit(m) == -EINVAL, "commit outside a transaction: EINVAL");
	meta_rollback(m); /* and a rollback outside one does nothing */
	ok(meta_get(m, 101, &g) == 0, "a stray rollback changes nothing");
	meta_file_free(&g);

	/* room for the log is allocated, so a full filesystem can record */
	struct stat st;

	if (stat(db("a.db-wal"), &st) < 0)
		st.st_blocks = 0;
	ok(st.st_blocks * 512 >= 2 << 20, "the write-ahead log has 2 MiB allocated (%lld)",
	   (long long)st.st_blocks * 512);
	meta_close(m);

	ok(meta_open(db("a.db"), &m) == 0 && meta_count(m, &n) == 0 && n == 1001,
	   "reopen: rows survive");
	meta_close(m);

	/* an older stored schema (version 0, unrelated table) migrates */
	sqlite3 *raw;
	sqlite3_open(db("old.db"), &raw);
	sqlite3_exec(raw, "CREATE TABLE other(x); INSERT INTO other VALUES (1);",
		     NULL, NULL, NULL);
	sqlite3_close(raw);
	ok(meta_open(db("old.db"), &m) == 0, "version 0 database migrates");
	f.ino = 7;
	ok(meta_put(m, &f) == 0 && meta_get(m, 7, &g) == 0, "migrated database works");
	meta_file_free(&g);
	meta_close(m);

	/* a newer schema is refused */
	sqlite3_open(db("new.db"), &raw);
	sqlite3_exec(raw, "PRAGMA user_version = 99", NULL, NULL, NULL);
	sqlite3_close(raw);
	m = NULL;
	ok(meta_open(db("new.db"), &m) == -EPROTO && m == NULL, "newer schema refused");

	/* garbage is not a database */
	int fd = open(db("junk.db"), O_CREAT | O_WRONLY, 0600);
	char junk[8192];
	memset(junk, 0x5a, sizeof(junk));
	(void)!write(fd, junk, sizeof(junk));
	close(fd);
	ok(meta_open(db("junk.db"), &m) == -EBADMSG, "garbage file: EBADMSG");

	/* a damaged range blob reads as nothing present, never as present */
	ok(meta_open(db("blob.db"), &m) == 0, "open blob.db");
	f.ino = 9;
	meta_put(m, &f);
	meta_close(m);
	sqlite3_open(db("blob.db"), &raw);
	sqlite3_exec(raw, "UPDATE files SET present = x'0102' WHERE ino = 9", NULL, NULL, NULL);
	sqlite3_close(raw);
	meta_open(db("blob.db"), &m);
	ok(meta_get(m, 9, &g) == 0 && g.present.n == 0, "damaged ranges: nothing present");
	meta_file_free(&g);
	meta_close(m);

	/* a version 1 database (before paths and blocks) migrates, keeping rows */
	sqlite3_open(db("v1.db"), &raw);
	sqlite3_exec(raw,
		     "CREATE TABLE files (ino INTEGER PRIMARY KEY, size INTEGER NOT NULL,"
		     " mtime INTEGER NOT NULL DEFAULT 0, mode INTEGER NOT NULL DEFAULT 420,"
		     " state INTEGER NOT NULL, flags INTEGER NOT NULL DEFAULT 0,"
		     " origin TEXT, version TEXT, sha256 TEXT,"
		     " present BLOB NOT NULL DEFAULT x'', atime INTEGER NOT NULL DEFAULT 0,"
		     " gen INTEGER NOT NULL DEFAULT 0);"
		     "INSERT INTO files (ino, size, state, origin) VALUES (5, 10, 1, 'u');"
		     "PRAGMA user_version = 1;", NULL, NULL, NULL);
	sqlite3_close(raw);
	ok(meta_open(db("v1.db"), &m) == 0 && meta_get(m, 5, &g) == 0 && g.size == 10 &&
		   g.path == NULL && g.blocks == 0 && g.ctime_real == 0 && g.ctime_shown == 0,
	   "version 1 migrates: rows kept, no path, no blocks, no change times");
	{
		uint64_t nct = 1;

		ok(meta_count_ctimes(m, &nct) == 0 && nct == 0, "no change time recorded yet");
	}
	meta_file_free(&g);
	meta_close(m);

	/* eviction candidates, the cache's size, paths that follow renames */
	ok(meta_open(db("lru.db"), &m) == 0, "open lru.db");
	{
		static const struct { uint64_t ino; const char *path; uint32_t state, flags;
				      uint64_t blocks; int64_t atime; } rows[] = {
			{ 1, "d/a", META_RESIDENT, 0, 4096, 300 },
			{ 2, "d/b", META_PARTIAL, 0, 8192, 100 },
			{ 3, "d/c", META_DIRTY, 0, 4096, 50 },         /* dirty: never */
			{ 4, "e/d", META_RESIDENT, META_F_PINNED, 4096, 10 }, /* pinned */
			{ 5, "e/e", META_PLACEHOLDER, 0, 0, 5 },       /* nothing to free */
			{ 6, NULL, META_RESIDENT, 0, 4096, 1 },        /* path unknown */
			{ 7, "dd/x", META_RESIDENT, 0, 4096, 200 },
		};
		struct meta_victim *v;
		size_t nv;
		uint64_t total, cached;

		for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
			struct meta_file r = { .ino = rows[i].ino, .size = 1, .state = rows[i].state,
					       .flags = rows[i].flags, .blocks = rows[i].blocks,
					       .atime = rows[i].atime, .path = (char *)rows[i].path };
			meta_put(m, &r);
		}
		ok(meta_lru(m, 10, 0, &v, &nv) == 0 && nv == 3 && v[0].ino == 2 &&
			   v[1].ino == 7 && v[2].ino == 1 && !strcmp(v[0].path, "d/b") &&
			   v[0].blocks == 8192 && v[0].atime == 100,
		   "LRU: clean, unpinned, with bytes and a path, oldest first");
		meta_victims_free(v, nv);
		ok(meta_lru(m, 10, 2, &v, &nv) == 0 && nv == 1 && v[0].ino == 1,
		   "LRU: skipping the first ones");
		meta_victims_free(v, nv);
		ok(meta_cached_total(m, &total) == 0 && total == 4096 + 8192 + 4096 + 4096 + 4096,
		   "the cache's size leaves dirty files out");
		ok(meta_rename(m, "d", "z", 0) == 0, "rename a directory");
		ok(meta_get(m, 1, &g) == 0 && !strcmp(g.path, "z/a"), "its files follow");
		meta_file_free(&g);
		ok(meta_get(m, 7, &g) == 0 && !strcmp(g.path, "dd/x"),
		   "a sibling sharing the prefix does not");
		meta_file_free(&g);
		ok(meta_rename(m, "z/a", "a2", 1) == 0 && meta_get(m, 1, &g) == 0 &&
			   !strcmp(g.path, "a2"), "rename a file");
		meta_file_free(&g);
		{
			/* two rows at one path (a new file's inserted under the
			 * name another's leaves): a file's rename moves its own */
			struct meta_file r7 = { 0 };

			ok(meta_set_path(m, 7, "a2") == 0 &&
				   meta_rename(m, "a2", "a3", 7) == 0 && meta_get(m, 1, &g) == 0 &&
				   !strcmp(g.path, "a2") && meta_get(m, 7, &r7) == 0 &&
				   !strcmp(r7.path, "a3"),
			   "a file's rename moves its own row, not another's at the same path");
			meta_file_free(&g);
			meta_file_free(&r7);
		}
		ok(meta_set_path(m, 1, NULL) == 0 && meta_get(m, 1, &g) == 0 && g.path == NULL,
		   "forget a path");
		meta_file_free(&g);
		ok(meta_delete(m, 2, &cached) == 0 && cached == 8192 &&
			   meta_delete(m, 3, &cached) == 0 && cached == 0 &&
			   meta_delete(m, 99, &cached) == 0 && cached == 0,
		   "delete tells what the row counted in the cache");
	}
	meta_close(m);

	/*
	 * The files to archive, paged while each page is archived (its rows
	 * leave the set) before the next is asked: every dirty file is seen
	 * once (paged by an offset, a sync skipped as many as it archived).
	 */
	ok(meta_open(db("dirty.db"), &m) == 0, "open dirty.db");
	{
		enum { ROWS = 1000, PAGE = 64 };
		static bool seen[ROWS + 1];
		unsigned got = 0, twice = 0;
		uint64_t after = 0;

		for (uint64_t i = 1; i <= ROWS; i++) {
			char path[32];
			/* uses out of the inodes' order, as a sync meets them */
			struct meta_file r = { .ino = i, .size = 1, .state = META_DIRTY,
					       .atime = (int64_t)((i * 7919) % ROWS), .path = path };

			snprintf(path, sizeof(path), "f%llu", (unsigned long long)i);
			meta_put(m, &r);
		}
		for (;;) {
			struct meta_victim *v;
			size_t nv;

			if (meta_dirty(m, PAGE, after, &v, &nv))
				break;
			for (size_t i = 0; i < nv; i++) {
				struct meta_file r;

				twice += seen[v[i].ino];
				seen[v[i].ino] = true;
				got++;
				/* archived: clean now */
				if (!meta_get(m, v[i].ino, &r)) {
					r.state = META_RESIDENT;
					meta_put(m, &r);
					meta_file_free(&r);
				}
			}
			if (nv)
				after = v[nv - 1].ino;
			meta_victims_free(v, nv);
			if (nv < PAGE)
				break;
		}
		ok(got == ROWS && !twice, "paged while archived: %u of %d dirty files seen, %u twice",
		   got, ROWS, twice);
	}
	meta_close(m);

	/* landings: where unanswered first uploads may have made objects */
	ok(meta_open(db("land.db"), &m) == 0, "open land.db");
	{
		struct meta_file r = { .ino = 11, .size = 1, .state = META_DIRTY,
				       .flags = META_F_NEW, .path = "d/x" };
		struct meta_op op;
		uint64_t busy = 13, nops = 0;
		bool here = true;

		meta_put(m, &r);
		ok(meta_landing_set(m, 11, "d/x", &here) == 0 && !here,
		   "a first landing is not here already");
		ok(meta_landing_set(m, 11, "d/x", &here) == 0 && here,
		   "the same path again is (its upload replaces it)");
		ok(meta_landing_set(m, 11, "d/y", &here) == 0 && !here &&
			   meta_op_first(m, &op) == 0 && op.kind == META_OP_UNLAND && op.ino == 11 &&
			   !strcmp(op.path, "d/x"),
		   "one elsewhere: the old landing becomes an UNLAND op");
		meta_op_done(m, op.seq);
		meta_op_free(&op);
		meta_landing_set(m, 12, "d/z", &here);
		meta_landing_set(m, 13, "d/w", &here);
		meta_landing_set(m, 14, "dd/v", &here);
		ok(meta_landing_left(m, "d", &busy, 1) == 0 && meta_op_count(m, &nops) == 0 &&
			   nops == 2, "a directory left: its landings go, but a busy one's and a "
			   "sibling prefix's");
		ok(meta_op_first(m, &op) == 0 && !strcmp(op.path, "d/y"), "in path order");
		meta_op_done(m, op.seq);
		meta_op_free(&op);
		ok(meta_op_first(m, &op) == 0 && !strcmp(op.path, "d/z"), "both of them");
		meta_op_done(m, op.seq);
		meta_op_free(&op);
		ok(meta_landing_gone(m, 13) == 0 && meta_op_first(m, &op) == 0 &&
			   op.ino == 13 && meta_op_done(m, op.seq) == 0,
		   "a removed file's landing goes");
		meta_op_free(&op);
		ok(meta_landing_clear(m, 14) == 0 && meta_landing_gone(m, 14) == 0 &&
			   meta_op_count(m, &nops) == 0 && nops == 0,
		   "a cleared one leaves nothing");
		meta_landing_set(m, 11, "d/x", &here); /* where its row is */
		meta_landing_set(m, 15, "e/q", &here); /* no row */
		ok(meta_begin(m) == 0 && meta_landing_orphans(m) == 0 && meta_commit(m) == 0 &&
			   meta_op_count(m, &nops) == 0 && nops == 1 && meta_op_first(m, &op) == 0 &&
			   op.ino == 15, "at start: only a landing whose file is not there goes");
		meta_op_free(&op);
		ok(meta_landing_set(m, 11, "d/x", &here) == 0 && here, "the other stays");
		/* a file with an object recorded: its move follows it, not an UNLAND */
		struct meta_file o = { .ino = 16, .size = 1, .state = META_DIRTY, .path = "d/o",
				       .origin = "http://127.0.0.1/d/o", .version = "\"1\"" };
		bool has = false;

		meta_put(m, &o);
		while (meta_op_first(m, &op) == 0) {
			meta_op_done(m, op.seq);
			meta_op_free(&op);
		}
		meta_landing_set(m, 16, "d/o", &here);
		ok(meta_landing_left(m, "d/o", NULL, 0) == 0 && meta_op_count(m, &nops) == 0 &&
			   nops == 0 && meta_landing_has(m, 16, &has) == 0 && has,
		   "a renamed file with an object keeps its landing");
		meta_rename(m, "d/o", "d/o2", 0);
		ok(meta_begin(m) == 0 && meta_landing_orphans(m) == 0 && meta_commit(m) == 0 &&
			   meta_op_count(m, &nops) == 0 && nops == 0, "at start too");
		ok(meta_landing_clear(m, 16) == 0 && meta_landing_has(m, 16, &has) == 0 && !has,
		   "cleared: none");
	}
	{
		/* parked ops: out of the queue, counted, back at its end in order */
		struct meta_op op;
		uint64_t nops = 9, nparked = 9;
		char seen[64] = "";

		while (meta_op_first(m, &op) == 0) {
			meta_op_done(m, op.seq);
			meta_op_free(&op);
		}
		meta_op_add(m, META_OP_RMDIR, 0, "kept", NULL, NULL);
		meta_op_add(m, META_OP_DELETE, 17, "theirs", "http://127.0.0.1/theirs", "\"2\"");
		meta_op_add(m, META_OP_MKDIR, 0, "after", NULL, NULL);
		ok(meta_op_first(m, &op) == 0 && meta_op_park(m, op.seq, "not empty") == 0,
		   "an op parked");
		meta_op_free(&op);
		ok(meta_op_first(m, &op) == 0 && meta_op_park(m, op.seq, "changed there") == 0,
		   "a second");
		meta_op_free(&op);
		ok(meta_op_count(m, &nops) == 0 && nops == 1 &&
			   meta_parked_count(m, &nparked) == 0 && nparked == 2,
		   "they left the queue, and are counted");
		meta_parked_list(m, collect_parked, seen);
		ok(!strcmp(seen, "kept:not empty;theirs:changed there;"), "listed in order (%s)",
		   seen);
		ok(meta_ops_unpark(m) == 0 && meta_parked_count(m, &nparked) == 0 && nparked == 0 &&
			   meta_op_count(m, &nops) == 0 && nops == 3,
		   "unparked: back in the queue");
		ok(meta_op_first(m, &op) == 0 && !strcmp(op.path, "after") &&
			   meta_op_done(m, op.seq) == 0,
		   "after the ops that were behind them");
		meta_op_free(&op);
		ok(meta_op_first(m, &op) == 0 && !strcmp(op.path, "kept") &&
			   meta_op_done(m, op.seq) == 0,
		   "in their order");
		meta_op_free(&op);
		ok(meta_op_first(m, &op) == 0 && op.kind == META_OP_DELETE && op.ino == 17 &&
			   !strcmp(op.origin, "http://127.0.0.1/theirs") &&
			   !strcmp(op.version, "\"2\""),
		   "whole: kind, file, object and version");
		meta_op_done(m, op.seq);
		meta_op_free(&op);

		/* a directory's removal waits for those of the directories below it */
		bool later = true;

		meta_op_add(m, META_OP_RMDIR, 0, "a", NULL, NULL);
		meta_op_add(m, META_OP_RMDIR, 0, "a/b", NULL, NULL);
		meta_op_add(m, META_OP_RMDIR, 0, "ab", NULL, NULL);
		ok(meta_op_first(m, &op) == 0 && meta_op_files_after(m, op.seq, "a", &later) == 0 &&
			   later,
		   "a removal of a directory below, after it, is waited for");
		ok(meta_op_files_after(m, op.seq, "a/b", &later) == 0 && !later,
		   "not one beside it (ab), nor itself");
		meta_op_free(&op);
		while (meta_op_first(m, &op) == 0) {
			meta_op_done(m, op.seq);
			meta_op_free(&op);
		}
	}
	meta_close(m);

	rs_clear(&f.present);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	(void)!system(cmd);
	return tap_done();
}
