/* namer.c - the namer: see namer.h */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "aqueue.h"
#include "clock.h"
#include "engine.h"
#include "event.h"
#include "evict.h"
#include "fault.h"
#include "fstate.h"
#include "inode.h"
#include "log.h"
#include "meta.h"
#include "namer.h"
#include "route.h"
#include "upload.h"
#include "writeback.h"

#define WALK_TRIES 50 /* row_walk()'s looks, 10 ms apart */

static struct {
	pthread_t namer;
	bool namer_running;
	unsigned name_syncs;    /* syncs waiting for every name to be applied */
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
} N;

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
	running = archive_ino_running(ino);
	eunlock();
	if (!running)
		return 0;
	elog_debug("name op %lld: waits for the upload of inode %llu", seq,
		   (unsigned long long)ino);
	elock();
	while (archive_ino_running(ino) && !AQ.stop) {
		struct timespec ts;

		mono_after(&ts, 0.05);
		pthread_cond_timedwait(&AQ.ncond, &S.lock, &ts);
	}
	res = AQ.stop ? -ESHUTDOWN : 0;
	eunlock();
	return res;
}

/*
 * Is the object a removal names (op->origin) the object of the file that
 * has op->path on the mount now, another than op's?  Its upload in flight
 * is waited for first: it may be making that object.  A removal recorded
 * by an upload that ended after its file was removed (upload.c) comes
 * after every op of its path, so after the upload of a file saved over
 * it there (as git saves logs/HEAD.lock over logs/HEAD), which may have
 * got the version it names (nginx's is the mtime and size): it removed
 * that file's object, which its row recorded there, and sync exited 0.
 * Whatever its version: an op of a file waits for that file's upload to
 * end, so the removed file's bytes landed before the other's upload
 * began, and a conditional removal would find the other's version and
 * count a conflict (an editor's save by rename).  1 (kept: the object
 * is that file's), 0, or -ESHUTDOWN.
 */
static int object_held(const struct meta_op *op)
{
	struct inode *in;
	struct fstate *fs;
	bool held;
	int res;

	if (!op->path || !op->origin || walk_to(op->path, 0, &in))
		return 0;
	elock();
	while ((fs = inode_state(in)) && fs->arch == ARCH_RUNNING && !AQ.stop) {
		struct timespec ts;

		mono_after(&ts, 0.05);
		pthread_cond_timedwait(&AQ.ncond, &S.lock, &ts);
	}
	held = fs && !fs->gone && fs->ino != op->ino && fs->origin &&
	       !strcmp(fs->origin, op->origin);
	res = AQ.stop ? -ESHUTDOWN : held;
	eunlock();
	inode_forget(in, 1);
	if (res > 0)
		elog_debug("name op %lld: '%s' is the object of the file at '%s' now: kept",
			   (long long)op->seq, op->origin, op->path);
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

int row_walk(uint64_t ino, const char *path, struct inode **ret)
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
		res = object_held(op);
		if (res)
			return res < 0 ? res : 0;
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
	while (fs && fs->arch == ARCH_RUNNING && !AQ.stop) {
		struct timespec ts;

		mono_after(&ts, 0.05);
		pthread_cond_timedwait(&AQ.ncond, &S.lock, &ts);
	}
	if (!fs || !fs->origin || (fs->flags & META_F_NEW) || fs->gone || AQ.stop) {
		elog_debug("name op %lld: inode %llu has no object to move (%s)", (long long)op->seq,
			   (unsigned long long)op->ino, !fs ? "no state" : !fs->origin ? "no origin" :
			   fs->flags & META_F_NEW ? "new" : fs->gone ? "gone" : "stopping");
		eunlock();
		inode_forget(in, 1);
		return AQ.stop ? -ESHUTDOWN : 0;
	}
	/*
	 * No fill of it asks the origin while its object moves (the hook
	 * copies it, then removes it from the old place: a fill of the
	 * old URL then found nothing, and the reader got EIO): from here
	 * its fills stay queued (dispatch()), and the ones a hook has are
	 * waited for (their timeout at most)
	 */
	fs->naming = true;
	while (fill_sent(fs) && !AQ.stop) {
		struct timespec ts;

		mono_after(&ts, 0.05);
		pthread_cond_timedwait(&AQ.ncond, &S.lock, &ts);
	}
	{
		char *o = strdup(fs->origin), *v = fs->version ? strdup(fs->version) : NULL;
		bool landed = false, gone_moving;

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
		fault_delay(FAULT_NAME_ANSWERED);
		if (!res && landed && meta_landing_clear(S.cfg.meta, op->ino))
			elog_warn("cannot forget where '%s' was uploaded: %s", op->path,
				  meta_errmsg(S.cfg.meta));
		elock();
		/*
		 * removed while it moved: its removal was recorded with the
		 * object's old place.  Removed after this (the batch below),
		 * with the new one (memory's: events_unlinked())
		 */
		gone_moving = fs->gone;
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
			bool all = events_object_lost(fs);

			archive_writeback(fs);
			if (all)
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
			fault_delay(FAULT_NAME_MOVED);
			res = writeback_next_batch();
		}
		/*
		 * removed on the mount while it moved: its removal was recorded
		 * with the object's old place; it goes from the new one
		 */
		if (!res && gone_moving && fs->origin && !(gone_origin = strdup(fs->origin)))
			res = -ENOMEM;
		if (gone_origin && fs->version && !(gone_version = strdup(fs->version)))
			res = -ENOMEM;
		free(o);
		free(v);
	}
	fs->naming = false;
	pthread_cond_broadcast(&AQ.cond); /* it may be due meanwhile */
	redispatch_queue(); /* its fills held meanwhile, of the new place */
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
	while (!AQ.stop) {
		int64_t now = mono_ms();
		struct meta_op op;
		struct timespec ts;
		uint64_t count = 0, asked;
		int res;

		/* the ops waiting, for the statistics (a count is a scan: a second apart) */
		if (now - N.names_counted_at >= 1000) {
			N.names_counted_at = now;
			eunlock();
			res = meta_op_count(S.cfg.meta, &count);
			elock();
			if (!res)
				N.names_pending = count;
		}

		if ((!S.cfg.writeback_on && !N.name_syncs && !AQ.names_kick) ||
		    (N.names_retry_at && now < N.names_retry_at)) {
			mono_after(&ts, N.names_retry_at > now ?
					(double)(N.names_retry_at - now) / 1000 : 1.0);
			pthread_cond_timedwait(&AQ.ncond, &S.lock, &ts);
			continue;
		}
		AQ.names_wanted = false;
		asked = N.names_asked;
		eunlock();
		res = meta_op_first(S.cfg.meta, &op);
		if (res == -ENOENT) {
			fault_delay(FAULT_NAMES_LOOKED);
			elock();
			N.names_seen = asked;
			AQ.names_kick = false;
			pthread_cond_broadcast(&N.names_done);
			if (!AQ.names_wanted && !AQ.stop && N.names_asked == asked) {
				mono_after(&ts, 1.0);
				pthread_cond_timedwait(&AQ.ncond, &S.lock, &ts);
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
			N.names_err = res;
			N.names_retry_at = mono_ms() + BACKOFF_MIN_MS;
		} else if (res) {
			N.names_tries++;
			N.names_err = res;
			N.names_retry_at = mono_ms() + backoff_ms(N.names_tries);
			elog_warn("a name change could not be applied at the origin: %s (attempt %u)",
				  strerror(-res), N.names_tries);
			S.st.archive_failed++;
		} else {
			N.names_tries = 0;
			N.names_err = 0;
			N.names_retry_at = 0;
		}
		pthread_cond_broadcast(&N.names_done);
	}
	eunlock();
	return NULL;
}

int names_synced(void)
{
	int64_t until;
	uint64_t mine;
	int res = 0;

	elock();
	if (!N.namer_running) {
		eunlock();
		return 0;
	}
	N.name_syncs++;
	mine = ++N.names_asked;
	N.names_err = 0;
	N.names_retry_at = 0; /* asked: at once */
	pthread_cond_broadcast(&AQ.ncond);
	until = mono_ms() + (int64_t)(S.cfg.timeout * 1000);
	while (!AQ.stop && N.names_seen < mine) {
		struct timespec ts;

		/* no archive hook yet: waited for, as by an archive (attempt_ended) */
		if (N.names_err == -ENOTCONN && !S.cfg.nohook_fail && mono_ms() < until)
			N.names_err = 0;
		else if (N.names_err)
			break;
		mono_after(&ts, 0.1);
		pthread_cond_timedwait(&N.names_done, &S.lock, &ts);
	}
	res = AQ.stop ? -ESHUTDOWN : N.names_seen >= mine ? 0 : N.names_err;
	N.name_syncs--;
	eunlock();
	return res;
}

void namer_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&N.names_done, &ca);
	pthread_condattr_destroy(&ca);
}

void namer_start(void)
{
	if (!pthread_create(&N.namer, NULL, namer_main, NULL))
		N.namer_running = true;
}

void namer_stop(void)
{
	elock();
	pthread_cond_broadcast(&N.names_done);
	eunlock();
	if (N.namer_running)
		pthread_join(N.namer, NULL);
	N.namer_running = false;
}

uint64_t namer_pending(void)
{
	ELOCK_HELD();
	return N.names_pending;
}
