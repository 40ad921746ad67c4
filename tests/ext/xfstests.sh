#!/bin/bash
# xfstests on an hsmfs mount, on demand (root; about 30 minutes for the
# quick group on two cores).
#
#   tests/ext/xfstests.sh [-s SRC] [-w WORK] [-b BUILD] [-o OPTS] [-g GROUP | TEST...]
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
# Each failure is compared with tests/ext/xfstests.expected (a test and
# the reason it fails, one a line).  Ends with one line "N passed, N
# failed, N skipped": a failure not in the list is a failure; a test in
# the list that passes is said, not counted.  Exit status 1 on any
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
while getopts "s:w:b:o:g:x" o; do
	case $o in
	s) SRC=$OPTARG ;;
	w) WORK=$OPTARG ;;
	b) BUILD=$(cd "$OPTARG" && pwd) ;;
	o) OPTS=",$OPTARG" ;;
	g) GROUP=$OPTARG ;;
	x) ALL=1 ;;
	*) sed -n '2,24p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "$(id -u)" = 0 ] || { echo "xfstests.sh: run it as root" >&2; exit 2; }
[ -x "$BUILD/hsmfs" ] || { echo "xfstests.sh: no hsmfs in $BUILD (build it first)" >&2; exit 2; }
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
	# fuse.hsmfs is fuse (its df type is fuse.hsmfs)
	sed -i 's|-e .s/fuse.glusterfs/glusterfs/. |-e "s/fuse.hsmfs/fuse/" &|' "$x/common/rc"
	grep -q 's/fuse.hsmfs/fuse/' "$x/common/rc" || { echo "xfstests.sh: cannot patch _fs_type" >&2; exit 2; }
	echo "building xfstests in $x"
	make -C "$x" -j"$(nproc)" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 2; }
fi
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
cat >"$x/local.config" <<CONF
export FSTYP=fuse
export FUSE_SUBTYP=.hsmfs
export TEST_DEV=$WORK/test-store
export TEST_DIR=$WORK/test
export SCRATCH_DEV=$WORK/scratch-store
export SCRATCH_MNT=$WORK/scratch
export FUSE_MOUNT_OPTIONS="-oallow_other,default_permissions$OPTS"
export TEST_FS_MOUNT_OPTS="-oallow_other,default_permissions$OPTS"
CONF

expected=$here/xfstests.expected
if [ $# -gt 0 ]; then
	tests=("$@")
elif [ -n "$GROUP" ]; then
	tests=(-g "$GROUP")
else
	mapfile -t tests < <(sed -e 's/#.*//' -e '/^ *$/d' "$here/xfstests.ci")
fi
if [ "$ALL" = 0 ] && [ $# -eq 0 ]; then
	# the expected failures are not run (each is said with its reason)
	tests=(-E "$WORK/exclude" "${tests[@]}")
	sed -e 's/#.*//' -e '/^ *$/d' "$expected" | awk '{print $1}' >"$WORK/exclude"
fi
log=$WORK/check.log
# libmount runs helpers with a fixed PATH that starts at /usr/local/sbin,
# where mount.fuse3 then looks for hsmfs: in a private mount namespace a
# tmpfs there holds links to the build's; the system's is never touched.
# shellcheck disable=SC2016
# What check leaves mounted is unmounted before the namespace goes (its
# daemon would otherwise serve a mount nobody can reach).
unshare --mount --propagation private bash -c '
	mount -t tmpfs tmpfs /usr/local/sbin || exit 2
	ln -s "$1/hsmfs" /usr/local/sbin/hsmfs
	w=$3
	cd "$2" && shift 3 && PATH="$0:$PATH" ./check "$@"
	for m in "$w/test" "$w/scratch"; do mountpoint -q "$m" && umount "$m"; done' \
	"$bin" "$BUILD" "$x" "$WORK" "${tests[@]}" 2>&1 | tee "$log"

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
