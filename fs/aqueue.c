/* aqueue.c - the archive queue: see aqueue.h */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "aqueue.h"
#include "clock.h"
#include "fstate.h"
#include "inode.h"
#include "log.h"
#include "state.h"

#define BUSY_MS 200           /* a file written unseen or changing: look again */
#define NAMES_MS 1000         /* a file waiting for a name op of its path: look again */

struct aqueue AQ;

void aqueue_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&AQ.cond, &ca);
	pthread_cond_init(&AQ.ncond, &ca);
	pthread_condattr_destroy(&ca);
}

void aqueue_free(void)
{
	ELOCK_HELD();
	due_heap_free(&AQ.heap);
}

#define TAKE_SKIP_MAX 64 /* due files one look passes over (each being renamed or taken) */

struct fstate *take_due(int64_t now, int64_t *next_due)
{
	ELOCK_HELD();
	struct fstate *skip[TAKE_SKIP_MAX], *fs = NULL;
	struct due_item *it;
	unsigned nskip = 0;

	*next_due = 0;
	while ((it = due_heap_first(&AQ.heap)) && it->due <= now) {
		struct fstate *f = fstate_of_due(it);

		if (!f->naming && !(AQ.ntakes && take_wanted(f->ino))) {
			fs = f;
			break;
		}
		if (nskip == TAKE_SKIP_MAX)
			break; /* looked at again within ARCH_LOOK_MS */
		due_heap_remove(&AQ.heap, it);
		skip[nskip++] = f;
	}
	if (fs)
		due_heap_remove(&AQ.heap, &fs->aq);
	else if (it && it->due > now)
		*next_due = it->due;
	/* back in: the table holds room for them, they left it just now */
	for (unsigned i = 0; i < nskip; i++) {
		int res = due_heap_add(&AQ.heap, &skip[i]->aq);

		assert(!res);
		(void)res;
	}
	return fs;
}

int64_t backoff_ms(unsigned tries)
{
	int64_t ms = BACKOFF_MIN_MS;

	while (tries-- > 1 && ms < BACKOFF_MAX_MS)
		ms *= 2;
	return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

unsigned attempt_begin(struct fstate *fs, uint64_t size)
{
	ELOCK_HELD();
	unsigned slot = 0;

	fs->arch = ARCH_RUNNING;
	AQ.nrunning++;
	AQ.running_bytes += size;
	while (slot < ARCHIVERS - 1 && AQ.running_fs[slot])
		slot++;
	AQ.running_fs[slot] = fs;
	return slot;
}

struct arch_wait *attempt_end(struct fstate *fs, unsigned slot, uint64_t size, int *resp,
			      int64_t now)
{
	ELOCK_HELD();
	int res = *resp;
	struct arch_wait *w = NULL;
	bool again = fs->arch_again;

	AQ.running_fs[slot] = NULL;
	pthread_cond_broadcast(&AQ.ncond); /* a removal's op may wait for it */
	AQ.nrunning--;
	AQ.running_bytes -= size;
	fs->arch = ARCH_IDLE;
	fs->arch_again = false;
	if (res == ARCH_ROOM && AQ.nrunning && !AQ.stop) {
		/* others' snapshots hold the room: once one ends, not a failure */
		archive_later(fs, now + BUSY_MS);
		return NULL;
	}
	if (res == ARCH_NAMES && !AQ.stop) {
		/*
		 * a name op of its path goes first: looked at again in a while
		 * (a sync applies every op before it asks for the files)
		 */
		archive_later(fs, now + NAMES_MS);
		return NULL;
	}
	if (res == ARCH_ROOM)
		res = *resp = -ENOSPC;
	if (res == ARCH_NAMES)
		res = ARCH_AGAIN;
	if (res == ARCH_AGAIN && !AQ.stop) {
		/* changed while archived, or busy: its waiters wait on */
		S.st.archive_deferred++;
		archive_later(fs, now + (fs->changes || fs->unseen ? BUSY_MS : 0));
		return NULL;
	}
	if (res == ARCH_AGAIN)
		res = *resp = -ESHUTDOWN; /* stopping: its waiters are told, it stays dirty */
	w = fs->awaiters;
	fs->awaiters = NULL;
	if (!res) {
		fs->nohook_ms = 0;
		fs->arch_err = 0;
		fs->arch_tries = 0;
		/* changed again since, asked again: once more */
		if (again && fs->state == META_DIRTY && !AQ.stop)
			archive_later(fs, fs->aq.due);
		return w;
	}
	fs->arch_err = res;
	if (res == -ENOTCONN) {
		/*
		 * No archive hook yet (a mount's first second, or its hook
		 * starting again): not an attempt.  Who asked (archive, sync)
		 * waits for one as a read waits for a fill hook, the mount's
		 * timeout at most (nohook=fail: not at all).
		 */
		if (!fs->nohook_ms)
			fs->nohook_ms = now;
		if (w && !S.cfg.nohook_fail && !AQ.stop && !fs->gone &&
		    now - fs->nohook_ms < (int64_t)(S.cfg.timeout * 1000)) {
			fs->awaiters = w;
			archive_later(fs, now + BACKOFF_MIN_MS);
			return NULL;
		}
		fs->nohook_ms = 0;
		if ((again || S.cfg.writeback_on) && !AQ.stop && !fs->gone)
			archive_later(fs, now + BACKOFF_MIN_MS);
		return w;
	}
	fs->nohook_ms = 0;
	fs->arch_tries++;
	if (res == -ESTALE) {
		elog_warn("inode %llu: conflict: the origin changed under a local change; "
			  "kept, not archived (hsmfsctl resolve)", (unsigned long long)fs->ino);
		S.st.conflicts++;
		fstate_set_flag(fs, META_F_CONFLICT, true, false);
		return w;
	}
	S.st.archive_failed++;
	elog_warn("inode %llu: archive failed: %s (attempt %u)", (unsigned long long)fs->ino,
		  strerror(-res), fs->arch_tries);
	/* the origin will not take it as it is: again only when asked */
	if (res == -EFBIG || res == -EINVAL || res == -ENAMETOOLONG)
		return w;
	if ((again || S.cfg.writeback_on) && !AQ.stop && !fs->gone)
		archive_later(fs, now + backoff_ms(fs->arch_tries));
	return w;
}

bool add_waiter(struct fstate *fs, void (*cont)(void *arg, int res), void *arg)
{
	ELOCK_HELD();
	struct arch_wait *w = malloc(sizeof(*w));

	if (!w)
		return false;
	w->cont = cont;
	w->arg = arg;
	w->next = fs->awaiters;
	fs->awaiters = w;
	return true;
}

bool take_end(uint64_t ino)
{
	ELOCK_HELD();
	bool done = false;

	for (unsigned i = 0; i < AQ.ntakes; i++)
		if (AQ.takes[i].ino == ino) {
			done = AQ.takes[i].done;
			AQ.takes[i] = AQ.takes[--AQ.ntakes];
			break;
		}
	return done;
}

void archive_later(struct fstate *fs, int64_t due)
{
	ELOCK_HELD();
	/* an archiver looks at the queue every ARCH_LOOK_MS: woken only for sooner */
	bool soon;

	/* asked for (hsmfsctl archive, sync): a change meanwhile does not
	 * put it off to its archive_after */
	if (fs->awaiters && fs->arch == ARCH_QUEUED && fs->aq.due < due)
		due = fs->aq.due;
	soon = due < mono_ms() + ARCH_LOOK_MS;
	fs->aq.due = due;
	if (fs->arch == ARCH_RUNNING) {
		fs->arch_again = true;
		return;
	}
	if (fs->arch == ARCH_QUEUED) {
		due_heap_fix(&AQ.heap, &fs->aq);
		if (soon)
			pthread_cond_signal(&AQ.cond);
		return;
	}
	if (due_heap_add(&AQ.heap, &fs->aq)) {
		/* left dirty: a sync or the next change queues it */
		elog_err("out of memory: inode %llu is not queued for its archive",
			 (unsigned long long)fs->ino);
		return;
	}
	fs->arch = ARCH_QUEUED;
	inode_ref(fs->in); /* the queue's: the archiver releases it */
	if (soon)
		pthread_cond_signal(&AQ.cond);
}

int take_begin(uint64_t ino)
{
	ELOCK_HELD();
	if (take_wanted(ino))
		return -EALREADY;
	if (AQ.ntakes == TAKES_MAX)
		return -EAGAIN;
	AQ.takes[AQ.ntakes++] = (struct take){ .ino = ino };
	return 0;
}

bool take_wanted(uint64_t ino)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < AQ.ntakes; i++)
		if (AQ.takes[i].ino == ino)
			return true;
	return false;
}

void take_done(uint64_t ino)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < AQ.ntakes; i++)
		if (AQ.takes[i].ino == ino)
			AQ.takes[i].done = true;
}

void archive_names_wanted(void)
{
	elock();
	AQ.names_wanted = true;
	pthread_cond_broadcast(&AQ.ncond);
	eunlock();
}

void archive_names_kick(void)
{
	elock();
	AQ.names_kick = true;
	pthread_cond_broadcast(&AQ.ncond);
	eunlock();
}

bool archive_ino_running(uint64_t ino)
{
	ELOCK_HELD();
	for (unsigned i = 0; i < ARCHIVERS; i++)
		if (AQ.running_fs[i] && AQ.running_fs[i]->ino == ino)
			return true;
	return false;
}

struct fstate *archive_running(unsigned slot)
{
	ELOCK_HELD();
	return AQ.running_fs[slot];
}

void archive_writeback(struct fstate *fs)
{
	ELOCK_HELD();
	if (!S.cfg.writeback_on || fs->state != META_DIRTY || (fs->flags & META_F_CONFLICT) ||
	    S.stopping)
		return;
	archive_later(fs, mono_ms() + (int64_t)(S.cfg.writeback * 1000));
}
