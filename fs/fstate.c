/* fstate.c - per-file range state: see fstate.h */
#include <assert.h>
#include <dirent.h>
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
#include "place.h"
#include "ranges.h"
#include "store.h"

static void fstate_take_row(struct fstate *fs, struct meta_file *f);
static int load_state(struct inode *in, bool cache_missing);

static void touched(struct fstate *fs);
static int set_flag(struct inode *in, uint32_t flag, bool on);
static void becomes_dirty(struct fstate *fs);
static void lost_track(struct fstate *fs, int err);
static bool copying_over(const struct fstate *fs, uint64_t start, uint64_t end);
static void change_unlink(struct events_change *c);

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

/*
 * The file's last open closed (closed) or it was opened: when, for the
 * timer's cancel of its reader's window (window_left, timer.c).
 * S.lock held.
 */
static void ahead_closed(struct fstate *fs, bool closed)
{
	ELOCK_HELD();
	fs->closed_at = closed ? mono_ms() : 0;
}

/* Record a use of fs for the eviction order.  S.lock held. */
static void touched(struct fstate *fs)
{
	ELOCK_HELD();
	fs->atime = now_ms();
	/* lazily: the order needs minutes, not every open (evict-policy.h) */
	if (fs->atime - fs->atime_saved >= EVICT_ATIME_LAZY_MS) {
		fs->atime_saved = fs->atime;
		persist_later(fs);
	}
}

void events_opened(struct inode *in)
{
	struct fstate *fs;
	int fd = -1;

	/* the descriptor fills commit through, opened here, not under S.lock */
	if (inode_flags(in) & INODE_NONRESIDENT)
		fd = open_store(in, O_RDWR);
	elock();
	fs = inode_state(in);
	if (fs) {
		evict_wait(fs); /* no read of a file being punched */
		touched(fs);
		ahead_closed(fs, false);
		if (fs->rw_fd < 0 && fd >= 0) {
			fs->rw_fd = fd;
			fd = -1;
		}
	}
	eunlock();
	if (fd >= 0)
		close(fd);
}

void events_released(struct inode *in)
{
	struct fstate *fs;
	bool over = false;

	elock();
	fs = inode_state(in);
	if (fs) {
		touched(fs);
		if (!inode_is_open(in) && fs->over) {
			fs->over = false;
			over = true;
		}
		if (!inode_is_open(in))
			ahead_closed(fs, true);
		if (!inode_is_open(in) && fs->track_pending) {
			fs->track_pending = false;
			if (tracked(fs))
				inode_flags_set(in, INODE_TRACKED);
		}
		drop_rw_fd(fs);
		archive_writeback(fs);
	}
	eunlock();
	if (over)
		cache_over_closed();
}

void archive_later(struct fstate *fs, int64_t due)
{
	ELOCK_HELD();
	/* an archiver looks at the queue every ARCH_LOOK_MS: woken only for sooner */
	bool soon;

	/* asked for (hsmfsctl archive, sync): a change meanwhile does not
	 * put it off to its archive_after */
	if (fs->awaiters && fs->arch == ARCH_QUEUED && fs->aq.due < due)
		due = fs->aq.due;
	soon = due < mono_ms() + ARCH_LOOK_MS;
	fs->aq.due = due;
	if (fs->arch == ARCH_RUNNING) {
		fs->arch_again = true;
		return;
	}
	if (fs->arch == ARCH_QUEUED) {
		due_heap_fix(&S.aqueue, &fs->aq);
		if (soon)
			pthread_cond_signal(&S.acond);
		return;
	}
	if (due_heap_add(&S.aqueue, &fs->aq)) {
		/* left dirty: a sync or the next change queues it */
		elog_err("out of memory: inode %llu is not queued for its archive",
			 (unsigned long long)fs->ino);
		return;
	}
	fs->arch = ARCH_QUEUED;
	inode_ref(fs->in); /* the queue's: archive.c releases it */
	if (soon)
		pthread_cond_signal(&S.acond);
}

bool take_wanted(uint64_t ino)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < S.ntakes; i++)
		if (S.takes[i].ino == ino)
			return true;
	return false;
}

void take_done(uint64_t ino)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < S.ntakes; i++)
		if (S.takes[i].ino == ino)
			S.takes[i].done = true;
}

void archive_names_wanted(void)
{
	elock();
	S.names_wanted = true;
	pthread_cond_broadcast(&S.ncond);
	eunlock();
}

void archive_writeback(struct fstate *fs)
{
	ELOCK_HELD();
	if (!S.cfg.writeback_on || fs->state != META_DIRTY || (fs->flags & META_F_CONFLICT) ||
	    S.stopping)
		return;
	archive_later(fs, mono_ms() + (int64_t)(S.cfg.writeback * 1000));
}

static void claim_flags(struct fstate *fs, uint64_t start, uint64_t end, uint64_t size,
			uint32_t flags);

/*
 * A file made on the mount whose inode still holds a removed file's
 * state: the store gave the removed file's inode number to the new one
 * (the removed file's inode outlived its name in the daemon's table).
 * That state is not this file's: a placeholder's would fetch the removed
 * file's bytes into it, a clean one's would keep it from ever being
 * archived.  It is set aside (queues may still hold it) until the engine
 * stops, and the inode loads anew.  S.lock held.
 */
static void retire_gone(struct inode *in)
{
	ELOCK_HELD();
	struct fstate *old = inode_state(in);

	if (!old || !old->gone)
		return;
	old->grave_next = S.graves;
	S.graves = old;
	inode_set_state(in, NULL);
	inode_flags_clear(in, INODE_STATEFUL | INODE_LOADED | INODE_NONRESIDENT | INODE_TRACKED |
			      INODE_QUIET);
}

void events_created(struct inode *in)
{
	struct fstate *fs;

	if (inode_is_dir(in))
		return;
	elock();
	retire_gone(in);
	eunlock();
	if (!S.cfg.track_new || !S.cfg.meta)
		return;
	fs = calloc(1, sizeof(*fs));
	if (!fs) {
		elog_err("out of memory: inode %llu made on the mount will not be archived",
			 (unsigned long long)inode_ino(in));
		return;
	}
	fs->rw_fd = -1;
	fs->ino = inode_ino(in);
	fs->in = in;
	fs->gen = place_new_gen();
	fs->state = META_DIRTY; /* a new record, not a step (fstate.h) */
	fs->flags = META_F_NEW;
	fs->newrow = true;
	fs->atime = fs->atime_saved = now_ms();
	elock();
	if (inode_state(in)) {
		/* a name of a file that has state already (a link) */
		eunlock();
		free(fs);
		return;
	}
	inode_set_state(in, fs);
	inode_flags_set(in, INODE_STATEFUL | INODE_LOADED);
	/* its row comes with the writer's next batch: a daemon taking over
	 * before that makes it again (events_replay_claims()) */
	claim_flags(fs, 0, 0, 0, SAVED_CLAIM_MADE);
	persist_later(fs);
	archive_writeback(fs);
	eunlock();
}

void events_made_again(struct inode *in)
{
	if (inode_is_dir(in) || !S.cfg.track_new || !S.cfg.meta || events_load(in) ||
	    inode_state(in))
		return;
	elog_debug("inode %llu: made by the last daemon, not recorded: made on the mount now",
		   (unsigned long long)inode_ino(in));
	events_created(in);
}

/* see fstate.h */
bool events_object_lost(struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->state != META_DIRTY)
		becomes_dirty(fs);
	if (!rs_contains(&fs->present, 0, fs->size)) {
		persist_later(fs);
		archive_writeback(fs);
		return false;
	}
	fs->flags |= META_F_NEW;
	free(fs->origin);
	free(fs->version);
	fs->origin = fs->version = NULL;
	fs->vchanged = true;
	persist_later(fs);
	archive_writeback(fs);
	return true;
}

/* The path of parent/name into buf (HSMFS_MAX_PATH + 1): 0, or -errno. */
static int path_of(struct inode *parent, const char *name, char *buf)
{
	int a = inode_path(parent, buf, HSMFS_MAX_PATH + 1);

	if (a < 0)
		return a;
	if (snprintf(buf + a, HSMFS_MAX_PATH + 1 - a, "%s%s", a ? "/" : "", name) >=
	    HSMFS_MAX_PATH + 1 - a)
		return -ENAMETOOLONG;
	return 0;
}

bool events_names_follow(void)
{
	return S.cfg.meta && S.cfg.track_new;
}

void events_dir_named(struct inode *parent, const char *name, uint32_t op)
{
	char path[HSMFS_MAX_PATH + 1];

	if (!events_names_follow() || path_of(parent, name, path))
		return;
	if (meta_op_add(S.cfg.meta, op, 0, path, NULL, NULL)) {
		elog_warn("cannot record that directory '%s' was %s, for the origin: %s", path,
			  op == META_OP_MKDIR ? "made" : "removed", meta_errmsg(S.cfg.meta));
		return;
	}
	archive_names_wanted();
}

#define SUBDIRS_MAX 4096 /* directories below a renamed one carried to the origin */

/*
 * The directories below the directory base (paths relative to it, each
 * parent before its children) into *ret: their number, at most
 * SUBDIRS_MAX.  Free each and the array.
 */
static size_t subdirs_of(int base, char ***ret)
{
	char **v = NULL;
	size_t n = 0;

	for (size_t at = 0;; at++) {
		const char *rel = at ? v[at - 1] : NULL; /* 0: base itself */
		int fd = openat(base, rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
							 O_CLOEXEC);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		struct dirent *de;

		if (!d && fd >= 0)
			close(fd);
		while (d && (de = readdir(d)) && n < SUBDIRS_MAX) {
			struct stat st;
			char **nv, *p;

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
			    (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
				continue;
			if (de->d_type == DT_UNKNOWN &&
			    (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
			     !S_ISDIR(st.st_mode)))
				continue;
			if (asprintf(&p, "%s%s%s", rel ? rel : "", rel ? "/" : "", de->d_name) < 0)
				break;
			nv = realloc(v, (n + 1) * sizeof(*v));
			if (!nv) {
				free(p);
				break;
			}
			v = nv;
			v[n++] = p;
		}
		if (d)
			closedir(d);
		if (at == n)
			break;
	}
	if (n == SUBDIRS_MAX)
		elog_warn("more than %d directories below a renamed one: those past them are "
			  "not made at the origin unless a file goes into them", SUBDIRS_MAX);
	*ret = v;
	return n;
}

/*
 * A directory renamed from -> to (in newparent as newname): its
 * directories follow at the origin, made under the new name before the
 * files move and removed under the old after them (deepest first, each
 * only if empty there).  before: the ops to add first, else last.  In
 * the caller's transaction.
 */
static int dir_renamed_ops(const char *from, const char *to, char **sub, size_t n, bool before)
{
	char path[HSMFS_MAX_PATH + 1];
	int res;

	if (before) {
		res = meta_op_add(S.cfg.meta, META_OP_MKDIR, 0, to, NULL, NULL);
		for (size_t i = 0; !res && i < n; i++)
			if (snprintf(path, sizeof(path), "%s/%s", to, sub[i]) < (int)sizeof(path))
				res = meta_op_add(S.cfg.meta, META_OP_MKDIR, 0, path, NULL, NULL);
		return res;
	}
	res = 0;
	for (size_t i = n; !res && i-- > 0;)
		if (snprintf(path, sizeof(path), "%s/%s", from, sub[i]) < (int)sizeof(path))
			res = meta_op_add(S.cfg.meta, META_OP_RMDIR, 0, path, NULL, NULL);
	return res ? res : meta_op_add(S.cfg.meta, META_OP_RMDIR, 0, from, NULL, NULL);
}

/*
 * The files below the directory to (its path, renamed just now) whose
 * upload is in flight: a new file's object is made under the old name,
 * and any file's record of its upload may not be in its row yet (the
 * rename's ops, from the rows, would miss it), so each is moved once its
 * upload ended (as a file renamed during its upload, archive.c), before
 * the old directory is removed at the origin.  Into inos and paths
 * (owned), at most max: how many.  Without S.lock.
 */
static size_t uploads_below(const char *to, uint64_t *inos, char **paths, size_t max)
{
	size_t n = 0, len = strlen(to);

	elock();
	for (unsigned i = 0; i < STATE_ARCHIVERS && n < max; i++) {
		struct fstate *fs = S.archiving[i];
		char path[HSMFS_MAX_PATH + 1];

		if (!fs || fs->arch != ARCH_RUNNING || fs->gone ||
		    inode_path(fs->in, path, sizeof(path)) <= (int)len ||
		    strncmp(path, to, len) || path[len] != '/' || !(paths[n] = strdup(path)))
			continue;
		inos[n++] = fs->ino;
	}
	eunlock();
	return n;
}

/*
 * The recorded paths at from (and below) go to to; on a mount that
 * archives, the origin's objects follow at the next archive of names.
 * newparent, newname: to's directory and name, for a directory (dir)
 * whose directories move too.  moved: the file moved (NULL: not known).
 */
static void paths_moved(const char *from, const char *to, bool dir, struct inode *moved,
			struct inode *newparent, const char *newname)
{
	char **sub = NULL;
	size_t nsub = 0;
	uint64_t uploading = 0; /* a file whose upload is in flight */
	/*
	 * a file's rename moves its own row only: a new file the writer
	 * inserted under the name a moment ago (renamed over this one's
	 * other name, as rsync saves) moved with it, and sync found it at
	 * neither name
	 */
	uint64_t file = !dir && moved ? inode_ino(moved) : 0;

	if (moved && !dir) {
		struct fstate *fs;

		elock();
		fs = inode_state(moved);
		/*
		 * any upload in flight: a first one's object is not in the row
		 * yet, nor is its record until the attempt ends (the rename's
		 * own op below would miss it); one of a file the row has an
		 * object for moves twice, the second time found done
		 */
		if (fs && fs->arch == ARCH_RUNNING)
			uploading = fs->ino;
		eunlock();
	}
	if (dir && events_names_follow()) {
		int pfd = inode_fd_get(newparent), dfd;

		dfd = pfd < 0 ? -1 : openat(pfd, newname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
							  O_CLOEXEC);
		if (pfd >= 0)
			inode_fd_put(newparent);
		if (dfd >= 0) {
			nsub = subdirs_of(dfd, &sub);
			close(dfd);
		}
	}
	if (S.cfg.track_new) {
		/* the origin's objects follow at the next archive of names */
		uint64_t up_ino[STATE_ARCHIVERS];
		char *up_path[STATE_ARCHIVERS];
		size_t nup = dir && events_names_follow() ?
				     uploads_below(to, up_ino, up_path, STATE_ARCHIVERS) : 0;
		int res = meta_begin(S.cfg.meta);

		if (!res && dir && events_names_follow())
			res = dir_renamed_ops(from, to, sub, nsub, true);
		if (!res)
			res = meta_op_renamed(S.cfg.meta, from, to, file);
		/*
		 * its object is made under the old name: moved once the upload
		 * ended (the namer waits for it, archive.c)
		 */
		if (!res && uploading)
			res = meta_op_add(S.cfg.meta, META_OP_RENAME, uploading, to, NULL, NULL);
		for (size_t i = 0; i < nup; i++) {
			if (!res)
				res = meta_op_add(S.cfg.meta, META_OP_RENAME, up_ino[i], up_path[i],
						  NULL, NULL);
			free(up_path[i]);
		}
		/*
		 * where first uploads of files under the old name may have made
		 * objects no row records: removed there after the moves above
		 * (one that landed and was recorded has moved by then), before
		 * the old directories go
		 */
		if (!res) {
			uint64_t busy[STATE_ARCHIVERS + 1];
			size_t nbusy = 0;

			for (size_t i = 0; i < nup; i++)
				busy[nbusy++] = up_ino[i];
			if (uploading)
				busy[nbusy++] = uploading;
			res = meta_landing_left(S.cfg.meta, from, busy, nbusy);
		}
		if (!res && dir && events_names_follow())
			res = dir_renamed_ops(from, to, sub, nsub, false);
		for (size_t i = 0; i < nsub; i++)
			free(sub[i]);
		free(sub);
		sub = NULL;
		nsub = 0;
		if (!res)
			res = meta_rename(S.cfg.meta, from, to, file);
		if (!res)
			res = meta_commit(S.cfg.meta);
		if (!res) {
			archive_names_wanted();
			return;
		}
		elog_warn("cannot record the rename of '%s' for the origin: %s", from,
			  meta_errmsg(S.cfg.meta));
		meta_rollback(S.cfg.meta);
	}
	if (meta_rename(S.cfg.meta, from, to, file))
		elog_warn("cannot record the rename of '%s': %s", from,
			 meta_errmsg(S.cfg.meta));
}

void events_renamed(struct inode *parent, const char *name,
		    struct inode *newparent, const char *newname, bool dir, struct inode *moved)
{
	char from[HSMFS_MAX_PATH + 1], to[HSMFS_MAX_PATH + 1];

	if (!S.cfg.meta)
		return;
	if (path_of(parent, name, from) || path_of(newparent, newname, to))
		return; /* the next open records the path */
	paths_moved(from, to, dir, moved, newparent, newname);
}

void events_name_left(struct inode *parent, const char *name, struct inode *in)
{
	char from[HSMFS_MAX_PATH + 1], to[HSMFS_MAX_PATH + 1];
	struct meta_file f;
	bool at;

	if (!S.cfg.meta || !in || inode_is_dir(in) || path_of(parent, name, from) ||
	    inode_path(in, to, sizeof(to)) <= 0 || !strcmp(from, to))
		return;
	if (meta_get(S.cfg.meta, inode_ino(in), &f))
		return; /* no row: nothing recorded at the name */
	at = f.path && !strcmp(f.path, from);
	meta_file_free(&f);
	if (at)
		paths_moved(from, to, false, in, NULL, NULL);
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
static void becomes_dirty(struct fstate *fs)
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
 * The user's bytes could not be counted present (no memory): a fill
 * must never be committed over them, so the file refuses fills from
 * now on (reads of what is missing fail) and its next fsync fails.
 * S.lock held.
 */
static void lost_track(struct fstate *fs, int err)
{
	ELOCK_HELD();
	elog_err("cannot record a change of inode %llu: %s; its missing ranges will not be filled",
		(unsigned long long)fs->ino, strerror(-err));
	fs->flags |= META_F_STALE;
	fs->sticky_err = -EIO;
}

/*
 * After a user's change of fs recorded its ranges (res: how that went):
 * the new size, dirty, the read-path bit, queued for the writer.
 * S.lock held.
 */
/*
 * The change, answered before the writer commits it: a claim in the
 * saved region for a daemon taking over (saved.h).  A full ring keeps
 * none (the change is then as safe as without a keeper).  S.lock held.
 */
static void claim_flags(struct fstate *fs, uint64_t start, uint64_t end, uint64_t size,
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

static void claim(struct fstate *fs, uint64_t start, uint64_t end, uint64_t size)
{
	claim_flags(fs, start, end, size, 0);
}

static void user_changed(struct fstate *fs, int res, uint64_t start, uint64_t end,
			 uint64_t size)
{
	ELOCK_HELD();
	claim(fs, start, end, size);
	if (res)
		lost_track(fs, res);
	fs->size = size;
	becomes_dirty(fs);
	if (rs_contains(&fs->present, 0, fs->size))
		inode_flags_clear(fs->in, INODE_NONRESIDENT);
	persist_later(fs);
	archive_writeback(fs);
}

/*
 * A change of in ended: its claim c goes.  Returns in's state with S.lock
 * held, or NULL (no state, no lock).
 */
static struct fstate *change_done(struct inode *in, struct events_change *c)
{
	struct fstate *fs = inode_state(in);

	if (!fs)
		return NULL;
	elock();
	if (c->fs)
		change_unlink(c);
	return fs;
}

void events_wrote(struct inode *in, struct events_change *c, uint64_t off, uint64_t len)
{
	struct fstate *fs = change_done(in, c);
	int res;

	if (!fs)
		return;
	if (!len) {
		eunlock();
		return;
	}
	/*
	 * Written past the end: the gap the store file grew is zeros of the
	 * user's, present like the written bytes (never fetched over).
	 */
	res = rs_add(&fs->present, off > fs->size ? fs->size : off, off + len);
	user_changed(fs, res, off > fs->size ? fs->size : off, off + len,
		     off + len > fs->size ? off + len : fs->size);
	eunlock();
}

unsigned events_replay_claims(void)
{
	struct saved_head *h = saved_head();
	uint64_t head = h->claims_head, i;
	unsigned n = 0;

	for (i = h->claims_tail; i < head; i++) {
		struct saved_claim c = *saved_claim(i);
		struct inode *in = inode_from_nodeid(c.node);
		struct fstate *fs;
		int res = 0;

		/* a node the kernel forgot before the crash is not found: lost */
		if (inode_ino(in) != c.ino || events_load(in))
			continue;
		if (c.flags & SAVED_CLAIM_MADE) {
			/* made on the mount, its row never committed: made again,
			 * unless removed since (open still: its orphan link) */
			if (!inode_state(in) && !inode_orphaned(in)) {
				events_created(in);
				n++;
			}
			continue;
		}
		if (!(fs = inode_state(in)))
			continue;
		if (c.flags & (SAVED_CLAIM_SETFLAG | SAVED_CLAIM_CLEARFLAG)) {
			/* a pin, an unpin, stale: set again, committed anew */
			elock();
			fs->flags = c.flags & SAVED_CLAIM_SETFLAG ? fs->flags | (uint32_t)c.start :
								  fs->flags & ~(uint32_t)c.start;
			claim_flags(fs, c.start, 0, 0, c.flags);
			persist_later(fs);
			eunlock();
			n++;
			continue;
		}
		elock();
		if (c.end > c.start)
			res = rs_add(&fs->present, c.start, c.end);
		if (!res && c.size < fs->size)
			res = rs_remove(&fs->present, c.size, UINT64_MAX);
		fs->nchanges++;
		user_changed(fs, res, c.start, c.end, c.size); /* claimed anew, after head */
		eunlock();
		n++;
	}
	elock();
	if (h->claims_tail < head)
		h->claims_tail = head; /* replayed: the new claims stand for them */
	eunlock();
	return n;
}

bool events_pass_begin(struct inode *in)
{
	struct fstate *fs = inode_state(in);
	bool ok;

	if (!fs) {
		inode_flags_set(in, INODE_PASSTHROUGH);
		return true;
	}
	/* under S.lock: evictable() and evict_begin() see the flag, or we
	 * see their eviction */
	elock();
	ok = !fs->evicting && !fs->inflight && !fs->changes && !fs->unverified &&
	     !(fs->flags & META_F_STALE) && rs_contains(&fs->present, 0, fs->size);
	if (ok)
		inode_flags_set(in, INODE_PASSTHROUGH);
	eunlock();
	return ok;
}

void events_unseen_writes(struct inode *in, uint64_t size, bool open)
{
	struct fstate *fs = inode_state(in);
	int res;

	if (!fs)
		return;
	elock();
	if (open)
		fs->unseen++;
	else if (fs->unseen)
		fs->unseen--;
	fs->nchanges++; /* a change the daemon never saw: no snapshot before it holds */
	if (size == UINT64_MAX)
		size = fs->size;
	/* every byte is the user's now: present, dirty, never fetched */
	res = rs_add(&fs->present, 0, size);
	if (!res && size < fs->size)
		res = rs_remove(&fs->present, size, UINT64_MAX);
	user_changed(fs, res, 0, size, size);
	eunlock();
}

void events_truncated(struct inode *in, struct events_change *c, uint64_t old_size,
		      uint64_t new_size)
{
	struct fstate *fs = change_done(in, c);
	int res;

	if (!fs)
		return;
	if (new_size < old_size)
		res = rs_remove(&fs->present, new_size, UINT64_MAX);
	else
		res = rs_add(&fs->present, old_size, new_size); /* zeros of our own */
	user_changed(fs, res, new_size < old_size ? 0 : old_size,
		     new_size < old_size ? 0 : new_size, new_size);
	eunlock();
}

void events_unlinked(struct inode *in, uint64_t ino, bool user)
{
	struct fstate *fs = in ? inode_state(in) : NULL;
	uint64_t cached = 0, counted = 0;
	char *morigin = NULL, *mversion = NULL; /* memory's object, ahead of the row */
	bool uploading = false;

	if (fs) {
		elock();
		/*
		 * Its upload in flight: the origin may have it when it ends,
		 * though the row says it never did (recorded below, and by the
		 * archiver then: archive.c)
		 */
		uploading = fs->arch == ARCH_RUNNING;
		if (fs->origin && !(fs->flags & META_F_NEW)) {
			morigin = strdup(fs->origin);
			mversion = fs->version ? strdup(fs->version) : NULL;
		}
		fs->gone = true;
		fs->newrow = false;
		/* what the cache counts of it is memory's: the row may lag */
		counted = fs->state == META_DIRTY ? 0 : fs->blocks;
		fs->blocks = 0;
		/* a batch holding its row is written first: then it is deleted */
		while (fs->wbatch > S.batch_done && S.writer_running)
			pthread_cond_wait(&S.wdone, &S.lock);
		eunlock();
	}

	if (S.cfg.meta && user && S.cfg.track_new) {
		/*
		 * Removed by its user: the origin's object goes too, at the next
		 * archive of names (archive.c), recorded with the row's removal
		 * in one transaction
		 */
		struct meta_file f;
		bool landed = false, removal = false; /* a removal of its object recorded */
		int res = meta_begin(S.cfg.meta);

		/*
		 * an upload in flight, or one never answered (meta.h: landings),
		 * may have made a version the row does not know: the removal is
		 * of whatever version is there
		 */
		if (!res)
			res = meta_landing_has(S.cfg.meta, ino, &landed);
		if (!res && !meta_get(S.cfg.meta, ino, &f)) {
			bool file = f.state < META_DIR_UNLISTED, any = uploading || landed;

			removal = file && (morigin || (f.origin && !(f.flags & META_F_NEW)));
			if (file && morigin)
				/* archived just now: the row may not say so yet */
				res = meta_op_add(S.cfg.meta, META_OP_DELETE, ino, f.path, morigin,
						  any ? NULL : mversion);
			else if (file && f.origin && !(f.flags & META_F_NEW))
				res = meta_op_add(S.cfg.meta, META_OP_DELETE, ino, f.path, f.origin,
						  any ? NULL : f.version);
			else if (file && uploading)
				/* held by the namer until the upload ends (archive.c) */
				res = meta_op_add(S.cfg.meta, META_OP_DELETE, ino, f.path, NULL, NULL);
			meta_file_free(&f);
		}
		/*
		 * an object a new file's upload may have made, not recorded: it
		 * goes too (one in flight: its archiver settles it, archive.c);
		 * a file with an object: the removal above, of any version, is
		 * that one's
		 */
		if (!res && removal)
			res = meta_landing_clear(S.cfg.meta, ino);
		else if (!res && !uploading)
			res = meta_landing_gone(S.cfg.meta, ino);
		/*
		 * its moves not applied yet go: its object is still where the
		 * removal above says, and its inode number may be a new
		 * file's soon (an op of that number would move that file's).
		 * But the first op of all, one of its moves, may have been
		 * asked and its answer never read (a crash, a hook killed):
		 * the object may be at that op's path, so it is removed there
		 * too, whatever its version (as an unanswered upload's)
		 */
		if (!res && removal) {
			struct meta_op head;

			if (!meta_op_first(S.cfg.meta, &head)) {
				if (head.kind == META_OP_RENAME && head.ino == ino && head.path)
					res = meta_op_add(S.cfg.meta, META_OP_UNLAND, ino, head.path,
							  NULL, NULL);
				meta_op_free(&head);
			}
		}
		if (!res)
			res = meta_op_drop_renames(S.cfg.meta, ino);
		if (!res)
			res = meta_delete(S.cfg.meta, ino, &cached);
		if (!res)
			res = meta_commit(S.cfg.meta);
		if (res) {
			elog_err("cannot record the removal of inode %llu: %s",
				 (unsigned long long)ino, meta_errmsg(S.cfg.meta));
			meta_rollback(S.cfg.meta);
			cached = 0;
			meta_delete(S.cfg.meta, ino, &cached);
		} else {
			archive_names_wanted();
		}
	} else if (S.cfg.meta && (meta_op_drop_renames(S.cfg.meta, ino) ||
				  meta_landing_clear(S.cfg.meta, ino) ||
				  meta_delete(S.cfg.meta, ino, &cached))) {
		elog_err("cannot forget the state of inode %llu: %s",
			(unsigned long long)ino, meta_errmsg(S.cfg.meta));
	}
	if (fs)
		cached = counted;
	if (cached)
		cache_account(-(int64_t)cached);
	free(morigin);
	free(mversion);
}

static bool copying_over(const struct fstate *fs, uint64_t start, uint64_t end)
{
	for (const struct event *ev = fs->inflight; ev; ev = ev->fnext)
		if (ev->st == EV_COPYING && ev->fill_start < end && start < ev->fill_end)
			return true;
	return false;
}

void events_change_begin(struct inode *in, struct events_change *c,
			 uint64_t start, uint64_t end)
{
	struct fstate *fs = inode_state(in);

	c->fs = NULL;
	if (!fs)
		return;
	c->start = start;
	c->end = end;
	elock();
	for (;;) {
		evict_wait(fs);
		/* a fill's bytes, then the file's time (times_kept), go first */
		if (!copying_over(fs, start, end) && !fs->restoring)
			break;
		pthread_cond_wait(&S.copied, &S.lock);
	}
	c->fs = fs;
	c->next = fs->changes;
	fs->changes = c;
	fs->nchanges++;
	eunlock();
}

/* Take c off its file's list.  S.lock held. */
static void change_unlink(struct events_change *c)
{
	ELOCK_HELD();
	struct events_change **pp;

	for (pp = &c->fs->changes; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	c->fs = NULL;
}

bool events_change_clean(const struct events_change *c, uint64_t start, uint64_t end)
{
	bool clean;

	if (!c->fs)
		return false;
	elock();
	clean = c->fs->state != META_DIRTY && end <= c->fs->size &&
		rs_contains(&c->fs->present, start, end);
	eunlock();
	return clean;
}

void events_change_end(struct inode *in, struct events_change *c)
{
	if (!c->fs)
		return;
	elock();
	change_unlink(c);
	eunlock();
}
