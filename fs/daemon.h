/*
 * daemon.h - what the daemon's start-up stages make, shared by main.c
 * (every stage but serving, and the order) and serve.c (serving).
 *
 * The stages, in order: options, keeper (what a keeper handed over and
 * the saved region), checks, store (its lock), database, table (the
 * inode table), mount, daemonize, serve.  Each is a function *_run()
 * that takes what the stages before it made and returns true to go on,
 * or false with rc set (0: nothing more to do, as after --help), having
 * undone what it made itself.  main() then undoes, each with its
 * *_undo(), the stages that ran, in the reverse order; serve returns
 * when the mount ends, and the same undoing is the shutdown.
 *
 * One thread runs the stages; the fields are set by the stage named
 * beside them and read by the later ones.
 */
#ifndef HSMFS_DAEMON_H
#define HSMFS_DAEMON_H

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>

#include "keeper.h"
#include "ops.h"
#include "opts.h"
#include "store.h"

/* Exit codes (hsmfs(8)): main.c's comment says what each means. */
enum { EXIT_USAGE = 1, EXIT_STORE = 2, EXIT_MNT = 3, EXIT_MOUNT = 4,
       EXIT_SERVE = 5, EXIT_HOOK = KEEPER_STOP, EXIT_REMOUNT = 7 };

struct meta;

struct daemon {
	int argc;
	char **argv;
	int rc;                       /* the exit code */
	/* options */
	struct hsmfs_opts o;
	/* keeper: what a keeper handed over (keeper.h), the saved region */
	bool takeover;                /* a keeper started this daemon */
	bool kept;                    /* a keeper holds the mount */
	bool in_syslog;               /* the last daemon logged to syslog */
	bool fresh;                   /* nothing was saved in the region */
	int kfuse, klock, ksaved;     /* the keeper's /dev/fuse (backend=fanotify: its
				       * pre-content group), lock, region */
	int knotify;                  /* backend=fanotify: the keeper's group of changes */
	bool keeper_up;               /* a keeper holds the mount now (started, or ours) */
	const char *kmnt;             /* the keeper's mountpoint */
	/* checks */
	char *store_path, *mnt_path;  /* real paths */
	/* store */
	struct store store;
	bool was_clean;               /* the last mount ended cleanly */
	/* database */
	struct meta *meta;
	/* table */
	bool table;                   /* the inode table owns store.root_fd */
	uint64_t restored;            /* inodes a takeover rebuilt */
	/* mount */
	struct fuse_args args;
	char *fsname;
	struct ops_config ocfg;
	struct fuse_session *se;
	bool handlers;                /* libfuse's signal handlers installed */
	bool mounted;                 /* this process unmounts at the end */
	/* daemonize */
	int daemon_fd;                /* to the parent waiting for ready (ready.h) */
	/* serve */
	bool serving;                 /* the session was being served */
	bool events_up, cache_up, hooks_up, hook_up;
};

/* serve.c: the engine and its helpers started, a takeover's leftovers, the loop. */
bool serve_run(struct daemon *d);
void serve_undo(struct daemon *d);

#endif
