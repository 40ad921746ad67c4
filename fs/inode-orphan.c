/*
 * inode-orphan.c - orphan links: an open file removed under a keeper
 * stays reachable by a daemon taking over (inode.h, inode-int.h)
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockcheck.h"
#include "inode.h"
#include "inode-int.h"
#include "saved.h"

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
