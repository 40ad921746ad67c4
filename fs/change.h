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
#include "events.h" /* struct events_change */
#include <stdint.h>

struct events_change;
struct inode;

/*
 * A daemon taking over, before it serves: the user's changes the last
 * one answered and its writer did not commit (saved.h's claims) applied
 * again to their files' state; how many.
 */
unsigned events_replay_claims(void);

#endif
