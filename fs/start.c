/* start.c - start and stop of the engine: events_init(), events_shutdown() */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include "commit.h"
#include "decide.h"
#include "dirs.h"
#include "archive.h"
#include "engine.h"
#include "event.h"
#include "events.h"
#include "fstate.h"
#include "inode.h"
#include "meta.h"
#include "park.h"
#include "route.h"
#include "timer.h"
#include "writeback.h"

int events_init(const struct events_config *cfg)
{
	pthread_condattr_t ca;
	unsigned i;
	uint64_t nctimes = 0;
	int res;

	S.cfg = *cfg;
	E.seq = cfg->seq_base;
	/* a scan, once: is there a change time to show anywhere? */
	if (cfg->meta && !meta_count_ctimes(cfg->meta, &nctimes) && nctimes)
		atomic_store_explicit(&events_any_ctime, true, memory_order_relaxed);
	E.slots = calloc(cfg->max_pending, sizeof(*E.slots));
	if (!E.slots)
		return -ENOMEM;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	for (i = cfg->max_pending; i-- > 0;) {
		pthread_cond_init(&E.slots[i].cond, &ca);
		E.slots[i].stage_fd = -1;
		E.slots[i].free_next = E.free_list;
		E.free_list = &E.slots[i];
	}
	E.park_pool = calloc(cfg->max_pending, sizeof(*E.park_pool));
	if (!E.park_pool)
		return -ENOMEM;
	for (i = cfg->max_pending; i-- > 0;) {
		E.park_pool[i].next = E.park_free;
		E.park_free = &E.park_pool[i];
	}
	pthread_cond_init(&E.slot_cond, &ca);
	pthread_cond_init(&S.wcond, &ca);
	pthread_cond_init(&S.wdone, &ca);
	pthread_cond_init(&S.reads_done, &ca);
	pthread_cond_init(&S.copied, &ca);
	pthread_cond_init(&S.evicted, &ca);
	pthread_cond_init(&E.tcond, &ca);
	pthread_cond_init(&E.room_cond, &ca);
	pthread_cond_init(&E.commit_cond, &ca);
	pthread_condattr_destroy(&ca);
	E.room_tail = &E.room;
	E.commits_tail = &E.commits;
	inode_set_state_destructor(fstate_free);
	if (pthread_create(&S.writer, NULL, writer_main, NULL))
		return -EAGAIN;
	S.writer_running = true;
	if (pthread_create(&E.timer, NULL, timer_main, NULL))
		return -EAGAIN;
	E.timer_running = true;
	if (pthread_create(&E.roomer, NULL, roomer_main, NULL))
		return -EAGAIN;
	E.roomer_running = true;
	stage_refill();
	if (cfg->takeover) {
		elock();
		absent_load(cfg->timeout);
		eunlock();
	}
	res = dirs_init();
	return res ? res : archive_init();
}

void events_shutdown(void)
{
	/* the archive under way finishes (within its event's timeout), the rest waits */
	archive_shutdown();
	elock();
	/* nobody will answer now: pending events fail, parked reads get EIO */
	for (unsigned i = 0; E.slots && i < S.cfg.max_pending; i++) {
		struct event *ev = &E.slots[i];

		if (ev_live(ev) && ev->st != EV_COPYING)
			complete(ev, -EIO);
	}
	eunlock();
	drain_ready();
	elock();
	S.stopping = true;
	pthread_cond_signal(&S.wcond);
	pthread_cond_signal(&E.tcond);
	pthread_cond_signal(&E.room_cond);
	eunlock();
	/* the timer first: what it ends may still go to the room thread */
	if (E.timer_running) {
		pthread_join(E.timer, NULL);
		E.timer_running = false;
	}
	drain_ready();
	if (E.roomer_running) {
		pthread_join(E.roomer, NULL);
		E.roomer_running = false;
	}
	drain_ready(); /* what the room thread's last checks ended */
	dirs_shutdown(); /* the listings allowed are committed first */
	drain_ready();
	if (S.writer_running) {
		pthread_join(S.writer, NULL);
		S.writer_running = false;
	}
	while (S.nstage)
		close(S.stage[--S.nstage]);
	while (S.graves) {
		struct fstate *fs = S.graves;

		S.graves = fs->grave_next;
		fstate_free(fs);
	}
}
