/*
 * fstate.h - per-file range state (fstate.c): loads, reloads, opens,
 * user changes and their claims, the fast-path bits of inode.h.  Fill
 * commits and staging files are commit.h's.
 */
/*
 * A file's state, fs->state (enum meta_state, meta.h), and the function
 * behind every step.  Every step goes through fs_set(), which asserts
 * in debug builds that it is an arrow here; a row read (fstate_take_row
 * at a load or reload, events_reload of a file whose row went) sets the
 * state it reads and is not a step.
 *
 *   PLACEHOLDER <--present_changed(): fills, evict_range(): evictions-->
 *   PARTIAL <-----------------------------------------------------> RESIDENT
 *       (any two of the three, as bytes come and go)
 *
 *   PARTIAL, unverified: every byte present, the manifest's digest not
 *       checked yet (present_changed() of a file with a sha256 whose
 *       last fill did not check it) --verify(), writeback.c--> RESIDENT,
 *       or PLACEHOLDER and stale; an eviction voids the check
 *       (evict_range() clears unverified: not all there any more)
 *
 *   PLACEHOLDER, PARTIAL, RESIDENT --becomes_dirty(): a user change--> DIRTY
 *
 *   DIRTY: the user's bytes.  A user's change wins over a fill, an
 *       eviction, a digest check; one step leaves it:
 *   DIRTY --fstate_archived(), from archive.c--> RESIDENT: every byte present, and
 *       the origin holds exactly them (an archive hook said which
 *       version) with no user change begun since its snapshot; the
 *       version is recorded with the state, in one commit of the writer.
 *       Else a new row (an import, then events_reload) replaces it.
 *
 *   Beside the state, the archive's: clean (an origin and a version,
 *   not DIRTY), dirty (DIRTY), archiving (arch, memory only: a crash
 *   leaves it dirty), conflict (DIRTY with META_F_CONFLICT: the origin
 *   changed under the change; kept until hsmfsctl resolve), new (DIRTY
 *   with no origin: made on the mount, never archived).
 *
 * The inode bits follow: INODE_NONRESIDENT while a byte is missing
 * (present_changed, evict_range, verify), INODE_TRACKED while the cache
 * counts it (not DIRTY; becomes_dirty clears it).  The activities on a
 * file are flags beside the state, each with its owner: evicting
 * (evict.c), restoring (times_kept, commit.c), queued and wbatch (the
 * writer), inflight (events of it), changes (user changes in flight).
 */
#ifndef HSMFS_FSTATE_H
#define HSMFS_FSTATE_H

#include <assert.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "dueheap.h"
#include "meta.h"
#include "ranges.h"

struct event;
struct events_change;
struct inode;

/* Per-file state of a file that has a metadata row. */
struct fstate {
	uint64_t ino;
	uint64_t size;
	uint64_t osize;            /* the recorded version's size (meta_file) */
	uint32_t state;            /* enum meta_state */
	uint32_t flags;            /* META_F_* */
	char *origin;              /* owned, may be NULL */
	char *version;             /* owned, may be NULL */
	struct rangeset present;
	struct event *inflight;    /* PRE_ACCESS events of this file */
	bool queued;               /* on the writer's queue */
	uint64_t wbatch;           /* the writer's batch (S.batch_taken) that
				    * last took a snapshot of it, 0: none */
	struct inode *in;          /* back pointer (the inode owns us) */
	struct fstate *wnext;      /* writer queue link */
	struct fstate *grave_next; /* S.graves link (events_created) */
	uint64_t gen;              /* the row's generation (see meta.h) */
	uint64_t blocks;           /* allocated bytes counted in the cache */
	int64_t atime;             /* last open, close or fill (ms, realtime) */
	int64_t atime_saved;       /* atime as last queued for the database */
	uint64_t ra_lo;            /* readahead: where the stream's last miss began */
	uint64_t ra_ahead;         /* readahead: end of what was asked ahead */
	uint64_t ra_window;        /* readahead: bytes asked ahead of a miss */
	uint64_t ra_seen;          /* readahead: end of the last read checked */
	uint64_t ra_grow;          /* readahead: what a young stream's next miss may
				    * ask (first_fill times 4 after a random miss,
				    * times 4 at each miss after), 0: its gap whole */
	int64_t closed_at;         /* readahead: when the last open closed
				    * (mono ms), 0 while open (cancel_window) */
	unsigned nreading;         /* tracked reads between check and reply */
	uint64_t hot_lo, hot_hi;   /* the span the last miss and its readahead
				    * cover: kept when an open file is evicted */
	int rw_fd;                 /* O_RDWR store descriptor fills are
				    * committed through, or -1; kept while the
				    * file is open or has events (drop_rw_fd) */
	struct events_change *changes; /* user changes in flight */
	uint64_t nchanges;         /* user changes begun so far (times_kept) */
	int sticky_err;            /* a failed data sync, for the next fsync */
	int64_t fd_wait_since;     /* mono ms the writer first found no
				    * descriptor to sync it (EMFILE), 0: none */
	int64_t ctime_real, ctime_shown; /* see meta_file (ns; 0: none) */
	bool evicting;             /* see evict_begin() */
	bool over;                 /* filled past cache_max (access_step()): the
				    * cache is asked to evict at its last close */
	bool restoring;            /* times_kept() is putting the mtime back */
	char *sha256;              /* the manifest's digest (hex, owned), or NULL */
	/*
	 * The manifest's chunk digests (meta_file.chunks, owned), or NULL:
	 * every fill is checked chunk by chunk before a byte of it is kept
	 * or served (commit.c); dchunk is their chunk size, ndchunks how
	 * many, dsums the 32 bytes of each.
	 */
	uint8_t *chunks;
	uint32_t dchunk, ndchunks;
	const uint8_t *dsums;
	bool unverified;           /* all present, the digest not checked yet:
				    * shown partial until the writer checks */
	uint64_t to_lo, to_hi;     /* the hint of the last fill that failed, */
	int64_t to_at;             /*   when (monotonic ms), how many hooks had */
	uint64_t to_joins;         /*   joined then, for whom (thread id), and */
	pid_t to_pid;              /*   its result: see recently_failed() */
	int to_err;
	/* archive (archive.c; queued on S.aqueue by archive_later()) */
	uint8_t arch;              /* ARCH_IDLE, ARCH_QUEUED, ARCH_RUNNING */
	bool arch_again;           /* asked again while running: queue it after */
	struct due_item aq;        /* its place on S.aqueue; aq.due: archived
				    * not before (monotonic ms) */
	int arch_err;              /* the last attempt's error, 0: none */
	unsigned arch_tries;       /* attempts that failed in a row */
	int64_t nohook_ms;         /* when an attempt first found no archive hook
				    * (0: the last one had one): who asked waits
				    * for one, the mount's timeout at most */
	bool vchanged;             /* origin, version: the writer records them */
	bool newrow;               /* made on the mount: the writer inserts its row */
	bool gone;                 /* its last name went: never archived */
	unsigned unseen;           /* opens writing in passthrough mode */
	bool overwrite;            /* resolved for the local bytes: the next
				    * archive is unconditional */
	bool track_pending;        /* archived while open: its reads are
				    * counted (INODE_TRACKED) and it may be
				    * evicted from its last close on */
	bool naming;               /* its rename goes to the origin: not
				    * archived meanwhile (archive.c) */
	struct arch_wait *awaiters; /* requests waiting for its archive */
};

enum { ARCH_IDLE, ARCH_QUEUED, ARCH_RUNNING };
#define ARCH_LOOK_MS 1000 /* an idle archiver looks at its queue at least this often */

/* Is from -> to an arrow of the diagram above? */
static inline bool fs_step_legal(uint32_t from, uint32_t to)
{
	if (to < META_PLACEHOLDER || to > META_DIRTY)
		return false;
	return from != META_DIRTY || to == META_DIRTY || to == META_RESIDENT;
}

/* The one place a file's state steps.  S.lock held. */
static inline void fs_set(struct fstate *fs, uint32_t to)
{
	assert(fs_step_legal(fs->state, to));
	/* out of DIRTY only archived, with every byte there */
	assert(fs->state != META_DIRTY || to == META_DIRTY ||
	       rs_contains(&fs->present, 0, fs->size));
	/* unverified: every byte there, waiting for its check */
	assert(!fs->unverified || to == META_PARTIAL || to == META_DIRTY);
	fs->state = to;
}

/* Look up in's per-file state once (at open).  0 or -errno. */
int events_load(struct inode *in);

/*
 * st, the store's attributes of in, as the mount shows them.  Times are
 * final: the change time the mount shows (ctime_shown of meta.h) where
 * the store's is the one the daemon's own fill or eviction left.  A
 * range not fetched yet is data: st_blocks counts it (layout_blocks()),
 * so that no tool takes a file not fetched yet for a sparse one.  Loads
 * the state of a file not opened yet only where the answer may depend
 * on it: a regular file the store holds fewer blocks of than its size
 * needs, or a store where some file has a kept change time (one relaxed
 * load and one comparison otherwise).  Never waits for a fill.
 */
void events_shown_attr(struct inode *in, struct stat *st);
extern _Atomic bool events_any_ctime;

/*
 * lseek(2) SEEK_DATA or SEEK_HOLE at off of in's file, fd a descriptor
 * of its store file, as the user sees the file (layout.h): a range not
 * fetched yet is data, never a hole.  A file without state is the
 * store's.  The store is asked without S.lock; an eviction meanwhile
 * (a new generation) asks again.  The offset, or -errno.
 */
off_t events_seek(struct inode *in, int fd, off_t off, int whence);

/*
 * Re-read in's state from the database (after hsmfsctl import changed
 * the file in the store).  -EBUSY while events for it are pending.
 */
int events_reload(struct inode *in);

/*
 * Opens and closes of files with state: their time of use for the
 * eviction order, and (at open) a barrier against an eviction in
 * progress.  Called after inode_open_inc() / after inode_open_dec().
 */
void events_opened(struct inode *in);
void events_released(struct inode *in);

/* A name was renamed through the mount: recorded paths follow (and, on a
 * mount that archives, the origin's objects at the next archive of names;
 * a directory's (dir) directories too).  moved: the node renamed (NULL: not
 * known); a new file whose first upload is in flight is moved at the
 * origin once that upload ends (archive.c). */
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
 * other names (archive.c).
 * Without S.lock.
 */
void events_dir_named(struct inode *parent, const char *name, uint32_t op);
/*
 * Do names changed on the mount follow at the origin (files made on it
 * are archived: S.cfg.track_new)?  The archive hook knows where
 * (origin=, or its own configuration).  Such a mount refuses
 * RENAME_EXCHANGE, which no origin can apply as one step.
 */
bool events_names_follow(void);

/* Set or clear the pinned flag (pinned files are never evicted). */
int events_pin(struct inode *in, bool pin);
/*
 * A file given another name (a hard link), or found by a sync with one
 * name again: META_F_LINKED set or cleared, for a sync to say the
 * origin holds one of its names (hsmfs(8) BUGS).  Without S.lock.
 */
void events_linked(struct inode *in, bool several);

/* The origin changed under a partly present file: fail its reads. */
int events_mark_stale(struct inode *in);

/*
 * A change of a file's bytes or size through the mount (write,
 * truncate, fallocate, copy_file_range destination), from just before
 * the store is changed until its bookkeeping is done.  While a change
 * is open, no fill is committed over [start, end): the user's bytes win.
 * events_change_begin() waits only for a fill being copied into that
 * range right now (bounded: no hook is involved).  Every begin is ended
 * by exactly one of events_wrote(), events_truncated() or
 * events_change_end() (the change failed).  Files without state: no-op.
 */
struct fstate;
struct events_change {
	uint64_t start, end;        /* claimed bytes; end may be UINT64_MAX */
	struct fstate *fs;          /* NULL: nothing claimed */
	struct events_change *next; /* the file's list, under S.lock */
};
void events_change_begin(struct inode *in, struct events_change *c,
			 uint64_t start, uint64_t end);
void events_change_end(struct inode *in, struct events_change *c);
/*
 * Is all of [start, end) present in the file of the open change c, and
 * the file clean (not DIRTY)?  Then a change that leaves those bytes as
 * they are (a punch of zeros: fallocate --dig-holes) may end with
 * events_change_end(), no change of the user's.
 */
bool events_change_clean(const struct events_change *c, uint64_t start, uint64_t end);

/* Bookkeeping after a successful change through the mount; ends c. */
void events_wrote(struct inode *in, struct events_change *c, uint64_t off,
		  uint64_t len);
void events_truncated(struct inode *in, struct events_change *c,
		      uint64_t old_size, uint64_t new_size);
/*
 * The last name of the file ino went (in: its inode, loaded, or NULL):
 * its row goes, after any write of it the writer has begun, and a file
 * made on the mount whose row is not written yet never gets one.  user:
 * removed through the mount (not by a listing); on a mount that
 * archives, the origin's object is to be removed too (meta.h: ops).
 */
void events_unlinked(struct inode *in, uint64_t ino, bool user);
/* Names changed that the origin is to follow (ops recorded): wake archive.c. */
void archive_names_wanted(void);
/*
 * in is open for writing where the daemon does not see the writes
 * (kernel passthrough): at open and again at release, its state becomes
 * dirty (every byte the user's, never fetched or evicted) with size, the
 * store file's size then (UINT64_MAX: not known, the size stays).
 * open: at the open, else at its release; between them the file is
 * never archived (its bytes change unseen).  Files without state: no-op.
 */
void events_unseen_writes(struct inode *in, uint64_t size, bool open);
/*
 * May in be opened in passthrough mode now (every byte present, nothing
 * filling, changing or being evicted, not stale or awaiting its digest)?
 * If so INODE_PASSTHROUGH is set, under the engine's lock, so that no
 * eviction starts on it until passthrough.c clears the flag.
 */
bool events_pass_begin(struct inode *in);
/*
 * A daemon taking over, before it serves: the user's changes the last
 * one answered and its writer did not commit (saved.h's claims) applied
 * again to their files' state; how many.
 */
unsigned events_replay_claims(void);

int64_t allocated(int fd);
bool tracked(const struct fstate *fs);
void fstate_free(void *p);
int open_store(struct inode *in, int flags);
struct event *inflight_over(const struct fstate *fs, uint64_t start, uint64_t end);
/* Shrink [*lo, *hi), around [start, end) that no event covers, to where no
 * event's hint overlaps it.  S.lock held. */
void inflight_clip(const struct fstate *fs, uint64_t start, uint64_t end, uint64_t *lo,
		   uint64_t *hi);
void drop_rw_fd(struct fstate *fs);
/* fs's present ranges changed: the inode bits follow.  S.lock held. */
void present_changed(struct fstate *fs);
/*
 * DIRTY -> RESIDENT: the origin holds exactly fs's bytes (archive.c,
 * with the version it recorded); blocks are its size in the store, which
 * the cache counts again from now on.  Committed with the version by
 * the writer's next batch.  S.lock held.
 */
void fstate_archived(struct inode *in, struct fstate *fs, uint64_t blocks);
/*
 * Every change of fs->flags (META_F_*): set or clear flag and persist
 * it.  claimed: a user's change answered now (a pin, a resolve), which
 * the next daemon applies if this one dies before the writer commits it
 * (saved.h); else the daemon's own finding (a conflict, an origin that
 * has the file now), committed with what it goes with or found again.
 * S.lock held.
 */
void fstate_set_flag(struct fstate *fs, uint32_t flag, bool on, bool claimed);
/* Queue fs on S.wqueue for the writer (writeback.c).  S.lock held. */
void persist_later(struct fstate *fs);
/*
 * Archive fs once due (monotonic ms; archive.c takes S.aqueue): queued,
 * or its due time replaced (the last change or ask decides); while it
 * is being archived, queued again after.  S.lock held.
 */
void archive_later(struct fstate *fs, int64_t due);
/* The file whose place on S.aqueue is it. */
static inline struct fstate *fstate_of_due(struct due_item *it)
{
	return (struct fstate *)((char *)it - offsetof(struct fstate, aq));
}
/*
 * hsmfsctl resolve --take-origin of the file ino (archive.c) asks the
 * refresh of its directory (listing.c) to replace or remove it though
 * it is dirty: is it asked?  And the refresh did (take_done).  S.lock
 * held.
 */
bool take_wanted(uint64_t ino);
void take_done(uint64_t ino);
/* A user's change or close of fs: with write-back on, archive it later. */
void archive_writeback(struct fstate *fs);
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
/*
 * fs's object is found nowhere at the origin (a move of it found
 * neither its old place nor its new: removed behind the mount's back,
 * or lost to a crash): if every byte of it is here, it becomes a file
 * new to the origin (dirty, META_F_NEW, no origin nor version) and is
 * archived again to its path, rather than shown clean with nothing at
 * the origin.  false: not all its bytes are here; it becomes dirty all
 * the same, keeping its origin, so that sync finds it and fails (its
 * archive must fetch what is missing first, from an object that is not
 * there) rather than exit 0 with it at the origin under no name, until
 * it is removed.  S.lock held.
 */
bool events_object_lost(struct fstate *fs);
/* Wait until fs is not being evicted (evict.c marks it).  S.lock held. */
void evict_wait(const struct fstate *fs);


#endif
