/*
 * ops-inval.c - the kernel's caches dropped: a page range, attributes
 * and every name (the epoch) at once; on the invalidator's thread the
 * page cache of replied reads and of every file, a name where the kernel
 * has no epoch, and everything after a takeover (see ops-inval.h).
 */
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "inode.h"
#include "log.h"
#include "ops-int.h"
#include "ops-inval.h"

/*
 * The invalidator: one thread that drops ranges of the kernel's page
 * cache on request, so that no thread that answers requests or hooks
 * blocks in the kernel's invalidation (it waits for locked pages, whose
 * reads may wait for a hook).  A request is made (inval_new, which may
 * fail: the caller then fails closed) before the reply whose pages it
 * drops, and posted (inval_post) after it: the thread never waits for
 * the pages of a reply not sent yet.  nodeid 0: every regular file.
 *
 * Locks: IV.lock guards the queue; it is a leaf (nothing is called
 * under it but malloc'd list links and the condition).
 */
struct inval_job {
	struct inval_job *next;
	uint64_t nodeid, off, len;
	int kind;
	struct inode *direct; /* INV_PAGES of a direct write: its count, its hold */
	char name[];          /* INV_ENTRY's */
};

enum {
	INV_PAGES,  /* nodeid's [off, off + len); nodeid 0: every regular file's */
	INV_ENTRY,  /* the entry name of directory nodeid */
	INV_ALL,    /* every node's attributes, every directory's listing */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct inval_job *head, **tail;
	pthread_t thread;
	bool started, stop;
} IV = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
	 .tail = &IV.head };

struct inval_job *inval_new(uint64_t nodeid, uint64_t off, uint64_t len)
{
	struct inval_job *iv = malloc(sizeof(*iv));

	if (iv)
		*iv = (struct inval_job){ .nodeid = nodeid, .off = off, .len = len };
	return iv;
}

static struct inval_job *inval_new_entry(uint64_t nodeid, const char *name)
{
	size_t n = strlen(name) + 1;
	struct inval_job *iv = malloc(sizeof(*iv) + n);

	if (iv) {
		*iv = (struct inval_job){ .nodeid = nodeid, .kind = INV_ENTRY };
		memcpy(iv->name, name, n);
	}
	return iv;
}

bool inval_direct_write(struct inode *in, uint64_t off, uint64_t len)
{
	struct inval_job *iv;

	atomic_fetch_add(&((struct inode_head *)in)->direct_writes, 1);
	iv = IV.started ? inval_new(inode_nodeid(in), off, len) : NULL;
	if (!iv)
		return false;
	inode_ref(in);
	iv->direct = in;
	inval_post(iv);
	return true;
}

void inval_post(struct inval_job *iv)
{
	pthread_mutex_lock(&IV.lock);
	iv->next = NULL;
	*IV.tail = iv;
	IV.tail = &iv->next;
	pthread_cond_signal(&IV.cond);
	pthread_mutex_unlock(&IV.lock);
}

static void inval_one(uint64_t nodeid, uint64_t off, uint64_t len)
{
	if (ops_session && !fuse_session_exited(ops_session))
		fuse_lowlevel_notify_inval_inode(ops_session, nodeid, (off_t)off, (off_t)len);
}

/*
 * What the kernel holds of every node the daemon knows: attributes,
 * and a directory's cached listing (its pages; a file's pages stay:
 * they are the file's bytes).  Out of memory: as much as was listed.
 */
static void inval_all(void)
{
	uint64_t *ids;
	size_t n;

	if (!inode_files(&ids, &n)) {
		for (size_t i = 0; i < n; i++)
			inval_one(ids[i], (uint64_t)-1, 0);
		free(ids);
	}
	inval_one(inode_nodeid(inode_root()), 0, 0);
	if (!inode_dirs(&ids, &n)) {
		for (size_t i = 0; i < n; i++)
			inval_one(ids[i], 0, 0);
		free(ids);
	}
}

static void *inval_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&IV.lock);
	for (;;) {
		struct inval_job *list;

		while (!IV.head && !IV.stop)
			pthread_cond_wait(&IV.cond, &IV.lock);
		if (!IV.head)
			break;
		list = IV.head;
		IV.head = NULL;
		IV.tail = &IV.head;
		pthread_mutex_unlock(&IV.lock);
		while (list) {
			struct inval_job *iv = list;

			list = iv->next;
			if (iv->kind == INV_ENTRY) {
				/* may wait for the directory's lock: nobody waits for it here */
				if (ops_session && !fuse_session_exited(ops_session))
					fuse_lowlevel_notify_inval_entry(ops_session, iv->nodeid,
									 iv->name,
									 strlen(iv->name));
			} else if (iv->kind == INV_ALL) {
				inval_all();
			} else if (iv->direct) {
				/* every stale page of the write is gone: opens may keep the cache */
				inval_one(iv->nodeid, iv->off, iv->len);
				atomic_fetch_sub(&((struct inode_head *)iv->direct)->direct_writes, 1);
				inode_release(iv->direct);
			} else if (iv->nodeid) {
				inval_one(iv->nodeid, iv->off, iv->len);
				events_cache_dropped();
			} else {
				uint64_t *ids;
				size_t n;

				/* out of memory: each watched open drops its cache anyway */
				if (!inode_files(&ids, &n)) {
					for (size_t i = 0; i < n; i++)
						inval_one(ids[i], 0, 0);
					free(ids);
					events_cache_dropped();
				}
			}
			free(iv);
		}
		pthread_mutex_lock(&IV.lock);
	}
	pthread_mutex_unlock(&IV.lock);
	return NULL;
}

void inval_start(void)
{
	if (!IV.started)
		IV.started = !pthread_create(&IV.thread, NULL, inval_thread, NULL);
}

bool inval_started(void)
{
	return IV.started;
}

void ops_invalidate(struct inode *in, uint64_t off, uint64_t len)
{
	if (ops_session)
		fuse_lowlevel_notify_inval_inode(ops_session, inode_nodeid(in), (off_t)off,
						 (off_t)len);
}

void ops_invalidate_files_later(void)
{
	struct inval_job *iv = inval_new(0, 0, 0);

	if (iv)
		inval_post(iv);
	else
		log_warn("out of memory: the page cache is not dropped for a new reads watcher");
}

void ops_invalidate_front(const struct inval *iv)
{
	switch (iv->kind) {
	case INVAL_DATA:
		ops_invalidate(iv->in, iv->off, iv->len);
		break;
	case INVAL_ATTR:
		ops_invalidate_attr(iv->in);
		break;
	case INVAL_ENTRY:
		ops_invalidate_entry(iv->in, iv->name);
		break;
	case INVAL_NAMES:
		ops_invalidate_names();
		break;
	case INVAL_FILES_LATER:
		ops_invalidate_files_later();
		break;
	}
}

void ops_inval_stop(void)
{
	pthread_mutex_lock(&IV.lock);
	IV.stop = true;
	pthread_cond_signal(&IV.cond);
	pthread_mutex_unlock(&IV.lock);
	if (IV.started)
		pthread_join(IV.thread, NULL);
	IV.started = false;
	while (IV.head) {
		/* posted after the thread's last look: the session is gone */
		struct inval_job *iv = IV.head;

		IV.head = iv->next;
		free(iv);
	}
	IV.tail = &IV.head;
}

void ops_invalidate_attr(struct inode *in)
{
	/* a negative offset: the attributes alone, no page is touched */
	if (ops_session)
		fuse_lowlevel_notify_inval_inode(ops_session, inode_nodeid(in), -1, 0);
}

/* FUSE_NOTIFY_INC_EPOCH (Linux 6.16, protocol 7.44): no payload */
#define K_NOTIFY_INC_EPOCH 8
atomic_bool ops_epoch;

bool ops_invalidate_names(void)
{
	struct { uint32_t len; int32_t error; uint64_t unique; } h = {
		.len = sizeof(h), .error = K_NOTIFY_INC_EPOCH };

	if (!ops_session || !atomic_load_explicit(&ops_epoch, memory_order_relaxed))
		return false;
	return write(fuse_session_fd(ops_session), &h, sizeof(h)) == (ssize_t)sizeof(h);
}

void ops_invalidate_entry(struct inode *dir, const char *name)
{
	struct inval_job *iv;

	/* where the kernel has the epoch, the caller's ops_invalidate_names() drops it */
	if (!ops_session || atomic_load_explicit(&ops_epoch, memory_order_relaxed))
		return;
	iv = inval_new_entry(inode_nodeid(dir), name);
	if (iv)
		inval_post(iv);
	else
		log_warn("out of memory: a name the daemon changed stays cached until "
			 "entry_timeout");
}

void ops_invalidate_all_later(void)
{
	struct inval_job *iv = inval_new(0, 0, 0);

	ops_invalidate_names();
	if (iv) {
		iv->kind = INV_ALL;
		inval_post(iv);
	}
}
