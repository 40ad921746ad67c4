/* fstate.c - per-file range state: see fstate.h */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "events.h"
#include "cache.h"
#include "clock.h"
#include "evrec.h"
#include "state.h"
#include "evict-policy.h"
#include "fstate.h"
#include "saved.h"
#include "hsmfs/protocol.h"
#include "inode.h"
#include "layout.h"
#include "log.h"
#include "meta.h"
#include "ranges.h"
#include "store.h"

static void fstate_take_row(struct fstate *fs, struct meta_file *f);
static int load_state(struct inode *in, bool cache_missing);

static int set_flag(struct inode *in, uint32_t flag, bool on);

/* Allocated bytes of the store file open at fd, or -1. */
int64_t allocated(int fd)
{
	struct stat st;

	return fstat(fd, &st) < 0 ? -1 : (int64_t)st.st_blocks * 512;
}

/*
 * On mounts with cache limits an open file's ranges may be evicted, so
 * every read of a clean file with state that reaches the daemon goes
 * through events_pre_access() (INODE_TRACKED) and is counted until its
 * reply is sent; the evictor leaves a file alone while any such read
 * runs.  Reads the kernel's page cache serves never come.
 */
bool tracked(const struct fstate *fs)
{
	return S.cfg.cache_limited && fs->state != META_DIRTY;
}

void fstate_free(void *p)
{
	struct fstate *fs = p;

	if (fs->rw_fd >= 0)
		close(fs->rw_fd);
	free(fs->origin);
	free(fs->version);
	free(fs->sha256);
	free(fs->chunks);
	rs_clear(&fs->present);
	free(fs);
}

/* fs's chunk digests: the row's (taken), or none. */
static void take_chunks(struct fstate *fs, struct meta_file *f)
{
	const uint8_t *b = f->chunks;

	free(fs->chunks);
	fs->chunks = NULL;
	fs->dsums = NULL;
	fs->dchunk = fs->ndchunks = 0;
	if (!b || f->chunks_len < 4) {
		free(f->chunks);
		f->chunks = NULL;
		return;
	}
	fs->chunks = f->chunks;
	f->chunks = NULL;
	/* a damaged size: every chunk then fails its check (fail closed) */
	fs->dchunk = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
		     (uint32_t)b[3] << 24;
	if (!fs->dchunk || (fs->dchunk & (fs->dchunk - 1)))
		fs->dchunk = 4096;
	fs->ndchunks = (uint32_t)((f->chunks_len - 4) / 32);
	fs->dsums = fs->chunks + 4;
}

/* ------------------------------------------------------------ state */

/* Move a row's fields into fs (which takes ownership of its strings). */
static void fstate_take_row(struct fstate *fs, struct meta_file *f)
{
	fs->size = f->size;
	fs->osize = f->state == META_DIRTY ? f->osize : f->size;
	fs->state = f->state; /* a record read, not a step (fstate.h) */
	fs->flags = f->flags;
	fs->origin = f->origin;
	fs->version = f->version;
	fs->present = f->present;
	fs->gen = f->gen;
	fs->blocks = f->blocks;
	fs->atime = fs->atime_saved = f->atime;
	fs->sha256 = f->sha256;
	take_chunks(fs, f);
	fs->unverified = false;
	fs->ctime_real = f->ctime_real;
	fs->ctime_shown = f->ctime_shown;
	free(f->path);
	memset(f, 0, sizeof(*f));
}

/* Queue fs for the writer (writeback.c).  S.lock held. */
void persist_later(struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->queued)
		return;
	fs->queued = true;
	inode_ref(fs->in);
	fs->wnext = S.wqueue;
	S.wqueue = fs;
	S.nqueued++;
	pthread_cond_signal(&S.wcond);
}

/* Wait until fs is not being evicted (evict.c).  S.lock held. */
void evict_wait(const struct fstate *fs)
{
	ELOCK_HELD();
	while (fs->evicting)
		pthread_cond_wait(&S.evicted, &S.lock);
}

/*
 * A dirty file's store file is the truth of its size: writes the daemon
 * never saw (an open in passthrough mode) may have grown or shrunk it
 * before a crash left the row with the size of its open.  What lies
 * past the recorded size is the user's, present; what is gone, gone.
 * 0 or -errno (then f is freed).
 */
static int dirty_size(struct inode *in, struct meta_file *f)
{
	struct stat st;
	int fd = inode_fd_get(in), res = 0;

	if (fd < 0)
		return 0; /* checked again at the next load */
	if (!fstat(fd, &st) && (uint64_t)st.st_size != f->size) {
		if ((uint64_t)st.st_size > f->size)
			res = rs_add(&f->present, f->size, (uint64_t)st.st_size);
		else
			res = rs_remove(&f->present, (uint64_t)st.st_size, UINT64_MAX);
		f->size = (uint64_t)st.st_size;
	}
	inode_fd_put(in);
	if (res)
		meta_file_free(f);
	return res;
}

int events_load(struct inode *in)
{
	return load_state(in, true);
}

/* How long an access waits for the row of a marked store file (load_state()). */
#define ROW_WAIT_MS 2000

/* Does in's store file carry the placeholder mark?  Without S.lock. */
static bool store_marked(struct inode *in)
{
	char path[32];
	int fd = inode_fd_get(in);
	bool marked;

	if (fd < 0)
		return false;
	may_block("a getxattr of a store file");
	inode_proc_path(fd, path);
	marked = getxattr(path, STORE_MARKER_XATTR, NULL, 0) >= 0 || errno == ERANGE;
	inode_fd_put(in);
	return marked;
}

/*
 * No row for in (meta_get() gave -ENOENT): is it a plain file?  Not if
 * its store file carries the placeholder mark: that is an entry being
 * made (a listing, a lookup, a refresh or an import makes the entry,
 * syncs, then writes its row; sibling prefetch reads the store's
 * directory and may find it in between), whose missing ranges would
 * read as zeros.  An access (wait) waits for the row a bounded time;
 * else -EAGAIN, and the caller caches nothing.  0 with the row in *f,
 * -ENOENT (plain: no row, no mark), or -errno.  Without S.lock.
 */
static int row_coming(struct inode *in, bool wait, struct meta_file *f)
{
	int64_t until = mono_ms() + ROW_WAIT_MS;
	int res = -ENOENT;

	while (res == -ENOENT && store_marked(in)) {
		if (!wait || mono_ms() >= until)
			return -EAGAIN;
		usleep(10000);
		res = meta_get(S.cfg.meta, inode_ino(in), f);
	}
	return res;
}

/*
 * Read in's row and install its state.  With no row, the answer is
 * cached (INODE_LOADED: a plain file) only when cache_missing: a
 * lookup may come before the import that writes the row, an open
 * comes after it (hsmfsctl import creates the file, then the row).
 */
static int load_state(struct inode *in, bool cache_missing)
{
	char path[HSMFS_MAX_PATH + 1];
	struct meta_file f;
	struct fstate *fs;
	int res;

	if (inode_flags(in) & INODE_LOADED)
		return 0;
	if (inode_is_dir(in)) {
		/* a directory's row is its listing state (dirs.c), never an fstate */
		inode_flags_set(in, INODE_LOADED);
		return 0;
	}
	/*
	 * The database is read without the engine's lock (no SQLite under
	 * S.lock); two first opens may both read it, one installs.
	 */
	res = S.cfg.meta ? meta_get(S.cfg.meta, inode_ino(in), &f) : -ENOENT;
	if (res == -ENOENT && S.cfg.meta && !inode_is_symlink(in))
		res = row_coming(in, cache_missing, &f);
	if (res == -EAGAIN)
		return res; /* no row yet: nothing cached, asked again */
	if (res && res != -ENOENT) {
		elog_err("cannot read the state of inode %llu: %s",
			(unsigned long long)inode_ino(in), meta_errmsg(S.cfg.meta));
		return -EIO;
	}
	/* keep the recorded path true: the evictor finds files by it */
	if (!res && inode_path(in, path, sizeof(path)) > 0 && (!f.path || strcmp(f.path, path)))
		meta_set_path(S.cfg.meta, f.ino, path);
	if (!res && f.state == META_DIRTY && (res = dirty_size(in, &f)))
		return res;
	fs = res ? NULL : calloc(1, sizeof(*fs));
	if (!res && !fs) {
		meta_file_free(&f);
		return -ENOMEM;
	}
	elock();
	if (inode_flags(in) & INODE_LOADED) {
		/* another thread installed it meanwhile */
		eunlock();
		if (fs) {
			meta_file_free(&f);
			free(fs);
		}
		return 0;
	}
	if (res == -ENOENT) {
		inode_flags_set(in, cache_missing ? INODE_LOADED : INODE_NOROW);
		eunlock();
		return 0;
	}
	fs->rw_fd = -1;
	fs->ino = f.ino;
	fs->in = in;
	fstate_take_row(fs, &f);
	inode_set_state(in, fs);
	/* dirty files too: their missing ranges are fetched, never zeros */
	if (!rs_contains(&fs->present, 0, fs->size))
		inode_flags_set(in, INODE_NONRESIDENT);
	if (tracked(fs))
		inode_flags_set(in, INODE_TRACKED);
	inode_flags_set(in, INODE_STATEFUL | INODE_LOADED);
	eunlock();
	return 0;
}

/* Reads of the row a reload makes before it gives up with -EBUSY. */
#define RELOAD_TRIES 16

int events_reload(struct inode *in)
{
	struct meta_file f;
	struct fstate *fs;
	uint64_t old_blocks, wbatch, gen, ino;
	int res, tries = 0;

	elock();
again:
	fs = inode_state(in);
	if (!fs) {
		inode_flags_clear(in, INODE_LOADED);
		eunlock();
		return events_load(in);
	}
	/* a passthrough open reads the store itself: it must close first */
	if (fs->inflight || fs->evicting || (inode_flags(in) & INODE_PASSTHROUGH)) {
		eunlock();
		return -EBUSY;
	}
	/*
	 * The row is read without S.lock (a read waits behind the writer's
	 * commit and its fsync).  It is the row a read under the lock gives
	 * when no daemon write of it came between: no writer's batch took a
	 * snapshot of fs meanwhile or was writing one, and no eviction gave
	 * it a new generation.  Otherwise it is read again.
	 */
	if (fs->wbatch > S.batch_done) {
		/* a batch holding a snapshot of fs is being written */
		if (++tries > RELOAD_TRIES) {
			eunlock();
			return -EBUSY;
		}
		pthread_cond_wait(&S.wdone, &S.lock);
		goto again;
	}
	wbatch = fs->wbatch;
	gen = fs->gen;
	ino = fs->ino;
	eunlock();
	res = meta_get(S.cfg.meta, ino, &f);
	elock();
	if (inode_state(in) != fs || fs->wbatch != wbatch || fs->gen != gen || fs->inflight ||
	    fs->evicting || (inode_flags(in) & INODE_PASSTHROUGH)) {
		/* touched meanwhile: look again (busy now: EBUSY above) */
		if (!res)
			meta_file_free(&f);
		if (++tries > RELOAD_TRIES) {
			eunlock();
			return -EBUSY;
		}
		goto again;
	}
	old_blocks = fs->state == META_DIRTY ? 0 : fs->blocks;
	if (res == -ENOENT) {
		/* no row any more: a plain resident file */
		cache_account(-(int64_t)old_blocks);
		fs->blocks = 0;
		rs_clear(&fs->present);
		res = rs_add(&fs->present, 0, fs->size);
		fs->state = META_RESIDENT; /* a record read, not a step (fstate.h) */
		fs->flags = 0;
		fs->unverified = false;
		free(fs->sha256);
		fs->sha256 = NULL;
		take_chunks(fs, &(struct meta_file){ 0 });
		inode_flags_clear(in, INODE_NONRESIDENT | INODE_TRACKED);
		eunlock();
		return res;
	}
	if (res) {
		eunlock();
		return -EIO;
	}
	/* reset in place: a write-behind batch may still hold fs */
	fs->to_at = 0; /* a new version: earlier failures say nothing of it */
	free(fs->origin);
	free(fs->version);
	free(fs->sha256);
	rs_clear(&fs->present);
	fstate_take_row(fs, &f);
	cache_account((int64_t)(fs->state == META_DIRTY ? 0 : fs->blocks) -
		      (int64_t)old_blocks);
	if (rs_contains(&fs->present, 0, fs->size))
		inode_flags_clear(in, INODE_NONRESIDENT);
	else
		inode_flags_set(in, INODE_NONRESIDENT);
	if (tracked(fs))
		inode_flags_set(in, INODE_TRACKED);
	else
		inode_flags_clear(in, INODE_TRACKED);
	inode_flags_clear(in, INODE_QUIET);
	eunlock();
	return 0;
}

/* A new descriptor of in's store file (O_RDWR, O_RDONLY), or -errno. */
int open_store(struct inode *in, int flags)
{
	may_block("the open of a store file");
	char path[32];
	int fd = inode_fd_get(in), sfd;

	if (fd < 0)
		return fd;
	inode_proc_path(fd, path);
	sfd = open(path, flags | O_CLOEXEC);
	sfd = sfd < 0 ? -errno : sfd;
	inode_fd_put(in);
	return sfd;
}

_Atomic bool events_any_ctime;

void events_shown_attr(struct inode *in, struct stat *st)
{
	bool times = atomic_load_explicit(&events_any_ctime, memory_order_relaxed);
	/* fewer blocks than the size needs: sparse, or bytes not fetched yet */
	bool thin = (uint64_t)st->st_blocks * 512 < (uint64_t)st->st_size;
	/* an eviction may be cutting it (release_bytes(), evict.c) */
	bool nonres = inode_flags(in) & INODE_NONRESIDENT;
	struct fstate *fs;

	if (!S_ISREG(st->st_mode) || (!times && !thin && !nonres))
		return;
	/*
	 * One database read per inode: a file with no row and no mark cannot
	 * gain a row while it exists (import refuses a file hsmfs does not
	 * manage, and makes each placeholder a new store file, marked before
	 * it has a name); one whose row is coming is looked at again.
	 */
	if (!(inode_flags(in) & (INODE_LOADED | INODE_NOROW)) && load_state(in, false))
		return;
	if (!(inode_flags(in) & INODE_STATEFUL))
		return;
	elock();
	fs = inode_state(in);
	if (fs && fs->evicting && (uint64_t)st->st_size < fs->size) {
		/* cut and extended again while it is evicting: its size is fs->size */
		st->st_size = (off_t)fs->size;
		thin = (uint64_t)st->st_blocks * 512 < (uint64_t)st->st_size;
	}
	if (fs && fs->ctime_real && fs->ctime_real == ns_of(&st->st_ctim)) {
		st->st_ctim.tv_sec = fs->ctime_shown / 1000000000;
		st->st_ctim.tv_nsec = fs->ctime_shown % 1000000000;
	}
	if (fs && thin && (inode_flags(in) & INODE_NONRESIDENT))
		st->st_blocks = (blkcnt_t)layout_blocks(&fs->present, (uint64_t)st->st_size,
							(uint64_t)st->st_blocks);
	eunlock();
}

/* layout_seek()'s question to the store file (arg: its descriptor). */
static int64_t store_seek(void *arg, uint64_t off, int whence)
{
	off_t r = lseek(*(int *)arg, (off_t)off, whence);

	return r < 0 ? -errno : r;
}

/* Times an eviction may make events_seek() ask again before it answers "all data". */
#define SEEK_TRIES 8

off_t events_seek(struct inode *in, int fd, off_t off, int whence)
{
	struct rangeset present = RANGESET_INIT;
	struct fstate *fs;
	struct stat st;
	uint64_t gen;
	int64_t res;

	if ((whence != SEEK_DATA && whence != SEEK_HOLE) ||
	    !(inode_flags(in) & INODE_STATEFUL)) {
		off_t r = lseek(fd, off, whence);

		return r < 0 ? -errno : r;
	}
	if (off < 0)
		return -ENXIO;
	for (int tries = 0;; tries++) {
		bool stood;

		elock();
		fs = inode_state(in);
		if (fs)
			evict_wait(fs); /* no answer from a file half punched */
		gen = fs ? fs->gen : 0;
		res = fs && tries < SEEK_TRIES ? rs_copy(&present, &fs->present) : 0;
		eunlock();
		if (!res && fstat(fd, &st) < 0)
			res = -errno;
		if (res)
			break;
		if (!fs || tries >= SEEK_TRIES) {
			/* nothing stood still: every byte is data, the end the hole */
			res = off >= st.st_size ? -ENXIO : whence == SEEK_DATA ? off : st.st_size;
			break;
		}
		res = layout_seek(&present, (uint64_t)st.st_size, (uint64_t)off, whence,
				  store_seek, &fd);
		/* a hole the store showed may be an eviction's punch: asked again */
		elock();
		fs = inode_state(in);
		stood = fs && fs->gen == gen && !fs->evicting;
		eunlock();
		if (stood)
			break;
	}
	rs_clear(&present);
	return (off_t)res;
}

/* The event of fs whose hint overlaps [start, end), or NULL.  S.lock held. */
struct event *inflight_over(const struct fstate *fs, uint64_t start, uint64_t end)
{
	ELOCK_HELD();
	struct event *ev;

	for (ev = fs->inflight; ev; ev = ev->fnext)
		if (ev->hint_start < end && start < ev->hint_end)
			break;
	return ev;
}

bool fill_sent(const struct fstate *fs)
{
	ELOCK_HELD();
	for (struct event *ev = fs->inflight; ev; ev = ev->fnext)
		if (ev->st == EV_SENT || ev->st == EV_FILLED)
			return true;
	return false;
}

void inflight_clip(const struct fstate *fs, uint64_t start, uint64_t end, uint64_t *lo,
		   uint64_t *hi)
{
	ELOCK_HELD();
	for (struct event *ev = fs->inflight; ev; ev = ev->fnext) {
		assert(ev->hint_end <= start || ev->hint_start >= end);
		if (ev->hint_end <= start && ev->hint_end > *lo)
			*lo = ev->hint_end;
		if (ev->hint_start >= end && ev->hint_start < *hi)
			*hi = ev->hint_start;
	}
}

/* see fstate.h */
bool events_object_lost(struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->state != META_DIRTY)
		becomes_dirty(fs);
	if (!rs_contains(&fs->present, 0, fs->size)) {
		persist_later(fs);
		return false;
	}
	fstate_set_flag(fs, META_F_NEW, true, false);
	free(fs->origin);
	free(fs->version);
	fs->origin = fs->version = NULL;
	fs->vchanged = true;
	persist_later(fs);
	return true;
}

bool events_names_follow(void)
{
	return S.cfg.meta && S.cfg.track_new;
}

void fstate_set_flag(struct fstate *fs, uint32_t flag, bool on, bool claimed)
{
	ELOCK_HELD();
	if (!!(fs->flags & flag) == on)
		return;
	fs->flags = on ? fs->flags | flag : fs->flags & ~flag;
	/* answered now, committed with the writer's next batch */
	if (claimed)
		claim_flags(fs, flag, 0, 0, on ? SAVED_CLAIM_SETFLAG : SAVED_CLAIM_CLEARFLAG);
	persist_later(fs);
}

void fstate_archived(struct inode *in, struct fstate *fs, uint64_t blocks)
{
	ELOCK_HELD();
	assert(fs->state == META_DIRTY);
	fs_set(fs, META_RESIDENT);
	fs->blocks = blocks;
	cache_account((int64_t)fs->blocks);
	/*
	 * Its reads are counted from now on (tracked(), cache limits); one
	 * that began uncounted may be running on an open file: it is not
	 * evicted until its last close (track_pending).
	 */
	if (tracked(fs) && inode_is_open(in))
		fs->track_pending = true;
	else if (tracked(fs))
		inode_flags_set(in, INODE_TRACKED);
}

/* Set or clear a user's flag in in's state and persist it; -ENODATA if unmanaged. */
static int set_flag(struct inode *in, uint32_t flag, bool on)
{
	struct fstate *fs;
	int res = events_load(in);

	if (res)
		return res;
	elock();
	fs = inode_state(in);
	if (fs)
		fstate_set_flag(fs, flag, on, true);
	eunlock();
	return fs ? 0 : -ENODATA;
}

int events_pin(struct inode *in, bool pin)
{
	return set_flag(in, META_F_PINNED, pin);
}

void events_linked(struct inode *in, bool several)
{
	if (events_names_follow())
		(void)set_flag(in, META_F_LINKED, several);
}

int events_mark_stale(struct inode *in)
{
	return set_flag(in, META_F_STALE, true);
}

/* After present grew: update the state name and the read-path bit. */
void present_changed(struct fstate *fs)
{
	bool all = rs_contains(&fs->present, 0, fs->size);

	if (all)
		inode_flags_clear(fs->in, INODE_NONRESIDENT);
	if (fs->state == META_DIRTY)
		return;
	if (all && fs->sha256) {
		/* resident only once the writer checked the digest (writeback.c) */
		fs->unverified = true;
		fs_set(fs, META_PARTIAL);
		persist_later(fs);
	} else if (all) {
		fs_set(fs, META_RESIDENT);
	} else {
		fs_set(fs, fs->present.n ? META_PARTIAL : META_PLACEHOLDER);
	}
}

/*
 * Close fs's descriptor once nothing needs it: no event in flight and
 * the file not open (so a million partly read files hold none).
 * S.lock held.
 */
void drop_rw_fd(struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->rw_fd >= 0 && !fs->inflight && !inode_is_open(fs->in)) {
		close_unlocked(fs->rw_fd);
		fs->rw_fd = -1;
	}
}

/* Local data now, not cache: it stops counting.  S.lock held. */
void becomes_dirty(struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->state != META_DIRTY && fs->blocks) {
		cache_account(-(int64_t)fs->blocks);
		fs->blocks = 0;
	}
	fs->unverified = false; /* the user's bytes: no digest says what they are */
	fs->track_pending = false;
	fs_set(fs, META_DIRTY);
	inode_flags_clear(fs->in, INODE_TRACKED); /* never evicted now */
}

/*
 * The change, answered before the writer commits it: a claim in the
 * saved region for a daemon taking over (saved.h).  A full ring keeps
 * none (the change is then as safe as without a keeper).  S.lock held.
 */
void claim_flags(struct fstate *fs, uint64_t start, uint64_t end, uint64_t size,
		 uint32_t flags)
{
	struct saved_head *h = saved_head();
	struct saved_claim *c;

	ELOCK_HELD();
	if (!h || h->claims_head - h->claims_tail >= SAVED_CLAIMS)
		return;
	c = saved_claim(h->claims_head);
	*c = (struct saved_claim){ .ino = fs->ino, .start = start, .end = end, .size = size,
				   .batch = S.batch_taken + 1, /* the next batch taken holds it */
				   .node = (uint32_t)inode_nodeid(fs->in), .flags = flags };
	h->claims_head++;
}
