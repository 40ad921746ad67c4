/*
 * fill.h - what a new fill asks for and whether it may start (fill.c):
 * the one place a reader's own fill is sized, and the one admission rule
 * of mounts with cache limits.  How far ahead of a stream to ask (its
 * window) is readahead.c's; each fill there is one chunk's gap.  decide.c (a reader's own fill) and
 * readahead.c (fills ahead of a stream) call it; it calls route.c
 * (fill_span(): whole chunks of a file with chunk digests) and the
 * cache.  Everything here runs with S.lock held (asserted in debug
 * builds); fill_admit() with ADMIT_WAIT drops it while it waits.
 *
 * Sizes:
 *   a reader's own fill  the chunk-aligned gap around its miss, apart
 *                        from what other events fetch; smaller for a
 *                        random reader (first_fill-aligned blocks) and
 *                        a young stream (four times its last fill); the
 *                        first window of a reader from the start, with
 *                        the rest of its chunk beside it;
 *   ahead of a stream    each chunk's missing gap (fill_ahead());
 *   with chunk digests   whole chunks, always (fill_span()).
 *
 * Admission (cache_max, cache_min_free): a fill reserves its
 * page-rounded span before it may write.  A fill nobody waits for (ahead,
 * beside) starts only if it fits now.  A reader's own fill that does
 * not fit waits for the evictor within the mount's timeout (or, parked,
 * goes to the room thread, which waits); if nothing can be evicted it
 * goes ahead past the limit, for as long as the file is open (SPEC 10:
 * a limit of ours never fails a read).
 */
#ifndef HSMFS_FILL_H
#define HSMFS_FILL_H

#include <stdbool.h>
#include <stdint.h>

struct fstate;
struct range;

/* A reader's own fill (fill_size()). */
struct fill_hint {
	uint64_t start, end;  /* the hint: what the hook is asked to fill */
	uint64_t gap_end;     /* where the missing gap around the miss ends */
	bool beside;          /* ask [end, gap_end) beside it, not waited for */
};

/*
 * The fill of the missing range miss of fs, found by the reader's check
 * (first: its first step).  May start a young stream (fs->ra_grow).
 * S.lock held.
 */
void fill_size(struct fstate *fs, const struct range *miss, bool first,
	       struct fill_hint *ret);
/*
 * Does a miss at off go on the stream of fs?  From where its last miss
 * began to one kernel readahead window past what was asked, or up to
 * two windows past where the last read checked ended (a reader that
 * read present bytes up to here goes on; the kernel keeps a window and
 * the next one in flight): the requests of the kernel's windows run on
 * several workers, and the later ones can come first.  S.lock held.
 */
bool in_stream(const struct fstate *fs, uint64_t off);

enum admit {
	ADMIT_NOW,    /* fits now, or not at all (fills nobody waits for) */
	ADMIT_PARKED, /* a parked reader's: fits now, else the room thread */
	ADMIT_WAIT,   /* a waiting reader's: waits, then past the limit */
};

/*
 * Admit a fill of [start, end) of fs (the admission rule above).
 * *reserved holds what this caller reserved and has not handed to an
 * event yet: on 0 it covers the fill (stays 0 on mounts without
 * limits).  *over: this reader's fill went past the limit (ADMIT_WAIT
 * sets it); then nothing more is admitted for it.  Returns 0 (start
 * it), -ENOSPC (ADMIT_NOW: does not fit; nothing reserved), 2
 * (ADMIT_PARKED: does not fit now; queue for the room thread), 1
 * (ADMIT_WAIT: S.lock was dropped to wait: decide again), or -errno.
 * S.lock held.
 */
int fill_admit(struct fstate *fs, uint64_t start, uint64_t end, enum admit how,
	       uint64_t *reserved, bool *over);

#endif
