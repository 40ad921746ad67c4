/*
 * front.h - what the engine asks of its front end: the code that serves
 * users' calls (the FUSE operations today) and hands the engine their
 * requests.  The engine (libhsmfs-engine: states, ranges, events, hooks,
 * fills, archive, eviction) links no front end: a front end fills a
 * struct events_front and gives it to events_init() (state.h), and the
 * engine calls nothing else of it.
 *
 *   a request      struct front_req *: the front end's own, never looked
 *                  into; NULL for the engine's own work (readahead, the
 *                  archiver).  A request the engine parks instead of
 *                  holding its thread is ended by the engine, once: a
 *                  read through reply(), any other through the
 *                  continuation its caller gave with it.
 *   who asks       caller(): pid, uid, gid, asked when an event or a
 *                  per-user bound needs them.
 *   invalidation   data, not calls: the engine says what the kernel may
 *                  hold stale (struct inval) and the front end decides
 *                  how, and from which thread, to drop it.  A front end
 *                  with no kernel cache of its own ignores it.
 *
 * Every callback may be NULL (the engine's unit test runs with most of
 * them NULL) except reply and caller, which a front end that parks
 * requests must give.  None is called with S.lock held unless it says
 * so; none may call back into the engine's entry points while it runs.
 */
#ifndef HSMFS_FRONT_H
#define HSMFS_FRONT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct front_req;
struct inode;

/* Who made a request. */
struct caller {
	pid_t pid;
	uid_t uid;
	gid_t gid;
};

/* What the kernel may hold stale, and must drop. */
enum inval_kind {
	INVAL_DATA,        /* in's pages in [off, off + len), len 0: all */
	INVAL_ATTR,        /* in's attributes (blocks, links, times), not its pages */
	INVAL_ENTRY,       /* the entry name in directory in; never waits
			    * for in's lock; INVAL_NAMES once the changes
			    * are made */
	INVAL_NAMES,       /* every name: asked again at its next use */
	INVAL_FILES_LATER, /* every regular file's pages, soon, from another
			    * thread; may be asked under S.lock */
};

struct inval {
	enum inval_kind kind;
	struct inode *in;  /* DATA, ATTR: the file; ENTRY: the directory */
	uint64_t off, len; /* DATA */
	const char *name;  /* ENTRY; borrowed for the call */
};

/* The steps of an eviction a front end takes part in (evict.c, events_front.evicting). */
enum evict_step {
	EVICT_HOLD,     /* before anything is recorded: every open from here on
			 * finds the bytes missing, and none completes until the
			 * engine closes sfd (which ends the hold); 0, or -EBUSY
			 * (the file is open somewhere) */
	EVICT_LET_GO,   /* sfd closed, whatever came of it, after a HOLD that gave 0 */
};

struct events_front {
	/*
	 * Answer a parked read (events_read()): res < 0 fails it, else the
	 * reply is [off, off + len) of the store descriptor fd.  Called from
	 * whichever engine thread ended its wait, without S.lock.
	 */
	void (*reply)(struct front_req *req, struct inode *in, int fd, uint64_t off,
		      uint64_t len, int res);
	/* req's caller (req is not NULL) */
	void (*caller)(struct front_req *req, struct caller *ret);
	/* has req's caller given up on it (an interrupt)? */
	bool (*interrupted)(struct front_req *req);
	/* may req's caller publish in's bytes (archive them)?  Without S.lock */
	bool (*may_archive)(struct front_req *req, struct inode *in);
	/* has the front end stopped serving (unmounted)?  Then every wait ends. */
	bool (*exiting)(void);
	/* drop what iv says the kernel may hold stale; any thread, without
	 * S.lock, except INVAL_FILES_LATER */
	void (*invalidate)(const struct inval *iv);
	/*
	 * the hooks' subscriptions changed (a join or a leave), before any
	 * WELCOME: opens decided on the old ones decide again; called under
	 * S.lock
	 */
	void (*subscriptions_changed)(void);
	/*
	 * A front end whose users open the store's files themselves
	 * (fanotify) takes part in an eviction of in, at each step, through
	 * sfd (the store file, open read-write: the hold is its, and ends
	 * when the engine closes it, before LET_GO); without S.lock, and no
	 * open of the file by the daemon between HOLD and the close.  NULL:
	 * every open is the front end's own, and it tells (inode_is_open()).
	 */
	int (*evicting)(struct inode *in, int sfd, enum evict_step step);
};

#endif
