/*
 * upload.h - the archive of one dirty file (upload.c): steps 1 to 5 of
 * archive.h, from the names that go first to the clean state recorded
 * by the writer; an archiver thread (archive.c) runs one at a time.
 *
 * Locks: without S.lock (the snapshot's clone, the fetch and the wait
 * for the hook run without it); answer_of() and upload_rate() with it.
 */
#ifndef HSMFS_UPLOAD_H
#define HSMFS_UPLOAD_H

#include <stdbool.h>
#include <stdint.h>

struct event;
struct fstate;

/*
 * Archive fs once: 0 (clean, or nothing to do), ARCH_AGAIN, ARCH_ROOM,
 * ARCH_NAMES (aqueue.h) or -errno.  Without S.lock.
 */
int archive_one(struct fstate *fs);

/*
 * Wait for an archive event ev (the caller's reference, from its start)
 * and take what its archive hook said: the version and URL of ARCHIVED
 * (owned by the caller, NULL if none), and whether the hook allowed
 * (*ret_uploaded, may be NULL: the origin has the bytes, whatever a
 * watcher or the timeout said after).  Its result: 0 or -errno.  S.lock
 * held.
 */
int answer_of(struct event *ev, char **ret_version, char **ret_origin, bool *ret_uploaded);

/* Bytes a second the origin took over the last few seconds.  S.lock held. */
uint64_t upload_rate(void);

#endif
