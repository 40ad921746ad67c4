/*
 * hsmfsctl - control an hsmfs store or mount.
 *
 *   hsmfsctl import (-s STORE | -m MOUNTPOINT) MANIFEST|- | --listing URL [--sync]
 *   hsmfsctl status [--json] PATH...
 *   hsmfsctl watch [--json] MOUNTPOINT
 *   hsmfsctl hooks [--json] MOUNTPOINT
 *   hsmfsctl stats [--json | --prometheus [--textfile DIR]] MOUNTPOINT
 *   hsmfsctl restart MOUNTPOINT
 *   hsmfsctl evict|pin|unpin|prefetch PATH...
 *   hsmfsctl refresh [--recursive] DIR... | -s STORE
 *   (each command's file is in ctl/: ctl.h)
 *
 * Exit codes: ctl.h.
 */
#include <stdio.h>
#include <string.h>

#include "ctl/ctl.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: hsmfsctl import (-s STORE | -m MOUNTPOINT) (MANIFEST|- | --listing URL\n"
"                       [--s3 [--aws-sigv4 PROVIDER1:PROVIDER2:REGION:SERVICE]\n"
"                       [--aws-keys-file FILE] [--page-size N]] [--sync])\n"
"       hsmfsctl status [--json] PATH... | -s STORE\n"
"       hsmfsctl watch [--json] MOUNTPOINT\n"
"       hsmfsctl hooks [--json] MOUNTPOINT\n"
"       hsmfsctl stats [--json | --prometheus [--textfile DIR]] MOUNTPOINT\n"
"       hsmfsctl doctor [--json] MOUNTPOINT\n"
"       hsmfsctl set-origin -s STORE FROM TO\n"
"       hsmfsctl restart MOUNTPOINT\n"
"       hsmfsctl evict [--range START-END] PATH...\n"
"       hsmfsctl pin|prefetch [--jobs N] PATH...\n"
"       hsmfsctl unpin PATH...\n"
"       hsmfsctl refresh [--recursive] DIR... | -s STORE\n"
"       hsmfsctl archive [--recursive] [--timeout SECONDS] PATH...\n"
"       hsmfsctl sync [--timeout SECONDS] MOUNTPOINT\n"
"       hsmfsctl unmount [--timeout SECONDS] [--lazy] MOUNTPOINT\n"
"       hsmfsctl resolve --keep-local|--take-origin PATH...\n"
"       hsmfsctl -h|--help | -V|--version\n"
"\n"
"import  create placeholders from a JSON Lines manifest (one object per\n"
"        file: path, size, and optional mtime, mode, url, version, sha256),\n"
"        or from an origin's nginx JSON autoindex (recursively) or S3 bucket,\n"
"        which is recorded for refresh; --sync also removes what it no longer has\n"
"status  per-file state and present bytes of paths in a mount, with totals;\n"
"        with -s, the files and names of an unmounted store not at the origin\n"
"watch   print the events of a mount as they happen (and allow them)\n"
"hooks   list the hooks connected to a mount\n"
"stats   cache size and limits, evictions, hits, misses, fill latency; in\n"
"        Prometheus' text format with --prometheus, or into DIR/hsmfs-*.prom\n"
"        for node_exporter's textfile collector with --textfile\n"
"doctor  is a mount healthy? its daemon, hooks, origin, cache and conflicts\n"
"set-origin  the origin moved: URLs that begin with FROM begin with TO (unmounted)\n"
"evict   drop fetched bytes of clean files (they are fetched again on access)\n"
"pin     fetch files completely and keep them (never evicted); unpin undoes\n"
"prefetch  fetch files or trees now, N files at a time (default 4), with progress\n"
"refresh list directories again from their origin: new names appear, removed\n"
"        ones go, changed files become placeholders of the new version; trees\n"
"        imported with --listing (of a mount, or with -s of a whole store) are\n"
"        listed again the same way; what a user changed stays, and is said\n"
"archive send changed and new files to their origin now (exit 0: all there)\n"
"sync    archive every changed file of a mount and wait for them\n"
"unmount sync (for 60 s at most: --timeout), unmount, and say whether every\n"
"        change reached the origin (exit 0) or which did not (exit 4)\n"
"resolve settle a conflict: the local bytes replace the origin's (--keep-local),\n"
"        or the origin's replace them (--take-origin: the local change is lost)\n"
"See hsmfsctl(1).\n");
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? X_USAGE : 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("hsmfsctl %s\n", HSMFS_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "import"))
		return cmd_import(argc - 1, argv + 1);
	if (!strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	if (!strcmp(argv[1], "watch"))
		return cmd_watch(argc - 1, argv + 1);
	if (!strcmp(argv[1], "hooks"))
		return cmd_hooks(argc - 1, argv + 1);
	if (!strcmp(argv[1], "refresh"))
		return cmd_refresh(argc - 1, argv + 1);
	if (!strcmp(argv[1], "archive"))
		return cmd_archive(argc - 1, argv + 1, false);
	if (!strcmp(argv[1], "resolve"))
		return cmd_archive(argc - 1, argv + 1, true);
	if (!strcmp(argv[1], "sync"))
		return cmd_sync(argc - 1, argv + 1);
	if (!strcmp(argv[1], "unmount"))
		return cmd_unmount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stats"))
		return cmd_stats(argc - 1, argv + 1);
	if (!strcmp(argv[1], "doctor"))
		return cmd_doctor(argc - 1, argv + 1);
	if (!strcmp(argv[1], "set-origin"))
		return cmd_set_origin(argc - 1, argv + 1);
	if (!strcmp(argv[1], "restart"))
		return cmd_restart(argc - 1, argv + 1);
	if (!strcmp(argv[1], "evict") || !strcmp(argv[1], "pin") ||
	    !strcmp(argv[1], "unpin") || !strcmp(argv[1], "prefetch"))
		return cmd_act(argv[1], argc - 1, argv + 1);
	fprintf(stderr, "hsmfsctl: unknown command '%s' (see hsmfsctl --help)\n", argv[1]);
	return X_USAGE;
}
