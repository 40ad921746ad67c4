/*
 * hsmfs/hook.h - a small client library for writing hooks in C.
 *
 * Connect, receive events, answer them.  One struct hsmfs_hook is one
 * connection.  hsmfs_hook_next() must be called from one thread at a
 * time; hsmfs_hook_allow(), _deny(), _progress() and _filled() may be
 * called from any thread at any time, also while another thread waits
 * in _next() (each is one send(2) of its own frame).
 * When the daemon closes the connection, hsmfs_hook_next() connects
 * again (at the same descriptor number) if the mount is still there, as
 * it is when its keeper restarted the daemon (hsmfs(8), RESTARTS): the
 * events that daemon had sent are sent again by the new one, under new
 * ids; answers to the old ids are ignored.  It returns -ECONNRESET only
 * once the mount is gone, or after five daemons in a row each closed
 * the connection within a second of it (the keeper gives up after as
 * many quick deaths).
 * Every function returns 0 or -errno.  The descriptor of a fill event
 * (ev->fd) belongs to the caller, who must close it.  The protocol
 * itself is specified in hsmfs-hooks(7) and <hsmfs/protocol.h>.
 */
#ifndef HSMFS_HOOK_H
#define HSMFS_HOOK_H

#include <stdint.h>

#include "hsmfs/protocol.h"

struct hsmfs_hook;

/* The library's API: the only symbols libhsmfs-hook exports. */
#if defined(__GNUC__)
#define HSMFS_HOOK_API __attribute__((visibility("default")))
#else
#define HSMFS_HOOK_API
#endif

#define HSMFS_EV_CANCEL 0 /* ev->type of a CANCEL: ev->id is cancelled */

struct hsmfs_event {
	uint64_t id;
	uint32_t type;                   /* HSMFS_EV_*, or HSMFS_EV_CANCEL */
	uint32_t pid, uid, gid;          /* who caused it */
	uint64_t file_id, file_size;
	uint64_t start, end;             /* required range */
	uint64_t hint_start, hint_end;   /* may be filled instead */
	char path[HSMFS_MAX_PATH + 1];   /* relative to the mount root */
	char origin[HSMFS_MAX_PATH + 1]; /* "" if none */
	char version[1024];              /* "" if none */
	int fd;                          /* store descriptor, or -1 */
};

/*
 * Connect to the mount at mountpoint.  kind: HSMFS_KIND_FILL or
 * HSMFS_KIND_WATCH; mask: HSMFS_MASK() bits; subtree: NULL or "" for the
 * whole mount.  On success *ret is a connected, welcomed hook.
 */
HSMFS_HOOK_API int hsmfs_hook_connect(const char *mountpoint, uint32_t kind, uint32_t mask,
		       const char *name, const char *subtree,
		       struct hsmfs_hook **ret);

/* Block for the next event (or cancel).  -ECONNRESET when hsmfs left. */
HSMFS_HOOK_API int hsmfs_hook_next(struct hsmfs_hook *h, struct hsmfs_event *ev);

HSMFS_HOOK_API int hsmfs_hook_allow(struct hsmfs_hook *h, uint64_t id, uint64_t filled_start,
		     uint64_t filled_end, uint16_t flags);
HSMFS_HOOK_API int hsmfs_hook_deny(struct hsmfs_hook *h, uint64_t id, int err);
HSMFS_HOOK_API int hsmfs_hook_progress(struct hsmfs_hook *h, uint64_t id, uint64_t bytes_done);
/*
 * Before the answer of a PRE_ACCESS event: [filled_start, filled_end) of
 * ev->fd is written and final, and the reads waiting for bytes inside it
 * may be answered now.  -EOPNOTSUPP from a mount older than protocol
 * version 5 (nothing sent: just answer as before).
 */
HSMFS_HOOK_API int hsmfs_hook_filled(struct hsmfs_hook *h, uint64_t id, uint64_t filled_start,
				     uint64_t filled_end);

/*
 * Before the ALLOW of an ARCHIVE event: its snapshot (ev->fd) is at the
 * origin as version, at origin (NULL or "": the recorded one).
 * -EOPNOTSUPP from a mount older than protocol version 6.
 */
/*
 * The hook's own counters, for hsmfsctl stats (and its --json and
 * --prometheus forms): one a line, name{label="value",...} number, as in
 * Prometheus' text format without comments; each call replaces what the
 * last one sent.  A name is [a-z_][a-z0-9_]*; hsmfsctl shows it prefixed
 * with the hook's name.  -EMSGSIZE past HSMFS_MAX_STATS bytes,
 * -EOPNOTSUPP from a mount older than protocol version 7.
 */
HSMFS_HOOK_API int hsmfs_hook_stats(struct hsmfs_hook *h, const char *counters);

HSMFS_HOOK_API int hsmfs_hook_archived(struct hsmfs_hook *h, uint64_t id, const char *version,
				       const char *origin);

/*
 * The flags of the last event hsmfs_hook_next() returned
 * (HSMFS_EVENT_HAS_FD, HSMFS_EVENT_OVERWRITE).
 */
HSMFS_HOOK_API uint16_t hsmfs_hook_event_flags(const struct hsmfs_hook *h);

/* The socket, for poll(2). */
HSMFS_HOOK_API int hsmfs_hook_fd(const struct hsmfs_hook *h);

/* Timeout (ms) and chunk size hsmfs announced in WELCOME. */
HSMFS_HOOK_API uint32_t hsmfs_hook_timeout_ms(const struct hsmfs_hook *h);
HSMFS_HOOK_API uint32_t hsmfs_hook_chunk(const struct hsmfs_hook *h);

/* Close; accepts NULL. */
HSMFS_HOOK_API void hsmfs_hook_close(struct hsmfs_hook *h);

#endif
