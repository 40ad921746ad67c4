/*
 * log.h - the daemon's one log sink.
 *
 * Before daemonizing, messages go to stderr prefixed "hsmfs: ".  After
 * log_to_syslog(), they go to syslog(3) with the same text, led by the
 * mountpoint once log_set_mount() gave it; on a machine
 * without a syslog socket (/dev/log), to LOG_FILE in the store's state
 * directory instead, with a time, kept under LOG_FILE_MAX bytes by
 * turning it into LOG_FILE.1 (one old file kept).  Only the
 * layer that decides what to do about an error logs it; pure modules
 * never call this.  Thread-safe: each call is one write(2) or one
 * syslog(3) call.
 */
#ifndef HSMFS_LOG_H
#define HSMFS_LOG_H

#include <stdbool.h>

enum log_level { LOG_LVL_ERR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_set_level(enum log_level max);
#define LOG_FILE "hsmfs.log"
#define LOG_FILE_MAX (1u << 20)

/* Name the mount in every line to syslog or LOG_FILE from now on (copied). */
void log_set_mount(const char *mountpoint);
/*
 * -o log=PATH (absolute): every line goes there from now on, with a
 * time, kept under LOG_FILE_MAX bytes as LOG_FILE is (PATH.1); syslog
 * and the store's file are not used.  0 or -errno.
 */
int log_to_path(const char *path);
/* state_fd: the directory for LOG_FILE when there is no syslog (borrowed). */
void log_to_syslog(const char *ident, int state_fd);
void log_msg(enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_LVL_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
