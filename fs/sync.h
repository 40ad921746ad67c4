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
#include "events.h" /* EVENTS_PARKED */

struct front_req;
struct inode;

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
