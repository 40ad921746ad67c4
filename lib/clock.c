/* clock.c - see clock.h */
#include "clock.h"

int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void mono_now(struct timespec *ret)
{
	clock_gettime(CLOCK_MONOTONIC, ret);
}

void ts_add(struct timespec *ts, double seconds)
{
	ts->tv_sec += (time_t)seconds;
	ts->tv_nsec += (long)((seconds - (time_t)seconds) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

void mono_after(struct timespec *ret, double seconds)
{
	clock_gettime(CLOCK_MONOTONIC, ret);
	ts_add(ret, seconds);
}

bool mono_passed(const struct timespec *ts)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > ts->tv_sec ||
	       (now.tv_sec == ts->tv_sec && now.tv_nsec >= ts->tv_nsec);
}
