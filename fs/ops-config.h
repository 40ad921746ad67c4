/*
 * ops-config.h - how the FUSE layer answers the kernel: the options
 * main.c hands ops_init() (ops.h).  The ops files read their copy,
 * ops_cfg (ops-int.h), without including ops.h, the top's header.
 */
#ifndef HSMFS_OPS_CONFIG_H
#define HSMFS_OPS_CONFIG_H

#include <stdbool.h>

struct ops_config {
	double entry_timeout;    /* seconds the kernel may cache a name */
	double attr_timeout;     /* seconds the kernel may cache attributes */
	double negative_timeout; /* seconds the kernel may cache ENOENT; -1:
				  * decided at INIT (op_init: entry_timeout
				  * where the kernel can drop every name at
				  * once, else 0) */
	double dir_ttl;          /* names in a directory listed again after
				  * this (dir_ttl=) are cached no longer */
	bool cache_dirs;         /* the kernel keeps directory listings
				  * across opens (not with store_shared) */
	bool writeback;          /* ask for the kernel writeback cache */
	bool passthrough;        /* pass resident files through (passthrough.h) */
	bool default_perms;      /* the kernel checks permissions: it may
				  * enforce POSIX ACLs too */
	bool cold_direct;        /* read-only opens of files with bytes missing
				  * bypass the page cache (FOPEN_DIRECT_IO) */
	bool noatime;            /* reads and listings through the mount leave
				  * the store's access times (ops_store_noatime()) */
	bool nodiratime;         /* listings do */
	bool export;             /* file handles: FUSE_CAP_EXPORT_SUPPORT
				  * (inode.h) */
};

#endif
