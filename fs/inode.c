/* inode.c - see inode.h */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <linux/limits.h>
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
#include "saved.h"
#include "sha256.h"
#include "store.h"

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
	uint32_t id;             /* node id: index of its saved record (saved.h) */
	uint32_t gen;            /* the record's generation */
	_Atomic bool orphan;     /* the alias is an orphan link (inode_orphaned()) */
	struct inode *parent;    /* alias parent (held via refs), NULL if none */
	char *name;              /* alias name, NULL if none */
	struct inode *lru_prev;  /* idle-fd LRU; linked iff fd >= 0, */
	struct inode *lru_next;  /*   fd_users == 0 and !pinned */
	struct inode *kept_prev; /* kept list (forgotten, kept for file */
	struct inode *kept_next; /*   handles); linked only if nlookup == 0 */
	struct inode_name *names; /* other names seen of a file of several links
				   * (inode.h), oldest first; NULL: none */
	uint8_t nnames;          /* of them, at most INODE_NAMES_MAX */
	/* read from the last mount's table (inode_table_load()): the store's
	 * handle of its file then, which the file reached must have before
	 * it is trusted (fh_checked); immutable while in lives */
	struct file_handle *fh;
	_Atomic bool fh_checked;
	bool unhashed;           /* out of the set: its number may be another
				  * file's now (lost_number()) */
};

/* A name of a file other than its alias: held like the alias (parent->refs). */
struct inode_name {
	struct inode *parent;
	char *name;
};

static struct {
	pthread_mutex_t lock;
	struct inode root;       /* never freed, fd never closed */
	struct inode orphans;    /* STORE/.hsmfs, the parent of orphan links */
	struct inode lost;       /* what a node id no record was left for is:
				  * no alias, so every use is ESTALE */
	struct hashset set;      /* every inode but the root, by (dev, ino) */
	struct inode lru;        /* sentinel: next = most recent */
	size_t lru_len;
	size_t cached_fds;       /* descriptors held by the cache */
	size_t lru_max;
	struct inode kept;       /* sentinel of the kept list: next = most recent */
	size_t kept_len;
	size_t kept_max;         /* 0: forgotten inodes are freed at once */
	bool trimming;           /* kept_trim() runs (it frees, which may keep) */
	uint64_t forgotten;      /* inodes of the set with nlookup == 0 */
	uint32_t gen_base;       /* first generation of a node id never used */
	/* node id -> inode: chunks of SLOT_CHUNK, read without the lock */
	_Atomic(struct inode *) *_Atomic slots[SAVED_NODES_MAX / 4096];
	uint32_t *free_ids;      /* node ids free below the saved high-water mark */
	size_t nfree_ids, cap_free_ids;
	uint32_t *free_cells;    /* long-name cells likewise */
	size_t nfree_cells, cap_free_cells;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER };

#define SLOT_CHUNK 4096u
#define ORPHANS_ID (SAVED_NODES_MAX - 1) /* node id of T.orphans: never the kernel's */
#define ORPHAN_PREFIX "open-"

/* in was read from the last mount's table and not checked yet (no lock needed). */
static bool fh_unchecked(const struct inode *in)
{
	return in->fh && !atomic_load_explicit(&in->fh_checked, memory_order_acquire);
}

/* ------------------------------------------- node ids and saved records */

static struct inode *slot_get(uint64_t id)
{
	_Atomic(struct inode *) *c;

	if (id >= SAVED_NODES_MAX)
		return NULL;
	c = atomic_load_explicit(&T.slots[id / SLOT_CHUNK], memory_order_acquire);
	return c ? atomic_load_explicit(&c[id % SLOT_CHUNK], memory_order_relaxed) : NULL;
}

/* Lock held (or the table's set-up). */
static int slot_set(uint32_t id, struct inode *in)
{
	_Atomic(struct inode *) *c = atomic_load_explicit(&T.slots[id / SLOT_CHUNK],
							  memory_order_relaxed);

	if (!c) {
		if (!in)
			return 0;
		c = calloc(SLOT_CHUNK, sizeof(*c));
		if (!c)
			return -ENOMEM;
		atomic_store_explicit(&T.slots[id / SLOT_CHUNK], c, memory_order_release);
	}
	atomic_store_explicit(&c[id % SLOT_CHUNK], in, memory_order_relaxed);
	return 0;
}

static int push_u32(uint32_t **v, size_t *n, size_t *cap, uint32_t x)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 1024;
		uint32_t *m = realloc(*v, c * sizeof(*m));

		if (!m)
			return -ENOMEM;
		*v = m;
		*cap = c;
	}
	(*v)[(*n)++] = x;
	return 0;
}

/* A node id and its record for in.  Lock held. */
static int rec_new(struct inode *in)
{
	struct saved_head *h = saved_head();
	struct saved_node *r;
	uint32_t id;

	if (T.nfree_ids) {
		id = T.free_ids[--T.nfree_ids];
	} else {
		if (h->nodes_hwm < 2)
			h->nodes_hwm = 2; /* 0 is none, 1 the root */
		if (h->nodes_hwm >= ORPHANS_ID)
			return -ENFILE;
		id = h->nodes_hwm;
	}
	if (slot_set(id, in)) {
		if (id != h->nodes_hwm)
			T.nfree_ids++;
		return -ENOMEM;
	}
	if (id == h->nodes_hwm)
		h->nodes_hwm++;
	r = saved_node(id);
	in->id = id;
	if (!r->gen)
		r->gen = T.gen_base; /* a handle of an earlier mount: a wrong generation */
	in->gen = ++r->gen;
	r->dev = in->dev;
	r->ino = in->ino;
	r->nlookup = 0;
	r->parent = 0;
	r->long_name = 0;
	r->name_len = 0;
	r->type = in->type ? in->type : S_IFREG;
	return 0;
}

static void cell_free(uint32_t cell)
{
	/* on failure the cell is lost until the next daemon's count: harmless */
	if (cell)
		(void)push_u32(&T.free_cells, &T.nfree_cells, &T.cap_free_cells, cell);
}

/* The record's alias: in->parent, in->name.  Lock held. */
static void rec_alias(struct inode *in)
{
	struct saved_node *r = saved_node(in->id);
	struct saved_head *h = saved_head();
	size_t n = in->name ? strlen(in->name) : 0;

	if (!r || in == &T.root)
		return;
	r->parent = 0; /* no alias while it changes: a crash here is ESTALE */
	if (n > SAVED_NAME_INLINE && !r->long_name) {
		if (T.nfree_cells)
			r->long_name = T.free_cells[--T.nfree_cells];
		else if (h->names_hwm < SAVED_NAMES_MAX)
			r->long_name = h->names_hwm ? h->names_hwm++ : (h->names_hwm = 2, 1);
	} else if (n <= SAVED_NAME_INLINE && r->long_name) {
		cell_free(r->long_name);
		r->long_name = 0;
	}
	if (n > SAVED_NAME_INLINE && !r->long_name)
		return; /* no cell left: this node is not found again after a restart */
	if (n) /* no alias: in->name is NULL */
		memcpy(r->long_name ? saved_name_cell(r->long_name) : r->name, in->name, n);
	r->name_len = (uint16_t)n;
	r->parent = in->parent ? in->parent->id : 0;
}

static void rec_free(struct inode *in)
{
	struct saved_node *r = saved_node(in->id);

	r->type = 0;
	r->parent = 0;
	cell_free(r->long_name);
	r->long_name = 0;
	slot_set(in->id, NULL);
	/* on failure lost until the next daemon: harmless */
	(void)push_u32(&T.free_ids, &T.nfree_ids, &T.cap_free_ids, in->id);
}

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

/*
 * An idle descriptor of in (fd_users just 0, not pinned): cached on the
 * LRU while an alias can open it again, else closed at once (nothing
 * opens an unreachable file again: keeping it would hold a removed
 * file's blocks and one descriptor for nothing).  Lock held.
 */
static void fd_idle(struct inode *in)
{
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
static void unpin_unused(struct inode *in)
{
	if (!in->pinned || in->nlookup || in->nopen || in == &T.root || in == &T.orphans)
		return;
	in->pinned = false;
	if (in->fd >= 0 && !in->fd_users)
		fd_idle(in);
}

/*
 * The kept list: inodes the kernel forgot that an alias still reaches,
 * least recently used last, at most T.kept_max of them (inode.h).  An
 * inode on it may have been referenced again meanwhile (a child's alias,
 * a hold): the trim then only unlinks it, maybe_free() links it again
 * when the reference goes.  Lock held.
 */
static void kept_unlink(struct inode *in)
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
static void maybe_free(struct inode *in);
static void names_clear(struct inode *in);

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
static void lookup_ref(struct inode *in)
{
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
static struct inode *hash_find(dev_t dev, ino_t ino);

static int restore(uint64_t *ret_n)
{
	struct saved_head *h = saved_head();
	uint32_t id;
	uint64_t n = 0;

	for (id = 2; id < h->nodes_hwm; id++) {
		struct saved_node *r = saved_node(id);
		struct inode *in;

		if (!r->type) {
			if (push_u32(&T.free_ids, &T.nfree_ids, &T.cap_free_ids, id))
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
			if (push_u32(&T.free_ids, &T.nfree_ids, &T.cap_free_ids, id))
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

static int set_alias(struct inode *in, struct inode *parent, const char *name);

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

bool inode_orphan_link(struct inode *in, char name[48])
{
	char path[32];
	bool open;
	int fd;

	lk_lock(&T.lock, LK_INODES);
	open = in->nopen > 0 && in->type == S_IFREG;
	lk_unlock(&T.lock, LK_INODES);
	if (!open || T.orphans.fd < 0 || !saved_head()->kept)
		return false;
	fd = inode_fd_get(in);
	if (fd < 0)
		return false;
	snprintf(name, 48, ORPHAN_PREFIX "%llx-%llx", (unsigned long long)in->dev,
		 (unsigned long long)in->ino);
	inode_proc_path(fd, path);
	open = !linkat(AT_FDCWD, path, T.orphans.fd, name, AT_SYMLINK_FOLLOW) || errno == EEXIST;
	inode_fd_put(in);
	return open;
}

static char *orphan_closed(struct inode *in);
static void orphan_remove(struct inode *in, char *name);

void inode_orphan_settle(struct inode *in, const char *name, bool gone)
{
	char *orphan;

	if (!gone) {
		unlinkat(T.orphans.fd, name, 0);
		return;
	}
	lk_lock(&T.lock, LK_INODES);
	set_alias(in, &T.orphans, name);
	/*
	 * The last open may have ended between the link and now (a
	 * RELEASE is sent after close(2) returns, so an unlink right after
	 * a close races it): it found no link to remove, so this does.
	 */
	orphan = orphan_closed(in);
	lk_unlock(&T.lock, LK_INODES);
	if (orphan) {
		orphan_remove(in, orphan);
		lk_lock(&T.lock, LK_INODES);
		unpin_unused(in);
		lk_unlock(&T.lock, LK_INODES);
	}
}

/* An open of in ended (lock held): with none left, its orphan link's name to remove. */
static char *orphan_closed(struct inode *in)
{
	return in->parent == &T.orphans && !in->nopen && in->name ? strdup(in->name) : NULL;
}

static void orphan_remove(struct inode *in, char *name)
{
	if (!name)
		return;
	/* the descriptor kept reaches it until it is forgotten (pinned) */
	unlinkat(T.orphans.fd, name, 0);
	inode_unaliased(in);
	free(name);
}

int inode_table_init(int root_fd, unsigned fd_cache_max, unsigned kept_max, bool restoring,
		     uint64_t *ret_restored)
{
	struct saved_node *r = saved_node(1);
	struct stat st;

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
	if (getrandom(&T.gen_base, sizeof(T.gen_base), GRND_NONBLOCK) != sizeof(T.gen_base))
		T.gen_base = (uint32_t)(time(NULL) ^ ((uint32_t)getpid() << 16));
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
	return restoring ? restore(ret_restored) : 0;
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
	for (size_t i = 0; i < sizeof(T.slots) / sizeof(T.slots[0]); i++) {
		free((void *)atomic_load_explicit(&T.slots[i], memory_order_relaxed));
		T.slots[i] = NULL;
	}
	free(T.free_ids);
	free(T.free_cells);
	T.free_ids = T.free_cells = NULL;
	T.nfree_ids = T.cap_free_ids = T.nfree_cells = T.cap_free_cells = 0;
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

/* Free in (unreferenced); returns its alias parent, one reference less.  Lock held. */
static struct inode *free_one(struct inode *in)
{
	struct inode *parent = in->parent;

	if (!in->unhashed)
		hashset_remove(&T.set, (uintptr_t)in);
	rec_free(in);
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
static void maybe_free(struct inode *in)
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

/* ------------------------------------------- the other names of a file */

static bool same_name(const struct inode *p1, const char *n1, const struct inode *p2,
		      const char *n2)
{
	return p1 == p2 && n1 && n2 && !strcmp(n1, n2);
}

/* The index of (parent, name) among in's other names, or -1.  Lock held. */
static int name_index(const struct inode *in, const struct inode *parent, const char *name)
{
	for (int i = 0; i < in->nnames; i++)
		if (same_name(in->names[i].parent, in->names[i].name, parent, name))
			return i;
	return -1;
}

/* Whether (parent, name) is one of in's names, its alias or another.  Lock held. */
static bool known_name(const struct inode *in, const struct inode *parent, const char *name)
{
	return same_name(in->parent, in->name, parent, name) || name_index(in, parent, name) >= 0;
}

/*
 * Take other name i out of in's list: its parent and name to the caller,
 * who drops the parent's reference (or hands it on) and frees the name.
 */
static struct inode_name name_take(struct inode *in, int i)
{
	struct inode_name n = in->names[i];

	memmove(&in->names[i], &in->names[i + 1], (in->nnames - i - 1) * sizeof(n));
	if (!--in->nnames) {
		free(in->names);
		in->names = NULL;
	}
	return n;
}

static void name_drop(struct inode_name n)
{
	free(n.name);
	n.parent->refs--;
	maybe_free(n.parent);
}

/* Forget every other name of in.  Lock held. */
static void names_clear(struct inode *in)
{
	while (in->nnames)
		name_drop(name_take(in, in->nnames - 1));
}

/*
 * Keep (parent, name) as another name of in, taking over the reference
 * on parent and name (freed here when it cannot be kept: at the limit
 * the oldest goes).  Lock held.
 */
static void name_keep(struct inode *in, struct inode *parent, char *name)
{
	if (name_index(in, parent, name) >= 0 || parent == &T.orphans) {
		name_drop((struct inode_name){ parent, name });
		return;
	}
	if (!in->names) {
		in->names = malloc(INODE_NAMES_MAX * sizeof(*in->names));
		if (!in->names) {
			name_drop((struct inode_name){ parent, name });
			return;
		}
	}
	if (in->nnames == INODE_NAMES_MAX) {
		struct inode_name oldest = in->names[0];

		memmove(&in->names[0], &in->names[1], (in->nnames - 1) * sizeof(oldest));
		in->nnames--;
		name_drop(oldest);
	}
	in->names[in->nnames++] = (struct inode_name){ parent, name };
}

/*
 * Make (parent, n) in's alias, taking over a reference on parent and the
 * string n (both may be NULL: no alias).  The alias replaced is kept as
 * another name when keep, else released.  Lock held.
 */
static void alias_to(struct inode *in, struct inode *parent, char *n, bool keep)
{
	struct inode *old = in->parent;
	char *oldname = in->name;
	int i;

	in->name = n;
	in->parent = parent;
	atomic_store_explicit(&in->orphan, in->parent == &T.orphans, memory_order_relaxed);
	rec_alias(in);
	if (parent && (i = name_index(in, parent, n)) >= 0)
		name_drop(name_take(in, i)); /* the alias now */
	if (old && keep && parent && !S_ISDIR(in->type)) {
		name_keep(in, old, oldname);
	} else if (old) {
		free(oldname);
		old->refs--;
		maybe_free(old);
	}
}

/*
 * Make (parent, name) in's alias.  Lock held.  name may be NULL (alias
 * gone).  links: the file's link count just seen (0: not known): with
 * more than one the alias replaced stays another name of it (inode.h),
 * with one the other names are gone.
 */
static int set_alias_seen(struct inode *in, struct inode *parent, const char *name,
			  nlink_t links)
{
	char *n = NULL;

	if (name && !same_name(in->parent, in->name, parent, name)) {
		n = strdup(name);
		if (!n)
			return -ENOMEM;
		parent->refs++;
		alias_to(in, parent, n, links > 1);
	} else if (!name) {
		alias_to(in, NULL, NULL, false);
	}
	if (links == 1 && in->nnames)
		names_clear(in);
	return 0;
}

static int set_alias(struct inode *in, struct inode *parent, const char *name)
{
	return set_alias_seen(in, parent, name, 0);
}

/*
 * in's alias no longer reaches it: the most recent other name is the
 * alias now, if it has one.  Lock held.
 */
static void alias_fall_back(struct inode *in)
{
	struct inode_name n;

	if (!in->nnames) {
		alias_to(in, NULL, NULL, false);
		return;
	}
	n = name_take(in, in->nnames - 1);
	alias_to(in, n.parent, n.name, false);
	if (in->pinned) {
		/* reachable by name again: the fd may be evicted */
		in->pinned = false;
		if (in->fd >= 0 && !in->fd_users) {
			lru_push(in);
			lru_trim();
		}
	}
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
		res = rec_new(in);
		if (res) {
			free(in);
			goto out;
		}
		if (hashset_add(&T.set, (uintptr_t)in, NULL) < 0) {
			rec_free(in);
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

void inode_moved(struct inode *in, struct inode *oldparent, const char *oldname,
		 struct inode *newparent, const char *newname)
{
	int i, res;

	lk_lock(&T.lock, LK_INODES);
	/* moved from another name than its alias: the alias stays a name of it */
	if (oldname && !same_name(in->parent, in->name, oldparent, oldname)) {
		if ((i = name_index(in, oldparent, oldname)) >= 0)
			name_drop(name_take(in, i));
		res = set_alias_seen(in, newparent, newname, 2);
	} else {
		res = set_alias(in, newparent, newname);
	}
	if (res == 0 && in->pinned) {
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
	alias_fall_back(in);
	lk_unlock(&T.lock, LK_INODES);
}

void inode_name_gone(struct inode *in, struct inode *parent, const char *name, nlink_t links)
{
	int i;

	lk_lock(&T.lock, LK_INODES);
	if (links <= 1) {
		/* it had this name only: every other it had is gone, or another file's */
		names_clear(in);
		alias_to(in, NULL, NULL, false);
	} else if (same_name(in->parent, in->name, parent, name))
		alias_fall_back(in);
	else if ((i = name_index(in, parent, name)) >= 0)
		name_drop(name_take(in, i));
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
	char *orphan;

	lk_lock(&T.lock, LK_INODES);
	assert(in->nopen > 0);
	in->nopen--;
	orphan = orphan_closed(in);
	if (!orphan)
		unpin_unused(in);
	lk_unlock(&T.lock, LK_INODES);
	if (orphan) {
		orphan_remove(in, orphan); /* outside the lock: a syscall */
		lk_lock(&T.lock, LK_INODES);
		unpin_unused(in);
		lk_unlock(&T.lock, LK_INODES);
	}
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

/* ------------------------------------------- the table across mounts */

/*
 * STORE/.hsmfs/nodes (inode.h): a head, one record a node kept (at most
 * kept_max of the inodes the kernel held at unmount and then of the
 * kept list, most recent first, and their parents), each followed by
 * its alias name and its store handle, and the SHA-256 of all that.  Native byte order: the
 * same machine reads it.  Read once and removed at once: a table left
 * by a mount that ended without writing one would name node ids that
 * mount gave to other files.
 */
#define NODES_FILE "nodes"
#define NODES_TMP "nodes.tmp"
#define NODES_MAGIC 0x68736d66736e6431ULL /* "hsmfsnd1" */
#define NODES_VERSION 1u

struct nodes_head {
	uint64_t magic;
	uint32_t version;
	uint32_t hwm;        /* the saved head's nodes_hwm */
	uint64_t root_dev;   /* the store root's: another store's table is refused */
	uint64_t root_ino;
	uint64_t count;      /* records that follow */
	uint32_t gen_next;   /* past every generation given: the next mount's first */
	uint32_t pad;
};

struct nodes_rec {
	uint64_t dev, ino;
	uint32_t id;
	uint32_t gen;
	uint32_t type;       /* S_IFMT; 0: a free node id, its generation only */
	uint32_t parent;     /* alias parent's node id (1: the root) */
	int32_t fh_type;     /* the store's handle of the file (name_to_handle_at) */
	uint16_t name_len;   /* alias name bytes that follow (no NUL), */
	uint16_t fh_len;     /*   then the handle's bytes */
};
_Static_assert(sizeof(struct nodes_rec) == 40, "no padding in the file");

#define NODES_FILE_MAX ((uint64_t)SAVED_NODES_MAX * \
				(sizeof(struct nodes_rec) + SAVED_NAME_CELL + MAX_HANDLE_SZ) + \
			sizeof(struct nodes_head) + 32)

struct nbuf {
	uint8_t *p;
	size_t n, cap;
};

static int nbuf_put(struct nbuf *b, const void *data, size_t n)
{
	if (b->n + n > b->cap) {
		size_t c = b->cap ? b->cap * 2 : 65536;
		uint8_t *m;

		while (c < b->n + n)
			c *= 2;
		m = realloc(b->p, c);
		if (!m)
			return -ENOMEM;
		b->p = m;
		b->cap = c;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The store's handle of node id's file, reached by its alias now: malloc'd, or NULL. */
static struct file_handle *fh_of(uint32_t id)
{
	struct file_handle *fh = NULL;
	struct inode *in;
	int fd, mnt;

	lk_lock(&T.lock, LK_INODES);
	in = slot_get(id);
	if (!in || in == &T.orphans || !in->parent || in->parent == &T.orphans) {
		lk_unlock(&T.lock, LK_INODES);
		return NULL;
	}
	in->refs++;
	lk_unlock(&T.lock, LK_INODES);
	fd = inode_fd_get(in); /* checked: (dev, ino), and a handle read from the last table */
	if (fd >= 0) {
		fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
		if (fh) {
			fh->handle_bytes = MAX_HANDLE_SZ;
			if (name_to_handle_at(fd, "", fh, &mnt, AT_EMPTY_PATH) < 0) {
				free(fh);
				fh = NULL;
			}
		}
		inode_fd_put(in);
	}
	inode_release(in);
	return fh;
}

int inode_table_save(int state_fd, uint64_t *ret_n)
{
	struct saved_head *h = saved_head();
	struct nodes_head head = { .magic = NODES_MAGIC, .version = NODES_VERSION };
	struct nbuf b = { 0 };
	struct sha256 sh;
	uint8_t sum[32];
	int fd, res = 0;
	uint32_t id;

	struct file_handle **fhs;
	uint8_t *keep;
	size_t nkeep = 0;
	uint32_t gmax = T.gen_base;

	*ret_n = 0;
	head.hwm = h->nodes_hwm < 2 ? 2 : h->nodes_hwm;
	if (head.hwm > ORPHANS_ID)
		head.hwm = ORPHANS_ID;
	fhs = calloc(head.hwm, sizeof(*fhs));
	keep = calloc(head.hwm, 1);
	if (!fhs || !keep) {
		free(fhs);
		free(keep);
		return -ENOMEM;
	}
	/*
	 * Which: the kernel's at unmount, then the kept list's, most recent
	 * first, kept_max of them at most (the next mount keeps no more),
	 * and the directories their aliases go through.
	 */
	lk_lock(&T.lock, LK_INODES);
	HASHSET_EACH(&T.set, pos) {
		struct inode *in = of_key(hashset_key(&T.set, pos));

		if (in->nlookup && nkeep < T.kept_max && in->id < head.hwm && !keep[in->id]) {
			keep[in->id] = 1;
			nkeep++;
		}
	}
	for (struct inode *in = T.kept.kept_next; in != &T.kept && nkeep < T.kept_max;
	     in = in->kept_next)
		if (in->id < head.hwm && !keep[in->id]) {
			keep[in->id] = 1;
			nkeep++;
		}
	for (id = 2; id < head.hwm; id++) {
		struct inode *in = keep[id] == 1 ? slot_get(id) : NULL;

		for (in = in ? in->parent : NULL; in && in != &T.root && in->id < head.hwm &&
						    keep[in->id] != 2; in = in->parent)
			keep[in->id] = 2;
		if (saved_node(id)->gen && saved_node(id)->gen - gmax < 0x80000000u)
			gmax = saved_node(id)->gen; /* the latest, modulo 2^32 */
	}
	lk_unlock(&T.lock, LK_INODES);
	head.gen_next = gmax + 1;
	/* each file as it is now, with the store's handle of it: syscalls, no lock */
	for (id = 2; id < head.hwm; id++)
		if (keep[id])
			fhs[id] = fh_of(id);
	free(keep);
	lk_lock(&T.lock, LK_INODES);
	head.root_dev = T.root.dev;
	head.root_ino = T.root.ino;
	res = nbuf_put(&b, &head, sizeof(head));
	for (id = 2; !res && id < head.hwm; id++) {
		struct saved_node *r = saved_node(id);
		struct nodes_rec rec = { .id = id, .gen = r->gen };
		char name[SAVED_NAME_CELL];

		/* a node its alias reaches, its file's handle taken */
		if (!r->type || !r->parent || r->parent == ORPHANS_ID || r->parent >= head.hwm ||
		    !fhs[id] || fhs[id]->handle_bytes > MAX_HANDLE_SZ || !fhs[id]->handle_bytes)
			continue;
		rec.dev = r->dev;
		rec.ino = r->ino;
		rec.type = r->type;
		rec.parent = r->parent;
		rec.name_len = (uint16_t)saved_node_name(r, name);
		rec.fh_type = fhs[id]->handle_type;
		rec.fh_len = (uint16_t)fhs[id]->handle_bytes;
		if (!rec.name_len)
			continue;
		res = nbuf_put(&b, &rec, sizeof(rec));
		if (!res && rec.name_len)
			res = nbuf_put(&b, name, rec.name_len);
		if (!res && rec.fh_len)
			res = nbuf_put(&b, fhs[id]->f_handle, rec.fh_len);
		head.count++;
	}
	*ret_n = head.count;
	lk_unlock(&T.lock, LK_INODES);
	for (id = 2; id < head.hwm; id++)
		free(fhs[id]);
	free(fhs);
	if (res)
		goto out;
	memcpy(b.p, &head, sizeof(head)); /* its count */
	sha256_init(&sh);
	sha256_update(&sh, b.p, b.n);
	sha256_final(&sh, sum);
	res = nbuf_put(&b, sum, sizeof(sum));
	if (res)
		goto out;
	fd = openat(state_fd, NODES_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0) {
		res = -errno;
		goto out;
	}
	res = write_all(fd, b.p, b.n);
	if (!res && fsync(fd) < 0)
		res = -errno;
	close(fd);
	if (!res && renameat(state_fd, NODES_TMP, state_fd, NODES_FILE) < 0)
		res = -errno;
	if (res) {
		unlinkat(state_fd, NODES_TMP, 0);
	} else if ((fd = openat(state_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(fd); /* the rename */
		close(fd);
	}
out:
	free(b.p);
	return res;
}

/* The whole of a regular file at name in dirfd, at most max bytes: 0 or -errno. */
static int read_file(int dirfd, const char *name, uint64_t max, struct nbuf *ret)
{
	struct stat st;
	size_t got = 0;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		close(fd);
		return -EINVAL;
	}
	ret->p = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!ret->p) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, ret->p + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	ret->n = got;
	return got == (size_t)st.st_size ? 0 : -EIO;
}

/*
 * Check the table in b: its sum, head and every record's bounds (ids
 * rising, below the mark, names without '/' or NUL).  Returns the
 * number of records or -EINVAL.
 */
static int64_t nodes_check(const struct nbuf *b)
{
	struct nodes_head head;
	struct sha256 sh;
	uint8_t sum[32];
	size_t pos = sizeof(head);
	uint32_t last = 1;

	if (b->n < sizeof(head) + 32)
		return -EINVAL;
	sha256_init(&sh);
	sha256_update(&sh, b->p, b->n - 32);
	sha256_final(&sh, sum);
	if (memcmp(sum, b->p + b->n - 32, 32))
		return -EINVAL;
	memcpy(&head, b->p, sizeof(head));
	if (head.magic != NODES_MAGIC || head.version != NODES_VERSION || head.hwm < 2 ||
	    head.hwm > ORPHANS_ID || head.count > SAVED_NODES_MAX ||
	    head.root_dev != (uint64_t)T.root.dev || head.root_ino != (uint64_t)T.root.ino)
		return -EINVAL;
	for (uint64_t i = 0; i < head.count; i++) {
		struct nodes_rec rec;

		if (b->n - 32 - pos < sizeof(rec))
			return -EINVAL;
		memcpy(&rec, b->p + pos, sizeof(rec));
		pos += sizeof(rec);
		if (rec.id <= last || rec.id >= head.hwm || rec.name_len >= SAVED_NAME_CELL ||
		    rec.fh_len > MAX_HANDLE_SZ || b->n - 32 - pos < (size_t)rec.name_len + rec.fh_len)
			return -EINVAL;
		if (!rec.type || (rec.type & ~(uint32_t)S_IFMT) || !rec.parent ||
		    rec.parent >= head.hwm || !rec.name_len || !rec.fh_len ||
		    memchr(b->p + pos, '/', rec.name_len) || memchr(b->p + pos, '\0', rec.name_len) ||
		    (rec.name_len <= 2 && !memcmp(b->p + pos, "..", rec.name_len)))
			return -EINVAL; /* "." and "..": no name of a file in its directory */
		last = rec.id;
		pos += (size_t)rec.name_len + rec.fh_len;
	}
	return pos == b->n - 32 ? (int64_t)head.count : -EINVAL;
}

int inode_table_load(int state_fd, bool use, uint64_t *ret_n)
{
	struct saved_head *h = saved_head();
	struct nbuf b = { 0 };
	struct nodes_head head;
	size_t pos = sizeof(head);
	int64_t count;
	int res;

	*ret_n = 0;
	if (!use) {
		unlinkat(state_fd, NODES_FILE, 0);
		return 0;
	}
	res = read_file(state_fd, NODES_FILE, NODES_FILE_MAX, &b);
	if (res == -ENOENT)
		return 0;
	unlinkat(state_fd, NODES_FILE, 0); /* read once: see NODES_FILE */
	count = res ? res : nodes_check(&b);
	if (count < 0) {
		free(b.p);
		return (int)count;
	}
	memcpy(&head, b.p, sizeof(head));
	/* the table is fresh (inode_table_init() without restoring): its records */
	for (int64_t i = 0; i < count; i++) {
		struct nodes_rec rec;
		struct saved_node *r;

		memcpy(&rec, b.p + pos, sizeof(rec));
		pos += sizeof(rec);
		r = saved_node(rec.id);
		memset(r, 0, sizeof(*r));
		r->gen = rec.gen;
		if (rec.type) {
			r->dev = rec.dev;
			r->ino = rec.ino;
			r->type = rec.type;
			if (rec.name_len > SAVED_NAME_INLINE) {
				if (h->names_hwm < 1)
					h->names_hwm = 1; /* cell 0 is none */
				if (h->names_hwm >= SAVED_NAMES_MAX) {
					r->type = 0; /* no cell left: not kept */
					pos += (size_t)rec.name_len + rec.fh_len;
					continue;
				}
				r->long_name = h->names_hwm++;
			}
			memcpy(r->long_name ? saved_name_cell(r->long_name) : r->name, b.p + pos,
			       rec.name_len);
			r->name_len = rec.name_len;
			r->parent = rec.parent;
		}
		pos += (size_t)rec.name_len + rec.fh_len;
	}
	h->nodes_hwm = head.hwm;
	/* a node id used again gets a generation past any the last mount gave */
	T.gen_base = head.gen_next;
	res = restore(ret_n);
	/* each inode kept: the store's handle its file must have */
	pos = sizeof(head);
	for (int64_t i = 0; !res && i < count; i++) {
		struct nodes_rec rec;
		struct inode *in;

		memcpy(&rec, b.p + pos, sizeof(rec));
		pos += sizeof(rec) + rec.name_len;
		in = rec.type ? slot_get(rec.id) : NULL;
		if (in && in != &T.root && in != &T.orphans && !in->fh &&
		    (in->fh = malloc(sizeof(*in->fh) + rec.fh_len))) {
			in->fh->handle_bytes = rec.fh_len;
			in->fh->handle_type = rec.fh_type;
			memcpy(in->fh->f_handle, b.p + pos, rec.fh_len);
		}
		pos += rec.fh_len;
	}
	free(b.p);
	return res;
}
