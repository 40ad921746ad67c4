/*
 * route.h - which hooks get an event (route.c): the subscription mask,
 * the targets an event waits for, the round robin of fill hooks and the
 * queue of fills that no fill hook took yet.  S.lock held throughout.
 */
#ifndef HSMFS_ROUTE_H
#define HSMFS_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event;
struct fstate;
struct front_req;
struct hook;
struct inode;
struct proto_event;

/* Is in within h's subtree?  (A fill hook serves only those.) */
bool in_subtree(const struct hook *h, struct inode *in);
/*
 * Must h, which must answer events of its subtree, be asked of in: in
 * is within it, or its path cannot be told (longer than HSMFS_MAX_PATH,
 * or removed while open; the event's path is then empty).  A hook that
 * could not be shown to be out of it is asked.
 */
bool maybe_in_subtree(const struct hook *h, struct inode *in);
/* events_mask from the hooks connected now; subscriptions_changed(). */
void recompute_mask(void);
/*
 * A takeover: the hooks the last daemon had (saved.h) are absent until
 * one of each name and kind connects (absent_joined(), once it has its
 * WELCOME) or timeout seconds pass (absent_expire(), the timer's):
 * their subscriptions count, and an event of theirs waits for them by
 * name, as for a watcher that left (events_hook_left()).  Every
 * connected hook and absent one is written to the saved table as the
 * mask is recomputed, for the daemon after this one.
 */
void absent_load(double timeout);
void absent_joined(const struct hook *h);
void absent_expire(void);
/* Must an absent hook (either kind) answer a permission event of type? */
bool absent_wants(uint32_t type);
/*
 * ev waits for the absent hooks that must answer it: those subscribed
 * to its type, watchers only unless perm (a permission event: either
 * kind).  Each is a target to be named when it connects
 * (events_hook_joined(), as for a watcher that left); one that cannot
 * be named (SAVED_HOOK_LOST, or no memory) is a target nobody answers:
 * the event fails at the timeout.
 */
void wait_absent(struct event *ev, bool perm);
/* The wire form of ev, its path written into path. */
void fill_proto(const struct event *ev, struct proto_event *pe, char *path,
		size_t pathsize);
/* h must answer ev (sent: it took the frame) / target i answered. */
void add_target(struct event *ev, struct hook *h, bool sent);
void remove_target(struct event *ev, unsigned i);
/* Offer every queued fill to the fill hooks again. */
void redispatch_queue(void);
/* Send again what a full socket refused. */
void resend(struct event *ev);
/* Is a fill hook connected / one subscribed to PRE_LOOKUP? */
bool have_fill_hook(void);
bool have_lookup_hook(void);
/*
 * The span a fill of [*start, *end) with hint [*hs, *he) must have: for
 * a file with chunk digests, widened to whole chunks (start_fill() does
 * it; the cache's admission asks for it first).  S.lock held.
 */
void fill_span(const struct fstate *fs, uint64_t *start, uint64_t *end, uint64_t *hs,
	       uint64_t *he);
/*
 * Start a fill of [start, end) with hint [hs, he).  A detached event (a
 * readahead) is started only if a slot is free now, and nobody waits for
 * it unless a reader comes to need its bytes.  Returns the event, or
 * NULL (with *res set unless detached).  A clean file with chunk
 * digests has [start, end) and the hint widened to whole chunks: the
 * hook must fill them whole for the commit to check them.
 */
struct event *start_fill(struct inode *in, struct fstate *fs, uint64_t start,
			 uint64_t end, uint64_t hs, uint64_t he, struct front_req *req,
			 bool detached, uint64_t reserved, int *res);
/*
 * Start the PRE_DIR event of dir (origin: owned by the event from here
 * on, may be NULL): 0 with *ret_ev (one reference, the caller's), or
 * -errno.
 */
int start_listing(struct inode *dir, char *origin, struct front_req *req,
		  struct event **ret_ev);
/*
 * Start the ARCHIVE_NAME event of kind (HSMFS_NAME_*) of path (below the
 * root), of the object origin at version (all owned by the event from
 * here on; the answer's ARCHIVED replaces version in ev->new_version).
 * 0 with *ret_ev (one reference, the caller's), or -errno.
 */
int start_name_archive(uint32_t kind, char *path, char *origin, char *version,
		       struct event **ret_ev);
/* Is an archive hook (fill, subscribed to ARCHIVE) connected for in? */
bool have_archive_hook(struct inode *in);
/*
 * Start the ARCHIVE event of in: fd, a read-only descriptor of the
 * snapshot of size bytes (owned by the event from here on), mode and
 * mtime of it; flags: HSMFS_EVENT_OVERWRITE, HSMFS_EVENT_NEW; path (may
 * be NULL): the path the event names to every hook it is sent to, the one
 * its landing was recorded at (meta.h), whatever the file's name is by
 * then (a rename meanwhile moves the object once the upload ended; a
 * hook that left after it uploaded, and the next one, upload to the same
 * place).  0 with *ret_ev (one reference, the caller's), or -errno.
 */
int start_archive(struct inode *in, int fd, uint64_t size, uint32_t mode, int64_t mtime,
		  uint16_t flags, const char *path, struct event **ret_ev);
/* The same for the PRE_LOOKUP of name in dir (name: owned by the event). */
int start_lookup(struct inode *dir, char *origin, char *name, struct front_req *req,
		 struct event **ret_ev);

#endif
