/* archive.c - the archiver: see archive.h */
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
#include "archive.h"
#include "cache.h"
#include "clock.h"
#include "decide.h"
#include "dirs.h"
#include "engine.h"
#include "event.h"
#include "evict.h"
#include "fault.h"
#include "fstate.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "park.h"
#include "route.h"
#include "writeback.h"

#define ARCH_AGAIN 1          /* changed meanwhile: archive it again */
#define ARCH_ROOM 2           /* no room for a snapshot now (see attempt_ended) */
#define ARCH_NAMES 3          /* a name op of its path goes first: later */
#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 60000
#define SNAP_TRIES 8          /* snapshots a busy file gets before it waits */
#define BUSY_MS 200           /* a file written unseen or changing: look again */
#define NAMES_MS 1000         /* a file waiting for a name op of its path: look again */
#define RATE_SECS 10          /* the upload rate's window (stats) */
#define PRESS_SAY_MS 60000    /* archive_pressure() logs at most this often */
#define PRESS_MAX 32          /* files archive_pressure() makes due at once */
#define ARCHIVERS STATE_ARCHIVERS /* files archived at once (each waits for a
				  * round trip or three to the origin) */

/*
 * A sync or an archive in progress: the files it waits for, and its
 * first failure.  One a user waits for (asked) is on A.asked until it
 * is answered: once at the end, or at once with -EINTR when its caller
 * is interrupted (archive_interrupts(); the archives it started go on).
 * cont is taken under S.lock by whichever answers it.
 */
struct sync_req {
	void (*cont)(void *arg, int res); /* NULL: answered (or nobody asks) */
	void *arg;
	struct front_req *req;   /* the asking request, interrupted or not; NULL: none */
	bool asked;             /* a user's, not the start-up's scan */
	bool all;               /* every file (root's, the owner's), not the caller's only */
	bool scanning;          /* the scan asks req's caller: not answered meanwhile */
	unsigned others;        /* dirty files the caller may not publish, left */
	uid_t uid;              /* the caller's, for the log */
	unsigned pending;
	int err;
	struct sync_req *next;  /* A.scans */
	struct sync_req *anext; /* A.asked */
};

static struct {
	pthread_t threads[ARCHIVERS];
	unsigned created;       /* threads started */
	unsigned nthreads;      /* of which not ended */
	bool running;
	bool stop;              /* archive_shutdown() began */
	/* names (the ops table): one thread applies them in order */
	pthread_t namer;
	bool namer_running;
	unsigned name_syncs;    /* syncs waiting for every name to be applied */
	bool names_kick;        /* an archive waits for a name op: apply them */
	/*
	 * a sync's ask (names_asked, bumped) is answered once the namer found
	 * no op left by a look that began after it (names_seen: the ask that
	 * look began under); a look begun before the ask may miss the ops
	 * recorded just before it
	 */
	uint64_t names_asked, names_seen;
	int names_err;          /* the last op's failure, 0: none */
	unsigned names_tries;
	int64_t names_retry_at; /* mono ms */
	uint64_t names_pending; /* ops in the table, as the namer last counted */
	int64_t names_counted_at; /* when (monotonic ms) */
	pthread_cond_t names_done; /* names_seen or names_err changed */
	struct sync_req *scans; /* syncs whose dirty files are to be found */
	struct sync_req *asked; /* syncs and archives a user waits for, not answered */
	unsigned running_n;     /* files being archived (at most ARCHIVERS) */
	uint64_t running_bytes; /* their sizes */
	uint64_t pressed;       /* files archived early for room (archive_pressure) */
	int64_t pressed_said;   /* when that was last logged (mono ms) */
	/* bytes the origin took, per second of the last RATE_SECS (rate_add) */
	uint64_t rate_bytes[RATE_SECS];
	int64_t rate_sec[RATE_SECS];
} A;

/* The origin took bytes of an upload that ended now.  S.lock held. */
static void rate_add(uint64_t bytes)
{
	ELOCK_HELD();
	int64_t sec = mono_ms() / 1000;
	unsigned i = (unsigned)(sec % RATE_SECS);

	if (A.rate_sec[i] != sec) {
		A.rate_sec[i] = sec;
		A.rate_bytes[i] = 0;
	}
	A.rate_bytes[i] += bytes;
}

/* Bytes a second the origin took over the last RATE_SECS.  S.lock held. */
static uint64_t rate_now(void)
{
	ELOCK_HELD();
	int64_t sec = mono_ms() / 1000;
	uint64_t sum = 0;

	for (unsigned i = 0; i < RATE_SECS; i++)
		if (A.rate_sec[i] > sec - RATE_SECS)
			sum += A.rate_bytes[i];
	return sum / RATE_SECS;
}

/* ------------------------------------------------------------ snapshot */

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

/* ------------------------------------------------------------ one file */

/*
 * Wait for an archive event ev (the caller's reference, from its start)
 * and take what its archive hook said: the version and URL of ARCHIVED
 * (owned by the caller, NULL if none), and whether the hook allowed
 * (*ret_uploaded, may be NULL: the origin has the bytes, whatever a
 * watcher or the timeout said after).  Its result: 0 or -errno.  S.lock
 * held.
 */
static int answer_of(struct event *ev, char **ret_version, char **ret_origin,
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

/*
 * Archive fs once: 0 (clean, or nothing to do), ARCH_AGAIN, ARCH_ROOM
 * or -errno.  Without S.lock.
 */
static int archive_one(struct fstate *fs)
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
	 * removal, or a rename onto it, removes it): fs->gone below.
	 */
	{
		bool pending = false;

		if (!meta_op_before(S.cfg.meta, path, fs->ino, &pending) && pending) {
			elock();
			A.names_kick = true;
			pthread_cond_broadcast(&S.ncond);
			eunlock();
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
		elock();
		A.names_kick = true;
		pthread_cond_broadcast(&S.ncond);
		eunlock();
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
		 * (made it again): this one removes what it made.
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

/* ------------------------------------------------------------ names */

static int64_t backoff_ms(unsigned tries);

/* Is the file ino being archived now?  S.lock held. */
static bool ino_running(uint64_t ino)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < ARCHIVERS; i++)
		if (S.archiving[i] && S.archiving[i]->ino == ino)
			return true;
	return false;
}

/*
 * The ARCHIVE_NAME event of kind: its result, and the object's version
 * and URL the hook said (owned by the caller; NULL if it said none).
 * Without S.lock.
 */
static int name_event(uint32_t kind, const char *path, const char *origin, const char *version,
		      char **ret_version, char **ret_origin)
{
	char *p = strdup(path ? path : ""), *o = origin ? strdup(origin) : NULL;
	char *v = version ? strdup(version) : NULL;
	struct event *ev;
	int res;

	*ret_version = *ret_origin = NULL;
	if (!p || (origin && !o) || (version && !v)) {
		free(p);
		free(o);
		free(v);
		return -ENOMEM;
	}
	elock();
	if (!have_archive_hook(inode_root())) {
		eunlock();
		free(p);
		free(o);
		free(v);
		return -ENOTCONN;
	}
	res = start_name_archive(kind, p, o, v, &ev);
	if (res) {
		eunlock();
		return res;
	}
	res = answer_of(ev, ret_version, ret_origin, NULL);
	eunlock();
	return res;
}

/*
 * op, a removal, cannot be applied at the origin, and waiting will not
 * change that: unless the mount has a name at its path again (then the
 * origin's object there is the mount's to replace, or the same), it is
 * parked with why, said; a sync fails while it is, and tries it again
 * (meta.h: parked ops).  0 (done with it here), or -errno (kept).
 */
static int park(const struct meta_op *op, const char *why)
{
	if (walk_finds(op->path)) {
		elog_info("'%s': %s; the mount has that name again", op->path, why);
		return 0;
	}
	elog_warn("'%s': %s (sync fails until that is mended at the origin)", op->path, why);
	if (meta_op_park(S.cfg.meta, op->seq, why)) {
		elog_err("cannot record that '%s' differs at the origin: %s", op->path,
			 meta_errmsg(S.cfg.meta));
		return -EIO;
	}
	return 0;
}

/*
 * A directory removed on the mount is not empty at the origin (the hook
 * answered ENOTEMPTY): objects of files still to be moved out or removed
 * by later ops (a file renamed with the directory, then removed before
 * its rename reached the origin: its removal is recorded after the
 * directory's; a directory below it whose removal is), or objects the
 * mount never had.  While an op of a file, or a removal of a directory
 * below it, is recorded after it, the removal is recorded again after
 * those (this one dropped); once none is, the directory is kept there,
 * said, and the
 * op parked: the origin differs from the mount, and sync says so (a
 * directory made again on the mount since: dropped, its names are the
 * mount's).  0, or -errno (this op kept, tried again).
 */
static int rmdir_later(const struct meta_op *op)
{
	bool later = false;
	int res = meta_op_files_after(S.cfg.meta, op->seq, op->path, &later);

	if (!res && later)
		res = meta_op_add(S.cfg.meta, META_OP_RMDIR, 0, op->path, NULL, NULL);
	if (res)
		return -EIO;
	if (!later)
		return park(op, "a directory removed on the mount, kept at the origin: it holds "
				"objects the mount does not have there");
	return 0;
}

/*
 * Wait until no upload of the file ino is in flight (the op seq waits:
 * said once): 0, or -ESHUTDOWN.
 */
static int upload_ended(uint64_t ino, long long seq)
{
	bool running;
	int res;

	elock();
	running = ino_running(ino);
	eunlock();
	if (!running)
		return 0;
	elog_debug("name op %lld: waits for the upload of inode %llu", seq,
		   (unsigned long long)ino);
	elock();
	while (ino_running(ino) && !A.stop) {
		struct timespec ts;

		mono_after(&ts, 0.05);
		pthread_cond_timedwait(&S.ncond, &S.lock, &ts);
	}
	res = A.stop ? -ESHUTDOWN : 0;
	eunlock();
	return res;
}

/*
 * What an unanswered upload of a new file may have made at op->path,
 * which is not its file's name any more (meta.h: landings): removed
 * there, whatever its version, once no upload of the file is in flight
 * (one that lands and is recorded has its own op, a move or a removal,
 * before this one).
 * Kept if the file is at that name on the mount again: its next upload
 * replaces it (its landing recorded again).  0, or -errno (tried again).
 */
static int unland(const struct meta_op *op)
{
	char *version = NULL, *origin = NULL;
	struct meta_file f;
	bool there;
	int res;

	res = upload_ended(op->ino, (long long)op->seq);
	if (res)
		return res;
	res = meta_get(S.cfg.meta, op->ino, &f);
	if (res && res != -ENOENT)
		return res;
	there = !res && f.path && op->path && !strcmp(f.path, op->path);
	if (!res)
		meta_file_free(&f);
	if (there) {
		/*
		 * its next upload replaces what is there: the landing is
		 * recorded again, so that upload knows it may (else it is a
		 * new file's, finds an object, and is a conflict)
		 */
		bool has = false, here = false;

		res = meta_begin(S.cfg.meta);
		if (!res)
			res = meta_landing_has(S.cfg.meta, op->ino, &has);
		if (!res && !has)
			res = meta_landing_set(S.cfg.meta, op->ino, op->path, &here);
		if (!res)
			return meta_commit(S.cfg.meta) ? -EIO : 0;
		meta_rollback(S.cfg.meta);
		return -EIO;
	}
	if (!op->path)
		return 0;
	/*
	 * Another file has that name on the mount now (renamed over this
	 * one, as rsync and editors save): what is there at the origin is
	 * that file's (moved there by an op before this one, every upload
	 * of this file having ended before this op was recorded), or is
	 * replaced by it.  Removing it removed the other file's object,
	 * which its row still recorded there: sync exited 0.  One with no
	 * object yet takes the landing over (meta.h: landings): its upload
	 * replaces what is there, and its removal removes it.
	 */
	{
		struct inode *other = NULL;
		uint64_t oino = 0;
		bool kept = false, fresh = false, here;

		if (!walk_to(op->path, 0, &other)) {
			elock();
			struct fstate *ofs = inode_state(other);

			if (ofs && !ofs->gone && ofs->ino != op->ino) {
				kept = true;
				fresh = !ofs->origin || (ofs->flags & META_F_NEW);
				oino = ofs->ino;
			}
			eunlock();
			inode_forget(other, 1);
		}
		if (fresh) {
			res = meta_begin(S.cfg.meta);
			if (!res)
				res = meta_landing_set(S.cfg.meta, oino, op->path, &here);
			if (!res)
				res = meta_commit(S.cfg.meta) ? -EIO : 0;
			else
				meta_rollback(S.cfg.meta);
			if (res)
				return -EIO;
		}
		if (kept) {
			elog_debug("'%s': another file has the name now: what an upload of inode "
				   "%llu may have left there is that file's to replace", op->path,
				   (unsigned long long)op->ino);
			return 0;
		}
	}
	res = name_event(HSMFS_NAME_REMOVED, op->path, NULL, NULL, &version, &origin);
	free(version);
	free(origin);
	/* -EINVAL: the hook has no URL for the path, so no upload made one either */
	return res == -ENOENT || res == -EINVAL ? 0 : res;
}

/*
 * walk_to() for the row of ino whose path was read as path: a rename
 * through the mount moves the store's name before the row's path, so a
 * miss is looked at again, with the row read anew, for a while
 * (WALK_TRIES times 10 ms).  -ENOENT: the row is gone (removed
 * meanwhile).  Without S.lock.
 */
#define WALK_TRIES 50
static int row_walk(uint64_t ino, const char *path, struct inode **ret)
{
	int res = path ? walk_to(path, ino, ret) : -ESTALE;

	for (int i = 0; res == -ESTALE && i < WALK_TRIES; i++) {
		struct meta_file f;

		usleep(10000);
		res = meta_get(S.cfg.meta, ino, &f);
		if (res)
			return res == -ENOENT ? res : -ESTALE;
		res = f.path ? walk_to(f.path, ino, ret) : -ESTALE;
		meta_file_free(&f);
	}
	return res;
}

/*
 * Apply one op at the origin: 0 (done, or nothing to do any more: it is
 * dropped), or -errno (kept, tried again).  A conflict (the origin's
 * object is not the version the op was recorded with) is logged and
 * counted, and the op dropped: the origin's object stays as it is.
 */
static int apply_name(const struct meta_op *op)
{
	char *version = NULL, *origin = NULL, *gone_origin = NULL, *gone_version = NULL;
	struct meta_file f;
	struct inode *in;
	struct fstate *fs;
	int res;

	if (op->kind == META_OP_DELETE && !op->origin) {
		/*
		 * A file removed during its first upload: held until that
		 * upload ended (its archiver records its removal then, if the
		 * origin took it), then dropped.
		 */
		return upload_ended(op->ino, (long long)op->seq);
	}
	if (op->kind == META_OP_DELETE) {
		res = name_event(HSMFS_NAME_REMOVED, op->path, op->origin, op->version, &version,
				 &origin);
		free(version);
		free(origin);
		if (res == -ESTALE) {
			elock();
			S.st.conflicts++;
			eunlock();
			return park(op, "a file removed on the mount, changed at the origin by "
					"another writer: kept there");
		}
		return res == -ENOENT ? 0 : res;
	}
	if (op->kind == META_OP_MKDIR || op->kind == META_OP_RMDIR) {
		bool made = op->kind == META_OP_MKDIR;

		res = name_event(made ? HSMFS_NAME_MKDIR : HSMFS_NAME_RMDIR, op->path, NULL, NULL,
				 &version, &origin);
		free(version);
		free(origin);
		if (!made && res == -ENOTEMPTY)
			return rmdir_later(op);
		/* an origin that keeps no directories, or refuses this one: not again */
		if (res && res != -EAGAIN && res != -EIO && res != -ETIMEDOUT &&
		    res != -ENOTCONN && res != -ESHUTDOWN) {
			elog_warn("directory '%s' was %s on the mount, not at the origin: %s",
				  op->path, made ? "made" : "removed", strerror(-res));
			return 0;
		}
		return res;
	}
	if (op->kind == META_OP_UNLAND)
		return unland(op);
	if (op->kind != META_OP_RENAME)
		return 0;
	/*
	 * An upload of the file in flight (a new file renamed during its
	 * first upload: rsync's temporary name, an editor's save) records
	 * its object once it ends, and a new file's row may not even be
	 * written before then: the file is looked at after it (else the op
	 * found no row, was dropped, and the object stayed under the name
	 * the file left, sync exiting 0).
	 */
	res = upload_ended(op->ino, (long long)op->seq);
	if (res)
		return res;
	/* the file as it is now: its object, where the op says it goes */
	res = meta_get(S.cfg.meta, op->ino, &f);
	if (res)
		return res == -ENOENT ? 0 : res;
	/*
	 * Found where its row says (renamed just now: the row follows the
	 * store's name in a moment).  Not found there for long: dropped,
	 * said (kept, it would hold up every name change after it).
	 */
	if (!f.path) {
		meta_file_free(&f);
		return 0; /* where it is is not known: the next open records it */
	}
	res = row_walk(op->ino, f.path, &in);
	if (res == -ESTALE)
		elog_warn("'%s' (inode %llu) is not where its row says: not moved at the origin "
			  "to '%s'", f.path, (unsigned long long)op->ino, op->path);
	meta_file_free(&f);
	if (res)
		return res == -ESTALE || res == -ENOENT ? 0 : res;
	elock();
	fs = inode_state(in);
	while (fs && fs->arch == ARCH_RUNNING && !A.stop) {
		struct timespec ts;

		mono_after(&ts, 0.05);
		pthread_cond_timedwait(&S.ncond, &S.lock, &ts);
	}
	if (!fs || !fs->origin || (fs->flags & META_F_NEW) || fs->gone || A.stop) {
		elog_debug("name op %lld: inode %llu has no object to move (%s)", (long long)op->seq,
			   (unsigned long long)op->ino, !fs ? "no state" : !fs->origin ? "no origin" :
			   fs->flags & META_F_NEW ? "new" : fs->gone ? "gone" : "stopping");
		eunlock();
		inode_forget(in, 1);
		return A.stop ? -ESHUTDOWN : 0;
	}
	fs->naming = true;
	{
		char *o = strdup(fs->origin), *v = fs->version ? strdup(fs->version) : NULL;
		bool landed = false;

		eunlock();
		/*
		 * an upload never answered may have made a version the row does
		 * not know (meta.h: landings): the object moves whatever its version
		 */
		res = meta_landing_has(S.cfg.meta, op->ino, &landed);
		if (!res && landed) {
			free(v);
			v = NULL;
		}
		if (!res)
			res = o ? name_event(HSMFS_NAME_RENAMED, op->path, o, v, &version,
					     &origin) :
				  -ENOMEM;
		fault_named(FAULT_NAME_ANSWERED);
		if (!res && landed && meta_landing_clear(S.cfg.meta, op->ino))
			elog_warn("cannot forget where '%s' was uploaded: %s", op->path,
				  meta_errmsg(S.cfg.meta));
		elock();
		if (!res && !origin) {
			elog_err("the archive hook moved '%s' without ARCHIVED: not recorded",
				 op->path);
			res = -EPROTO;
		}
		/*
		 * the object is at neither place: uploaded again if its bytes
		 * are all here (it was dropped, shown clean with nothing at
		 * the origin, and sync said 0)
		 */
		if (res == -ENOENT && !fs->gone && fs->origin && !strcmp(fs->origin, o)) {
			if (events_object_lost(fs))
				elog_warn("'%s': its object was at neither its old place nor its new "
					  "one at the origin: archived again as a new file", op->path);
			else
				elog_err("'%s': its object was at neither its old place nor its new "
					 "one at the origin, and not all its bytes are here: it cannot "
					 "be archived (sync fails until it is removed)", op->path);
		}
		if (!res && fs->origin && !strcmp(fs->origin, o)) {
			free(fs->origin);
			fs->origin = origin;
			origin = NULL;
			if (version) {
				free(fs->version);
				fs->version = version;
				version = NULL;
			}
			fs->vchanged = true;
			persist_later(fs);
			res = writeback_next_batch();
		}
		/*
		 * removed on the mount while it moved: its removal was recorded
		 * with the object's old place; it goes from the new one
		 */
		if (!res && fs->gone && fs->origin && !(gone_origin = strdup(fs->origin)))
			res = -ENOMEM;
		if (gone_origin && fs->version && !(gone_version = strdup(fs->version)))
			res = -ENOMEM;
		free(o);
		free(v);
	}
	fs->naming = false;
	pthread_cond_broadcast(&S.acond); /* it may be due meanwhile */
	eunlock();
	free(version);
	free(origin);
	if (!res && gone_origin && meta_op_add(S.cfg.meta, META_OP_DELETE, op->ino, op->path,
					       gone_origin, gone_version))
		res = -EIO;
	free(gone_origin);
	free(gone_version);
	inode_forget(in, 1);
	if (res == -ESTALE) {
		elog_warn("'%s' was renamed on the mount but changed at the origin: "
			  "its object stays where it was", op->path);
		elock();
		S.st.conflicts++;
		eunlock();
	}
	return res == -ENOENT || res == -ESTALE ? 0 : res;
}

/*
 * The namer: the ops table, oldest first, one at a time (a later op may
 * depend on an earlier: a removal of the name a rename then takes),
 * while write-back is on or a sync waits for them.  A failed op stays
 * at the head and is tried again with backoff.
 */
static void *namer_main(void *arg)
{
	(void)arg;
	elock();
	while (!A.stop) {
		int64_t now = mono_ms();
		struct meta_op op;
		struct timespec ts;
		uint64_t count = 0, asked;
		int res;

		/* the ops waiting, for the statistics (a count is a scan: a second apart) */
		if (now - A.names_counted_at >= 1000) {
			A.names_counted_at = now;
			eunlock();
			res = meta_op_count(S.cfg.meta, &count);
			elock();
			if (!res)
				A.names_pending = count;
		}

		if ((!S.cfg.writeback_on && !A.name_syncs && !A.names_kick) ||
		    (A.names_retry_at && now < A.names_retry_at)) {
			mono_after(&ts, A.names_retry_at > now ?
					(double)(A.names_retry_at - now) / 1000 : 1.0);
			pthread_cond_timedwait(&S.ncond, &S.lock, &ts);
			continue;
		}
		S.names_wanted = false;
		asked = A.names_asked;
		eunlock();
		res = meta_op_first(S.cfg.meta, &op);
		if (res == -ENOENT) {
			fault_delay(FAULT_NAMES_LOOKED);
			elock();
			A.names_seen = asked;
			A.names_kick = false;
			pthread_cond_broadcast(&A.names_done);
			if (!S.names_wanted && !A.stop && A.names_asked == asked) {
				mono_after(&ts, 1.0);
				pthread_cond_timedwait(&S.ncond, &S.lock, &ts);
			}
			continue;
		}
		if (!res) {
			res = apply_name(&op);
			elog_debug("name op %lld (kind %u, inode %llu, '%s', %s): %s",
				   (long long)op.seq, op.kind, (unsigned long long)op.ino,
				   op.path ? op.path : "", op.origin ? op.origin : "no object",
				   res ? strerror(-res) : "done");
			if (!res) {
				fault_point(FAULT_NAME_APPLIED);
				res = meta_op_done(S.cfg.meta, op.seq);
			}
			meta_op_free(&op);
		}
		elock();
		if (res == -ENOTCONN) {
			/* no archive hook yet: not an attempt, looked at again soon */
			A.names_err = res;
			A.names_retry_at = mono_ms() + BACKOFF_MIN_MS;
		} else if (res) {
			A.names_tries++;
			A.names_err = res;
			A.names_retry_at = mono_ms() + backoff_ms(A.names_tries);
			elog_warn("a name change could not be applied at the origin: %s (attempt %u)",
				  strerror(-res), A.names_tries);
			S.st.archive_failed++;
		} else {
			A.names_tries = 0;
			A.names_err = 0;
			A.names_retry_at = 0;
		}
		pthread_cond_broadcast(&A.names_done);
	}
	eunlock();
	return NULL;
}

/*
 * A sync's first part: every op applied, or the first failure.  Without
 * S.lock.
 */
static int names_synced(void)
{
	int64_t until;
	uint64_t mine;
	int res = 0;

	elock();
	if (!A.namer_running) {
		eunlock();
		return 0;
	}
	A.name_syncs++;
	mine = ++A.names_asked;
	A.names_err = 0;
	A.names_retry_at = 0; /* asked: at once */
	pthread_cond_broadcast(&S.ncond);
	until = mono_ms() + (int64_t)(S.cfg.timeout * 1000);
	while (!A.stop && A.names_seen < mine) {
		struct timespec ts;

		/* no archive hook yet: waited for, as by an archive (attempt_ended) */
		if (A.names_err == -ENOTCONN && !S.cfg.nohook_fail && mono_ms() < until)
			A.names_err = 0;
		else if (A.names_err)
			break;
		mono_after(&ts, 0.1);
		pthread_cond_timedwait(&A.names_done, &S.lock, &ts);
	}
	res = A.stop ? -ESHUTDOWN : A.names_seen >= mine ? 0 : A.names_err;
	A.name_syncs--;
	eunlock();
	return res;
}

/* ------------------------------------------------------------ the queue */

/* Answer fs's waiters with res (their list, taken under S.lock). */
static void answer_waiters(struct arch_wait *w, int res)
{
	while (w) {
		struct arch_wait *next = w->next;

		w->cont(w->arg, res);
		free(w);
		w = next;
	}
}

#define TAKE_SKIP_MAX 64 /* due files one look passes over (each being renamed or taken) */

/*
 * The first due file of the queue, taken off it, or NULL with *next_due
 * the earliest due time of a file that could be taken (0: none).  Due
 * files being renamed at the origin, or whose change is being dropped
 * (events_take_origin), are passed over: taken after.  S.lock held.
 */
static struct fstate *take_due(int64_t now, int64_t *next_due)
{
	ELOCK_HELD();
	struct fstate *skip[TAKE_SKIP_MAX], *fs = NULL;
	struct due_item *it;
	unsigned nskip = 0;

	*next_due = 0;
	while ((it = due_heap_first(&S.aqueue)) && it->due <= now) {
		struct fstate *f = fstate_of_due(it);

		if (!f->naming && !(S.ntakes && take_wanted(f->ino))) {
			fs = f;
			break;
		}
		if (nskip == TAKE_SKIP_MAX)
			break; /* looked at again within ARCH_LOOK_MS */
		due_heap_remove(&S.aqueue, it);
		skip[nskip++] = f;
	}
	if (fs)
		due_heap_remove(&S.aqueue, &fs->aq);
	else if (it && it->due > now)
		*next_due = it->due;
	/* back in: the table holds room for them, they left it just now */
	for (unsigned i = 0; i < nskip; i++) {
		int res = due_heap_add(&S.aqueue, &skip[i]->aq);

		assert(!res);
		(void)res;
	}
	return fs;
}

/* A failed attempt's backoff: 1 s, doubling, at most 60 s. */
static int64_t backoff_ms(unsigned tries)
{
	int64_t ms = BACKOFF_MIN_MS;

	while (tries-- > 1 && ms < BACKOFF_MAX_MS)
		ms *= 2;
	return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

/*
 * After an attempt on fs ended with *resp.  S.lock held; returns its
 * waiters to answer, with *resp.
 */
static struct arch_wait *attempt_ended(struct fstate *fs, int *resp, int64_t now)
{
	int res = *resp;
	ELOCK_HELD();
	struct arch_wait *w = NULL;
	bool again = fs->arch_again;

	fs->arch = ARCH_IDLE;
	fs->arch_again = false;
	if (res == ARCH_ROOM && A.running_n && !A.stop) {
		/* others' snapshots hold the room: once one ends, not a failure */
		archive_later(fs, now + BUSY_MS);
		return NULL;
	}
	if (res == ARCH_NAMES && !A.stop) {
		/*
		 * a name op of its path goes first: looked at again in a while
		 * (a sync applies every op before it asks for the files)
		 */
		archive_later(fs, now + NAMES_MS);
		return NULL;
	}
	if (res == ARCH_ROOM)
		res = *resp = -ENOSPC;
	if (res == ARCH_NAMES)
		res = ARCH_AGAIN;
	if (res == ARCH_AGAIN && !A.stop) {
		/* changed while archived, or busy: its waiters wait on */
		archive_later(fs, now + (fs->changes || fs->unseen ? BUSY_MS : 0));
		return NULL;
	}
	if (res == ARCH_AGAIN)
		res = *resp = -ESHUTDOWN; /* stopping: its waiters are told, it stays dirty */
	w = fs->awaiters;
	fs->awaiters = NULL;
	if (!res) {
		fs->nohook_ms = 0;
		fs->arch_err = 0;
		fs->arch_tries = 0;
		/* changed again since, asked again: once more */
		if (again && fs->state == META_DIRTY && !A.stop)
			archive_later(fs, fs->aq.due);
		return w;
	}
	fs->arch_err = res;
	if (res == -ENOTCONN) {
		/*
		 * No archive hook yet (a mount's first second, or its hook
		 * starting again): not an attempt.  Who asked (archive, sync)
		 * waits for one as a read waits for a fill hook, the mount's
		 * timeout at most (nohook=fail: not at all).
		 */
		if (!fs->nohook_ms)
			fs->nohook_ms = now;
		if (w && !S.cfg.nohook_fail && !A.stop && !fs->gone &&
		    now - fs->nohook_ms < (int64_t)(S.cfg.timeout * 1000)) {
			fs->awaiters = w;
			archive_later(fs, now + BACKOFF_MIN_MS);
			return NULL;
		}
		fs->nohook_ms = 0;
		if ((again || S.cfg.writeback_on) && !A.stop && !fs->gone)
			archive_later(fs, now + BACKOFF_MIN_MS);
		return w;
	}
	fs->nohook_ms = 0;
	fs->arch_tries++;
	if (res == -ESTALE) {
		elog_warn("inode %llu: conflict: the origin changed under a local change; "
			  "kept, not archived (hsmfsctl resolve)", (unsigned long long)fs->ino);
		S.st.conflicts++;
		fstate_set_flag(fs, META_F_CONFLICT, true, false);
		return w;
	}
	S.st.archive_failed++;
	elog_warn("inode %llu: archive failed: %s (attempt %u)", (unsigned long long)fs->ino,
		  strerror(-res), fs->arch_tries);
	/* the origin will not take it as it is: again only when asked */
	if (res == -EFBIG || res == -EINVAL || res == -ENAMETOOLONG)
		return w;
	if ((again || S.cfg.writeback_on) && !A.stop && !fs->gone)
		archive_later(fs, now + backoff_ms(fs->arch_tries));
	return w;
}

/* r off A.asked, and its answer taken: false if it had none left.  S.lock held. */
static bool sync_take(struct sync_req *r, void (**cont)(void *arg, int res), void **arg)
{
	ELOCK_HELD();
	struct sync_req **pp = &A.asked;

	if (r->asked) {
		while (*pp && *pp != r)
			pp = &(*pp)->anext;
		if (*pp)
			*pp = r->anext;
	}
	*cont = r->cont;
	*arg = r->arg;
	r->cont = NULL;
	r->req = NULL;
	return *cont != NULL;
}

/* A new sync or archive request (req: the caller's; NULL: nobody's). */
static struct sync_req *sync_new(struct front_req *req, void (*cont)(void *arg, int res),
				 void *arg)
{
	struct sync_req *r = calloc(1, sizeof(*r));

	if (r)
		*r = (struct sync_req){ .cont = cont, .arg = arg, .req = req, .asked = cont != NULL };
	return r;
}

/* r on A.asked, once it is certain to be answered.  S.lock held. */
static void sync_asked(struct sync_req *r)
{
	ELOCK_HELD();
	if (r->asked) {
		r->anext = A.asked;
		A.asked = r;
	}
}

/* A sync's (or an archive's) waiter on one file. */
static void sync_one(void *arg, int res)
{
	struct sync_req *r = arg;
	void (*cont)(void *arg, int res) = NULL;
	void *carg = NULL;
	bool last;

	elock();
	if (res && !r->err)
		r->err = res;
	last = !--r->pending;
	if (last)
		sync_take(r, &cont, &carg);
	eunlock();
	if (last) {
		if (cont)
			cont(carg, r->err);
		free(r);
	}
}

/* Answered at most this many interrupted requests a tick; the rest the next. */
#define INTERRUPTS_TICK 16

/* see archive.h */
void archive_interrupts(void)
{
	ELOCK_HELD();
	struct {
		void (*cont)(void *arg, int res);
		void *arg;
	} gone[INTERRUPTS_TICK];
	unsigned n = 0;

	if (!A.asked || !S.cfg.front.interrupted)
		return;
	for (struct sync_req *r = A.asked, *next; r && n < INTERRUPTS_TICK; r = next) {
		next = r->anext;
		if (r->req && !r->scanning && S.cfg.front.interrupted(r->req) &&
		    sync_take(r, &gone[n].cont, &gone[n].arg))
			n++;
	}
	if (!n)
		return;
	eunlock();
	for (unsigned i = 0; i < n; i++)
		gone[i].cont(gone[i].arg, -EINTR);
	elock();
}

/* Add a waiter to fs.  S.lock held.  false: no memory. */
static bool add_waiter(struct fstate *fs, void (*cont)(void *arg, int res), void *arg)
{
	ELOCK_HELD();
	struct arch_wait *w = malloc(sizeof(*w));

	if (!w)
		return false;
	w->cont = cont;
	w->arg = arg;
	w->next = fs->awaiters;
	fs->awaiters = w;
	return true;
}


/*
 * May the caller of r (a sync not everyone's: not root's, not the
 * owner's) publish in?  Asked of the FUSE layer (front.may_archive) with
 * r->req kept from its answer meanwhile; an interrupt seen here answers
 * r (-EINTR).  false: not the caller's (counted in r->others), or r is
 * answered.  Without S.lock.
 */
static bool callers_own(struct sync_req *r, struct inode *in)
{
	void (*cont)(void *arg, int res) = NULL;
	void *arg = NULL;
	bool mine = false;

	elock();
	if (!r->cont) {
		eunlock();
		return false; /* answered (interrupted): it asks no more */
	}
	r->scanning = true;
	eunlock();
	if (S.cfg.front.interrupted && S.cfg.front.interrupted(r->req)) {
		elock();
		r->scanning = false;
		sync_take(r, &cont, &arg);
		eunlock();
		if (cont)
			cont(arg, -EINTR);
		return false;
	}
	mine = S.cfg.front.may_archive && S.cfg.front.may_archive(r->req, in);
	elock();
	r->scanning = false;
	r->others += !mine;
	eunlock();
	return mine;
}

/*
 * Files of several names (hard links) for sync r: the origin, which has
 * no links, holds each under one name, so the sync fails (-EMLINK),
 * naming them; one that has a single name again is forgotten.  Without
 * S.lock.
 */
static void sync_links(struct sync_req *r)
{
	uint64_t after = 0, several = 0;

	for (;;) {
		struct meta_victim *v = NULL;
		size_t n = 0;

		if (meta_linked(S.cfg.meta, 256, after, &v, &n))
			break;
		for (size_t i = 0; i < n; i++) {
			struct inode *in;
			struct stat st;
			int fd;

			if (row_walk(v[i].ino, v[i].path, &in))
				continue;
			fd = open_store(in, O_RDONLY);
			if (fd >= 0 && !fstat(fd, &st)) {
				if (st.st_nlink > 1) {
					elog_warn("sync: '%s' has %lu names (hard links): the origin "
						  "holds it under one of them only", v[i].path,
						  (unsigned long)st.st_nlink);
					several++;
				} else {
					events_linked(in, false);
				}
			}
			if (fd >= 0)
				close(fd);
			inode_forget(in, 1);
		}
		if (n)
			after = v[n - 1].ino; /* the next page (meta.h) */
		meta_victims_free(v, n);
		if (n < 256)
			break;
	}
	if (several) {
		elock();
		r->err = r->err ? r->err : -EMLINK;
		eunlock();
	}
}

/*
 * Find every dirty file for sync r: the writer's queue written first
 * (so that a change or a file made just now has its row), then the
 * database's dirty rows, each looked up by its path.  Without S.lock.
 */
static void sync_scan(struct sync_req *r)
{
	struct meta_victim *v = NULL;
	uint64_t after = 0;
	size_t n = 0;
	int res;

	writeback_sync();
	elock();
	r->pending = 1; /* the scan's own, dropped at its end */
	eunlock();
	/*
	 * names first: a renamed file's bytes go to where its name went;
	 * with them, again, those the origin would not take (it may have
	 * been mended since)
	 */
	if (r->asked && meta_ops_unpark(S.cfg.meta))
		elog_warn("sync: cannot try again the name changes the origin would not take: %s",
			  meta_errmsg(S.cfg.meta));
	res = r->asked ? names_synced() : 0;
	if (!res && r->asked) {
		uint64_t kept = 0;

		res = meta_parked_count(S.cfg.meta, &kept) ? -EIO : kept ? -EEXIST : 0;
		if (kept)
			elog_info("sync: the origin differs from the mount at %llu name%s it "
				  "would not change (said above)", (unsigned long long)kept,
				  kept == 1 ? "" : "s");
	}
	if (res) {
		elock();
		r->err = r->err ? r->err : res;
		eunlock();
	}
	/* and what they changed (a file whose object was found nowhere: dirty now) */
	if (r->asked)
		writeback_sync();
	for (;;) {
		if (meta_dirty(S.cfg.meta, 256, after, &v, &n)) {
			elock();
			r->err = r->err ? r->err : -EIO;
			eunlock();
			break;
		}
		for (size_t i = 0; i < n; i++) {
			struct inode *in;
			struct fstate *fs;

			int wres = row_walk(v[i].ino, v[i].path, &in);

			if (wres == -ENOENT)
				continue; /* removed meanwhile: nothing to archive */
			if (!wres && r->asked && !r->all && !callers_own(r, in)) {
				inode_forget(in, 1);
				continue;
			}
			if (wres) {
				/* a dirty file sync cannot reach: not "everything is there" */
				elog_err("sync: dirty inode %llu is not at '%s' (moved beside the "
					 "mount?): not archived; open it to record its path",
					 (unsigned long long)v[i].ino, v[i].path);
				elock();
				r->err = r->err ? r->err : -EIO;
				eunlock();
				continue;
			}
			elock();
			fs = inode_state(in);
			if (r->asked && !r->cont) {
				/* its caller left (interrupted): it asks no more */
			} else if (fs && fs->state == META_DIRTY && !fs->gone &&
			    !(fs->flags & META_F_CONFLICT) && add_waiter(fs, sync_one, r)) {
				r->pending++;
				archive_later(fs, mono_ms());
			} else if (fs && (fs->flags & META_F_CONFLICT) && !r->err) {
				r->err = -ESTALE;
			}
			eunlock();
			inode_forget(in, 1);
		}
		if (n)
			after = v[n - 1].ino; /* the next page (meta.h) */
		meta_victims_free(v, n);
		if (n < 256)
			break;
	}
	if (r->asked)
		sync_links(r);
	elock();
	if (r->others && !r->err) {
		elog_info("sync by uid %u: %u changed file%s left to their owners (not the "
			  "caller's to publish)", (unsigned)r->uid, r->others,
			  r->others == 1 ? "" : "s");
		r->err = -EACCES;
	}
	eunlock();
	sync_one(r, 0);
}

static void *archiver_main(void *arg)
{
	(void)arg;
	elock();
	while (!A.stop) {
		int64_t now = mono_ms(), next_due;
		struct arch_wait *w;
		struct fstate *fs;
		int res;

		if (A.scans) {
			struct sync_req *r = A.scans;

			A.scans = r->next;
			eunlock();
			sync_scan(r);
			elock();
			continue;
		}
		fs = take_due(now, &next_due);
		if (!fs) {
			struct timespec ts;

			mono_after(&ts, next_due && next_due - now < ARCH_LOOK_MS ?
					(double)(next_due - now) / 1000 : ARCH_LOOK_MS / 1000.0);
			pthread_cond_timedwait(&S.acond, &S.lock, &ts);
			continue;
		}
		uint64_t size = fs->size;
		unsigned slot = 0;

		fs->arch = ARCH_RUNNING;
		A.running_n++;
		A.running_bytes += size;
		while (slot < ARCHIVERS - 1 && S.archiving[slot])
			slot++;
		S.archiving[slot] = fs;
		eunlock();
		res = archive_one(fs);
		elock();
		S.archiving[slot] = NULL;
		pthread_cond_broadcast(&S.ncond); /* a removal's op may wait for it */
		A.running_n--;
		A.running_bytes -= size;
		w = attempt_ended(fs, &res, mono_ms());
		eunlock();
		answer_waiters(w, res);
		inode_release(fs->in); /* the queue's reference */
		elock();
	}
	/* the last archiver out: what is not archived is left dirty for the
	 * next mount, its waiters told */
	if (--A.nthreads) {
		eunlock();
		return NULL;
	}
	/* what is left is logged by archive_shutdown(): every dirty file */
	for (struct due_item *it; (it = due_heap_first(&S.aqueue));) {
		struct fstate *fs = fstate_of_due(it);
		struct arch_wait *w = fs->awaiters;

		due_heap_remove(&S.aqueue, it);
		fs->awaiters = NULL;
		fs->arch = ARCH_IDLE;
		eunlock();
		answer_waiters(w, -ESHUTDOWN);
		inode_release(fs->in);
		elock();
	}
	eunlock();
	return NULL;
}

/* ------------------------------------------------------------ requests */

int events_archive(struct inode *in, struct front_req *req,
		   void (*cont)(void *arg, int res), void *arg)
{
	struct sync_req *r;
	struct fstate *fs;
	int res;

	if (inode_is_dir(in))
		return -EISDIR;
	res = events_load(in);
	if (res)
		return res;
	r = sync_new(req, cont, arg);
	if (!r)
		return -ENOMEM;
	r->pending = 1;
	elock();
	fs = inode_state(in);
	if (!fs) {
		res = -ENODATA; /* plain: no origin to archive to, not made here */
	} else if (fs->state != META_DIRTY) {
		res = 0;
	} else if (fs->flags & META_F_CONFLICT) {
		res = -ESTALE;
	} else if (!A.running || A.stop) {
		res = -ESHUTDOWN;
	} else if (!add_waiter(fs, sync_one, r)) {
		res = -ENOMEM;
	} else {
		fs->arch_tries = 0; /* asked: at once, whatever the backoff said */
		archive_later(fs, mono_ms());
		sync_asked(r);
		r = NULL;
		res = EVENTS_PARKED;
	}
	eunlock();
	free(r);
	return res;
}

int events_resolve(struct inode *in, struct front_req *req,
		   void (*cont)(void *arg, int res), void *arg)
{
	struct fstate *fs;
	int res = events_load(in);

	if (res)
		return res;
	elock();
	fs = inode_state(in);
	if (fs && (fs->flags & META_F_CONFLICT)) {
		fstate_set_flag(fs, META_F_CONFLICT, false, true); /* the user's */
		fs->overwrite = true;
		fs->arch_err = 0;
	}
	eunlock();
	return events_archive(in, req, cont, arg);
}

void archive_pressure(uint64_t need)
{
	struct fstate *pick[PRESS_MAX];
	int64_t now = mono_ms();
	uint64_t going;
	unsigned n = 0, i;

	elock();
	if (!A.running || A.stop || !S.cfg.writeback_on) {
		eunlock();
		return;
	}
	/* what is being archived, or due, makes room already */
	going = A.running_bytes;
	for (size_t k = 0; k < S.aqueue.n; k++) {
		struct fstate *fs = fstate_of_due(S.aqueue.v[k]);

		if (fs->aq.due <= now)
			going += fs->size;
	}
	/* the oldest changes not due yet, failed ones left to their backoff */
	for (size_t k = 0; k < S.aqueue.n && going < need; k++) {
		struct fstate *fs = fstate_of_due(S.aqueue.v[k]);

		if (fs->aq.due <= now || fs->arch_tries || fs->naming)
			continue;
		if (n == PRESS_MAX && fs->aq.due >= pick[n - 1]->aq.due)
			continue;
		i = n < PRESS_MAX ? n++ : n - 1;
		for (; i > 0 && pick[i - 1]->aq.due > fs->aq.due; i--)
			pick[i] = pick[i - 1];
		pick[i] = fs;
	}
	/* due now, in the order of their changes (take_due takes the earliest) */
	for (i = 0; i < n && going < need; i++) {
		pick[i]->aq.due = now - PRESS_MAX + i;
		due_heap_fix(&S.aqueue, &pick[i]->aq);
		going += pick[i]->size;
		A.pressed++;
	}
	bool say = i && now - A.pressed_said >= PRESS_SAY_MS;
	uint64_t so_far = A.pressed;

	if (i)
		pthread_cond_broadcast(&S.acond);
	if (say)
		A.pressed_said = now;
	eunlock();
	/* once a spell of pressure, not each round */
	if (say)
		elog_info("the store is short of %llu bytes: changed files archived now, to be "
			  "released (%llu so far)", (unsigned long long)need,
			  (unsigned long long)so_far);
}

/* A resolve --take-origin in progress: the listings of in's directory. */
struct take_req {
	struct inode *in, *dir;   /* referenced */
	struct front_req *req;
	bool listed, refreshed;   /* asked */
	void (*cont)(void *arg, int res);
	void *arg;
};

/* Forget the take of ino; was it done?  S.lock held. */
static bool take_end(uint64_t ino)
{
	ELOCK_HELD();
	bool done = false;

	for (unsigned i = 0; i < S.ntakes; i++)
		if (S.takes[i].ino == ino) {
			done = S.takes[i].done;
			S.takes[i] = S.takes[--S.ntakes];
			break;
		}
	return done;
}

/*
 * The next step of a take, after the last ended with res: the
 * directory listed (a first listing if it never was: a lookup made the
 * file's name alone), then listed again (the refresh replaces the
 * file), then the answer: 0 if the refresh replaced or removed it.
 * Without S.lock.
 */
static void take_step(void *arg, int res)
{
	struct take_req *t = arg;
	bool done;

	if (!res && !t->listed) {
		t->listed = true;
		res = events_dir(t->dir, t->req, take_step, t);
		if (res == EVENTS_PARKED)
			return;
	}
	if (!res && !t->refreshed) {
		t->refreshed = true;
		res = events_dir_refresh(t->dir, t->req, take_step, t);
		if (res == EVENTS_PARKED)
			return;
	}
	elock();
	done = take_end(inode_ino(t->in));
	eunlock();
	if (res == EVENTS_UNLISTED || res == -ENODATA)
		res = -ENODATA; /* not a directory listed from an origin */
	else if (!res && !done)
		res = -EBUSY; /* open or changed again meanwhile: kept */
	if (!res)
		elog_info("inode %llu: its local change dropped for the origin's version "
			  "(hsmfsctl resolve --take-origin)", (unsigned long long)inode_ino(t->in));
	t->cont(t->arg, res);
	inode_release(t->dir);
	inode_release(t->in);
	free(t);
}

int events_take_origin(struct inode *in, struct front_req *req,
		       void (*cont)(void *arg, int res), void *arg)
{
	struct take_req *t;
	struct inode *parent;
	struct fstate *fs;
	char *name;
	int res = events_load(in), fd;
	bool dirty;

	if (res)
		return res;
	elock();
	fs = inode_state(in);
	dirty = fs && fs->state == META_DIRTY;
	if (!dirty)
		res = fs && fs->origin ? 0 : -ENODATA; /* clean already */
	else if ((fs->flags & META_F_NEW) || !fs->origin)
		res = -ENODATA; /* the origin never had it */
	else if (fs->arch == ARCH_RUNNING)
		res = -EBUSY; /* open files are the refresh's to refuse (a release may lag);
			       * from here the archiver passes it over (take_due) */
	else if (take_wanted(fs->ino))
		res = -EALREADY;
	else if (S.ntakes == TAKES_MAX)
		res = -EAGAIN;
	else
		S.takes[S.ntakes++] = (struct take){ .ino = fs->ino };
	eunlock();
	if (res || !dirty)
		return res;
	t = calloc(1, sizeof(*t));
	fd = t ? inode_parent_fd_get(in, &parent, &name) : -ENOMEM;
	if (fd < 0) {
		elock();
		take_end(inode_ino(in));
		eunlock();
		free(t);
		return fd;
	}
	inode_ref(parent);
	inode_parent_fd_put(parent, name);
	inode_ref(in);
	*t = (struct take_req){ .in = in, .dir = parent, .req = req, .cont = cont, .arg = arg };
	take_step(t, 0);
	return EVENTS_PARKED;
}

int events_sync(struct front_req *req, bool all, void (*cont)(void *arg, int res), void *arg)
{
	struct sync_req *r = sync_new(req, cont, arg);
	struct caller who = { 0 };

	if (!r)
		return -ENOMEM;
	r->all = all || !req;
	if (!r->all && S.cfg.front.caller) {
		S.cfg.front.caller(req, &who);
		r->uid = who.uid;
	}
	elock();
	if (!A.running || A.stop) {
		eunlock();
		free(r);
		return -ESHUTDOWN;
	}
	r->next = A.scans;
	A.scans = r;
	sync_asked(r);
	pthread_cond_signal(&S.acond);
	eunlock();
	return EVENTS_PARKED;
}

/* The archive figures of the statistics.  S.lock held. */
void archive_stats(struct events_stats *st)
{
	ELOCK_HELD();
	uint64_t bytes = 0;

	for (size_t k = 0; k < S.aqueue.n; k++)
		bytes += fstate_of_due(S.aqueue.v[k])->size;
	st->archive_pending = S.aqueue.n;
	st->archive_pending_bytes = bytes;
	st->archive_running = A.running_n;
	st->names_pending = A.names_pending;
	st->archive_rate = rate_now();
	st->archived_for_room = A.pressed;
}

int archive_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&S.acond, &ca);
	pthread_condattr_destroy(&ca);
	if (!S.cfg.meta)
		return 0;
	pthread_cond_init(&S.ncond, &ca);
	pthread_cond_init(&A.names_done, &ca);
	/*
	 * first uploads a crash left unanswered, of files removed or
	 * renamed meanwhile: what they may have made goes (meta.h: landings)
	 */
	if (S.cfg.track_new) {
		int res = meta_begin(S.cfg.meta);

		if (!res)
			res = meta_landing_orphans(S.cfg.meta);
		if (!res)
			res = meta_commit(S.cfg.meta);
		if (res) {
			elog_warn("cannot look for uploads a crash left unanswered: %s",
				  meta_errmsg(S.cfg.meta));
			meta_rollback(S.cfg.meta);
		}
	}
	/* with write-back, what a crash or an unmount left dirty goes now */
	if (S.cfg.writeback_on)
		A.scans = calloc(1, sizeof(*A.scans));
	elock();
	for (unsigned i = 0; i < ARCHIVERS; i++) {
		if (pthread_create(&A.threads[i], NULL, archiver_main, NULL))
			break;
		A.nthreads++;
		A.created++;
	}
	A.running = A.nthreads > 0;
	eunlock();
	if (A.running && !pthread_create(&A.namer, NULL, namer_main, NULL))
		A.namer_running = true;
	return A.running ? 0 : -EAGAIN;
}

/* Paths named in the unmount's line of what is not at the origin. */
#define LEFT_SHOWN 5

/*
 * The unmount's word on what is not at the origin: every dirty file the
 * store records (queued or not, write-back or not), the first few named,
 * and the name changes not yet applied (hsmfsctl unmount prints the
 * same).  Once the writer has committed what it holds.  Without S.lock.
 */
static void log_left(void)
{
	char names[LEFT_SHOWN * 80 + 16] = "";
	uint64_t files = 0, after = 0, ops = 0;
	size_t len = 0;

	writeback_sync();
	for (;;) {
		struct meta_victim *v = NULL;
		size_t n = 0;

		if (meta_dirty(S.cfg.meta, 256, after, &v, &n))
			return;
		for (size_t i = 0; i < n && files + i < LEFT_SHOWN && len < sizeof(names); i++)
			len += snprintf(names + len, sizeof(names) - len, "%s'%.70s'",
					files + i ? ", " : "", v[i].path ? v[i].path : "?");
		files += n;
		if (n)
			after = v[n - 1].ino; /* the next page (meta.h) */
		meta_victims_free(v, n);
		if (n < 256)
			break;
	}
	if (meta_op_count(S.cfg.meta, &ops))
		ops = 0;
	if (!files && !ops)
		return;
	elog_warn("unmounted with %llu file%s changed and not at the origin%s%s%s and %llu name "
		  "change%s not applied there: archived at the next mount (with write-back) or "
		  "by hsmfsctl sync", (unsigned long long)files, files == 1 ? "" : "s",
		  files ? " (" : "", names, files > LEFT_SHOWN ? ", ...)" : files ? ")" : "",
		  (unsigned long long)ops, ops == 1 ? "" : "s");
}

void archive_shutdown(void)
{
	bool running;

	elock();
	running = A.running;
	A.stop = true;
	pthread_cond_broadcast(&S.acond);
	pthread_cond_broadcast(&S.ncond);
	pthread_cond_broadcast(&A.names_done);
	eunlock();
	if (A.namer_running)
		pthread_join(A.namer, NULL);
	A.namer_running = false;
	for (unsigned i = 0; running && i < A.created; i++)
		pthread_join(A.threads[i], NULL);
	if (S.cfg.meta)
		log_left();
	elock();
	A.running = false;
	while (A.scans) {
		struct sync_req *r = A.scans;
		void (*cont)(void *arg, int res);
		void *arg;

		A.scans = r->next;
		sync_take(r, &cont, &arg);
		eunlock();
		if (cont)
			cont(arg, -ESHUTDOWN);
		free(r);
		elock();
	}
	/* the queue's table (its files were taken off by the last archiver) */
	due_heap_free(&S.aqueue);
	eunlock();
}
