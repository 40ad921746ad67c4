#!/bin/bash
# pjdfstest on an hsmfs mount, on demand (root; a few minutes).
#
#   tests/ext/pjdfstest.sh [-s SRC] [-w WORK] [-b BUILD] [-o OPTS] [TEST_DIR...]
#
#   -s SRC    a pjdfstest checkout or tarball (default: the snapshot in
#             ../shared/ext-suites/)
#   -w WORK   where it is built and run (default /var/tmp/hsmfs-ext/pjdfstest)
#   -b BUILD  the hsmfs build directory whose hsmfs runs (default build)
#   -o OPTS   mount options beside allow_other,default_permissions
#   TEST_DIR  directories of its tests/ to run (default: all)
#
# The suite runs with prove(1) in a directory of the mount; a failure of
# a test file not in tests/ext/pjdfstest.expected fails the run.  Ends
# with one line "N passed, N failed, N skipped" (test files).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src_root=$(cd "$here/../.." && pwd)
SRC="" WORK=/var/tmp/hsmfs-ext/pjdfstest BUILD="$src_root/build" OPTS=""
while getopts "s:w:b:o:" o; do
	case $o in
	s) SRC=$OPTARG ;;
	w) WORK=$OPTARG ;;
	b) BUILD=$(cd "$OPTARG" && pwd) ;;
	o) OPTS=",$OPTARG" ;;
	*) sed -n '2,16p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "$(id -u)" = 0 ] || { echo "pjdfstest.sh: run it as root" >&2; exit 2; }
[ -x "$BUILD/hsmfs" ] || { echo "pjdfstest.sh: no hsmfs in $BUILD (build it first)" >&2; exit 2; }
[ -n "$SRC" ] || SRC=$(ls "$src_root"/../shared/ext-suites/pjdfstest-*.tar.gz 2>/dev/null | head -1)
DEPS="autoconf automake make gcc perl libtool"
# shellcheck disable=SC2086
dpkg -s $DEPS >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $DEPS >/dev/null ||
	{ echo "pjdfstest.sh: apt-get install failed" >&2; exit 2; }
p=$WORK/src
if [ ! -x "$p/pjdfstest" ]; then
	rm -rf "$p" && mkdir -p "$p" || exit 2
	if [ -d "$SRC" ]; then cp -a "$SRC/." "$p/"; else tar -xzf "$SRC" -C "$p" --strip-components=1 || exit 2; fi
	echo "building pjdfstest in $p"
	(cd "$p" && autoreconf -ifs && ./configure && make pjdfstest) >"$WORK/build.log" 2>&1 ||
		{ tail -30 "$WORK/build.log"; exit 2; }
fi
store=$WORK/store mnt=$WORK/mnt
mountpoint -q "$mnt" && fusermount3 -u "$mnt"
rm -rf "$store" && mkdir -p "$store" "$mnt"
"$BUILD/hsmfs" "$store" "$mnt" -o "allow_other,default_permissions,norestart$OPTS" || exit 2
trap 'cd /; fusermount3 -u "$mnt"' EXIT
mkdir "$mnt/t" && cd "$mnt/t" || exit 2
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=("$p/tests")
log=$WORK/prove.log
prove -r "${dirs[@]}" 2>&1 | tee "$log"
expected=$here/pjdfstest.expected
unexpected=0 nfail=0
# a test file failed: "(Wstat: N Tests: N Failed: N)" with a non-zero status or failure
for t in $(sed -n 's|^\(/[^ ]*\.t\) *(Wstat: \([0-9]*\) Tests: [0-9]* Failed: \([0-9]*\)).*|\1 \2 \3|p' "$log" |
	awk '$2 != 0 || $3 != 0 {print $1}' | sort -u); do
	nfail=$((nfail + 1))
	rel=${t#"$p"/}
	if grep -qE "^$rel( |$)" "$expected" 2>/dev/null; then
		echo "expected failure: $(grep -E "^$rel( |$)" "$expected")"
	else
		echo "UNEXPECTED FAILURE: $rel"
		unexpected=$((unexpected + 1))
	fi
done
files=$(sed -n 's/^Files=\([0-9]*\),.*/\1/p' "$log" | tail -1)
echo "$(( ${files:-0} - nfail )) passed, $unexpected failed, 0 skipped"
[ "$unexpected" = 0 ] && [ -n "$files" ]
