/*
 * events.c - see events.h
 *
 * The durability order (each step is a fault point of fault.h, so that
 * tests crash the daemon at each, t0320):
 *   1. The bytes of a range are in the store file and synced
 *      (fdatasync, write_batch: "data-synced") before the range is
 *      committed as present ("ranges-committed").  A fill's copy
 *      ("fill-copied") is visible to readers at once; it becomes durable
 *      only through 1.  A file whose store open or data sync fails is not
 *      committed; the error sticks to it until its next fsync reports it.
 *   2. An eviction's new state is committed ("evict-recorded") before
 *      the placeholder mark is set and the bytes are punched
 *      ("evict-punched"); memory changes only once the database has it.
 *      Without the mark there is no punch.
 *   3. Commits are durable when they return (SQLite WAL, synchronous=FULL).
 *   4. fsync/fdatasync through the mount return once a write-behind batch
 *      taken after the call committed the file (events_fsync).
 * So after a crash at any point a range is never present without its
 * bytes, and an acknowledged write is never lost.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cache.h"
#include "events.h"
#include "store.h"
#include "hooks.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "fault.h"
#include "ranges.h"

#define PAGE 4096ULL
#define SLOT_BITS 20 /* event id = sequence << SLOT_BITS | slot */
#define LAT_BUCKETS 256
#define RA_MAX (32ULL << 20) /* readahead of sequential misses, at most */
#define TICK_MS 100           /* the timer's period: expiries, resends */
#define RETRY_FAIL_MS 200     /* a failed range fails at once this long, for
			       * the same thread (the kernel's retry) */

/*
 * The engine's own result for an event that ran out of time.  Not
 * ETIMEDOUT: a hook may deny with ETIMEDOUT, which reaches the caller
 * as it is, while the engine's timeout reaches it as EIO.
 */
#define EV_TIMEOUT (-ETIME)

_Atomic uint32_t events_mask;

/* Per-file state of a file that has a metadata row. */
struct fstate {
	uint64_t ino;
	uint64_t size;
	uint32_t state;            /* enum meta_state */
	uint32_t flags;            /* META_F_* */
	char *origin;              /* owned, may be NULL */
	char *version;             /* owned, may be NULL */
	struct rangeset present;
	struct event *inflight;    /* PRE_ACCESS events of this file */
	bool queued;               /* on the writer's queue */
	struct inode *in;          /* back pointer (the inode owns us) */
	struct fstate *wnext;      /* writer queue link */
	uint64_t gen;              /* the row's generation (see meta.h) */
	uint64_t blocks;           /* allocated bytes counted in the cache */
	int64_t atime;             /* last open, close or fill (ms, realtime) */
	int64_t atime_saved;       /* atime as last queued for the database */
	uint64_t ra_lo;            /* readahead: where the stream's last miss began */
	uint64_t ra_ahead;         /* readahead: end of what was asked ahead */
	uint64_t ra_window;        /* readahead: bytes asked ahead of a miss */
	unsigned ra_run;           /* readahead: misses in the stream so far */
	unsigned nreading;         /* tracked reads between check and reply */
	uint64_t hot_lo, hot_hi;   /* the span the last miss and its readahead
				    * cover: kept when an open file is evicted */
	int rw_fd;                 /* O_RDWR store descriptor fills are
				    * committed through, or -1; kept while the
				    * file is open or has events (drop_rw_fd) */
	struct events_change *changes; /* user changes in flight */
	uint64_t nchanges;         /* user changes begun so far (times_kept) */
	int sticky_err;            /* a failed data sync, for the next fsync */
	bool evicting;             /* see evict_begin() */
	uint64_t to_lo, to_hi;     /* the hint of the last fill that failed, */
	int64_t to_at;             /*   when (monotonic ms), how many hooks had */
	uint64_t to_joins;         /*   joined then, for whom (thread id), and */
	pid_t to_pid;              /*   its result: see recently_failed() */
	int to_err;
};

enum ev_state { EV_FREE, EV_QUEUED, EV_SENT, EV_DONE };

/*
 * A read parked on an event instead of holding a FUSE worker thread
 * while a hook works (events_read()).  When the event ends, the thread
 * that ended it checks the read again: another missing range parks it
 * on the next event, else it is answered from that thread (cfg.reply).
 * From a fixed pool of max_pending; with none free, a read waits in its
 * worker thread as before.  Interrupts are seen by the timer.
 */
struct parked {
	struct fuse_req *req;       /* NULL: free */
	struct inode *in;           /* held with inode_ref */
	int fd;                     /* the open file's store descriptor */
	uint64_t off, len;          /* the read */
	int result;                 /* of the event it waited for */
	bool retried;               /* ENOSPC: evicted and tried once more */
	struct parked *next;        /* event's list, ready list, or free list */
};

struct event {
	uint64_t id;               /* 0 when free */
	uint32_t type;             /* HSMFS_EV_* */
	enum ev_state st;
	struct inode *in;          /* held with inode_ref */
	struct fstate *fs;         /* PRE_ACCESS: the file's state */
	uint64_t start, end;       /* required range */
	uint64_t hint_start, hint_end;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int stage_fd;              /* PRE_ACCESS: the staging file of the
				    * current delivery (owned), or -1 */
	struct hook *hook;         /* PRE_ACCESS: the fill hook it went to */
	struct hook *targets[HOOKS_MAX]; /* hooks yet to answer (all must allow);
					  * NULL: one that left, see orphans */
	bool unsent[HOOKS_MAX];    /* targets[i] could not take the event yet:
				    * it still must answer; the timer resends */
	unsigned ntargets;
	char (*orphans)[HSMFS_MAX_NAME + 1]; /* names of targets that left */
	unsigned norphans;
	bool filled;               /* PRE_ACCESS: the fill hook allowed
				    * [fill_start, fill_end); committed once
				    * every watcher allowed too */
	bool copying;              /* being committed, E.lock dropped: nobody
				    * but the committer completes it */
	uint64_t fill_start, fill_end;
	bool detached;             /* readahead: nobody started it to wait */
	int result;                /* 0 or -errno once EV_DONE */
	uint32_t waiters;          /* references: threads in wait_event() and
				    * parked reads; released at 0 once done */
	struct parked *parked;     /* reads parked on it */
	struct timespec deadline;  /* CLOCK_MONOTONIC */
	struct timespec born;      /* CLOCK_MONOTONIC, for the fill latency */
	uint64_t reserved;         /* PRE_ACCESS: cache bytes admitted */
	uint64_t progress;
	pthread_cond_t cond;       /* with E.lock */
	struct event *fnext;       /* fstate->inflight link */
	struct event *qnext;       /* E.queue link (EV_QUEUED, no hook) */
	struct event *free_next;
};

static struct {
	pthread_mutex_t lock;
	struct events_config cfg;
	struct event *slots;
	struct event *free_list;
	pthread_cond_t slot_cond;  /* a slot was freed */
	uint64_t seq;
	struct event *queue;       /* PRE_ACCESS events waiting for a fill hook */
	struct hook *hooks;
	struct hook *rr;           /* round-robin position among fill hooks */
	struct fstate *wqueue;     /* writer queue */
	pthread_cond_t wcond;
	pthread_cond_t wdone;      /* the writer finished a batch */
	pthread_cond_t reads_done; /* a file's tracked reads went to 0 */
	bool writing;              /* the writer holds a batch */
	bool urgent;               /* an fsync waits: no gathering */
	uint64_t batch_taken;      /* batches the writer took so far */
	uint64_t batch_done;       /* of which finished */
	uint64_t batch_failed;     /* the last batch that was not committed */
	pthread_cond_t copied;     /* a fill's commit finished copying */
	pthread_cond_t evicted;    /* an eviction ended (evict_end) */
	pthread_t timer;           /* expires events, resends, redispatches */
	pthread_cond_t tcond;      /* wakes the timer to stop */
	bool timer_running;
	uint64_t joins;            /* hooks that joined so far */
	struct parked *park_pool;  /* max_pending entries */
	struct parked *park_free;
	struct parked *ready;      /* parked reads whose event ended */
	bool write_failing;        /* the last batch could not be committed */
	pthread_t writer;
	bool writer_running, stopping;
	struct events_stats st;    /* counters, guarded by E.lock */
	uint64_t lat[LAT_BUCKETS]; /* fill latency histogram, see lat_bucket() */
} E = { .lock = PTHREAD_MUTEX_INITIALIZER };

/*
 * E.lock.  A function whose comment says "E.lock held" asserts it in
 * debug builds (ELOCK_HELD); the owner flag is per thread.  Lock order:
 * E.lock, then the inode table's, the cache's and meta's own locks; no
 * SQLite statement, open(2) of a file that may block, punch or
 * invalidation runs with it held but where a comment says why (the
 * reload's WAL read; the opens of start_fill/dispatch when no
 * descriptor was opened ahead at open(2)).
 */
static __thread bool elock_mine;

static void elock(void)
{
	pthread_mutex_lock(&E.lock);
	elock_mine = true;
}

static void eunlock(void)
{
	elock_mine = false;
	pthread_mutex_unlock(&E.lock);
}

#define ELOCK_HELD() assert(elock_mine)

/*
 * Latency histogram: 8 buckets per power of two of microseconds, so a
 * percentile is known within 9%; guarded by E.lock like the counters.
 */
static unsigned lat_bucket(uint64_t us)
{
	unsigned top, b;

	if (us < 8)
		return (unsigned)us;
	top = 63 - (unsigned)__builtin_clzll(us); /* >= 3 */
	b = (top - 2) * 8 + (unsigned)((us >> (top - 3)) & 7);
	return b < LAT_BUCKETS ? b : LAT_BUCKETS - 1;
}

static uint64_t lat_value(unsigned b)
{
	if (b < 8)
		return b;
	return (uint64_t)(8 + b % 8) << (b / 8 - 1);
}

static uint64_t lat_percentile(const uint64_t *h, uint64_t total, unsigned pct)
{
	uint64_t want = (total * pct + 99) / 100, seen = 0;

	if (!total)
		return 0;
	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		seen += h[b];
		if (seen >= want)
			return lat_value(b);
	}
	return lat_value(LAT_BUCKETS - 1);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Allocated bytes of the store file open at fd, or -1. */
static int64_t allocated(int fd)
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
static bool tracked(const struct fstate *fs)
{
	return E.cfg.cache_limited && fs->state != META_DIRTY;
}

static void fstate_free(void *p)
{
	struct fstate *fs = p;

	if (fs->rw_fd >= 0)
		close(fs->rw_fd);
	free(fs->origin);
	free(fs->version);
	rs_clear(&fs->present);
	free(fs);
}

static void mono_after(struct timespec *ts, double seconds)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)seconds;
	ts->tv_nsec += (long)((seconds - (time_t)seconds) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static bool mono_passed(const struct timespec *ts)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > ts->tv_sec ||
	       (now.tv_sec == ts->tv_sec && now.tv_nsec >= ts->tv_nsec);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *writer_main(void *arg);
static void *timer_main(void *arg);
static void drain_ready(void);
static void unpark_interrupted(struct event *ev);
static void complete(struct event *ev, int result);

int events_init(const struct events_config *cfg)
{
	pthread_condattr_t ca;
	unsigned i;

	E.cfg = *cfg;
	E.slots = calloc(cfg->max_pending, sizeof(*E.slots));
	if (!E.slots)
		return -ENOMEM;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	for (i = cfg->max_pending; i-- > 0;) {
		pthread_cond_init(&E.slots[i].cond, &ca);
		E.slots[i].stage_fd = -1;
		E.slots[i].free_next = E.free_list;
		E.free_list = &E.slots[i];
	}
	E.park_pool = calloc(cfg->max_pending, sizeof(*E.park_pool));
	if (!E.park_pool)
		return -ENOMEM;
	for (i = cfg->max_pending; i-- > 0;) {
		E.park_pool[i].next = E.park_free;
		E.park_free = &E.park_pool[i];
	}
	pthread_cond_init(&E.slot_cond, &ca);
	pthread_cond_init(&E.wcond, &ca);
	pthread_cond_init(&E.wdone, &ca);
	pthread_cond_init(&E.reads_done, &ca);
	pthread_cond_init(&E.copied, &ca);
	pthread_cond_init(&E.evicted, &ca);
	pthread_cond_init(&E.tcond, &ca);
	pthread_condattr_destroy(&ca);
	inode_set_state_destructor(fstate_free);
	if (pthread_create(&E.writer, NULL, writer_main, NULL))
		return -EAGAIN;
	E.writer_running = true;
	if (pthread_create(&E.timer, NULL, timer_main, NULL))
		return -EAGAIN;
	E.timer_running = true;
	return 0;
}

/* ------------------------------------------------------------ state */

/* Move a row's fields into fs (which takes ownership of its strings). */
static void fstate_take_row(struct fstate *fs, struct meta_file *f)
{
	fs->size = f->size;
	fs->state = f->state;
	fs->flags = f->flags;
	fs->origin = f->origin;
	fs->version = f->version;
	fs->present = f->present;
	fs->gen = f->gen;
	fs->blocks = f->blocks;
	fs->atime = fs->atime_saved = f->atime;
	free(f->sha256);
	free(f->path);
	memset(f, 0, sizeof(*f));
}

int events_load(struct inode *in)
{
	char path[HSMFS_MAX_PATH + 1];
	struct meta_file f;
	struct fstate *fs;
	int res;

	if (inode_flags(in) & INODE_LOADED)
		return 0;
	/*
	 * The database is read without the engine's lock (no SQLite under
	 * E.lock); two first opens may both read it, one installs.
	 */
	res = E.cfg.meta ? meta_get(E.cfg.meta, inode_ino(in), &f) : -ENOENT;
	if (res && res != -ENOENT) {
		log_err("cannot read the state of inode %llu: %s",
			(unsigned long long)inode_ino(in), meta_errmsg(E.cfg.meta));
		return -EIO;
	}
	/* keep the recorded path true: the evictor finds files by it */
	if (!res && inode_path(in, path, sizeof(path)) > 0 && (!f.path || strcmp(f.path, path)))
		meta_set_path(E.cfg.meta, f.ino, path);
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
		inode_flags_set(in, INODE_LOADED);
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

static void persist_later(struct fstate *fs);
static void drop_rw_fd(struct fstate *fs);

int events_reload(struct inode *in)
{
	struct meta_file f;
	struct fstate *fs;
	uint64_t old_blocks;
	int res;

	elock();
	fs = inode_state(in);
	if (!fs) {
		inode_flags_clear(in, INODE_LOADED);
		eunlock();
		return events_load(in);
	}
	if (fs->inflight || fs->evicting) {
		eunlock();
		return -EBUSY;
	}
	res = meta_get(E.cfg.meta, fs->ino, &f);
	old_blocks = fs->state == META_DIRTY ? 0 : fs->blocks;
	if (res == -ENOENT) {
		/* no row any more: a plain resident file */
		cache_account(-(int64_t)old_blocks);
		fs->blocks = 0;
		rs_clear(&fs->present);
		res = rs_add(&fs->present, 0, fs->size);
		fs->state = META_RESIDENT;
		fs->flags = 0;
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
static int open_store(struct inode *in, int flags)
{
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

/*
 * A staging file for one delivery of a fill event: an unnamed file in
 * STORE/.hsmfs of the file's size, which the hook writes at the file's
 * own offsets.  Only what the hook then allows is copied into the store
 * file (commit_fill), and only where no user change claimed the bytes;
 * a hook writing after its event ended writes into a file nobody reads,
 * and a hook of an older mount can never reach this mount's files.
 * Returns the descriptor or -errno.
 */
static int open_stage(uint64_t size)
{
	static unsigned long seq;
	int fd = openat(E.cfg.state_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		char name[64];

		/* no O_TMPFILE on this filesystem: a name, removed at once */
		snprintf(name, sizeof(name), "stage.%d.%lu", (int)getpid(), ++seq);
		fd = openat(E.cfg.state_fd, name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0)
			unlinkat(E.cfg.state_fd, name, 0);
	}
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int res = -errno;

		close(fd);
		return res;
	}
	return fd;
}

#define COPY_PIECE (256u << 10)

/*
 * Copy [start, end) from the staging file to the store file at the same
 * offsets, freeing the staging blocks as it goes (a full store needs no
 * more room than the fill itself).  *ret_done gets the end of what was
 * copied.  0 or -errno.
 */
static int copy_stage(int from, int to, uint64_t start, uint64_t end, uint64_t *ret_done)
{
	uint64_t pos = start;
	char *buf = NULL;
	int res = 0;

	while (pos < end) {
		size_t want = end - pos > COPY_PIECE ? COPY_PIECE : (size_t)(end - pos);
		loff_t in = (loff_t)pos, out = (loff_t)pos;
		ssize_t n = buf ? -1 : copy_file_range(from, &in, to, &out, want, 0);

		if (n < 0 && (buf || errno == EXDEV || errno == EOPNOTSUPP ||
			      errno == ENOSYS || errno == EINVAL)) {
			/* no in-kernel copy here: through a buffer */
			if (!buf && !(buf = malloc(COPY_PIECE))) {
				res = -ENOMEM;
				break;
			}
			n = pread(from, buf, want, (off_t)pos);
			if (n > 0)
				n = pwrite(to, buf, (size_t)n, (off_t)pos);
		}
		if (n < 0) {
			res = -errno;
			break;
		}
		if (n == 0) {
			res = -EIO; /* the staging file is shorter than the file */
			break;
		}
		fallocate(from, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)pos, n);
		pos += (uint64_t)n;
	}
	free(buf);
	*ret_done = pos;
	return res;
}

/*
 * Times are final: a fill's copy or an eviction's punch changes the
 * store file's mtime, which the mount shows.  Put back what it was
 * (before), unless a user change began meanwhile (then its own time is
 * the right one).  E.lock held (the change count is read under it).
 */
static void times_kept(const struct fstate *fs, int fd, const struct stat *before,
		       uint64_t nchanges)
{
	ELOCK_HELD();
	struct timespec tv[2] = { { 0, UTIME_OMIT }, before->st_mtim };

	if (fs->nchanges == nchanges && !fs->changes)
		futimens(fd, tv);
}

/* Is a fill being copied into [start, end) of fs now?  E.lock held. */
static bool copying_over(const struct fstate *fs, uint64_t start, uint64_t end);
static void evict_wait(const struct fstate *fs);

/* The event of fs whose hint overlaps [start, end), or NULL.  E.lock held. */
static struct event *inflight_over(const struct fstate *fs, uint64_t start, uint64_t end)
{
	ELOCK_HELD();
	struct event *ev;

	for (ev = fs->inflight; ev; ev = ev->fnext)
		if (ev->hint_start < end && start < ev->hint_end)
			break;
	return ev;
}

/*
 * Can fs lose ranges now?  0 or -EBUSY: dirty, pinned, being filled.
 * Whether it is open is the caller's question.  E.lock held.
 */
static int evictable(const struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->state == META_DIRTY || (fs->flags & META_F_PINNED) || fs->inflight ||
	    fs->changes || fs->evicting)
		return -EBUSY;
	return 0;
}

/*
 * Eviction holds the file, not the engine.  evict_begin() marks fs
 * evicting (under E.lock); until evict_end(), reads of its missing
 * ranges, opens and user changes of it wait (E.evicted), so nothing
 * reads a range as it is punched and no fill or write lands in it.
 * The database, the mark and the punch run with E.lock dropped.
 */
static void evict_begin(struct fstate *fs)
{
	fs->evicting = true;
}

static void evict_end(struct fstate *fs)
{
	fs->evicting = false;
	pthread_cond_broadcast(&E.evicted);
}

/* Wait until fs is not being evicted.  E.lock held. */
static void evict_wait(const struct fstate *fs)
{
	ELOCK_HELD();
	while (fs->evicting)
		pthread_cond_wait(&E.evicted, &E.lock);
}

/*
 * Drop [start, end) of fs, which the caller marked evicting: the
 * database, the memory, the mark, then the bytes (the durability order,
 * step 2).  *ret_freed gets the allocated bytes released.  Called with
 * E.lock held; drops it while it works.
 */
static int evict_range(struct inode *in, struct fstate *fs, uint64_t start,
		       uint64_t end, uint64_t *ret_freed)
{
	ELOCK_HELD();
	struct rangeset want = RANGESET_INIT;
	struct meta_file row;
	struct range gap;
	char *mark = NULL;
	uint64_t gen;
	int res, sfd, n;
	bool none, got_row;
	int64_t now;

	assert(fs->evicting);
	*ret_freed = 0;
	if (!end || end > fs->size)
		end = fs->size;
	if (start >= end)
		return 0;
	/*
	 * Nothing of it present (evicted before, the database not yet told
	 * how many blocks are left): no record to change, no mark to set;
	 * only bytes a failed fill left behind, if any, to punch.
	 */
	none = rs_missing(&fs->present, start, end, &gap, 1) == 1 &&
	       gap.start == start && gap.end == end;
	res = none ? 0 : rs_copy(&want, &fs->present);
	if (!res && !none)
		res = rs_remove(&want, start, end);
	gen = fs->gen + 1;
	n = asprintf(&mark, "%s\n%s", fs->origin ? fs->origin : "",
		     fs->version ? fs->version : "");
	if (n < 0) {
		mark = NULL;
		res = res ? res : -ENOMEM;
	}
	eunlock();
	sfd = res ? res : open_store(in, O_RDWR);
	/*
	 * 1. forget the range in the database, durably: after a crash it is
	 * fetched again.  A new generation, so a write-behind snapshot taken
	 * before this cannot mark the range present again.
	 */
	res = sfd < 0 ? sfd : none ? 0 : meta_get(E.cfg.meta, fs->ino, &row);
	got_row = sfd >= 0 && !none && !res;
	if (got_row) {
		rs_clear(&row.present);
		row.present = want; /* row takes it */
		want = (struct rangeset)RANGESET_INIT;
		row.state = row.present.n ? META_PARTIAL : META_PLACEHOLDER;
		row.gen = gen;
		res = meta_put(E.cfg.meta, &row);
		if (!res)
			fault_point(FAULT_EVICT_RECORDED);
	}
	elock();
	if (got_row && !res) {
		/* memory changes only once the database has it */
		struct rangeset old = fs->present;

		fs->present = row.present;
		row.present = old; /* freed with row */
		fs->state = row.state;
		fs->gen = row.gen;
		inode_flags_set(in, INODE_NONRESIDENT);
	}
	if (got_row)
		meta_file_free(&row);
	rs_clear(&want);
	if (res) {
		/* a full filesystem is the evictor's to say, once a round */
		if (res != -ENOSPC)
			log_err("cannot record the eviction of inode %llu: %s",
				(unsigned long long)fs->ino,
				sfd < 0 ? strerror(-sfd) : meta_errmsg(E.cfg.meta));
		if (sfd >= 0)
			close(sfd);
		free(mark);
		return res;
	}
	E.st.evictions_started++;
	eunlock();
	/* 2. the mark, so that a lost database never makes these zeros */
	if (!none && fsetxattr(sfd, STORE_MARKER_XATTR, mark, (size_t)n, 0) < 0) {
		/* without it a lost database would make the holes zeros: keep the bytes */
		res = -errno;
		log_warn("cannot mark inode %llu as a placeholder: %s; not evicted",
			 (unsigned long long)fs->ino, strerror(errno));
	}
	/* 3. only now the bytes go (the file's times stay) */
	if (!res) {
		struct stat before;
		bool have_before = fstat(sfd, &before) == 0;

		if (fallocate(sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start,
			      end - start) < 0) {
			res = -errno;
		} else {
			struct timespec tv[2] = { { 0, UTIME_OMIT }, before.st_mtim };

			fault_point(FAULT_EVICT_PUNCHED);
			/* no user change runs while it is evicting: the time is the file's */
			if (have_before)
				futimens(sfd, tv);
		}
	}
	now = allocated(sfd);
	close(sfd);
	free(mark);
	elock();
	E.st.evictions_done++;
	if (now >= 0) {
		if ((uint64_t)now < fs->blocks)
			*ret_freed = fs->blocks - (uint64_t)now;
		cache_account(now - (int64_t)fs->blocks);
		fs->blocks = (uint64_t)now;
		persist_later(fs);
	}
	return res;
}

int events_evict(struct inode *in, uint64_t start, uint64_t end, bool is_open)
{
	struct fstate *fs;
	uint64_t freed;
	int res = events_load(in);

	if (res)
		return res;
	elock();
	fs = inode_state(in);
	if (!fs || !E.cfg.meta)
		res = -ENODATA;
	else
		res = is_open ? -EBUSY : evictable(fs);
	if (!res) {
		evict_begin(fs);
		res = evict_range(in, fs, start, end, &freed);
		evict_end(fs);
	}
	eunlock();
	return res;
}

int events_evict_victim(const struct meta_victim *v, bool in_order, uint64_t *ret_freed)
{
	struct inode *cur = inode_root(), *next;
	struct fstate *fs;
	struct stat st;
	char *copy, *comp, *save = NULL;
	int res = 0;

	*ret_freed = 0;
	copy = strdup(v->path);
	if (!copy)
		return -ENOMEM;
	/* component by component, as the kernel would: no symlink followed */
	for (comp = strtok_r(copy, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
		if (!inode_is_dir(cur) || !strcmp(comp, ".") || !strcmp(comp, "..")) {
			res = -ESTALE;
			break;
		}
		res = inode_lookup(cur, comp, &st, &next);
		if (cur != inode_root())
			inode_forget(cur, 1); /* next's alias keeps it alive */
		cur = inode_root();
		if (res)
			break;
		cur = next;
	}
	free(copy);
	if (!res && (cur == inode_root() || st.st_ino != v->ino || !S_ISREG(st.st_mode)))
		res = -ESTALE;
	if (res == -ESTALE || res == -ENOENT || res == -ENOTDIR) {
		/* not there any more: the next open records where it went */
		meta_set_path(E.cfg.meta, v->ino, NULL);
		res = -ESTALE;
	}
	if (!res)
		res = events_load(cur);
	if (!res) {
		elock();
		bool open = inode_is_open(cur);

		fs = inode_state(cur);
		res = fs ? evictable(fs) : -ENODATA;
		/*
		 * An open file only where its reads are tracked and none runs,
		 * and not the span its reader is at (see tracked()).
		 */
		if (!res && open && !tracked(fs))
			res = -EBUSY;
		if (!res && open && fs->nreading) {
			/* replies being sent take microseconds: wait for them */
			struct timespec until;

			mono_after(&until, 0.1);
			while (fs->nreading && !mono_passed(&until))
				pthread_cond_timedwait(&E.reads_done, &E.lock, &until);
			res = fs->nreading ? -EBUSY : evictable(fs);
			if (!res && !tracked(fs))
				res = -EBUSY;
		}
		/* used since the database said otherwise: not the least recent */
		if (!res && !open && in_order && fs->atime > v->atime + 1000) {
			fs->atime_saved = fs->atime;
			persist_later(fs);
			res = -EAGAIN;
		}
		if (!res && open) {
			uint64_t a = 0, b = 0, lo = fs->hot_lo, hi = fs->hot_hi, size = fs->size;

			evict_begin(fs);
			if (lo)
				res = evict_range(cur, fs, 0, lo, &a);
			if (!res && hi && hi < size)
				res = evict_range(cur, fs, hi, size, &b);
			evict_end(fs);
			*ret_freed = a + b;
			/*
			 * The kernel's cache of it stays: its pages hold the right
			 * bytes, and an invalidation could wait on a page a read
			 * of this open file holds while that read waits for room.
			 */
		} else if (!res) {
			evict_begin(fs);
			res = evict_range(cur, fs, 0, 0, ret_freed);
			/*
			 * Still evicting: the file is not open and cannot be opened
			 * meanwhile (events_opened waits for evict_end), so no read
			 * of it holds a page the invalidation must wait for.
			 */
			if (!res && E.cfg.invalidate) {
				eunlock();
				E.cfg.invalidate(cur, 0, 0);
				elock();
			}
			evict_end(fs);
		}
		eunlock();
	}
	if (cur != inode_root())
		inode_forget(cur, 1);
	return res;
}

/* Record a use of fs for the eviction order.  E.lock held. */
static void touched(struct fstate *fs)
{
	ELOCK_HELD();
	fs->atime = now_ms();
	/* lazily: the order needs minutes, not every open (see evict_victim) */
	if (fs->atime - fs->atime_saved >= 60000) {
		fs->atime_saved = fs->atime;
		persist_later(fs);
	}
}

void events_opened(struct inode *in)
{
	struct fstate *fs;
	int fd = -1;

	/* the descriptor fills commit through, opened here, not under E.lock */
	if (inode_flags(in) & INODE_NONRESIDENT)
		fd = open_store(in, O_RDWR);
	elock();
	fs = inode_state(in);
	if (fs) {
		evict_wait(fs); /* no read of a file being punched */
		touched(fs);
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

	elock();
	fs = inode_state(in);
	if (fs) {
		touched(fs);
		drop_rw_fd(fs);
	}
	eunlock();
}

void events_renamed(struct inode *parent, const char *name,
		    struct inode *newparent, const char *newname)
{
	char from[HSMFS_MAX_PATH + 1], to[HSMFS_MAX_PATH + 1];
	int a, b;

	if (!E.cfg.meta)
		return;
	a = inode_path(parent, from, sizeof(from));
	b = inode_path(newparent, to, sizeof(to));
	if (a < 0 || b < 0 ||
	    snprintf(from + a, sizeof(from) - a, "%s%s", a ? "/" : "", name) >= (int)sizeof(from) - a ||
	    snprintf(to + b, sizeof(to) - b, "%s%s", b ? "/" : "", newname) >= (int)sizeof(to) - b)
		return; /* the next open records the path */
	if (meta_rename(E.cfg.meta, from, to))
		log_warn("cannot record the rename of '%s': %s", from,
			 meta_errmsg(E.cfg.meta));
}

void events_get_stats(struct events_stats *ret)
{
	uint64_t total = 0;

	elock();
	*ret = E.st;
	for (unsigned b = 0; b < LAT_BUCKETS; b++)
		total += E.lat[b];
	ret->fill_p50_us = lat_percentile(E.lat, total, 50);
	ret->fill_p90_us = lat_percentile(E.lat, total, 90);
	ret->fill_p99_us = lat_percentile(E.lat, total, 99);
	eunlock();
}

/* Set or clear flag in in's state and persist it; -ENODATA if unmanaged. */
static int set_flag(struct inode *in, uint32_t flag, bool on)
{
	struct fstate *fs;
	int res = events_load(in);

	if (res)
		return res;
	elock();
	fs = inode_state(in);
	if (fs && !!(fs->flags & flag) != on) {
		fs->flags = on ? fs->flags | flag : fs->flags & ~flag;
		persist_later(fs);
	}
	eunlock();
	return fs ? 0 : -ENODATA;
}

int events_pin(struct inode *in, bool pin)
{
	return set_flag(in, META_F_PINNED, pin);
}

int events_mark_stale(struct inode *in)
{
	return set_flag(in, META_F_STALE, true);
}

/* Queue fs for the writer.  E.lock held. */
static void persist_later(struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->queued)
		return;
	fs->queued = true;
	inode_ref(fs->in);
	fs->wnext = E.wqueue;
	E.wqueue = fs;
	pthread_cond_signal(&E.wcond);
}

/* After present grew: update the state name and the read-path bit. */
static void present_changed(struct fstate *fs)
{
	bool all = rs_contains(&fs->present, 0, fs->size);

	if (all)
		inode_flags_clear(fs->in, INODE_NONRESIDENT);
	if (fs->state == META_DIRTY)
		return;
	if (all) {
		fs->state = META_RESIDENT;
	} else {
		fs->state = fs->present.n ? META_PARTIAL : META_PLACEHOLDER;
	}
}

/* What the writer commits of one file, taken under E.lock. */
struct snap {
	struct fstate *fs;
	struct inode *in;   /* held since persist_later() */
	uint64_t ino;       /* 0: not to be committed */
	uint32_t state, flags;
	uint64_t size, gen, blocks;
	int64_t atime;
	struct rangeset rs;
};

/* One transaction for snaps[0..n).  0 or -errno, why gets the message. */
static int commit_snaps(const struct snap *snaps, size_t n, char *why, size_t whysize)
{
	int res = meta_begin(E.cfg.meta);
	size_t i;

	for (i = 0; i < n && !res; i++) {
		const struct snap *sn = &snaps[i];

		if (sn->ino)
			res = meta_set_present(E.cfg.meta, sn->ino, &sn->rs, sn->state,
					       sn->flags, sn->size, sn->gen, sn->atime,
					       sn->blocks);
		/* the row went, or a newer generation is there */
		if (res == -ENOENT)
			res = 0;
	}
	if (!res)
		res = meta_commit(E.cfg.meta);
	if (res) {
		snprintf(why, whysize, "%s", meta_errmsg(E.cfg.meta));
		meta_rollback(E.cfg.meta);
	}
	return res;
}

/*
 * The writer: snapshot ranges, make the data durable, then commit the
 * snapshot.  Taking the snapshot first is what makes it safe: every
 * range in it was written before the fdatasync() that follows.
 */
static bool write_batch(struct fstate *batch)
{
	struct snap *snaps;
	struct fstate *fs, *next;
	size_t n = 0, i;

	/* still queued: nobody else touches wnext until queued is cleared */
	for (fs = batch; fs; fs = fs->wnext)
		n++;
	snaps = calloc(n, sizeof(*snaps));
	elock();
	if (!snaps) {
		/* try again with the next batch */
		for (fs = batch; fs; fs = next) {
			next = fs->wnext;
			fs->wnext = E.wqueue;
			E.wqueue = fs;
		}
		eunlock();
		log_err("out of memory writing present ranges, retrying");
		return false;
	}
	for (fs = batch, i = 0; fs; fs = next, i++) {
		next = fs->wnext;
		snaps[i].fs = fs;
		snaps[i].in = fs->in;
		snaps[i].ino = fs->ino;
		snaps[i].state = fs->state;
		snaps[i].flags = fs->flags;
		snaps[i].size = fs->size;
		snaps[i].gen = fs->gen;
		snaps[i].blocks = fs->blocks;
		snaps[i].atime = fs->atime;
		if (rs_copy(&snaps[i].rs, &fs->present))
			snaps[i].ino = 0; /* skipped: retried on the next change */
		fs->queued = false; /* from here on persist_later may queue it again */
	}
	eunlock();

	/*
	 * Durability order, step 1: the data of every range in a snapshot
	 * is synced before the snapshot is committed.  A file whose store
	 * file cannot be opened or synced is not committed at all (its
	 * ranges would claim bytes that may not be on disk); the error
	 * sticks to the file until an fsync reports it.
	 */
	bool failed = false;

	for (i = 0; i < n; i++) {
		int dfd, err = 0;

		if (!snaps[i].ino)
			continue;
		dfd = open_store(snaps[i].in, O_RDONLY);
		if (dfd < 0)
			err = dfd;
		else if (fault_hit(FAULT_DATASYNC) || fdatasync(dfd) < 0)
			err = errno ? -errno : -EIO;
		if (dfd >= 0)
			close(dfd);
		if (err == -ENOENT || err == -ESTALE) {
			snaps[i].ino = 0; /* gone from the store: nothing to record */
		} else if (err) {
			log_err("cannot sync the data of inode %llu: %s; its ranges are not committed",
				(unsigned long long)snaps[i].ino, strerror(-err));
			snaps[i].ino = 0;
			elock();
			snaps[i].fs->sticky_err = -EIO;
			eunlock();
		}
	}
	fault_point(FAULT_CRASH_BEFORE_COMMIT);
	if (E.cfg.meta) {
		char why[256];

		failed = commit_snaps(snaps, n, why, sizeof(why)) != 0;
		if (!failed)
			fault_point(FAULT_CRASH_AFTER_COMMIT);

		/*
		 * Not written (a full filesystem, most likely): queue the files
		 * again, their state then as new as it gets, and retry a second
		 * later; once stopping, the loss is only of ranges to refetch.
		 */
		elock();
		if (failed && (!E.write_failing || E.stopping))
			log_err("cannot commit present ranges: %s%s", why,
				E.stopping ? "; their bytes will be fetched again" :
					     "; retrying every second");
		else if (!failed && E.write_failing)
			log_info("present ranges committed again");
		E.write_failing = failed;
		for (i = 0; failed && !E.stopping && i < n; i++)
			if (snaps[i].ino)
				persist_later(snaps[i].fs);
		eunlock();
	}
	for (i = 0; i < n; i++) {
		struct snap *sn = &snaps[i];

		/* fully present: the store file no longer needs its mark */
		if (sn->ino && sn->rs.n == 1 && sn->rs.v[0].start == 0 &&
		    sn->rs.v[0].end >= sn->size) {
			char path[32];
			int fd = inode_fd_get(sn->in);

			if (fd >= 0) {
				inode_proc_path(fd, path);
				removexattr(path, STORE_MARKER_XATTR);
				inode_fd_put(sn->in);
			}
		}
		rs_clear(&sn->rs);
		inode_release(sn->in);
	}
	free(snaps);
	return !failed;
}

static void *writer_main(void *arg)
{
	struct fstate *batch;
	struct timespec ts;
	uint64_t seq;
	bool ok;

	elock();
	for (;;) {
		while (!E.wqueue && !E.stopping)
			pthread_cond_wait(&E.wcond, &E.lock);
		if (!E.wqueue && E.stopping)
			break;
		/* gather for a moment: one transaction for many fills */
		if (!E.stopping && !E.urgent) {
			mono_after(&ts, 0.05);
			pthread_cond_timedwait(&E.wcond, &E.lock, &ts);
		}
		batch = E.wqueue;
		E.wqueue = NULL;
		E.writing = true;
		E.urgent = false;
		seq = ++E.batch_taken;
		eunlock();
		ok = write_batch(batch);
		elock();
		E.writing = false;
		E.batch_done = seq;
		if (!ok)
			E.batch_failed = seq;
		pthread_cond_broadcast(&E.wdone);
		if (E.write_failing) {
			mono_after(&ts, 1);
			while (!E.stopping && !mono_passed(&ts))
				pthread_cond_timedwait(&E.wcond, &E.lock, &ts);
		}
	}
	eunlock();
	return NULL;
}

void events_sync(void)
{
	struct timespec deadline;

	mono_after(&deadline, 5);
	elock();
	while ((E.wqueue || E.writing) && E.writer_running && !E.stopping &&
	       !E.write_failing &&
	       pthread_cond_timedwait(&E.wdone, &E.lock, &deadline) != ETIMEDOUT)
		;
	eunlock();
}

int events_fsync(struct inode *in)
{
	struct fstate *fs = inode_state(in);
	uint64_t ticket;
	int res;

	if (!fs || !E.cfg.meta)
		return 0;
	elock();
	/*
	 * Durability order, step 4: the batch taken after this point holds
	 * fs as it is now (persist_later queues it, or it is queued
	 * already); the caller's fsync returns once that batch committed.
	 */
	persist_later(fs);
	ticket = E.batch_taken + 1;
	E.urgent = true;
	pthread_cond_signal(&E.wcond);
	while (E.batch_done < ticket && E.writer_running && !E.stopping)
		pthread_cond_wait(&E.wdone, &E.lock);
	res = E.batch_done < ticket || E.batch_failed >= ticket ? -EIO : 0;
	if (fs->sticky_err) {
		res = fs->sticky_err;
		fs->sticky_err = 0;
	}
	eunlock();
	return res;
}

void events_shutdown(void)
{
	elock();
	/* nobody will answer now: pending events fail, parked reads get EIO */
	for (unsigned i = 0; E.slots && i < E.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		if ((ev->st == EV_SENT || ev->st == EV_QUEUED) && !ev->copying)
			complete(ev, -EIO);
	}
	eunlock();
	drain_ready();
	elock();
	E.stopping = true;
	pthread_cond_signal(&E.wcond);
	pthread_cond_signal(&E.tcond);
	eunlock();
	if (E.timer_running) {
		pthread_join(E.timer, NULL);
		E.timer_running = false;
	}
	if (E.writer_running) {
		pthread_join(E.writer, NULL);
		E.writer_running = false;
	}
}

/* ----------------------------------------------------------- engine */

static bool in_subtree(const struct hook *h, struct inode *in)
{
	char path[HSMFS_MAX_PATH + 1];
	size_t n = strlen(h->subtree);

	if (!n)
		return true;
	if (inode_path(in, path, sizeof(path)) < 0)
		return false;
	return !strncmp(path, h->subtree, n) && (path[n] == '/' || !path[n]);
}

static void recompute_mask(void)
{
	uint32_t m = 0;
	struct hook *h;

	for (h = E.hooks; h; h = h->next)
		m |= h->mask;
	atomic_store_explicit(&events_mask, m, memory_order_relaxed);
}

static void fill_proto(const struct event *ev, struct proto_event *pe,
		       char *path, size_t pathsize)
{
	int n = inode_path(ev->in, path, pathsize);
	const struct fstate *fs;

	memset(pe, 0, sizeof(*pe));
	pe->id = ev->id;
	pe->type = ev->type;
	pe->pid = ev->pid;
	pe->uid = ev->uid;
	pe->gid = ev->gid;
	pe->file_id = inode_ino(ev->in);
	pe->start = ev->start;
	pe->end = ev->end;
	pe->hint_start = ev->hint_start;
	pe->hint_end = ev->hint_end;
	pe->path.p = path;
	pe->path.len = n > 0 ? n : 0;
	/* PRE_MODIFY events carry the file's origin and version too */
	fs = ev->fs ? ev->fs : inode_state(ev->in);
	if (fs) {
		pe->file_size = fs->size;
		if (fs->origin) {
			pe->origin.p = fs->origin;
			pe->origin.len = strlen(fs->origin);
		}
		if (fs->version) {
			pe->version.p = fs->version;
			pe->version.len = strlen(fs->version);
		}
	}
}

/*
 * h must answer ev.  A hook whose socket could not take it (full: it
 * does not read) has not allowed: it stays a target, the timer sends
 * again, and the event is decided by its answer or the timeout.
 * E.lock held.
 */
static void add_target(struct event *ev, struct hook *h, bool sent)
{
	ELOCK_HELD();
	ev->unsent[ev->ntargets] = !sent;
	ev->targets[ev->ntargets++] = h;
}

static void remove_target(struct event *ev, unsigned i)
{
	ev->ntargets--;
	ev->targets[i] = ev->targets[ev->ntargets];
	ev->unsent[i] = ev->unsent[ev->ntargets];
}

/*
 * Send a new event to every watch hook that subscribed to its type; each
 * must allow it (the first deny wins).  E.lock held.
 */
static void send_to_watchers(struct event *ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	bool built = false;

	for (struct hook *h = E.hooks; h; h = h->next) {
		if (h->kind != HSMFS_KIND_WATCH || !(h->mask & HSMFS_MASK(ev->type)) ||
		    !in_subtree(h, ev->in) || ev->ntargets == HOOKS_MAX)
			continue;
		if (!built) {
			fill_proto(ev, &pe, path, sizeof(path));
			built = true;
		}
		add_target(ev, h, hooks_send_event(h, &pe, -1) == 0);
	}
}

/* Try to hand a queued PRE_ACCESS event to a fill hook.  E.lock held. */
static void dispatch(struct event *ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	struct hook *h, *start;

	if (!E.hooks)
		return;
	fill_proto(ev, &pe, path, sizeof(path));
	pe.flags = HSMFS_EVENT_HAS_FD;
	start = E.rr && E.rr->next ? E.rr->next : E.hooks;
	h = start;
	do {
		if (h->kind == HSMFS_KIND_FILL &&
		    (h->mask & HSMFS_MASK(HSMFS_EV_PRE_ACCESS)) &&
		    in_subtree(h, ev->in)) {
			/* every delivery writes into a staging file of its own */
			if (ev->stage_fd < 0) {
				int fd = open_stage(ev->fs->size);

				if (fd < 0) {
					log_err("cannot create a staging file for a fill: %s",
						strerror(-fd));
					return;
				}
				ev->stage_fd = fd;
			}
			if (hooks_send_event(h, &pe, ev->stage_fd) != 0)
				goto next;
			ev->hook = h;
			ev->st = EV_SENT;
			h->assigned++;
			E.rr = h;
			return;
		}
next:
		h = h->next ? h->next : E.hooks;
	} while (h != start);
}

static void queue_add(struct event *ev)
{
	struct event **pp = &E.queue;

	while (*pp)
		pp = &(*pp)->qnext;
	ev->qnext = NULL;
	*pp = ev;
}

static void queue_remove(struct event *ev)
{
	struct event **pp;

	for (pp = &E.queue; *pp; pp = &(*pp)->qnext)
		if (*pp == ev) {
			*pp = ev->qnext;
			break;
		}
	ev->qnext = NULL;
}

static void redispatch_queue(void)
{
	struct event *ev, *next;

	for (ev = E.queue; ev; ev = next) {
		next = ev->qnext;
		dispatch(ev);
		if (ev->st == EV_SENT)
			queue_remove(ev);
	}
}

static void release_slot(struct event *ev);
static void put_event(struct event *ev);
static void commit_fill(struct event *ev);
static void change_unlink(struct events_change *c);

/*
 * Close fs's descriptor once nothing needs it: no event in flight and
 * the file not open (so a million partly read files hold none).
 * E.lock held.
 */
static void drop_rw_fd(struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->rw_fd >= 0 && !fs->inflight && !inode_is_open(fs->in)) {
		close(fs->rw_fd);
		fs->rw_fd = -1;
	}
}

/* Finish an event: nobody may send it again, waiters wake.  E.lock held. */
static void complete(struct event *ev, int result)
{
	ELOCK_HELD();
	if (ev->st == EV_DONE)
		return;
	if (ev->st == EV_QUEUED)
		queue_remove(ev);
	if (ev->hook) {
		ev->hook->assigned--;
		ev->hook = NULL;
	}
	if (ev->fs) {
		struct event **pp;

		for (pp = &ev->fs->inflight; *pp; pp = &(*pp)->fnext)
			if (*pp == ev) {
				*pp = ev->fnext;
				break;
			}
		drop_rw_fd(ev->fs);
	}
	assert(!ev->copying);
	if (ev->stage_fd >= 0) {
		close(ev->stage_fd); /* what a late hook writes goes nowhere */
		ev->stage_fd = -1;
	}
	ev->ntargets = 0;
	free(ev->orphans);
	ev->orphans = NULL;
	ev->norphans = 0;
	if (ev->reserved) {
		cache_unreserve(ev->reserved);
		ev->reserved = 0;
	}
	/* a failed fill is remembered for the kernel's retry: recently_failed() */
	if (ev->fs && ev->type == HSMFS_EV_PRE_ACCESS && !ev->detached &&
	    (result == EV_TIMEOUT || result == -EIO || result == -ETIMEDOUT)) {
		ev->fs->to_lo = ev->hint_start;
		ev->fs->to_hi = ev->hint_end;
		ev->fs->to_at = mono_ms();
		ev->fs->to_joins = E.joins;
		ev->fs->to_pid = ev->pid;
		ev->fs->to_err = result;
	}
	if (result == EV_TIMEOUT)
		E.st.timeouts++;
	else if (result == -EINTR)
		E.st.interrupted++;
	else if (result)
		E.st.denied++;
	ev->st = EV_DONE;
	ev->result = result;
	pthread_cond_broadcast(&ev->cond);
	/* its parked reads go to whichever thread drains the ready list */
	while (ev->parked) {
		struct parked *p = ev->parked;

		ev->parked = p->next;
		p->result = result;
		p->next = E.ready;
		E.ready = p;
		ev->waiters--;
	}
	put_event(ev);
}

/* Release ev's slot once it is done and nobody holds it.  E.lock held. */
static void put_event(struct event *ev)
{
	ELOCK_HELD();
	if (ev->st == EV_DONE && !ev->waiters)
		release_slot(ev);
}

/*
 * Take a reference on ev for a waiter; a readahead's first waiter gets
 * the whole timeout from now.  E.lock held.
 */
static void hold_event(struct event *ev)
{
	ELOCK_HELD();
	if (!ev->waiters++ && ev->detached)
		mono_after(&ev->deadline, E.cfg.timeout);
}

static void release_slot(struct event *ev)
{
	inode_release(ev->in);
	ev->in = NULL;
	ev->fs = NULL;
	ev->id = 0;
	ev->st = EV_FREE;
	ev->free_next = E.free_list;
	E.free_list = ev;
	pthread_cond_signal(&E.slot_cond);
}

/* Take a free slot, waiting for one until the timeout.  E.lock held. */
static struct event *get_slot(void)
{
	ELOCK_HELD();
	struct timespec deadline;

	mono_after(&deadline, E.cfg.timeout);
	while (!E.free_list) {
		if (pthread_cond_timedwait(&E.slot_cond, &E.lock, &deadline) ==
		    ETIMEDOUT && !E.free_list)
			return NULL;
	}
	struct event *ev = E.free_list;

	E.free_list = ev->free_next;
	return ev;
}

static void init_event(struct event *ev, uint32_t type, struct inode *in,
		       struct fuse_req *req)
{
	const struct fuse_ctx *ctx = req ? fuse_req_ctx(req) : NULL;

	ev->id = (++E.seq << SLOT_BITS) | (uint64_t)(ev - E.slots);
	ev->type = type;
	ev->st = EV_QUEUED;
	ev->in = in;
	inode_ref(in);
	ev->fs = NULL;
	ev->hook = NULL;
	ev->ntargets = 0;
	ev->filled = false;
	ev->detached = false;
	ev->result = 0;
	ev->waiters = 0;
	ev->parked = NULL;
	ev->progress = 0;
	ev->pid = ctx ? ctx->pid : 0;
	ev->uid = ctx ? ctx->uid : 0;
	ev->gid = ctx ? ctx->gid : 0;
	ev->fnext = ev->qnext = NULL;
	ev->reserved = 0;
	mono_after(&ev->deadline, E.cfg.timeout);
	clock_gettime(CLOCK_MONOTONIC, &ev->born);
	if (type == HSMFS_EV_PRE_ACCESS)
		E.st.pre_access++;
	else
		E.st.pre_modify++;
}

/* ev ran out of time: every hook that had it gets a CANCEL, the event fails.  E.lock held. */
static void expire(struct event *ev)
{
	ELOCK_HELD();
	if (ev->hook)
		hooks_send_cancel(ev->hook, ev->id, HSMFS_CANCEL_TIMEOUT);
	for (unsigned i = 0; i < ev->ntargets; i++)
		if (ev->targets[i] && !ev->unsent[i])
			hooks_send_cancel(ev->targets[i], ev->id, HSMFS_CANCEL_TIMEOUT);
	log_warn("event %llu (%s) timed out%s", (unsigned long long)ev->id,
		 ev->type == HSMFS_EV_PRE_ACCESS ? "PRE_ACCESS" : "PRE_MODIFY",
		 ev->detached ? " (readahead)" : "");
	complete(ev, EV_TIMEOUT);
}

/*
 * Did a fill of [start, end) of fs for the same thread fail a moment
 * ago (timed out, or the hook failed it with EIO or ETIMEDOUT: the
 * origin failed; a policy's deny is asked again), with no hook joined
 * since?
 * That is the kernel reading a failed readahead page once more for the
 * same read(2): asking again would wait the timeout twice, or run the
 * hook's retry policy twice.  It fails at once with the same error.
 * Another thread's read (a user's retry) asks again.  E.lock held.
 */
static int recently_failed(const struct fstate *fs, uint64_t start, uint64_t end,
			   struct fuse_req *req)
{
	ELOCK_HELD();
	const struct fuse_ctx *ctx = req ? fuse_req_ctx(req) : NULL;

	if (fs->to_at && ctx && ctx->pid == fs->to_pid && start < fs->to_hi &&
	    fs->to_lo < end && fs->to_joins == E.joins &&
	    mono_ms() - fs->to_at < RETRY_FAIL_MS)
		return fs->to_err;
	return 0;
}

/* Send again what a full socket refused.  E.lock held. */
static void resend(struct event *ev)
{
	ELOCK_HELD();
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	bool built = false;

	for (unsigned i = 0; i < ev->ntargets; i++) {
		if (!ev->targets[i] || !ev->unsent[i])
			continue;
		if (!built) {
			fill_proto(ev, &pe, path, sizeof(path));
			built = true;
		}
		if (hooks_send_event(ev->targets[i], &pe, -1) == 0)
			ev->unsent[i] = false;
	}
}

/*
 * The engine's clock: every TICK_MS it times out events nobody waits
 * for (readahead) as well as those waited for, sends again what full
 * sockets refused, and offers queued fills to the fill hooks again.
 */
static void *timer_main(void *arg)
{
	struct timespec ts;

	elock();
	while (!E.stopping) {
		mono_after(&ts, TICK_MS / 1000.0);
		pthread_cond_timedwait(&E.tcond, &E.lock, &ts);
		if (E.stopping)
			break;
		for (unsigned i = 0; i < E.cfg.max_pending; i++) {
			struct event *ev = &E.slots[i];

			if (ev->st != EV_SENT && ev->st != EV_QUEUED)
				continue;
			if (!ev->copying && mono_passed(&ev->deadline)) {
				expire(ev);
				continue;
			}
			resend(ev);
			if (ev->parked) {
				ev->waiters++; /* not released while we look */
				unpark_interrupted(ev);
				ev->waiters--;
				put_event(ev);
			}
		}
		if (E.queue)
			redispatch_queue();
		if (E.ready) {
			eunlock();
			drain_ready();
			elock();
		}
	}
	eunlock();
	return NULL;
}

/*
 * A waiter of ev left (interrupted): with nobody else waiting, the
 * event is cancelled unless it is a readahead or being committed.
 * The caller puts its reference.  E.lock held.
 */
static void abandoned(struct event *ev)
{
	ELOCK_HELD();
	if (ev->waiters || ev->st == EV_DONE || ev->detached || ev->copying)
		return;
	if (ev->hook)
		hooks_send_cancel(ev->hook, ev->id, HSMFS_CANCEL_INTERRUPTED);
	for (unsigned i = 0; i < ev->ntargets; i++)
		if (ev->targets[i] && !ev->unsent[i])
			hooks_send_cancel(ev->targets[i], ev->id, HSMFS_CANCEL_INTERRUPTED);
	ev->waiters++; /* complete() must not release it under us */
	complete(ev, -EINTR);
	ev->waiters--;
}

/*
 * Wait for ev to finish, with a reference the caller took (hold_event,
 * or start_fill's); the reference is dropped.  E.lock held.  Returns
 * the event's result, or -EINTR.
 */
static int wait_event(struct event *ev, struct fuse_req *req)
{
	ELOCK_HELD();
	int res = 0;

	while (ev->st != EV_DONE) {
		struct timespec tick;

		/* wake at least every 200 ms to notice FUSE interrupts */
		mono_after(&tick, 0.2);
		if (tick.tv_sec > ev->deadline.tv_sec ||
		    (tick.tv_sec == ev->deadline.tv_sec &&
		     tick.tv_nsec > ev->deadline.tv_nsec))
			tick = ev->deadline;
		pthread_cond_timedwait(&ev->cond, &E.lock, &tick);
		if (ev->st == EV_DONE)
			break;
		if (req && fuse_req_interrupted(req)) {
			res = -EINTR;
			break;
		}
		if (mono_passed(&ev->deadline) && !ev->copying)
			expire(ev);
	}
	if (!res)
		res = ev->result;
	ev->waiters--;
	if (res == -EINTR)
		abandoned(ev);
	put_event(ev);
	return res;
}

static bool have_fill_hook(void)
{
	for (struct hook *h = E.hooks; h; h = h->next)
		if (h->kind == HSMFS_KIND_FILL)
			return true;
	return false;
}

/* Map an internal failure to what the caller of read/write sees. */
static int caller_errno(int res)
{
	return res == EV_TIMEOUT ? -EIO : res;
}

/*
 * Start a fill of [start, end) with hint [hs, he).  A detached event (a
 * readahead) is started only if a slot is free now, and nobody waits for
 * it unless a reader comes to need its bytes.  Returns the event, or
 * NULL (with *res set unless detached).  E.lock held.
 */
static struct event *start_fill(struct inode *in, struct fstate *fs, uint64_t start,
				uint64_t end, uint64_t hs, uint64_t he,
				struct fuse_req *req, bool detached, uint64_t reserved,
				int *res)
{
	ELOCK_HELD();
	struct event *ev;
	int sfd;

	if (detached) {
		ev = E.free_list;
		if (!ev)
			return NULL;
		E.free_list = ev->free_next;
	} else if (!(ev = get_slot())) {
		*res = -EIO;
		log_warn("no free event slot within the timeout (max_pending=%u)",
			 E.cfg.max_pending);
		return NULL;
	}
	init_event(ev, HSMFS_EV_PRE_ACCESS, in, req);
	E.st.misses++;
	ev->fs = fs;
	ev->start = start;
	ev->end = end;
	ev->hint_start = hs;
	ev->hint_end = he;
	/* one descriptor for all the file's events, not an open(2) each */
	if (fs->rw_fd < 0) {
		sfd = open_store(in, O_RDWR);
		if (sfd < 0) {
			if (!detached)
				*res = sfd;
			complete(ev, sfd); /* nobody holds it: released */
			return NULL;
		}
		fs->rw_fd = sfd;
	}
	sfd = fs->rw_fd;
	ev->detached = detached;
	if (!detached)
		ev->waiters = 1; /* the caller's reference, for wait_event() */
	ev->reserved = reserved; /* from here on the event gives it back */
	if (detached)
		E.st.readahead++;
	ev->fnext = fs->inflight;
	fs->inflight = ev;
	send_to_watchers(ev);
	dispatch(ev);
	if (ev->st == EV_QUEUED)
		queue_add(ev);
	return ev;
}

/*
 * Readahead of sequential misses.  A stream is misses that move forward
 * chunk by chunk, each into a chunk after the last one's and no further
 * than what was already asked for; misses in the same chunk (the
 * kernel's own concurrent readahead requests, or several readers) leave
 * it as it is, any other miss ends it.  From the third chunk of a stream
 * on, the window doubles (one chunk up to RA_MAX) and the missing chunks
 * of it are asked for now, one event each, so that fetches overlap the
 * reading and a hook with several connections runs them in parallel.
 * Scattered reads and mmap faults of a few pages raise only the events
 * they need.  cover is the event the reader waits for.  E.lock held.
 */
static void read_ahead(struct inode *in, struct fstate *fs, const struct range *miss,
		       const struct event *cover, struct fuse_req *req)
{
	ELOCK_HELD();
	uint64_t chunk = E.cfg.chunk, pos, limit;
	unsigned started = 0;

	if (fs->ra_ahead && miss->start / chunk == fs->ra_lo / chunk)
		return; /* the same chunk again */
	if (!fs->ra_ahead || miss->start < fs->ra_lo || miss->start > fs->ra_ahead) {
		fs->ra_lo = miss->start;
		fs->ra_ahead = cover->hint_end;
		fs->ra_run = 0;
		fs->ra_window = 0;
		return;
	}
	fs->ra_lo = miss->start;
	if (cover->hint_end > fs->ra_ahead)
		fs->ra_ahead = cover->hint_end;
	if (++fs->ra_run < 2)
		return;
	fs->ra_window = fs->ra_window ? fs->ra_window * 2 : chunk;
	if (fs->ra_window > RA_MAX)
		fs->ra_window = RA_MAX;
	pos = fs->ra_ahead;
	limit = cover->hint_end + fs->ra_window;
	if (limit > fs->size)
		limit = fs->size;
	for (; pos < limit && started < 16; pos = (pos & ~(chunk - 1)) + chunk) {
		uint64_t ce = (pos & ~(chunk - 1)) + chunk, need;
		struct range gap;
		struct event *ev;
		int res;

		if (ce > fs->size)
			ce = fs->size;
		if (!rs_missing(&fs->present, pos, ce, &gap, 1))
			continue;
		if (inflight_over(fs, gap.start, gap.end))
			continue;
		/* with limits: only what fits now, never by waiting */
		need = !E.cfg.cache_limited ? 0 :
		       ((gap.end + PAGE - 1) & ~(PAGE - 1)) - (gap.start & ~(PAGE - 1));
		if (need && cache_try_admit(need))
			break;
		ev = start_fill(in, fs, gap.start, gap.end, gap.start, gap.end, req, true,
				need, &res);
		if (!ev) {
			if (need)
				cache_unreserve(need);
			break;
		}
		started++;
	}
	if (pos > fs->ra_ahead)
		fs->ra_ahead = pos;
}

/* The page-aligned span of a read of [off, off + len), within the file. */
static void read_span(const struct fstate *fs, uint64_t off, uint64_t len,
		      uint64_t *ret_start, uint64_t *ret_end)
{
	uint64_t end = off + len > fs->size ? fs->size : (off + len + PAGE - 1) & ~(PAGE - 1);

	*ret_start = off & ~(PAGE - 1);
	*ret_end = end > fs->size ? fs->size : end;
}

/*
 * One step of a read's check of [start, end): 0 when all of it is
 * present, -errno to fail, 1 with a reference on *ret_ev (hold_event or
 * start_fill's) when the read must wait for that event: one already
 * fetching some of the bytes, or a new one.  first: the read's first
 * step (a hit is counted, readahead driven).  On mounts with cache
 * limits, admission may drop E.lock and wait for room; *reserved is
 * what it admitted and not yet handed to an event.  E.lock held.
 */
static int access_step(struct inode *in, struct fstate *fs, uint64_t start, uint64_t end,
		       struct fuse_req *req, bool first, uint64_t *reserved,
		       struct event **ret_ev)
{
	ELOCK_HELD();
	for (;;) {
		struct range miss, gap;
		struct event *ev;
		int res = 0;

		evict_wait(fs); /* its present ranges are being changed */
		if (fs->flags & META_F_STALE)
			return -EIO;
		if (start >= end || !rs_missing(&fs->present, start, end, &miss, 1)) {
			if (first)
				E.st.hits++;
			return 0;
		}
		/*
		 * Wait for an event whose hint covers any of this: its hook is
		 * most likely fetching those bytes already.  What it does not
		 * fill is asked for again on the next step.
		 */
		ev = inflight_over(fs, miss.start, miss.end);
		if (ev) {
			hold_event(ev);
		} else {
			uint64_t hs, he, hint_start, hint_end, need;

			if (!have_fill_hook() && E.cfg.nohook_fail)
				return -EIO;
			res = recently_failed(fs, miss.start, miss.end, req);
			if (res)
				return res;
			/* hint: the chunk-aligned span, within the same gap */
			hs = miss.start & ~(E.cfg.chunk - 1);
			he = (miss.end + E.cfg.chunk - 1) & ~(E.cfg.chunk - 1);
			if (he > fs->size)
				he = fs->size;
			hint_start = miss.start;
			hint_end = miss.end;
			for (uint64_t pos = hs;
			     pos < he && rs_missing(&fs->present, pos, he, &gap, 1);
			     pos = gap.end) {
				if (gap.start <= miss.start && gap.end >= miss.end) {
					hint_start = gap.start;
					hint_end = gap.end;
					break;
				}
			}
			/* admission: room for the fill before it may write */
			need = ((hint_end + PAGE - 1) & ~(PAGE - 1)) - (hint_start & ~(PAGE - 1));
			if (E.cfg.cache_limited && *reserved < need) {
				struct timespec deadline;

				mono_after(&deadline, E.cfg.timeout);
				eunlock();
				if (*reserved)
					cache_unreserve(*reserved);
				*reserved = 0;
				res = cache_admit(need, &deadline);
				elock();
				if (res)
					return res;
				*reserved = need;
				continue; /* the world may have changed meanwhile */
			}
			ev = start_fill(in, fs, miss.start, miss.end, hint_start, hint_end,
					req, false, *reserved, &res);
			if (!ev)
				return res;
			*reserved = 0;
		}
		if (first) {
			read_ahead(in, fs, &miss, ev, req);
			/* what an eviction of the open file must leave alone */
			fs->hot_lo = miss.start & ~(E.cfg.chunk - 1);
			fs->hot_hi = ev->hint_end > fs->ra_ahead ? ev->hint_end : fs->ra_ahead;
		}
		*ret_ev = ev;
		return 1;
	}
}

int events_pre_access(struct inode *in, uint64_t off, uint64_t len,
		      struct fuse_req *req, bool *ret_held)
{
	struct fstate *fs = inode_state(in);
	uint64_t start, end, reserved = 0;
	bool waited = false, retried = false;
	struct event *ev;
	int res;

	*ret_held = false;
	if (!fs)
		return 0;
	elock();
	read_span(fs, off, len, &start, &end);
	for (;;) {
		res = access_step(in, fs, start, end, req, !waited, &reserved, &ev);
		if (res <= 0)
			break;
		waited = true;
		res = wait_event(ev, req);
		if (res == -ENOSPC && !retried) {
			/* the store is full: evict, then try once more */
			retried = true;
			eunlock();
			res = cache_make_room(E.cfg.chunk);
			elock();
			if (!res)
				continue;
			res = -ENOSPC;
		}
		if (res)
			break;
	}
	if (!res && tracked(fs)) {
		fs->nreading++; /* until events_read_done() */
		*ret_held = true;
	}
	eunlock();
	if (reserved)
		cache_unreserve(reserved);
	drain_ready();
	return caller_errno(res);
}

int events_read(struct inode *in, uint64_t off, uint64_t len, struct fuse_req *req,
		int fd, bool *ret_held)
{
	struct fstate *fs = inode_state(in);
	uint64_t start, end, reserved = 0;
	struct event *ev;
	struct parked *p;
	int res;

	*ret_held = false;
	if (!fs)
		return 0;
	/* mounts with cache limits admit and count reads: in the thread */
	if (E.cfg.cache_limited || !E.cfg.reply)
		return events_pre_access(in, off, len, req, ret_held);
	elock();
	read_span(fs, off, len, &start, &end);
	res = access_step(in, fs, start, end, req, true, &reserved, &ev);
	if (res <= 0) {
		eunlock();
		return caller_errno(res);
	}
	p = E.park_free;
	if (!p) {
		/* every parking place taken: wait in this thread, as before */
		ev->waiters--;
		put_event(ev);
		eunlock();
		return events_pre_access(in, off, len, req, ret_held);
	}
	E.park_free = p->next;
	p->req = req;
	p->in = in;
	inode_ref(in);
	p->fd = fd;
	p->off = off;
	p->len = len;
	p->retried = false;
	p->next = ev->parked; /* with the reference access_step took */
	ev->parked = p;
	eunlock();
	return EVENTS_PARKED;
}

/*
 * A parked read's event ended: check it again; park it on the next
 * event, or answer it.  Called without E.lock.
 */
static void resume(struct parked *p)
{
	struct fstate *fs = inode_state(p->in);
	uint64_t start, end, reserved = 0;
	struct event *ev;
	int res = p->result;

	if (res == -ENOSPC && !p->retried) {
		/* the store is full: evict, then try once more */
		p->retried = true;
		res = cache_make_room(E.cfg.chunk);
		if (res)
			res = -ENOSPC;
	}
	elock();
	if (!res) {
		read_span(fs, p->off, p->len, &start, &end);
		res = access_step(p->in, fs, start, end, p->req, false, &reserved, &ev);
		if (res == 1) {
			p->next = ev->parked;
			ev->parked = p;
			eunlock();
			return;
		}
	}
	eunlock();
	E.cfg.reply(p->req, p->in, p->fd, p->off, p->len, caller_errno(res));
	elock();
	inode_release(p->in);
	p->req = NULL;
	p->in = NULL;
	p->next = E.park_free;
	E.park_free = p;
	eunlock();
}

/* Resume every parked read whose event ended.  Called without E.lock. */
static void drain_ready(void)
{
	for (;;) {
		struct parked *p;

		elock();
		p = E.ready;
		if (p)
			E.ready = p->next;
		eunlock();
		if (!p)
			return;
		resume(p);
	}
}

/*
 * Parked reads whose caller was interrupted leave their event (the
 * event is cancelled if nobody else waits).  E.lock held.
 */
static void unpark_interrupted(struct event *ev)
{
	ELOCK_HELD();
	struct parked **pp = &ev->parked;

	while (*pp) {
		struct parked *p = *pp;

		if (!fuse_req_interrupted(p->req)) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		p->result = -EINTR;
		p->next = E.ready;
		E.ready = p;
		ev->waiters--;
		abandoned(ev); /* the caller holds ev: never released here */
		if (ev->st == EV_DONE)
			break; /* the rest went to the ready list with it */
	}
}

void events_read_done(struct inode *in)
{
	struct fstate *fs = inode_state(in);

	elock();
	if (fs && fs->nreading && !--fs->nreading)
		pthread_cond_broadcast(&E.reads_done);
	eunlock();
}

/*
 * QUIET is kept per hook: a set of store inode numbers, open addressing
 * (0 = empty slot), grown at half full up to HOOK_QUIET_MAX, past which
 * a QUIET is not kept (the hook gets more events, never fewer than it
 * should).  E.lock held.
 */
static bool quiet_has(const struct hook *h, uint64_t ino)
{
	ELOCK_HELD();
	if (!h->quiet || !ino)
		return false;
	for (uint32_t i = (uint32_t)(ino * 0x9E3779B97F4A7C15ULL >> 32) & (h->quiet_cap - 1);;
	     i = (i + 1) & (h->quiet_cap - 1)) {
		if (h->quiet[i] == ino)
			return true;
		if (!h->quiet[i])
			return false;
	}
}

static void quiet_put(uint64_t *tab, uint32_t cap, uint64_t ino)
{
	uint32_t i = (uint32_t)(ino * 0x9E3779B97F4A7C15ULL >> 32) & (cap - 1);

	while (tab[i] && tab[i] != ino)
		i = (i + 1) & (cap - 1);
	tab[i] = ino;
}

static void quiet_add(struct hook *h, uint64_t ino)
{
	if (!ino || quiet_has(h, ino))
		return;
	if ((h->nquiet + 1) * 2 > h->quiet_cap) {
		uint32_t cap = h->quiet_cap ? h->quiet_cap * 2 : 64;
		uint64_t *tab;

		if (h->nquiet >= HOOK_QUIET_MAX || !(tab = calloc(cap, sizeof(*tab))))
			return;
		for (uint32_t i = 0; i < h->quiet_cap; i++)
			if (h->quiet[i])
				quiet_put(tab, cap, h->quiet[i]);
		free(h->quiet);
		h->quiet = tab;
		h->quiet_cap = cap;
	}
	quiet_put(h->quiet, h->quiet_cap, ino);
	h->nquiet++;
}

/* Must h answer PRE_MODIFY of in?  E.lock held. */
static bool modify_target(const struct hook *h, struct inode *in)
{
	ELOCK_HELD();
	return (h->mask & HSMFS_MASK(HSMFS_EV_PRE_MODIFY)) && in_subtree(h, in) &&
	       !quiet_has(h, inode_ino(in));
}

int events_pre_modify(struct inode *in, uint64_t start, uint64_t end,
		      struct fuse_req *req)
{
	char path[HSMFS_MAX_PATH + 1];
	struct proto_event pe;
	struct event *ev;
	struct hook *h;
	int res;

	if (inode_flags(in) & INODE_QUIET)
		return 0;
	elock();
	for (h = E.hooks; h; h = h->next)
		if (modify_target(h, in))
			break;
	if (!h) {
		/* every hook that watches it quieted it: the fast path may skip */
		inode_flags_set(in, INODE_QUIET);
		eunlock();
		return 0;
	}
	ev = get_slot();
	if (!ev) {
		eunlock();
		return -EIO;
	}
	init_event(ev, HSMFS_EV_PRE_MODIFY, in, req);
	ev->waiters = 1; /* ours, for wait_event() */
	ev->fs = NULL;
	ev->start = start;
	ev->end = end;
	ev->hint_start = start;
	ev->hint_end = end;
	fill_proto(ev, &pe, path, sizeof(path));
	for (h = E.hooks; h; h = h->next)
		if (modify_target(h, in))
			add_target(ev, h, hooks_send_event(h, &pe, -1) == 0);
	ev->st = EV_SENT;
	if (!ev->ntargets)
		complete(ev, 0);
	res = wait_event(ev, req);
	eunlock();
	drain_ready();
	return caller_errno(res);
}

/* Local data now, not cache: it stops counting.  E.lock held. */
static void becomes_dirty(struct fstate *fs)
{
	ELOCK_HELD();
	if (fs->state != META_DIRTY && fs->blocks) {
		cache_account(-(int64_t)fs->blocks);
		fs->blocks = 0;
	}
	fs->state = META_DIRTY;
	inode_flags_clear(fs->in, INODE_TRACKED); /* never evicted now */
}

/*
 * The user's bytes could not be counted present (no memory): a fill
 * must never be committed over them, so the file refuses fills from
 * now on (reads of what is missing fail) and its next fsync fails.
 * E.lock held.
 */
static void lost_track(struct fstate *fs, int err)
{
	ELOCK_HELD();
	log_err("cannot record a change of inode %llu: %s; its missing ranges will not be filled",
		(unsigned long long)fs->ino, strerror(-err));
	fs->flags |= META_F_STALE;
	fs->sticky_err = -EIO;
}

void events_wrote(struct inode *in, struct events_change *c, uint64_t off, uint64_t len)
{
	struct fstate *fs = inode_state(in);
	int res;

	if (!fs)
		return;
	elock();
	if (c->fs)
		change_unlink(c);
	if (!len) {
		eunlock();
		return;
	}
	/*
	 * Written past the end: the gap the store file grew is zeros of the
	 * user's, present like the written bytes (never fetched over).
	 */
	res = rs_add(&fs->present, off > fs->size ? fs->size : off, off + len);
	if (res)
		lost_track(fs, res);
	if (off + len > fs->size)
		fs->size = off + len;
	becomes_dirty(fs);
	if (rs_contains(&fs->present, 0, fs->size))
		inode_flags_clear(in, INODE_NONRESIDENT);
	persist_later(fs);
	eunlock();
}

void events_truncated(struct inode *in, struct events_change *c, uint64_t old_size,
		      uint64_t new_size)
{
	struct fstate *fs = inode_state(in);
	int res;

	if (!fs)
		return;
	elock();
	if (c->fs)
		change_unlink(c);
	if (new_size < old_size)
		res = rs_remove(&fs->present, new_size, UINT64_MAX);
	else
		res = rs_add(&fs->present, old_size, new_size); /* zeros of our own */
	if (res)
		lost_track(fs, res);
	fs->size = new_size;
	becomes_dirty(fs);
	if (rs_contains(&fs->present, 0, fs->size))
		inode_flags_clear(in, INODE_NONRESIDENT);
	persist_later(fs);
	eunlock();
}

void events_unlinked(uint64_t ino)
{
	uint64_t cached = 0;

	if (E.cfg.meta && meta_delete(E.cfg.meta, ino, &cached))
		log_err("cannot forget the state of inode %llu: %s",
			(unsigned long long)ino, meta_errmsg(E.cfg.meta));
	if (cached)
		cache_account(-(int64_t)cached);
}

ssize_t events_xattr(struct inode *in, uint64_t size, const char *name,
		     char *buf, size_t bufsize)
{
	char val[HSMFS_MAX_PATH + 64];
	struct fstate *fs;
	int n;

	if (!strcmp(name, "user.hsmfs.hooks") && in == inode_root()) {
		size_t cap = HOOKS_MAX * (HSMFS_MAX_NAME + HSMFS_MAX_PATH + 80), len = 0;
		char *list = malloc(cap);

		if (!list)
			return -ENOMEM;
		elock();
		for (struct hook *h = E.hooks; h && len < cap; h = h->next)
			len += snprintf(list + len, cap - len, "%s\t%d\t%s\t%s%s\t%u\t%s\n",
					h->name, (int)h->pid,
					h->kind == HSMFS_KIND_FILL ? "fill" : "watch",
					h->mask & HSMFS_MASK(HSMFS_EV_PRE_ACCESS) ? "A" : "-",
					h->mask & HSMFS_MASK(HSMFS_EV_PRE_MODIFY) ? "M" : "-",
					h->assigned, h->subtree[0] ? h->subtree : "/");
		eunlock();
		if (len > cap)
			len = cap;
		n = len;
		if (bufsize && (size_t)n > bufsize)
			n = -ERANGE;
		else if (bufsize)
			memcpy(buf, list, n);
		free(list);
		return n;
	}
	if (!strcmp(name, "user.hsmfs.stats") && in == inode_root()) {
		struct events_stats es;
		struct cache_stats cs;
		uint64_t inodes, fds;

		events_get_stats(&es);
		cache_stats(&cs);
		inode_counts(&inodes, &fds);
		n = snprintf(val, sizeof(val),
			     "{\"cache_bytes\": %llu, \"cache_reserved\": %llu, "
			     "\"cache_max\": %llu, \"cache_min_free\": %llu, "
			     "\"fs_free\": %llu, \"evicted_files\": %llu, "
			     "\"evicted_bytes\": %llu, \"eviction_rounds\": %llu, "
			     "\"enospc\": %llu, \"hits\": %llu, \"misses\": %llu, \"readahead\": %llu, "
			     "\"filled_bytes\": %llu, \"pre_access\": %llu, "
			     "\"pre_modify\": %llu, \"denied\": %llu, \"timeouts\": %llu, "
			     "\"interrupted\": %llu, \"fill_p50_us\": %llu, "
			     "\"fill_p90_us\": %llu, \"fill_p99_us\": %llu, "
			     "\"evictions_started\": %llu, \"evictions_done\": %llu, "
			     "\"inodes\": %llu, \"cached_fds\": %llu}\n",
			     (unsigned long long)cs.used, (unsigned long long)cs.reserved,
			     (unsigned long long)cs.max, (unsigned long long)cs.min_free,
			     (unsigned long long)cs.fs_free,
			     (unsigned long long)cs.evicted_files,
			     (unsigned long long)cs.evicted_bytes,
			     (unsigned long long)cs.eviction_rounds,
			     (unsigned long long)cs.enospc, (unsigned long long)es.hits,
			     (unsigned long long)es.misses, (unsigned long long)es.readahead,
			     (unsigned long long)es.filled_bytes,
			     (unsigned long long)es.pre_access,
			     (unsigned long long)es.pre_modify,
			     (unsigned long long)es.denied, (unsigned long long)es.timeouts,
			     (unsigned long long)es.interrupted,
			     (unsigned long long)es.fill_p50_us,
			     (unsigned long long)es.fill_p90_us,
			     (unsigned long long)es.fill_p99_us,
			     (unsigned long long)es.evictions_started,
			     (unsigned long long)es.evictions_done,
			     (unsigned long long)inodes, (unsigned long long)fds);
	} else if (!strcmp(name, "user.hsmfs.socket") || !strcmp(name, "user.hsmfs.store")) {
		if (in != inode_root())
			return -ENODATA;
		n = snprintf(val, sizeof(val), "%s",
			     name[11] == 's' && name[12] == 'o' ? hooks_socket_path() :
								  E.cfg.store_path);
	} else if (in == inode_root() && !strcmp(name, "user.hsmfs.origin")) {
		if (!E.cfg.origin)
			return -ENODATA;
		n = snprintf(val, sizeof(val), "%s", E.cfg.origin);
	} else {
		if (events_load(in))
			return -EIO;
		elock();
		fs = inode_state(in);
		if (!strcmp(name, "user.hsmfs.state")) {
			n = snprintf(val, sizeof(val), "%s%s%s",
				     fs ? meta_state_name(fs->state) : "resident",
				     fs && (fs->flags & META_F_PINNED) ? ",pinned" : "",
				     fs && (fs->flags & META_F_STALE) ? ",stale" : "");
		} else if (!strcmp(name, "user.hsmfs.present")) {
			n = snprintf(val, sizeof(val), "%llu",
				     (unsigned long long)(fs ? rs_total(&fs->present) : size));
		} else if (!strcmp(name, "user.hsmfs.origin") && fs && fs->origin) {
			n = snprintf(val, sizeof(val), "%s", fs->origin);
		} else if (!strcmp(name, "user.hsmfs.filling") && fs && fs->inflight) {
			/* "DONE BYTES" of the fills under way, DONE from PROGRESS */
			uint64_t done = 0, bytes = 0;

			for (struct event *ev = fs->inflight; ev; ev = ev->fnext) {
				uint64_t b = ev->hint_end - ev->hint_start;

				bytes += b;
				done += ev->progress < b ? ev->progress : b;
			}
			n = snprintf(val, sizeof(val), "%llu %llu", (unsigned long long)done,
				     (unsigned long long)bytes);
		} else {
			n = -ENODATA;
		}
		eunlock();
		if (n < 0)
			return n;
	}
	if (n >= (int)sizeof(val))
		n = sizeof(val) - 1;
	if (!bufsize)
		return n;
	if ((size_t)n > bufsize)
		return -ERANGE;
	memcpy(buf, val, n);
	return n;
}

/* ------------------------------------------------------------ hooks */

void events_hook_joined(struct hook *h)
{
	elock();
	h->next = E.hooks;
	E.hooks = h;
	E.joins++;
	recompute_mask();
	/* a new watcher of changes has quieted nothing yet */
	if (h->mask & HSMFS_MASK(HSMFS_EV_PRE_MODIFY))
		inode_flags_clear_all(INODE_QUIET);
	log_info("hook '%s' (pid %d, %s) connected", h->name, (int)h->pid,
		 h->kind == HSMFS_KIND_FILL ? "fill" : "watch");
	for (unsigned i = 0; i < E.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		for (unsigned k = 0; k < ev->norphans; k++) {
			char path[HSMFS_MAX_PATH + 1];
			struct proto_event pe;
			unsigned j;

			if (strcmp(ev->orphans[k], h->name) || !(h->mask & HSMFS_MASK(ev->type)))
				continue;
			fill_proto(ev, &pe, path, sizeof(path));
			for (j = 0; j < ev->ntargets && ev->targets[j]; j++)
				;
			ev->targets[j] = h;
			ev->unsent[j] = hooks_send_event(h, &pe, -1) != 0;
			memmove(ev->orphans[k], ev->orphans[k + 1],
				(ev->norphans - k - 1) * sizeof(*ev->orphans));
			ev->norphans--;
			break;
		}
	}
	redispatch_queue();
	eunlock();
}

void events_hook_left(struct hook *h)
{
	struct hook **pp;
	unsigned i, j;

	elock();
	for (pp = &E.hooks; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	if (E.rr == h)
		E.rr = NULL;
	recompute_mask();
	for (i = 0; i < E.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		if (ev->st != EV_SENT && ev->st != EV_QUEUED)
			continue;
		if (ev->hook == h) {
			/* fill events go to another fill hook, or wait for one */
			ev->hook = NULL;
			if (ev->stage_fd >= 0) {
				close(ev->stage_fd);
				ev->stage_fd = -1;
			}
			ev->st = EV_QUEUED;
			queue_add(ev);
		}
		for (j = 0; j < ev->ntargets; j++) {
			void *o;

			if (ev->targets[j] != h)
				continue;
			/* a watcher's events wait for a hook of the same name */
			o = realloc(ev->orphans, (ev->norphans + 1) * sizeof(*ev->orphans));
			if (!o) {
				complete(ev, -EIO);
				break;
			}
			ev->orphans = o;
			memcpy(ev->orphans[ev->norphans++], h->name, sizeof(h->name));
			ev->targets[j] = NULL;
		}
	}
	redispatch_queue();
	free(h->quiet);
	h->quiet = NULL;
	h->nquiet = h->quiet_cap = 0;
	log_info("hook '%s' (pid %d) disconnected", h->name, (int)h->pid);
	eunlock();
	drain_ready();
}

static bool copying_over(const struct fstate *fs, uint64_t start, uint64_t end)
{
	for (const struct event *ev = fs->inflight; ev; ev = ev->fnext)
		if (ev->copying && ev->fill_start < end && start < ev->fill_end)
			return true;
	return false;
}

/*
 * What a fill of [start, end) may write: what is missing, within the
 * file's size, less every user change in flight.  0 or -ENOMEM.
 * E.lock held.
 */
static int fill_todo(const struct fstate *fs, uint64_t start, uint64_t end,
		     struct rangeset *todo)
{
	ELOCK_HELD();
	struct range gap[16];
	size_t n, k;
	int res = 0;

	if (end > fs->size)
		end = fs->size;
	while (start < end && !res) {
		n = rs_missing(&fs->present, start, end, gap, 16);
		for (k = 0; k < n && k < 16 && !res; k++)
			res = rs_add(todo, gap[k].start, gap[k].end);
		if (n <= 16)
			break;
		start = gap[15].end;
	}
	for (const struct events_change *c = fs->changes; c && !res; c = c->next)
		res = rs_remove(todo, c->start, c->end);
	return res;
}

/*
 * Commit an allowed fill: copy what it may write (fill_todo) from its
 * staging file into the store file, mark that present, and complete
 * the event.  The copy runs with E.lock dropped; meanwhile the event
 * is marked copying, so user changes of those bytes wait for it
 * (events_change_begin) and nobody else completes it.  Called with
 * E.lock held, returns with it held.
 */
static void commit_fill(struct event *ev)
{
	ELOCK_HELD();
	struct rangeset todo = RANGESET_INIT, done = RANGESET_INIT;
	struct fstate *fs = ev->fs;
	int stage = ev->stage_fd, dst = fs->rw_fd, res;
	struct timespec now;
	int64_t b;

	uint64_t nchanges = fs->nchanges;
	struct stat before;
	bool have_before;

	res = fill_todo(fs, ev->fill_start, ev->fill_end, &todo);
	ev->copying = true;
	eunlock();
	have_before = fstat(dst, &before) == 0;
	for (uint32_t i = 0; !res && i < todo.n; i++) {
		uint64_t upto;

		res = copy_stage(stage, dst, todo.v[i].start, todo.v[i].end, &upto);
		if (upto > todo.v[i].start && rs_add(&done, todo.v[i].start, upto) && !res)
			res = -ENOMEM;
	}
	if (done.n)
		fault_point(FAULT_FILL_COPIED);
	b = allocated(dst);
	elock();
	if (have_before && done.n)
		times_kept(fs, dst, &before, nchanges);
	ev->copying = false;
	pthread_cond_broadcast(&E.copied);
	for (uint32_t i = 0; i < done.n; i++)
		if (rs_add(&fs->present, done.v[i].start, done.v[i].end) && !res)
			res = -ENOMEM; /* copied but not counted: fetched again */
	if (done.n) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		E.lat[lat_bucket((uint64_t)((now.tv_sec - ev->born.tv_sec) * 1000000 +
					    (now.tv_nsec - ev->born.tv_nsec) / 1000))]++;
		E.st.filled_bytes += rs_total(&done);
		if (b >= 0 && fs->state != META_DIRTY) {
			cache_account(b - (int64_t)fs->blocks);
			fs->blocks = (uint64_t)b;
		}
		fs->atime = now_ms();
		present_changed(fs);
		persist_later(fs);
	}
	rs_clear(&todo);
	rs_clear(&done);
	complete(ev, res);
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
		if (!copying_over(fs, start, end))
			break;
		pthread_cond_wait(&E.copied, &E.lock);
	}
	c->fs = fs;
	c->next = fs->changes;
	fs->changes = c;
	fs->nchanges++;
	eunlock();
}

/* Take c off its file's list.  E.lock held. */
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

void events_change_end(struct inode *in, struct events_change *c)
{
	if (!c->fs)
		return;
	elock();
	change_unlink(c);
	eunlock();
}

static struct event *find_event(uint64_t id)
{
	uint64_t slot = id & ((1ULL << SLOT_BITS) - 1);
	struct event *ev;

	if (slot >= E.cfg.max_pending)
		return NULL;
	ev = &E.slots[slot];
	/* a queued event may already be with its watchers */
	return ev->id == id && (ev->st == EV_SENT || ev->st == EV_QUEUED) ? ev : NULL;
}

static int deny_errno(uint32_t e)
{
	switch (e) {
	case EPERM: case EACCES: case EIO: case EBUSY: case EAGAIN:
	case ENOSPC: case EDQUOT: case ETXTBSY: case ENODATA: case ETIMEDOUT:
		return -(int)e; /* ETIMEDOUT too: EV_TIMEOUT is the engine's own */
	default:
		return -EIO;
	}
}

static void answer_one(struct hook *h, const struct proto_answer *a)
{
	struct event *ev;
	unsigned i;

	elock();
	ev = find_event(a->id);
	if (!ev) {
		/* late (timed out, cancelled) or repeated: ignored */
		eunlock();
		log_debug("hook '%s': answer to unknown event %llu ignored",
			  h->name, (unsigned long long)a->id);
		return;
	}
	if (ev->type == HSMFS_EV_PRE_ACCESS && ev->hook == h) {
		if (a->verdict == HSMFS_ALLOW) {
			uint64_t s = a->filled_start > ev->hint_start ?
					     a->filled_start : ev->hint_start;
			uint64_t e = a->filled_end < ev->hint_end ? a->filled_end :
								    ev->hint_end;

			if (s > ev->start || e < ev->end) {
				log_err("hook '%s' allowed event %llu but filled [%llu, %llu) short of [%llu, %llu)",
					h->name, (unsigned long long)a->id,
					(unsigned long long)a->filled_start,
					(unsigned long long)a->filled_end,
					(unsigned long long)ev->start,
					(unsigned long long)ev->end);
				complete(ev, -EIO);
			} else {
				/* committed once every watcher allowed too */
				ev->filled = true;
				ev->fill_start = s;
				ev->fill_end = e;
				ev->hook->assigned--;
				ev->hook = NULL;
				if (!ev->ntargets)
					commit_fill(ev);
			}
		} else {
			complete(ev, deny_errno(a->error));
		}
		eunlock();
		return;
	}
	for (i = 0; i < ev->ntargets && ev->targets[i] != h; i++)
		;
	/* a hook that was never sent the event cannot answer it */
	if (i == ev->ntargets || ev->unsent[i])
		goto not_ours;
	remove_target(ev, i);
	if (a->verdict != HSMFS_ALLOW) {
		complete(ev, deny_errno(a->error));
	} else {
		/* QUIET quiets the hook that said it, no other */
		if (ev->type == HSMFS_EV_PRE_MODIFY && (a->flags & HSMFS_ANSWER_QUIET))
			quiet_add(h, inode_ino(ev->in));
		if (!ev->ntargets && ev->type == HSMFS_EV_PRE_MODIFY)
			complete(ev, 0);
		else if (!ev->ntargets && ev->filled)
			commit_fill(ev);
	}
	eunlock();
	return;
not_ours:
	eunlock();
	log_debug("hook '%s': answer to event %llu it was not sent, ignored",
		  h->name, (unsigned long long)a->id);
}

void events_answer(struct hook *h, const struct proto_answer *a)
{
	answer_one(h, a);
	/* the reads parked on what it ended are answered from this thread */
	drain_ready();
}

void events_progress(struct hook *h, const struct proto_progress *p)
{
	struct event *ev;

	elock();
	ev = find_event(p->id);
	/* progress is bytes advancing: a repeated count extends nothing */
	if (ev && ev->hook == h && p->bytes_done > ev->progress) {
		ev->progress = p->bytes_done;
		mono_after(&ev->deadline, E.cfg.timeout);
	}
	eunlock();
}
