/* Unit tests for fs/opts.c: the daemon's command line. */
#include <errno.h>
#include <string.h>

#include "opts.h"
#include "tap.h"

static int parse(struct hsmfs_opts *o, char *err, int argc, ...)
{
	char *argv[32];
	va_list ap;
	int i;

	va_start(ap, argc);
	argv[0] = "hsmfs";
	for (i = 1; i <= argc; i++)
		argv[i] = va_arg(ap, char *);
	va_end(ap);
	err[0] = '\0';
	return opts_parse(argc + 1, argv, o, err, 256);
}

int main(void)
{
	struct hsmfs_opts o;
	unsigned long long sz;
	char err[256];

	ok(parse(&o, err, 2, "/s", "/m") == 0 && !strcmp(o.store, "/s") &&
		   !strcmp(o.mountpoint, "/m") && !o.foreground &&
		   o.ready_fd == -1 && !strcmp(o.fuse_opts, ""),
	   "plain STORE MNT");
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o",
		 "defaults,_netdev,nofail,noauto,auto,user,users,nouser,x-systemd.automount,x-systemd.idle-timeout=60,comment=x,rw") == 0 &&
		   !strcmp(o.fuse_opts, "rw"),
	   "fstab options ignored, rw passed: '%s'", o.fuse_opts ? o.fuse_opts : "");
	opts_free(&o);

	ok(parse(&o, err, 4, "-o", "ro,fsname=a\\,b", "/s", "/m") == 0 &&
		   o.read_only && !strcmp(o.fuse_opts, "ro,fsname=a,b"),
	   "options before arguments, escaped comma: '%s'",
	   o.fuse_opts ? o.fuse_opts : "");
	opts_free(&o);

	ok(parse(&o, err, 3, "/s", "/m", "-oallow_other") == 0 && o.allow_other &&
		   !strcmp(o.fuse_opts, "allow_other,default_permissions"),
	   "allow_other implies default_permissions: '%s'",
	   o.fuse_opts ? o.fuse_opts : "");
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o", "noatime,nosuid,nodiratime") == 0 &&
		   o.noatime && o.nodiratime &&
		   !strcmp(o.fuse_opts, "nosuid,noatime"),
	   "noatime and nodiratime: the daemon's, noatime the kernel's flag once "
	   "(Debian 12's fusermount3 refuses nodiratime): '%s'",
	   o.fuse_opts ? o.fuse_opts : "");
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o", "noatime,relatime,nodiratime,diratime") == 0 &&
		   !o.noatime && !o.nodiratime && !strcmp(o.fuse_opts, ""),
	   "the last atime option wins; relatime, strictatime and atime go to no one: '%s'",
	   o.fuse_opts ? o.fuse_opts : "");
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o",
		 "ro,relatime,remount,user_id=0,group_id=0,default_permissions,allow_other,dev,suid") == 0 &&
		   o.remount && o.read_only && strstr(o.fuse_opts, "ro,"),
	   "what mount.fuse3 passes for mount -o remount,ro: a remount, read-only");
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o", "backend=fanotify,ro") == 0 && o.fanotify &&
		   o.read_only,
	   "backend=fanotify, read-only");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "backend=fanotify,backend=fuse") == 0 && !o.fanotify,
	   "the last backend= wins");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "backend=nfs") == -EINVAL &&
		   strstr(err, "'backend=nfs' needs 'fuse' or 'fanotify'"),
	   "an unknown backend: '%s'", err);
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "backend=fanotify,archive_after=60") == -EINVAL &&
		   !strcmp(err, "backend=fanotify does not support archive_after yet"),
	   "what backend=fanotify does not do yet is refused, not ignored: '%s'", err);
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "backend=fanotify,dir_ttl=60") == -EINVAL &&
		   !strcmp(err, "backend=fanotify does not support dir_ttl yet"),
	   "dir_ttl too (a listing again, made with no marks): '%s'", err);
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "backend=fanotify,thin,cache_max=1G") == 0 &&
		   o.fanotify && o.thin && o.cache_max == 1ULL << 30,
	   "backend=fanotify takes cache limits with thin");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "backend=fanotify,cache_min_free=10%") == -EINVAL &&
		   strstr(err, "cache_min_free needs thin"),
	   "and refuses them without (every file keeps its blocks): '%s'", err);
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "thin") == -EINVAL &&
		   strstr(err, "'thin' is backend=fanotify's"),
	   "thin on a FUSE mount is refused: '%s'", err);
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o", "user_id=0") == -EINVAL &&
		   strstr(err, "'user_id=0'"),
	   "user_id= is a remount's only: '%s'", err);
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o", "strictatime,atime,noatime") == 0 && o.noatime,
	   "strictatime and atime accepted, noatime after them wins");
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o",
		 "allow_other,no_default_permissions") == 0 &&
		   !strcmp(o.fuse_opts, "allow_other"),
	   "no_default_permissions turns it off");
	opts_free(&o);

	ok(parse(&o, err, 4, "/s", "/m", "-o",
		 "default_permissions,no_default_permissions") == -EINVAL &&
		   strstr(err, "contradict"),
	   "contradiction rejected: %s", err);

	ok(parse(&o, err, 4, "/s", "/m", "-o", "bogus") == -EINVAL &&
		   !strcmp(err, "unknown option 'bogus' (see hsmfs --help)"),
	   "unknown -o option named: %s", err);
	ok(o.store == NULL && o.fuse_opts == NULL, "failed parse leaves zeroed struct");
	opts_free(&o);

	ok(parse(&o, err, 3, "/s", "/m", "--frobnicate") == -EINVAL &&
		   strstr(err, "'--frobnicate'"),
	   "unknown flag named: %s", err);
	ok(parse(&o, err, 1, "/s") == -EINVAL && strstr(err, "missing MOUNTPOINT"),
	   "missing mountpoint: %s", err);
	ok(parse(&o, err, 0) == -EINVAL && strstr(err, "missing STORE"),
	   "missing both: %s", err);
	ok(parse(&o, err, 3, "/s", "/m", "/x") == -EINVAL &&
		   strstr(err, "unexpected argument '/x'"),
	   "third argument: %s", err);
	ok(parse(&o, err, 3, "/s", "/m", "-o") == -EINVAL &&
		   strstr(err, "needs a value"),
	   "-o without a value: %s", err);

	ok(parse(&o, err, 1, "--help") == 0 && o.show_help, "--help without args");
	opts_free(&o);
	ok(parse(&o, err, 1, "-V") == 0 && o.show_version, "-V without args");
	opts_free(&o);

	ok(parse(&o, err, 6, "/s", "/m", "-d", "-s", "--ready-fd", "7") == 0 &&
		   o.debug && o.foreground && o.single_thread && o.ready_fd == 7,
	   "-d implies -f; -s; --ready-fd N");
	opts_free(&o);
	ok(parse(&o, err, 3, "/s", "/m", "--ready-fd=x") == -EINVAL,
	   "--ready-fd=x rejected");

	ok(parse(&o, err, 4, "/s", "/m", "-o",
		 "entry_timeout=2.5,attr_timeout=0,negative_timeout=10,fd_cache=100,max_threads=4,writeback") == 0 &&
		   o.entry_timeout == 2.5 && o.attr_timeout == 0 &&
		   o.negative_timeout == 10 && o.fd_cache == 100 &&
		   o.max_threads == 4 && o.writeback && !strcmp(o.fuse_opts, ""),
	   "hsmfs options parsed, not passed to the kernel");
	opts_free(&o);
	ok(parse(&o, err, 2, "/s", "/m") == 0 && o.progress_floor == 16384,
	   "progress_floor defaults to 16 KiB a second");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "progress_floor=64k") == 0 &&
		   o.progress_floor == 65536,
	   "progress_floor=64k");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "progress_floor=0") == 0 && o.progress_floor == 0,
	   "progress_floor=0: any progress");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "progress_floor=fast") == -EINVAL,
	   "progress_floor=fast refused: %s", err);
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "cache_max=2G,cache_min_free=5%") == 0 &&
		   o.cache_max == 2ULL << 30 && o.cache_min_free_pct == 5 && !o.cache_min_free,
	   "cache_max=2G,cache_min_free=5%%");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "cache_max=1M") == -EINVAL &&
		   !strcmp(err, "cache_max=1048576 is less than two chunks (chunk=1048576): "
				"it needs at least 2097152"),
	   "cache_max below two chunks refused: %s", err);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "cache_max=1M,chunk=256k") == 0,
	   "cache_max=1M with chunk=256k");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "cache_min_free=5%,cache_min_free=512M") == 0 &&
		   o.cache_min_free == 512ULL << 20 && !o.cache_min_free_pct,
	   "cache_min_free=SIZE, the last one wins");
	opts_free(&o);
	{
		static const char *const bad[] = { "cache_max", "cache_max=0",
						   "cache_max=10X", "cache_min_free=0%",
						   "cache_min_free=100%", "cache_min_free=%",
						   "cache_min_free=-1", "cache_min_free" };

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			ok(parse(&o, err, 4, "/s", "/m", "-o", bad[i]) == -EINVAL &&
				   strstr(err, bad[i]) && strstr(err, "needs"),
			   "%s refused: %s", bad[i], err);
			opts_free(&o);
		}
	}
	/* one minimum, said one way, whatever the size given */
	for (const char *const *v = (const char *const[]){ "cache_max=1k", "cache_max=4k", NULL };
	     *v; v++)
		ok(parse(&o, err, 4, "/s", "/m", "-o", *v) == -EINVAL &&
			   strstr(err, "less than two chunks") && strstr(err, "needs at least 2097152"),
		   "%s refused with the two-chunk minimum: %s", *v, err);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "entry_timeout=-1") == -EINVAL &&
		   strstr(err, "entry_timeout=-1"),
	   "negative timeout rejected: %s", err);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "attr_timeout=nan") == -EINVAL,
	   "nan timeout rejected");
	ok(parse(&o, err, 4, "/s", "/m", "-o", "fd_cache=3") == -EINVAL,
	   "fd_cache below minimum rejected");
	ok(parse(&o, err, 2, "/s", "/m") == 0 && o.export_keep == OPTS_EXPORT_KEEP_DEFAULT,
	   "export_keep defaults to %u", OPTS_EXPORT_KEEP_DEFAULT);
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "export_keep=0") == 0 && o.export_keep == 0,
	   "export_keep=0: no handle support");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "export_keep=1048577") == -EINVAL,
	   "export_keep past its maximum rejected: %s", err);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "max_threads=") == -EINVAL,
	   "empty max_threads rejected");
	ok(parse(&o, err, 4, "/s", "/m", "-o", "fsname=") == -EINVAL,
	   "empty fsname rejected");
	ok(parse(&o, err, 4, "/s", "/m", "-o", "writeback=1") == -EINVAL,
	   "flag with a value rejected");

	ok(opts_parse_size("4096", &sz) == 0 && sz == 4096, "size plain");
	ok(opts_parse_size("64k", &sz) == 0 && sz == 65536, "size k");
	ok(opts_parse_size("2G", &sz) == 0 && sz == 2ULL << 30, "size G");
	ok(opts_parse_size("1x", &sz) == -EINVAL, "size bad suffix");
	ok(opts_parse_size("-1", &sz) == -EINVAL, "size negative");
	ok(opts_parse_size("99999999999999999999", &sz) == -EINVAL, "size overflow");
	ok(opts_parse_size("17179869184T", &sz) == -EINVAL, "size overflow by unit");

	ok(opts_fuse_conf_allows_other("# user_allow_other\nmount_max = 1000\n") == 0,
	   "commented user_allow_other does not count");
	ok(opts_fuse_conf_allows_other("mount_max = 1\n  user_allow_other \n"),
	   "user_allow_other with blanks counts");
	ok(!opts_fuse_conf_allows_other("user_allow_otherx\n"), "prefix does not count");
	ok(parse(&o, err, 2, "/s", "/m") == 0 && o.prefetch == OPTS_PREFETCH_DEFAULT &&
		   o.prefetch > 0,
	   "sibling prefetch is on by default (%u)", o.prefetch);
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "prefetch=16") == 0 && o.prefetch == 16 &&
		   !strcmp(o.fuse_opts, ""),
	   "prefetch=16, not passed to the kernel");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "prefetch=4,noprefetch") == 0 && o.prefetch == 0,
	   "noprefetch turns it off");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "prefetch=65") == -EINVAL &&
		   strstr(err, "prefetch"),
	   "prefetch past its bound refused: %s", err);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "prefetch") == -EINVAL,
	   "prefetch needs a number");
	ok(parse(&o, err, 4, "/s", "/m", "-o", "dir_ttl=2.5") == 0 && o.dir_ttl == 2.5 &&
		   !strcmp(o.fuse_opts, ""),
	   "dir_ttl=2.5, not passed to the kernel");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "dir_ttl=soon") == -EINVAL &&
		   strstr(err, "dir_ttl"), "dir_ttl=soon is refused: %s", err);
	opts_free(&o);
	ok(parse(&o, err, 2, "/s", "/m") == 0 && o.first_fill == 8 * 1024,
	   "first_fill is 8k by default");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "first_fill=64k") == 0 &&
		   o.first_fill == 64 * 1024 && !strcmp(o.fuse_opts, ""),
	   "first_fill=64k, not passed to the kernel");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "first_fill=0") == 0 && o.first_fill == 0,
	   "first_fill=0 turns it off");
	opts_free(&o);
	ok(parse(&o, err, 2, "/s", "/m") == 0 && !o.cold_direct,
	   "cold_reads=cached by default");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "cold_reads=direct") == 0 && o.cold_direct &&
		   !strcmp(o.fuse_opts, ""),
	   "cold_reads=direct, not passed to the kernel");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "cold_reads=direct,cold_reads=cached") == 0 &&
		   !o.cold_direct, "the last cold_reads= wins");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "cold_reads=fast") == -EINVAL &&
		   strstr(err, "cold_reads"), "cold_reads=fast is refused: %s", err);
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "cold_reads") == -EINVAL,
	   "cold_reads without a value is refused");
	opts_free(&o);
	ok(parse(&o, err, 2, "/s", "/m") == 0 && o.readahead == 0,
	   "readahead: the kernel's by default");
	opts_free(&o);
	ok(parse(&o, err, 4, "/s", "/m", "-o", "readahead=4M") == 0 &&
		   o.readahead == 4 << 20 && !strcmp(o.fuse_opts, ""),
	   "readahead=4M, not passed to the kernel as a mount option");
	opts_free(&o);
	for (const char *const *v = (const char *const[]){ "readahead=0", "readahead=1000",
							   "readahead=2G", "readahead", NULL };
	     *v; v++)
		ok(parse(&o, err, 4, "/s", "/m", "-o", *v) == -EINVAL && strstr(err, "readahead"),
		   "%s refused: %s", *v, err);
	for (const char *const *v = (const char *const[]){ "first_fill=100k", "first_fill=2k",
							   "first_fill=2G", "first_fill", NULL };
	     *v; v++)
		ok(parse(&o, err, 4, "/s", "/m", "-o", *v) == -EINVAL && strstr(err, "first_fill"),
		   "%s refused: %s", *v, err);
	return tap_done();
}
