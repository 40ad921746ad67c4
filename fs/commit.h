/*
 * commit.h - fills' staging files and commits (commit.c).
 *
 * A fill hook writes into a staging file of its own delivery (an
 * unnamed file in STORE/.hsmfs as large as the file, from a pool the
 * timer keeps full); once every hook that must answer allowed, the fill
 * is committed: what it may write (what is missing, less what users
 * claimed meanwhile) is copied into the store file with S.lock dropped,
 * a fill that completes a file with a manifest digest is checked before
 * a byte is kept, and the store file's times stay what the mount showed
 * unless a user change came.  The state layer: below the engine, beside
 * fstate.c, whose struct fstate it works on under S.lock.
 */
#ifndef HSMFS_COMMIT_H
#define HSMFS_COMMIT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include "ranges.h"

struct event;
struct fstate;

/*
 * A staging file of size bytes for one delivery, from the pool (made
 * here when it ran dry), or -errno.  S.lock held.
 */
int open_stage(uint64_t size);
/* Fill the staging pool (STAGE_POOL files).  Without S.lock. */
void stage_refill(void);
/*
 * Does a fill of [start, end) complete fs, whose manifest gave a digest?
 * Then no byte of it is kept or served before the digest is checked
 * (commit_fill; events_filled answers none early).  S.lock held.
 */
bool fill_completes_digest(const struct fstate *fs, uint64_t start, uint64_t end);
/*
 * The sha256 (hex) of a file of size bytes whose ranges todo (may be
 * NULL) are read from stage and the rest from dst: 0, -ENODATA when a
 * file is shorter than that (got is the digest of what there is), or
 * -errno when a read or write fails.  With wdst >= 0, what it reads of
 * todo is also written to wdst, from the buffer it hashed, and added to
 * written.  No lock held: it reads files.
 */
int file_digest(int stage, int dst, const struct rangeset *todo, uint64_t size, char got[65],
		int wdst, struct rangeset *written);
/*
 * Commit ev, an allowed fill (copy its staging file in, less what users
 * changed meanwhile): the result to complete it with.  S.lock held,
 * dropped meanwhile.
 */
int commit_fill(struct event *ev);
/*
 * Times are final: a fill's copy or an eviction's punch changes the
 * store file's mtime and ctime, which the mount shows.  times_kept()
 * puts the mtime back to before's unless a user change began since
 * nchanges (fs->nchanges then) or is under way, and remembers the
 * ctime to show.  S.lock held, dropped around the futimens and fstat;
 * meanwhile user changes of the file wait (events_change_begin).
 */
void times_kept(struct fstate *fs, int fd, const struct stat *before,
		uint64_t nchanges);
/* fd's ctime now (ns), or -1.  Without S.lock: an fstat. */
int64_t ctime_now(int fd);
/*
 * The daemon's own change (not of the mtime) moved the store file's
 * ctime from before's to after (ctime_now(), -1: unknown): remember the
 * one to show, unless a user change began since nchanges.  S.lock held.
 */
void ctime_kept(struct fstate *fs, const struct stat *before, int64_t after,
		uint64_t nchanges);

#endif
