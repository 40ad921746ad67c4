/*
 * tap.h - a minimal TAP producer for unit tests (header-only).
 *
 * ok(cond, fmt, ...) prints one "ok N - ..." / "not ok N - ..." line;
 * tap_done() prints the plan and returns the exit status (non-zero if
 * anything failed).
 */
#ifndef HSMFS_TAP_H
#define HSMFS_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_n, tap_failed;

__attribute__((format(printf, 2, 3))) static int ok(int cond, const char *fmt,
						     ...)
{
	va_list ap;

	printf("%sok %d - ", cond ? "" : "not ", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond)
		tap_failed++;
	return cond;
}

static int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
