/*
 * timer.h - the engine's clock thread (timer.c): expiries, resends,
 * closed readers' windows.
 */
#ifndef HSMFS_TIMER_H
#define HSMFS_TIMER_H

#include <stdbool.h>

struct fstate;

/* The timer thread (started by events_init). */
void *timer_main(void *arg);
/* The file's last open closed (closed) or it was opened again.  E.lock held. */
void ahead_closed(struct fstate *fs, bool closed);

#endif
