/*
 * inode-save.h - the inode table across an unmount (inode-save.c), so
 * that file handles (inode.h: "File handles") of the last mount open the
 * same files.
 *
 * At a clean unmount inode_table_save() writes the node records (node
 * id, generation, store (dev, ino), type, alias, and the store's handle
 * of the file as it is then) of at most kept_max inodes (the kernel's at
 * unmount, then the kept list's, most recent first) and of the
 * directories their aliases go through to STORE/.hsmfs/nodes
 * (state_fd), *ret_n of them, and a generation past every one given;
 * a mount after it, with a fresh table, calls
 * inode_table_load() (use false: a daemon taking over, or no handles,
 * only removes it), which reads it, removes it, and rebuilds those
 * inodes as kept ones (*ret_n: how many), so the handles of the last
 * mount open the same files, each checked against the store by (dev,
 * ino) and, the first time it is reached, by the store's handle (the
 * inode's own generation: a number given to another file meanwhile is
 * not the same file), and a node id used again has a generation past
 * the last one.  A file that is not there is 0 (none);
 * one that is not whole, of another store or of another version is
 * -EINVAL, its handles ESTALE.  A mount that ended without writing one
 * leaves none: the handles of that mount are ESTALE.  Costs: the
 * writing daemon's time at unmount and the file, about 40 bytes and a
 * name a node; nothing while serving.
 *
 * Callers: start-up and shutdown only (main.c): inode_table_load() right
 * after inode_table_init(), before the session serves;
 * inode_table_save() after the session ended, before
 * inode_table_destroy().  Each takes the table's lock itself, and makes
 * its syscalls (the file's I/O, the store's handles) without it.
 */
#ifndef HSMFS_INODE_SAVE_H
#define HSMFS_INODE_SAVE_H

#include <stdbool.h>
#include <stdint.h>

int inode_table_save(int state_fd, uint64_t *ret_n);
int inode_table_load(int state_fd, bool use, uint64_t *ret_n);

#endif
