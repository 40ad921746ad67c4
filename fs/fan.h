/*
 * fan.h - the fanotify front end (backend=fanotify): the same engine,
 * hooks, states and origins as the FUSE mount, with the kernel serving
 * every present byte and every metadata call itself.
 *
 * What users see.  MOUNTPOINT is a bind mount of STORE (read-only with
 * ro).  Every file of the store that is not all present carries an
 * inode mark of a FAN_CLASS_PRE_CONTENT group with FAN_PRE_ACCESS: a
 * read, a write, an mmap or a truncate that reaches bytes of it raises
 * an event with the range first (Linux 6.14), which this front end
 * hands to the engine as a check (events_read_check()): the missing
 * part is filled by the hooks, with the same staging, integrity checks
 * and commit order as on FUSE, and the event is answered FAN_ALLOW, or
 * FAN_DENY_ERRNO with the hook's errno (one the kernel passes: EIO,
 * EPERM, EBUSY, ETXTBSY, EAGAIN, ENOSPC, EDQUOT; any other is EIO).  A
 * file all present loses its mark, so its later opens pay nothing.
 *
 * The daemon's own I/O.  An inode mark raises events for every opener,
 * the daemon too.  The daemon reads and writes the store through a
 * private, detached clone of its mount (open_tree(OPEN_TREE_CLONE)),
 * which carries an ignore mark of the same group: the engine's fills,
 * copies and digests raise nothing, while every other path to a marked
 * file, STORE's own included, raises the events.  The inode table is
 * rooted in that clone (fan_setup() gives its root).
 *
 * Fail closed, as far as the kernel lets us (hsmfs(8) FANOTIFY BACKEND): every
 * event read is answered exactly once; at the end the mountpoint goes
 * first, every event in flight is failed by the engine's shutdown and
 * denied, the events still queued are read and denied, and only then
 * is the group closed.  The keeper (keeper.h) holds the groups while
 * daemons come and go: every event read is recorded before it is acted
 * on (saved.h), and the next daemon checks and answers the recorded
 * ones by their numbers before it reads; one read and not yet recorded
 * is denied.  What the kernel allows regardless: an event lost to an
 * overflow (counted, logged), and every access after the group closes
 * (the keeper killed, or a daemon with norestart).
 *
 * The reader's durability order, each step a crash point (fault.h):
 *   1. fan_reading set, the events read (FAULT_FAN_READ): a crash here
 *      leaves numbers nobody knows; the next daemon denies every number
 *      with no record;
 *   2. every event of the batch recorded, fan_reading cleared
 *      (FAULT_FAN_RECORDED): the next daemon fills and answers them;
 *   3. each answered, then its record freed (FAULT_FAN_ANSWERED: the
 *      next daemon answers again, and the kernel has no such event),
 *      then its descriptor closed.
 *
 * The kernel's objects are fan-kernel.h's, the marks made at start
 * fan-marks.h's; this file's are the events and the serving.
 *
 * Threads and locks.  One thread reads the group and dispatches; the
 * engine answers parked checks from its own threads through the
 * continuation.  F.lock (fan.c) guards the table of held inodes and the
 * dispatch count; it is a leaf, never held across the engine, SQLite or
 * a system call but close(2) of nothing.  F.mark_lock orders a mark's
 * removal (a file all present) against an eviction's mark; a leaf held
 * across fanotify_mark(2) only.
 */
#ifndef HSMFS_FAN_H
#define HSMFS_FAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "front.h"

/* What the engine asks of this front end (front.h). */
extern const struct events_front fan_front;

/*
 * SIGTERM, SIGINT and SIGHUP end the mount (fan_serve()) from now on;
 * before the store is bound, so that no signal kills the daemon with
 * the mount left bound.  0 or -errno.
 */
int fan_signals(void);

/* Has one of those come (the mount's start may stop early)? */
bool fan_signalled(void);

/*
 * Start the reader thread, chunk: the fill pieces of a large range; a
 * daemon taking over (keeper.h) first checks and answers the events the
 * last one read and did not answer (saved.h).  keep_blocks (not thin,
 * opts.h): a file with bytes missing that a user's change leaves with
 * fewer blocks than its size (a truncate up, a punch) is given them
 * back (give_blocks()).  0 or -errno.
 */
int fan_start(uint64_t chunk, bool keep_blocks, bool takeover);

/*
 * Serve until SIGTERM, SIGINT or SIGHUP, or until the mountpoint is
 * unmounted: returns then, having stopped handing events to the engine
 * (new ones are denied from here on).  0 or -errno; FAN_HANDOVER after
 * fan_handover(): the reader stopped, everything else as it is, for the
 * keeper's next daemon (the caller exits KEEPER_HANDOVER).
 */
#define FAN_HANDOVER 1
int fan_serve(void);

/* hsmfsctl restart (fan-ctl.c): fan_serve() returns FAN_HANDOVER.  Any thread. */
void fan_handover(void);

/*
 * The end, after the engine's shutdown: the reader stopped, the group's
 * descriptor closed.  ending: the mount ends (no keeper, or the last
 * daemon of one): the mountpoint unbound and what is queued denied
 * first; else the keeper starts another daemon, which answers them.
 */
void fan_stop(bool ending);

/*
 * The inode of the file open as fd, found by the path it was opened by
 * (below the mountpoint or the store), checked against fd's (dev, ino):
 * with a lookup reference, which fan_inode_put() drops; NULL and *res
 * -errno (-EXDEV: not a file of this mount).  *st: fd's.
 */
struct inode;
struct stat;
struct inode *fan_inode_of(int fd, struct stat *st, int *res);
void fan_inode_put(struct inode *in);

/*
 * In the keeper (keeper.h), when the mount ends with no daemon left:
 * the mountpoint given back, every event queued and every event a
 * daemon read and did not answer denied, then the group closed.  clean:
 * the last daemon ended as a mount ends (fan_stop(true)), having
 * answered all it read but what it recorded; else every number it may
 * have held is denied.
 */
void fan_keeper_end(bool clean);

#endif
