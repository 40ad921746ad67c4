/* writeback.c - see writeback.h */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "events.h"
#include "commit.h"
#include "fstate.h"
#include "store.h"
#include "hooks.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "fault.h"
#include "fdlimit.h"
#include "ranges.h"
#include "clock.h"
#include "evrec.h"
#include "state.h"
#include "writeback.h"
#include "saved.h"

struct snap;
static int commit_snaps(const struct snap *snaps, size_t n, char *why, size_t whysize);

/*
 * The claims of the user's changes (saved.h) that batch seq committed:
 * the ring's tail moves past them.  A failed batch's stay, and every
 * claim after them: a daemon taking over applies them again, which is
 * the same done twice.  S.lock held.
 */
static void claims_committed(uint64_t seq)
{
	struct saved_head *h = saved_head();

	ELOCK_HELD();
	while (h && h->claims_tail < h->claims_head && saved_claim(h->claims_tail)->batch <= seq)
		h->claims_tail++;
}

static bool write_batch(struct snap *snaps, size_t cap);

/* What the writer commits of one file, taken under S.lock. */
struct snap {
	struct fstate *fs;
	struct inode *in;   /* held since persist_later() */
	uint64_t ino;       /* 0: not to be committed */
	uint32_t state, flags;
	uint64_t size, osize, gen, blocks;
	uint64_t nchanges;   /* user changes begun by then (ctime_kept) */
	int64_t atime;
	int64_t ctime_real, ctime_shown;
	struct rangeset rs;
	bool fd_retry;      /* no descriptor to sync it: queued again */
	bool verify;        /* complete and unverified: check the digest */
	char sha256[65];    /* the manifest's, when verify */
	bool vchanged;      /* origin and version (owned copies) recorded too */
	char *origin, *version;
	bool newrow;        /* made on the mount: its row is inserted (path owned) */
	char *path;
};

/*
 * A file whose last range arrived and whose manifest gave a sha256:
 * the digest of its store file decides.  Equal: the snapshot commits it
 * resident.  Different: it never becomes resident; it commits with
 * nothing present and stale, reads fail with EIO (its bytes served
 * before the check came from the hook, as every partial read's do) until
 * it is imported again.  0, or -errno when the file cannot be read.
 */
static int verify(struct snap *sn, int fd)
{
	char got[65];
	struct fstate *fs = sn->fs;
	int res = file_digest(-1, fd, NULL, sn->size, got, -1, NULL);

	if (res && res != -ENODATA)
		return res; /* a short file is checked: its digest differs */
	elock();
	if (!fs->unverified || fs->state == META_DIRTY || fs->gen != sn->gen) {
		/* changed meanwhile (written, evicted, reloaded): this snapshot is old */
		sn->verify = false;
		eunlock();
		return 0;
	}
	fs->unverified = false;
	if (!strcmp(got, sn->sha256)) {
		fs_set(fs, META_RESIDENT);
		sn->state = META_RESIDENT;
		eunlock();
		return 0;
	}
	fstate_set_flag(fs, META_F_STALE, true, false);
	rs_clear(&fs->present);
	fs_set(fs, META_PLACEHOLDER);
	inode_flags_set(fs->in, INODE_NONRESIDENT);
	sn->state = META_PLACEHOLDER;
	sn->flags = fs->flags;
	rs_clear(&sn->rs);
	eunlock();
	elog_err("inode %llu does not match its manifest's sha256 (%s, manifest %s): stale, "
		"not resident; import it again", (unsigned long long)sn->ino, got, sn->sha256);
	/* what the kernel cached of it must be read again, and fail */
	front_inval((struct inval){ .kind = INVAL_DATA, .in = sn->in });
	return 0;
}

/* One transaction for snaps[0..n).  0 or -errno, why gets the message. */
static int commit_snaps(const struct snap *snaps, size_t n, char *why, size_t whysize)
{
	int res = meta_begin(S.cfg.meta);
	size_t i;

	for (i = 0; i < n && !res; i++) {
		const struct snap *sn = &snaps[i];

		if (sn->ino && sn->newrow) {
			struct meta_file f = {
				.ino = sn->ino, .size = sn->size, .osize = sn->osize,
				.state = sn->state, .flags = sn->flags, .origin = sn->origin,
				.version = sn->version, .present = sn->rs, .atime = sn->atime,
				.gen = sn->gen, .path = sn->path, .blocks = sn->blocks,
				.mode = 0644,
			};

			res = meta_put(S.cfg.meta, &f);
			continue;
		}
		if (sn->ino)
			res = meta_set_present(S.cfg.meta, sn->ino, &sn->rs, sn->state,
					       sn->flags, sn->size, sn->osize, sn->gen, sn->atime,
					       sn->blocks, sn->ctime_real, sn->ctime_shown);
		/* an archive's result, in the same transaction as its state */
		if (sn->ino && !res && sn->vchanged)
			res = meta_set_version(S.cfg.meta, sn->ino, sn->gen, sn->origin,
					       sn->version);
		/* the row went, or a newer generation is there */
		if (res == -ENOENT)
			res = 0;
	}
	if (!res)
		res = meta_commit(S.cfg.meta);
	if (res) {
		snprintf(why, whysize, "%s", meta_errmsg(S.cfg.meta));
		meta_rollback(S.cfg.meta);
	}
	return res;
}

/*
 * The writer: snapshot ranges, make the data durable, then commit the
 * snapshot.  Taking the snapshot first is what makes it safe: every
 * range in it was written before the fdatasync() that follows.  The
 * queue is taken and its snapshot made in one hold of S.lock: a file
 * stays queued until its snapshot is made, so an fsync that finds it
 * queued (events_fsync) knows the batch that will hold it is the next
 * one taken.  snaps has room for cap files (S.nqueued at most).  Called
 * with S.lock held, returns without it.
 */
static bool write_batch(struct snap *snaps, size_t cap)
{
	ELOCK_HELD();
	struct fstate *fs, *next, *batch = S.wqueue;
	size_t n = 0, i;

	assert(S.nqueued <= cap);
	S.wqueue = NULL;
	S.nqueued = 0;
	for (fs = batch, i = 0; fs; fs = next, i++) {
		next = fs->wnext;
		snaps[i] = (struct snap){ .fs = fs };
		fs->wbatch = S.batch_taken; /* events_reload() */
		snaps[i].in = fs->in;
		snaps[i].ino = fs->ino;
		snaps[i].state = fs->state;
		snaps[i].flags = fs->flags;
		snaps[i].size = fs->size;
		snaps[i].osize = fs->osize;
		snaps[i].gen = fs->gen;
		snaps[i].nchanges = fs->nchanges;
		snaps[i].blocks = fs->blocks;
		snaps[i].atime = fs->atime;
		snaps[i].ctime_real = fs->ctime_real;
		snaps[i].ctime_shown = fs->ctime_shown;
		if (rs_copy(&snaps[i].rs, &fs->present))
			snaps[i].ino = 0; /* skipped: retried on the next change */
		if (fs->unverified && fs->sha256 && fs->state != META_DIRTY) {
			snaps[i].verify = true;
			snprintf(snaps[i].sha256, sizeof(snaps[i].sha256), "%s", fs->sha256);
		}
		if (fs->vchanged || fs->newrow) {
			char path[HSMFS_MAX_PATH + 1];

			snaps[i].vchanged = fs->vchanged;
			snaps[i].newrow = fs->newrow;
			snaps[i].origin = fs->origin ? strdup(fs->origin) : NULL;
			snaps[i].version = fs->version ? strdup(fs->version) : NULL;
			snaps[i].path = fs->newrow && inode_path(fs->in, path, sizeof(path)) > 0 ?
						strdup(path) : NULL;
			if ((fs->origin && !snaps[i].origin) || (fs->version && !snaps[i].version))
				snaps[i].ino = 0; /* no memory: retried on the next change */
		}
		if (fs->gone)
			snaps[i].ino = 0; /* removed: its row went, never written again */
		fs->queued = false; /* from here on persist_later may queue it again */
	}
	n = i;
	eunlock();
	fault_delay(FAULT_BATCH_TAKEN);

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
		else if (fault_hit(FAULT_DATASYNC) || (may_block("fdatasync"), fdatasync(dfd)) < 0)
			err = errno ? -errno : -EIO;
		else if (snaps[i].verify)
			err = verify(&snaps[i], dfd);
		if (dfd >= 0) {
			fault_delay(FAULT_BATCH_SYNCED);
			close(dfd);
		}
		if (err == -EMFILE || err == -ENFILE) {
			int64_t now = mono_ms();
			bool waited;

			fdlimit_note(err);
			elock();
			if (!snaps[i].fs->fd_wait_since)
				snaps[i].fs->fd_wait_since = now;
			waited = now - snaps[i].fs->fd_wait_since >= WRITEBACK_FD_WAIT_MS;
			if (waited)
				snaps[i].fs->fd_wait_since = 0;
			eunlock();
			if (!waited) {
				/* not committed, not failed: queued again below */
				snaps[i].ino = 0;
				snaps[i].fd_retry = true;
				continue;
			}
		}
		if (err == -ENOENT || err == -ESTALE) {
			snaps[i].ino = 0; /* gone from the store: nothing to record */
		} else if (err) {
			elog_err("cannot sync the data of inode %llu: %s; its ranges are not committed",
				(unsigned long long)snaps[i].ino, strerror(-err));
			snaps[i].ino = 0;
			elock();
			snaps[i].fs->sticky_err = -EIO;
			eunlock();
		}
	}
	fault_point(FAULT_CRASH_BEFORE_COMMIT);
	if (S.cfg.meta) {
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
		if (failed && (!S.write_failing || S.stopping))
			elog_err("cannot commit present ranges: %s%s", why,
				S.stopping ? "; their bytes will be fetched again" :
					     "; retrying every second");
		else if (!failed && S.write_failing)
			elog_info("present ranges committed again");
		S.write_failing = failed;
		for (i = 0; failed && !S.stopping && i < n; i++)
			if (snaps[i].ino)
				persist_later(snaps[i].fs);
		/* out of descriptors: again, failed batch or not (fsync waits) */
		bool was_short = S.fds_short;

		S.fds_short = false;
		for (i = 0; i < n; i++) {
			if (snaps[i].fd_retry && !S.stopping) {
				persist_later(snaps[i].fs);
				if (!S.fds_short && !was_short)
					elog_warn("out of descriptors syncing inode %llu: waiting for "
						  "one, up to %d s", (unsigned long long)snaps[i].fs->ino,
						  WRITEBACK_FD_WAIT_MS / 1000);
				S.fds_short = true;
			} else {
				snaps[i].fs->fd_wait_since = 0; /* had one */
			}
		}
		/* recorded: what an archive or a create left is in the row now */
		for (i = 0; !failed && i < n; i++) {
			struct fstate *f = snaps[i].fs;

			if (!snaps[i].ino)
				continue;
			if (snaps[i].newrow)
				f->newrow = false;
			if (snaps[i].vchanged && !strcmp(f->version ? f->version : "",
							snaps[i].version ? snaps[i].version : "") &&
			    !strcmp(f->origin ? f->origin : "",
				    snaps[i].origin ? snaps[i].origin : ""))
				f->vchanged = false;
		}
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
				struct stat before;

				inode_proc_path(fd, path);
				/* the daemon's own change: the ctime shown stays */
				if (fstat(fd, &before) == 0 &&
				    removexattr(path, STORE_MARKER_XATTR) == 0) {
					int64_t after = ctime_now(fd);

					elock();
					ctime_kept(sn->fs, &before, after, sn->nchanges);
					eunlock();
					/* a stat meanwhile showed the store's new ctime */
					front_inval((struct inval){ .kind = INVAL_ATTR,
								    .in = sn->in });
				}
				inode_fd_put(sn->in);
			}
		}
		/*
		 * A row inserted under the path its snapshot had: a rename since
		 * (whose own update found no row) is caught up with here
		 */
		if (sn->ino && sn->newrow && sn->path && !failed) {
			char now[HSMFS_MAX_PATH + 1];

			if (inode_path(sn->in, now, sizeof(now)) > 0 && strcmp(now, sn->path))
				meta_set_path(S.cfg.meta, sn->ino, now);
		}
		rs_clear(&sn->rs);
		free(sn->origin);
		free(sn->version);
		free(sn->path);
		inode_release(sn->in);
	}
	return !failed;
}

void *writer_main(void *arg)
{
	struct snap *snaps = NULL;
	size_t cap = 0;
	struct timespec ts;
	uint64_t seq;
	bool ok;

	elock();
	for (;;) {
		while (!S.wqueue && !S.stopping)
			pthread_cond_wait(&S.wcond, &S.lock);
		if (!S.wqueue && S.stopping)
			break;
		/* gather for a moment: one transaction for many fills */
		if (!S.stopping && !S.urgent) {
			mono_after(&ts, 0.05);
			pthread_cond_timedwait(&S.wcond, &S.lock, &ts);
		}
		/* room for the snapshot, allocated without S.lock */
		while (cap < S.nqueued) {
			size_t want = S.nqueued + S.nqueued / 4;
			struct snap *p;

			eunlock();
			p = realloc(snaps, want * sizeof(*p));
			elock();
			if (!p)
				break;
			snaps = p;
			cap = want;
		}
		if (cap < S.nqueued) {
			eunlock();
			elog_err("out of memory writing present ranges, retrying in a second");
			elock();
			mono_after(&ts, 1);
			while (!S.stopping && !mono_passed(&ts))
				pthread_cond_timedwait(&S.wcond, &S.lock, &ts);
			if (!S.stopping)
				continue;
			break; /* their ranges are fetched again */
		}
		S.writing = true;
		S.urgent = false;
		seq = ++S.batch_taken;
		ok = write_batch(snaps, cap);
		if (cap > 4096) {
			/* a burst's room (a listing's thousands of files) is not kept */
			free(snaps);
			snaps = NULL;
			cap = 0;
		}
		elock();
		S.writing = false;
		S.batch_done = seq;
		if (!ok)
			S.batch_failed = seq;
		else
			claims_committed(seq);
		pthread_cond_broadcast(&S.wdone);
		if (S.fds_short && !S.write_failing) {
			/* descriptors are freed as users close: soon again */
			mono_after(&ts, WRITEBACK_FD_RETRY_MS / 1000.0);
			while (!S.stopping && !mono_passed(&ts))
				pthread_cond_timedwait(&S.wcond, &S.lock, &ts);
		}
		if (S.write_failing) {
			mono_after(&ts, 1);
			while (!S.stopping && !mono_passed(&ts))
				pthread_cond_timedwait(&S.wcond, &S.lock, &ts);
		}
	}
	eunlock();
	free(snaps);
	return NULL;
}

void writeback_sync(void)
{
	struct timespec deadline;

	mono_after(&deadline, 5);
	elock();
	while ((S.wqueue || S.writing) && S.writer_running && !S.stopping &&
	       !S.write_failing &&
	       pthread_cond_timedwait(&S.wdone, &S.lock, &deadline) != ETIMEDOUT)
		;
	eunlock();
}

int writeback_next_batch(void)
{
	ELOCK_HELD();
	uint64_t ticket = S.batch_taken + 1;

	S.urgent = true;
	pthread_cond_signal(&S.wcond);
	while (S.batch_done < ticket && S.writer_running && !S.stopping)
		pthread_cond_wait(&S.wdone, &S.lock);
	return S.batch_done < ticket || S.batch_failed >= ticket ? -EIO : 0;
}

int events_fsync(struct inode *in)
{
	struct fstate *fs = inode_state(in);
	int res;

	if (!fs || !S.cfg.meta)
		return 0;
	elock();
	/*
	 * Durability order, step 4: the batch taken after this point holds
	 * fs as it is now (persist_later queues it, or it is queued
	 * already); the caller's fsync returns once that batch committed.
	 */
	persist_later(fs);
	res = writeback_next_batch();
	/* found with no descriptor to sync it: queued again, waited for
	 * until it is had or the writer gives up (sticky_err) */
	while (!res && fs->fd_wait_since && fs->queued && !fs->sticky_err && S.writer_running &&
	       !S.stopping)
		res = writeback_next_batch();
	if (fs->sticky_err) {
		res = fs->sticky_err;
		fs->sticky_err = 0;
	}
	eunlock();
	return res;
}
