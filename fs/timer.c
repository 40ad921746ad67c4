/* timer.c - the engine's clock thread: see timer.h */
#include <errno.h>
#include <pthread.h>
#include "sync.h"
#include "commit.h"
#include "engine.h"
#include "event.h"
#include "fstate.h"
#include "park.h"
#include "route.h"
#include "timer.h"

/*
 * A sequential reader's window (fill_ahead() from readahead.c, up to
 * RA_MAX) is the reader's: when the file's last open has been closed for
 * CLOSED_AHEAD_MS (a reopen for the next request keeps it), its fills
 * that nobody waits for and the fill hook has not finished are
 * cancelled (CANCEL reason CLOSED), so that a reader that stopped does
 * not leave its window on the link.  The rest of a read's chunk
 * (first_fill) and the mount's prefetch of the file are a chunk or
 * less, and go on; so does a fill whose hook has allowed (it waits for
 * watchers, then commits) or one being committed.  A later reader asks
 * again for what is missing.
 */

/*
 * From the timer: is ev of a window left CLOSED_AHEAD_MS ago?  A stream
 * event is detached from its start; closed_at is 0 while the file is
 * open (an open that has counted itself but not yet cleared it may lose
 * its window: it asks again).  S.lock held.
 */
static bool window_left(const struct event *ev, int64_t now)
{
	ELOCK_HELD();
	return ev->stream && ev->fs->closed_at && now - ev->fs->closed_at >= CLOSED_AHEAD_MS &&
	       !ev->waiters && (ev->st == EV_QUEUED || ev->st == EV_SENT);
}

static void cancel_window(struct event *ev)
{
	ELOCK_HELD();
	send_cancel(ev, HSMFS_CANCEL_CLOSED);
	S.st.closed_ahead++;
	complete(ev, -ECANCELED);
}

/*
 * The engine's clock: every TICK_MS it times out events nobody waits
 * for (readahead) as well as those waited for, sends again what full
 * sockets refused, and offers queued fills to the fill hooks again.
 */
void *timer_main(void *arg)
{
	struct timespec ts;
	bool exiting;
	int64_t now;

	elock();
	mono_after(&ts, TICK_MS / 1000.0);
	while (!S.stopping) {
		/* a wish for staging files made while it worked is not lost */
		if (!E.stage_wanted)
			pthread_cond_timedwait(&E.tcond, &S.lock, &ts);
		if (S.stopping)
			break;
		if (E.stage_wanted) {
			/* the pool runs low: fill it (and hand out what a failed one left queued) */
			E.stage_wanted = false;
			eunlock();
			stage_refill();
			elock();
			if (E.queue)
				redispatch_queue();
		}
		if (!mono_passed(&ts))
			continue;
		mono_after(&ts, TICK_MS / 1000.0);
		archive_interrupts();
		/* unmounted: nobody reads a request's answer; its wait ends now */
		exiting = S.cfg.front.exiting && S.cfg.front.exiting();
		now = mono_ms();
		for (unsigned i = 0; i < S.cfg.max_pending; i++) {
			struct event *ev = &E.slots[i];

			if (!ev_live(ev))
				continue;
			/*
			 * An archive's answer is the daemon's own to read: the
			 * upload under way finishes (archive_shutdown() waits
			 * for it), within its timeout like any other.
			 */
			if (exiting && ev->st != EV_COPYING && ev->type != HSMFS_EV_ARCHIVE &&
			    ev->type != HSMFS_EV_ARCHIVE_NAME) {
				complete(ev, -EIO);
				continue;
			}
			if (ev->st != EV_COPYING && mono_passed(&ev->deadline)) {
				expire(ev);
				continue;
			}
			if (window_left(ev, now)) {
				cancel_window(ev);
				continue;
			}
			resend(ev);
			if (ev->parked) {
				ev->waiters++; /* not released while we look */
				unpark_interrupted(ev);
				ev->waiters--;
				put_event(ev);
			}
		}
		if (E.queue)
			redispatch_queue();
		absent_expire();
		if (E.ready || S.nstage < STAGE_POOL / 2) {
			eunlock();
			drain_ready();
			stage_refill();
			elock();
		}
	}
	eunlock();
	return NULL;
}
