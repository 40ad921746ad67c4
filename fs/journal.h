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

/*
 * A regular file was made on the mount (create, mknod, a link's target
 * excluded): with S.cfg.track_new it gets state, dirty with no origin,
 * and its row is inserted by the writer.  Called after the inode is
 * made, before it is replied.
 */
void events_created(struct inode *in);
/*
 * A request to make a regular file, resent after a crash, finds the
 * file made by the last daemon, which may have died before it recorded
 * that (its claim not yet made): a file with neither state nor row then
 * is made on the mount now (events_created()), or it would never be
 * archived.  One with a row (a listing's entry, a claim replayed) is
 * left as it is.  Called after the inode is looked up, before it is
 * replied.  Without S.lock.
 */
void events_made_again(struct inode *in);
/* A name was renamed through the mount: recorded paths follow (and, on a
 * mount that archives, the origin's objects at the next archive of names;
 * a directory's (dir) directories too).  moved: the node renamed (NULL: not
 * known); a new file whose first upload is in flight is moved at the
 * origin once that upload ends (namer.h). */
void events_renamed(struct inode *parent, const char *name,
		    struct inode *newparent, const char *newname, bool dir, struct inode *moved);

/*
 * One of in's names, (parent, name), went (an unlink, or a rename over
 * it) and in keeps another: its recorded path, if it was that name,
 * follows the name in keeps, and on a mount that archives the origin's
 * object moves there too, as for a rename (a program that links a file
 * to its final name and removes the first, as git does, renames it).
 * Called after inode_name_gone().
 */
void events_name_left(struct inode *parent, const char *name, struct inode *in);
/*
 * A directory parent/name was made (op META_OP_MKDIR) or removed
 * (META_OP_RMDIR) through the mount: where files made on the mount are
 * archived (S.cfg.track_new), the origin's follows, in order with the
 * other names (namer.h).
 * Without S.lock.
 */
void events_dir_named(struct inode *parent, const char *name, uint32_t op);
/*
 * The last name of the file ino went (in: its inode, loaded, or NULL):
 * its row goes, after any write of it the writer has begun, and a file
 * made on the mount whose row is not written yet never gets one.  user:
 * removed through the mount (not by a listing); on a mount that
 * archives, the origin's object is to be removed too (meta.h: ops).
 */
void events_unlinked(struct inode *in, uint64_t ino, bool user);

#endif
