/*
 * timer.h - the engine's clock thread (timer.c): expiries, resends,
 * closed readers' windows.
 */
#ifndef HSMFS_TIMER_H
#define HSMFS_TIMER_H

/* The timer thread (started by events_init). */
void *timer_main(void *arg);

#endif
