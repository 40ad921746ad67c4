/*
 * clock.h - the daemon's one clock: wall-clock milliseconds for times
 * that are stored or shown, monotonic time for waits, deadlines and
 * durations.
 *
 * Pure module: no I/O, no locks, no state; every function reads the
 * clock it names and may be called from any thread.
 *   now_ms()       CLOCK_REALTIME_COARSE, ms since the epoch: the time
 *                  of use kept in the database (atime), listing times
 *   mono_ms()      CLOCK_MONOTONIC, ms: short intervals kept as numbers
 *   mono_s()       CLOCK_MONOTONIC, seconds: rates and back-offs
 *   mono_now()     CLOCK_MONOTONIC as a timespec: deadlines for
 *   mono_after()   pthread_cond_timedwait() on a condition made with
 *   mono_passed()  pthread_condattr_setclock(CLOCK_MONOTONIC)
 * A timespec these functions return has 0 <= tv_nsec < 1000000000.
 */
#ifndef HSMFS_CLOCK_H
#define HSMFS_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

int64_t now_ms(void);
int64_t mono_ms(void);
double mono_s(void);
void mono_now(struct timespec *ret);
/* *ret: seconds (>= 0) from now, CLOCK_MONOTONIC. */
void mono_after(struct timespec *ret, double seconds);
/* Is the CLOCK_MONOTONIC deadline ts now or past? */
bool mono_passed(const struct timespec *ts);
/* Move ts, normalized, seconds (>= 0) later, on whichever clock it is of. */
void ts_add(struct timespec *ts, double seconds);

#endif
