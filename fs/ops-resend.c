/*
 * ops-resend.c - operations that must not run twice, when the kernel
 * resends them to a daemon taking over (saved.h, the journal).
 *
 * A request the dead daemon read but never answered comes again with
 * the high bit of its id set (FUSE_NOTIFY_RESEND, ops-io.h).  Most
 * operations are the same done twice: a read, a write at an offset, a
 * getattr, a setattr, a lookup.  These are not: create (O_EXCL), mknod,
 * mkdir, symlink and link (the name exists the second time: EEXIST),
 * unlink and rmdir (ENOENT), rename (ENOENT, or an exchange undone).
 * Each marks its request in the journal before it changes the store
 * (resend_begin()), its result right after (resend_done()), and clears
 * it once answered (resend_end(), from the reply): a crash between the
 * change and the reply leaves the record, done or not.
 *
 * The daemon taking over copies the records left to a table of its own
 * and empties the journal (resend_adopt()).  A resent request then
 * finds (resend_lookup()):
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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "ops-int.h"
#include "saved.h"

#define RESEND_BIT (1ULL << 63)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct saved_op *old;  /* the last daemon's records, by the same hash */
static __thread struct saved_op *mine;

static uint32_t slot_of(uint64_t unique)
{
	return (uint32_t)((unique * 0x9E3779B97F4A7C15ULL) >> 40) & (SAVED_JOURNAL - 1);
}

void resend_adopt(void)
{
	struct saved_op *j = saved_journal();

	old = calloc(SAVED_JOURNAL, sizeof(*old));
	if (old)
		memcpy(old, j, SAVED_JOURNAL * sizeof(*old));
	memset(j, 0, SAVED_JOURNAL * sizeof(*j));
}

int resend_lookup(uint64_t unique, uint64_t *ret_aux, int *ret_res)
{
	uint64_t u = unique & ~RESEND_BIT;

	if (!(unique & RESEND_BIT) || !old || !u)
		return RESEND_NONE;
	for (uint32_t i = slot_of(u), n = 0; n < SAVED_JOURNAL; n++, i = (i + 1) & (SAVED_JOURNAL - 1)) {
		if (!old[i].unique)
			return RESEND_NONE;
		if (old[i].unique != u) /* another's, or a tombstone */
			continue;
		*ret_res = old[i].result;
		*ret_aux = old[i].aux;
		return old[i].state == SAVED_OP_DONE ? RESEND_DONE : RESEND_BEGUN;
	}
	return RESEND_NONE;
}

void resend_begin(uint64_t unique, uint32_t opcode, uint64_t aux)
{
	struct saved_op *j = saved_journal();
	uint64_t u = unique & ~RESEND_BIT;

	mine = NULL;
	if (!u)
		return;
	pthread_mutex_lock(&lock);
	for (uint32_t i = slot_of(u), n = 0; n < SAVED_JOURNAL; n++, i = (i + 1) & (SAVED_JOURNAL - 1)) {
		if (j[i].unique && j[i].unique != RESEND_BIT && j[i].unique != u)
			continue; /* taken (RESEND_BIT: a tombstone, free again) */
		j[i].opcode = opcode;
		j[i].aux = aux;
		j[i].state = SAVED_OP_BEGUN;
		j[i].unique = u;
		mine = &j[i];
		break;
	}
	pthread_mutex_unlock(&lock);
	/* a full journal: the operation runs unmarked (as without a keeper) */
	fault_named(FAULT_OP_BEGUN);
}

void resend_done(int res)
{
	if (!mine)
		return;
	mine->result = res;
	__atomic_store_n(&mine->state, SAVED_OP_DONE, __ATOMIC_RELEASE);
	fault_named(FAULT_OP_DONE);
}

void resend_end(void)
{
	if (!mine)
		return;
	pthread_mutex_lock(&lock);
	/*
	 * Freed so that a probe past it still finds the records after it:
	 * a free slot ends a probe, so the record is kept as a tombstone
	 * with no id of the kernel's (ids start at 1; this one is never
	 * asked) until the journal is emptied at the next takeover.
	 */
	mine->state = 0;
	mine->unique = RESEND_BIT;
	pthread_mutex_unlock(&lock);
	mine = NULL;
}
