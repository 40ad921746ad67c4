/* supervise.c - see supervise.h */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdlimit.h"
#include "log.h"
#include "ready.h"
#include "supervise.h"

extern char **environ;

static struct {
	char *command, *mountpoint;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool running, stopping;
	bool probe;         /* the next spawn gets HSMFS_PROBE=1 */
	pid_t pid;
	char **envp;        /* environ, PATH led by the daemon's own directory */
	char **probe_envp;  /* envp and HSMFS_PROBE=1 */
	void (*refused)(void);
	char last[512];     /* the hook's last line of output, under lock */
} sup = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/*
 * Spawn the hook with its output on a pipe; returns the read end.  The
 * hook dies with the daemon: PR_SET_PDEATHSIG (SIGKILL) is tied to this
 * thread, which lives as long as the supervision; a daemon killed with
 * -9 takes its hook along, so an orphan never keeps fetching into the
 * store (its staging files could not reach a later mount's files
 * anyway).  Only async-signal-safe calls between fork and exec.
 */
static int spawn(pid_t *ret_pid, char **envp)
{
	char *argv[] = { "/bin/sh", "-c", NULL, "hsmfs-hook", sup.mountpoint, NULL };
	pid_t parent = getpid(), pid;
	char *script;
	int p[2], nul;

	if (asprintf(&script, "exec %s \"$1\"", sup.command) < 0)
		return -ENOMEM;
	argv[2] = script;
	if (pipe2(p, O_CLOEXEC) < 0) {
		free(script);
		return -errno;
	}
	nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pid = fork();
	if (pid == 0) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(127); /* the daemon is gone already */
		setpgid(0, 0); /* a group of its own: its children go with it */
		fdlimit_child(); /* the soft limit the daemon was given */
		if (dup2(p[1], STDOUT_FILENO) < 0 || dup2(p[1], STDERR_FILENO) < 0 ||
		    (nul >= 0 && dup2(nul, STDIN_FILENO) < 0))
			_exit(127);
		execve("/bin/sh", argv, envp);
		_exit(127);
	}
	if (nul >= 0)
		close(nul);
	close(p[1]);
	free(script);
	if (pid < 0) {
		int res = -errno;

		close(p[0]);
		return res;
	}
	*ret_pid = pid;
	return p[0];
}

/* A line of the hook's output: logged, and kept as its last word. */
static void hook_line(const char *line)
{
	log_info("hook: %s", line);
	if (!line[0])
		return;
	pthread_mutex_lock(&sup.lock);
	snprintf(sup.last, sizeof(sup.last), "%.*s", (int)sizeof(sup.last) - 1, line);
	pthread_mutex_unlock(&sup.lock);
}

static void *supervise_main(void *arg)
{
	double backoff = 0.1;

	pthread_mutex_lock(&sup.lock);
	while (!sup.stopping) {
		char buf[4096], line[4096];
		size_t used = 0;
		double started = mono_s();
		pid_t pid = 0;
		int status, fd;

		bool probing = sup.probe;

		sup.probe = false; /* the first run's alone */
		pthread_mutex_unlock(&sup.lock);
		fd = spawn(&pid, probing ? sup.probe_envp : sup.envp);
		pthread_mutex_lock(&sup.lock);
		if (fd < 0) {
			log_err("hook '%s' cannot start: %s", sup.command, strerror(-fd));
			ready_hook_exited();
		} else {
			sup.pid = pid;
			log_info("hook '%s' started (pid %d)", sup.command, (int)pid);
			ready_hook_started(pid);
			pthread_mutex_unlock(&sup.lock);
			for (;;) {
				ssize_t n = read(fd, buf, sizeof(buf));

				if (n <= 0)
					break;
				for (ssize_t i = 0; i < n; i++) {
					if (buf[i] == '\n' || used == sizeof(line) - 1) {
						line[used] = '\0';
						hook_line(line);
						used = 0;
					}
					if (buf[i] != '\n')
						line[used++] = buf[i];
				}
			}
			if (used) { /* a last line with no newline */
				line[used] = '\0';
				hook_line(line);
			}
			close(fd);
			waitpid(pid, &status, 0);
			if (probing && WIFEXITED(status) &&
			    WEXITSTATUS(status) == HSMFS_HOOK_REFUSED) {
				char why[sizeof(sup.last) + 64];

				pthread_mutex_lock(&sup.lock);
				snprintf(why, sizeof(why), "the hook refused the mount: %s",
					 sup.last[0] ? sup.last : "it gave no reason");
				pthread_mutex_unlock(&sup.lock);
				if (ready_hook_refused(why)) {
					log_err("%s", why);
					if (sup.refused)
						sup.refused();
					pthread_mutex_lock(&sup.lock);
					sup.pid = 0;
					break; /* not started again: the mount ends */
				}
			}
			ready_hook_exited();
			pthread_mutex_lock(&sup.lock);
			sup.pid = 0;
			if (sup.stopping)
				break;
			if (WIFEXITED(status))
				log_warn("hook '%s' exited with status %d", sup.command,
					 WEXITSTATUS(status));
			else
				log_warn("hook '%s' killed by signal %d", sup.command,
					 WTERMSIG(status));
		}
		if (mono_s() - started > 60)
			backoff = 0.1;
		struct timespec until;

		clock_gettime(CLOCK_REALTIME, &until); /* sup.cond's clock */
		ts_add(&until, backoff);
		while (!sup.stopping &&
		       pthread_cond_timedwait(&sup.cond, &sup.lock, &until) != ETIMEDOUT)
			;
		backoff = backoff * 2 > 30 ? 30 : backoff * 2;
	}
	pthread_mutex_unlock(&sup.lock);
	return NULL;
}

/* The directory of the running hsmfs into dir (PATH_MAX): 0, or -1. */
static int own_dir(char *dir)
{
	ssize_t n = readlink("/proc/self/exe", dir, PATH_MAX - 1);
	char *slash;

	if (n <= 0)
		return -1;
	dir[n] = '\0';
	slash = strrchr(dir, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	return 0;
}

/*
 * The hook's environment: the daemon's, with the daemon's own directory
 * first in PATH, so that hook=hsmfs-http finds the hsmfs-http installed
 * (or built) beside this hsmfs before any other.  NULL: no memory.
 */
static char **hook_environ(void)
{
	char exe[PATH_MAX], **envp, *path = NULL;
	const char *old = getenv("PATH");
	size_t count = 0, k = 0;

	if (own_dir(exe))
		return environ;
	if (asprintf(&path, "PATH=%s:%s", exe, old ? old : "/usr/local/bin:/usr/bin:/bin") < 0)
		return NULL;
	while (environ[count])
		count++;
	envp = calloc(count + 2, sizeof(*envp));
	if (!envp) {
		free(path);
		return NULL;
	}
	envp[k++] = path;
	for (size_t i = 0; i < count; i++)
		if (strncmp(environ[i], "PATH=", 5) && strncmp(environ[i], "HSMFS_PROBE=", 12))
			envp[k++] = environ[i]; /* HSMFS_PROBE: the first run's alone */
	return envp;
}

int supervise_check(const char *command, char *err, size_t errlen)
{
	char prog[PATH_MAX], dir[PATH_MAX], cand[2 * PATH_MAX + 2];
	const char *path = getenv("PATH"), *p, *end;
	size_t n = strcspn(command, " \t");
	bool found = false, plain = false;

	if (!n || n >= sizeof(prog) || command[strcspn(command, "'\"\\$`;&|<>(){}*?[~=")] ||
	    strchr(command, '\n'))
		return 0; /* the shell's to read */
	memcpy(prog, command, n);
	prog[n] = '\0';
	/* a builtin or keyword of the shell: the shell's to run */
	for (const char *const *b = (const char *const[]){ "exec", "command", "eval", ".",
							  "source", "if", "for", "while",
							  "until", "case", "time", "!", NULL };
	     *b; b++)
		if (!strcmp(prog, *b))
			return 0;
	if (strchr(prog, '/')) {
		found = !access(prog, F_OK);
		plain = found && access(prog, X_OK);
	} else {
		/* as hook_environ() orders them: beside hsmfs, then PATH */
		bool have_dir = !own_dir(dir);

		if (have_dir) {
			snprintf(cand, sizeof(cand), "%s/%s", dir, prog);
			found = !access(cand, X_OK);
		}
		for (p = path ? path : "/usr/local/bin:/usr/bin:/bin"; !found && *p; p = end) {
			end = strchr(p, ':');
			if (!end)
				end = p + strlen(p);
			if (end > p) {
				snprintf(cand, sizeof(cand), "%.*s/%s", (int)(end - p), p, prog);
				found = !access(cand, X_OK);
			}
			if (*end == ':')
				end++;
		}
	}
	if (!found) {
		snprintf(err, errlen, "hook command '%s' not found (%s): check -o hook=",
			 prog, strchr(prog, '/') ? "no such file" :
			 "looked beside hsmfs and in PATH");
		return -ENOENT;
	}
	if (plain) {
		snprintf(err, errlen, "hook command '%s' is not executable: check -o hook= "
			 "or chmod +x it", prog);
		return -EACCES;
	}
	return 0;
}

/* envp and HSMFS_PROBE=1, or NULL: no memory.  Shares envp's strings. */
static char **probe_environ(char **envp)
{
	size_t count = 0;
	char **out;

	while (envp[count])
		count++;
	out = calloc(count + 2, sizeof(*out));
	if (!out)
		return NULL;
	out[0] = "HSMFS_PROBE=1";
	for (size_t i = 0; i < count; i++)
		out[i + 1] = envp[i];
	return out;
}

int supervise_start(const char *command, const char *mountpoint, bool probe,
		    void (*refused)(void))
{
	sup.command = strdup(command);
	sup.mountpoint = strdup(mountpoint);
	sup.envp = hook_environ();
	sup.probe_envp = sup.envp ? probe_environ(sup.envp) : NULL;
	sup.probe = probe;
	sup.refused = refused;
	if (!sup.command || !sup.mountpoint || !sup.envp || !sup.probe_envp)
		return -ENOMEM;
	if (pthread_create(&sup.thread, NULL, supervise_main, NULL))
		return -EAGAIN;
	sup.running = true;
	return 0;
}

void supervise_last_line(char *buf, size_t size)
{
	pthread_mutex_lock(&sup.lock);
	snprintf(buf, size, "%s", sup.last);
	pthread_mutex_unlock(&sup.lock);
}

void supervise_stop(void)
{
	if (sup.running) {
		pthread_mutex_lock(&sup.lock);
		sup.stopping = true;
		if (sup.pid > 0)
			kill(-sup.pid, SIGTERM); /* its group: what it started too */
		pthread_cond_signal(&sup.cond);
		pthread_mutex_unlock(&sup.lock);
		pthread_join(sup.thread, NULL);
		sup.running = false;
	}
	free(sup.command);
	free(sup.mountpoint);
	sup.command = sup.mountpoint = NULL;
	free(sup.probe_envp); /* its strings are envp's and a literal */
	sup.probe_envp = NULL;
	if (sup.envp && sup.envp != environ) {
		free(sup.envp[0]); /* the PATH= string; the rest are environ's */
		free(sup.envp);
	}
	sup.envp = NULL;
}
