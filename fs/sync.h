/*
 * sync.h - archives and syncs asked for (sync.c): hsmfsctl archive,
 * resolve --keep-local and sync, and the scan of every dirty file a
 * sync makes (the names first: names_synced(), namer.h).  A request
 * waits for the archive of its files (add_waiter(), aqueue.h) and is
 * answered once, at the end, or at once with -EINTR when its caller is
 * interrupted (the archives it started go on).  The archivers (archive.c)
 * run the scans; with write-back on, one scan at start-up archives what
 * a crash or an unmount left dirty.
 *
 * Locks: a request's fields are guarded by S.lock; who answers it takes
 * its continuation under S.lock and calls it without.
 */
#ifndef HSMFS_SYNC_H
#define HSMFS_SYNC_H

#include <stdbool.h>
#include "park.h" /* EVENTS_PARKED */

struct front_req;
struct inode;

/*
 * hsmfsctl archive: archive in now.  0 (clean already, or not a file
 * the mount archives: -ENODATA), -ESTALE (in conflict), -errno, or
 * EVENTS_PARKED: cont(arg, res) once the file is clean (0), in
 * conflict (-ESTALE) or the attempt failed (-errno), from the archiver
 * thread, without S.lock.  If req (the caller's) is interrupted first,
 * cont(arg, -EINTR) from the timer (archive_interrupts()); the archive
 * goes on.  The same holds for events_sync() and events_resolve().
 */
int events_archive(struct inode *in, struct front_req *req,
		   void (*cont)(void *arg, int res), void *arg);

/*
 * hsmfsctl sync: archive every dirty file now and answer once each is
 * clean or failed: cont(arg, 0), or the first failure (-ESTALE: a file
 * is in conflict).  Not all (a caller other than root and the mount's
 * owner): only the files front.may_archive lets req's caller publish; the
 * others are left as they are and make the answer -EACCES.
 * EVENTS_PARKED or -errno.
 */
int events_sync(struct front_req *req, bool all, void (*cont)(void *arg, int res), void *arg);

/*
 * hsmfsctl resolve --keep-local: settle a conflict of in for its local
 * bytes: its next archive is unconditional (HSMFS_EVENT_OVERWRITE) and
 * replaces whatever the origin holds.  Then as events_archive().
 */
int events_resolve(struct inode *in, struct front_req *req,
		   void (*cont)(void *arg, int res), void *arg);

/*
 * The timer's, every tick: answer -EINTR each sync and archive whose
 * caller was interrupted (a signal: Ctrl-C, hsmfsctl's --timeout), so
 * that it returns at once rather than when every upload has ended.
 * S.lock held; dropped while they are answered.
 */
void archive_interrupts(void);
/*
 * An archiver's: run the next sync's scan, if one waits (true).  S.lock
 * held; dropped while it runs.
 */
bool sync_scan_next(void);
/* The start-up's scan, queued before the archivers start. */
void sync_startup(void);
/* The scans not run, answered -ESHUTDOWN.  S.lock held; dropped while answered. */
void sync_shutdown(void);

#endif
