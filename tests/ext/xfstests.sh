#!/bin/bash
# xfstests on an hsmfs mount, on demand (root; about 30 minutes for the
# quick group on two cores); or, for comparison, on libfuse's
# passthrough_hp or on plain ext4 (tests/ext/xfstests-compare.sh runs
# all three and tabulates them).
#
#   tests/ext/xfstests.sh [-f TARGET] [-l] [-s SRC] [-w WORK] [-b BUILD] [-o OPTS]
#                         [-x] [-g GROUP | TEST...]
#
#   -f TARGET hsmfs (default), passthrough_hp (libfuse's, as libfuse
#             builds it: the build's tests/bench/passthrough_hp_full, with
#             FUSE_SUBTYP=.passthrough_hp) or native (FSTYP=ext4 on two
#             loop devices; implies -l)
#   -l        test and scratch on two sparse 6 GiB ext4 images of their
#             own (WORK/img, loop-mounted in the run's mount namespace,
#             detached and deleted at the end), not on the disk of WORK:
#             a test that fills its filesystem (generic/103) fills only
#             its image
#
#   -s SRC    an xfstests checkout, or a tarball of one (default: the
#             snapshot in ../shared/ext-suites/)
#   -w WORK   where it is unpacked, built and run (default
#             /var/tmp/hsmfs-ext/xfstests); kept, so a second run does
#             not build again
#   -b BUILD  the hsmfs build directory whose hsmfs runs (default build)
#   -o OPTS   mount options beside allow_other,default_permissions
#   -g GROUP  a group (default: the tests listed in xfstests.ci, the
#             ones that once failed on hsmfs alone)
#   -x        run the expected failures too (to see whether they pass now)
#
# The output of check is kept in WORK/check-TARGET.log, the results in
# WORK/results-TARGET/.
#
# Each failure is compared with tests/ext/xfstests.expected (a test and
# the reason it fails, one a line).  Ends with one line "N passed, N
# failed, N skipped": a failure not in the list is a failure; a test in
# the list that passes is said, not counted.  (The list is hsmfs's: on
# another target every failure counts.)  Exit status 1 on any
# unexpected failure.
#
# Two harness details for FSTYP=fuse over a directory store: _fs_type
# is made to map fuse.hsmfs to fuse (common/rc, in the work copy only),
# and umount(8) does not find a FUSE mount by its source directory, so a
# umount first on PATH maps a store to its mount's target.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src_root=$(cd "$here/../.." && pwd)
SRC="" WORK=/var/tmp/hsmfs-ext/xfstests BUILD="$src_root/build" OPTS="" GROUP="" ALL=0
TARGET=hsmfs LOOP=0
while getopts "f:ls:w:b:o:g:x" o; do
	case $o in
	f) TARGET=$OPTARG ;;
	l) LOOP=1 ;;
	s) SRC=$OPTARG ;;
	w) WORK=$OPTARG ;;
	b) BUILD=$(cd "$OPTARG" && pwd) ;;
	o) OPTS=",$OPTARG" ;;
	g) GROUP=$OPTARG ;;
	x) ALL=1 ;;
	*) sed -n '2,44p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "$(id -u)" = 0 ] || { echo "xfstests.sh: run it as root" >&2; exit 2; }
case $TARGET in
hsmfs) daemon=$BUILD/hsmfs ;;
passthrough_hp)
	daemon=$BUILD/tests/bench/passthrough_hp_full
	[ -x "$daemon" ] || ninja -C "$BUILD" tests/bench/passthrough_hp_full >/dev/null ;;
native) daemon="" LOOP=1 ;;
*) echo "xfstests.sh: -f hsmfs, passthrough_hp or native" >&2; exit 2 ;;
esac
[ -z "$daemon" ] || [ -x "$daemon" ] || { echo "xfstests.sh: no $daemon (build it first)" >&2; exit 2; }
if [ -z "$SRC" ]; then
	SRC=$(ls "$src_root"/../shared/ext-suites/xfstests-*.tar.gz 2>/dev/null | head -1)
fi
[ -e "$SRC" ] || { echo "xfstests.sh: no xfstests source (give -s SRC)" >&2; exit 2; }
DEPS="autoconf automake libtool libtool-bin pkg-config make gcc g++ xfslibs-dev xfsprogs
      e2fsprogs uuid-dev libattr1-dev libacl1-dev libaio-dev libgdbm-dev attr acl bc psmisc
      perl gawk"
# shellcheck disable=SC2086
dpkg -s $DEPS >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $DEPS >/dev/null ||
	{ echo "xfstests.sh: apt-get install failed" >&2; exit 2; }

x=$WORK/src
if [ ! -x "$x/check" ] || [ ! -e "$x/ltp/fsx" ]; then
	rm -rf "$x" && mkdir -p "$x" || exit 2
	if [ -d "$SRC" ]; then
		cp -a "$SRC/." "$x/"
	else
		tar -xzf "$SRC" -C "$x" --strip-components=1 || exit 2
	fi
	echo "building xfstests in $x"
	make -C "$x" -j"$(nproc)" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 2; }
fi
# fuse.hsmfs and fuse.passthrough_hp are fuse (their df types)
for t in hsmfs passthrough_hp; do
	grep -q "s/fuse.$t/fuse/" "$x/common/rc" ||
		sed -i "s|-e .s/fuse.glusterfs/glusterfs/. |-e \"s/fuse.$t/fuse/\" &|" "$x/common/rc"
	grep -q "s/fuse.$t/fuse/" "$x/common/rc" || { echo "xfstests.sh: cannot patch _fs_type" >&2; exit 2; }
done
for u in fsgqa fsgqa2 123456-fsgqa; do
	id "$u" >/dev/null 2>&1 || useradd -m "$u" 2>/dev/null || useradd "$u"
done

# A umount that finds a FUSE mount by its store: xfstests unmounts by TEST_DEV.
bin=$WORK/bin
mkdir -p "$bin"
cat >"$bin/umount" <<'UMOUNT'
#!/bin/bash
args=()
for a in "$@"; do
	if [ -d "$a" ]; then
		t=$(findmnt -rn -S "$a" -o TARGET 2>/dev/null | head -1)
		[ -n "$t" ] && a=$t
	fi
	args+=("$a")
done
exec /usr/bin/umount "${args[@]}"
UMOUNT
chmod +x "$bin/umount"
ln -sfn "$BUILD/hsmfsctl" "$bin/hsmfsctl"

for d in test-store test scratch-store scratch; do mkdir -p "$WORK/$d"; done
# -l: two loop devices, ext4, for the run only
tdev="" sdev=""
cleanup() {
	for d in $tdev $sdev; do losetup -d "$d"; done
	rm -rf "$WORK/img"
}
if [ "$LOOP" = 1 ]; then
	trap cleanup EXIT
	mkdir -p "$WORK/img"
	for i in test scratch; do
		rm -f "$WORK/img/$i.img"
		truncate -s 6G "$WORK/img/$i.img" &&
			d=$(losetup -f --show "$WORK/img/$i.img") &&
			mkfs.ext4 -q -F "$d" || exit 2
		if [ "$i" = test ]; then tdev=$d; else sdev=$d; fi
	done
fi
results=$WORK/results-$TARGET
rm -rf "$results"
if [ "$TARGET" = native ]; then
	cat >"$x/local.config" <<CONF
export FSTYP=ext4
export TEST_DEV=$tdev
export TEST_DIR=$WORK/test
export SCRATCH_DEV=$sdev
export SCRATCH_MNT=$WORK/scratch
export RESULT_BASE=$results
CONF
else
	# with -l the stores are directories in the loop filesystems,
	# mounted at test-store and scratch-store in the namespace below
	tstore=$WORK/test-store sstore=$WORK/scratch-store
	[ "$LOOP" = 0 ] || tstore=$tstore/store sstore=$sstore/store
	cat >"$x/local.config" <<CONF
export FSTYP=fuse
export FUSE_SUBTYP=.$TARGET
export TEST_DEV=$tstore
export TEST_DIR=$WORK/test
export SCRATCH_DEV=$sstore
export SCRATCH_MNT=$WORK/scratch
export FUSE_MOUNT_OPTIONS="-oallow_other,default_permissions$OPTS"
export TEST_FS_MOUNT_OPTS="-oallow_other,default_permissions$OPTS"
export RESULT_BASE=$results
CONF
fi

expected=$here/xfstests.expected
[ "$TARGET" = hsmfs ] || expected=/dev/null
if [ $# -gt 0 ]; then
	tests=("$@")
elif [ -n "$GROUP" ]; then
	tests=(-g "$GROUP")
else
	mapfile -t tests < <(sed -e 's/#.*//' -e '/^ *$/d' "$here/xfstests.ci")
fi
if [ "$ALL" = 0 ] && [ $# -eq 0 ] && [ "$TARGET" = hsmfs ]; then
	# the expected failures are not run (each is said with its reason)
	tests=(-E "$WORK/exclude" "${tests[@]}")
	sed -e 's/#.*//' -e '/^ *$/d' "$expected" | awk '{print $1}' >"$WORK/exclude"
fi
log=$WORK/check-$TARGET.log
# libmount runs helpers with a fixed PATH that starts at /usr/local/sbin,
# where mount.fuse3 then looks for hsmfs (or passthrough_hp): in a
# private mount namespace a tmpfs there holds a link to the build's; the
# system's is never touched.  With -l and a FUSE target the two loop
# filesystems are mounted there too, at the stores' parents.
# shellcheck disable=SC2016
# What check leaves mounted is unmounted before the namespace goes (its
# daemon would otherwise serve a mount nobody can reach).
unshare --mount --propagation private bash -c '
	mount -t tmpfs tmpfs /usr/local/sbin || exit 2
	[ -z "$1" ] || ln -s "$1" "/usr/local/sbin/$6"
	w=$3
	if [ -n "$1" ] && [ -n "$4" ]; then
		mount "$4" "$w/test-store" && mount "$5" "$w/scratch-store" &&
			mkdir -p "$w/test-store/store" "$w/scratch-store/store" || exit 2
	fi
	cd "$2" && shift 6 && PATH="$0:$PATH" ./check "$@"
	for m in "$w/test" "$w/scratch"; do mountpoint -q "$m" && umount "$m"; done
	for m in "$w/test-store" "$w/scratch-store"; do mountpoint -q "$m" && umount "$m"; done' \
	"$bin" "$daemon" "$x" "$WORK" "$tdev" "$sdev" "$TARGET" "${tests[@]}" 2>&1 | tee "$log"

if ! grep -q '^Ran: ' "$log"; then
	echo "0 passed, 1 failed, 0 skipped (xfstests ran nothing)"
	exit 1
fi
ran=$(sed -n 's/^Ran: //p' "$log" | tail -1)
notrun=$(sed -n 's/^Not run: //p' "$log" | tail -1)
failed=$(sed -n 's/^Failures: //p' "$log" | tail -1)
nran=$(wc -w <<<"$ran")
nskip=$(wc -w <<<"$notrun")
unexpected=0
for t in $failed; do
	if r=$(grep -E "^$t( |$)" "$expected"); then
		echo "expected failure: $r"
	else
		echo "UNEXPECTED FAILURE: $t"
		unexpected=$((unexpected + 1))
	fi
done
nfail=$(wc -w <<<"$failed")
for t in $ran; do
	grep -qE "^$t( |$)" "$expected" && ! grep -qw "$t" <<<"$failed" &&
		echo "passes now, listed as expected to fail: $t"
done
echo "$((nran - nfail - nskip)) passed, $unexpected failed, $nskip skipped"
[ "$unexpected" = 0 ]
