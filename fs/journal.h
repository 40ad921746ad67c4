/*
 * journal.h - the names journal (journal.c): what the names made,
 * renamed and removed through the mount do to the files' rows and, on
 * a mount that archives (S.cfg.track_new), to the ops table the namer
 * applies at the origin, oldest first (meta.h: ops, landings; archive.h).
 * Each change of names is recorded in the transaction that changes the
 * rows (durability step 7, state.h), and the namer is woken
 * (archive_names_wanted()).  A new file whose first upload is in flight
 * is moved or removed at the origin once that upload ends: the op is
 * recorded now, and the namer holds it until then.
 *
 * Who wins between the user's change of a name and the daemon's is
 * names.h's; this records what the user's did.
 *
 * Locks: called without S.lock; each takes it around memory's state.
 */
#ifndef HSMFS_JOURNAL_H
#define HSMFS_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

struct inode;

#endif
