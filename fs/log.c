/* log.c - see log.h */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"

static enum log_level max_level = LOG_LVL_INFO;
static bool use_syslog;

void log_set_level(enum log_level max)
{
	max_level = max;
}

void log_to_syslog(const char *ident)
{
	openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	use_syslog = true;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	char buf[1024];
	va_list ap;
	int n;

	if (lvl > max_level)
		return;
	va_start(ap, fmt);
	if (use_syslog) {
		vsyslog(prio[lvl], fmt, ap);
		va_end(ap);
		return;
	}
	n = snprintf(buf, sizeof(buf), "hsmfs: ");
	n += vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	(void)!write(STDERR_FILENO, buf, n);
}
