/*
 * writeback.h - the write-behind of per-file state to the database.
 *
 * A file's state changes in memory first; persist_later() (fstate.h)
 * queues it on S.wqueue and
 * the writer thread (writer_main) commits batches of snapshots, each
 * after the data of its ranges is synced (the durability order of
 * state.h, steps 1 and 4).  events_fsync() (events.h) waits for the
 * batch that holds a file.
 */
#ifndef HSMFS_WRITEBACK_H
#define HSMFS_WRITEBACK_H

/*
 * The writer needs a descriptor of each file it syncs.  Out of them
 * (EMFILE, ENFILE: the process's or the system's limit, which users'
 * open files fill), a file is not committed and not failed either: it
 * is queued again and retried every WRITEBACK_FD_RETRY_MS, and an
 * fsync of it waits, until a descriptor is had or WRITEBACK_FD_WAIT_MS
 * passed; only then is its data sync failed (the fsync's EIO, logged).
 * A write acknowledged is never dropped for want of a descriptor.
 */
#define WRITEBACK_FD_RETRY_MS 100
#define WRITEBACK_FD_WAIT_MS 30000

struct fstate;
struct inode;

/* The writer thread's body (engine.c starts it). */
void *writer_main(void *arg);

/*
 * Wait (a few seconds at most) until what is queued now is written,
 * or found not to be writable (the writer then retries every second).
 * The evictor's sync handler (struct evict_handlers).  Without S.lock.
 */
void writeback_sync(void);

/*
 * Wait until a batch the writer takes after now is committed (what is
 * queued now is in it): 0, or -EIO when it was not.  S.lock held (the
 * wait drops it).
 */
int writeback_next_batch(void);

#endif
