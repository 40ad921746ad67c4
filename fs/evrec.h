/*
 * evrec.h - the event record: the struct an event lives in, its states
 * and the one function that changes them.  The engine owns an event's
 * life (event.c: slots, references, complete(); route.c: dispatch;
 * answer.c: what hooks say); the state layer reads the fill an event
 * carries and commits it (commit.c: commit_fill; fstate.c: a file's inflight
 * list), so the record sits here, below both.  Every field is guarded
 * by S.lock (state.h) unless it says otherwise.
 */
#ifndef HSMFS_EVREC_H
#define HSMFS_EVREC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>
#include "hooks.h"
#include "hsmfs/protocol.h"
#include "saved.h"
#include "state.h"

struct fstate;
struct inode;
struct parked;

/*
 * An event's states.  Every change of ev->st goes through ev_set(),
 * which asserts in debug builds that it is one of these arrows, each
 * named by the function that takes it:
 *
 *   FREE --init_event()--> QUEUED --dispatch(), start_perm()--> SENT
 *                            ^                                   |
 *                            +------- events_hook_left() --------+
 *                                     (its fill hook left)       |
 *                                                                |
 *                                  answer_one(): the fill hook   |
 *                                  allowed                       v
 *   COPYING <-- commit_fill(), commit_listing() ------------- FILLED
 *      |        (every watcher allowed too)                      ^
 *      +------- commit_fill(), commit_now(): copied -------------+
 *
 *   QUEUED, SENT, FILLED --complete()--> DONE --release_slot()--> FREE
 *                                             (no reference left)
 *
 *   QUEUED   no fill hook has it yet: on E.queue (watchers may have it;
 *            a permission event is QUEUED only while it is set up)
 *   SENT     a fill hook has it, or every permission target was sent it
 *   FILLED   PRE_ACCESS, PRE_DIR, PRE_LOOKUP: its fill hook allowed
 *            [fill_start, fill_end); committed once every watcher
 *            allowed too.  ARCHIVE: its archive hook said ARCHIVED and
 *            allowed; done (complete) once every watcher allowed too
 *   COPYING  being committed (on the lister's queue, or copied with
 *            S.lock dropped): nobody but the committer completes it; it
 *            neither times out nor is cancelled
 *   DONE     result is final; the slot is freed once no reference is left
 *
 * QUEUED, SENT, FILLED and COPYING are live (ev_live()): hooks' answers
 * find the event.  detached (nobody started it to wait) and stream (of
 * a sequential reader's window) are properties beside the state.
 */
enum ev_state { EV_FREE, EV_QUEUED, EV_SENT, EV_FILLED, EV_COPYING, EV_DONE };

#define HOOK_LOSSES_MAX 3 /* fill hooks that may leave holding one event */
/*
 * The hooks one event can wait for: every hook connected (HOOKS_MAX)
 * and every one of the last daemon's not back yet (SAVED_HOOKS, route.h):
 * each of them must answer, so each has a place.
 */
#define EV_TARGETS_MAX (HOOKS_MAX + SAVED_HOOKS)

struct event {
	uint64_t id;               /* 0 when free */
	uint32_t type;             /* HSMFS_EV_* */
	enum ev_state st;          /* see the diagram above; ev_set() */
	struct inode *in;          /* held with inode_ref */
	struct fstate *fs;         /* PRE_ACCESS: the file's state */
	uint64_t start, end;       /* required range */
	uint64_t hint_start, hint_end;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int stage_fd;              /* PRE_ACCESS: the staging file of the
				    * current delivery (owned), or -1 */
	struct hook *hook;         /* PRE_ACCESS: the fill hook it went to */
	uint8_t hook_losses;       /* fill hooks that left holding it: at
				    * HOOK_LOSSES_MAX it fails (answer.c) */
	struct hook *targets[EV_TARGETS_MAX]; /* hooks yet to answer (all must
					       * allow); NULL: one that left or
					       * is absent, see orphans, or one
					       * never named (the timeout decides) */
	bool unsent[EV_TARGETS_MAX]; /* targets[i] could not take the event yet:
				    * it still must answer; the timer resends */
	unsigned ntargets;
	char (*orphans)[HSMFS_MAX_NAME + 1]; /* names of targets that left */
	unsigned norphans;
	struct event *cnext;       /* in E.commits */
	uint64_t fill_start, fill_end; /* FILLED, COPYING: what the fill hook
					* allowed (PRE_ACCESS) */
	bool detached;             /* readahead: nobody started it to wait */
	bool stream;               /* detached, of a sequential reader's window
				    * (readahead.c): cancelled when the file's
				    * last open closes (cancel_window) */
	char *dir_origin;          /* PRE_DIR: the directory's listing origin
				    * (owned, may be NULL) */
	char *name;                /* PRE_LOOKUP: the name looked up (owned) */
	bool refresh;              /* PRE_DIR: of a listed directory (hsmfsctl
				    * refresh): its difference is applied */
	uint16_t aflags;           /* ARCHIVE: its HSMFS_EVENT_* flags */
	uint64_t names_plan;       /* PRE_DIR, PRE_LOOKUP: the plan its name
				    * changes are claimed under (names.h),
				    * open from its start to its slot's release */
	bool uploaded;             /* ARCHIVE: its archive hook allowed */
	char *new_version;         /* ARCHIVE: what its archive hook said in */
	char *new_origin;          /*   ARCHIVED (owned; the archiver takes them) */
	int result;                /* 0 or -errno once EV_DONE */
	uint32_t waiters;          /* references: threads in wait_event() and
				    * parked reads; released at 0 once done */
	struct parked *parked;     /* reads parked on it */
	struct timespec deadline;  /* CLOCK_MONOTONIC */
	struct timespec born;      /* CLOCK_MONOTONIC, for the fill latency */
	uint64_t reserved;         /* PRE_ACCESS: cache bytes admitted */
	uint64_t progress;
	pthread_cond_t cond;       /* with S.lock */
	struct event *fnext;       /* fstate->inflight link */
	struct event *qnext;       /* E.queue link (EV_QUEUED, no hook) */
	struct event *free_next;
};

/* Is from -> to an arrow of the diagram above enum ev_state? */
static inline bool ev_step_legal(enum ev_state from, enum ev_state to)
{
	switch (to) {
	case EV_QUEUED:
		return from == EV_FREE || from == EV_SENT;
	case EV_SENT:
		return from == EV_QUEUED;
	case EV_FILLED:
		return from == EV_SENT || from == EV_COPYING;
	case EV_COPYING:
		return from == EV_FILLED;
	case EV_DONE:
		return from == EV_QUEUED || from == EV_SENT || from == EV_FILLED;
	case EV_FREE:
		return from == EV_DONE;
	}
	return false;
}

/* Move ev to state to, asserting the arrow is legal.  S.lock held. */
static inline void ev_set(struct event *ev, enum ev_state to)
{
	ELOCK_HELD();
	assert(ev_step_legal(ev->st, to));
	ev->st = to;
}

/* Hooks may still answer ev: QUEUED, SENT, FILLED or COPYING. */
static inline bool ev_live(const struct event *ev)
{
	return ev->st != EV_FREE && ev->st != EV_DONE;
}

#endif
