/*
 * names.h - the user's change wins over names: claims on (directory,
 * name) pairs, so that a change the daemon makes by itself (a listing, a
 * refresh, a lookup's answer) never replaces, removes or renames a name
 * that was changed through the mount after the change was planned.
 *
 * Users.  Every operation through the mount that makes, removes or
 * renames a name (create, mknod, mkdir, symlink, link, unlink, rmdir,
 * rename: both names) brackets its store call with names_user_begin()
 * and names_user_end(); the end records the names as changed at a new
 * generation.  A user change waits in names_user_begin() while the
 * daemon holds a claim on one of its names (one store call of the
 * daemon's, see below); it never waits for another user change.
 *
 * The daemon.  A change of its own is planned at a generation
 * (names_plan_begin(), when the event that brings it starts) and ended
 * with names_plan_end().  Each name it then makes, replaces, removes or
 * renames is claimed first (names_claim()): the claim is refused when
 * the name was changed through the mount since the plan, or a change of
 * it is in flight; the caller then leaves that name as it is (the
 * user's wins) and goes on with the others.  A claim is held across the
 * store calls of that one name (a rename, an unlink, making an entry)
 * and released (names_release()) before any database commit, sync or
 * kernel invalidation.
 *
 * Records are kept only while a plan older than them is open: with no
 * plan open, a user change leaves nothing behind.  A user change that
 * cannot get a record (no memory) counts as a change of every name:
 * claims are refused until every plan open then has ended.
 *
 * Keys: the store inode number of the directory, and the name.  Lock:
 * one mutex of this module's, held for table updates only, never across
 * a syscall; names_plan_*() are called with S.lock held (lock order:
 * S.lock, then this one); the others with no lock of the engine's.
 */
#ifndef HSMFS_NAMES_H
#define HSMFS_NAMES_H

#include <stdbool.h>
#include <stdint.h>

struct name_rec;

/* A user change in flight: what names_user_begin() took. */
struct names_user {
	struct name_rec *r[2];
	bool blind; /* a name without a record: counted as every name */
};

/*
 * Begin a user change of name in the directory dir (and, with name2
 * not NULL, of name2 in dir2: a rename's other side).  Waits while the
 * daemon holds a claim on either.
 */
void names_user_begin(struct names_user *u, uint64_t dir, const char *name, uint64_t dir2,
		      const char *name2);
/* The store call ended (done or failed): the names changed now. */
void names_user_end(struct names_user *u);

/* Open a plan: its generation. */
uint64_t names_plan_begin(void);
void names_plan_end(uint64_t plan);

/*
 * Claim name in dir for a change planned at plan: true when nobody
 * changed it through the mount since and no change of it is in flight
 * (release it with names_release()), false when the user's change wins.
 */
bool names_claim(uint64_t dir, const char *name, uint64_t plan);
void names_release(uint64_t dir, const char *name);

#endif
