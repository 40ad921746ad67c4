/* evict.c - see engine.h */
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
#include "engine.h"

static int evictable(const struct fstate *fs);
static void evict_begin(struct fstate *fs);
static void evict_end(struct fstate *fs);
static int evict_range(struct inode *in, struct fstate *fs, uint64_t start,
		       uint64_t end, uint64_t *ret_freed);

/*
 * Can fs lose ranges now?  0 or -EBUSY: dirty, pinned, being filled.
 * Whether it is open is the caller's question.  E.lock held.
 */
static int evictable(const struct fstate *fs)
{
	ELOCK_HELD();
	/* the kernel reads a passthrough file's store file itself: never punched */
	if (fs->state == META_DIRTY || (fs->flags & META_F_PINNED) || fs->inflight ||
	    fs->changes || fs->evicting || (inode_flags(fs->in) & INODE_PASSTHROUGH))
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
void evict_wait(const struct fstate *fs)
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
	bool none, got_row, have_before = false, punched = false;
	struct stat before;
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
	/* the times before the daemon's own changes (the mark, the punch) */
	have_before = fstat(sfd, &before) == 0;
	/* 2. the mark, so that a lost database never makes these zeros */
	if (!none && fsetxattr(sfd, STORE_MARKER_XATTR, mark, (size_t)n, 0) < 0) {
		/* without it a lost database would make the holes zeros: keep the bytes */
		res = -errno;
		log_warn("cannot mark inode %llu as a placeholder: %s; not evicted",
			 (unsigned long long)fs->ino, strerror(errno));
	}
	/* 3. only now the bytes go (the file's times stay) */
	if (!res) {
		if (fallocate(sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start,
			      end - start) < 0) {
			res = -errno;
		} else {
			struct timespec tv[2] = { { 0, UTIME_OMIT }, before.st_mtim };

			fault_point(FAULT_EVICT_PUNCHED);
			/* no user change runs while it is evicting: the time is the file's */
			punched = have_before && futimens(sfd, tv) == 0;
		}
	}
	now = allocated(sfd);
	free(mark);
	elock();
	if (punched)
		ctime_kept(fs, sfd, &before);
	close(sfd);
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
	uint64_t freed = 0;
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
	if (!res && freed)
		cache_evicted(freed);
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
