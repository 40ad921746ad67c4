/*
 * ops-adopt.h - a daemon taking over (keeper.h) reopens what the last one
 * had open, and finishes what it left of the removals it made
 * (ops-adopt.c).  Called by main.c at a takeover, and by ops-names.c
 * once a resent rename is found done.
 *
 * Threads: ops_adopt_opens() and the removals run once, at start-up,
 * before the daemon serves; ops_adopt_retry() from any worker (the lost
 * set's lock, ops-int.c).
 */
#ifndef HSMFS_OPS_ADOPT_H
#define HSMFS_OPS_ADOPT_H

#include <stddef.h>
#include <stdint.h>

/* A daemon taking over: reopen the last one's handles (after the engine started). */
void ops_adopt_opens(void);
/*
 * The handles it could not reopen, tried again: a resent rename was
 * found done, so the node (or one above it) has its name now.
 */
void ops_adopt_retry(void);
/*
 * A daemon taking over, before the consistency check: the removals the
 * last daemon made in the store and died before recording (their rows,
 * the origin's delete) recorded now, from its journal (ops-resend.c);
 * the check would drop the rows alone.  How many.
 */
unsigned ops_resend_removals(void);
/*
 * The files of the removals the last daemon began and did not mark done
 * (the store may have removed them): *ret (malloc'd, free it) holds
 * their store inode numbers; how many.  Their requests come again; the
 * consistency check leaves their rows to them (check.h).
 */
size_t ops_resend_removals_begun(uint64_t **ret);

#endif
