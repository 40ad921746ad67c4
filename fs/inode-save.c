/* inode-save.c - the inode table across an unmount: see inode-save.h */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockcheck.h"
#include "hashset.h"
#include "inode.h"
#include "inode-int.h"
#include "inode-ids.h"
#include "inode-save.h"
#include "saved.h"
#include "sha256.h"

/*
 * STORE/.hsmfs/nodes (inode-save.h): a head, one record a node kept (at most
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
	uint32_t gmax = ids_gen_base();

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
	ids_set_gen_base(head.gen_next);
	res = table_restore(ret_n);
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
