/*
 * hsmfsctl - control an hsmfs store or mount: main() and the table of its
 * commands.  Each command's code is in ctl/ (ctl.h says which file).
 *
 * The table is here, beside main(), and not in ctl/: it is the program's
 * own list of what it offers, read by main() and usage() only, and no
 * command file calls back into it, so the calls go one way, from this
 * file to ctl/.  --help is made from it: each command's synopsis line(s)
 * in table order, then each one's paragraph, the text hsmfsctl(1)'s
 * SYNOPSIS and the bash completion must agree with
 * (tests/integ/t0493-ctl-commands.py checks the three name the same
 * commands).
 *
 * Exit codes: ctl.h.  An unknown command, or a wrong number of words
 * after one, is X_USAGE.
 */
#include <stdio.h>
#include <string.h>

#include "ctl/ctl.h"

/*
 * One command.  min_args and max_args bound the number of words after its
 * name (-1: any number); they are checked before run is called, and only
 * where a command of that many words has one answer, so that a wrong
 * count is told exactly as the command itself tells it: "hsmfsctl: NAME
 * needs NEEDS".  The rest (an option without its value, only options and
 * no path) each command checks itself.
 */
struct command {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is name */
	int min_args, max_args;
	const char *needs;     /* what a wrong count is told */
	/*
	 * --help's synopsis: what follows "hsmfsctl NAME ", a line each
	 * ('\n'), the later ones lined up under the first; NULL: this
	 * command shares the synopsis of the one before it, and is named
	 * beside it ("pin|prefetch").
	 */
	const char *synopsis;
	/* --help's paragraph after the name, a line each; NULL: none */
	const char *help;
};

static const struct command commands[] = {
	{ "import", cmd_import, 1, -1,
	  "a manifest or --listing URL, and one of -s STORE or -m MOUNTPOINT",
	  "(-s STORE | -m MOUNTPOINT) (MANIFEST|- | --listing URL\n"
	  "[--s3 [--aws-sigv4 PROVIDER1:PROVIDER2:REGION:SERVICE]\n"
	  "[--aws-keys-file FILE] [--page-size N]] [--sync])",
	  "create placeholders from a JSON Lines manifest (one object per\n"
	  "file: path, size, and optional mtime, mode, url, version, sha256),\n"
	  "or from an origin's nginx JSON autoindex (recursively) or S3 bucket,\n"
	  "which is recorded for refresh; --sync also removes what it no longer has" },
	{ "status", cmd_status, 1, -1, "at least one PATH",
	  "[--json] PATH... | -s STORE",
	  "per-file state and present bytes of paths in a mount, with totals;\n"
	  "with -s, the files and names of an unmounted store not at the origin" },
	{ "watch", cmd_watch, 1, -1, "a MOUNTPOINT",
	  "[--json] MOUNTPOINT",
	  "print the events of a mount as they happen (and allow them)" },
	{ "hooks", cmd_hooks, 1, -1, "one MOUNTPOINT",
	  "[--json] MOUNTPOINT",
	  "list the hooks connected to a mount" },
	{ "stats", cmd_stats, 1, -1, "one MOUNTPOINT",
	  "[--json | --prometheus [--textfile DIR]] MOUNTPOINT",
	  "cache size and limits, evictions, hits, misses, fill latency; in\n"
	  "Prometheus' text format with --prometheus, or into DIR/hsmfs-*.prom\n"
	  "for node_exporter's textfile collector with --textfile" },
	{ "doctor", cmd_doctor, 1, -1, "one MOUNTPOINT",
	  "[--json] MOUNTPOINT",
	  "is a mount healthy? its daemon, hooks, origin, cache and conflicts" },
	{ "set-origin", cmd_set_origin, 4, 4, "-s STORE FROM TO",
	  "-s STORE FROM TO",
	  "the origin moved: URLs that begin with FROM begin with TO (unmounted)" },
	{ "restart", cmd_restart, 1, 1, "one MOUNTPOINT",
	  "MOUNTPOINT", NULL },
	{ "evict", cmd_act, 1, -1, "at least one PATH",
	  "[--range START-END] PATH...",
	  "drop fetched bytes of clean files (they are fetched again on access)" },
	{ "pin", cmd_act, 1, -1, "at least one PATH",
	  "[--jobs N] PATH...",
	  "fetch files completely and keep them (never evicted); unpin undoes" },
	{ "prefetch", cmd_act, 1, -1, "at least one PATH",
	  NULL,
	  "fetch files or trees now, N files at a time (default 4), with progress" },
	{ "unpin", cmd_act, 1, -1, "at least one PATH",
	  "PATH...", NULL },
	{ "refresh", cmd_refresh, 1, -1, "a directory",
	  "[--recursive] DIR... | -s STORE",
	  "list directories again from their origin: new names appear, removed\n"
	  "ones go, changed files become placeholders of the new version; trees\n"
	  "imported with --listing (of a mount, or with -s of a whole store) are\n"
	  "listed again the same way; what a user changed stays, and is said" },
	{ "archive", cmd_archive, 1, -1, "a path",
	  "[--recursive] [--timeout SECONDS] PATH...",
	  "send changed and new files to their origin now (exit 0: all there)" },
	{ "sync", cmd_sync, 1, 3, "a mount point (and --timeout SECONDS at most)",
	  "[--timeout SECONDS] MOUNTPOINT",
	  "archive every changed file of a mount and wait for them" },
	{ "unmount", cmd_unmount, 1, -1, "a mount point (and --timeout SECONDS, --lazy)",
	  "[--timeout SECONDS] [--lazy] MOUNTPOINT",
	  "sync (for 60 s at most: --timeout), unmount, and say whether every\n"
	  "change reached the origin (exit 0) or which did not (exit 4)" },
	{ "resolve", cmd_resolve, 1, -1,
	  "one of --keep-local (the local bytes go to the origin) and --take-origin "
	  "(the origin's replace them)",
	  "--keep-local|--take-origin PATH...",
	  "settle a conflict: the local bytes replace the origin's (--keep-local),\n"
	  "or the origin's replace them (--take-origin: the local change is lost)" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* text's lines, the first as it is, each later one after indent spaces */
static void put_lines(FILE *f, const char *text, int indent)
{
	for (const char *nl; (nl = strchr(text, '\n')); text = nl + 1)
		fprintf(f, "%.*s\n%*s", (int)(nl - text), text, indent, "");
	fprintf(f, "%s\n", text);
}

static void usage(FILE *f)
{
	size_t i, j;

	for (i = 0; i < NCOMMANDS; i++) {
		int width;

		if (!commands[i].synopsis)
			continue; /* named on the line of the one before */
		width = fprintf(f, "%s hsmfsctl %s", i ? "      " : "usage:", commands[i].name);
		for (j = i + 1; j < NCOMMANDS && !commands[j].synopsis; j++)
			width += fprintf(f, "|%s", commands[j].name);
		width += fprintf(f, " ");
		put_lines(f, commands[i].synopsis, width);
	}
	fprintf(f, "       hsmfsctl -h|--help | -V|--version\n\n");
	/* the name, then its paragraph from column 8 (two spaces after a longer name) */
	for (i = 0; i < NCOMMANDS; i++) {
		if (!commands[i].help)
			continue;
		fprintf(f, strlen(commands[i].name) < 8 ? "%-7s " : "%s  ", commands[i].name);
		put_lines(f, commands[i].help, 8);
	}
	fprintf(f, "See hsmfsctl(1).\n");
}

int main(int argc, char **argv)
{
	const struct command *c = NULL;
	int nargs = argc - 2;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? X_USAGE : 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("hsmfsctl %s\n", HSMFS_VERSION);
		return 0;
	}
	for (size_t i = 0; i < NCOMMANDS && !c; i++)
		if (!strcmp(argv[1], commands[i].name))
			c = &commands[i];
	if (!c) {
		fprintf(stderr, "hsmfsctl: unknown command '%s' (see hsmfsctl --help)\n", argv[1]);
		return X_USAGE;
	}
	if (nargs < c->min_args || (c->max_args >= 0 && nargs > c->max_args)) {
		fprintf(stderr, "hsmfsctl: %s needs %s\n", c->name, c->needs);
		return X_USAGE;
	}
	return c->run(argc - 1, argv + 1);
}
