/* commit.c - fills' staging files and commits: see commit.h */
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
#include <unistd.h>
#include "events.h"
#include "cache.h"
#include "clock.h"
#include "commit.h"
#include "evrec.h"
#include "fault.h"
#include "fstate.h"
#include "hsmfs/protocol.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "ranges.h"
#include "sha256.h"
#include "state.h"

#define COPY_PIECE (256u << 10) /* copied, and its staging blocks freed, at a time */

/*
 * A staging file for one delivery of a fill event: an unnamed file in
 * STORE/.hsmfs of the file's size, which the hook writes at the file's
 * own offsets.  Only what the hook then allows is copied into the store
 * file (commit_fill), and only where no user change claimed the bytes;
 * a hook writing after its event ended writes into a file nobody reads,
 * and a hook of an older mount can never reach this mount's files.
 * Returns the descriptor or -errno.
 */
static int new_stage(void)
{
	static _Atomic unsigned long seq;
	int fd = openat(S.cfg.state_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		char name[64];

		/* no O_TMPFILE on this filesystem: a name, removed at once */
		snprintf(name, sizeof(name), "stage.%d.%lu", (int)getpid(), ++seq);
		fd = openat(S.cfg.state_fd, name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0)
			unlinkat(S.cfg.state_fd, name, 0);
	}
	return fd < 0 ? -errno : fd;
}

/*
 * Keep STAGE_POOL fresh staging files ready, created without S.lock (the
 * timer calls this), so that a delivery takes one with no file created
 * under the lock.  Each is used for one delivery and then closed.
 */
void stage_refill(void)
{
	may_block("the staging pool's refill");
	for (;;) {
		int fd;

		elock();
		if (S.nstage >= STAGE_POOL || S.stopping) {
			eunlock();
			return;
		}
		eunlock();
		fd = new_stage();
		if (fd < 0) {
			/* the timer's thread alone refills after start-up */
			static int64_t warned;
			int64_t now = mono_ms();

			if (!warned || now - warned >= 60000) {
				warned = now;
				log_err("cannot create a staging file for fills: %s; "
					"fills wait until one can be", strerror(-fd));
			}
			return;
		}
		elock();
		if (S.nstage < STAGE_POOL) {
			S.stage[S.nstage++] = fd;
			fd = -1;
		}
		eunlock();
		if (fd >= 0)
			close(fd);
	}
}

/*
 * A staging file of size bytes for one delivery: from the pool, which
 * the timer refills off the lock once it is half gone (dispatch asks),
 * else made here.  S.lock held.
 */
int open_stage(uint64_t size)
{
	ELOCK_HELD();
	int fd, res;

	/*
	 * The two file calls left under S.lock (state.h), bracketed: an
	 * unnamed file made when the pool ran dry (a burst beyond it; a
	 * fill that waited for the timer instead cost http-small a fifth
	 * of its files/s), and the size of an empty unnamed file only
	 * this daemon holds (a size, no block, no name).
	 */
	lk_block_ok_begin();
	fd = S.nstage ? S.stage[--S.nstage] : new_stage();
	res = fd < 0 ? fd : ftruncate(fd, (off_t)size) < 0 ? -errno : 0;
	lk_block_ok_end();
	if (res) {
		close_unlocked(fd);
		return res;
	}
	return fd;
}

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
		/* a fill of one piece frees its staging blocks at close anyway */
		if (end - start > COPY_PIECE)
			fallocate(from, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)pos, n);
		pos += (uint64_t)n;
	}
	free(buf);
	*ret_done = pos;
	return res;
}

void times_kept(struct fstate *fs, int fd, const struct stat *before,
		uint64_t nchanges)
{
	ELOCK_HELD();
	/*
	 * Both times: a change of the mtime alone is reported as a
	 * modification, with no mount to tell the daemon's from a user's
	 * (backend=fanotify's watch of changes, fan.c); of both, as one of
	 * attributes, which nothing watches.  The atime is the one before
	 * the fill: the daemon's own reads do not count.
	 */
	struct timespec tv[2] = { before->st_atim, before->st_mtim };
	int64_t after = -1;

	assert(!close_is_pending(fd)); /* eunlock() below would close it */

	if (fs->nchanges != nchanges || fs->changes || fs->restoring)
		return;
	fs->restoring = true;
	eunlock();
	may_block("futimens of a store file");
	if (futimens(fd, tv) == 0)
		after = ctime_now(fd);
	elock();
	fs->restoring = false;
	pthread_cond_broadcast(&S.copied);
	if (after >= 0)
		ctime_kept(fs, before, after, nchanges);
}

int64_t ctime_now(int fd)
{
	struct stat st;

	may_block("fstat of a store file");
	return fstat(fd, &st) < 0 ? -1 : ns_of(&st.st_ctim);
}

/* The ctime cannot be set back: the one before the daemon's change is shown. */
void ctime_kept(struct fstate *fs, const struct stat *before, int64_t after,
		uint64_t nchanges)
{
	ELOCK_HELD();
	int64_t was = ns_of(&before->st_ctim);

	if (after < 0 || fs->nchanges != nchanges || fs->changes)
		return;
	if (!fs->ctime_real || was != fs->ctime_real)
		fs->ctime_shown = was;
	fs->ctime_real = after;
	atomic_store_explicit(&events_any_ctime, true, memory_order_relaxed);
	persist_later(fs);
}

/*
 * What a fill of [start, end) may write: what is missing, within the
 * file's size, less every user change in flight.  0 or -ENOMEM.
 * S.lock held.
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

bool fill_completes_digest(const struct fstate *fs, uint64_t start, uint64_t end)
{
	ELOCK_HELD();
	struct range miss;

	return fs->sha256 && fs->state != META_DIRTY && start < end &&
	       !rs_missing(&fs->present, 0, start < fs->size ? start : fs->size, &miss, 1) &&
	       (end >= fs->size || !rs_missing(&fs->present, end, fs->size, &miss, 1));
}

int file_digest(int stage, int dst, const struct rangeset *todo, uint64_t size, char got[65],
		int wdst, struct rangeset *written)
{
	ELOCK_NOT_HELD();
	size_t bufsize = 256u << 10;
	char *buf = malloc(bufsize);
	struct sha256 s;
	uint64_t pos = 0;
	uint32_t i = 0;
	int res = 0;

	if (!buf)
		return -ENOMEM;
	sha256_init(&s);
	while (pos < size) {
		/* from stage inside todo's next range, from dst before it */
		bool in = todo && i < todo->n && pos >= todo->v[i].start;
		uint64_t end = in ? todo->v[i].end : todo && i < todo->n ? todo->v[i].start : size;
		size_t n = end - pos < bufsize ? (size_t)(end - pos) : bufsize;
		ssize_t r = pread(in ? stage : dst, buf, n, (off_t)pos);

		if (r < 0) {
			int e = errno;

			free(buf);
			return -e;
		}
		if (r == 0) {
			res = -ENODATA; /* shorter than size */
			break;
		}
		sha256_update(&s, buf, (size_t)r);
		/* what was hashed is what is written: the staging file may change */
		for (ssize_t w = 0; in && wdst >= 0 && w < r && !res;) {
			ssize_t wr = pwrite(wdst, buf + w, (size_t)(r - w), (off_t)(pos + (uint64_t)w));

			if (wr <= 0)
				res = wr < 0 ? -errno : -EIO;
			else
				w += wr;
		}
		if (in && wdst >= 0 && !res)
			res = rs_add(written, pos, pos + (uint64_t)r);
		if (res)
			break;
		pos += (uint64_t)r;
		if (in && pos >= todo->v[i].end)
			i++;
	}
	free(buf);
	sha256_hex(&s, got);
	return res;
}

/*
 * The chunk digests a fill of todo must pass (commit_fill): the chunks of
 * fs (c bytes, the last one short) that todo touches, their digests and
 * what was present of the file, copied under S.lock so that the check can
 * run without it.
 */
struct chunk_check {
	uint64_t c, osize;        /* chunk size; the recorded version's size */
	uint64_t fill_start, fill_end; /* what the hook filled in the staging file */
	uint64_t first, n;        /* chunk indices first .. first + n - 1 */
	uint8_t *sums;            /* n digests; a chunk past the manifest's: zeros */
	bool *known;              /* has a digest */
	bool dirty;               /* the user's file: a wrong chunk fails, no stale */
};

/* Take fs's digests for todo, which ev filled.  0 or -ENOMEM.  S.lock held. */
static int chunk_check_take(const struct fstate *fs, const struct event *ev,
			    const struct rangeset *todo, struct chunk_check *cc)
{
	ELOCK_HELD();
	uint64_t last;

	memset(cc, 0, sizeof(*cc));
	cc->c = fs->dchunk;
	cc->osize = fs->osize;
	cc->fill_start = ev->fill_start;
	cc->fill_end = ev->fill_end;
	cc->dirty = fs->state == META_DIRTY;
	cc->first = todo->v[0].start / cc->c;
	last = (todo->v[todo->n - 1].end - 1) / cc->c;
	cc->n = last - cc->first + 1;
	cc->sums = calloc(cc->n, 32);
	cc->known = calloc(cc->n, sizeof(bool));
	if (!cc->sums || !cc->known)
		return -ENOMEM;
	for (uint64_t k = 0; k < cc->n; k++)
		if (cc->first + k < fs->ndchunks) {
			memcpy(cc->sums + 32 * k, fs->dsums + 32 * (cc->first + k), 32);
			cc->known[k] = true;
		}
	return 0;
}

static void chunk_check_free(struct chunk_check *cc)
{
	free(cc->sums);
	free(cc->known);
}

/*
 * Digests before bytes, chunk by chunk, in one pass that is also the
 * copy: each chunk todo touches is read whole from the staging file (the
 * hook filled whole chunks: start_fill()), hashed, and what todo has of
 * it written to dst from the very buffer hashed, so that a hook writing
 * into its staging file after its answer cannot slip in a byte that was
 * not checked.  A chunk the hook did not fill whole, or past the recorded
 * version's size, cannot be checked: its bytes leave todo (not kept;
 * asked again).  What was written is added to done (the caller marks it
 * present only if all went well, and punches it out otherwise).  0;
 * -EBADMSG when a chunk does not match (another version at the origin);
 * -EIO for a file the user changed (its untouched chunks must match all
 * the same); or -errno.  Without S.lock.
 */
static int check_chunks(const struct chunk_check *cc, int stage, int dst,
			struct rangeset *todo, struct rangeset *done)
{
	ELOCK_NOT_HELD();
	size_t bufsize = 256u << 10;
	char *buf = malloc(bufsize);
	int res = 0;

	if (!buf)
		return -ENOMEM;
	/* nothing past the recorded version's end is the manifest's */
	if (cc->osize < UINT64_MAX)
		res = rs_remove(todo, cc->osize, UINT64_MAX);
	for (uint64_t k = 0; k < cc->n && !res; k++) {
		uint64_t cs = (cc->first + k) * cc->c, ce = cs + cc->c, pos;
		struct range none;
		struct sha256 h;
		uint8_t got[32];

		if (ce > cc->osize)
			ce = cc->osize;
		/* a chunk todo does not touch (between its ranges): nothing to do */
		if (cs >= ce ||
		    (rs_missing(todo, cs, ce, &none, 1) && none.start == cs && none.end == ce))
			continue;
		if (cs < cc->fill_start || ce > cc->fill_end) {
			res = rs_remove(todo, cs, ce); /* not filled whole: not checkable */
			continue;
		}
		sha256_init(&h);
		for (pos = cs; pos < ce && !res;) {
			size_t n = ce - pos < bufsize ? (size_t)(ce - pos) : bufsize;
			ssize_t r = pread(stage, buf, n, (off_t)pos);

			if (r <= 0) {
				res = r < 0 ? -errno : -EIO; /* short: the hook's error */
				break;
			}
			sha256_update(&h, buf, (size_t)r);
			/* todo's runs in this buffer, written from it */
			for (uint64_t at = pos, end = pos + (uint64_t)r; at < end && !res;) {
				struct range gap;
				uint64_t run_end;

				if (rs_missing(todo, at, end, &gap, 1) && gap.start == at) {
					at = gap.end; /* not todo's: a user's change, or present */
					continue;
				}
				run_end = rs_missing(todo, at, end, &gap, 1) ? gap.start : end;
				for (uint64_t w = at; w < run_end && !res;) {
					ssize_t wr = pwrite(dst, buf + (w - pos), run_end - w, (off_t)w);

					if (wr <= 0)
						res = wr < 0 ? -errno : -EIO;
					else
						w += (uint64_t)wr;
				}
				if (!res)
					res = rs_add(done, at, run_end);
				at = run_end;
			}
			pos += (uint64_t)r;
		}
		if (res)
			break;
		sha256_final(&h, got);
		if (!cc->known[k] || memcmp(got, cc->sums + 32 * k, 32))
			res = cc->dirty ? -EIO : -EBADMSG;
	}
	free(buf);
	return res;
}

/*
 * Commit an allowed fill: copy what it may write (fill_todo) from its
 * staging file into the store file and mark that present.  Returns the
 * result the caller completes the event with (0 or -errno).  The copy
 * runs with S.lock dropped; meanwhile the event is COPYING, so
 * user changes of those bytes wait for it (events_change_begin) and
 * nobody else completes it.  Called with S.lock held, returns with it
 * held.
 */
int commit_fill(struct event *ev)
{
	ELOCK_HELD();
	struct rangeset todo = RANGESET_INIT, done = RANGESET_INIT;
	struct fstate *fs = ev->fs;
	int stage = ev->stage_fd, dst = fs->rw_fd, res;
	struct timespec now;
	int64_t b;

	uint64_t nchanges = fs->nchanges, size = fs->size;
	struct chunk_check cc = { 0 };
	struct stat before;
	bool have_before, check, chunked, chunk_bad = false, copied = false, touched = false;
	char want[65] = "", got[65] = "";

	res = fill_todo(fs, ev->fill_start, ev->fill_end, &todo);
	check = !res && todo.n && fill_completes_digest(fs, ev->fill_start, ev->fill_end);
	if (check)
		snprintf(want, sizeof(want), "%s", fs->sha256);
	chunked = !res && todo.n && fs->dsums;
	if (chunked)
		res = chunk_check_take(fs, ev, &todo, &cc);
	ev_set(ev, EV_COPYING);
	eunlock();
	/* a file not open (a prefetch): its store file is opened here, not under S.lock */
	if (dst < 0 && !res && todo.n && (dst = open_store(fs->in, O_RDWR)) < 0)
		res = dst;
	have_before = dst >= 0 && fstat(dst, &before) == 0;
	/*
	 * Never past the store file's end: a fill never makes a file
	 * longer, and one shorter than its recorded size was cut by a user
	 * the engine has not heard of yet (backend=fanotify: the kernel
	 * says a truncate(2) after it is made, and its pre-content event,
	 * the page at the new end, does not say it is one).  A fill copied
	 * past that end would grow the file back with the origin's bytes.
	 */
	if (have_before && (uint64_t)before.st_size < size && todo.n &&
	    rs_remove(&todo, (uint64_t)before.st_size, UINT64_MAX) && !res)
		res = -ENOMEM;
	/*
	 * Digests before bytes: each chunk, then a fill that completes the
	 * file; what is checked is what is written (a hook may still write
	 * into its staging file), and written is not present until the end.
	 */
	if (!res && chunked) {
		uint64_t asked = rs_total(&todo);

		res = check_chunks(&cc, stage, dst, &todo, &done);
		if (res == -EBADMSG)
			chunk_bad = true;
		copied = true;
		/* chunks it could not check left: it no longer completes the file */
		if (rs_total(&todo) != asked)
			check = false;
	}
	if (!res && check) {
		/* chunked: todo is in dst already, all of it is read from there */
		res = copied ? file_digest(-1, dst, NULL, size, got, -1, NULL) :
			       file_digest(stage, dst, &todo, size, got, dst, &done);
		copied = true;
		if (!res && strcmp(got, want))
			res = -EBADMSG;
		else if (res == -ENODATA)
			res = -EIO; /* the hook wrote less than it said: its error, not the file's */
	}
	for (uint32_t i = 0; !res && !copied && i < todo.n; i++) {
		uint64_t upto;

		res = copy_stage(stage, dst, todo.v[i].start, todo.v[i].end, &upto);
		if (upto > todo.v[i].start && rs_add(&done, todo.v[i].start, upto) && !res)
			res = -ENOMEM;
	}
	if (res && copied && done.n) {
		/*
		 * Refused whole: not a byte kept (never present, and not left
		 * in the store: a range reaching the end frees its last block
		 * too); the times are put back below.
		 */
		for (uint32_t i = 0; i < done.n; i++) {
			uint64_t end = done.v[i].end >= size ? (size + 4095) & ~4095ULL :
							       done.v[i].end;

			fallocate(dst, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				  (off_t)done.v[i].start, (off_t)(end - done.v[i].start));
		}
		rs_clear(&done);
		touched = true;
	}
	if (done.n)
		fault_point(FAULT_FILL_COPIED);
	b = dst >= 0 ? allocated(dst) : -1;
	elock();
	/* through dst before it is given away: times_kept() unlocks, which
	 * closes what close_unlocked() below was given */
	if (have_before && (done.n || touched))
		times_kept(fs, dst, &before, nchanges);
	if (dst >= 0 && dst != fs->rw_fd) {
		/* kept for the file's next fills (drop_rw_fd) */
		if (fs->rw_fd < 0)
			fs->rw_fd = dst;
		else
			close_unlocked(dst);
	}
	if (done.n) {
		/*
		 * The kernel keeps attributes long: the blocks a stat shows
		 * changed, and one taken while the bytes were copied showed
		 * the store's times before times_kept() put them back.  Still
		 * COPYING: nothing completes the event meanwhile.
		 */
		eunlock();
		front_inval((struct inval){ .kind = INVAL_ATTR, .in = fs->in });
		elock();
	}
	ev_set(ev, EV_FILLED); /* copied; the caller completes it */
	pthread_cond_broadcast(&S.copied);
	for (uint32_t i = 0; i < done.n; i++)
		if (rs_add(&fs->present, done.v[i].start, done.v[i].end) && !res)
			res = -ENOMEM; /* copied but not counted: fetched again */
	if (done.n) {
		mono_now(&now);
		S.lat[lat_bucket((uint64_t)((now.tv_sec - ev->born.tv_sec) * 1000000 +
					    (now.tv_nsec - ev->born.tv_nsec) / 1000))]++;
		S.st.filled_bytes += rs_total(&done);
		if (b >= 0 && fs->state != META_DIRTY) {
			cache_account(b - (int64_t)fs->blocks);
			fs->blocks = (uint64_t)b;
		}
		fs->atime = now_ms();
		present_changed(fs);
		if (check && !res && fs->unverified) {
			/* checked above, before any byte was kept */
			fs->unverified = false;
			fs_set(fs, META_RESIDENT);
		}
		persist_later(fs);
	}
	if (res == -EBADMSG) {
		char path[HSMFS_MAX_PATH + 1];

		fstate_set_flag(fs, META_F_STALE, true, false);
		if (inode_path(fs->in, path, sizeof(path)) < 0)
			snprintf(path, sizeof(path), "inode %llu", (unsigned long long)fs->ino);
		if (chunk_bad)
			elog_err("'%s': a chunk of [%llu, %llu) does not match its manifest's "
				 "chunk_sha256: refused before a byte was kept, stale; import it again",
				 path, (unsigned long long)ev->fill_start,
				 (unsigned long long)ev->fill_end);
		else
			elog_err("'%s' does not match its manifest's sha256 (%s, manifest %s): refused "
				 "before a byte was kept, stale; import it again", path, got, want);
		res = -EIO;
	}
	if (chunked)
		chunk_check_free(&cc);
	rs_clear(&todo);
	rs_clear(&done);
	return res;
}
