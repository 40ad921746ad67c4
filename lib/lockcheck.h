/*
 * lockcheck.h - the lock rules, checked in debug builds.
 *
 * The daemon's locks, in the order a thread takes them: a thread takes
 * a lock only while it holds none listed after it.
 *
 *   LK_ENGINE   S.lock: events, per-file state (state.h)
 *   LK_INODES   the inode table's (inode.h)
 *   LK_CACHE    the cache's size and admission (cache.h)
 *   LK_NAMES    name-change records (names.h)
 *   LK_META     the database's, recursive: a transaction holds it (meta.h)
 *
 * Nothing that may block runs under LK_ENGINE, LK_INODES, LK_CACHE or
 * LK_NAMES: SQLite, a log line, an open, close, ftruncate, fstat,
 * futimens or fstatvfs of a store or staging file, a sync.  (Sends to
 * hooks never wait: MSG_DONTWAIT.)  Each such helper calls
 * may_block(what) first, which aborts when the rule is broken.  The
 * exceptions meant to stay (state.h lists them) are bracketed by
 * lk_block_ok_begin()/lk_block_ok_end() where they are.
 *
 * lk_lock()/lk_unlock() take and drop a mutex and record it for the
 * calling thread; lk_wait() is pthread_cond_wait() on a recorded mutex.
 * In a release build (NDEBUG) they are the pthread calls and nothing
 * else, and may_block() is nothing.  Every check is thread-local: no
 * shared state, no atomic.  A broken rule aborts with the stack on
 * stderr, or with HSMFS_LOCKCHECK=report (or report:FILE, appended
 * to) only reports.
 */
#ifndef HSMFS_LOCKCHECK_H
#define HSMFS_LOCKCHECK_H

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

enum lk { LK_ENGINE, LK_INODES, LK_CACHE, LK_NAMES, LK_META, LK_N };

#ifdef NDEBUG
static inline void lk_lock(pthread_mutex_t *m, enum lk l) { (void)l; pthread_mutex_lock(m); }
static inline void lk_unlock(pthread_mutex_t *m, enum lk l) { (void)l; pthread_mutex_unlock(m); }
static inline bool lk_held(enum lk l) { (void)l; return true; }
static inline bool lk_not_held(enum lk l) { (void)l; return true; }
static inline void may_block(const char *what) { (void)what; }
static inline void lk_block_ok_begin(void) {}
static inline void lk_block_ok_end(void) {}
#else
void lk_lock(pthread_mutex_t *m, enum lk l);
void lk_unlock(pthread_mutex_t *m, enum lk l);
/* Whether this thread holds l (for assert(): always true in release). */
bool lk_held(enum lk l);
bool lk_not_held(enum lk l);
/* Aborts, naming what, when this thread holds a lock that forbids
 * blocking outside an lk_block_ok_begin()/end() bracket. */
void may_block(const char *what);
void lk_block_ok_begin(void);
void lk_block_ok_end(void);
#endif

/* pthread_cond_wait()/timedwait() on m, held as l: l stays recorded
 * (the thread runs nothing while it waits). */
static inline int lk_wait(pthread_cond_t *c, pthread_mutex_t *m, enum lk l)
{
	(void)l;
	return pthread_cond_wait(c, m);
}

static inline int lk_timedwait(pthread_cond_t *c, pthread_mutex_t *m, enum lk l,
			       const struct timespec *until)
{
	(void)l;
	return pthread_cond_timedwait(c, m, until);
}

#endif
