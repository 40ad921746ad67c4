/*
 * ops-adopt.c - a daemon taking over reopens what the last one had open.
 *
 * Every open file and directory handle the kernel holds is a store
 * descriptor's number (ops-file.c, ops-dir.c) with a record in the
 * saved region (saved.h).  saved_reserve() took each number at start;
 * here each is opened again from its node, at that number, and counted
 * as its open was: the inode's open count, the file's state and its
 * open (events_opened()), its passthrough mode and backing id
 * (pt_adopt()).  The descriptor is the one the open made
 * (ops_store_flags(): no O_APPEND, a write-only open read-write under
 * writeback), less what made or emptied the file (O_CREAT, O_EXCL,
 * O_TRUNC): the file is there.  A handle whose node cannot be reached
 * again keeps its placeholder: its reads and writes fail, until the
 * kernel releases it.  It is tried again (ops_adopt_retry())
 * once a resent rename is found done: the node was only under a name
 * the last daemon had not moved yet.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "inode.h"
#include "log.h"
#include "ops-int.h"
#include "ops-adopt.h"
#include "saved.h"
#include "passthrough.h"
#include "saved.h"

static int reopen(struct inode *in, const struct saved_open *r)
{
	char path[32];
	int pfd, fd, flags;

	flags = r->kind == SAVED_OPEN_DIR ? O_RDONLY | O_DIRECTORY :
		ops_store_flags((int)r->flags) & ~O_TRUNC;
	pfd = inode_fd_get(in);
	if (pfd < 0)
		return pfd;
	inode_proc_path(pfd, path);
	fd = open(path, flags | O_CLOEXEC);
	inode_fd_put(in);
	if (fd < 0)
		return -errno;
	ops_store_noatime(fd, r->kind == SAVED_OPEN_DIR);
	return fd;
}

/* Handle i of record r, reopened at its number: 0 or -errno. */
static int adopt_one(uint32_t i, const struct saved_open *r, bool counted)
{
	struct inode *in = inode_from_nodeid(r->node);
	int fd, res;

	fd = reopen(in, r);
	res = fd < 0 ? fd : dup3(fd, (int)i, O_CLOEXEC) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	if (!res && r->kind == SAVED_OPEN_DIR)
		res = ops_dir_adopt((int)i, in);
	if (res) {
		if (r->kind == SAVED_OPEN_FILE && !counted)
			inode_open_inc(in); /* as op_release() will count it */
		return res; /* the placeholder stays until the kernel releases it */
	}
	if (r->kind == SAVED_OPEN_DIR)
		return 0;
	if (!counted)
		inode_open_inc(in);
	if (!events_load(in) && (inode_flags(in) & INODE_STATEFUL))
		events_opened(in);
	pt_adopt(in, (int)i, r);
	return 0;
}

/* A lost handle tried again (ops_adopt_retry()): true once it needs no more. */
static bool adopt_again(uint32_t i)
{
	struct saved_open *r = saved_open_rec((int)i);

	return __atomic_load_n(&r->kind, __ATOMIC_ACQUIRE) == SAVED_OPEN_FREE ||
	       !adopt_one(i, r, r->kind == SAVED_OPEN_FILE);
}

void ops_adopt_opens(void)
{
	struct saved_head *h = saved_head();
	unsigned files = 0, dirs = 0, lost = 0;

	for (uint32_t i = 0; i < h->opens_hwm && i < SAVED_OPENS_MAX; i++) {
		struct saved_open *r = saved_open_rec((int)i);
		int res;

		if (r->kind == SAVED_OPEN_FREE || r->kind == SAVED_OPEN_RELEASING)
			continue; /* RELEASING: a placeholder until its RELEASE, resent, frees it */
		res = adopt_one(i, r, false);
		if (res) {
			ops_lost_add(i);
			lost++;
			log_warn("cannot reopen handle %u (node %u) after the restart: %s",
				 i, r->node, strerror(-res));
		} else if (r->kind == SAVED_OPEN_DIR) {
			dirs++;
		} else {
			files++;
		}
	}
	log_info("took over %u open file%s and %u director%s%s", files, files == 1 ? "" : "s",
		 dirs, dirs == 1 ? "y" : "ies", lost ? " (some lost: see above)" : "");
}

void ops_adopt_retry(void)
{
	unsigned found = ops_lost_sweep(adopt_again);

	if (found)
		log_info("%u handle%s lost at the takeover reopened, or released, once a resent "
			 "rename was answered", found, found == 1 ? "" : "s");
}

static bool removal_done(const struct saved_op *r, void *arg)
{
	(void)arg;
	if (r->result || !(r->aux & RESEND_REMOVED_LAST))
		return false;
	events_unlinked(NULL, r->aux & ~RESEND_REMOVED_LAST, true, NULL);
	return true;
}

unsigned ops_resend_removals(void)
{
	return resend_each(OP_UNLINK, SAVED_OP_DONE, removal_done, NULL);
}

struct begun {
	uint64_t *inos;
	size_t n;
};

static bool removal_begun(const struct saved_op *r, void *arg)
{
	struct begun *b = arg;

	if (!(r->aux & RESEND_REMOVED_LAST))
		return false;
	b->inos[b->n++] = r->aux & ~RESEND_REMOVED_LAST;
	return true;
}

size_t ops_resend_removals_begun(uint64_t **ret)
{
	struct begun b = { .inos = malloc(SAVED_JOURNAL * sizeof(uint64_t)) };

	*ret = b.inos;
	if (!b.inos)
		return 0;
	resend_each(OP_UNLINK, SAVED_OP_BEGUN, removal_begun, &b);
	return b.n;
}
