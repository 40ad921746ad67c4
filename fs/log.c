/* log.c - see log.h */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "lockcheck.h"
#include "log.h"

static enum log_level max_level = LOG_LVL_INFO;
static char mount_tag[256];      /* "MOUNTPOINT: ", once known */
static bool use_syslog;
static int file_dir = -1, file_fd = -1; /* no syslog: file_name in file_dir */
static char file_name[256] = LOG_FILE;
static bool file_chosen;         /* log=: neither syslog nor the store's file */
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;

void log_set_level(enum log_level max)
{
	max_level = max;
}

void log_set_mount(const char *mountpoint)
{
	snprintf(mount_tag, sizeof(mount_tag), "%s: ", mountpoint);
}

int log_to_path(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[4096];
	int dfd, fd;

	if (!slash || slash[1] == '\0' || strlen(slash + 1) >= sizeof(file_name) ||
	    (size_t)(slash - path) >= sizeof(dir))
		return -EINVAL; /* an absolute path to a file (main.c makes it so) */
	snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	fd = openat(dfd, slash + 1, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0) {
		int res = -errno;

		close(dfd);
		return res;
	}
	if (file_fd >= 0)
		close(file_fd);
	if (file_chosen && file_dir >= 0)
		close(file_dir); /* ours (the store's state directory is borrowed) */
	file_dir = dfd;
	file_fd = fd;
	snprintf(file_name, sizeof(file_name), "%s", slash + 1);
	file_chosen = true;
	use_syslog = false;
	return 0;
}

void log_to_syslog(const char *ident, int state_fd)
{
	if (file_chosen)
		return; /* log= wins */
	if (access("/dev/log", W_OK) < 0 && state_fd >= 0) {
		file_dir = state_fd;
		file_fd = openat(state_fd, LOG_FILE, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
				 0600);
		if (file_fd >= 0)
			return;
	}
	openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	use_syslog = true;
}

/* One line to LOG_FILE, turned into LOG_FILE.1 once it is too large. */
static void to_file(const char *line, int n)
{
	struct stat st;

	pthread_mutex_lock(&file_lock);
	if (fstat(file_fd, &st) == 0 && st.st_size + n > (off_t)LOG_FILE_MAX) {
		int fd;

		char old[sizeof(file_name) + 2];

		snprintf(old, sizeof(old), "%s.1", file_name);
		renameat(file_dir, file_name, file_dir, old);
		fd = openat(file_dir, file_name, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC |
							 O_CLOEXEC, 0600);
		if (fd >= 0) {
			close(file_fd);
			file_fd = fd;
		}
	}
	(void)!write(file_fd, line, n);
	pthread_mutex_unlock(&file_lock);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	char buf[1024];
	va_list ap;
	int n;

	if (lvl > max_level)
		return;
	may_block("a log line");
	va_start(ap, fmt);
	if (use_syslog) {
		/* which mount: a machine has several */
		vsnprintf(buf, sizeof(buf), fmt, ap);
		va_end(ap);
		syslog(prio[lvl], "%s%s", mount_tag, buf);
		return;
	}
	if (file_fd >= 0) {
		time_t t = time(NULL);
		struct tm tm;

		n = (int)strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S ", localtime_r(&t, &tm));
		n += snprintf(buf + n, sizeof(buf) - n, "hsmfs[%d]: %s", (int)getpid(), mount_tag);
	} else {
		n = snprintf(buf, sizeof(buf), "hsmfs: ");
	}
	n += vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	if (file_fd >= 0)
		to_file(buf, n);
	else
		(void)!write(STDERR_FILENO, buf, n);
}
