/*
 * ready.h - when the mount is ready: the parent of a daemonized hsmfs
 * exits 0 (so mount(8) returns) and --ready-fd gets "ready\n".
 *
 * The mount is ready once FUSE INIT is answered (ready_live()) and, with
 * hook=, once the supervised hook has joined: a HELLO answered from a
 * process in the hook's process group (ready_hook_joined()), or the hook
 * exited before that (ready_hook_exited()), or the bound given at
 * ready_init() (the mount's timeout=) passed since INIT, whichever comes
 * first.  A first look at a fresh zero-setup mount so finds its hook
 * there and asks PRE_LOOKUP for one name, rather than listing the
 * directory because no hook was connected yet (dirs.c); a first read
 * does not wait for the hook to start.
 *
 * A hook may join before its spawn is recorded (the child runs first):
 * the process groups of the last few joiners are kept and looked at when
 * the spawn is.
 *
 * A mount can also fail here: a hook started with HSMFS_PROBE=1 that
 * exits with HSMFS_HOOK_REFUSED before the mount is ready says it cannot
 * serve this mount (a wrong origin: hsmfs-hooks(7)); ready_hook_refused()
 * then hands its reason to the daemonizing parent, which prints it and
 * exits with the daemon's status, and --ready-fd is closed unwritten.
 *
 * Locks: one mutex of its own, a leaf: taken with no other lock of this
 * module held, released before returning; callers may hold theirs.  It
 * writes to the two descriptors (a pipe, never blocking on 6 bytes)
 * under it, so that they are written exactly once.
 */
#ifndef HSMFS_READY_H
#define HSMFS_READY_H

#include <stdbool.h>
#include <sys/types.h>

#include "hsmfs/protocol.h" /* HSMFS_HOOK_REFUSED */

/*
 * ready_fd: --ready-fd, or -1; daemon_fd: the daemonizing parent's pipe,
 * or -1; wait_hook: hook= was given; bound: seconds to wait for it after
 * INIT.  Owns the descriptors from here on.
 */
void ready_init(int ready_fd, int daemon_fd, bool wait_hook, double bound);
/* FUSE INIT is answered (ops.c, at INIT). */
void ready_live(void);
/* The supervised hook was spawned as pid, leader of its process group. */
void ready_hook_started(pid_t pid);
/* A hook connection from pid got its WELCOME (hooks.c). */
void ready_hook_joined(pid_t pid);
/* The supervised hook exited or could not start (supervise.c). */
void ready_hook_exited(void);
/*
 * The supervised hook refused the mount (why: its last line of output).
 * True when the mount was not ready yet: it has failed, the caller ends
 * the daemon; false when it was (the hook is started again as after any
 * exit).
 */
bool ready_hook_refused(const char *why);
/*
 * A warning the user who mounts should see (an origin= that is not
 * used...): before the mount is ready, handed to the daemonizing parent,
 * which prints it on its terminal; logged in any case.
 */
void ready_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A note for the user who mounts (progress): as ready_warn(), not a warning. */
void ready_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * The mount failed before it was ready (why: one line the daemonizing
 * parent prints); the caller ends the daemon.
 */
void ready_fail(const char *why);
/*
 * Wait, at most the bound given at ready_init(), for the supervised
 * hook to join (or exit, to be started again): 1 once it did, 0 when the
 * bound passed, -1 when it refused the mount (ready_hook_refused()).
 */
int ready_wait_hook(void);
/* Stops the bound's timer; the descriptors are closed unwritten if the
 * mount never became ready. */
void ready_shutdown(void);
/* True once ready was signalled (tests and asserts). */
bool ready_done(void);

#endif
