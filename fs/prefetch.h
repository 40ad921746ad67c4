/*
 * prefetch.h - sibling prefetch: fetching the next files of a directory
 * ahead of a reader that walks it.
 *
 * The kernel's readahead works within a file; a program that reads the
 * files of a directory one after another (cp -r, tar c, rsync, a
 * training epoch) waits one origin round trip per file.  This module
 * watches the opens of files with missing bytes and of files it fetched
 * itself, per directory: once two files of one directory were opened in
 * a row that are next to each other in its readdir order or in name
 * order (or three in any order), it asks the fill hooks for the next
 * `window` siblings (whole up to PREFETCH_FILE_MAX, else their first
 * first_fill bytes, events_prefetch(): what a reader's first read
 * waits for, where a reader going on then has the rest of the chunk
 * asked whole, one round trip as after a prefetched first MiB, and a
 * reader that does not come leaves less on the link), in the order
 * the reader follows (readdir's, as cp -r and tar, or sorted, as a shell
 * glob), so that a hook with several connections fetches them in
 * parallel while the reader works.  As the reader opens them it asks for
 * more, keeping `window` files ahead.  When the reader does not come for
 * them (window opens in that directory, none of a prefetched file), the
 * directory goes cold: what was fetched and not opened is counted
 * wasted, and only an ordered walk of three files starts it again.  At most PREFETCH_DIRS directories are followed at
 * once.  Prefetch only starts fills that fit now: an event slot free,
 * the cache admitting the bytes without waiting (so cache_max holds,
 * and what readers use stays: the evictor's rules apply as to any fill).
 *
 * Threads.  prefetch_opened() is called by the open path once it has
 * replied (the caller tests one inode flag and prefetch_enabled()); it
 * queues at most PREFETCH_QUEUE hints (more are dropped: a hint, not a
 * duty).  One thread takes them, lists directories, looks siblings up
 * and loads their state (SQLite), and starts the fills through
 * events_prefetch(); it holds one lookup reference on each file it
 * prefetched until the file is opened or given up.  One mutex guards
 * the queue and the counters; it is held across no call into another
 * module.
 */
#ifndef HSMFS_PREFETCH_H
#define HSMFS_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "stats.h" /* struct prefetch_stats */

struct inode;

#define PREFETCH_DIRS 8                 /* directories followed at once */
#define PREFETCH_QUEUE 256              /* open hints waiting for the thread */
#define PREFETCH_FILE_MAX (1ULL << 20)  /* a file up to this size is asked whole */
#define PREFETCH_LIST_MAX 100000        /* a bigger directory is not listed */

/* Start the thread; window 0: prefetch off (nothing starts). */
int prefetch_init(unsigned window);
/* Stop the thread and drop every reference it holds. */
void prefetch_shutdown(void);
/* Whether prefetch is on (a window was set): an open then gives hints. */
bool prefetch_enabled(void);
/*
 * in (a regular file) was opened: a hint, given after the open's reply.
 * The caller passes a reference on in (inode_ref()), which the call
 * takes over: queued with the hint, or released.
 */
void prefetch_opened(struct inode *in);
void prefetch_stats(struct prefetch_stats *ret);

#endif
