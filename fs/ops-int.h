/*
 * ops-int.h - what the files of the FUSE layer share; nothing outside
 * them includes it (main.c sees ops.h).  One job each:
 *
 *   ops.c        the table, FUSE INIT, ops_init()
 *   ops-int.c    the state set at start-up, parked requests (struct
 *                later), the wait for a lazy directory's listing
 *                (dir_wait()), do_lookup(), the lost handles' set
 *   ops-inval.c  the kernel's page cache and names dropped (the invalidator)
 *   ops-names.c  lookup, forget, mknod, mkdir, symlink, link, unlink,
 *                rmdir, rename
 *   ops-attr.c   getattr, setattr, readlink, statfs, access
 *   ops-file.c   open, create, read, write, flush, release, fsync,
 *                fallocate, lseek
 *   ops-copy.c   copy_file_range
 *   ops-dir.c    opendir, readdir(plus), releasedir, fsyncdir
 *   ops-adopt.c  the handles a daemon taking over reopens (saved.h,
 *                ops-adopt.h)
 *   ops-io.c     the session's reads and writes of /dev/fuse (ops-io.h)
 *   ops-resend.c operations that must not run twice when resent
 *   ops-xattr.c  extended attributes and the user.hsmfs.* control verbs
 * beside the modules they call: creds.h (creating as the caller),
 * readbuf.h (reply buffers of reads), the engine (events.h).
 *
 * Shape.  No files call each other in a circle, by name or through a
 * table of functions (tests/layers.py).  ops-int.c is the bottom: it
 * names no other ops file and holds no handler of theirs.  ops.c is the
 * top: its table names every handler.  Between them ops-attr.c,
 * ops-file.c, ops-copy.c and ops-xattr.c may call ops-names.c
 * (ops_create_mode()), ops-names.c calls ops-adopt.c (a resent rename
 * found done), and all may call ops-inval.c.  A parked request reaches
 * its step through its family's resume function, which the family gave
 * the engine with it (the continuation) and which runs the step the
 * enum l->step names; an operation run again after a listing
 * (LATER_LOOKUP .. LATER_OPENDIR) is a step of its own family.
 *
 * Replies.  The kernel gets exactly one reply per request (none for a
 * forget), and each path of an operation makes it in one place:
 *   - a do_* worker returns 0, a count or -errno and fills its out-
 *     parameters; it never replies and never parks;
 *   - an operation's reply_* function is the one place that turns a
 *     result (an errno, or the entry, attributes, buffer... it
 *     describes) into its fuse_reply_* call; no other function calls
 *     fuse_reply_*.  ops_read_reply() is the read's, also called by
 *     the engine (events.h, front.reply) for reads it parked;
 *   - the op_* handler calls its workers and ends in exactly one call
 *     of its reply function, unless it hands the request to a
 *     continuation;
 *   - a request that must wait for the engine (hooks, a listing) is
 *     parked with a struct later: a function that may park returns 0
 *     (go on), -errno (the caller replies it) or EVENTS_PARKED (the
 *     request and its struct later are the engine's; the caller
 *     touches neither again).  From then on the continuation, its
 *     family's resume function, is the one reply point of that
 *     request: it runs the step l->step names, which replies once or
 *     parks again.  A handler that made a struct later whose first
 *     wait is decided at once (or that has none) calls its resume
 *     function itself with that result, so both paths run the same
 *     step.
 *
 * Locks.  The ops files hold no lock of their own across a call out:
 * readbuf.c's and the invalidator's (ops-inval.c) are leaves.  No lock
 * is held across a fuse_reply_*.  Continuations run on an engine
 * thread without the engine's lock (events.h), so they may reply, call
 * back into the engine and park again.  A kernel notification is never
 * sent from a request the kernel waits on for it: ops_invalidate() not
 * from a read or write of that inode, whose pages the kernel holds until
 * the reply (the control verbs, setxattrs, may), ops_invalidate_entry()
 * not from a request holding the directory's lock (hence refresh is a
 * getxattr); the page cache of replied reads is dropped by the
 * invalidator's thread.
 *
 * State: set before the session serves a request (ops_init(),
 * op_init(), ops_set_session()) and read-only afterwards.
 */
#ifndef HSMFS_OPS_INT_H
#define HSMFS_OPS_INT_H

#include <fuse_lowlevel.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>

#include "fdlimit.h"
#include "inode.h"
#include "events.h" /* EVENTS_PARKED */
#include "ops-config.h"
#include "store.h"

extern struct ops_config ops_cfg;       /* ops_init(); op_init() may clear cold_direct */

/*
 * How long the kernel may keep in's attributes: attr_timeout, but not
 * at all while an open for writing passes through (its mapped writes
 * move the store file's times, which the daemon does not see: xfstests
 * generic/080, 215).
 */
static inline double ops_attr_timeout(const struct inode *in)
{
	return atomic_load_explicit(&((const struct inode_head *)in)->pt_write_opens,
				    memory_order_relaxed) ? 0 : ops_cfg.attr_timeout;
}
extern bool ops_acls;                   /* the kernel enforces POSIX ACLs (op_init) */
extern bool ops_killpriv;               /* set-ID bits are ours to drop (op_init, privs.h) */
extern bool ops_dont_mask;              /* the umask is ours to apply (op_init,
					 * ops_create_mode()) */
extern struct fuse_session *ops_session; /* ops_set_session(), or NULL */
extern atomic_bool ops_epoch;           /* the kernel drops every name at once
					 * (op_init; ops_invalidate_names()) */

/*
 * The engine's handle of a FUSE request (front.h) is the request itself:
 * the engine never looks into it, and gives it back to the callbacks of
 * ops.c, ops-file.c and ops-xattr.c.
 */
static inline struct front_req *FRONT(fuse_req_t req)
{
	return (struct front_req *)req;
}

static inline fuse_req_t FUSE_REQ(struct front_req *r)
{
	return (fuse_req_t)r;
}

static inline struct inode *IN(fuse_ino_t ino)
{
	return inode_from_nodeid(ino);
}

/* The one name in the store the mount never shows. */
static inline bool reserved(fuse_ino_t parent, const char *name)
{
	return IN(parent) == inode_root() && !strcmp(name, STORE_STATE_DIR);
}

/*
 * The reply of an operation whose result is an errno alone (0: success).
 * EMFILE and ENFILE, the daemon's own limit met, are counted (fdlimit.h).
 */
static inline void reply_err(fuse_req_t req, int res)
{
	if (res == -EMFILE || res == -ENFILE)
		fdlimit_note(res);
	fuse_reply_err(req, -res);
}

/* The reply of a forget: none. */
static inline void reply_none(fuse_req_t req)
{
	fuse_reply_none(req);
}

/*
 * The step a parked request's resume function runs when its wait ends: what
 * the request does next, after the wait its comment names.
 */
enum later_step {
	/* after dir_wait(): the directory is listed, the operation runs again from its start */
	LATER_LOOKUP,
	LATER_MKNOD,
	LATER_MKDIR,
	LATER_SYMLINK,
	LATER_LINK,
	LATER_UNLINK,
	LATER_RMDIR,
	LATER_RENAME,
	LATER_CREATE,
	LATER_OPENDIR,
	LATER_SETATTR,     /* after a size change's PRE_MODIFY: the change is made */
	/* an open, in this order (open_steps()) */
	LATER_OPEN_PERM,   /* first: OPEN_PERM is asked */
	LATER_OPEN_MODIFY, /* after OPEN_PERM: the whole file's PRE_MODIFY
			    * (a write joining passthrough) */
	LATER_OPEN_STORE,  /* after that PRE_MODIFY: the store file is opened, the mode fixed */
	LATER_OPEN_ACCESS, /* then: the whole file's ACCESS_PERM (an open passing through) */
	LATER_OPEN_REPLY,  /* after that ACCESS_PERM: the open is answered */
	LATER_READ,        /* after a read's ACCESS_PERM: the bytes are read */
	LATER_WRITE,       /* after a write's PRE_MODIFY: the kept bytes are written */
	LATER_FALLOCATE,   /* after an fallocate's PRE_MODIFY: the space is changed */
	/* a copy_file_range, in this order */
	LATER_COPY_SRC,    /* after the source's ACCESS_PERM: its missing bytes are waited for */
	LATER_COPY_DST,    /* after the source's wait (a read hold): the destination's PRE_MODIFY */
	LATER_COPY,        /* after the destination's PRE_MODIFY: the bytes are copied */
	LATER_REFRESH,     /* after hsmfsctl refresh of a directory: its value is answered */
	LATER_ARCHIVE,     /* after hsmfsctl archive, sync or resolve: its value is answered */
	LATER_STEPS        /* the number of steps */
};

/*
 * A parked request: its arguments, kept while the engine waits (the
 * kernel keeps the open files, so their descriptors, until the request
 * is answered), and its next step.  Fields name the steps that use them.
 */
struct later {
	fuse_req_t req;
	enum later_step step;         /* what its resume function runs next */
	fuse_ino_t ino;               /* the inode (a copy's source, a link's file) */
	fuse_ino_t parent;            /* names, create: the directory (a rename's first) */
	fuse_ino_t newparent;         /* link, rename: the other directory */
	const char *name, *name2;     /* names, create: owned (a symlink's target,
				       * a rename's new name) */
	mode_t mode;                  /* mknod, mkdir, create: the new file's mode */
	dev_t rdev;                   /* mknod */
	unsigned int flags;           /* rename's, copy_file_range's */
	struct fuse_file_info fi;     /* create, opendir, open, and an open file's ops */
	bool has_fi;                  /* setattr: fi is the file's open */
	struct stat attr;             /* setattr: the new attributes */
	int valid;                    /* setattr: FUSE_SET_ATTR_* of attr */
	uint64_t gen;                 /* open: the pt_gen() its tests were made on */
	bool opened;                  /* open: the store file is open */
	bool open_asked;              /* open: OPEN_PERM allowed */
	bool modify_asked;            /* open: the whole file's PRE_MODIFY allowed */
	int falloc_mode;              /* fallocate: its mode */
	off_t off;                    /* read, write, fallocate, copy: the (source's) offset */
	size_t len;                   /* read, write, fallocate, copy: bytes;
				       * refresh: the caller's buffer size */
	fuse_ino_t ino_out;           /* copy: the destination */
	struct fuse_file_info fi_out; /* copy: the destination's open */
	off_t off_out;                /* copy: the destination's offset */
	bool held;                    /* copy: a read hold on the source (events_read_done()) */
	uint64_t unique;              /* names, create: the request's id (ops-resend.c) */
	char data[];                  /* write: its bytes (len) */
};

/*
 * A copy of *tmpl with copies of its names and room for datalen bytes
 * of data: the caller's, freed with later_free() unless handed to the
 * engine.  NULL when out of memory.
 */
struct later *later_new(const struct later *tmpl, size_t datalen);
/* Free l and its names; NULL is fine. */
void later_free(struct later *l);
/*
 * The continuation of a parked request (the cont(arg, res) of events.h,
 * arg the struct later) is its family's resume function, which the
 * family passes with l: names_resume() (ops-names.c), file_resume(),
 * attr_resume(), copy_resume(), dir_resume(), xattr_resume().  res is
 * the result of the wait that ended (0: allowed, listed; -errno: the
 * request fails with it).  It runs the step l->step names, which replies
 * once, or parks l again and returns EVENTS_PARKED (l->step set first);
 * then later_ran() frees l unless it was parked again.
 */
static inline void later_ran(struct later *l, int step_res)
{
	if (step_res != EVENTS_PARKED)
		later_free(l);
}

/*
 * Before an operation on the names of dir: 0 (dir's names are known: go
 * on now), -errno, or EVENTS_PARKED: dir is being listed, and once it
 * is, resume (the caller's family's) runs the operation args->step names
 * again from its start with args's arguments (copied; args->req unused).
 * One relaxed load on stores with no lazy directory.  ops-int.c.
 */
int dir_wait(fuse_req_t req, fuse_ino_t dir, const struct later *args,
	     void (*resume)(void *arg, int res));

/* At start-up, from ops_init(): what ops-dir.c keeps (its handles' table). */
void ops_dir_init(void);

/*
 * ops-resend.c: operations that must not run twice; resend_adopt() takes
 * the last daemon's journal (ops_io_attach(), taking over).  resend_lookup()
 * of a request's id (ops_io_unique()): RESEND_NONE (run it), RESEND_DONE
 * (*ret_res is what the last daemon's store change gave), RESEND_BEGUN
 * (marked, result unknown: ask the store); *ret_aux as begun.  Around
 * the store change: resend_begin() before, resend_done() after,
 * resend_end() once answered (reply_entry(), reply_err() of the name
 * operations and create).
 */
enum { RESEND_NONE, RESEND_DONE, RESEND_BEGUN };
void resend_adopt(void);
/* the kernel's opcodes, for the record (fuse_kernel.h) */
enum { OP_SYMLINK = 6, OP_MKNOD = 8, OP_MKDIR = 9, OP_UNLINK = 10, OP_RMDIR = 11,
       OP_RENAME = 12, OP_LINK = 13, OP_SETXATTR = 21, OP_REMOVEXATTR = 24,
       OP_CREATE = 35 };
int resend_lookup(uint64_t unique, uint64_t *ret_aux, int *ret_res);
void resend_begin(uint64_t unique, uint32_t opcode, uint64_t aux);
/* what the change found, for a resent one (a create: 1 if it made the file) */
void resend_set_aux(uint64_t aux);
/* an unlink's aux: the file's store inode, and whether its last link went */
#define RESEND_REMOVED_LAST (1ULL << 63)
struct saved_op;
/* fn of each record the last daemon left in state (SAVED_OP_BEGUN, _DONE),
 * of opcode (taking over): how many it said true of */
unsigned resend_each(uint32_t opcode, uint32_t state,
		     bool (*fn)(const struct saved_op *r, void *arg), void *arg);
void resend_done(int res);
void resend_end(void);

/* ops-int.c: hsmfsctl restart (ops.h says it for main.c too) */
void ops_handover(void);
bool ops_handover_asked(void);

/* ops-dir.c: the directory open at fd, reopened by a daemon taking over (ops-adopt.c). */
int ops_dir_adopt(int fd, struct inode *in);

/* The store descriptor's flags for an open with the caller's flags: the
 * open's, and the reopen of its handle by a daemon taking over. */
int ops_store_flags(int flags);
/*
 * The store descriptor fd of an open through the mount (dir: of a
 * directory) reads without touching the store's access time, where
 * noatime or nodiratime says so (O_NOATIME, set after the open: a
 * create opens as the caller, who may not own the file).  Where the
 * daemon may not (a user's mount, a file it does not own) the time is
 * the store's mount's to decide, as without the option.
 */
void ops_store_noatime(int fd, bool dir);
/*
 * Handles a takeover could not reopen (ops-int.c): marked by ops-adopt.c;
 * taken off by a RELEASE before its descriptor closes; swept by
 * ops_adopt_retry() once a resent rename is found done:
 * ops_lost_sweep() calls done(fh) for each, under the set's lock, and
 * takes off those it returns true for (reopened, or released): how many.
 */
void ops_lost_add(uint32_t fh);
void ops_lost_forget(uint64_t fh);
unsigned ops_lost_sweep(bool (*done)(uint32_t fh));

/*
 * ops-file.c: the set-ID bits a change of in by req's caller drops
 * (privs.h), dropped in the store file fd before the change, as the
 * kernel's file_modified() does; the kernel's attributes of in are then
 * invalidated, or it would show the mode it cached for attr_timeout
 * (ops_invalidate_attr(): from any request).  Nothing unless the mount
 * took that job over (ops_killpriv).  No engine lock held.
 */
void ops_kill_privs(fuse_req_t req, struct inode *in, int fd);

/*
 * ops-names.c: the mode a create, mknod or mkdir of req asks for in the
 * store directory pfd (any descriptor, O_PATH too).  With ACLs the
 * kernel leaves the caller's umask to the daemon (ops_dont_mask), as a
 * directory's default ACL replaces it on the kernel's own filesystems:
 * mode as asked where pfd has a default ACL (the store applies it, the
 * daemon's own umask being 0), else less the caller's umask.  A default
 * ACL set or removed while this looks is a race the caller may lose.
 */
mode_t ops_create_mode(fuse_req_t req, int pfd, mode_t mode);

/* The entry of name in parent, for the kernel (a lookup reference taken).  ops-int.c. */
int do_lookup(fuse_ino_t parent, const char *name, struct fuse_entry_param *e);
/*
 * How long the kernel may keep a name of parent: t (entry_timeout, or
 * negative_timeout), no longer than dir_ttl in a directory listed again
 * after it.
 */
double ops_name_timeout(fuse_ino_t parent, double t);
/* The rest of *e for in, whose attributes e->attr holds (looked up): as the mount shows it. */
void ops_entry_of(struct inode *in, double entry_timeout, struct fuse_entry_param *e);

/*
 * The invalidator (ops-inval.c): a request to drop [off, off + len) of
 * nodeid's page cache (nodeid 0: every regular file), made before the
 * reply whose pages it drops (NULL: out of memory, the caller fails
 * closed) and posted after it; the thread drops it soon.
 */
struct inval_job;
struct inval_job *inval_new(uint64_t nodeid, uint64_t off, uint64_t len);
void inval_post(struct inval_job *iv);
/*
 * The same for a write through an O_DIRECT open of in, counted in its
 * direct_writes (inode.h) from now until the drop has run; in is held
 * until then.  false: out of memory, or no invalidator (the count
 * stays: every later open drops the page cache, fail closed).
 */
bool inval_direct_write(struct inode *in, uint64_t off, uint64_t len);
/* Start the thread (ops_set_session()).  Is it running?  Set once, before requests. */
void inval_start(void);
bool inval_started(void);

/* The handlers of the table (ops.c), each in its family's file. */
void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags);

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		struct fuse_file_info *fi);
void op_readlink(fuse_req_t req, fuse_ino_t ino);
void op_statfs(fuse_req_t req, fuse_ino_t ino);
void op_access(fuse_req_t req, fuse_ino_t ino, int mask);

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
		  struct fuse_file_info *fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		  struct fuse_file_info *fi);
void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
			struct fuse_file_info *fi_out, size_t len, int flags);
void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi);
void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		 size_t size, int flags);
void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

#endif
