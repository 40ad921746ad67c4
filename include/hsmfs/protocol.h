/*
 * hsmfs/protocol.h - the hook wire protocol.  Public, append-only.
 *
 * A hook connects a SOCK_SEQPACKET Unix socket to the mount (its path is
 * the value of the read-only xattr "user.hsmfs.socket" of the mount's
 * root directory).  Every packet is one frame:
 *
 *   u32 len    total frame length in bytes, header included
 *   u16 type   HSMFS_MSG_*
 *   u16 flags  0 unless a message says otherwise
 *   ...        the message body, fields in the order listed below
 *
 * All integers are little-endian.  A string is a u16 byte length then
 * that many bytes (no NUL).  A frame is at most HSMFS_MAX_FRAME bytes; a
 * receiver rejects a frame whose len disagrees with the packet size,
 * exceeds the maximum, is shorter than its message, or has bytes left
 * over.  Message type numbers, event bits and error codes are never
 * renumbered or reused; new ones are only added.  hsmfs-hooks(7) is the
 * full specification.
 *
 * Conversation:
 *   hook  -> HELLO    (first frame, always)
 *   hsmfs -> WELCOME  (or ERROR and close)
 *   hsmfs -> EVENT ...   hook -> ANSWER / PROGRESS / FILLED ...
 *   hsmfs -> CANCEL   (the event timed out or nobody waits any more)
 */
#ifndef HSMFS_PROTOCOL_H
#define HSMFS_PROTOCOL_H

#include <stdint.h>

#define HSMFS_PROTO_VERSION 7      /* the newest version this header describes */
#define HSMFS_MAX_FRAME 65536      /* largest frame either side sends */
#define HSMFS_HDR_SIZE 8
#define HSMFS_MAX_NAME 255         /* hook name in HELLO */
#define HSMFS_MAX_PATH 4096        /* path strings */
#define HSMFS_MAX_STATS 16384      /* STATS' counters */

/*
 * Not a frame: the exit status of a hook started by -o hook= with
 * HSMFS_PROBE=1 in its environment that cannot serve the mount (its
 * origin cannot be listed...).  Exiting with it before HELLO, after one
 * line on standard error, fails a mount that is not ready yet with that
 * line (hsmfs-hooks(7), HSMFS_PROBE).  EX_CONFIG of sysexits.h.
 */
#define HSMFS_HOOK_REFUSED 78

/* Message types. */
enum hsmfs_msg {
	HSMFS_MSG_HELLO = 1,    /* hook -> hsmfs */
	HSMFS_MSG_WELCOME = 2,  /* hsmfs -> hook */
	HSMFS_MSG_EVENT = 3,    /* hsmfs -> hook, may carry a descriptor */
	HSMFS_MSG_ANSWER = 4,   /* hook -> hsmfs */
	HSMFS_MSG_PROGRESS = 5, /* hook -> hsmfs */
	HSMFS_MSG_CANCEL = 6,   /* hsmfs -> hook */
	HSMFS_MSG_ERROR = 7,    /* hsmfs -> hook, then the socket closes */
	HSMFS_MSG_FILLED = 8,   /* hook -> hsmfs, version 5: part of a fill
				 * is written, final, and may be read now */
	HSMFS_MSG_ARCHIVED = 9, /* hook -> hsmfs, version 6: an ARCHIVE event's
				 * snapshot is at the origin as this version */
	HSMFS_MSG_STATS = 10,   /* hook -> hsmfs, version 7: the hook's own
				 * counters, for hsmfsctl stats */
};

/* Hook kinds (HELLO). */
enum hsmfs_kind {
	HSMFS_KIND_FILL = 1,  /* provides content: gets PRE_ACCESS with a descriptor */
	HSMFS_KIND_WATCH = 2, /* observes and may veto */
};

/* Event types; a subscription mask is the OR of (1 << type). */
enum hsmfs_event_type {
	HSMFS_EV_PRE_ACCESS = 1, /* bytes about to be read are missing */
	HSMFS_EV_PRE_MODIFY = 2, /* bytes or size about to change */
	HSMFS_EV_OPEN_PERM = 3,  /* version 2: a file is about to be opened,
				  * present or not; start holds the open(2)
				  * flags, end is 0 */
	HSMFS_EV_ACCESS_PERM = 4, /* version 3: bytes [start, end) of a file
				   * are about to be read, present or not */
	HSMFS_EV_PRE_DIR = 5,    /* version 4: the names of a directory not
				  * listed yet are about to be looked at.
				  * A fill hook gets a descriptor of an empty
				  * file, writes the listing into it (JSON
				  * Lines, one entry each, hsmfs-hooks(7)) and
				  * allows; origin is the directory's listing
				  * origin, start and end are 0 */
	HSMFS_EV_PRE_LOOKUP = 6, /* version 4, opt-in: one name (the last
				  * component of path) of a directory not
				  * listed yet is looked up; as PRE_DIR, the
				  * hook writes that name's one entry, or
				  * nothing (no such name), and allows */
	HSMFS_EV_ARCHIVE = 7,    /* version 6: a file changed or made on the
				  * mount goes to its origin.  An archive
				  * (fill) hook gets a read-only descriptor
				  * of a stable snapshot of its bytes
				  * (file_size of them), path, the recorded
				  * origin and version ("" for a file the
				  * origin never had), and start: the
				  * snapshot's mode (permission bits), end:
				  * its mtime (seconds).  It uploads,
				  * conditional on the version, sends
				  * ARCHIVED with the new version and
				  * allows; DENY ESTALE: a conflict (the
				  * origin's object is not the recorded
				  * version) */
	HSMFS_EV_ARCHIVE_NAME = 8, /* version 6: a name changed on the mount
				  * goes to the origin, with no descriptor.
				  * start 1, a removal: path is the path
				  * the file had, origin and version its
				  * object's; start 2, a rename: path is
				  * the new path, origin and version the
				  * object's now.  The hook removes or
				  * moves the object (conditional on the
				  * version), says ARCHIVED for a rename
				  * (the object's version and URL now) and
				  * allows; an object gone already is
				  * done; DENY ESTALE: a conflict */
};
#define HSMFS_MASK(ev) (1u << (ev))
/* the events of version 1 (what "all" meant then, and still means) */
#define HSMFS_MASK_ALL (HSMFS_MASK(HSMFS_EV_PRE_ACCESS) | \
			HSMFS_MASK(HSMFS_EV_PRE_MODIFY))
/* the events a hook that negotiated version 2 may subscribe to */
#define HSMFS_MASK_V2 (HSMFS_MASK_ALL | HSMFS_MASK(HSMFS_EV_OPEN_PERM))
/* ... version 3 */
#define HSMFS_MASK_V3 (HSMFS_MASK_V2 | HSMFS_MASK(HSMFS_EV_ACCESS_PERM))
/* ... version 4 */
#define HSMFS_MASK_V4 (HSMFS_MASK_V3 | HSMFS_MASK(HSMFS_EV_PRE_DIR) | \
		       HSMFS_MASK(HSMFS_EV_PRE_LOOKUP))

/* ... version 6 */
#define HSMFS_MASK_V6 (HSMFS_MASK_V4 | HSMFS_MASK(HSMFS_EV_ARCHIVE) | \
		       HSMFS_MASK(HSMFS_EV_ARCHIVE_NAME))
/* ARCHIVE_NAME's kinds (its start) */
#define HSMFS_NAME_REMOVED 1
#define HSMFS_NAME_RENAMED 2
#define HSMFS_NAME_MKDIR 3   /* a directory made on the mount (path; no origin) */
#define HSMFS_NAME_RMDIR 4   /* a directory removed: gone at the origin if empty there */

/* ANSWER verdicts and flags. */
enum hsmfs_verdict { HSMFS_ALLOW = 0, HSMFS_DENY = 1 };
#define HSMFS_ANSWER_QUIET 0x1 /* PRE_MODIFY: no more for this file */

/* EVENT flags. */
#define HSMFS_EVENT_HAS_FD 0x1 /* a store descriptor came with the frame */
#define HSMFS_EVENT_OVERWRITE 0x2 /* ARCHIVE: unconditional (hsmfsctl resolve
				   * --keep-local): the local bytes replace
				   * whatever the origin holds */
#define HSMFS_EVENT_NEW 0x4       /* ARCHIVE: made on the mount, the origin
				   * never had it (If-None-Match: *) */

/* CANCEL reasons. */
enum hsmfs_cancel {
	HSMFS_CANCEL_TIMEOUT = 1,     /* it ran out of time */
	HSMFS_CANCEL_INTERRUPTED = 2, /* every process waiting was interrupted */
	HSMFS_CANCEL_CLOSED = 3,      /* asked ahead of a file's readers, and the
				       * file's last open closed */
};

/* ERROR codes (why hsmfs closes a connection). */
enum hsmfs_error {
	HSMFS_ERR_VERSION = 1,   /* no common protocol version */
	HSMFS_ERR_MALFORMED = 2, /* bad length, short or trailing bytes */
	HSMFS_ERR_UNKNOWN = 3,   /* unknown message type */
	HSMFS_ERR_STATE = 4,     /* message not valid now (before HELLO, ...) */
	HSMFS_ERR_DENIED = 5,    /* peer not allowed (uid) */
	HSMFS_ERR_UNSUPPORTED = 6, /* an event of the mask this mount cannot raise */
};

/*
 * Bodies, in wire order:
 *
 * HELLO:    u32 version_min, u32 version_max, u32 kind, u32 mask,
 *           (the version used is the highest both sides speak, sent
 *           back in WELCOME; bits of events newer than it are ignored)
 *           string name, string subtree ("" = whole mount)
 * WELCOME:  u32 version, u32 max_frame, u32 chunk, u32 timeout_ms
 * EVENT:    u64 id, u32 type, u32 pid, u32 uid, u32 gid, u64 file_id,
 *           u64 file_size, u64 start, u64 end, u64 hint_start,
 *           u64 hint_end, string path, string origin, string version
 *           (flags: HSMFS_EVENT_HAS_FD)
 * ANSWER:   u64 id, u32 verdict, u32 error (an errno, for DENY),
 *           u64 filled_start, u64 filled_end (ALLOW of PRE_ACCESS;
 *           0, 0 for other events)
 *           (flags: HSMFS_ANSWER_QUIET)
 * PROGRESS: u64 id, u64 bytes_done
 * FILLED:   u64 id, u64 filled_start, u64 filled_end (version 5; a
 *           PRE_ACCESS event's fill hook, before its ANSWER)
 * ARCHIVED: u64 id, string version, string origin (version 6; an
 *           ARCHIVE event's archive hook, before its ALLOW: the
 *           snapshot is at the origin as version, at origin; origin ""
 *           keeps the recorded one)
 * STATS:    string counters (version 7; any time after WELCOME: the
 *           hook's own counters, replacing those it sent before, one a
 *           line: name{label="value",...} number, Prometheus' text form
 *           with no comments; a name of [a-z_][a-z0-9_]*, at most
 *           HSMFS_MAX_STATS bytes in all)
 * CANCEL:   u64 id, u32 reason
 * ERROR:    u32 code, string message
 */

#endif
