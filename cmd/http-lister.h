/*
 * http-lister.h - hsmfs-http's listers: cfg.connections threads, each
 * taking jobs off lists (http-queue.h) one at a time, each on a blocking
 * easy handle of its own (setup_handle(): the listers share their
 * connections): a PRE_DIR or a PRE_LOOKUP (http-list.h); an ARCHIVE
 * (http-archive.h) or an ARCHIVE_NAME (http-names.h), retried with
 * backoff on a server error or a lost connection.  Each event is
 * answered to the mount.  Before the first archive to an http(s) origin,
 * the origin is asked once whether it honours conditional PUTs
 * (probe_conditions(), http-start.h).  lister() returns once the events
 * are done and lists is empty.
 *
 * Shares nothing but lister(), the threads' function.  It takes qlock
 * only to wait for a job and take it; a job is then the lister's alone.
 */
#ifndef HSMFS_HTTP_LISTER_H
#define HSMFS_HTTP_LISTER_H

void *lister(void *arg);

#endif
