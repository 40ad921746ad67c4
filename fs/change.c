/* change.c - what users do to a file through the mount: see change.h */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "events.h"
#include "aqueue.h"
#include "cache.h"
#include "change.h"
#include "clock.h"
#include "evict-policy.h"
#include "evrec.h"
#include "fstate.h"
#include "inode.h"
#include "journal.h"
#include "log.h"
#include "ranges.h"
#include "saved.h"
#include "state.h"

static void change_unlink(struct events_change *c);

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
	fstate_set_flag(fs, META_F_STALE, true, false); /* committed with the change */
	fs->sticky_err = -EIO;
}

static void claim(struct fstate *fs, uint64_t start, uint64_t end, uint64_t size)
{
	claim_flags(fs, start, end, size, 0);
}

/*
 * After a user's change of fs recorded its ranges (res: how that went):
 * the new size, dirty, the read-path bit, queued for the writer.
 * S.lock held.
 */
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

/*
 * A user's change of in's size from old_size to new_size: the bytes past
 * a smaller one go, a larger one's new bytes are the user's (zeros of
 * our own).  S.lock held.
 */
static void resized(struct fstate *fs, uint64_t old_size, uint64_t new_size)
{
	int res;

	ELOCK_HELD();
	if (new_size < old_size)
		res = rs_remove(&fs->present, new_size, UINT64_MAX);
	else
		res = rs_add(&fs->present, old_size, new_size);
	user_changed(fs, res, new_size < old_size ? 0 : old_size,
		     new_size < old_size ? 0 : new_size, new_size);
}

void events_truncated(struct inode *in, struct events_change *c, uint64_t old_size,
		      uint64_t new_size)
{
	struct fstate *fs = change_done(in, c);

	if (!fs)
		return;
	resized(fs, old_size, new_size);
	eunlock();
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

void events_changed_unseen(struct inode *in, uint64_t size, bool wrote)
{
	struct fstate *fs = inode_state(in);

	if (!fs)
		return;
	elock();
	if (size != fs->size || wrote) {
		fs->nchanges++; /* a change the daemon never saw: no snapshot before it holds */
		resized(fs, fs->size, size);
	}
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
