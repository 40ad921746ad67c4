/* evict.c - see evict.h */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
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
#include "commit.h"
#include "fstate.h"
#include "store.h"
#include "hooks.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "fault.h"
#include "ranges.h"
#include "clock.h"
#include "evrec.h"
#include "state.h"
#include "evict.h"
#include "evict-policy.h"

static struct evict_facts facts_of(const struct fstate *fs, bool open);
static void evict_begin(struct fstate *fs);
static void evict_end(struct fstate *fs);
static int evict_range(struct inode *in, struct fstate *fs, uint64_t start,
		       uint64_t end, bool cut, uint64_t *ret_freed);

/* What the policy reads of fs (evict_policy_eligible).  S.lock held. */
static struct evict_facts facts_of(const struct fstate *fs, bool open)
{
	ELOCK_HELD();
	return (struct evict_facts){
		.dirty = fs->state == META_DIRTY || fs->track_pending,
		.pinned = fs->flags & META_F_PINNED,
		.filling = fs->inflight != NULL,
		.changing = fs->changes != NULL,
		.evicting = fs->evicting,
		.passthrough = inode_flags(fs->in) & INODE_PASSTHROUGH,
		.open = open,
		.tracked = tracked(fs),
		.reading = fs->nreading > 0,
	};
}

/*
 * A front end that holds the file by a lease (front.h evicting): the
 * writer's own open of it, for its data sync, would refuse the lease as
 * a user's open does, so the batches holding in's file are written first
 * (a file all present is queued once more: its marker's removal changes
 * its ctime).  Not while writes fail, nor 5 s with no batch written.
 * Before evict_begin(): nothing waits on the file meanwhile.  S.lock
 * held, dropped while it waits; in's state afterwards, or NULL.
 */
static struct fstate *writer_let_go(struct inode *in)
{
	ELOCK_HELD();
	struct fstate *fs = inode_state(in);
	uint64_t done = S.batch_done;
	struct timespec until;

	mono_after(&until, 5);
	while (S.cfg.front.evicting && fs && (fs->queued || fs->wbatch > S.batch_done) &&
	       S.writer_running && !S.stopping && !S.write_failing && !mono_passed(&until)) {
		S.urgent = true;
		pthread_cond_signal(&S.wcond);
		pthread_cond_timedwait(&S.wdone, &S.lock, &until);
		if (S.batch_done != done) {
			done = S.batch_done;
			mono_after(&until, 5);
		}
		fs = inode_state(in);
	}
	return fs;
}

/*
 * Eviction holds the file, not the engine.  evict_begin() marks fs
 * evicting (under S.lock); until evict_end(), reads of its missing
 * ranges, opens and user changes of it wait (S.evicted), so nothing
 * reads a range as it is punched and no fill or write lands in it.
 * The database, the mark and the punch run with S.lock dropped.
 */
static void evict_begin(struct fstate *fs)
{
	fs->evicting = true;
}

static void evict_end(struct fstate *fs)
{
	fs->evicting = false;
	pthread_cond_broadcast(&S.evicted);
}

/*
 * Free the store's blocks of [start, end) of the file sfd of size
 * bytes, which then reads as zeros there.  A punch frees whole blocks
 * only: the block that holds the end of a file (all of a file smaller
 * than a block) would stay allocated and counted, evicted for nothing,
 * and picked again by every round.  So with cut, a range that reaches
 * the end is cut off and the file extended again, sparse: every block
 * from start's on is freed.  Only for a file nobody has open (cut): no
 * read or write of it runs while it is evicting, and a stat meanwhile
 * is shown fs->size (events_shown_attr()); an open file's reader could
 * be told the short size by the kernel and read an early end of file.
 * With S.cfg.keep_blocks the range is emptied and its blocks given back
 * to it (allocated, unwritten: zeros to the store, and no hole to a tool
 * that looks for them); a store that cannot is said once.  0 or -1 with
 * errno.
 */
static int release_bytes(int sfd, uint64_t start, uint64_t end, uint64_t size, bool cut)
{
	static _Atomic bool thin_said;

	if (S.cfg.keep_blocks) {
		if (fallocate(sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)start,
			      (off_t)(end - start)) < 0)
			return -1;
		if (fallocate(sfd, FALLOC_FL_KEEP_SIZE, (off_t)start, (off_t)(end - start)) < 0 &&
		    !atomic_exchange(&thin_said, true))
			elog_warn("cannot give an evicted range its blocks back (%s): a tool that "
				  "skips holes may copy zeros for the file's missing bytes",
				  strerror(errno));
		return 0;
	}
	if (end < size || !cut)
		return fallocate(sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				 (off_t)start, (off_t)(end - start));
	/* growing a file sparse allocates nothing: it does not fail for room */
	return ftruncate(sfd, (off_t)start) < 0 ? -1 : ftruncate(sfd, (off_t)size);
}

/*
 * Drop [start, end) of fs, which the caller marked evicting: the
 * database, the memory, the mark, then the bytes (the durability order,
 * step 2).  *ret_freed gets the allocated bytes released.  cut: the
 * file is not open, and may be cut to free its last block (see
 * release_bytes()).  Called with S.lock held; drops it while it works.
 */
static int evict_range(struct inode *in, struct fstate *fs, uint64_t start,
		       uint64_t end, bool cut, uint64_t *ret_freed)
{
	ELOCK_HELD();
	struct rangeset want = RANGESET_INIT;
	struct meta_file row;
	struct range gap;
	char mark[STORE_MARKER_MAX + 1];
	uint64_t gen, size;
	int res, sfd, n;
	bool none, got_row, have_before = false, punched = false, held = false;
	int64_t after;
	struct stat before;
	int64_t now;

	assert(fs->evicting);
	*ret_freed = 0;
	if (!end || end > fs->size)
		end = fs->size;
	size = fs->size; /* no user change while it is evicting */
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
	n = (int)store_marker(mark, fs->origin, fs->version);
	eunlock();
	sfd = res ? res : open_store(in, O_RDWR);
	/* a program running from the file: busy, as an open one */
	if (sfd == -ETXTBSY && S.cfg.front.evicting)
		sfd = -EBUSY;
	/*
	 * 0. a front end whose users open the store's files: every open
	 * from here on finds the bytes missing, and waits until sfd closes
	 */
	if (sfd >= 0 && S.cfg.front.evicting) {
		res = S.cfg.front.evicting(in, sfd, EVICT_HOLD);
		held = !res;
	}
	/*
	 * 1. forget the range in the database, durably: after a crash it is
	 * fetched again.  A new generation, so a write-behind snapshot taken
	 * before this cannot mark the range present again.
	 */
	res = sfd < 0 ? sfd : res ? res : none ? 0 : meta_get(S.cfg.meta, fs->ino, &row);
	got_row = sfd >= 0 && !none && !res;
	if (got_row) {
		rs_clear(&row.present);
		row.present = want; /* row takes it */
		want = (struct rangeset)RANGESET_INIT;
		row.state = row.present.n ? META_PARTIAL : META_PLACEHOLDER;
		row.gen = gen;
		res = meta_put(S.cfg.meta, &row);
		if (!res)
			fault_point(FAULT_EVICT_RECORDED);
	}
	elock();
	if (got_row && !res) {
		/* memory changes only once the database has it */
		struct rangeset old = fs->present;

		fs->present = row.present;
		row.present = old; /* freed with row */
		/* not all there now: a digest check waiting for it is void */
		fs->unverified = false;
		fs_set(fs, row.state);
		fs->gen = row.gen;
		inode_flags_set(in, INODE_NONRESIDENT);
	}
	if (got_row)
		meta_file_free(&row);
	rs_clear(&want);
	if (res) {
		/*
		 * a full filesystem is the evictor's to say, once a round; a
		 * file open (busy) is the policy's
		 */
		if (res != -ENOSPC && res != -EBUSY)
			elog_err("cannot record the eviction of inode %llu: %s",
				(unsigned long long)fs->ino,
				sfd < 0 ? strerror(-sfd) : meta_errmsg(S.cfg.meta));
		if (sfd >= 0)
			close(sfd);
		if (held)
			S.cfg.front.evicting(in, -1, EVICT_LET_GO);
		return res;
	}
	S.st.evictions_started++;
	eunlock();
	/* the times before the daemon's own changes (the mark, the punch) */
	have_before = fstat(sfd, &before) == 0;
	/* 2. the mark, so that a lost database never makes these zeros */
	if (!none && fsetxattr(sfd, STORE_MARKER_XATTR, mark, (size_t)n, 0) < 0) {
		/* without it a lost database would make the holes zeros: keep the bytes */
		res = -errno;
		elog_warn("cannot mark inode %llu as a placeholder: %s; not evicted",
			 (unsigned long long)fs->ino, strerror(errno));
	}
	/* 3. only now the bytes go (the file's times stay) */
	if (!res) {
		if (release_bytes(sfd, start, end, size, cut) < 0) {
			res = -errno;
		} else {
			struct timespec tv[2] = { { 0, UTIME_OMIT }, before.st_mtim };

			fault_point(FAULT_EVICT_PUNCHED);
			/* no user change runs while it is evicting: the time is the file's */
			punched = have_before && futimens(sfd, tv) == 0;
		}
	}
	now = allocated(sfd);
	/*
	 * Cut to nothing: no data block is left, and what st_blocks still
	 * counts is the file's metadata (an xattr block, where the inode
	 * has no room for the mark: ext4 with 128-byte inodes, or a user's
	 * own xattrs), which is not cache and which no eviction can free.
	 * Counted, it would keep the cache above its limit with every file
	 * evicted, and every round would pick those files again.
	 */
	if (!res && now > 0 && cut && !S.cfg.keep_blocks && start == 0 && end >= size)
		now = 0;
	after = punched ? ctime_now(sfd) : -1;
	if (held) {
		/*
		 * closed before the hold ends: an exec waiting on it must not
		 * find the daemon's writer (ETXTBSY)
		 */
		close(sfd);
		S.cfg.front.evicting(in, -1, EVICT_LET_GO);
		sfd = -1;
	}
	elock();
	/* no user change begins while it is evicting */
	ctime_kept(fs, &before, after, fs->nchanges);
	if (sfd >= 0)
		close_unlocked(sfd);
	S.st.evictions_done++;
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
	fs = writer_let_go(in);
	if (!fs || !S.cfg.meta) {
		res = -ENODATA;
	} else {
		struct evict_facts f = facts_of(fs, is_open);

		res = evict_policy_eligible(&f, true);
	}
	if (!res) {
		evict_begin(fs);
		res = evict_range(in, fs, start, end, !is_open, &freed);
		evict_end(fs);
	}
	eunlock();
	if (!res && freed)
		cache_evicted(freed);
	return res;
}

/*
 * Evict what the policy lets go of cur, the file of v, reached and
 * loaded: see evict_victim().  S.lock held; dropped while it works.
 */
static int evict_reached(struct inode *cur, const struct meta_victim *v, bool in_order,
			 uint64_t *ret_freed)
{
	ELOCK_HELD();
	struct fstate *fs = writer_let_go(cur);
	bool open = inode_is_open(cur);
	struct evict_facts f;
	int res;

	if (!fs)
		return -ENODATA;
	f = facts_of(fs, open);
	res = evict_policy_eligible(&f, false);
	if (res == EVICT_WAIT_READS) {
		/* replies being sent take microseconds: wait for them */
		struct timespec until;

		mono_after(&until, 0.1);
		while (fs->nreading && !mono_passed(&until))
			pthread_cond_timedwait(&S.reads_done, &S.lock, &until);
		f = facts_of(fs, open);
		res = evict_policy_eligible(&f, false);
		if (res == EVICT_WAIT_READS)
			res = -EBUSY;
	}
	if (res)
		return res;
	/* used since the database said otherwise: not the least recent */
	if (!open && in_order && evict_policy_used_since(fs->atime, v->atime)) {
		fs->atime_saved = fs->atime;
		persist_later(fs);
		return -EAGAIN;
	}
	if (open) {
		struct range span[2];
		uint64_t got;
		unsigned n, i;

		evict_policy_open_spans(fs->hot_lo, fs->hot_hi, fs->size, span, &n);
		evict_begin(fs);
		for (i = 0; i < n && !res; i++) {
			got = 0;
			res = evict_range(cur, fs, span[i].start, span[i].end, false, &got);
			*ret_freed += got;
		}
		evict_end(fs);
		/*
		 * The kernel's cache of it stays: its pages hold the right
		 * bytes, and an invalidation could wait on a page a read
		 * of this open file holds while that read waits for room.
		 * Its attributes go (no page is touched): its blocks, and a
		 * stat between the punch and the times put back.
		 */
		eunlock();
		front_inval((struct inval){ .kind = INVAL_ATTR, .in = cur });
		elock();
		return res;
	}
	evict_begin(fs);
	res = evict_range(cur, fs, 0, 0, true, ret_freed);
	/*
	 * Still evicting: the file is not open and cannot be opened
	 * meanwhile (events_opened waits for evict_end), so no read
	 * of it holds a page the invalidation must wait for.
	 */
	if (!res) {
		eunlock();
		front_inval((struct inval){ .kind = INVAL_DATA, .in = cur });
		elock();
	}
	evict_end(fs);
	return res;
}

/* path looked up from the root: 0 with *ret, *st (root: no st), or -errno */
static int walk(const char *path, struct stat *st, struct inode **ret)
{
	struct inode *cur = inode_root(), *next;
	char *copy, *comp, *save = NULL;
	int res = 0;

	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	/* component by component, as the kernel would: no symlink followed */
	for (comp = strtok_r(copy, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
		if (!inode_is_dir(cur) || !strcmp(comp, ".") || !strcmp(comp, "..")) {
			res = -ESTALE;
			break;
		}
		res = inode_lookup(cur, comp, st, &next);
		if (cur != inode_root())
			inode_forget(cur, 1); /* next's alias keeps it alive */
		cur = inode_root();
		if (res)
			break;
		cur = next;
	}
	free(copy);
	*ret = cur;
	return res;
}

bool walk_finds(const char *path)
{
	struct inode *in;
	struct stat st;
	int res = walk(path, &st, &in);

	if (in != inode_root())
		inode_forget(in, 1);
	return !res && in != inode_root();
}

int walk_to(const char *path, uint64_t ino, struct inode **ret)
{
	struct inode *cur;
	struct stat st;
	int res = walk(path, &st, &cur);

	if (!res && (cur == inode_root() || (ino && st.st_ino != ino) || !S_ISREG(st.st_mode)))
		res = -ESTALE;
	/*
	 * Not there (any more, or not yet): the path stays as recorded.  A
	 * rename through the mount moves the store's name first and the
	 * row's path after; forgetting the path in between made the row's
	 * rename miss it (a file whose later moves never reached the origin,
	 * a dirty file no sync found again).  The next open records a path
	 * that changed beside the mount.
	 */
	if (res == -ENOENT || res == -ENOTDIR)
		res = -ESTALE;
	if (!res)
		res = events_load(cur);
	if (res) {
		if (cur != inode_root())
			inode_forget(cur, 1);
		return res;
	}
	*ret = cur;
	return 0;
}

int evict_victim(const struct meta_victim *v, bool in_order, uint64_t *ret_freed)
{
	struct inode *cur;
	int res;

	*ret_freed = 0;
	res = walk_to(v->path, v->ino, &cur);
	if (res)
		return res;
	elock();
	res = evict_reached(cur, v, in_order, ret_freed);
	eunlock();
	inode_forget(cur, 1);
	return res;
}
