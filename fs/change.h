/*
 * change.h - what users do to a file through the mount, as its state
 * sees it (change.c): opens and closes (the time of use, a barrier
 * against an eviction), changes of its bytes or size and their claims
 * (saved.h), writes the daemon does not see (kernel passthrough), and
 * the replay of the last daemon's claims at a takeover.  A change makes
 * the file DIRTY (becomes_dirty(), fstate.h), queues it for the writer
 * and, with write-back on, for its archive.
 *
 * Locks: called without S.lock; each takes it.  A change waits for an
 * eviction of its file (evict_wait()) and for a fill being copied into
 * its range (S.copied), both bounded: no hook is waited for.
 */
#ifndef HSMFS_CHANGE_H
#define HSMFS_CHANGE_H

#include <stdbool.h>
#include <stdint.h>

struct events_change;
struct inode;

/*
 * Opens and closes of files with state: their time of use for the
 * eviction order, and (at open) a barrier against an eviction in
 * progress.  Called after inode_open_inc() / after inode_open_dec().
 */
void events_opened(struct inode *in);
void events_released(struct inode *in);

/*
 * A change of a file's bytes or size through the mount (write,
 * truncate, fallocate, copy_file_range destination), from just before
 * the store is changed until its bookkeeping is done.  While a change
 * is open, no fill is committed over [start, end): the user's bytes win.
 * events_change_begin() waits only for a fill being copied into that
 * range right now (bounded: no hook is involved).  Every begin is ended
 * by exactly one of events_wrote(), events_truncated() or
 * events_change_end() (the change failed).  Files without state: no-op.
 */
void events_change_begin(struct inode *in, struct events_change *c,
			 uint64_t start, uint64_t end);
void events_change_end(struct inode *in, struct events_change *c);
/*
 * Is all of [start, end) present in the file of the open change c, and
 * the file clean (not DIRTY)?  Then a change that leaves those bytes as
 * they are (a punch of zeros: fallocate --dig-holes) may end with
 * events_change_end(), no change of the user's.
 */
bool events_change_clean(const struct events_change *c, uint64_t start, uint64_t end);

/* Bookkeeping after a successful change through the mount; ends c. */
void events_wrote(struct inode *in, struct events_change *c, uint64_t off,
		  uint64_t len);
void events_truncated(struct inode *in, struct events_change *c,
		      uint64_t old_size, uint64_t new_size);

/*
 * in is open for writing where the daemon does not see the writes
 * (kernel passthrough): at open and again at release, its state becomes
 * dirty (every byte the user's, never fetched or evicted) with size, the
 * store file's size then (UINT64_MAX: not known, the size stays).
 * open: at the open, else at its release; between them the file is
 * never archived (its bytes change unseen).  Files without state: no-op.
 */
void events_unseen_writes(struct inode *in, uint64_t size, bool open);
/*
 * May in be opened in passthrough mode now (every byte present, nothing
 * filling, changing or being evicted, not stale or awaiting its digest)?
 * If so INODE_PASSTHROUGH is set, under the engine's lock, so that no
 * eviction starts on it until passthrough.c clears the flag.
 */
bool events_pass_begin(struct inode *in);
/*
 * A daemon taking over, before it serves: the user's changes the last
 * one answered and its writer did not commit (saved.h's claims) applied
 * again to their files' state; how many.
 */
unsigned events_replay_claims(void);

#endif
