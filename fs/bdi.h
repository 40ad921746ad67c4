/*
 * bdi.h - the kernel's readahead window of the mount (readahead=).
 *
 * A FUSE mount's page cache reads ahead through its backing device info
 * (bdi), 128 KiB by default, and a FUSE daemon can only lower that in
 * its INIT reply.  A cold sequential reader has at most one window in
 * flight, so each window costs a round trip through the daemon
 * (doc/benchmarks.md has what larger windows measured).  Root can raise it
 * in /sys/class/bdi/MAJ:MIN/read_ahead_kb, after the kernel has applied
 * the INIT reply; bdi_readahead_start() does that from a thread of its
 * own, which waits for INIT by a statfs(2) of the mount (the kernel
 * holds requests until INIT is answered).  Others cannot: a warning is
 * logged and the mount goes on with the kernel's window.
 *
 * The same window sizes the kernel's read-around of page faults of a
 * mapping without MADV_RANDOM: a larger one fetches more around each
 * fault (hsmfs(8)).
 *
 * Threads: bdi_readahead_start() and bdi_readahead_stop() from the main
 * thread only (stop after the mount is gone: the thread's statfs returns
 * then).  Nothing is shared with other modules.
 */
#ifndef HSMFS_BDI_H
#define HSMFS_BDI_H

#include <stdint.h>

/* Set the window of the mount at mnt to bytes (a multiple of 1024) once
 * the session is up.  0 on start, or -errno. */
int bdi_readahead_start(const char *mnt, uint64_t bytes);
/* Wait for that thread to end (no-op if none was started). */
void bdi_readahead_stop(void);

#endif
