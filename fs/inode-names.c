/* inode-names.c - the alias and the other names of a file: see inode.h, inode-int.h */
#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lockcheck.h"
#include "inode.h"
#include "inode-int.h"
#include "inode-ids.h"

bool same_name(const struct inode *p1, const char *n1, const struct inode *p2, const char *n2)
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

bool known_name(const struct inode *in, const struct inode *parent, const char *name)
{
	return same_name(in->parent, in->name, parent, name) || name_index(in, parent, name) >= 0;
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
	rec_alias(in->id, in->parent ? in->parent->id : 0, in->name);
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

int set_alias_seen(struct inode *in, struct inode *parent, const char *name, nlink_t links)
{
	char *n = NULL;

	assert(lk_held(LK_INODES));

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

int set_alias(struct inode *in, struct inode *parent, const char *name)
{
	return set_alias_seen(in, parent, name, 0);
}

void alias_fall_back(struct inode *in)
{
	struct inode_name n;

	assert(lk_held(LK_INODES));
	if (!in->nnames) {
		alias_to(in, NULL, NULL, false);
		return;
	}
	n = name_take(in, in->nnames - 1);
	alias_to(in, n.parent, n.name, false);
	unpin_named(in);
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
	if (res == 0)
		unpin_named(in);
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
