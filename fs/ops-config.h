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
	double negative_timeout; /* seconds the kernel may cache ENOENT */
	bool writeback;          /* ask for the kernel writeback cache */
	bool passthrough;        /* pass resident files through (passthrough.h) */
	bool default_perms;      /* the kernel checks permissions: it may
				  * enforce POSIX ACLs too */
	bool cold_direct;        /* read-only opens of files with bytes missing
				  * bypass the page cache (FOPEN_DIRECT_IO) */
};

#endif
