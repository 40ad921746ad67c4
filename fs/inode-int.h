/*
 * inode-int.h - what the files of the inode table share; nothing outside
 * them includes it (the daemon sees inode.h; main.c inode-save.h too).
 * One job each, from the bottom up (each calls, of these, only files
 * listed before it):
 *
 *   inode-ids.c     node ids and their saved records (inode-ids.h)
 *   inode.c         the table T: the set by store (dev, ino), references
 *                   and lifetime, the kept list, the idle-descriptor LRU,
 *                   set-up (a daemon taking over: rebuilt from the saved
 *                   records) and tear-down
 *   inode-names.c   the alias and the other names of a file (inode.h:
 *                   "Other names"), renames and removals, paths
 *   inode-lookup.c  finding a file by name and reaching it again: LOOKUP,
 *                   LOOKUP of "." and "..", descriptors opened by alias,
 *                   holds before a removal or rename, a number another
 *                   file has now
 *   inode-orphan.c  orphan links of open files removed under a keeper
 *   inode-save.c    the table across an unmount (inode-save.h)
 *
 * Locking.  T.lock (LK_INODES) guards T and every inode's fields unless
 * a field says otherwise.  Every function here wants it held, unless it
 * says otherwise; those that say "asserted" check it in debug builds
 * (the others also run, unlocked, while the table is set up).
 *
 * Include inode.h before this header: it does not include it itself, as
 * inode.c, which inode.h belongs to, includes this one (the two would be
 * a circle to tests/layers.py).
 */
#ifndef HSMFS_INODE_INT_H
#define HSMFS_INODE_INT_H

#ifndef HSMFS_INODE_H
#error "include inode.h before inode-int.h"
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hashset.h"

#define ORPHAN_PREFIX "open-"

struct inode {
	struct inode_head head;  /* must stay first: see inode.h */
	void *state;             /* other module's per-file state, or NULL */
	dev_t dev;               /* key: store st_dev */
	ino_t ino;               /* key: store st_ino */
	uint64_t nlookup;        /* kernel lookup references */
	uint32_t refs;           /* child aliases + holds */
	uint32_t fd_users;       /* current borrowers of fd */
	uint32_t nopen;          /* open handles (files and dirs) */
	int fd;                  /* cached O_PATH descriptor, or -1 */
	mode_t type;             /* S_IFMT bits, fixed for an inode's life */
	bool pinned;             /* fd kept: no alias reaches this inode */
	uint32_t id;             /* node id: index of its saved record (saved.h) */
	uint32_t gen;            /* the record's generation */
	_Atomic bool orphan;     /* the alias is an orphan link (inode_orphaned()) */
	struct inode *parent;    /* alias parent (held via refs), NULL if none */
	char *name;              /* alias name, NULL if none */
	struct inode *lru_prev;  /* idle-fd LRU; linked iff fd >= 0, */
	struct inode *lru_next;  /*   fd_users == 0 and !pinned */
	struct inode *kept_prev; /* kept list (forgotten, kept for file */
	struct inode *kept_next; /*   handles); linked only if nlookup == 0 */
	struct inode_name *names; /* other names seen of a file of several links
				   * (inode.h), oldest first; NULL: none */
	uint8_t nnames;          /* of them, at most INODE_NAMES_MAX */
	/* read from the last mount's table (inode_table_load()): the store's
	 * handle of its file then, which the file reached must have before
	 * it is trusted (fh_checked); immutable while in lives */
	struct file_handle *fh;
	_Atomic bool fh_checked;
	bool unhashed;           /* out of the set: its number may be another
				  * file's now (lost_number()) */
};

/* A name of a file other than its alias: held like the alias (parent->refs). */
struct inode_name {
	struct inode *parent;
	char *name;
};

struct inode_table {
	pthread_mutex_t lock;
	struct inode root;       /* never freed, fd never closed */
	struct inode orphans;    /* STORE/.hsmfs, the parent of orphan links */
	struct inode lost;       /* what a node id no record was left for is:
				  * no alias, so every use is ESTALE */
	struct hashset set;      /* every inode but the root, by (dev, ino) */
	struct inode lru;        /* sentinel: next = most recent */
	size_t lru_len;
	size_t cached_fds;       /* descriptors held by the cache */
	size_t lru_max;
	struct inode kept;       /* sentinel of the kept list: next = most recent */
	size_t kept_len;
	size_t kept_max;         /* 0: forgotten inodes are freed at once */
	bool trimming;           /* kept_trim() runs (it frees, which may keep) */
	uint64_t forgotten;      /* inodes of the set with nlookup == 0 */
};

extern struct inode_table T; /* inode.c */

/* ---- inode.c */

/* The inode of one of T.set's keys (no lock needed). */
struct inode *of_key(uint64_t key);
/* The inode of store file (dev, ino), or NULL. */
struct inode *hash_find(dev_t dev, ino_t ino);
/* A lookup reference on in (a reply the kernel counts); asserted. */
void lookup_ref(struct inode *in);
/* Drop in's descriptor from the idle LRU (it is borrowed now). */
void lru_unlink(struct inode *in);
/* in's descriptor is idle now (fd_users just 0, not pinned); asserted. */
void fd_idle(struct inode *in);
/* in is reachable by name again: a descriptor pinned for it may be cached; asserted. */
void unpin_named(struct inode *in);
/* in's pinned descriptor goes if neither the kernel nor an open holds in; asserted. */
void unpin_unused(struct inode *in);
/* Take in off the kept list (forgotten, referenced again). */
void kept_unlink(struct inode *in);
/*
 * Free in and whatever parents that releases, if nothing references it;
 * one an alias still reaches goes to the kept list instead (inode.h).
 */
void maybe_free(struct inode *in);
/*
 * Other name i of in out of its list: its parent and name to the caller,
 * who drops the parent's reference (or hands it on) and frees the name.
 */
struct inode_name name_take(struct inode *in, int i);
/* Free the name and drop its reference on the parent. */
void name_drop(struct inode_name n);
/* Forget every other name of in. */
void names_clear(struct inode *in);
/*
 * Rebuild the inodes the last daemon left in the saved region (*ret_n of
 * them): set-up only, the records fresh or written by inode_table_load().
 */
int table_restore(uint64_t *ret_n);

/* ---- inode-names.c */

/* Whether (p1, n1) and (p2, n2) are the same name (no lock needed). */
bool same_name(const struct inode *p1, const char *n1, const struct inode *p2,
	       const char *n2);
/* Whether (parent, name) is one of in's names, its alias or another. */
bool known_name(const struct inode *in, const struct inode *parent, const char *name);
/*
 * Make (parent, name) in's alias (name NULL: no alias).  links: the
 * file's link count just seen (0: not known): with more than one the
 * alias replaced stays another name of it (inode.h), with one the other
 * names are gone.  0 or -ENOMEM; asserted.
 */
int set_alias_seen(struct inode *in, struct inode *parent, const char *name, nlink_t links);
int set_alias(struct inode *in, struct inode *parent, const char *name);
/* in's alias no longer reaches it: its most recent other name is the alias now, if any; asserted. */
void alias_fall_back(struct inode *in);

#endif
