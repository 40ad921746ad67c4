/* journal.c - the names journal: see journal.h */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "events.h"
#include "aqueue.h"
#include "cache.h"
#include "clock.h"
#include "fstate.h"
#include "hsmfs/protocol.h"
#include "inode.h"
#include "journal.h"
#include "log.h"
#include "meta.h"
#include "place.h"
#include "saved.h"
#include "state.h"

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
 * upload ended (as a file renamed during its upload, namer.c), before
 * the old directory is removed at the origin.  Into inos and paths
 * (owned), at most max: how many.  Without S.lock.
 */
static size_t uploads_below(const char *to, uint64_t *inos, char **paths, size_t max)
{
	size_t n = 0, len = strlen(to);

	elock();
	for (unsigned i = 0; i < ARCHIVERS && n < max; i++) {
		struct fstate *fs = archive_running(i);
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
		uint64_t up_ino[ARCHIVERS];
		char *up_path[ARCHIVERS];
		size_t nup = dir && events_names_follow() ?
				     uploads_below(to, up_ino, up_path, ARCHIVERS) : 0;
		int res = meta_begin(S.cfg.meta);

		if (!res && dir && events_names_follow())
			res = dir_renamed_ops(from, to, sub, nsub, true);
		if (!res)
			res = meta_op_renamed(S.cfg.meta, from, to, file);
		/*
		 * its object is made under the old name: moved once the upload
		 * ended (the namer waits for it, namer.c)
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
			uint64_t busy[ARCHIVERS + 1];
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

void events_unlinked(struct inode *in, uint64_t ino, bool user, const char *path)
{
	struct fstate *fs = in ? inode_state(in) : NULL;
	uint64_t cached = 0, counted = 0;
	char *morigin = NULL, *mversion = NULL; /* memory's object, ahead of the row */
	/* its path, when its row is not written yet (newrow): then none will be */
	char mpath[HSMFS_MAX_PATH + 1] = "";
	bool uploading = false;

	if (fs) {
		elock();
		/*
		 * Its upload in flight: the origin may have it when it ends,
		 * though the row says it never did (recorded below, and by the
		 * archiver then: upload.c)
		 */
		uploading = fs->arch == ARCH_RUNNING;
		if (fs->origin && !(fs->flags & META_F_NEW)) {
			morigin = strdup(fs->origin);
			mversion = fs->version ? strdup(fs->version) : NULL;
			if (fs->newrow && (path ? snprintf(mpath, sizeof(mpath), "%s", path) >=
							  (int)sizeof(mpath) :
						  inode_path(in, mpath, sizeof(mpath)) <= 0))
				mpath[0] = 0;
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
		 * archive of names (namer.c), recorded with the row's removal
		 * in one transaction
		 */
		struct meta_file f;
		bool landed = false, removal = false; /* a removal of its object recorded */
		int res = meta_begin(S.cfg.meta), got = 0;

		/*
		 * an upload in flight, or one never answered (meta.h: landings),
		 * may have made a version the row does not know: the removal is
		 * of whatever version is there
		 */
		if (!res)
			res = meta_landing_has(S.cfg.meta, ino, &landed);
		if (!res && !(got = meta_get(S.cfg.meta, ino, &f))) {
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
				/* held by the namer until the upload ends (namer.c) */
				res = meta_op_add(S.cfg.meta, META_OP_DELETE, ino, f.path, NULL, NULL);
			meta_file_free(&f);
		} else if (!res && got == -ENOENT && morigin && mpath[0]) {
			/*
			 * a new file whose upload answered before the writer
			 * inserted its row (the batch skips a removed file's):
			 * memory alone knows the origin has it
			 */
			removal = true;
			res = meta_op_add(S.cfg.meta, META_OP_DELETE, ino, mpath, morigin,
					  uploading || landed ? NULL : mversion);
		}
		/*
		 * an object a new file's upload may have made, not recorded: it
		 * goes too (one in flight: its archiver settles it, upload.c);
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
