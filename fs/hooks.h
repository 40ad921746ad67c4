/*
 * hooks.h - the hook socket: accepting, authenticating and talking to
 * hook processes.
 *
 * The socket is STORE/.hsmfs/hook.sock (SOCK_SEQPACKET, mode 0600 in a
 * 0700 directory), bound through /proc/self/fd so that store paths of
 * any length work; the mount root's xattr user.hsmfs.socket gives its
 * path.  Peers are checked with SO_PEERCRED: only the daemon's own uid
 * and root are served, others get ERROR DENIED and a log line.
 *
 * One thread accepts; one thread per connection reads frames, checks
 * them with the codec (proto.h) and hands HELLO, ANSWER, PROGRESS and
 * FILLED to the handlers given to hooks_start() (the engine's,
 * answer.h: main.c passes them).  A malformed, oversized or out-of-order frame, or an
 * unknown message type, gets an ERROR frame with the reason, a log line,
 * and the connection is closed; the mount keeps running.
 *
 * struct hook objects are created here and handed to the handlers
 * (joined, which sends WELCOME itself through hooks_send_welcome(),
 * under the engine's lock, so a hook that has its WELCOME is asked for
 * every event after it, and no event reaches it before); they are only
 * freed after left returned, so the engine may use them under its own
 * lock.
 */
#ifndef HSMFS_HOOKS_H
#define HSMFS_HOOKS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "hashset.h"
#include "hsmfs/protocol.h"
#include "proto.h"

#define HOOKS_MAX 64 /* connections served at once; more get ERROR */
#define HOOKS_HELLO_TIMEOUT 5 /* seconds a new connection has to say HELLO */

#define HOOK_LAT_BUCKETS 256 /* == LAT_BUCKETS (state.h) */

struct hook {
	int fd;                            /* the connection */
	uint32_t kind;                     /* HSMFS_KIND_* */
	uint32_t mask;                     /* subscribed events */
	uint32_t version;                  /* the protocol version spoken */
	char name[HSMFS_MAX_NAME + 1];     /* from HELLO */
	char subtree[HSMFS_MAX_PATH + 1];  /* "" = the whole mount */
	pid_t pid;                         /* SO_PEERCRED */
	uid_t uid;
	uint32_t assigned;                 /* events sent and unanswered */
	/*
	 * The engine's, under its lock, for hsmfsctl hooks: answers and
	 * denials given, events that ran out of time while it had them, and
	 * each answer's latency from its event's start (the buckets of
	 * state.h's lat_bucket()).
	 */
	uint64_t answered, denied, timeouts;
	uint64_t lat[HOOK_LAT_BUCKETS];
	struct hook *next;                 /* the engine's list */
	/* files this hook answered PRE_MODIFY with QUIET for (store inode
	 * numbers, at most HOOK_QUIET_MAX), owned by the engine under its
	 * lock: made by its joined handler, freed by its left handler */
	struct hashset quiet;
	/* its last STATS (NUL-terminated, malloc'ed) or NULL: this module's,
	 * under its own lock (hooks_stats()) */
	char *stats;
};

#define HOOK_QUIET_MAX (1u << 20) /* QUIET past it is not kept: more events */

/*
 * Where a connection's frames go, called from its thread without any
 * lock of this module.  joined: h said HELLO; send it welcome (len
 * bytes, hooks_send_welcome) and add it, atomically: 0, or -errno to
 * close the connection.  left: h's connection ended (only after a
 * joined that returned 0); h is freed once it returns.
 */
struct hooks_handlers {
	int (*joined)(struct hook *h, const uint8_t *welcome, int len);
	void (*left)(struct hook *h);
	void (*answer)(struct hook *h, const struct proto_answer *a);
	void (*progress)(struct hook *h, const struct proto_progress *p);
	void (*filled)(struct hook *h, const struct proto_filled *f);
	void (*archived)(struct hook *h, const struct proto_archived *a);
};

/*
 * Bind and listen on the socket in the state directory and start the
 * accept thread.  state_path is the directory's real path (for
 * user.hsmfs.socket); on (copied) says where frames go.  Returns 0 or
 * -errno.
 */
int hooks_start(int state_fd, const char *state_path, uint32_t chunk,
		uint32_t timeout_ms, const struct hooks_handlers *on);
void hooks_stop(void);
/*
 * Before hooks_start(): a HELLO whose mask has any of these events is
 * refused (ERROR UNSUPPORTED): the front end cannot raise them, and a
 * hook must not join to go unasked.
 */
void hooks_refuse(uint32_t mask);
const char *hooks_socket_path(void);

/* Non-blocking sends; -EAGAIN when the hook's queue is full. */
int hooks_send_event(struct hook *h, const struct proto_event *ev, int fd);
/* Send WELCOME (an encoded frame): the joined handler does, under its lock. */
int hooks_send_welcome(struct hook *h, const uint8_t *frame, int len);
void hooks_send_cancel(struct hook *h, uint64_t id, uint32_t reason);
/*
 * The counters the connected hooks sent (STATS), a line each: hook name,
 * pid, the counter's line, tab-separated; into out (cap bytes): the
 * length, or -ERANGE (cap 0: the length it needs).  Takes this module's
 * lock; no other lock needed.
 */
ssize_t hooks_stats(char *out, size_t cap);

#endif
