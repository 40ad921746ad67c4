/*
 * ops-resend.c - operations that must not run twice, when the kernel
 * resends them to a daemon taking over (saved.h, the journal).
 *
 * A request the dead daemon read but never answered comes again with
 * the high bit of its id set (FUSE_NOTIFY_RESEND, ops-io.h).  Most
 * operations are the same done twice: a read, a write at an offset, a
 * getattr, a setattr, a lookup.  These are not: create (O_EXCL), mknod,
 * mkdir, symlink and link (the name exists the second time: EEXIST),
 * unlink and rmdir (ENOENT), rename (ENOENT, or an exchange undone),
 * removexattr and setxattr with XATTR_CREATE (ENODATA, EEXIST).
 * Each marks its request in the journal before it changes the store
 * (resend_begin()), its result right after (resend_done()), and clears
 * it once answered (resend_end(), from the reply): a crash between the
 * change and the reply leaves the record, done or not.
 *
 * The daemon taking over finds the records left where they are: they go
 * once their requests, resent, are answered (a daemon that dies taking
 * over leaves them to the next).  A resent request finds
 * (resend_lookup()):
 *   - no record: it never reached the store; it runs;
 *   - done: the result the store gave; the operation answers that
 *     (an entry looked up again, for one that made a name);
 *   - begun only: the crash fell between the mark and the result; the
 *     operation asks the store whether its change is there (the name
 *     exists, is gone, is where the rename put the file it moved) and
 *     answers as done if so, else runs.
 * A record is 32 bytes in the shared journal, found by the id's hash
 * (open addressing; an answered record becomes a tombstone, which the
 * next record may take).
 *
 * Locks: one mutex of this file over the journal's free slots; nothing
 * else is done under it.  The record a handler began is this thread's
 * (one handler run makes the change and its reply on one thread).
 */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "ops-int.h"
#include "saved.h"

#define RESEND_BIT (1ULL << 63)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool taking_over;       /* records of earlier daemons may be there */
static __thread struct saved_op *mine;

#define NEXT(i) (((i) + 1) & (SAVED_JOURNAL - 1))
#define TOMB RESEND_BIT        /* a record answered: free for the next */

static uint32_t slot_of(uint64_t unique)
{
	return (uint32_t)((unique * 0x9E3779B97F4A7C15ULL) >> 40) & (SAVED_JOURNAL - 1);
}

/* The record of u, or NULL.  lock held. */
static struct saved_op *find(uint64_t u)
{
	struct saved_op *j = saved_journal();

	for (uint32_t i = slot_of(u), n = 0; n < SAVED_JOURNAL; n++, i = NEXT(i)) {
		if (!j[i].unique)
			return NULL;
		if (j[i].unique == u)
			return &j[i];
	}
	return NULL;
}

void resend_adopt(void)
{
	/*
	 * The records stay where they are until their requests, resent,
	 * are answered: a daemon that dies while taking over leaves them to
	 * the next one (t0500 crashes it at each step of a takeover).
	 */
	taking_over = true;
}

int resend_lookup(uint64_t unique, uint64_t *ret_aux, int *ret_res)
{
	uint64_t u = unique & ~RESEND_BIT;
	struct saved_op *r;
	int res = RESEND_NONE;

	mine = NULL; /* this handler's, from here (one left by a parked one is not) */
	if (!(unique & RESEND_BIT) || !taking_over || !u)
		return RESEND_NONE;
	pthread_mutex_lock(&lock);
	r = find(u);
	if (r && r->state) {
		*ret_res = r->result;
		*ret_aux = r->aux;
		res = r->state == SAVED_OP_DONE ? RESEND_DONE : RESEND_BEGUN;
		mine = r; /* its answer frees it (resend_end()) */
	}
	pthread_mutex_unlock(&lock);
	return res;
}

void resend_begin(uint64_t unique, uint32_t opcode, uint64_t aux)
{
	struct saved_op *j = saved_journal(), *r;
	uint64_t u = unique & ~RESEND_BIT;

	mine = NULL;
	if (!u)
		return;
	pthread_mutex_lock(&lock);
	r = find(u); /* begun before: a resent request, run again */
	for (uint32_t i = slot_of(u), n = 0; !r && n < SAVED_JOURNAL; n++, i = NEXT(i))
		if (!j[i].unique || j[i].unique == TOMB)
			r = &j[i];
	if (r) {
		r->opcode = opcode;
		r->aux = aux;
		r->state = SAVED_OP_BEGUN;
		r->unique = u;
		mine = r;
	}
	pthread_mutex_unlock(&lock);
	/* a full journal: the operation runs unmarked (as without a keeper) */
	fault_named(FAULT_OP_BEGUN);
}

void resend_set_aux(uint64_t aux)
{
	if (mine)
		mine->aux = aux;
}

void resend_done(int res)
{
	if (!mine)
		return;
	fault_named(FAULT_OP_CHANGED);
	mine->result = res;
	__atomic_store_n(&mine->state, SAVED_OP_DONE, __ATOMIC_RELEASE);
	fault_named(FAULT_OP_DONE);
}

void resend_end(void)
{
	if (!mine)
		return;
	pthread_mutex_lock(&lock);
	/* a tombstone: a probe goes past it, the next record may take it */
	mine->state = 0;
	mine->unique = TOMB;
	pthread_mutex_unlock(&lock);
	mine = NULL;
}

unsigned resend_each(uint32_t opcode, uint32_t state,
		     bool (*fn)(const struct saved_op *r, void *arg), void *arg)
{
	struct saved_op *j = saved_journal();
	unsigned n = 0;

	if (!taking_over)
		return 0;
	for (uint32_t i = 0; i < SAVED_JOURNAL; i++) {
		struct saved_op r = j[i];

		if (!r.unique || r.unique == TOMB || r.state != state || r.opcode != opcode)
			continue;
		n += fn(&r, arg);
	}
	return n;
}
