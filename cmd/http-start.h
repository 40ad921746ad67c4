/*
 * http-start.h - what hsmfs-http asks of its origin outside any event:
 *  - probe_origin(): at the mount's first start (HSMFS_PROBE=1), does the
 *    origin's root answer as a listing?  false, said on standard error,
 *    when it does not (the mount then fails with that line);
 *  - journal_start(): with s3, the journal of multipart uploads opened
 *    (http-journal.h), and the uploads the last process began and never
 *    ended aborted (http-multipart.h);
 *  - probe_conditions(): does the origin honour conditional PUTs
 *    (http_conditions_probe())?  Into cfg.honoured.
 * Each asks on a blocking easy handle of its own (setup_handle()).
 *
 * Shares nothing.  probe_origin() and journal_start() are main()'s,
 * before any thread starts; probe_conditions() runs once, under the
 * listers' pthread_once (http-lister.c), the one writer of cfg.honoured
 * once the threads run.
 */
#ifndef HSMFS_HTTP_START_H
#define HSMFS_HTTP_START_H

#include <stdbool.h>

bool probe_origin(void);
void journal_start(void);
void probe_conditions(void);

#endif
