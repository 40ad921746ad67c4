/* inode.c - the inode table T: see inode.h, and inode-int.h for its files */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/random.h>
#include <time.h>

#include "lockcheck.h"
#include "hashset.h"
#include "inode.h"
#include "inode-int.h"
#include "inode-ids.h"
#include "saved.h"
#include "store.h"

struct inode_table T = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void (*state_dtor)(void *state);

struct inode *of_key(uint64_t key)
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

/* The node ids of the table's nodes of type (the root is not in the table). */
static int ids_of(mode_t type, uint64_t **ret, size_t *ret_n)
{
	uint64_t *v = NULL;
	size_t n = 0, cap = 0;
	int res = 0;

	lk_lock(&T.lock, LK_INODES);
	HASHSET_EACH(&T.set, pos) {
		struct inode *in = of_key(hashset_key(&T.set, pos));

		if (in->type != type || !in->nlookup)
			continue; /* the kernel's only */
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

int inode_files(uint64_t **ret, size_t *ret_n)
{
	return ids_of(S_IFREG, ret, ret_n);
}

int inode_dirs(uint64_t **ret, size_t *ret_n)
{
	return ids_of(S_IFDIR, ret, ret_n);
}

_Static_assert(offsetof(struct inode, head) == 0, "inode head first");

void lru_unlink(struct inode *in)
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

/*
 * An idle descriptor of in (fd_users just 0, not pinned): cached on the
 * LRU while an alias can open it again, else closed at once (nothing
 * opens an unreachable file again: keeping it would hold a removed
 * file's blocks and one descriptor for nothing).  Lock held.
 */
void fd_idle(struct inode *in)
{
	assert(lk_held(LK_INODES));
	if (in->parent || in == &T.root || in == &T.orphans) {
		lru_push(in);
		lru_trim();
		return;
	}
	close(in->fd); /* an O_PATH descriptor: close does not block */
	in->fd = -1;
	T.cached_fds--;
}

/*
 * A descriptor pinned for a file its names no longer reach (inode.h)
 * is kept while the kernel remembers the file or a handle of it is
 * open: with neither, it goes now, whatever else holds the inode (an
 * archive or write-behind queue: they find the file gone, -ESTALE).
 * Without this a removed file's descriptor stayed until the last such
 * reference went, and a program creating and removing files (SQLite's
 * rollback journal) ran the daemon out of descriptors.  Lock held.
 */
void unpin_unused(struct inode *in)
{
	assert(lk_held(LK_INODES));
	if (!in->pinned || in->nlookup || in->nopen || in == &T.root || in == &T.orphans)
		return;
	in->pinned = false;
	if (in->fd >= 0 && !in->fd_users)
		fd_idle(in);
}

/* in is reachable by name again: the descriptor pinned for it may be evicted.  Lock held. */
void unpin_named(struct inode *in)
{
	assert(lk_held(LK_INODES));
	if (!in->pinned)
		return;
	in->pinned = false;
	if (in->fd >= 0 && !in->fd_users) {
		lru_push(in);
		lru_trim();
	}
}

/*
 * The kept list: inodes the kernel forgot that an alias still reaches,
 * least recently used last, at most T.kept_max of them (inode.h).  An
 * inode on it may have been referenced again meanwhile (a child's alias,
 * a hold): the trim then only unlinks it, maybe_free() links it again
 * when the reference goes.  Lock held.
 */
void kept_unlink(struct inode *in)
{
	in->kept_prev->kept_next = in->kept_next;
	in->kept_next->kept_prev = in->kept_prev;
	in->kept_prev = in->kept_next = NULL;
	T.kept_len--;
}

static void kept_push(struct inode *in)
{
	in->kept_next = T.kept.kept_next;
	in->kept_prev = &T.kept;
	T.kept.kept_next->kept_prev = in;
	T.kept.kept_next = in;
	T.kept_len++;
}

/* At the least recent end: a parent the trim released (its kept children went). */
static void kept_push_tail(struct inode *in)
{
	in->kept_prev = T.kept.kept_prev;
	in->kept_next = &T.kept;
	T.kept.kept_prev->kept_next = in;
	T.kept.kept_prev = in;
	T.kept_len++;
}

static bool unreferenced(const struct inode *in)
{
	return in != &T.root && in != &T.lost && in != &T.orphans && !in->nlookup &&
	       !in->refs && !in->fd_users;
}

static struct inode *free_one(struct inode *in);

static void kept_trim(void)
{
	if (T.trimming)
		return; /* maybe_free() below, keeping a parent freed to none */
	T.trimming = true;
	while (T.kept_len > T.kept_max) {
		struct inode *victim = T.kept.kept_prev;

		kept_unlink(victim);
		if (unreferenced(victim))
			maybe_free(free_one(victim));
	}
	T.trimming = false;
}

/* A lookup reference on in (a reply the kernel counts).  Lock held. */
void lookup_ref(struct inode *in)
{
	assert(lk_held(LK_INODES));
	if (!in->nlookup && in != &T.root)
		T.forgotten--;
	if (in->kept_next)
		kept_unlink(in);
	in->nlookup++;
	/* before the reply: a crash after it over-counts (a leak), never under */
	saved_node(in->id)->nlookup = in->nlookup;
}

/*
 * The inodes the last daemon left in the saved region (saved.h): each
 * record a node, then the aliases between them.  A parent chain that
 * does not reach the root (a record torn by the crash) leaves that node
 * without an alias: ESTALE, for it alone.
 */
int table_restore(uint64_t *ret_n)
{
	struct saved_head *h = saved_head();
	uint32_t id;
	uint64_t n = 0;

	for (id = 2; id < h->nodes_hwm; id++) {
		struct saved_node *r = saved_node(id);
		struct inode *in;

		if (!r->type) {
			if (id_free(id))
				return -ENOMEM;
			continue;
		}
		in = calloc(1, sizeof(*in));
		if (!in)
			return -ENOMEM;
		in->dev = r->dev;
		in->ino = r->ino;
		in->type = r->type;
		in->fd = -1;
		in->id = id;
		in->gen = r->gen;
		in->nlookup = r->nlookup;
		/* a node whose file went, its number maybe another's (unhash()) */
		in->unhashed = !r->dev && !r->ino;
		if (in->unhashed && !in->nlookup) {
			free(in);
			r->type = 0; /* nobody knows its node id: free */
			if (id_free(id))
				return -ENOMEM;
			continue;
		}
		/* the key first: the set hashes it */
		if ((!in->unhashed && hash_find(in->dev, in->ino)) || slot_set(id, in) ||
		    (!in->unhashed && hashset_add(&T.set, (uintptr_t)in, NULL) < 0)) {
			slot_set(id, NULL);
			free(in);
			r->type = 0; /* a duplicate (torn) or no memory: not kept */
			continue;
		}
		if (!in->nlookup)
			T.forgotten++;
		n++;
	}
	for (id = 2; id < h->nodes_hwm; id++) {
		struct inode *in = slot_get(id), *p;
		struct saved_node *r = saved_node(id);
		char name[SAVED_NAME_CELL];
		unsigned depth = 0;

		if (!in || !r->parent)
			continue;
		for (p = slot_get(r->parent); p && p != &T.root && p != &T.orphans && depth < 4096;
		     depth++)
			p = saved_node(p->id)->parent ? slot_get(saved_node(p->id)->parent) : NULL;
		p = slot_get(r->parent);
		if (depth >= 4096 || !p || !saved_node_name(r, name) || strchr(name, '/') ||
		    !(in->name = strdup(name))) {
			r->parent = 0;
			continue;
		}
		in->parent = p;
		p->refs++;
		/* as set_alias() says it: reached by its orphan link only */
		atomic_store_explicit(&in->orphan, p == &T.orphans, memory_order_relaxed);
	}
	/* the long-name cells in use; the rest are free */
	{
		uint8_t *used = calloc(h->names_hwm + 1, 1);

		if (!used)
			return -ENOMEM;
		for (id = 2; id < h->nodes_hwm; id++) {
			struct saved_node *r = saved_node(id);

			if (r->type && r->long_name && r->long_name < h->names_hwm)
				used[r->long_name] = 1;
		}
		for (id = 1; id < h->names_hwm; id++)
			if (!used[id])
				cell_free(id);
		free(used);
	}
	/* the kernel's forgotten: kept as they were, or freed (no alias) */
	for (id = 2; id < h->nodes_hwm; id++) {
		struct inode *in = slot_get(id);

		if (in && in != &T.orphans && unreferenced(in))
			maybe_free(in);
	}
	*ret_n = n;
	return 0;
}

/* Orphan links a daemon before the last left (a crash of the keeper too). */
static void orphans_clear(void)
{
	int fd = openat(T.orphans.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, ORPHAN_PREFIX, strlen(ORPHAN_PREFIX)))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

int inode_table_init(int root_fd, unsigned fd_cache_max, unsigned kept_max, bool restoring,
		     uint64_t *ret_restored)
{
	struct saved_node *r = saved_node(1);
	struct stat st;
	uint32_t gen;

	*ret_restored = 0;
	if (fstat(root_fd, &st) < 0)
		return -errno;
	hashset_init(&T.set, SIZE_MAX, false, inode_hash);
	T.root.dev = st.st_dev;
	T.root.ino = st.st_ino;
	T.root.fd = root_fd;
	T.root.type = S_IFDIR;
	T.root.pinned = true;
	T.root.nlookup = 1; /* the kernel's implicit reference, never forgotten */
	T.root.id = FUSE_ROOT_NODEID;
	T.lost.fd = -1;
	T.lost.type = S_IFREG;
	T.lru.lru_next = T.lru.lru_prev = &T.lru;
	T.lru_max = fd_cache_max;
	T.kept.kept_next = T.kept.kept_prev = &T.kept;
	T.kept_len = 0;
	T.kept_max = kept_max;
	T.forgotten = 0;
	/* not secret, only unlike the last mount's: see rec_new() */
	if (getrandom(&gen, sizeof(gen), GRND_NONBLOCK) != sizeof(gen))
		gen = (uint32_t)(time(NULL) ^ ((uint32_t)getpid() << 16));
	ids_set_gen_base(gen);
	if (slot_set(FUSE_ROOT_NODEID, &T.root))
		return -ENOMEM;
	T.orphans.fd = openat(root_fd, STORE_STATE_DIR, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	T.orphans.type = S_IFDIR;
	T.orphans.pinned = true;
	T.orphans.id = ORPHANS_ID;
	if (T.orphans.fd >= 0 && slot_set(ORPHANS_ID, &T.orphans))
		return -ENOMEM;
	if (!restoring)
		orphans_clear();
	if (restoring && (r->dev != st.st_dev || r->ino != st.st_ino))
		return -ESTALE; /* another store's table */
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	r->type = S_IFDIR;
	return restoring ? table_restore(ret_restored) : 0;
}

static void free_inode(struct inode *in)
{
	if (in->state && state_dtor)
		state_dtor(in->state);
	if (in->fd >= 0)
		close(in->fd);
	free(in->name);
	for (int i = 0; i < in->nnames; i++)
		free(in->names[i].name);
	free(in->names);
	free(in->fh);
	free(in);
}

void inode_table_destroy(void)
{
	for (uint32_t id = 2; id < saved_head()->nodes_hwm && id < ORPHANS_ID; id++) {
		struct inode *in = slot_get(id);

		if (in && in->unhashed)
			free_inode(in);
	}
	HASHSET_EACH(&T.set, pos)
		free_inode(of_key(hashset_key(&T.set, pos)));
	hashset_free(&T.set);
	if (T.root.fd >= 0)
		close(T.root.fd);
	T.root.fd = -1;
	if (T.orphans.fd >= 0)
		close(T.orphans.fd);
	T.orphans.fd = -1;
	/* the saved records stay: a daemon handing over leaves them to the next */
	ids_destroy();
}

struct inode *inode_root(void)
{
	return &T.root;
}

struct inode *inode_from_nodeid(uint64_t nodeid)
{
	struct inode *in = slot_get(nodeid);

	/*
	 * The kernel sends only node ids it was given and has not forgotten;
	 * after a takeover one whose record a crash tore may be missing.
	 */
	return in ? in : &T.lost;
}

uint64_t inode_nodeid(const struct inode *in)
{
	return in->id;
}

bool inode_orphaned(const struct inode *in)
{
	return atomic_load_explicit(&in->orphan, memory_order_relaxed);
}

uint64_t inode_generation(const struct inode *in)
{
	return in->gen;
}

bool inode_is_symlink(const struct inode *in)
{
	return S_ISLNK(in->type);
}

bool inode_is_dir(const struct inode *in)
{
	return S_ISDIR(in->type);
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

void inode_proc_path(int fd, char buf[32])
{
	snprintf(buf, 32, "/proc/self/fd/%d", fd);
}

struct inode *hash_find(dev_t dev, ino_t ino)
{
	size_t pos;

	if (dev == T.root.dev && ino == T.root.ino)
		return &T.root;
	pos = hashset_find_by(&T.set, hash_key(dev, ino), is_dev_ino,
			      &(struct dev_ino){ dev, ino });
	return pos == HASHSET_NONE ? NULL : of_key(hashset_key(&T.set, pos));
}

/* Free in (unreferenced); returns its alias parent, one reference less.  Lock held. */
static struct inode *free_one(struct inode *in)
{
	struct inode *parent = in->parent;

	if (!in->unhashed)
		hashset_remove(&T.set, (uintptr_t)in);
	rec_free(in->id);
	if (in->lru_next)
		lru_unlink(in);
	if (in->kept_next)
		kept_unlink(in);
	if (in->fd >= 0)
		T.cached_fds--;
	T.forgotten--;
	/* unreachable now: the parents its names release may free or keep others */
	names_clear(in);
	free_inode(in); /* closes its descriptor: close of an O_PATH fd does not block */
	if (parent) {
		assert(parent->refs > 0);
		parent->refs--;
	}
	return parent;
}

/*
 * Free in and whatever parents that releases, if nothing references it;
 * one an alias still reaches goes to the kept list instead (the most
 * recent: inode.h), unless that is off.  Lock held.
 */
void maybe_free(struct inode *in)
{
	while (in && unreferenced(in)) {
		if (in->parent && in->parent != &T.orphans && T.kept_max) {
			if (in->kept_next)
				kept_unlink(in);
			/* a parent the trim released is no more recent than its children */
			if (T.trimming)
				kept_push_tail(in);
			else
				kept_push(in);
			kept_trim();
			return;
		}
		in = free_one(in);
	}
}

/*
 * Take other name i out of in's list: its parent and name to the caller,
 * who drops the parent's reference (or hands it on) and frees the name.
 */
struct inode_name name_take(struct inode *in, int i)
{
	struct inode_name n = in->names[i];

	memmove(&in->names[i], &in->names[i + 1], (in->nnames - i - 1) * sizeof(n));
	if (!--in->nnames) {
		free(in->names);
		in->names = NULL;
	}
	return n;
}

void name_drop(struct inode_name n)
{
	free(n.name);
	n.parent->refs--;
	maybe_free(n.parent);
}

/* Forget every other name of in.  Lock held. */
void names_clear(struct inode *in)
{
	while (in->nnames)
		name_drop(name_take(in, in->nnames - 1));
}

void inode_forget(struct inode *in, uint64_t n)
{
	if (in == &T.lost)
		return;
	lk_lock(&T.lock, LK_INODES);
	if (in->nlookup < n) {
		fprintf(stderr, "hsmfs: forget underflow on inode %llu\n",
			(unsigned long long)in->ino);
		abort();
	}
	in->nlookup -= n;
	saved_node(in->id)->nlookup = in->nlookup;
	if (!in->nlookup && in != &T.root)
		T.forgotten++;
	unpin_unused(in);
	maybe_free(in);
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

bool inode_is_open(struct inode *in)
{
	bool r;

	lk_lock(&T.lock, LK_INODES);
	r = in->nopen > 0;
	lk_unlock(&T.lock, LK_INODES);
	return r;
}

void inode_counts(uint64_t *ret_inodes, uint64_t *ret_kept, uint64_t *ret_fds)
{
	lk_lock(&T.lock, LK_INODES);
	*ret_inodes = T.set.n;
	*ret_kept = T.forgotten;
	*ret_fds = T.cached_fds;
	lk_unlock(&T.lock, LK_INODES);
}
