/*
 * ops-io.h - the session's reads and writes of /dev/fuse, when a keeper
 * holds the connection (keeper.h): the kernel's FUSE_INIT kept, and
 * replayed into a daemon that takes over; the requests the dead daemon
 * read but never answered asked again (FUSE_NOTIFY_RESEND); the id of
 * the request each thread read last (ops-resend.h).
 *
 * A daemon taking over starts a session of its own on the keeper's
 * descriptor.  The kernel will not send INIT again, and libfuse answers
 * nothing before it, so the first read returns the INIT the first
 * daemon saved (saved.h) under an id the kernel never uses, and its
 * reply is kept from the kernel; right after it the daemon asks the
 * kernel to put every request it sent and saw no answer to back on the
 * queue.  No other request is read until that INIT is answered: the
 * kernel has them queued at once, and libfuse would fail with EIO, or
 * run beside op_init(), those its other workers read meanwhile.
 * The kernel marks resent ones with the id's high bit.  That needs
 * FUSE_HAS_RESEND (Linux 6.9): without it the keeper does not restart
 * (keeper.c).
 *
 * Threads: the callbacks run on the loop's threads; the pause figure is
 * written once, when the replayed INIT is answered (the daemon serves).
 */
#ifndef HSMFS_OPS_IO_H
#define HSMFS_OPS_IO_H

#include <stdbool.h>
#include <stdint.h>

struct fuse_session;

/* Serve se on fd (the keeper's descriptor, or the one it mounted with);
 * takeover: replay the saved INIT first.  0 or -errno. */
int ops_io_attach(struct fuse_session *se, int fd, bool takeover);
/* The id of the request this thread is handling (0: none known); a
 * continuation sets it for the request it resumes. */
uint64_t ops_io_unique(void);
void ops_io_set_unique(uint64_t unique);
/* Did the kernel that mounted us offer FUSE_HAS_RESEND?  (After INIT.) */
bool ops_io_can_resend(void);

#endif
