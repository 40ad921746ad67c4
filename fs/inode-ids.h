/*
 * inode-ids.h - node ids (inode-ids.c): the map from a FUSE node id to
 * its inode, and each node id's record in the saved region (saved.h:
 * store (dev, ino), type, generation, alias) kept in step with the
 * table, so that a daemon taking over resolves every node id the kernel
 * still holds (inode.h).  Below the inode table (inode-int.h): it knows
 * an inode as a pointer only, and writes what the table gives it.
 *
 * Node id 0 is none, FUSE_ROOT_NODEID the root, ORPHANS_ID the state
 * directory's (never the kernel's); the others are given from 2 up, one
 * freed first, else the next above the saved high-water mark.  Each time
 * a node id is given its record's generation goes up by one; a record
 * never used starts at the mount's generation base, random per mount
 * (or the last mount's next one: inode-save.h), so that a handle of an
 * earlier mount does not open this mount's file.  A long alias name
 * (over SAVED_NAME_INLINE bytes) takes a long-name cell of the region.
 * The free node ids and cells live in this daemon only: a daemon taking
 * over counts them again from the records (inode.c, table_restore()).
 *
 * Locking.  slot_get() reads without a lock, from any thread (a node id
 * the kernel sent is set already); every other function is called with
 * the table's lock held (LK_INODES), or while the table is set up or
 * torn down.  Nothing here blocks.
 */
#ifndef HSMFS_INODE_IDS_H
#define HSMFS_INODE_IDS_H

#include <stdint.h>
#include <sys/types.h>

#include "saved.h"

#define FUSE_ROOT_NODEID 1
#define ORPHANS_ID (SAVED_NODES_MAX - 1) /* node id of T.orphans: never the kernel's */

struct inode;

/* The inode of node id, or NULL. */
struct inode *slot_get(uint64_t id);
/* Map id to in (NULL: to none): 0 or -ENOMEM. */
int slot_set(uint32_t id, struct inode *in);

/*
 * A node id and its record for in, a store file (dev, ino) of type
 * (S_IFMT bits; 0: a regular file's record): 0 with *ret_id and *ret_gen
 * set, or -ENFILE (none left), -ENOMEM.
 */
int rec_new(struct inode *in, dev_t dev, ino_t ino, mode_t type, uint32_t *ret_id,
	    uint32_t *ret_gen);
/* The record's alias: parent's node id and name (0, NULL: none). */
void rec_alias(uint32_t id, uint32_t parent, const char *name);
/* Free node id and its record (its generation stays, for the next). */
void rec_free(uint32_t id);

/* A daemon taking over: node id (below the mark, no record) and long-name cell are free. */
int id_free(uint32_t id);
void cell_free(uint32_t cell);

/* The first generation of a node id never given (see above). */
uint32_t ids_gen_base(void);
void ids_set_gen_base(uint32_t gen);

/* Forget every node id (the records stay: a daemon handing over leaves them). */
void ids_destroy(void);

#endif
