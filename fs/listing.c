/*
 * listing.c - the commit of a directory's listing, of a refresh's, or
 * of a lookup's answer (durability step 5, state.h): the hook's
 * staging file parsed (JSON Lines, manifest.h), every entry made in the
 * store (place.h) and the store synced, then one transaction records
 * the entries and the directory as listed.  Names changed through the
 * mount since the event started are claimed by the user (names.h) and
 * left as the user made them.  dirs.c calls it from its lister thread;
 * see listing.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "events.h"
#include "aqueue.h"
#include "engine.h"
#include "fault.h"
#include "fstate.h"
#include "journal.h"
#include "inode.h"
#include "listing.h"
#include "log.h"
#include "manifest.h"
#include "meta.h"
#include "names.h"
#include "place.h"
#include "store.h"

#define LISTING_MAX (1ULL << 30) /* a listing's bytes, at most */

struct listing {
	struct manifest_entry *v;
	size_t n, cap;
	bool partial; /* a "partial" line: the names are a page's links */
};

static int cmp_names(const void *a, const void *b)
{
	return strcmp(((const struct manifest_entry *)a)->path,
		      ((const struct manifest_entry *)b)->path);
}

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		manifest_entry_free(&l->v[i]);
	free(l->v);
}

/* Parse the staging file's JSON Lines into l, sorted by name.  0 or -EIO. */
static int parse_listing(int fd, const char *dirpath, struct listing *l)
{
	struct stat st;
	const char *p, *end, *nl;
	char *map = NULL;
	unsigned lineno = 0;
	char err[256];

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size > LISTING_MAX) {
		elog_err("listing of '/%s': %lld bytes, more than %llu", dirpath,
			(long long)st.st_size, LISTING_MAX);
		return -EIO;
	}
	if (!st.st_size)
		return 0;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return -errno;
	for (p = map, end = map + st.st_size; p < end; p = nl + 1) {
		size_t len;

		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		lineno++;
		len = (size_t)(nl - p);
		while (len && (p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (!len)
			continue;
		if (l->n == l->cap) {
			size_t cap = l->cap ? 2 * l->cap : 256;
			void *v = realloc(l->v, cap * sizeof(*l->v));

			if (!v) {
				munmap(map, (size_t)st.st_size);
				return -ENOMEM;
			}
			l->v = v;
			l->cap = cap;
		}
		if (manifest_parse_line(p, len, &l->v[l->n], err, sizeof(err))) {
			elog_err("listing of '/%s', line %u: %s", dirpath, lineno, err);
			goto bad;
		}
		if (!strcmp(l->v[l->n].path, ".") && l->v[l->n].partial) {
			/* the directory itself: its names are a page's links */
			l->partial = true;
			manifest_entry_free(&l->v[l->n]);
			continue;
		}
		if (strchr(l->v[l->n].path, '/')) {
			elog_err("listing of '/%s', line %u: '%s' is not one name", dirpath,
				lineno, l->v[l->n].path);
			manifest_entry_free(&l->v[l->n]);
			goto bad;
		}
		l->n++;
	}
	munmap(map, (size_t)st.st_size);
	if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), cmp_names);
	for (size_t i = 1; i < l->n; i++)
		if (!strcmp(l->v[i - 1].path, l->v[i].path)) {
			elog_err("listing of '/%s': '%s' twice", dirpath, l->v[i].path);
			return -EIO;
		}
	return 0;
bad:
	munmap(map, (size_t)st.st_size);
	return -EIO;
}

static bool listed(const struct listing *l, const char *name)
{
	struct manifest_entry key = { .path = (char *)name };

	return l->n && bsearch(&key, l->v, l->n, sizeof(*l->v), cmp_names);
}

/*
 * What a crashed listing made that this one does not name: entries with
 * no row that carry a mark, or are empty.  Nobody else could have made
 * them (the directory was never listed).
 */
static void remove_leftovers(int dfd, const struct listing *l, bool is_root, uint64_t dino,
			     uint64_t plan)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d))) {
		struct meta_file f;
		struct stat st;
		bool dir, ours;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (is_root && !strcmp(de->d_name, STORE_STATE_DIR)) || listed(l, de->d_name))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!meta_get(S.cfg.meta, st.st_ino, &f)) {
			meta_file_free(&f); /* imported: kept */
			continue;
		}
		dir = S_ISDIR(st.st_mode);
		ours = (S_ISREG(st.st_mode) && !st.st_size) || dir;
		if (!ours && S_ISREG(st.st_mode)) {
			int ffd = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

			ours = ffd >= 0 && fgetxattr(ffd, STORE_MARKER_XATTR, NULL, 0) >= 0;
			if (ffd >= 0)
				close(ffd);
		}
		/* a directory goes only if empty (rmdir fails otherwise) */
		if (!ours || !names_claim(dino, de->d_name, plan))
			continue;
		if (unlinkat(dirfd(d), de->d_name, dir ? AT_REMOVEDIR : 0) == 0)
			elog_info("listing: removed '%s', left by an earlier listing", de->d_name);
		names_release(dino, de->d_name);
	}
	closedir(d);
}

/* ------------------------------------------------------------ refresh */

enum plan { P_SAME, P_NEW, P_REPLACE, P_KEEP };

/*
 * A file a refresh replaced or removed: the kernel may still reach it
 * (a dentry not invalidated yet, an O_PATH descriptor) and open it
 * after its row went.  Its state is loaded now, while the row is there,
 * and marked stale: such an open's reads of missing bytes fail with
 * EIO, never read a placeholder's holes as zeros.  Called, as
 * events_unlinked() is, when its last name went, before that.
 */
static void orphaned(struct inode *victim)
{
	if (victim)
		events_mark_stale(victim);
}

/*
 * Open, or changed through the mount (perhaps not in the database yet)?
 * A dirty file whose local change is dropped (hsmfsctl resolve
 * --take-origin) is in use only while open or being changed.
 */
static bool in_use(struct inode *in)
{
	struct fstate *fs;
	bool dirty;

	if (!in)
		return false;
	if (inode_is_open(in))
		return true;
	elock();
	fs = inode_state(in);
	dirty = fs && (fs->changes || (fs->state == META_DIRTY && !take_wanted(fs->ino)));
	eunlock();
	return dirty;
}

/*
 * Is the local change of ino dropped (resolve --take-origin)?  Asked
 * of memory, whatever its row says yet (the writer may lag).  Without
 * S.lock.
 */
static bool taking(uint64_t ino)
{
	bool take;

	elock();
	take = take_wanted(ino);
	eunlock();
	return take;
}

/* The refresh replaced or removed the file ino: a take of it is done. */
static void taken(uint64_t ino)
{
	elock();
	take_done(ino);
	eunlock();
}

/* Is v an entity tag (an ETag: quoted, or weak), not a date? */
static bool is_etag(const char *v)
{
	return v[0] == '"' || !strncmp(v, "W/", 2);
}

/*
 * Is the recorded version the listed entry's?  The same string; or, when
 * an archive recorded the ETag its upload got and the listing gives
 * dates (nginx: its Last-Modified is the mtime the upload set, its ETag
 * that mtime and the size), the same when the listed mtime is the store
 * file's (st) to the second: the sizes are compared by the caller.
 */
static bool same_version(const char *recorded, const struct manifest_entry *e,
			 const struct stat *st)
{
	const char *listed = e->version ? e->version : "";

	if (!recorded)
		recorded = "";
	if (!strcmp(recorded, listed))
		return true;
	return is_etag(recorded) && listed[0] && !is_etag(listed) && e->has_mtime &&
	       e->mtime == (int64_t)st->st_mtim.tv_sec;
}

/* Write the rows place_entry_deferred() handed back.  In a transaction. */
static int put_rows(const struct meta_file *rows, size_t n)
{
	int res = 0;

	for (size_t i = 0; !res && i < n; i++)
		if (rows[i].ino)
			res = meta_put(S.cfg.meta, &rows[i]);
	return res;
}

static void free_rows(struct meta_file *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].path);
	free(rows);
}

/*
 * A listed directory listed again (durability as a first listing's, by
 * another road: nothing appears under a name before its row is
 * committed).  New and changed entries are made in the state directory
 * first, under names of their own, with their rows, synced and committed
 * ("listing-made", "listing-committed"); then each is renamed into place
 * (a changed file replaces the old one, whose row goes: a reader that has
 * it open keeps the whole old version, never a mix); then names the
 * origin no longer has go.  Dirty, open and unmanaged entries stay, and
 * so does every name changed through the mount since the listing was
 * asked (names_plan): a save over it, a removal, a rename away or onto
 * it; the claim is taken and the name checked at the rename or unlink
 * itself, so a user change either comes before it (and wins) or waits
 * for that one call.
 * A crash leaves rows of files nobody reaches (the check after an unclean
 * stop drops them) or the old entry where it was.  Without S.lock.
 */
static int apply_refresh(struct inode *dir, int dfd, const struct listing *l,
			 const char *dirpath, int n, uint64_t names_plan)
{
	char rel[2 * HSMFS_MAX_PATH + 2], tmp[64], err[512];
	enum plan *plan = calloc(l->n ? l->n : 1, sizeof(*plan));
	struct meta_file *rows = calloc(l->n ? l->n : 1, sizeof(*rows));
	unsigned added = 0, changed = 0, removed = 0, kept = 0;
	uint64_t dino = inode_ino(dir);
	struct meta_file row;
	int res = 0;
	size_t i;

	if (!plan || !rows) {
		free(plan);
		free(rows);
		return -ENOMEM;
	}
	/* the entries first, their rows after the sync (see apply_listing) */
	for (i = 0; !res && i < l->n; i++) {
		const struct manifest_entry *e = &l->v[i];
		enum place_outcome o;
		struct stat st;
		bool created;

		if (fstatat(dfd, e->path, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			plan[i] = P_NEW;
		} else if (meta_get(S.cfg.meta, st.st_ino, &row)) {
			plan[i] = P_KEEP; /* made through the mount: the user's */
		} else {
			bool is_dir = row.state == META_DIR_UNLISTED || row.state == META_DIR_LISTED;
			bool same = is_dir == e->is_dir &&
				    (is_dir || (row.size == e->size &&
						same_version(row.version, e, &st) &&
						!strcmp(row.origin ? row.origin : "",
							e->url ? e->url : "")));

			if (is_dir || e->is_dir)
				plan[i] = same ? P_SAME : P_KEEP;
			else if (taking(st.st_ino))
				plan[i] = P_REPLACE; /* its local change dropped: the origin's
						      * bytes, even of the same version */
			else if (row.state == META_DIRTY)
				plan[i] = same ? P_SAME : P_KEEP;
			else
				plan[i] = same ? P_SAME : P_REPLACE;
			meta_file_free(&row);
		}
		if (plan[i] == P_KEEP)
			kept++;
		if (plan[i] != P_NEW && plan[i] != P_REPLACE)
			continue;
		snprintf(rel, sizeof(rel), "%s%s%s", dirpath, n ? "/" : "", e->path);
		snprintf(tmp, sizeof(tmp), "refresh-%llu-%zu", (unsigned long long)dino, i);
		unlinkat(S.cfg.state_fd, tmp, 0); /* left by a crash */
		unlinkat(S.cfg.state_fd, tmp, AT_REMOVEDIR);
		res = place_entry_deferred(S.cfg.meta, S.cfg.state_fd, tmp, rel, e, false,
					   &rows[i], &created, &o, err, sizeof(err));
		if (res)
			elog_err("refresh of '/%s': %s", dirpath, err);
	}
	if (!res && (may_block("syncfs"), syncfs(dfd)) < 0)
		res = -errno;
	if (!res)
		fault_point(FAULT_LIST_MADE);
	if (!res && !(res = meta_begin(S.cfg.meta)) && !(res = put_rows(rows, l->n)))
		res = meta_commit(S.cfg.meta);
	free_rows(rows, l->n);
	if (res) {
		meta_rollback(S.cfg.meta);
		for (i = 0; i < l->n; i++)
			if (plan[i] == P_NEW || plan[i] == P_REPLACE) {
				snprintf(tmp, sizeof(tmp), "refresh-%llu-%zu",
					 (unsigned long long)dino, i);
				unlinkat(S.cfg.state_fd, tmp, l->v[i].is_dir ? AT_REMOVEDIR : 0);
			}
		free(plan);
		return res == -EIO || res == -ENOSPC || res == -EDQUOT ? res : -EIO;
	}
	fault_point(FAULT_LIST_COMMITTED);
	/* into place: a new name only if nobody made it meanwhile */
	for (i = 0; i < l->n; i++) {
		const char *name = l->v[i].path;
		struct inode *victim = NULL;
		struct stat old, made;
		int r, hold = -1;

		if (plan[i] != P_NEW && plan[i] != P_REPLACE)
			continue;
		snprintf(tmp, sizeof(tmp), "refresh-%llu-%zu", (unsigned long long)dino, i);
		fstatat(S.cfg.state_fd, tmp, &made, AT_SYMLINK_NOFOLLOW);
		/* each file removed below lives until its row is gone (store.h) */
		if (plan[i] == P_REPLACE) {
			victim = inode_hold_name(dir, name, true, &old);
			hold = store_hold(dfd, name);
		}
		if (in_use(victim)) {
			/* in use (open or changed): kept, asked again next refresh */
			r = -EBUSY;
		} else if (!names_claim(dino, name, names_plan)) {
			/* changed through the mount since the listing was asked */
			r = -EBUSY;
		} else {
			if (plan[i] == P_REPLACE)
				r = renameat(S.cfg.state_fd, tmp, dfd, name) < 0 ? -errno : 0;
			else
				r = renameat2(S.cfg.state_fd, tmp, dfd, name, RENAME_NOREPLACE) <
					    0 ? -errno : 0;
			if (!r && victim)
				inode_name_gone(victim, dir, name, old.st_nlink);
			names_release(dino, name);
			if (!r && victim && old.st_nlink == 1)
				orphaned(victim);
			/* its other names (the user's links): one link fewer */
			if (!r && victim && old.st_nlink > 1)
				front_inval((struct inval){ .kind = INVAL_ATTR, .in = victim });
		}
		if (r) {
			/* made or changed meanwhile through the mount, or in use:
			 * theirs wins */
			store_release(hold); /* the victim stays */
			hold = store_hold(S.cfg.state_fd, tmp);
			unlinkat(S.cfg.state_fd, tmp, l->v[i].is_dir ? AT_REMOVEDIR : 0);
			fault_delay(FAULT_LIST_DROPPED);
			events_unlinked(NULL, made.st_ino, false, NULL);
			kept++;
		} else if (plan[i] == P_REPLACE) {
			fault_delay(FAULT_LIST_DROPPED);
			if (old.st_nlink == 1)
				events_unlinked(NULL, old.st_ino, false, NULL);
			taken(old.st_ino);
			changed++;
		} else {
			added++;
		}
		store_release(hold);
		inode_release(victim);
		if (!r)
			front_inval((struct inval){ .kind = INVAL_ENTRY, .in = dir,
						    .name = name });
	}
	/* names the origin no longer has: clean files and empty directories go */
	{
		int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		struct dirent *de;
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

		if (!d && fd >= 0)
			close(fd);
		while (d && (de = readdir(d))) {
			struct inode *victim;
			struct stat st;
			bool dirent_dir, gone = false;
			int hold;

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
			    (dir == inode_root() && !strcmp(de->d_name, STORE_STATE_DIR)) ||
			    listed(l, de->d_name))
				continue;
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    meta_get(S.cfg.meta, st.st_ino, &row))
				continue; /* the user's own */
			dirent_dir = S_ISDIR(st.st_mode);
			/*
			 * A file of more than one name: a user linked it (a
			 * listing makes one name a file), and which name is
			 * the origin's is not known: every one stays, the user's
			 * change wins.
			 */
			if ((row.state == META_DIRTY && !taking(st.st_ino)) ||
			    (!dirent_dir && st.st_nlink > 1)) {
				meta_file_free(&row);
				kept++;
				continue;
			}
			meta_file_free(&row);
			victim = inode_hold_name(dir, de->d_name, true, &st);
			hold = store_hold(dirfd(d), de->d_name); /* until its row is gone */
			/* not changed through the mount since the listing was asked */
			if (!in_use(victim) && names_claim(dino, de->d_name, names_plan)) {
				gone = unlinkat(dirfd(d), de->d_name,
						dirent_dir ? AT_REMOVEDIR : 0) == 0;
				if (gone && victim)
					inode_name_gone(victim, dir, de->d_name, st.st_nlink);
				names_release(dino, de->d_name);
				if (gone && !dirent_dir && st.st_nlink == 1)
					orphaned(victim);
			}
			if (gone) {
				fault_delay(FAULT_LIST_DROPPED);
				if (dirent_dir || st.st_nlink == 1)
					events_unlinked(NULL, st.st_ino, false, NULL);
				taken(st.st_ino);
				removed++;
				front_inval((struct inval){ .kind = INVAL_ENTRY, .in = dir,
							    .name = de->d_name });
			} else {
				kept++;
			}
			store_release(hold);
			inode_release(victim);
		}
		if (d)
			closedir(d);
	}
	/* when it was listed, for hsmfsctl status; and from what */
	if (!meta_get(S.cfg.meta, dino, &row)) {
		row.atime = now_ms();
		row.flags = l->partial ? row.flags | META_F_PARTIAL : row.flags & ~META_F_PARTIAL;
		meta_put(S.cfg.meta, &row);
		meta_file_free(&row);
	}
	/* the kernel's names (each invalidate_entry above), its cached
	 * listing of dir, and dir's links and times */
	if (added || changed || removed) {
		front_inval((struct inval){ .kind = INVAL_NAMES });
		front_inval((struct inval){ .kind = INVAL_DATA, .in = dir });
	}
	elog_info("refreshed '/%s': %u new, %u changed, %u gone, %u kept as they are", dirpath,
		 added, changed, removed, kept);
	free(plan);
	return 0;
}

/*
 * The answer l of a PRE_LOOKUP of name in the unlisted directory dfd: its
 * one entry made (as a listing makes it, durably) or -ENOENT; the
 * directory stays unlisted.  Without S.lock.
 */
static int apply_lookup(int dfd, const struct listing *l, const char *dirpath, int n,
			const char *name, uint64_t dino, uint64_t names_plan)
{
	char rel[2 * HSMFS_MAX_PATH + 2], err[512];
	struct meta_file row = { 0 };
	enum place_outcome o;
	bool created;
	int res;

	if (!l->n)
		return -ENOENT; /* no such name at the origin */
	if (l->n > 1 || strcmp(l->v[0].path, name)) {
		elog_err("lookup of '%s' in '/%s': the answer is not that one name", name,
			dirpath);
		return -EIO;
	}
	snprintf(rel, sizeof(rel), "%s%s%s", dirpath, n ? "/" : "", name);
	if (!names_claim(dino, name, names_plan))
		return 0; /* changed through the mount meanwhile: as it is now */
	res = place_entry_deferred(S.cfg.meta, dfd, name, rel, &l->v[0], true, &row, &created,
				   &o, err, sizeof(err));
	names_release(dino, name);
	if (res)
		elog_err("lookup of '%s' in '/%s': %s", name, dirpath, err);
	/* the entry reaches the disk before its row says it is there */
	if (!res && (may_block("syncfs"), syncfs(dfd)) < 0)
		res = -errno;
	if (!res && row.ino && !(res = meta_begin(S.cfg.meta))) {
		res = put_rows(&row, 1);
		if (!res)
			res = meta_commit(S.cfg.meta);
		if (res)
			meta_rollback(S.cfg.meta);
	}
	free(row.path);
	if (res && res != -ENOSPC && res != -EDQUOT)
		res = -EIO;
	return res;
}

/*
 * Commit the listing (or, with name, the lookup answer) in stage below
 * dir: parsed, then applied by apply_lookup(), apply_refresh() or, as a
 * first listing, here: every entry made, dir recorded as listed
 * (durability step 5).  Without S.lock.  0 or -errno.
 */
int apply_listing(struct inode *dir, int stage, const char *name, bool refresh,
		  uint64_t names_plan, bool *ret_partial)
{
	struct listing l = { 0 };
	char dirpath[HSMFS_MAX_PATH + 1], rel[2 * HSMFS_MAX_PATH + 2], err[512], proc[32];
	struct meta_file row, *rows = NULL;
	int pfd, dfd = -1, res, n;
	int64_t t0 = now_ms(), t_parsed, t_made, t_synced;
	size_t i;

	n = inode_path(dir, dirpath, sizeof(dirpath));
	if (n < 0)
		return n;
	res = parse_listing(stage, dirpath, &l);
	t_parsed = now_ms();
	if (res) {
		listing_free(&l);
		return res;
	}
	pfd = inode_fd_get(dir);
	if (pfd < 0) {
		listing_free(&l);
		return pfd;
	}
	inode_proc_path(pfd, proc);
	dfd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		res = -errno;
		goto out;
	}
	if (name || refresh) {
		res = name ? apply_lookup(dfd, &l, dirpath, n, name, inode_ino(dir),
					  names_plan) :
			     apply_refresh(dir, dfd, &l, dirpath, n, names_plan);
		goto out;
	}
	remove_leftovers(dfd, &l, dir == inode_root(), inode_ino(dir), names_plan);
	/* the entries first, their rows after the sync: the database is
	 * held for the writes alone */
	rows = calloc(l.n ? l.n : 1, sizeof(*rows));
	if (!rows) {
		res = -ENOMEM;
		goto out;
	}
	for (i = 0; !res && i < l.n; i++) {
		enum place_outcome o;
		struct meta_file f;
		struct stat st;
		bool created;

		/*
		 * Made already, with its row, by a lookup of that one name
		 * (PRE_LOOKUP): kept as it is, maybe open or changed by now;
		 * hsmfsctl refresh brings a newer version.
		 */
		if (fstatat(dfd, l.v[i].path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    !meta_get(S.cfg.meta, st.st_ino, &f)) {
			meta_file_free(&f);
			continue;
		}
		/*
		 * Nobody changes names here through the mount before it is
		 * listed, unless an import listed it meanwhile; a claim refused
		 * here is that, or a change without a record (no memory), which
		 * refuses every name: the listing fails and is asked again, it
		 * never commits the directory listed with names left out.
		 */
		if (!names_claim(inode_ino(dir), l.v[i].path, names_plan)) {
			res = -EAGAIN;
			snprintf(err, sizeof(err), "'%s' changed through the mount meanwhile",
				 l.v[i].path);
			elog_err("listing of '/%s': %s; listed again on the next look", dirpath,
				err);
			break;
		}
		snprintf(rel, sizeof(rel), "%s%s%s", dirpath, n ? "/" : "", l.v[i].path);
		res = place_entry_deferred(S.cfg.meta, dfd, l.v[i].path, rel, &l.v[i], true,
					   &rows[i], &created, &o, err, sizeof(err));
		names_release(inode_ino(dir), l.v[i].path);
		if (res)
			elog_err("listing of '/%s': %s", dirpath, err);
	}
	t_made = now_ms();
	/* the entries reach the disk before the database says they are there */
	if (!res && (may_block("syncfs"), syncfs(dfd)) < 0) {
		res = -errno;
		elog_err("listing of '/%s': cannot sync the store: %s", dirpath, strerror(-res));
	}
	t_synced = now_ms();
	if (!res)
		fault_point(FAULT_LIST_MADE);
	if (!res && !(res = meta_begin(S.cfg.meta)) && !(res = put_rows(rows, l.n)) &&
	    !(res = meta_get(S.cfg.meta, inode_ino(dir), &row))) {
		row.state = META_DIR_LISTED;
		row.flags = l.partial ? row.flags | META_F_PARTIAL : row.flags & ~META_F_PARTIAL;
		row.atime = now_ms();
		res = meta_put(S.cfg.meta, &row);
		meta_file_free(&row);
	}
	if (!res)
		res = meta_commit(S.cfg.meta);
	if (res) {
		meta_rollback(S.cfg.meta);
		if (res == -ENOENT)
			res = -ESTALE; /* the directory's row went: removed meanwhile */
		else if (res != -EIO && res != -ENOSPC && res != -EDQUOT)
			res = -EIO;
		goto out;
	}
	fault_point(FAULT_LIST_COMMITTED);
	*ret_partial = l.partial;
	fremovexattr(dfd, STORE_UNLISTED_XATTR);
	if (atomic_load(&place_unmarked))
		elog_warn("cannot mark placeholders in the store (%s); a lost database could not be rebuilt",
			 strerror(atomic_exchange(&place_unmarked, 0)));
	elog_debug("listed '/%s': %zu names in %lld ms (parse %lld, make %lld, sync %lld, commit %lld)",
		  dirpath, l.n, (long long)(now_ms() - t0), (long long)(t_parsed - t0),
		  (long long)(t_made - t_parsed), (long long)(t_synced - t_made),
		  (long long)(now_ms() - t_synced));
out:
	/* names made below dir: its links and times changed (a refresh's own, above) */
	if (!res && !refresh)
		front_inval((struct inval){ .kind = INVAL_ATTR, .in = dir });
	free_rows(rows, l.n);
	if (dfd >= 0)
		close(dfd);
	inode_fd_put(dir);
	listing_free(&l);
	return res;
}
