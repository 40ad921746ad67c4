/*
 * ops-int.c - what the files of the FUSE layer share (ops-int.h): the
 * state set at start-up, parked requests (struct later, its steps'
 * handlers and later_resume()) and the wait for a lazy directory's
 * listing.  The bottom of the ops files: it calls none of them by name.
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

/* The handler of each step (later_handle()); filled at start-up, read-only afterwards. */
static later_step_fn *later_steps[LATER_STEPS];

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

void later_handle(enum later_step first, enum later_step last, later_step_fn *fn)
{
	assert(first <= last && last < LATER_STEPS && fn);
	for (unsigned int s = first; s <= last; s++) {
		assert(!later_steps[s]);
		later_steps[s] = fn;
	}
}

bool later_handled(void)
{
	for (unsigned int s = 0; s < LATER_STEPS; s++)
		if (!later_steps[s])
			return false;
	return true;
}

void later_resume(void *arg, int res)
{
	struct later *l = arg;

	if ((unsigned int)l->step >= LATER_STEPS || !later_steps[l->step])
		abort(); /* a step no later_new() caller sets, or one not registered: our bug */
	if (later_steps[l->step](l, res) != EVENTS_PARKED)
		later_free(l);
}

/*
 * Lazy directories (events_dir()): an operation on the names of a
 * directory not listed yet parks until its listing is committed, then
 * runs again from the start in the engine thread that ended the wait;
 * its arguments are kept in its struct later meanwhile.
 */
int dir_wait(fuse_req_t req, fuse_ino_t dir, const struct later *args)
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
	res = args->step == LATER_LOOKUP ? events_dir_lookup(d, l->name, req, later_resume, l) :
					   events_dir(d, req, later_resume, l);
	if (res != EVENTS_PARKED)
		later_free(l);
	return res;
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
 * lost_lock, a leaf but for the retry it calls under it.
 */
static pthread_mutex_t lost_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t lost[SAVED_OPENS_MAX / 8];
static _Atomic unsigned nlost;
static bool (*lost_retry)(uint32_t fh);

void ops_lost_init(bool (*retry)(uint32_t fh))
{
	lost_retry = retry;
}

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

void ops_lost_retry(void)
{
	unsigned found = 0;

	if (!atomic_load_explicit(&nlost, memory_order_relaxed) || !lost_retry)
		return;
	pthread_mutex_lock(&lost_lock);
	for (uint32_t i = 0; nlost && i < SAVED_OPENS_MAX; i++) {
		if (!(lost[i / 8] & (1u << (i % 8))) || !lost_retry(i))
			continue;
		lost[i / 8] &= (uint8_t)~(1u << (i % 8));
		nlost--;
		found++;
	}
	pthread_mutex_unlock(&lost_lock);
	if (found)
		log_info("%u handle%s lost at the takeover reopened, or released, once a resent "
			 "rename was answered", found, found == 1 ? "" : "s");
}
