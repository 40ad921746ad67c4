/*
 * layout.h - where a file's data is, as its user sees it: the answers of
 * lseek(2) SEEK_DATA and SEEK_HOLE, and its st_blocks, for a file whose
 * store copy lacks ranges not fetched yet.
 *
 * Pure module: no I/O of its own and no locks; the store file's own
 * holes are asked through a callback, and the caller serializes access
 * to the present set.
 *
 * The rule (hsmfs(8), "Holes and st_blocks"): a range not present (not
 * fetched yet, or evicted) is data, whatever the store holds there, so
 * that no tool infers zeros from a hole; a hole of the store inside a
 * present range is a real hole, one the user made (a truncate up, a
 * punch, a write past the end) or that the origin's bytes were fetched
 * as.  Where a hole starts is always an offset the store reported as a
 * hole, or the end of the file: reporting data where there is a hole is
 * allowed (lseek(2)), the reverse never.
 */
#ifndef HSMFS_LAYOUT_H
#define HSMFS_LAYOUT_H

#include <stdint.h>

#include "ranges.h"

/*
 * The store file's lseek(off, whence) for SEEK_DATA or SEEK_HOLE: the
 * offset, or -errno (-ENXIO: no data at or after off).
 */
typedef int64_t (*layout_store_seek)(void *arg, uint64_t off, int whence);

/*
 * lseek(off, whence) of a file of size bytes whose present ranges are
 * present, whence SEEK_DATA or SEEK_HOLE: the offset, -ENXIO (off at
 * or past the end, or no data after it), or the callback's -errno.
 * Calls seek at most once a present hole or missing run it crosses.
 */
int64_t layout_seek(const struct rangeset *present, uint64_t size, uint64_t off, int whence,
		    layout_store_seek seek, void *arg);

/*
 * st_blocks as shown: the store's allocation (store_blocks, 512-byte
 * units) plus the bytes of [0, size) not present, in 512-byte units
 * rounded up: what the file occupies once every byte is here, so that
 * a file not fetched yet never shows fewer blocks than its data needs.
 */
uint64_t layout_blocks(const struct rangeset *present, uint64_t size, uint64_t store_blocks);

#endif
