/* test-clock.c - the clock module: deadlines and normalization */
#include <time.h>

#include "clock.h"
#include "tap.h"

int main(void)
{
	struct timespec ts = { 5, 900000000L }, d;
	int64_t a, b;

	ts_add(&ts, 1.25);
	ok(ts.tv_sec == 7 && ts.tv_nsec == 150000000L, "ts_add carries into seconds (%lld.%09ld)",
	   (long long)ts.tv_sec, ts.tv_nsec);
	ts = (struct timespec){ 1, 0 };
	ts_add(&ts, 0);
	ok(ts.tv_sec == 1 && ts.tv_nsec == 0, "ts_add of 0 changes nothing");
	mono_after(&d, 0);
	ok(mono_passed(&d), "a deadline 0 s from now has passed");
	mono_after(&d, 3600);
	ok(!mono_passed(&d), "one an hour from now has not");
	ok(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L, "mono_after normalizes");
	a = mono_ms();
	mono_now(&ts);
	b = mono_ms();
	ok(a <= b && (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 >= a &&
		   (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 <= b,
	   "mono_ms and mono_now read the same clock");
	a = mono_ms();
	{
		double t = mono_s();

		b = mono_ms();
		ok(t * 1000 >= (double)a - 1 && t * 1000 <= (double)b + 1,
		   "mono_s is the same clock in seconds");
	}
	a = now_ms();
	ok(a / 1000 >= (int64_t)time(NULL) - 2 && a / 1000 <= (int64_t)time(NULL),
	   "now_ms is the wall clock in ms");
	return tap_done();
}
