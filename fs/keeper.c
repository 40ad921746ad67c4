/* keeper.c - see keeper.h */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fan-kernel.h"
#include "fan.h"
#include "keeper.h"
#include "log.h"
#include "ops-io.h"
#include "saved.h"

#define ENV_FDS "HSMFS_KEEPER"
#define ENV_MNT "HSMFS_KEEPER_MNT"
#define ENV_SYSLOG "HSMFS_KEEPER_SYSLOG"

static sigset_t old_mask;
static pid_t keeper_pid;

/* In the child: its own signals, and its end with the keeper's. */
static void child_setup(const struct keeper_args *a)
{
	(void)a;
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	/* the keeper gone, the mount ends, as a daemon's death ended it without one */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != keeper_pid)
		_exit(5); /* it died before the line above */
}

static pid_t spawn(const struct keeper_args *a, bool exec_it, const char *exe)
{
	pid_t pid = fork();

	if (pid < 0) {
		log_err("keeper: cannot start a daemon: %s", strerror(errno));
		return -1;
	}
	if (pid > 0)
		return pid;
	child_setup(a);
	if (!exec_it)
		return 0;
	{
		/*
		 * kept across the exec, for the daemon only: the first one,
		 * not exec'd, keeps them close-on-exec, and no hook it starts
		 * holds the mount or the groups
		 */
		int fds[4] = { a->fuse_fd, a->lock_fd, a->saved_fd, a->notify_fd };
		char v[64];

		for (int i = 0; i < 4; i++)
			if (fds[i] >= 0)
				fcntl(fds[i], F_SETFD, 0);

		snprintf(v, sizeof(v), "%d,%d,%d,%d", a->fuse_fd, a->lock_fd, a->saved_fd,
			 a->notify_fd);
		setenv(ENV_FDS, v, 1);
		setenv(ENV_MNT, a->mnt, 1);
		if (a->syslog)
			setenv(ENV_SYSLOG, "1", 1);
		/*
		 * A test's crash happens once (fault.h); HSMFS_CRASH_TAKEOVER=NAME
		 * crashes the first daemon started here at its takeover step NAME.
		 */
		unsetenv("HSMFS_CRASH_AT");
		if (getenv("HSMFS_CRASH_TAKEOVER")) {
			char at[80];

			snprintf(at, sizeof(at), "%s:1", getenv("HSMFS_CRASH_TAKEOVER"));
			setenv("HSMFS_CRASH_AT", at, 1);
			unsetenv("HSMFS_CRASH_TAKEOVER");
		}
		execv(exe, a->argv);
		log_err("keeper: cannot run '%s': %s", exe, strerror(errno));
		_exit(127);
	}
}

static void describe(int status, char *buf, size_t n)
{
	if (WIFSIGNALED(status))
		snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
}

/* Is the kernel's connection still there (not unmounted, not aborted)? */
static bool connected(const struct keeper_args *a)
{
	struct pollfd p = { .fd = a->fuse_fd };

	if (a->fanotify)
		return fan_still_mounted();
	return !(poll(&p, 1, 0) == 1 && (p.revents & POLLERR));
}

/* clean: the last daemon ended as a mount ends (exit 0, or KEEPER_STOP) */
static void finish(const struct keeper_args *a, int rc, bool clean)
{
	if (a->fanotify)
		fan_keeper_end(clean); /* unbinds, denies what is left, closes the group */
	else
		fuse_session_unmount(a->se); /* closes the descriptor first: the
					      * kernel then ends the connection */
	_exit(rc);
}

void keeper_start(const struct keeper_args *a)
{
	sigset_t set;
	char exe[PATH_MAX];
	ssize_t n;
	pid_t pid;
	unsigned quick = 0;
	bool stopping = false;
	int64_t started;

	/* the binary by its path: after an upgrade, the one installed now */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	if (n > 10 && !strcmp(exe + n - 10, " (deleted)"))
		exe[n - 10] = '\0';
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, &old_mask);
	started = mono_ms();
	keeper_pid = getpid();
	saved_head()->kept = 1;
	saved_head()->keeper_pid = (uint32_t)keeper_pid;
	pid = spawn(a, false, NULL);
	if (pid == 0)
		return; /* the first daemon: main() goes on */
	if (pid < 0)
		finish(a, 5, true);
	for (int i = 0; i < 2; i++)
		if (a->close_fds[i] >= 0)
			close(a->close_fds[i]);
	saved_daemon_started((uint32_t)pid);
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&set, &si), status;
		pid_t w;
		char why[96];

		if (sig < 0)
			continue;
		if (sig != SIGCHLD) {
			stopping = true;
			kill(pid, SIGTERM);
			continue;
		}
		w = waitpid(pid, &status, WNOHANG);
		if (w != pid)
			continue;
		if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 ||
					  WEXITSTATUS(status) == KEEPER_STOP))
			finish(a, WEXITSTATUS(status), true);
		describe(status, why, sizeof(why));
		if (!connected(a)) {
			/* a fanotify mount is bound by its daemon, after the tree's walk */
			log_err("keeper: the daemon (pid %d) %s; %s", (int)pid, why,
				a->fanotify && !saved_head()->fan_mnt_id ?
					"the mount fails: the store was not bound yet" :
					"the mount is gone already");
			finish(a, WIFEXITED(status) ? WEXITSTATUS(status) : 5, false);
		}
		if (stopping) {
			log_err("keeper: the daemon (pid %d) %s while stopping", (int)pid, why);
			finish(a, WIFEXITED(status) ? WEXITSTATUS(status) : 5, false);
		}
		if (!(WIFEXITED(status) && WEXITSTATUS(status) == KEEPER_HANDOVER)) {
			if (!a->fanotify && !ops_io_can_resend()) {
				log_err("keeper: the daemon (pid %d) %s; this kernel cannot resend what it was asked (FUSE_HAS_RESEND, Linux 6.9): the mount ends",
					(int)pid, why);
				finish(a, WIFEXITED(status) ? WEXITSTATUS(status) : 5, false);
			}
			quick = mono_ms() - started < KEEPER_QUICK_S * 1000 ? quick + 1 : 0;
			if (quick >= 5) {
				log_err("keeper: the daemon (pid %d) %s, the fifth within %d s of its start: giving up, the mount ends",
					(int)pid, why, KEEPER_QUICK_S);
				finish(a, WIFEXITED(status) ? WEXITSTATUS(status) : 5, false);
			}
			log_err("keeper: the daemon (pid %d) %s; starting another", (int)pid, why);
		} else {
			saved_head()->handovers++;
			log_info("keeper: the daemon (pid %d) handed over; starting %s", (int)pid, exe);
		}
		saved_head()->died_ms = mono_ms();
		saved_head()->last_status = status;
		saved_head()->restarts++;
		started = mono_ms();
		pid = spawn(a, true, exe);
		unsetenv("HSMFS_CRASH_TAKEOVER"); /* the first restart's only */
		if (pid < 0)
			finish(a, 5, false);
		saved_daemon_started((uint32_t)pid);
	}
}

bool keeper_inherited(int *fuse_fd, int *notify_fd, int *lock_fd, int *saved_fd,
		      const char **mnt, bool *syslog)
{
	const char *v = getenv(ENV_FDS), *m = getenv(ENV_MNT);
	int fds[4] = { -1, -1, -1, -1 };

	/*
	 * three numbers: a keeper of a build before backend=fanotify's (its
	 * region's layout is another: saved_open_region() refuses it)
	 */
	if (!v || !m || sscanf(v, "%d,%d,%d,%d", &fds[0], &fds[1], &fds[2], &fds[3]) < 3)
		return false;
	*mnt = strdup(m);
	*syslog = getenv(ENV_SYSLOG) != NULL;
	/* not for what this daemon starts (hooks) */
	unsetenv(ENV_FDS);
	unsetenv(ENV_MNT);
	unsetenv(ENV_SYSLOG);
	for (int i = 0; i < 4; i++)
		if (fds[i] >= 0)
			fcntl(fds[i], F_SETFD, FD_CLOEXEC);
	*fuse_fd = fds[0];
	*notify_fd = fds[3];
	*lock_fd = fds[1];
	*saved_fd = fds[2];
	return *mnt != NULL;
}
