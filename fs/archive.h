/*
 * archive.h - what users change goes back to the origin (archive.c).
 *
 * A dirty file (fstate.h: DIRTY, changed or made on the mount) is
 * archived by one of the archiver threads (ARCHIVERS of them, archive.c:
 * an upload waits for the origin's round trips), each a file at a time:
 *   1. the names first: while the ops table holds an op of the file's
 *      path (a removal of it, a rename onto it), the archive waits for
 *      the namer to apply it (the file is due again shortly), before
 *      anything is fetched or copied;
 *   2. every byte present: what is missing of the recorded version is
 *      fetched first (a read of the whole file, as a reader's);
 *   3. a stable snapshot: the store file is cloned (FICLONE; a copy where
 *      the store cannot) into an unnamed staging file while no user
 *      change is in flight, and again if one began meanwhile
 *      ("archive-snapshot");
 *   4. an ARCHIVE event gives a read-only descriptor of the snapshot to
 *      one archive hook (a fill hook subscribed to ARCHIVE), and to
 *      every watcher subscribed; the archive hook uploads it,
 *      conditional on the recorded version, says ARCHIVED (the new
 *      version) and allows ("archive-answered");
 *   5. the new version is recorded whatever happened meanwhile (the
 *      origin holds it now); the file becomes clean (fstate_archived())
 *      only if no user change began since the snapshot, else it stays
 *      dirty and is archived again; the writer commits state and version
 *      in one transaction, and the archive counts once it is durable
 *      ("archive-committed").  A file removed while
 *      its upload was in flight is not recorded: if the origin took it,
 *      its removal there goes into the ops table instead
 *      ("archive-gone-recorded"), after the removal's own op, which the
 *      namer holds until this attempt ends.
 * That is step 6 of the durability order (state.h).  A crash at any
 * step leaves the row dirty: the file is archived again at the next
 * mount (with write-back on, or at the next hsmfsctl archive or sync),
 * and an archive hook that finds its own bytes at the origin under
 * another version answers it as archived (hsmfs-hooks(7)), so a crash
 * makes no conflict that did not happen.
 *
 * A deny with ESTALE is a conflict: the origin changed under the
 * change.  The file keeps its bytes, shows conflict (META_F_CONFLICT)
 * and is not archived again until events_resolve().  Other failures
 * are retried with exponential backoff (1 s doubling to 60 s) while
 * write-back is on; each file's last error and attempts stay in its
 * state for status.
 *
 * The files: the queue (aqueue.h), the upload of one file (upload.h),
 * the namer (namer.h), archives and syncs asked for (sync.h); here the
 * archiver threads, their start and stop, resolve --take-origin and the
 * archives asked for room.  Calls go down that list, never up.
 *
 * Locks: the queue (AQ) and each file's archive fields are guarded by
 * S.lock; nothing blocking runs under it (the clone, the fetch and the
 * wait for the hook drop it).  Files on the queue hold an inode
 * reference.
 */
#ifndef HSMFS_ARCHIVE_H
#define HSMFS_ARCHIVE_H

#include <stdbool.h>
#include "events.h" /* EVENTS_PARKED */

struct inode;


/*
 * The store is short of need bytes that the cache cannot free (the
 * evictor, with write-back on: cache_init's on.archive): changed files
 * whose archive is not due yet are archived now, the oldest change
 * first, until those being archived or due add up to need; once clean
 * they are cache, and the next rounds release them, least recently
 * used first.  At most PRESS_MAX files a call; files whose last attempt
 * failed keep their backoff.  No lock held.
 */
void archive_pressure(uint64_t need);

/* The archive queue's figures for the statistics.  S.lock held. */
struct events_stats;
void archive_stats(struct events_stats *st);

/* Start the archiver (events_init) and stop it (events_shutdown). */
int archive_init(void);
void archive_shutdown(void);

#endif
