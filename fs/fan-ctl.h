/*
 * fan-ctl.h - the control socket of a backend=fanotify mount
 * (../lib/ctlsock.h says the frames): hsmfsctl's user.hsmfs.* requests,
 * which no extended attribute carries to this daemon, answered as the
 * FUSE front end answers them (ops-xattr.c) where this front end can:
 * every value a getxattr reads (events_xattr(), the statistics), pin,
 * unpin, stale, evict, and restart (a handover to the next daemon,
 * fan_handover()).  What needs a front end's continuation or an upload
 * (refresh, archive, sync, resolve, reload) is -EOPNOTSUPP, said by
 * hsmfsctl in one line.
 *
 * One thread accepts and answers, one request at a time, each a call
 * into the engine that does not wait on a hook; it takes no lock of
 * fan.c's but through fan_inode_of().
 */
#ifndef HSMFS_FAN_CTL_H
#define HSMFS_FAN_CTL_H

/* Listen at STATE/ctl.sock (state_fd: the store's state directory). 0 or -errno. */
int fan_ctl_start(int state_fd);

/* Stop answering; the socket's name removed. */
void fan_ctl_stop(void);

#endif
