/*
 * inode-lookup.c - finding a file by name and reaching it again by its
 * names: see inode.h, inode-int.h
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockcheck.h"
#include "hashset.h"
#include "inode.h"
#include "inode-int.h"
#include "inode-ids.h"
#include "saved.h"

/* in was read from the last mount's table and not checked yet (no lock needed). */
static bool fh_unchecked(const struct inode *in)
{
	return in->fh && !atomic_load_explicit(&in->fh_checked, memory_order_acquire);
}

/*
 * Whether the store file at (dirfd, name; flags AT_EMPTY_PATH: dirfd
 * itself) is the one in->fh names: the store's own handle holds its
 * inode's generation, so a number used again is not the same file.
 */
static bool fh_same(int dirfd, const char *name, int flags, const struct inode *in)
{
	union {
		struct file_handle h;
		uint8_t b[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} u;
	int mnt;

	u.h.handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(dirfd, name, &u.h, &mnt, flags) < 0)
		return false;
	return u.h.handle_type == in->fh->handle_type &&
	       u.h.handle_bytes == in->fh->handle_bytes &&
	       !memcmp(u.h.f_handle, in->fh->f_handle, u.h.handle_bytes);
}

/*
 * in's file is gone and its number may be another file's: no name of it
 * is known (removed, through the mount or by a listing) and no
 * descriptor holds it (the last, pinned while the kernel remembered it,
 * closed then).  What still references in (a queue's hold, the kernel's
 * node id) keeps a removed file's state: a file found under that number
 * now is another, which must not take it over (its rows are keyed by
 * the number too: lib/store.h store_hold()).  Lock held.
 */
static bool lost_number(const struct inode *in)
{
	return in != &T.root && in != &T.orphans && in != &T.lost && !in->parent &&
	       !in->nnames && in->fd < 0 && !in->pinned && !fh_unchecked(in);
}

/*
 * Take in out of the set: the next file found with its number gets an
 * inode, a node id and a state of its own.  in lives on, reached only
 * by its node id (ESTALE: no alias) and the references it has, until
 * they go (free_one()).  Its record names no file, so a daemon taking
 * over does not give it the new file's number either.  Lock held.
 */
static void unhash(struct inode *in)
{
	struct saved_node *r = saved_node(in->id);

	hashset_remove(&T.set, (uintptr_t)in);
	in->unhashed = true;
	r->dev = r->ino = 0;
}

/*
 * The inode of the store file (dev, ino) just found by name, or NULL: a
 * removed file's inode that number may have outlived is taken out of
 * the set, never returned for another file.  Lock held.
 */
static struct inode *find_found(dev_t dev, ino_t ino)
{
	struct inode *in = hash_find(dev, ino);

	if (in && lost_number(in)) {
		unhash(in);
		in = NULL;
	}
	return in;
}

/* in's handle is checked (its file reached, the same or not).  Lock held. */
static void fh_mark_checked(struct inode *in)
{
	atomic_store_explicit(&in->fh_checked, true, memory_order_release);
}

/*
 * Take a reference on in's alias parent and copy its alias name.
 * Returns 0 (caller drops the reference with inode_release and frees
 * the name) or -ESTALE (no alias) or -ENOMEM.
 */
static int hold_alias(struct inode *in, struct inode **ret_parent, char **ret_name)
{
	struct inode *parent;
	char *name;

	lk_lock(&T.lock, LK_INODES);
	parent = in->parent;
	if (!parent || !(name = strdup(in->name))) {
		lk_unlock(&T.lock, LK_INODES);
		return parent ? -ENOMEM : -ESTALE;
	}
	parent->refs++;
	lk_unlock(&T.lock, LK_INODES);
	*ret_parent = parent;
	*ret_name = name;
	return 0;
}

int inode_lookup(struct inode *parent, const char *name, struct stat *ret_st,
		 struct inode **ret)
{
	struct inode *in;
	struct stat st;
	bool same, moved = false;
	int pfd, res;

	pfd = inode_fd_get(parent);
	if (pfd < 0)
		return pfd;
	res = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
	if (res) {
		inode_fd_put(parent);
		return res;
	}

	lk_lock(&T.lock, LK_INODES);
	in = find_found(st.st_dev, st.st_ino);
	if (in && fh_unchecked(in)) {
		/* the last mount's file (inode_table_load()), or another with its number now */
		in->refs++;
		lk_unlock(&T.lock, LK_INODES);
		same = fh_same(pfd, name, 0, in);
		lk_lock(&T.lock, LK_INODES);
		if (!same && !in->nlookup && fh_unchecked(in))
			in->gen = ++saved_node(in->id)->gen; /* its handles are stale */
		moved = same; /* the same file under a new name: its handles stay */
		fh_mark_checked(in);
		in->refs--;
	}
	if (!in) {
		in = calloc(1, sizeof(*in));
		if (!in) {
			res = -ENOMEM;
			goto out;
		}
		in->dev = st.st_dev;
		in->ino = st.st_ino;
		in->fd = -1;
		in->type = st.st_mode & S_IFMT;
		res = rec_new(in, in->dev, in->ino, in->type, &in->id, &in->gen);
		if (res) {
			free(in);
			goto out;
		}
		if (hashset_add(&T.set, (uintptr_t)in, NULL) < 0) {
			rec_free(in->id);
			free(in);
			res = -ENOMEM;
			goto out;
		}
		T.forgotten++; /* until lookup_ref() below */
	} else if (in->kept_next) {
		/* taken back: not the kept list's to trim while its alias changes */
		kept_unlink(in);
	}
	if (in != &T.root && !in->nlookup && in->parent && !moved && !known_name(in, parent, name)) {
		/*
		 * Forgotten, and found under another name than its own: moved
		 * or removed beside the mount, and its number maybe another
		 * file's now.  Its handles go stale (a new generation: the
		 * kernel knows no inode of this node id), never open this.
		 */
		in->gen = ++saved_node(in->id)->gen;
	}
	if (in != &T.root) {
		res = set_alias_seen(in, parent, name, st.st_nlink);
		if (!res)
			unpin_named(in); /* reachable by name again */
	}
	if (res) {
		maybe_free(in);
		goto out;
	}
	lookup_ref(in);
	*ret_st = st;
	*ret = in;
out:
	lk_unlock(&T.lock, LK_INODES);
	inode_fd_put(parent); /* after: parent's descriptor served the check above */
	return res;
}

int inode_lookup_dot(struct inode *in, bool dotdot, struct stat *ret_st, struct inode **ret)
{
	struct inode *target = in;
	struct stat st;
	char *name;
	int fd, res;

	/* a node id never given, or freed since; the state directory's is never given */
	if (in == &T.lost || in == &T.orphans)
		return -ESTALE;
	if (dotdot && !S_ISDIR(in->type))
		return -ENOTDIR;
	if (dotdot && in != &T.root) {
		res = hold_alias(in, &target, &name);
		if (res)
			return res;
		free(name);
		if (target == &T.orphans) {
			inode_release(target);
			return -ESTALE;
		}
	} else {
		inode_ref(in);
	}
	fd = inode_fd_get(target);
	res = fd < 0 ? fd : fstat(fd, &st) < 0 ? -errno : 0;
	if (fd >= 0)
		inode_fd_put(target);
	if (!res && (st.st_dev != target->dev || st.st_ino != target->ino))
		res = -ESTALE;
	if (!res) {
		lk_lock(&T.lock, LK_INODES);
		lookup_ref(target);
		lk_unlock(&T.lock, LK_INODES);
	}
	inode_release(target);
	if (res)
		return res == -ENOENT ? -ESTALE : res;
	*ret_st = st;
	*ret = target;
	return 0;
}

int inode_fd_get(struct inode *in)
{
	struct inode *parent;
	char *name;
	struct stat st;
	int pfd, fd;

again:
	lk_lock(&T.lock, LK_INODES);
	if (in->fd >= 0) {
		if (in->lru_next)
			lru_unlink(in);
		in->fd_users++;
		fd = in->fd;
		lk_unlock(&T.lock, LK_INODES);
		return fd;
	}
	lk_unlock(&T.lock, LK_INODES);
	fd = hold_alias(in, &parent, &name);
	if (fd)
		return fd;

	pfd = inode_fd_get(parent);
	if (pfd >= 0) {
		fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			fd = errno == ENOENT ? -ESTALE : -errno;
		else if (fstat(fd, &st) < 0 || st.st_dev != in->dev ||
			 st.st_ino != in->ino || (fh_unchecked(in) && !fh_same(fd, "", AT_EMPTY_PATH, in))) {
			close(fd);
			fd = -ESTALE; /* replaced outside the mount */
		}
		inode_fd_put(parent);
	} else {
		fd = pfd;
	}

	lk_lock(&T.lock, LK_INODES);
	if (fd == -ESTALE && in->nnames && same_name(in->parent, in->name, parent, name)) {
		/* the alias reaches it no more: its next name (each tried once) */
		alias_fall_back(in);
		parent->refs--;
		maybe_free(parent);
		lk_unlock(&T.lock, LK_INODES);
		free(name);
		goto again;
	}
	free(name);
	parent->refs--;
	maybe_free(parent);
	if (fd >= 0)
		fh_mark_checked(in); /* the same file: fh_same() above */
	if (fd >= 0) {
		if (in->fd >= 0) {
			/* another thread opened it meanwhile */
			close(fd);
			if (in->lru_next)
				lru_unlink(in);
		} else {
			in->fd = fd;
			T.cached_fds++;
		}
		in->fd_users++;
		fd = in->fd;
	}
	lk_unlock(&T.lock, LK_INODES);
	return fd;
}

void inode_fd_put(struct inode *in)
{
	lk_lock(&T.lock, LK_INODES);
	assert(in->fd_users > 0);
	if (!--in->fd_users && !in->pinned && in->fd >= 0)
		fd_idle(in);
	maybe_free(in);
	lk_unlock(&T.lock, LK_INODES);
}

int inode_parent_fd_get(struct inode *in, struct inode **ret_parent,
			char **ret_name)
{
	struct inode *parent;
	char *name;
	int fd;

	fd = hold_alias(in, &parent, &name);
	if (fd)
		return fd;
	fd = inode_fd_get(parent);
	if (fd < 0) {
		free(name);
		inode_release(parent);
		return fd;
	}
	*ret_parent = parent;
	*ret_name = name;
	return fd;
}

void inode_parent_fd_put(struct inode *parent, char *name)
{
	free(name);
	inode_fd_put(parent);
	inode_release(parent);
}

struct inode *inode_hold_name(struct inode *parent, const char *name,
			      bool removing, struct stat *ret_st)
{
	struct inode *in;
	bool keep;
	int pfd, fd;

	memset(ret_st, 0, sizeof(*ret_st));
	pfd = inode_fd_get(parent);
	if (pfd < 0)
		return NULL;
	if (fstatat(pfd, name, ret_st, AT_SYMLINK_NOFOLLOW) < 0) {
		inode_fd_put(parent);
		memset(ret_st, 0, sizeof(*ret_st));
		return NULL;
	}
	inode_fd_put(parent);

	lk_lock(&T.lock, LK_INODES);
	in = find_found(ret_st->st_dev, ret_st->st_ino);
	if (in)
		in->refs++;
	/*
	 * It outlives this name (another link, an open file, a directory
	 * that is some process's working directory, anything the kernel
	 * still holds): keep a descriptor to reach it until it is forgotten.
	 */
	keep = in && (ret_st->st_nlink > 1 || in->nopen || in->nlookup);
	lk_unlock(&T.lock, LK_INODES);
	if (!removing || !keep)
		return in;
	fd = inode_fd_get(in);
	if (fd >= 0) {
		lk_lock(&T.lock, LK_INODES);
		in->pinned = true;
		lk_unlock(&T.lock, LK_INODES);
		inode_fd_put(in);
	}
	return in;
}
