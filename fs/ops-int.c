/*
 * ops-int.c - what the files of the FUSE layer share (ops-int.h): the
 * state set at start-up, parked requests (struct later), the wait for a
 * lazy directory's listing, the lookup of a name, the lost handles.
 * The bottom of the ops files: it calls none of them, by name or
 * through a table.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "inode.h"
#include "log.h"
#include "ops-int.h"
#include "saved.h"

struct ops_config ops_cfg;
bool ops_acls;
bool ops_killpriv;
bool ops_dont_mask;
struct fuse_session *ops_session;

static _Atomic bool handover;

void ops_handover(void)
{
	atomic_store(&handover, true);
	if (ops_session)
		fuse_session_exit(ops_session);
}

bool ops_handover_asked(void)
{
	return atomic_load(&handover);
}

struct later *later_new(const struct later *tmpl, size_t datalen)
{
	struct later *l = malloc(sizeof(*l) + datalen);

	if (!l)
		return NULL;
	*l = *tmpl;
	l->name = tmpl->name ? strdup(tmpl->name) : NULL;
	l->name2 = tmpl->name2 ? strdup(tmpl->name2) : NULL;
	if ((tmpl->name && !l->name) || (tmpl->name2 && !l->name2)) {
		later_free(l);
		return NULL;
	}
	return l;
}

void later_free(struct later *l)
{
	if (!l)
		return;
	free((char *)l->name);
	free((char *)l->name2);
	free(l);
}

/*
 * Lazy directories (events_dir()): an operation on the names of a
 * directory not listed yet parks until its listing is committed, then
 * runs again from the start in the engine thread that ended the wait;
 * its arguments are kept in its struct later meanwhile.
 */
int dir_wait(fuse_req_t req, fuse_ino_t dir, const struct later *args,
	     void (*resume)(void *arg, int res))
{
	struct inode *d = IN(dir);
	struct later *l;
	int res;

	if (__builtin_expect(events_dir_known(d), 1))
		return 0;
	l = later_new(args, 0);
	if (!l)
		return -ENOMEM;
	l->req = req;
	/* a lookup may ask the hook for its one name (PRE_LOOKUP) */
	res = args->step == LATER_LOOKUP ? events_dir_lookup(d, l->name, FRONT(req), resume, l) :
					   events_dir(d, FRONT(req), resume, l);
	if (res != EVENTS_PARKED)
		later_free(l);
	return res;
}

/* ---------------------------------------------------------------- lookup */

/*
 * How long the kernel may keep a name of parent: entry_timeout, but no
 * longer than dir_ttl in a directory listed again after it, so that a
 * look reaches the daemon, which lists it again (dirs.h).
 */
double ops_name_timeout(fuse_ino_t parent, double t)
{
	if (ops_cfg.dir_ttl > 0 && t > ops_cfg.dir_ttl &&
	    (inode_flags(IN(parent)) & INODE_DIR_TTL))
		return ops_cfg.dir_ttl;
	return t;
}

int do_lookup(fuse_ino_t parent, const char *name, struct fuse_entry_param *e)
{
	struct inode *in;
	int res;

	memset(e, 0, sizeof(*e));
	if (reserved(parent, name))
		return -ENOENT;
	res = inode_lookup(IN(parent), name, &e->attr, &in);
	if (res)
		return res;
	ops_entry_of(in, ops_name_timeout(parent, ops_cfg.entry_timeout), e);
	return 0;
}

void ops_entry_of(struct inode *in, double entry_timeout, struct fuse_entry_param *e)
{
	events_shown_attr(in, &e->attr);
	e->ino = inode_nodeid(in);
	e->generation = inode_generation(in);
	e->attr_timeout = ops_attr_timeout(in);
	e->entry_timeout = entry_timeout;
}

/* ------------------------------------------------------------ store flags */

int ops_store_flags(int flags)
{
	/*
	 * O_DIRECT is the kernel's business on the mount side; the store is
	 * read into our own unaligned buffers.
	 */
	flags &= ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | O_DIRECT);
	if (ops_cfg.writeback) {
		/* the kernel may read pages of a file opened write-only */
		if ((flags & O_ACCMODE) == O_WRONLY)
			flags = (flags & ~O_ACCMODE) | O_RDWR;
	}
	/*
	 * The kernel positions appends itself and sends every write with
	 * its offset (pwritev2 RWF_NOAPPEND, a shared mapping's write-back
	 * included): the store descriptor must write where it says.
	 */
	flags &= ~O_APPEND;
	return flags | O_CLOEXEC;
}

void ops_store_noatime(int fd, bool dir)
{
	int fl;

	if (!ops_cfg.noatime && !(dir && ops_cfg.nodiratime))
		return;
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NOATIME);
}

/* --------------------------------------------------------- lost handles */

/*
 * Handles a takeover could not reopen (ops-adopt.c), tried again once a
 * resent rename is found done (ops-names.c): the last daemon died
 * between the store's rename and the node's, which leaves the node, and
 * all below it, under a name the store no longer has.  A RELEASE of one
 * takes it off first (ops_lost_forget(), before its descriptor closes),
 * so a retry never reopens over a number freed meanwhile.  Locks:
 * lost_lock, a leaf but for the sweep's done() it calls under it.
 */
static pthread_mutex_t lost_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t lost[SAVED_OPENS_MAX / 8];
static _Atomic unsigned nlost;

void ops_lost_add(uint32_t fh)
{
	pthread_mutex_lock(&lost_lock);
	if (fh < SAVED_OPENS_MAX && !(lost[fh / 8] & (1u << (fh % 8)))) {
		lost[fh / 8] |= (uint8_t)(1u << (fh % 8));
		nlost++;
	}
	pthread_mutex_unlock(&lost_lock);
}

void ops_lost_forget(uint64_t fh)
{
	if (__builtin_expect(!atomic_load_explicit(&nlost, memory_order_relaxed), 1) ||
	    fh >= SAVED_OPENS_MAX)
		return;
	pthread_mutex_lock(&lost_lock);
	if (lost[fh / 8] & (1u << (fh % 8))) {
		lost[fh / 8] &= (uint8_t)~(1u << (fh % 8));
		nlost--;
	}
	pthread_mutex_unlock(&lost_lock);
}

unsigned ops_lost_sweep(bool (*done)(uint32_t fh))
{
	unsigned found = 0;

	if (!atomic_load_explicit(&nlost, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&lost_lock);
	for (uint32_t i = 0; nlost && i < SAVED_OPENS_MAX; i++) {
		if (!(lost[i / 8] & (1u << (i % 8))) || !done(i))
			continue;
		lost[i / 8] &= (uint8_t)~(1u << (i % 8));
		nlost--;
		found++;
	}
	pthread_mutex_unlock(&lost_lock);
	return found;
}
