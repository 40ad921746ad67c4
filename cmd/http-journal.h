/*
 * http-journal.h - hsmfs-http's journal of S3 multipart uploads, so that
 * one a kill or a crash leaves unfinished is aborted by the next start
 * (its parts are kept, and paid for, until then).
 *
 * One file (http_journal_open()), made at the first upload: "B ID URL"
 * once an upload is created, synced before its parts go; "E ID" once it
 * is completed or aborted.  It is emptied whenever no upload is
 * unfinished.  At a start, http_journal_leftovers() gives the uploads
 * the last process began and never ended; once the caller has aborted
 * them, http_journal_settled(left) removes the file (left == 0) or keeps
 * it for the next start.  One process uses a file at a time (hsmfs-http
 * names it after its mount point and origin).
 *
 * Locking: one internal mutex; every function may be called from any
 * thread, and may block (write, fdatasync).  Nothing here logs: errors
 * are returned.
 */
#ifndef HSMFS_HTTP_JOURNAL_H
#define HSMFS_HTTP_JOURNAL_H

#include <stddef.h>

/* Journal to path from now on (no file is made yet).  0 or an errno. */
int http_journal_open(const char *path);
/* An upload was created: 0 (journalled and synced, or no journal) or an errno. */
int http_journal_begun(const char *url, const char *id);
/* It was completed or aborted: 0 or an errno. */
int http_journal_ended(const char *id);
/*
 * The uploads begun and never ended in the file as it is: *ret_urls and
 * *ret_ids, n of each (free each and the arrays).  0 (none: NULLs, 0) or
 * an errno.
 */
int http_journal_leftovers(char ***ret_urls, char ***ret_ids, size_t *ret_n);
/* The leftovers are settled but left of them: the file goes if none. 0 or an errno. */
int http_journal_settled(unsigned left);

#endif
