/*
 * events.h - pre-content events: per-file range state, the event engine,
 * and the write-behind of present ranges to the metadata database.
 *
 * The engine's entry points, for its front end (front.h: what the engine
 * asks of the front end in return).
 *
 * Fast path.  The FUSE front end calls into the engine only when a per-inode bit
 * says so (inode_flags(): INODE_NONRESIDENT or INODE_TRACKED for reads,
 * INODE_STATEFUL for writes) or when the watcher mask says a hook wants
 * PRE_MODIFY (events_modify_watched(): one relaxed load).  A resident file
 * with hooks connected costs the same as with none.
 *
 * Range state.  A file with a metadata row has a struct fstate: its
 * present ranges, the fills in flight (events), the user changes in
 * flight (events_change_begin), and whether it is being evicted.  Every
 * transition goes through this module:
 *   missing -> filling      access_step() starts a fill event
 *   filling -> present      commit_fill(): the hook's staging file is
 *                           copied in, less what users changed meanwhile
 *   any -> present (user's) events_wrote() / events_truncated() (dirty)
 *   present -> missing      evict_range(): database, memory, mark, punch
 * A user's change always wins: a fill is never copied over bytes a
 * change in flight or done claims, and a change waits only for a copy
 * in progress over its range (bounded, no hook involved).  A hook's
 * FILLED changes no state: reads parked on its event are answered from
 * its staging file where the commit would copy the same bytes
 * (events_filled()).
 *
 * Engine.  Events live in a fixed array of max_pending slots allocated
 * at start and reused; a caller over the limit waits for a slot within
 * its timeout.  An event is QUEUED (no fill hook has it yet), SENT,
 * FILLED and COPYING once its fill hook allowed it, then DONE (the
 * diagram of evrec.h); its slot is freed when it is done and no
 * waiter or parked read holds it.  It is decided when every hook that must answer has
 * allowed (a hook whose socket was full still must), or by the first
 * deny, or by the timeout (the timer thread expires every event,
 * readahead included).  Reads waiting for a hook are parked, not worker
 * threads (events_read).  Concurrent reads of the same missing bytes
 * wait on one event; a reader moving chunk by chunk gets the chunks
 * ahead asked for by detached events (readahead).
 *
 * Durability (numbered in state.h): data synced before its range is
 * committed; an eviction committed before its punch; fsync returns
 * once the file's state is committed; a failed data sync is sticky.
 *
 * Locks.  S.lock (private) guards slots, per-file state and the hook
 * list; functions that need it say so and assert it in debug builds.
 * SQLite, punches, invalidations and the copy of a fill run without it,
 * behind per-file busy states (evicting, copying).
 */
#ifndef HSMFS_EVENTS_H
#define HSMFS_EVENTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "hsmfs/protocol.h"
#include "inode.h"
#include "proto.h"
#include "state.h" /* struct events_config, the watcher mask */

struct inode;
struct hook;
struct meta;
struct front_req;

int events_init(const struct events_config *cfg);
/* Flush the write-behind queue and stop the writer thread. */
void events_shutdown(void);

/*
 * The slow paths' results beside 0 and -errno: EVENTS_PARKED (park.h),
 * EVENTS_UNLISTED (dirs.h).
 */

/*
 * The entry points a front end calls, each declared by the file that
 * defines it.
 */
#include "archive.h"
#include "change.h"
#include "decide.h"
#include "dirs.h"
#include "evict.h"
#include "fstate.h"
#include "journal.h"
#include "park.h"
#include "sync.h"
#include "writeback.h"

#endif
