/* inode.c - see inode.h */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockcheck.h"
#include "hashset.h"
#include "inode.h"

#define FUSE_ROOT_NODEID 1

struct inode {
	struct inode_head head;  /* must stay first: see inode.h */
	void *state;             /* other module's per-file state, or NULL */
	dev_t dev;               /* key: store st_dev */
	ino_t ino;               /* key: store st_ino */
	uint64_t nlookup;        /* kernel lookup references */
	uint32_t refs;           /* child aliases + holds */
	uint32_t fd_users;       /* current borrowers of fd */
	uint32_t nopen;          /* open handles (files and dirs) */
	int fd;                  /* cached O_PATH descriptor, or -1 */
	mode_t type;             /* S_IFMT bits, fixed for an inode's life */
	bool pinned;             /* fd kept: no alias reaches this inode */
	struct inode *parent;    /* alias parent (held via refs), NULL if none */
	char *name;              /* alias name, NULL if none */
	struct inode *lru_prev;  /* idle-fd LRU; linked iff fd >= 0, */
	struct inode *lru_next;  /*   fd_users == 0 and !pinned */
};

static struct {
	pthread_mutex_t lock;
	struct inode root;       /* never freed, fd never closed */
	struct hashset set;      /* every inode but the root, by (dev, ino) */
	struct inode lru;        /* sentinel: next = most recent */
	size_t lru_len;
	size_t cached_fds;       /* descriptors held by the cache */
	size_t lru_max;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void (*state_dtor)(void *state);

static struct inode *of_key(uint64_t key)
{
	return (struct inode *)(uintptr_t)key;
}

static uint64_t hash_key(dev_t dev, ino_t ino)
{
	return (uint64_t)ino * 0x9E3779B97F4A7C15ULL ^ (uint64_t)dev;
}

/* T.set's hash of a held inode */
static uint64_t inode_hash(uint64_t key)
{
	return hash_key(of_key(key)->dev, of_key(key)->ino);
}

struct dev_ino {
	dev_t dev;
	ino_t ino;
};

static bool is_dev_ino(uint64_t key, const void *probe)
{
	const struct dev_ino *k = probe;

	return of_key(key)->ino == k->ino && of_key(key)->dev == k->dev;
}

void inode_flags_clear_all(uint32_t bits)
{
	lk_lock(&T.lock, LK_INODES);
	inode_flags_clear(&T.root, bits);
	HASHSET_EACH(&T.set, pos)
		inode_flags_clear(of_key(hashset_key(&T.set, pos)), bits);
	lk_unlock(&T.lock, LK_INODES);
}

int inode_files(uint64_t **ret, size_t *ret_n)
{
	uint64_t *v = NULL;
	size_t n = 0, cap = 0;
	int res = 0;

	lk_lock(&T.lock, LK_INODES);
	HASHSET_EACH(&T.set, pos) {
		struct inode *in = of_key(hashset_key(&T.set, pos));

		if (in->type != S_IFREG)
			continue;
		if (n == cap) {
			size_t c = cap ? cap * 2 : 256;
			uint64_t *m = realloc(v, c * sizeof(*v));

			if (!m) {
				res = -ENOMEM;
				break;
			}
			v = m;
			cap = c;
		}
		v[n++] = inode_nodeid(in);
	}
	lk_unlock(&T.lock, LK_INODES);
	if (res) {
		free(v);
		v = NULL;
		n = 0;
	}
	*ret = v;
	*ret_n = n;
	return res;
}

_Static_assert(offsetof(struct inode, head) == 0, "inode head first");

static void lru_unlink(struct inode *in)
{
	in->lru_prev->lru_next = in->lru_next;
	in->lru_next->lru_prev = in->lru_prev;
	in->lru_prev = in->lru_next = NULL;
	T.lru_len--;
}

static void lru_push(struct inode *in)
{
	in->lru_next = T.lru.lru_next;
	in->lru_prev = &T.lru;
	T.lru.lru_next->lru_prev = in;
	T.lru.lru_next = in;
	T.lru_len++;
}

/* Close idle descriptors past the limit.  Called with the lock held. */
static void lru_trim(void)
{
	while (T.lru_len > T.lru_max) {
		struct inode *victim = T.lru.lru_prev;

		lru_unlink(victim);
		close(victim->fd);
		victim->fd = -1;
		T.cached_fds--;
	}
}

int inode_table_init(int root_fd, unsigned fd_cache_max)
{
	struct stat st;

	if (fstat(root_fd, &st) < 0)
		return -errno;
	hashset_init(&T.set, SIZE_MAX, false, inode_hash);
	T.root.dev = st.st_dev;
	T.root.ino = st.st_ino;
	T.root.fd = root_fd;
	T.root.type = S_IFDIR;
	T.root.pinned = true;
	T.root.nlookup = 1; /* the kernel's implicit reference, never forgotten */
	T.lru.lru_next = T.lru.lru_prev = &T.lru;
	T.lru_max = fd_cache_max;
	return 0;
}

static void free_inode(struct inode *in)
{
	if (in->state && state_dtor)
		state_dtor(in->state);
	if (in->fd >= 0)
		close(in->fd);
	free(in->name);
	free(in);
}

void inode_table_destroy(void)
{
	HASHSET_EACH(&T.set, pos)
		free_inode(of_key(hashset_key(&T.set, pos)));
	hashset_free(&T.set);
	if (T.root.fd >= 0)
		close(T.root.fd);
	T.root.fd = -1;
}

struct inode *inode_root(void)
{
	return &T.root;
}

struct inode *inode_from_nodeid(uint64_t nodeid)
{
	if (nodeid == FUSE_ROOT_NODEID)
		return &T.root;
	return (struct inode *)(uintptr_t)nodeid;
}

uint64_t inode_nodeid(const struct inode *in)
{
	if (in == &T.root)
		return FUSE_ROOT_NODEID;
	return (uintptr_t)in;
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

bool inode_is_symlink(const struct inode *in)
{
	return S_ISLNK(in->type);
}

bool inode_is_dir(const struct inode *in)
{
	return S_ISDIR(in->type);
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

void inode_set_state_destructor(void (*fn)(void *state))
{
	state_dtor = fn;
}

void *inode_state(const struct inode *in)
{
	return in->state;
}

void inode_set_state(struct inode *in, void *state)
{
	in->state = state;
}

uint64_t inode_ino(const struct inode *in)
{
	return in->ino;
}

void inode_ref(struct inode *in)
{
	lk_lock(&T.lock, LK_INODES);
	in->refs++;
	lk_unlock(&T.lock, LK_INODES);
}

int inode_path(struct inode *in, char *buf, size_t size)
{
	size_t pos = size;
	int res = 0;

	if (!size)
		return -ENAMETOOLONG;
	lk_lock(&T.lock, LK_INODES);
	buf[--pos] = '\0';
	for (; in != &T.root; in = in->parent) {
		size_t n;

		if (!in->parent) {
			res = -ESTALE;
			break;
		}
		n = strlen(in->name);
		if (n + (pos < size - 1 ? 1 : 0) > pos) {
			res = -ENAMETOOLONG;
			break;
		}
		if (pos < size - 1)
			buf[--pos] = '/';
		pos -= n;
		memcpy(buf + pos, in->name, n);
	}
	lk_unlock(&T.lock, LK_INODES);
	if (res)
		return res;
	memmove(buf, buf + pos, size - pos);
	return (int)(size - pos - 1);
}

void inode_proc_path(int fd, char buf[32])
{
	snprintf(buf, 32, "/proc/self/fd/%d", fd);
}

static struct inode *hash_find(dev_t dev, ino_t ino)
{
	size_t pos;

	if (dev == T.root.dev && ino == T.root.ino)
		return &T.root;
	pos = hashset_find_by(&T.set, hash_key(dev, ino), is_dev_ino,
			      &(struct dev_ino){ dev, ino });
	return pos == HASHSET_NONE ? NULL : of_key(hashset_key(&T.set, pos));
}

/*
 * Free in and whatever parents that releases, if nothing references it.
 * Called with the lock held; returns descriptors to close to the caller
 * by closing them here (close of an O_PATH fd does not block).
 */
static void maybe_free(struct inode *in)
{
	while (in && in != &T.root && !in->nlookup && !in->refs &&
	       !in->fd_users) {
		struct inode *parent = in->parent;

		hashset_remove(&T.set, (uintptr_t)in);
		if (in->lru_next)
			lru_unlink(in);
		if (in->fd >= 0)
			T.cached_fds--;
		free_inode(in);
		if (!parent)
			break;
		assert(parent->refs > 0);
		parent->refs--;
		in = parent;
	}
}

/* Replace in's alias.  Lock held.  name may be NULL (alias gone). */
static int set_alias(struct inode *in, struct inode *parent, const char *name)
{
	struct inode *old = in->parent;
	char *n = NULL;

	if (name) {
		if (in->parent == parent && in->name && !strcmp(in->name, name))
			return 0;
		n = strdup(name);
		if (!n)
			return -ENOMEM;
		parent->refs++;
	}
	free(in->name);
	in->name = n;
	in->parent = name ? parent : NULL;
	if (old) {
		old->refs--;
		maybe_free(old);
	}
	return 0;
}

int inode_lookup(struct inode *parent, const char *name, struct stat *ret_st,
		 struct inode **ret)
{
	struct inode *in;
	struct stat st;
	int pfd, res;

	pfd = inode_fd_get(parent);
	if (pfd < 0)
		return pfd;
	res = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
	inode_fd_put(parent);
	if (res)
		return res;

	lk_lock(&T.lock, LK_INODES);
	in = hash_find(st.st_dev, st.st_ino);
	if (!in) {
		in = calloc(1, sizeof(*in));
		if (!in) {
			lk_unlock(&T.lock, LK_INODES);
			return -ENOMEM;
		}
		in->dev = st.st_dev;
		in->ino = st.st_ino;
		in->fd = -1;
		in->type = st.st_mode & S_IFMT;
		if (hashset_add(&T.set, (uintptr_t)in, NULL) < 0) {
			free(in);
			lk_unlock(&T.lock, LK_INODES);
			return -ENOMEM;
		}
	}
	if (in != &T.root) {
		res = set_alias(in, parent, name);
		if (!res && in->pinned) {
			/* reachable by name again: the fd may be evicted */
			in->pinned = false;
			if (in->fd >= 0 && !in->fd_users) {
				lru_push(in);
				lru_trim();
			}
		}
	}
	if (res) {
		maybe_free(in);
		lk_unlock(&T.lock, LK_INODES);
		return res;
	}
	in->nlookup++;
	lk_unlock(&T.lock, LK_INODES);
	*ret_st = st;
	*ret = in;
	return 0;
}

void inode_forget(struct inode *in, uint64_t n)
{
	lk_lock(&T.lock, LK_INODES);
	if (in->nlookup < n) {
		fprintf(stderr, "hsmfs: forget underflow on inode %llu\n",
			(unsigned long long)in->ino);
		abort();
	}
	in->nlookup -= n;
	maybe_free(in);
	lk_unlock(&T.lock, LK_INODES);
}

int inode_fd_get(struct inode *in)
{
	struct inode *parent;
	char *name;
	struct stat st;
	int pfd, fd;

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
			 st.st_ino != in->ino) {
			close(fd);
			fd = -ESTALE; /* replaced outside the mount */
		}
		inode_fd_put(parent);
	} else {
		fd = pfd;
	}
	free(name);

	lk_lock(&T.lock, LK_INODES);
	parent->refs--;
	maybe_free(parent);
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
	if (!--in->fd_users && !in->pinned && in->fd >= 0) {
		lru_push(in);
		lru_trim();
	}
	maybe_free(in);
	lk_unlock(&T.lock, LK_INODES);
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
	in = hash_find(ret_st->st_dev, ret_st->st_ino);
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

void inode_moved(struct inode *in, struct inode *newparent, const char *newname)
{
	lk_lock(&T.lock, LK_INODES);
	if (set_alias(in, newparent, newname) == 0 && in->pinned) {
		in->pinned = false;
		if (in->fd >= 0 && !in->fd_users) {
			lru_push(in);
			lru_trim();
		}
	}
	lk_unlock(&T.lock, LK_INODES);
}

void inode_unaliased(struct inode *in)
{
	lk_lock(&T.lock, LK_INODES);
	set_alias(in, NULL, NULL);
	lk_unlock(&T.lock, LK_INODES);
}

void inode_release(struct inode *in)
{
	if (!in)
		return;
	lk_lock(&T.lock, LK_INODES);
	assert(in->refs > 0);
	in->refs--;
	maybe_free(in);
	lk_unlock(&T.lock, LK_INODES);
}

void inode_open_inc(struct inode *in)
{
	lk_lock(&T.lock, LK_INODES);
	in->nopen++;
	lk_unlock(&T.lock, LK_INODES);
}

void inode_open_dec(struct inode *in)
{
	lk_lock(&T.lock, LK_INODES);
	assert(in->nopen > 0);
	in->nopen--;
	lk_unlock(&T.lock, LK_INODES);
}

bool inode_is_open(struct inode *in)
{
	bool r;

	lk_lock(&T.lock, LK_INODES);
	r = in->nopen > 0;
	lk_unlock(&T.lock, LK_INODES);
	return r;
}

void inode_counts(uint64_t *ret_inodes, uint64_t *ret_fds)
{
	lk_lock(&T.lock, LK_INODES);
	*ret_inodes = T.set.n;
	*ret_fds = T.cached_fds;
	lk_unlock(&T.lock, LK_INODES);
}
