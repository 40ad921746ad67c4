/*
 * ctl.h - what hsmfsctl's command files share: the exit codes, and each
 * file's commands (main() in hsmfsctl.c dispatches to them).
 *
 * Exit codes: 0 success; 1 usage; 2 bad input (manifest); 3 the store or
 * mount cannot be used; 4 an operation failed part way (or was not done
 * within the time it was given).
 */
#ifndef HSMFS_CTL_H
#define HSMFS_CTL_H

#include <stdbool.h>

enum { X_OK_ = 0, X_USAGE = 1, X_INPUT = 2, X_STORE = 3, X_PARTIAL = 4 };

/*
 * hsmfsctl.c: the hsmfs mount path is on: its root in ret_mnt (a real
 * path), and path's own path below it in ret_rel ("" or ending in '/').
 * 0, or -1: not on an hsmfs mount.
 */
int mount_of(const char *path, char *ret_mnt, size_t mlen, char *ret_rel, size_t rlen);

/* archive.c: archive, resolve, sync, unmount, and status -s STORE */
int cmd_archive(int argc, char **argv, bool resolve);
int cmd_sync(int argc, char **argv);
int cmd_unmount(int argc, char **argv);
int cmd_status_store(const char *store);

#endif
