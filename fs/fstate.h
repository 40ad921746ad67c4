/*
 * fstate.h - per-file range state (fstate.c): loads, reloads, flags,
 * the steps of the state, the fast-path bits of inode.h.  Opens, user
 * changes and their claims are change.h's, names journal.h's, fill
 * commits and staging files commit.h's.
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
 *   PLACEHOLDER, PARTIAL, RESIDENT --becomes_dirty(): a user change
 *       (change.c), or an object lost at the origin (events_object_lost)--> DIRTY
 *
 *   DIRTY: the user's bytes.  A user's change wins over a fill, an
 *       eviction, a digest check; one step leaves it:
 *   DIRTY --fstate_archived(), from upload.c--> RESIDENT: every byte present, and
 *       the origin holds exactly them (an archive hook said which
 *       version) with no user change begun since its snapshot; the
 *       version is recorded with the state, in one commit of the writer.
 *       Else a new row (an import, then events_reload) replaces it.
 *
 *   Beside the state, the archive's (hsmfs(8) ARCHIVE draws it for
 *   users), each step with its function:
 *     clean: an origin and a version, not DIRTY;
 *     clean --becomes_dirty()--> dirty (DIRTY);
 *     dirty --attempt_begin(), aqueue.c--> archiving (fs->arch
 *         ARCH_RUNNING, memory only: a crash leaves it dirty);
 *     archiving --attempt_end()--> dirty (changed meanwhile, failed: queued
 *         again by archive_later()), or clean (fstate_archived() in upload.c
 *         before it), or conflict;
 *     conflict: DIRTY with META_F_CONFLICT (fstate_set_flag() in
 *         attempt_end(): the origin changed under the change), kept
 *         until hsmfsctl resolve: --keep-local clears it
 *         (fstate_set_flag() in events_resolve(), sync.c) and archives
 *         over it; --take-origin (events_take_origin(), archive.c) has
 *         the directory's refresh replace the file;
 *     new: DIRTY with META_F_NEW and no origin, made on the mount
 *         (events_created(), journal.c) or its object lost
 *         (events_object_lost()); the flag is cleared by fstate_set_flag()
 *         once an upload landed (upload.c).
 *   Every change of fs->flags goes through fstate_set_flag(), but where
 *   a record is made or read: a row read, a file made
 *   (events_created()), the replay of a claim (events_replay_claims()).
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
	/* the archive's (aqueue.h: its place, the attempts) */
	uint8_t arch;              /* ARCH_IDLE, ARCH_QUEUED, ARCH_RUNNING */
	bool arch_again;           /* asked again while running: queue it after */
	struct due_item aq;        /* its place on AQ.heap; aq.due: archived
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
				    * archived meanwhile (namer.c) */
	struct arch_wait *awaiters; /* requests waiting for its archive */
};

enum { ARCH_IDLE, ARCH_QUEUED, ARCH_RUNNING };

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

extern _Atomic bool events_any_ctime;

int64_t allocated(int fd);
bool tracked(const struct fstate *fs);
void fstate_free(void *p);
int open_store(struct inode *in, int flags);
struct event *inflight_over(const struct fstate *fs, uint64_t start, uint64_t end);
/* Has a hook one of fs's fills now (sent, not yet copied)?  S.lock held. */
bool fill_sent(const struct fstate *fs);
/* Shrink [*lo, *hi), around [start, end) that no event covers, to where no
 * event's hint overlaps it.  S.lock held. */
void inflight_clip(const struct fstate *fs, uint64_t start, uint64_t end, uint64_t *lo,
		   uint64_t *hi);
void drop_rw_fd(struct fstate *fs);
/* fs's present ranges changed: the inode bits follow.  S.lock held. */
void present_changed(struct fstate *fs);
/*
 * DIRTY -> RESIDENT: the origin holds exactly fs's bytes (upload.c,
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
 * PLACEHOLDER, PARTIAL, RESIDENT -> DIRTY (or DIRTY again): a user's
 * change (change.c) or an object lost; the cache stops counting it.
 * S.lock held.
 */
void becomes_dirty(struct fstate *fs);
/*
 * A change answered before the writer commits it: a claim in the saved
 * region (saved.h) for a daemon taking over, at the next batch taken.
 * A full ring keeps none.  S.lock held.
 */
void claim_flags(struct fstate *fs, uint64_t start, uint64_t end, uint64_t size,
		 uint32_t flags);
/*
 * fs's object is found nowhere at the origin (a move of it found
 * neither its old place nor its new: removed behind the mount's back,
 * or lost to a crash): if every byte of it is here, it becomes a file
 * new to the origin (dirty, META_F_NEW, no origin nor version), to be
 * archived again to its path (the caller queues it: archive_writeback),
 * rather than shown clean with nothing at the origin.  false: not all
 * its bytes are here; it becomes dirty all the same, keeping its
 * origin, so that sync finds it and fails (its archive must fetch what
 * is missing first, from an object that is not there) rather than exit
 * 0 with it at the origin under no name, until it is removed.  S.lock
 * held.
 */
bool events_object_lost(struct fstate *fs);
/* Wait until fs is not being evicted (evict.c marks it).  S.lock held. */
void evict_wait(const struct fstate *fs);

#endif
