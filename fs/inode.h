/*
 * inode.h - the daemon's table of inodes the kernel remembers.
 *
 * One struct inode per store file the kernel holds a lookup reference
 * on, keyed by the store's (st_dev, st_ino).  The FUSE node id is the
 * index of the inode's record in the saved region (saved.h: store
 * (dev, ino), generation, lookup count, alias), which this module keeps
 * in step under its lock, so that a daemon taking over after a crash
 * resolves every node id the kernel still holds (inode_table_init()
 * with restoring).  A node id is reused only once forgotten, with its
 * generation bumped.  The table's files, one job each, are listed in
 * inode-int.h.
 *
 * Descriptors.  An inode does NOT pin an open descriptor: it records an
 * alias, (parent inode, name), where it was last seen.  When an
 * operation needs a descriptor, inode_fd_get() returns a cached O_PATH
 * descriptor or opens one relative to the parent's (recursively) with
 * O_NOFOLLOW and checks that (dev, ino) still match, else -ESTALE.  Idle
 * cached descriptors sit in an LRU bounded by the fd_cache limit, so
 * the daemon's descriptor count does not grow with the number of
 * remembered inodes (RLIMIT_NOFILE stays a non-issue for find/du/tar
 * over millions of files).  Inodes whose last alias was removed while
 * they still have other links or open handles keep a pinned descriptor
 * while the kernel remembers them or a handle is open, and not a moment
 * longer: the last of the two to end closes it, whatever other
 * references (queues) keep the inode, which then find it gone
 * (-ESTALE).  An idle descriptor no alias reaches is closed, never
 * cached.  So the descriptors of removed files are bounded by what
 * users hold, however many a program creates and removes.
 *
 * Lifetime.  An inode lives while nlookup (the kernel's count) or refs
 * (children whose alias names it as parent, and short holds taken by
 * this module) is non-zero.  A forget below zero is a kernel/daemon
 * bug and aborts.  An inode whose file is gone (no name of it known,
 * no descriptor left) may outlive it (a queue's hold, a node id the
 * kernel has not forgotten), while the store gives its number to a new
 * file at once (ext4 does): the first lookup of a file of that number
 * takes the old inode out of the hash (its saved record then names no
 * file), and the new file gets an inode, a node id and a state of its
 * own, never the removed file's.
 *
 * File handles (export: open_by_handle_at(2), NFS).  The kernel's
 * handle is (node id, generation); for an inode it no longer caches it
 * asks LOOKUP(node id, ".") and, for a directory, LOOKUP(node id, "..")
 * (inode_lookup_dot()), so a node id must still name its file after
 * the kernel forgot it.  An inode forgotten that its alias still
 * reaches is therefore kept, with its node id, generation and saved
 * record, on a list of at most kept_max (least recently used freed
 * first: -o export_keep, about 200 bytes each); a lookup of the same
 * store file takes it back, the same node id.  It holds no descriptor
 * (the idle descriptor LRU may have one).  A handle whose node id was
 * freed (removed, or past the limit) is ESTALE: a node id used again
 * has a new generation, which the kernel checks, and the first
 * generation of a node id the last mount's table (inode-save.h)
 * does not give is random per mount, so a handle of an earlier mount
 * without one is ESTALE too.  Kept inodes survive a restart with the
 * saved records, and an unmount with that table.  One forgotten and
 * found under another name than its alias (moved or removed beside the
 * mount, its number maybe reused) takes a new generation, unless the
 * store's handle read from the table shows the same file: its old
 * handles go stale rather than open another file.
 *
 * Other names.  A file of several links (st_nlink > 1 when looked up)
 * found under another name than its alias (a link made through the
 * mount, a lookup of another of its names) keeps its alias as another
 * name, up to INODE_NAMES_MAX of them (the oldest goes first), each
 * holding its parent like the alias.  When the alias is removed or
 * renamed away (inode_name_gone(), inode_moved()), or no longer reaches
 * the file ((dev, ino) checked at every open, as for the alias), the
 * most recent other name becomes the alias: a file stays reachable, by
 * a handle too, while any name the daemon saw still reaches it.  A
 * lookup that sees one link forgets the others; a forgotten file found
 * again under any of its names keeps its generation.  The other names
 * are the daemon's alone: a restart keeps the alias only.
 *
 * Locking.  One mutex guards the hash, the counts, the aliases and the
 * descriptor cache.  No syscall other than close(2) of an evicted
 * descriptor is made with it held.  The read/write path never touches
 * this module: it uses the per-open descriptor in fuse_file_info.
 */
#ifndef HSMFS_INODE_H
#define HSMFS_INODE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/*
 * Names of a file of several links remembered beside its alias (see
 * "Other names" above): 16 bytes and a name each, only for files seen
 * with more than one link.
 */
#define INODE_NAMES_MAX 8

struct inode; /* opaque outside the table's files (inode-int.h) but for its head */

/*
 * The head of every struct inode: the per-inode bits the read and write
 * paths test.  Set and cleared by the events module; read with one
 * relaxed load (see inode_flags()).
 */
struct inode_head {
	_Atomic uint32_t flags; /* INODE_* */
	/* passthrough.c's, under its lock: see passthrough.h */
	int32_t backing_id;     /* registered backing file, or 0 */
	uint32_t pt_opens;      /* opens passed through to it */
	uint32_t cached_opens;  /* opens through the page cache */
	bool pt_busy;           /* backing being registered or released */
	bool pt_writable;       /* backing opened for writing */
	/* writes through O_DIRECT opens answered whose drop of the page
	 * cache has not run yet: opens meanwhile drop it (ops-file.c) */
	_Atomic uint32_t direct_writes;
	/* opens for writing passed through (passthrough.c's, under its
	 * lock): the kernel changes the store file unseen, its mapped
	 * writes its times too, so its attributes are not cached meanwhile
	 * (ops_attr_timeout()) */
	_Atomic uint32_t pt_write_opens;
};

#define INODE_NONRESIDENT 0x1 /* some bytes missing: reads take the slow path */
#define INODE_STATEFUL 0x2    /* has per-file state: writes update it */
#define INODE_QUIET 0x4       /* every PRE_MODIFY hook quieted this file
			       * (cleared when one joins: answer.c) */
#define INODE_LOADED 0x8      /* per-file state looked up already */
#define INODE_TRACKED 0x10    /* reads counted while they run (cache limits):
			       * they take the slow path too */
#define INODE_NOROW 0x40       /* getattr found no row (events_shown_attr
				* only: an open looks again) */
#define INODE_PASSTHROUGH 0x20 /* open in passthrough mode (or becoming so):
				* the kernel reads and writes the store file
				* itself; never evicted (passthrough.h) */
#define INODE_PREFETCHED 0x80 /* asked ahead of a reader by prefetch.c, not
			       * opened since: its opens are followed */
#define INODE_LISTED 0x100    /* a directory whose names are known (listed,
			       * or never lazy): see events_dir() */
#define INODE_UNLISTED 0x200  /* a directory with an unlisted row */
#define INODE_DIR_TTL 0x400   /* a listed directory whose listing ages
			       * (dir_ttl): each look checks its age */

static inline uint32_t inode_flags(const struct inode *in)
{
	return atomic_load_explicit(&((const struct inode_head *)in)->flags,
				    memory_order_relaxed);
}

static inline void inode_flags_set(struct inode *in, uint32_t bits)
{
	atomic_fetch_or_explicit(&((struct inode_head *)in)->flags, bits,
				 memory_order_release);
}

static inline void inode_flags_clear(struct inode *in, uint32_t bits)
{
	atomic_fetch_and_explicit(&((struct inode_head *)in)->flags, ~bits,
				  memory_order_release);
}

/* Clear bits on every inode of the table (rare: a hook joined). */
void inode_flags_clear_all(uint32_t bits);

/*
 * The node ids of every regular file of the table, in a malloc'd array
 * (*ret, *ret_n; NULL, 0 when there are none): -ENOMEM or 0.  Taken
 * under the table's lock, used after it (a node id the kernel forgot
 * meanwhile is refused by the kernel, harmlessly).
 */
int inode_files(uint64_t **ret, size_t *ret_n);
/* The same of every directory but the root. */
int inode_dirs(uint64_t **ret, size_t *ret_n);

/*
 * Set up the table with the store root directory (takes ownership of
 * root_fd), the maximum number of idle cached descriptors and of
 * forgotten inodes kept for file handles (0: none), on the
 * saved region (mapped already); restoring: rebuild the inodes the last
 * daemon left there (*ret_restored of them).  Returns 0 or -errno
 * (-ESTALE: the region is another store's).
 */
int inode_table_init(int root_fd, unsigned fd_cache_max, unsigned kept_max, bool restoring,
		     uint64_t *ret_restored);

/* Tear down; frees every inode and closes every descriptor. */
void inode_table_destroy(void);

struct inode *inode_root(void);
struct inode *inode_from_nodeid(uint64_t nodeid);
uint64_t inode_nodeid(const struct inode *in);
/*
 * A file removed while open, under a keeper (keeper.h): before its name
 * goes, a link in STORE/.hsmfs ("open-DEV-INO") keeps it reachable by a
 * daemon taking over (its alias: saved.h), until its last open ends.
 * inode_orphan_link(): made (name set), or not needed or not possible;
 * inode_orphan_settle(): the name went (gone: the link is the alias now)
 * or did not (the link goes); the last inode_open_dec() removes the
 * link, or inode_orphan_settle() when that came first (a RELEASE races
 * the unlink that follows a close).  Links left by a keeper's death go
 * when the next mount starts.
 */
bool inode_orphan_link(struct inode *in, char name[48]);
/* Reached by its orphan link only: its link count shows one less (one relaxed load). */
bool inode_orphaned(const struct inode *in);
void inode_orphan_settle(struct inode *in, const char *name, bool gone);

/* The generation of in's node id (fuse_entry_param.generation). */
uint64_t inode_generation(const struct inode *in);

/*
 * Look name up in parent: fstatat() it in the store, find or create the
 * inode, take one lookup reference, and make (parent, name) its alias.
 * On success returns 0 with *ret and *ret_st set; else -errno.
 */
int inode_lookup(struct inode *parent, const char *name, struct stat *ret_st,
		 struct inode **ret);

/*
 * LOOKUP of "." (dotdot false) or ".." of in, the kernel's way to
 * resolve a file handle: in itself, or the directory its alias names,
 * checked against the store ((dev, ino) reached by the alias), with one
 * lookup reference taken.  0 with *ret and *ret_st set; -ESTALE when
 * the node id names nothing, or a file the alias no longer reaches;
 * -ENOTDIR for ".." of a non-directory; else -errno.
 */
int inode_lookup_dot(struct inode *in, bool dotdot, struct stat *ret_st, struct inode **ret);

/* Drop n lookup references (FUSE forget). */
void inode_forget(struct inode *in, uint64_t n);

/*
 * Borrow a verified O_PATH descriptor of in.  Returns it (>= 0) or
 * -errno; every successful call must be paired with inode_fd_put().
 * The descriptor is owned by the cache: do not close it.
 */
int inode_fd_get(struct inode *in);
void inode_fd_put(struct inode *in);

bool inode_is_symlink(const struct inode *in);
bool inode_is_dir(const struct inode *in);

/*
 * Borrow the descriptor of in's alias parent and a copy of its alias
 * name, for calls that must not follow a symlink (l*xattr, utimensat
 * on a symlink).  Returns the descriptor or -errno (-ESTALE when in
 * has no alias); on success release with inode_parent_fd_put().
 */
int inode_parent_fd_get(struct inode *in, struct inode **ret_parent,
			char **ret_name);
void inode_parent_fd_put(struct inode *parent, char *name);

/*
 * Write "/proc/self/fd/N" for fd into buf (at least 32 bytes): the way
 * to reach an O_PATH descriptor's inode with path-based calls.
 */
void inode_proc_path(int fd, char buf[32]);

/*
 * Removal and renames.  inode_hold_name() finds the inode, if the
 * kernel knows one, currently at (parent, name) and returns it held
 * (or NULL; *ret_st gets the fstatat() result either way, ENOENT as
 * st_nlink 0).  When a removal is coming, it first secures a
 * descriptor for inodes that outlive their name.  After the operation,
 * inode_moved() gives a held inode its new alias (it was at (oldparent,
 * oldname); NULL oldname: its alias), inode_name_gone() records that
 * one of its names is gone (links: its link count before, *ret_st's),
 * inode_unaliased() that its alias is (both fall back to another name
 * of it: "Other names" above), and
 * inode_release() drops the hold.
 */
struct inode *inode_hold_name(struct inode *parent, const char *name,
			      bool removing, struct stat *ret_st);
void inode_moved(struct inode *in, struct inode *oldparent, const char *oldname,
		 struct inode *newparent, const char *newname);
void inode_name_gone(struct inode *in, struct inode *parent, const char *name, nlink_t links);
void inode_unaliased(struct inode *in);
void inode_release(struct inode *in);

/* Open files count: kept so that unlinked open files stay reachable. */
void inode_open_inc(struct inode *in);
void inode_open_dec(struct inode *in);
bool inode_is_open(struct inode *in);

/*
 * Per-file state owned by another module, freed by the destructor set
 * here when the inode is freed.  inode_state() and inode_set_state()
 * are called with that module's own lock held; the pointer itself is
 * only ever set once (NULL -> state) per inode.
 */
void inode_set_state_destructor(void (*fn)(void *state));
void *inode_state(const struct inode *in);
void inode_set_state(struct inode *in, void *state);

/* Store inode number (the key of the metadata database). */
uint64_t inode_ino(const struct inode *in);

/* Take and drop a reference that keeps in alive (not a lookup). */
void inode_ref(struct inode *in);

/*
 * The path of in relative to the mount root, from its aliases, into buf.
 * Returns its length, or -ENAMETOOLONG, or -ESTALE if not reachable.
 */
int inode_path(struct inode *in, char *buf, size_t size);

/*
 * Statistics for tests and hsmfsctl: inodes, of them the ones the
 * kernel forgot (kept for file handles, or parents of such), and cached
 * descriptors.
 */
void inode_counts(uint64_t *ret_inodes, uint64_t *ret_kept, uint64_t *ret_fds);

#endif
