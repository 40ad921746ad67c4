/*
 * saved.h - what one serving daemon leaves for the next: the table the
 * keeper holds (keeper.h).
 *
 * The kernel keeps a FUSE connection while any process holds its
 * /dev/fuse descriptor, and keeps referring to what the daemon told it:
 * node ids, their lookup counts, open file and directory handles.  A
 * daemon that takes over after a crash must resolve every one of them
 * at once.  So the daemon keeps them, as it goes, in one shared memory
 * region (a memfd the keeper created and holds; an anonymous mapping
 * when no keeper runs, -o norestart), and the next daemon maps the same
 * region and rebuilds its tables from it:
 *
 *   - the head: the kernel's FUSE_INIT as it came (replayed into the
 *     new session, keeper.c), and the keeper's counters (restarts, the
 *     last cause, the longest pause);
 *   - one node record per node id (inode-ids.c): store (dev, ino), the
 *     generation, the kernel's lookup count, the alias (parent node id,
 *     name; a name past SAVED_NAME_INLINE bytes in a long-name cell);
 *   - one open record per store descriptor number (ops-file.c,
 *     ops-dir.c): which node it opened, its flags, its passthrough mode
 *     and backing id; the FUSE file handle IS the descriptor number, so
 *     the next daemon reopens each at the same number;
 *   - the journal of operations that must not run twice (ops-resend.c);
 *   - the hooks connected (name, kind, subscriptions; engine, route.c),
 *     so that the next daemon asks for them until they connect again
 *     (hooks_absent);
 *   - on backend=fanotify (fan.h), one event record per descriptor
 *     number: each pre-content event the daemon read and has not
 *     answered yet (the file's handle, the range, the reader's pid).
 *     The kernel matches an answer to its event by that number alone,
 *     and keeps the event waiting while the keeper holds the group: the
 *     next daemon takes the numbers (saved_reserve()), fills each range
 *     and answers it by its number (fan.c);
 *   - the user's changes to files with state (a write into a file with
 *     bytes missing, a truncate) made and answered but not yet
 *     committed by the writer: a ring, appended under S.lock as each
 *     change ends (change.c), its tail moved on as the writer's batches
 *     commit (writeback.c); a daemon taking over applies what is left
 *     before it serves (events_replay_claims()), so a read never
 *     fetches over bytes a user wrote.
 *
 * A record is written with plain stores by the one daemon that serves
 * (under the lock of the module that owns it; an open record's kind and
 * the head's figures with atomic ones, as threads of the daemon meet
 * there without a lock); nothing here is a
 * synchronisation between processes: the next daemon starts only once
 * the last one is dead (keeper.c waits for it).  A record torn by a
 * crash can only name a wrong path or node: every reopen checks the
 * store's (dev, ino) before it trusts one (inode-lookup.c), a mismatch is
 * ESTALE for that node only.  Nothing here is fsynced or survives a
 * reboot: it lives exactly as long as the kernel's connection.
 *
 * Costs: a lookup, forget or rename writes a 64-byte record; an open and
 * a release a 16-byte one; a name operation two journal stores.  The
 * region is reserved at its maximum size and only touched pages take
 * memory (64 bytes per remembered inode).
 */
#ifndef HSMFS_SAVED_H
#define HSMFS_SAVED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SAVED_MAGIC 0x6873666b65657031ULL /* "hsfkeep1" */
#define SAVED_NODES_MAX (4u << 20)  /* node ids (0 and 1 unused: 1 is the root) */
#define SAVED_NAMES_MAX (1u << 20)  /* long-name cells */
#define SAVED_OPENS_MAX (1u << 20)  /* descriptor numbers */
#define SAVED_JOURNAL 8192          /* journal records (a power of two) */
#define SAVED_CLAIMS 65536          /* user changes not yet committed */
#define SAVED_NAME_INLINE 20
#define SAVED_NAME_CELL 256
#define SAVED_HOOKS 64              /* hooks remembered (HOOKS_MAX) */
#define SAVED_HOOK_NAME 256         /* HSMFS_MAX_NAME + 1 */
#define SAVED_FAN_MAX SAVED_OPENS_MAX /* fanotify event records: descriptor numbers */
#define SAVED_PIDS 16                /* the last daemons' pids remembered */
#define SAVED_FAN_HANDLE 96         /* a file handle's bytes (ext4 8, xfs 16, btrfs 40) */

struct saved_head {
	uint64_t magic;
	uint64_t size;           /* of the whole region */
	/* FUSE_INIT as the kernel sent it (its fuse_in_header and arguments) */
	uint32_t init_len;       /* 0: not seen yet */
	uint8_t init[128];
	/* the keeper's: */
	uint64_t restarts;       /* daemons started after the first */
	int32_t last_status;     /* wait status of the last daemon that died */
	uint32_t serving_pid;
	int64_t died_ms;         /* mono_ms() of the last death, 0: none */
	uint64_t pause_last_ms;  /* death to the next daemon's first reply */
	uint64_t pause_max_ms;
	uint64_t handovers;      /* of those, asked for (hsmfsctl restart) */
	/* the daemon's: */
	uint32_t nodes_hwm;      /* node ids used below this */
	uint32_t names_hwm;      /* long-name cells used below this */
	uint32_t opens_hwm;      /* descriptor numbers used below this */
	uint32_t kept;           /* a keeper holds the mount (keeper.h) */
	uint64_t claims_head;    /* the claims ring: appended here (S.lock) */
	uint64_t claims_tail;    /* committed below this (S.lock) */
	/* backend=fanotify's (fan.c), its reader thread's: */
	uint32_t fan_reading;    /* events being read and not all recorded */
	uint32_t fan_hwm;        /* event records at descriptor numbers below this */
	uint32_t fan_fd_limit;   /* no event's descriptor number reaches this */
	uint64_t fan_mnt_id;     /* the bind mount's id (statx STATX_MNT_ID) */
	/* the keeper's: its pid, and the last daemons' (saved_daemon_pid()) */
	uint32_t keeper_pid;
	uint32_t pids_next;
	uint32_t pids[SAVED_PIDS];
	/*
	 * backend=fanotify's events lost to an overflow, over every daemon
	 * of the mount (hsmfsctl doctor): of the pre-content group (a read
	 * the kernel let through, maybe of zeros), of the changes' (a
	 * user's change maybe not recorded).  Appended: the head's page
	 * keeps the arrays' places.
	 */
	uint64_t fan_lost_events;
	uint64_t fan_lost_changes;
};

struct saved_node {
	uint64_t dev, ino;       /* the store's file; both 0: its file went
				  * and another may have its number (inode-lookup.c) */
	uint64_t nlookup;
	uint32_t parent;         /* node id of the alias's parent, 0: none */
	uint32_t gen;            /* generation of this node id */
	uint32_t type;           /* S_IFMT; 0: the record is free */
	uint32_t long_name;      /* cell index, 0: the name is inline */
	uint16_t name_len;
	char name[SAVED_NAME_INLINE];
};
_Static_assert(sizeof(struct saved_node) == 64, "one cache line a node");

/*
 * An open record's kind.  RELEASING: its RELEASE (RELEASEDIR) is being
 * done and not answered yet; the number stays taken until the reply is
 * sent, then the record is freed and the descriptor closed.  A daemon
 * taking over keeps the number of a RELEASING record with a placeholder
 * and reopens nothing there: the kernel resends that RELEASE, which
 * frees it, and no open of the new daemon may take the number meanwhile
 * (the resent RELEASE would close that open's descriptor).  A RELEASE
 * answered just before the death is not resent: its number stays taken
 * until the mount ends (one descriptor).
 */
enum { SAVED_OPEN_FREE, SAVED_OPEN_FILE, SAVED_OPEN_DIR, SAVED_OPEN_RELEASING };

struct saved_open {
	uint32_t node;           /* node id */
	uint32_t flags;          /* the open's flags */
	int32_t backing_id;      /* passthrough backing id, 0: none */
	uint8_t kind;            /* SAVED_OPEN_* */
	uint8_t pt_mode;         /* passthrough.c's mode of the open */
	uint16_t pad;
};

/* A user's change of a file with state, answered, not yet committed. */
struct saved_claim {
	uint64_t ino;            /* the store file */
	uint64_t start, end;     /* bytes made present (the user's), or none */
	uint64_t size;           /* the file's size after the change */
	uint64_t batch;          /* the writer's batch that commits it */
	uint32_t node;           /* its node id */
	uint32_t flags;          /* SAVED_CLAIM_*: no range then */
};
#define SAVED_CLAIM_MADE 1u      /* made on the mount */
#define SAVED_CLAIM_SETFLAG 2u   /* the row's flags in start set (pin, stale)... */
#define SAVED_CLAIM_CLEARFLAG 4u /* ...or cleared (unpin) */

/*
 * A pre-content event read from the group and not answered yet
 * (backend=fanotify), at its descriptor number: written by the reader
 * before the event is handed on, freed (state 0) after its answer was
 * written and before its descriptor is closed.  handle_bytes 0: the
 * file could not be named; the next daemon denies that event.
 */
struct saved_fan_event {
	uint32_t state;          /* SAVED_FAN_READ, or 0: free */
	int32_t pid;             /* the reader's */
	uint64_t off, count;     /* the range */
	int32_t handle_type;     /* the file's handle (name_to_handle_at()) */
	uint32_t handle_bytes;
	unsigned char handle[SAVED_FAN_HANDLE];
};
#define SAVED_FAN_READ 1u
#define SAVED_FAN_NOT_KEPT (-1) /* handle_type: its number was taken (saved_reserve()) */
_Static_assert(sizeof(struct saved_fan_event) == 128, "two records a cache line pair");

/*
 * A hook connected to the last daemon (kind 0: the record is free).
 * When the hooks to remember do not fit, the last record stands for
 * those that did not (kind SAVED_HOOK_LOST, no name, mask: all their
 * subscriptions): the next daemon cannot ask them by name, so their
 * events wait for it and fail at the timeout; none goes on unasked.
 */
struct saved_hook {
	char name[SAVED_HOOK_NAME];
	uint32_t kind;           /* HSMFS_KIND_*, or SAVED_HOOK_LOST */
	uint32_t mask;           /* its subscriptions */
};
#define SAVED_HOOK_LOST 0x100u   /* no HELLO has this kind */

enum { SAVED_OP_BEGUN = 1, SAVED_OP_DONE = 2 };

struct saved_op {
	uint64_t unique;         /* request id, resend bit clear; 0: free */
	uint64_t aux;            /* the operation's (a rename: the file it moves) */
	uint32_t opcode;
	int32_t result;          /* when done: 0 or -errno */
	uint32_t state;          /* SAVED_OP_* */
	uint32_t pad;
};

/*
 * Map the region: fd from the keeper (-1: an anonymous one, no keeper).
 * Returns 0 or -errno.  *ret_fresh: nothing was saved in it before (a
 * first daemon).
 */
int saved_open_region(int fd, bool *ret_fresh);
void saved_close_region(void);
/* Make a region for a keeper to hold: a memfd, or -errno. */
int saved_make(void);

struct saved_head *saved_head(void);
/* Records by index; NULL past the maximum. */
struct saved_node *saved_node(uint32_t id);
char *saved_name_cell(uint32_t cell);
struct saved_open *saved_open_rec(int fd);
struct saved_op *saved_journal(void);
/* In the keeper: a daemon of pid started (serving_pid, and remembered). */
void saved_daemon_started(uint32_t pid);
/*
 * Was pid the keeper's or one of its last SAVED_PIDS daemons'?  What a
 * dead daemon changed is still reported after its death (fan.c asks
 * this of the changes queued before it started only: a dead daemon's
 * pid may be a user's process later).
 */
bool saved_daemon_pid(uint32_t pid);

/* The fanotify event record at descriptor number fd; NULL past the maximum. */
struct saved_fan_event *saved_fan_event(int fd);
/* The hooks table, SAVED_HOOKS records; NULL with no region mapped. */
struct saved_hook *saved_hooks(void);
/* The claim at ring position i (any i: taken modulo SAVED_CLAIMS). */
struct saved_claim *saved_claim(uint64_t i);
/*
 * An open record at descriptor fd made (its other fields written first)
 * or freed: its kind stored, the high-water mark raised (any thread).
 */
void saved_open_set(struct saved_open *r, int fd, uint8_t kind);

/*
 * A daemon taking over, before it opens anything: every descriptor
 * number the last daemon had a handle or an unanswered fanotify event
 * at is taken by a placeholder (a directory: reads and writes of it
 * fail, never wrong bytes), so that nothing this daemon opens lands
 * there; ops_adopt_opens() then reopens each handle in its place, and
 * fan.c answers each event by its number.  The number taken, or -errno.
 */
int saved_reserve(void);

/* The name of a node record, copied to buf (SAVED_NAME_CELL bytes); its length. */
size_t saved_node_name(const struct saved_node *r, char *buf);

#endif
