/*
 * fault.h - crash and failure points for tests of the durability order.
 *
 * Debug builds only (NDEBUG unset): each durability step of the engine
 * (see the numbered order in state.h) calls fault_point() with its
 * name.  HSMFS_CRASH_AT=N in the daemon's environment makes the Nth
 * step passed, counting every step of every kind, _exit(99) the daemon
 * at once: no buffer is flushed, no state is saved, as a kill -9 there
 * would; HSMFS_CRASH_AT=NAME:K does so at the Kth step NAME (a sweep
 * that reaches every kind of step however the write-behind's batches
 * fall).  HSMFS_CRASH_LOG=PATH appends one line per step passed ("N
 * name"), so a test learns how many steps a workload has and walks N
 * over all of them.  HSMFS_FAIL=NAME makes fault_hit(NAME) true once,
 * the first time it is asked (errno EIO): a failure injected where the
 * real one is hard to make (a data sync).  HSMFS_DELAY=NAME:MS[,...] makes
 * every step NAME sleep MS milliseconds before it goes on (after its
 * log line, so a test that waits for the line acts during the sleep):
 * a slow disk there, for tests of what must not wait behind it.
 * fault_delay(NAME) is a place that only sleeps so (and logs "- NAME"
 * first): not a step, nothing durable happens there.
 *
 * Release builds compile every call to nothing.  Not on any read or
 * write path: steps are taken by the write-behind, eviction and fsync;
 * a write's reply passes one named point (write-done), debug builds only.
 */
#ifndef HSMFS_FAULT_H
#define HSMFS_FAULT_H

#include <stdbool.h>

#define FAULT_CRASH_BEFORE_COMMIT "data-synced"   /* data synced, ranges not committed */
#define FAULT_CRASH_AFTER_COMMIT "ranges-committed" /* ranges committed */
#define FAULT_EVICT_RECORDED "evict-recorded"     /* eviction committed, bytes not punched */
#define FAULT_EVICT_PUNCHED "evict-punched"       /* bytes punched */
#define FAULT_FILL_COPIED "fill-copied"           /* a fill copied in, not yet present */
#define FAULT_LIST_MADE "listing-made"            /* a listing's entries made and synced */
#define FAULT_LIST_COMMITTED "listing-committed"  /* a listing committed */
#define FAULT_ARCHIVE_SNAPSHOT "archive-snapshot" /* a stable snapshot made */
#define FAULT_ARCHIVE_ANSWERED "archive-answered" /* the archive hook answered */
#define FAULT_ARCHIVE_COMMITTED "archive-committed" /* clean and version committed */
#define FAULT_ARCHIVE_GONE_RECORDED "archive-gone-recorded" /* an upload that landed after its
							     * file's removal: its own removal
							     * recorded for the origin */
#define FAULT_NAME_APPLIED "name-applied"         /* a name's op done at the origin,
						   * not yet dropped from the log */
/* fault_named() points: crashed at only as NAME:K, not numbered steps */
#define FAULT_NAME_ANSWERED "name-answered"       /* a move done at the origin, its answer
						   * not yet recorded (and a fault_delay) */
#define FAULT_OP_BEGUN "op-begun"                 /* a name operation marked, the store not changed */
#define FAULT_OP_CHANGED "op-changed"             /* the store changed, the mark not yet
						   * saying so (begun only) */
#define FAULT_TRUNCATED "truncated"             /* a truncate in the store, not yet
						   * recorded (its claim not made) */
#define FAULT_OP_DONE "op-done"                   /* the store changed, the reply not sent */
#define FAULT_PT_RELEASED "pt-released"           /* an open's passthrough released (its
						   * backing id closed), the open not yet */
#define FAULT_OP_RELEASED "op-released"           /* an open released, the reply not sent */
#define FAULT_WRITE_DONE "write-done"             /* a write in the store, the reply not sent */
/* a daemon taking over (keeper.h), at each of its steps: */
#define FAULT_TAKE_RESERVED "take-reserved"       /* handles' numbers taken (and a
						   * fault_delay) */
#define FAULT_TAKE_RESTORED "take-restored"       /* the inode table rebuilt */
#define FAULT_TAKE_REPLAYED "take-replayed"       /* INIT replayed, resend asked */
#define FAULT_TAKE_ADOPTED "take-adopted"         /* handles reopened, not yet serving */
/* backend=fanotify's reader (fan.c, saved.h), named points: */
#define FAULT_FAN_READ "fan-read"                 /* events read, not recorded */
#define FAULT_FAN_RECORDED "fan-recorded"         /* recorded, not handed on */
#define FAULT_FAN_ANSWERED "fan-answered"         /* one answered, its record not freed
						   * (and a fault_delay) */
/* backend=fanotify's bind at mount (fan-kernel.c fan_mount()), named points: */
#define FAULT_FAN_BIND_RECORDED "fan-bind-recorded" /* the bind's id recorded, not at
						     * the mountpoint yet */
#define FAULT_FAN_BOUND "fan-bound"               /* the store bound at the mountpoint */
#define FAULT_DATASYNC "datasync"                 /* fault_hit: a data sync fails */
#define FAULT_BATCH_TAKEN "batch-taken"           /* fault_delay: the writer took its batch */
#define FAULT_BATCH_SYNCED "batch-synced"       /* fault_delay: a file of the batch synced,
						   * its store file still open */
#define FAULT_INIT "init"                         /* fault_delay: INIT being answered */
#define FAULT_RELEASE_RESENT "release-resent"     /* fault_delay: a resent RELEASE, before
							 * anything is done */
#define FAULT_RELEASE_RESENT_DONE "release-resent-done" /* fault_delay: answered */
#define FAULT_RELEASING "releasing"               /* fault_delay: an open released, not answered */
#define FAULT_RENAME_STORED "rename-stored"       /* fault_delay: a rename in the store, its
						   * rows not yet moved */
#define FAULT_NAMES_LOOKED "names-looked"         /* fault_delay: the namer found no op
						   * left, not yet said so */
#define FAULT_NAME_MOVED "name-moved"         /* fault_delay: a move's new place in memory
						   * (S.lock held), its batch not yet written */
#define FAULT_BLOCKS_GIVING "blocks-giving"   /* fault_delay: a file given its blocks
						   * (fan_give_blocks()), its times not read */
#define FAULT_CTL_STOPPED "ctl-stopped"         /* fault_delay: the control socket's thread
						   * ended, the socket still bound */
#define FAULT_CHECK_DIR "check-dir"            /* fault_delay: the consistency check
						   * walked a directory, not the next */
#define FAULT_FAN_EVENTS_LOST "fan-events-lost" /* fault_hit: an overflow of the
						 * pre-content group before an event */
#define FAULT_FAN_CHANGES_LOST "fan-changes-lost" /* fault_hit: an overflow of the
						   * changes' group before a change */
#define FAULT_CHANGE_SEEN "change-seen"       /* fault_delay: backend=fanotify, a
					       * user's change reported, not yet seen */
#define FAULT_LIST_DROPPED "listing-dropped"      /* fault_delay: a file a listing replaced,
						   * removed or left unused went from the
						   * store, its row not yet removed */

#ifndef NDEBUG
void fault_point(const char *name);
/* a crash point of HSMFS_CRASH_AT=NAME:K only (not counted as a step, not logged) */
void fault_named(const char *name);
void fault_delay(const char *name);
bool fault_hit(const char *name);
#else
static inline void fault_point(const char *name) { (void)name; }
static inline void fault_delay(const char *name) { (void)name; }
static inline void fault_named(const char *name) { (void)name; }
static inline bool fault_hit(const char *name) { (void)name; return false; }
#endif

#endif
