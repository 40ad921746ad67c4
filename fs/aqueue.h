/*
 * aqueue.h - the archive queue (aqueue.c): which dirty file is archived
 * when, the files being archived, what an attempt's end does to its
 * file, the files whose change resolve --take-origin drops, and the
 * namer's wake-up.  The archivers and the namer (archive.h) run on it;
 * user changes (change.h) and the names journal (journal.h) feed it.
 *
 * A file's place: fs->arch (fstate.h) is ARCH_IDLE, ARCH_QUEUED (on
 * AQ.heap by fs->aq.due, holding an inode reference the archiver
 * releases) or ARCH_RUNNING (taken by take_due(), in a slot of
 * AQ.running_fs from attempt_begin() to attempt_end()).  archive_later()
 * of a running file sets fs->arch_again: queued again at its end.
 *
 * Locks: AQ and each file's archive fields (arch, arch_again, aq,
 * arch_err, arch_tries, nohook_ms, naming, awaiters) are guarded by
 * S.lock; every function here is called with it held (asserted in
 * debug builds), but archive_names_wanted() and archive_names_kick(),
 * which take it, aqueue_init(), before any thread, and backoff_ms(), a
 * pure function.  AQ.cond and AQ.ncond are waited on with S.lock.
 * Besides these functions, archive.c's archive_pressure() brings queued
 * files' due times forward on AQ.heap, and its last archiver out
 * empties it.
 */
#ifndef HSMFS_AQUEUE_H
#define HSMFS_AQUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "dueheap.h"
#include "fstate.h"

#define ARCHIVERS 8     /* files archived at once (each waits for a
			 * round trip or three to the origin) */
#define TAKES_MAX 16    /* resolves --take-origin at once */
#define ARCH_LOOK_MS 1000 /* an idle archiver looks at its queue at least this often */
#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 60000

/* An attempt's results beside 0 and -errno (upload.h: archive_one()). */
#define ARCH_AGAIN 1    /* changed meanwhile: archive it again */
#define ARCH_ROOM 2     /* no room for a snapshot now (see attempt_end) */
#define ARCH_NAMES 3    /* a name op of its path goes first: later */

/* A request waiting for a file's archive. */
struct arch_wait {
	void (*cont)(void *arg, int res);
	void *arg;
	struct arch_wait *next;
};

struct aqueue {
	struct due_heap heap;      /* queued files by due time (fs->aq) */
	pthread_cond_t cond;       /* the queue grew or a file is due sooner,
				    * a sync was asked, or stopping */
	bool running;              /* the archivers started (archive_init) */
	bool stop;                 /* archive_shutdown() began */
	/* the files being archived, a slot each: the namer waits for one,
	 * and a directory's rename finds the new files below it whose
	 * first upload is in flight (journal.c) */
	struct fstate *running_fs[ARCHIVERS];
	unsigned nrunning;         /* of them */
	uint64_t running_bytes;    /* their sizes */
	bool names_wanted;         /* names changed: ops recorded (meta.h) */
	bool names_kick;           /* an archive waits for a name op: apply them */
	pthread_cond_t ncond;      /* names_wanted or names_kick set, an
				    * attempt ended, a rename ended, or stopping */
	/* hsmfsctl resolve --take-origin: files whose local change the
	 * refresh of their directory replaces (archive.c, listing.c) */
	struct take {
		uint64_t ino;
		bool done;         /* replaced or removed by the refresh */
	} takes[TAKES_MAX];
	unsigned ntakes;
};
extern struct aqueue AQ;

/* Its condition variables (monotonic clock).  Before any thread. */
void aqueue_init(void);
/* Free the queue's table (its files taken off already). */
void aqueue_free(void);

/* The file whose place on AQ.heap is it. */
static inline struct fstate *fstate_of_due(struct due_item *it)
{
	return (struct fstate *)((char *)it - offsetof(struct fstate, aq));
}

/*
 * Archive fs once due (monotonic ms): queued, or its due time replaced
 * (the last change or ask decides); while it is being archived, queued
 * again after.
 */
void archive_later(struct fstate *fs, int64_t due);
/* A user's change or close of fs: with write-back on, archive it later. */
void archive_writeback(struct fstate *fs);

/*
 * The first due file of the queue, taken off it, or NULL with *next_due
 * the earliest due time of a file that could be taken (0: none).  Due
 * files being renamed at the origin, or whose change is being dropped
 * (events_take_origin), are passed over: taken after.
 */
struct fstate *take_due(int64_t now, int64_t *next_due);

/* fs (taken by take_due(), size bytes) is being archived: its slot. */
unsigned attempt_begin(struct fstate *fs, uint64_t size);
/*
 * The attempt on fs in slot ended with *resp (0, ARCH_*, -errno): the
 * slot freed (the namer woken), fs queued again, backed off, in
 * conflict or clean, *resp the result its waiters get.  Returns the
 * waiters to answer, taken off fs, or NULL (they wait on).
 */
struct arch_wait *attempt_end(struct fstate *fs, unsigned slot, uint64_t size, int *resp,
			      int64_t now);
/* Is the file ino being archived now? */
bool archive_ino_running(uint64_t ino);
/* The file in slot (< ARCHIVERS) being archived, or NULL. */
struct fstate *archive_running(unsigned slot);
/* Add a waiter to fs, answered at the end of an attempt.  false: no memory. */
bool add_waiter(struct fstate *fs, void (*cont)(void *arg, int res), void *arg);
/* A failed attempt's backoff: 1 s, doubling, at most 60 s. */
int64_t backoff_ms(unsigned tries);

/*
 * hsmfsctl resolve --take-origin of the file ino (archive.c) asks the
 * refresh of its directory (listing.c) to replace or remove it though
 * it is dirty: take_begin() records the ask (0, -EALREADY, or -EAGAIN:
 * TAKES_MAX asks at once), take_wanted() says whether it is asked,
 * take_done() that the refresh did, take_end() forgets the ask and
 * says whether it was done.
 */
int take_begin(uint64_t ino);
bool take_wanted(uint64_t ino);
void take_done(uint64_t ino);
bool take_end(uint64_t ino);

/*
 * Names changed that the origin is to follow (ops recorded): wake the
 * namer (archive_names_wanted); an archive waits for a name op of its
 * path: the namer applies the ops now, write-back or not
 * (archive_names_kick).  Without S.lock.
 */
void archive_names_wanted(void);
void archive_names_kick(void);

#endif
