/*
 * ctl.h - what hsmfsctl's command files (cmd/ctl/) share: the exit codes,
 * the helpers of common.c, and each file's commands, which main() finds
 * in its table (cmd/hsmfsctl.c).
 *
 * A command is called as cmd_NAME(argc, argv) with argv[0] its own name
 * and argv[1..argc) the words after it, as many as its table entry
 * allows (main() told a wrong count already; the rest a command checks
 * itself).  It returns an exit code, having said why on standard error
 * when that is not 0.  Messages begin "hsmfsctl: ".
 *
 * Exit codes: 0 success; 1 usage; 2 bad input (manifest); 3 the store or
 * mount cannot be used; 4 an operation failed part way (or was not done
 * within the time it was given).
 */
#ifndef HSMFS_CTL_H
#define HSMFS_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

enum { X_OK_ = 0, X_USAGE = 1, X_INPUT = 2, X_STORE = 3, X_PARTIAL = 4 };

/* ------------------------------------------------------------ common.c */

/*
 * The hsmfs mount path is on: its root in ret_mnt (a real path), and
 * path's own path below it in ret_rel ("" or ending in '/').  0, or -1:
 * not on an hsmfs mount.
 */
int mount_of(const char *path, char *ret_mnt, size_t mlen, char *ret_rel, size_t rlen);
ssize_t mount_xattr(const char *mnt, const char *name, char *buf, size_t size);
/*
 * A request of path's mount failed (errno): if path is on a
 * backend=fanotify mount (the store bound there: its state directory
 * holds the control socket), say so in one line, unless a refusal of
 * its daemon was said already, and return true.
 */
bool fanotify_mount_said(const char *path);
/*
 * getxattr(2), lgetxattr(2), setxattr(2), lsetxattr(2) of the mount's
 * user.hsmfs.* attributes (hsmfs(8)): on a backend=fanotify mount, whose
 * daemon no extended attribute reaches, through its control socket
 * (../lib/ctlsock.h); what that daemon does not do yet is said once on
 * standard error (errno ENOSYS).  Any other name, or another mount: the
 * system call.
 */
ssize_t hgetxattr(const char *path, const char *name, void *buf, size_t size);
ssize_t hlgetxattr(const char *path, const char *name, void *buf, size_t size);
int hsetxattr(const char *path, const char *name, const void *value, size_t len, int flags);
int hlsetxattr(const char *path, const char *name, const void *value, size_t len, int flags);
/*
 * Is name, in directory dir, the state directory of a backend=fanotify
 * mount's store, which the bind shows (its files are the daemon's, not
 * the mount's): walks skip it.
 */
bool state_dir_shown(const char *dir, const char *name);
/* s quoted and escaped as a JSON string, on standard output */
void json_str(const char *s);
long long json_num(const char *obj, const char *key);
/* v bytes for a person: "512 B", "1.5 MiB" */
void human(char *buf, size_t n, long long v);
void tty_progress(bool end, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The progress line wiped: before a message, or at the end. */
#define tty_progress_end() tty_progress(true, "%s", "")

/* ------------------------------------------------------------- hooks.c */

/*
 * One line of user.hsmfs.hooks: name, pid, kind, events, pending,
 * answered, denied, timed out, latency p50 and p99 (microseconds),
 * subtree.
 */
#define HOOK_FIELDS 11
struct hook_line {
	const char *name, *pid, *kind, *events, *pending, *answered, *denied, *timeouts,
		*p50_us, *p99_us, *subtree;
};

int hooks_split(char *buf, struct hook_line **ret_lines);
int cmd_hooks(int argc, char **argv);

/* ------------------------------------------------------------- stats.c */

struct prom_counter;

void hook_counters(const char *mnt, char *buf, size_t size);
const char *counter_next(const char *l, struct prom_counter *c);
int cmd_stats(int argc, char **argv);

/* ------------------------------------------------------------ import.c */

struct import_run;

int import_apply(struct import_run *r);
int cmd_import(int argc, char **argv);

/* ----------------------------------------------------------- archive.c */

/* archive, resolve, sync, unmount, and status -s STORE */
int cmd_archive(int argc, char **argv);
int cmd_resolve(int argc, char **argv);
int cmd_sync(int argc, char **argv);
int cmd_unmount(int argc, char **argv);
int cmd_status_store(const char *store);

/* ------------------------------------------------ the other commands */

int cmd_status(int argc, char **argv);                  /* status.c */
int cmd_act(int argc, char **argv);                     /* act.c: evict, pin, unpin, prefetch */
int cmd_watch(int argc, char **argv);                   /* watch.c */
int cmd_refresh(int argc, char **argv);                 /* refresh.c */
int cmd_restart(int argc, char **argv);                 /* restart.c */
int cmd_set_origin(int argc, char **argv);              /* set-origin.c */
int cmd_doctor(int argc, char **argv);                  /* doctor.c */

#endif
