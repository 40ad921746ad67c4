/*
 * ops.h - the FUSE low-level operations: a passthrough to the store.
 *
 * Every request gets exactly one reply.  Each operation is split into
 * do_* workers that return 0 or -errno and never reply, and the handler
 * that turns their result into the one reply, or parks the request on
 * the engine, whose continuation then makes it (ops-int.h says the rule
 * and where each operation lives).  Every store access is relative to a
 * descriptor below the store root (no absolute paths, O_NOFOLLOW /
 * AT_SYMLINK_NOFOLLOW on the last component), so nothing outside the
 * store is ever reached, and STORE/.hsmfs is neither listed nor
 * reachable by name.
 *
 * State: one mount per process; ops_init() must be called once before
 * the session starts.
 */
#ifndef HSMFS_OPS_H
#define HSMFS_OPS_H

#include <stdbool.h>

/*
 * What files below ops.c define has a header of its owner's, so that
 * they need not include this one: the options, the read's reply, the
 * invalidations.
 */
#include "ops-config.h"
#include "ops-file.h"
#include "ops-inval.h"
#include "ops-xattr.h"

struct fuse_lowlevel_ops;
struct fuse_session;

/* Background requests (readahead, async direct I/O) the kernel may send at once. */
#define OPS_MAX_BACKGROUND 256

void ops_init(const struct ops_config *cfg);
/* The session, for cache invalidations (set before the loop starts). */
void ops_set_session(struct fuse_session *se);
/* Has the FUSE session ended (unmounted)?  Any thread. */
bool ops_exiting(void);
/* the engine's view of a request (struct caller, state.h) */
struct caller;
struct front_req;
void ops_caller(struct front_req *r, struct caller *ret);
bool ops_interrupted(struct front_req *r);
/* Free what ops keeps between requests (the read reply buffers); at exit. */
void ops_shutdown(void);
const struct fuse_lowlevel_ops *ops_table(void);
/* hsmfsctl restart: end the loop, to hand over (keeper.h); asked since? */
void ops_handover(void);
bool ops_handover_asked(void);
unsigned long ops_table_size(void);

#endif
