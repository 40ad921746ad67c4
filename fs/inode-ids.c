/* inode-ids.c - node ids and their saved records: see inode-ids.h */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "inode-ids.h"
#include "saved.h"

#define SLOT_CHUNK 4096u

static struct {
	/* node id -> inode: chunks of SLOT_CHUNK, read without the lock */
	_Atomic(struct inode *) *_Atomic slots[SAVED_NODES_MAX / SLOT_CHUNK];
	uint32_t gen_base;       /* first generation of a node id never used */
	uint32_t *free_ids;      /* node ids free below the saved high-water mark */
	size_t nfree_ids, cap_free_ids;
	uint32_t *free_cells;    /* long-name cells likewise */
	size_t nfree_cells, cap_free_cells;
} I;

struct inode *slot_get(uint64_t id)
{
	_Atomic(struct inode *) *c;

	if (id >= SAVED_NODES_MAX)
		return NULL;
	c = atomic_load_explicit(&I.slots[id / SLOT_CHUNK], memory_order_acquire);
	return c ? atomic_load_explicit(&c[id % SLOT_CHUNK], memory_order_relaxed) : NULL;
}

/* Lock held (or the table's set-up). */
int slot_set(uint32_t id, struct inode *in)
{
	_Atomic(struct inode *) *c = atomic_load_explicit(&I.slots[id / SLOT_CHUNK],
							  memory_order_relaxed);

	if (!c) {
		if (!in)
			return 0;
		c = calloc(SLOT_CHUNK, sizeof(*c));
		if (!c)
			return -ENOMEM;
		atomic_store_explicit(&I.slots[id / SLOT_CHUNK], c, memory_order_release);
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

int rec_new(struct inode *in, dev_t dev, ino_t ino, mode_t type, uint32_t *ret_id,
	    uint32_t *ret_gen)
{
	struct saved_head *h = saved_head();
	struct saved_node *r;
	uint32_t id;

	if (I.nfree_ids) {
		id = I.free_ids[--I.nfree_ids];
	} else {
		if (h->nodes_hwm < 2)
			h->nodes_hwm = 2; /* 0 is none, 1 the root */
		if (h->nodes_hwm >= ORPHANS_ID)
			return -ENFILE;
		id = h->nodes_hwm;
	}
	if (slot_set(id, in)) {
		if (id != h->nodes_hwm)
			I.nfree_ids++;
		return -ENOMEM;
	}
	if (id == h->nodes_hwm)
		h->nodes_hwm++;
	r = saved_node(id);
	*ret_id = id;
	if (!r->gen)
		r->gen = I.gen_base; /* a handle of an earlier mount: a wrong generation */
	*ret_gen = ++r->gen;
	r->dev = dev;
	r->ino = ino;
	r->nlookup = 0;
	r->parent = 0;
	r->long_name = 0;
	r->name_len = 0;
	r->type = type ? type : S_IFREG;
	return 0;
}

void cell_free(uint32_t cell)
{
	/* on failure the cell is lost until the next daemon's count: harmless */
	if (cell)
		(void)push_u32(&I.free_cells, &I.nfree_cells, &I.cap_free_cells, cell);
}

int id_free(uint32_t id)
{
	return push_u32(&I.free_ids, &I.nfree_ids, &I.cap_free_ids, id);
}

void rec_alias(uint32_t id, uint32_t parent, const char *name)
{
	struct saved_node *r = saved_node(id);
	struct saved_head *h = saved_head();
	size_t n = name ? strlen(name) : 0;

	if (!r || id == FUSE_ROOT_NODEID)
		return;
	r->parent = 0; /* no alias while it changes: a crash here is ESTALE */
	if (n > SAVED_NAME_INLINE && !r->long_name) {
		if (I.nfree_cells)
			r->long_name = I.free_cells[--I.nfree_cells];
		else if (h->names_hwm < SAVED_NAMES_MAX)
			r->long_name = h->names_hwm ? h->names_hwm++ : (h->names_hwm = 2, 1);
	} else if (n <= SAVED_NAME_INLINE && r->long_name) {
		cell_free(r->long_name);
		r->long_name = 0;
	}
	if (n > SAVED_NAME_INLINE && !r->long_name)
		return; /* no cell left: this node is not found again after a restart */
	if (n) /* no alias: name is NULL */
		memcpy(r->long_name ? saved_name_cell(r->long_name) : r->name, name, n);
	r->name_len = (uint16_t)n;
	r->parent = parent;
}

void rec_free(uint32_t id)
{
	struct saved_node *r = saved_node(id);

	r->type = 0;
	r->parent = 0;
	cell_free(r->long_name);
	r->long_name = 0;
	slot_set(id, NULL);
	/* on failure lost until the next daemon: harmless */
	(void)id_free(id);
}

uint32_t ids_gen_base(void)
{
	return I.gen_base;
}

void ids_set_gen_base(uint32_t gen)
{
	I.gen_base = gen;
}

void ids_destroy(void)
{
	for (size_t i = 0; i < sizeof(I.slots) / sizeof(I.slots[0]); i++) {
		free((void *)atomic_load_explicit(&I.slots[i], memory_order_relaxed));
		I.slots[i] = NULL;
	}
	free(I.free_ids);
	free(I.free_cells);
	I.free_ids = I.free_cells = NULL;
	I.nfree_ids = I.cap_free_ids = I.nfree_cells = I.cap_free_cells = 0;
}
