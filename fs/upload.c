/* upload.c - the archive of one file: see upload.h */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "events.h"
#include "aqueue.h"
#include "cache.h"
#include "clock.h"
#include "decide.h"
#include "engine.h"
#include "event.h"
#include "fault.h"
#include "fstate.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "park.h"
#include "route.h"
#include "upload.h"
#include "writeback.h"

#define SNAP_TRIES 8          /* snapshots a busy file gets before it waits */
#define RATE_SECS 10          /* the upload rate's window (stats) */

/* bytes the origin took, per second of the last RATE_SECS (rate_add) */
static struct {
	uint64_t rate_bytes[RATE_SECS];
	int64_t rate_sec[RATE_SECS];
} R;

/* The origin took bytes of an upload that ended now.  S.lock held. */
static void rate_add(uint64_t bytes)
{
	ELOCK_HELD();
	int64_t sec = mono_ms() / 1000;
	unsigned i = (unsigned)(sec % RATE_SECS);

	if (R.rate_sec[i] != sec) {
		R.rate_sec[i] = sec;
		R.rate_bytes[i] = 0;
	}
	R.rate_bytes[i] += bytes;
}

uint64_t upload_rate(void)
{
	ELOCK_HELD();
	int64_t sec = mono_ms() / 1000;
	uint64_t sum = 0;

	for (unsigned i = 0; i < RATE_SECS; i++)
		if (R.rate_sec[i] > sec - RATE_SECS)
			sum += R.rate_bytes[i];
	return sum / RATE_SECS;
}

/* Copy size bytes of src into dst (a clone where the store can). */
static int clone_or_copy(int dst, int src, uint64_t size)
{
	char buf[65536];
	off_t off = 0;

	may_block("a snapshot's clone");
	if (ioctl(dst, FICLONE, src) == 0)
		return 0;
	while ((uint64_t)off < size) {
		size_t want = size - off > (1u << 30) ? (1u << 30) : (size_t)(size - off);
		ssize_t n = copy_file_range(src, &off, dst, NULL, want, 0);

		if (n > 0)
			continue;
		if (n == 0)
			return -ENODATA; /* shorter than it said: changed */
		if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
			return -errno;
		/* plain reads and writes */
		while ((uint64_t)off < size) {
			ssize_t r = pread(src, buf, sizeof(buf) < size - off ? sizeof(buf) :
					  (size_t)(size - off), off);

			if (r <= 0)
				return r < 0 ? -errno : -ENODATA;
			if (pwrite(dst, buf, (size_t)r, off) != r)
				return -errno;
			off += r;
		}
	}
	return 0;
}

/* What a snapshot was taken of. */
struct snapshot {
	uint64_t nchanges, gen, size;
	int fd;             /* read-only, or -1 */
	uint32_t mode;
	int64_t mtime;
	uint64_t blocks;    /* the store file's allocated bytes then */
};

/*
 * Is fs the file its snapshot sn was taken of, unchanged since?
 * S.lock held.
 */
static bool unchanged(const struct fstate *fs, const struct snapshot *sn)
{
	ELOCK_HELD();
	return !fs->changes && !fs->unseen && fs->nchanges == sn->nchanges &&
	       fs->gen == sn->gen && fs->size == sn->size && fs->state == META_DIRTY &&
	       !fs->gone;
}

/*
 * Take a stable snapshot of fs: 0, ARCH_AGAIN (changing now: later),
 * ARCH_ROOM (the store has no room for a copy, even after a round of
 * eviction), or -errno.  Every byte is present (take_all first).
 * Without S.lock.
 */
static int take_snapshot(struct fstate *fs, struct snapshot *sn)
{
	struct inode *in = fs->in;
	char path[32];
	struct stat st;
	int sfd, tmp, res;
	bool room_asked = false;

	for (int tries = 0; tries < SNAP_TRIES; tries++) {
		elock();
		if (fs->state != META_DIRTY || fs->gone) {
			eunlock();
			return 0; /* clean already (a reload), or gone */
		}
		if (fs->changes || fs->unseen || !rs_contains(&fs->present, 0, fs->size)) {
			eunlock();
			return ARCH_AGAIN;
		}
		sn->nchanges = fs->nchanges;
		sn->gen = fs->gen;
		sn->size = fs->size;
		eunlock();
		sfd = open_store(in, O_RDONLY);
		if (sfd < 0)
			return sfd;
		tmp = openat(S.cfg.state_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (tmp < 0) {
			res = -errno;
			close(sfd);
			return res;
		}
		res = clone_or_copy(tmp, sfd, sn->size);
		if (res == -ENOSPC || res == -EDQUOT) {
			/* a copy needs room (a clone does not): a round of eviction, once */
			close(sfd);
			close(tmp);
			if (room_asked || cache_make_room(sn->size))
				return ARCH_ROOM;
			room_asked = true;
			continue;
		}
		if (!res && fstat(sfd, &st) < 0)
			res = -errno;
		/*
		 * The clean state's commit syncs the store file's data first
		 * (durability step 1): its writeback starts now, beside the
		 * upload, rather than after it.
		 */
		if (!res)
			(void)sync_file_range(sfd, 0, 0, SYNC_FILE_RANGE_WRITE);
		close(sfd);
		if (!res && (uint64_t)st.st_size != sn->size)
			res = -ENODATA;
		elock();
		if (res == -ENODATA || (!res && !unchanged(fs, sn))) {
			/* a change began meanwhile: its bytes may be half in */
			eunlock();
			close(tmp);
			continue;
		}
		eunlock();
		if (res) {
			close(tmp);
			return res;
		}
		snprintf(path, sizeof(path), "/proc/self/fd/%d", tmp);
		sn->fd = open(path, O_RDONLY | O_CLOEXEC);
		res = sn->fd < 0 ? -errno : 0;
		close(tmp);
		if (res)
			return res;
		sn->mode = st.st_mode & 07777;
		sn->mtime = st.st_mtim.tv_sec;
		sn->blocks = (uint64_t)st.st_blocks * 512;
		fault_point(FAULT_ARCHIVE_SNAPSHOT);
		return 0;
	}
	return ARCH_AGAIN;
}

int answer_of(struct event *ev, char **ret_version, char **ret_origin,
		     bool *ret_uploaded)
{
	ELOCK_HELD();
	int res;

	ev->waiters++; /* ours, beside wait_event's: the answer is read after */
	res = wait_event(ev, NULL);
	if (ret_uploaded)
		*ret_uploaded = ev->uploaded && ev->new_version;
	*ret_version = ev->new_version;
	*ret_origin = ev->new_origin;
	ev->new_version = ev->new_origin = NULL;
	put_ref(ev);
	return res == EV_TIMEOUT ? -ETIMEDOUT : res;
}

/*
 * Did the archive hook answer that the origin refused the upload (so
 * nothing of it landed), rather than the answer being lost, late or
 * unknown?  A conflict, no right, no room, too big, a server's error
 * (hsmfs-hooks(7), ARCHIVE).  A timeout, an I/O error or a hook gone
 * say nothing of what the origin holds.
 */
static bool refused(int res)
{
	return res == -ESTALE || res == -EACCES || res == -EPERM || res == -ENOSPC ||
	       res == -EDQUOT || res == -EFBIG || res == -EAGAIN || res == -EINVAL ||
	       res == -ENAMETOOLONG;
}

/*
 * An upload to path ended without being recorded (meta.h: landings).
 * known: nothing of it is left there unrecorded (refused by the origin,
 * or its removal recorded): the landing goes.  Else, if the file was
 * removed, or is a new one renamed (those left its landing to this),
 * what it may have made there is removed by the namer; if it is still
 * there, or was renamed with an object recorded (its move is recorded),
 * the landing stays: the next upload there replaces what it finds, and
 * the move is not conditional on the version.  Without S.lock.
 */
static void settle_landing(struct fstate *fs, const char *path, bool known)
{
	char now[HSMFS_MAX_PATH + 1];
	bool left, fresh;
	int res;

	elock();
	left = fs->gone || inode_path(fs->in, now, sizeof(now)) < 0 || strcmp(now, path);
	fresh = fs->flags & META_F_NEW;
	eunlock();
	/*
	 * a file with an object recorded and renamed: its move (recorded
	 * then) goes first, unconditionally while the landing is there
	 */
	if (!known && (!left || (!fresh && !fs->gone)))
		return;
	res = known ? meta_landing_clear(S.cfg.meta, fs->ino) :
		      meta_landing_gone(S.cfg.meta, fs->ino);
	if (res)
		elog_warn("cannot settle where '%s' was uploaded: %s", path,
			  meta_errmsg(S.cfg.meta));
	else if (!known)
		archive_names_wanted();
}

/* Are name ops queued for the origin?  Without S.lock. */
static bool names_queued(void)
{
	uint64_t n = 0;

	return !meta_op_count(S.cfg.meta, &n) && n;
}

int archive_one(struct fstate *fs)
{
	struct inode *in = fs->in;
	struct snapshot sn = { .fd = -1 };
	struct event *ev;
	char *version = NULL, *origin = NULL;
	char path[HSMFS_MAX_PATH + 1]; /* where it goes (its path then) */
	char now[HSMFS_MAX_PATH + 1];
	uint64_t size;
	bool held = false, all, overwrite, uploaded, landing, landed_here = false, recorded, fresh;
	int res, failed;

	elock();
	if (fs->gone || fs->state != META_DIRTY) {
		eunlock();
		return 0; /* removed, or clean already (a reload) */
	}
	res = inode_path(in, path, sizeof(path));
	eunlock();
	if (res < 0)
		path[0] = 0;
	/*
	 * 1. the names first: a removal of its path or a rename onto it
	 * (another file's, one whose upload was in flight) is applied at the
	 * origin before its bytes go there, and so is a move of this file
	 * (recorded for an upload of it that failed or was never answered:
	 * applied after this one, it would move this one's object to a name
	 * the file left); checked before anything is fetched or copied for
	 * it.  An op recorded after this check is of this file itself (its
	 * removal, or a rename onto it, removes it): fs->gone below; or the
	 * removal of what another file's upload made here, recorded when it
	 * ended after that file's removal (below), which the namer does not
	 * apply to this file's object (namer.h).
	 */
	{
		bool pending = false;

		if (!meta_op_before(S.cfg.meta, path, fs->ino, &pending) && pending) {
			archive_names_kick();
			return ARCH_NAMES;
		}
	}
	/* 2. every byte present: what is missing of the recorded version comes first */
	elock();
	if (!have_archive_hook(in)) {
		eunlock();
		return -ENOTCONN;
	}
	size = fs->size;
	all = rs_contains(&fs->present, 0, size);
	eunlock();
	if (!all) {
		res = events_pre_access(in, 0, size, NULL, &held);
		if (held)
			events_read_done(in);
		if (res)
			return res;
	}
	/* 3. a stable snapshot */
	res = take_snapshot(fs, &sn);
	if (res || sn.fd < 0)
		return res;
	/*
	 * 4. the archive hook uploads it.  Where it goes is recorded first
	 * (durably), so that what it makes is found again if its answer is
	 * never read (meta.h: landings); an earlier unanswered one there is
	 * replaced, not a conflict.
	 */
	landing = path[0] != 0;
	if (landing) {
		res = meta_begin(S.cfg.meta);
		if (!res)
			res = meta_landing_set(S.cfg.meta, fs->ino, path, &landed_here);
		if (!res)
			res = meta_commit(S.cfg.meta);
		if (res) {
			elog_err("cannot record where '%s' is uploaded: %s", path,
				 meta_errmsg(S.cfg.meta));
			meta_rollback(S.cfg.meta);
			close(sn.fd);
			return -EIO;
		}
		archive_names_wanted(); /* an earlier landing elsewhere: its removal */
	}
	elock();
	if (!have_archive_hook(in)) {
		eunlock();
		close(sn.fd);
		return -ENOTCONN;
	}
	if (landing && (inode_path(in, now, sizeof(now)) < 0 || strcmp(now, path))) {
		/* renamed since: its landing is recorded again at the next attempt */
		eunlock();
		close(sn.fd);
		return ARCH_AGAIN;
	}
	overwrite = fs->overwrite || landed_here;
	fresh = fs->flags & META_F_NEW;
	res = start_archive(in, sn.fd, sn.size, sn.mode, sn.mtime,
			    (overwrite ? HSMFS_EVENT_OVERWRITE : 0) |
				    (fresh ? HSMFS_EVENT_NEW : 0), path, &ev);
	if (res) {
		eunlock();
		return res;
	}
	res = answer_of(ev, &version, &origin, &uploaded);
	eunlock();
	elog_debug("archive of inode %llu as '%s'%s: %s (%s)", (unsigned long long)fs->ino, path,
		   landed_here ? ", again" : "", res ? strerror(-res) : "archived",
		   origin ? origin : "no URL");
	fault_point(FAULT_ARCHIVE_ANSWERED);
	if (res == -ESTALE && !uploaded && fresh && names_queued()) {
		/*
		 * A new file finds an object at its name while name ops are
		 * queued: one of them may move or remove it (another file's,
		 * renamed away from the name during its own upload, as git
		 * saves config.lock over config and makes the next
		 * config.lock).  Not a conflict before they are applied: the
		 * names first, then this again.
		 */
		free(version);
		free(origin);
		if (landing)
			settle_landing(fs, path, true);
		archive_names_kick();
		return ARCH_NAMES;
	}
	if (res && !uploaded) {
		free(version);
		free(origin);
		if (landing)
			settle_landing(fs, path, refused(res));
		return res;
	}
	/*
	 * 4. The origin holds the snapshot as version now: that is the
	 * recorded version from here on, changed meanwhile or not (or the
	 * next archive would find a conflict that is not one).  Clean only
	 * if the event succeeded and no change began since the snapshot.
	 */
	failed = res;
	elock();
	rate_add(sn.size);
	/* no URL said: the recorded one (hsmfs-hooks(7), ARCHIVED) */
	if (fs->gone && !origin && fs->origin && !(origin = strdup(fs->origin)))
		elog_err("'%s' was removed during its upload and cannot be recorded for removal "
			 "at the origin: out of memory", fs->origin);
	if (fs->gone && origin) {
		/*
		 * Removed while its upload was in flight: the origin has it
		 * now, so it goes there too.  The removal's op (no object:
		 * the origin had none then) is held by the namer until this
		 * attempt ends, so this one is applied after it and before
		 * anything that op's path waits for; one of an object the
		 * origin had may have been applied before this upload landed
		 * (made it again): this one removes what it made, unless that
		 * is by then the object of a file saved over it (namer.h).
		 */
		char *o = origin, *v = version;

		eunlock();
		if (meta_op_add(S.cfg.meta, META_OP_DELETE, fs->ino, path[0] ? path : o,
				o, v))
			elog_err("'%s' was removed during its upload and cannot be recorded for "
				 "removal at the origin: %s", o, meta_errmsg(S.cfg.meta));
		else
			fault_point(FAULT_ARCHIVE_GONE_RECORDED);
		archive_names_wanted();
		free(v);
		free(o);
		if (landing)
			settle_landing(fs, path, true);
		return 0;
	}
	if (fs->gen != sn.gen || fs->gone) {
		/* imported again, or removed: the archive says nothing of it */
		eunlock();
		free(version);
		free(origin);
		/* it landed (the hook said where, or has no URLs to say) */
		if (landing)
			settle_landing(fs, path, true);
		return 0;
	}
	free(fs->version);
	fs->version = version;
	if (origin) {
		free(fs->origin);
		fs->origin = origin;
	}
	fs->osize = sn.size;
	fs->vchanged = true;
	fstate_set_flag(fs, META_F_NEW, false, false); /* the origin has it now */
	free(fs->sha256); /* the manifest's digests, of the version before */
	fs->sha256 = NULL;
	free(fs->chunks);
	fs->chunks = NULL;
	fs->dsums = NULL;
	fs->dchunk = fs->ndchunks = 0;
	if (overwrite)
		fs->overwrite = false; /* the origin has ours: conditional again */
	if (failed) {
		res = failed;
	} else if (unchanged(fs, &sn)) {
		fstate_archived(in, fs, sn.blocks); /* counted by the cache again */
		res = 0;
	} else {
		res = ARCH_AGAIN;
	}
	/* the writer commits state and version in one transaction */
	persist_later(fs);
	recorded = !writeback_next_batch();
	if (!recorded && res <= 0)
		res = res ? res : -EIO; /* not recorded: archived again (and found there) later */
	if (!res) {
		S.st.archived_files++;
		S.st.archived_bytes += sn.size;
	}
	eunlock();
	/* recorded: its landing is its object now (a crash before this: harmless, meta.h) */
	if (landing && recorded && meta_landing_clear(S.cfg.meta, fs->ino))
		elog_warn("cannot forget where '%s' was uploaded: %s", path,
			  meta_errmsg(S.cfg.meta));
	if (!res)
		fault_point(FAULT_ARCHIVE_COMMITTED);
	return res;
}
