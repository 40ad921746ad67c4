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

/*
 * fsync/fdatasync of a file with state, after the store file's own
 * sync succeeded: returns once its present ranges and dirty state are
 * committed durably, or the error that kept them from being (a failed
 * data sync of the write-behind is sticky and reported here once).
 */
int events_fsync(struct inode *in);

#endif
