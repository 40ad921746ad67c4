#!/bin/bash
# Run every test hsmfs has, the way CI does, on a Debian 12 machine.
#
#   sudo tests/run-all.sh
#
# As root it installs the Debian packages it needs, builds twice (plain
# with -Dwerror=true, and with ASan+UBSan), runs the unit and mount tests
# of both builds as root, then again as an unprivileged user through
# fusermount3; a ThreadSanitizer build runs the unit tests and the
# engine's concurrent tests as root.  It ends with one line "N passed, N failed, N skipped" and
# exits non-zero if anything failed.  Not as root: it builds and runs
# the tests once, as you, with the packages already installed.  As root
# it also runs the xfstests of tests/ext/xfstests.ci on the plain build.
set -u
cd "$(dirname "$0")/.."
src=$PWD
DEPS="build-essential meson ninja-build pkg-config patch python3 fuse3
      libsqlite3-dev sqlite3 libcurl4-openssl-dev nginx-light squid curl openssl attr tar
      findutils util-linux bash-completion rsync git libarchive-tools acl"
TEST_USER=${HSMFS_TEST_USER:-hsmfs-ci}
passed=0 failed=0 skipped=0
failures=$(mktemp)
trap 'rm -f "$failures"' EXIT

log() { printf '== %s\n' "$*"; }

# Add one meson test run's summary to the totals.
count() {
	local out=$1 ok xf fail up skip to
	ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$out" | tail -1)
	xf=$(sed -n 's/^Expected Fail: *\([0-9]*\).*/\1/p' "$out" | tail -1)
	fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$out" | tail -1)
	up=$(sed -n 's/^Unexpected Pass: *\([0-9]*\).*/\1/p' "$out" | tail -1)
	skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$out" | tail -1)
	to=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$out" | tail -1)
	if [ -z "$ok" ]; then
		failed=$((failed + 1)) # the run itself broke
		return
	fi
	passed=$((passed + ok + ${xf:-0}))
	failed=$((failed + ${fail:-0} + ${up:-0} + ${to:-0}))
	skipped=$((skipped + ${skip:-0}))
}

# build DIR [meson options...]: configure and compile, counting a failure.
build() {
	local dir=$1
	shift
	if ! { meson setup --wipe "$dir" "$@" >"$dir.setup.log" 2>&1 ||
		meson setup "$dir" "$@" >"$dir.setup.log" 2>&1; } ||
		! ninja -C "$dir" >"$dir.build.log" 2>&1; then
		cat "$dir.setup.log" "$dir.build.log" 2>/dev/null | tail -50
		log "build of $dir failed"
		failed=$((failed + 1))
		return 1
	fi
}

# runtests DIR LABEL [runuser prefix...]; $TEST_ARGS: more meson test arguments
runtests() {
	local dir=$1 label=$2 out
	shift 2
	out=$(mktemp)
	log "tests: $label"
	# shellcheck disable=SC2086
	"$@" meson test -C "$dir" --print-errorlogs --num-processes 2 ${TEST_ARGS:-} 2>&1 | tee "$out" |
		grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):'
	# show what failed: each failed test's own output, its tail here and
	# its failed checks again at the very end (a tail of the whole log
	# shows them even when a test's output is long)
	python3 - "$dir/meson-logs/testlog.json" "$label" "$failures" <<'PY' 2>/dev/null | head -300
import json, sys
summary = open(sys.argv[3], "a")
for line in open(sys.argv[1]):
    t = json.loads(line)
    if t.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
        continue
    out = t.get("stdout") or ""
    print("---- %s (%s)" % (t.get("name"), t.get("result")))
    print(out[-4000:])
    print((t.get("stderr") or "")[-2000:])
    lines = out.splitlines()
    checks = []
    for i, l in enumerate(lines):
        if l.startswith("not ok"):
            checks.append(l)
            for d in lines[i + 1:i + 26]:  # its diagnostics
                if not d.startswith("#"):
                    break
                checks.append(d)
    summary.write("---- %s: %s (%s)\n" % (sys.argv[2], t.get("name"), t.get("result")))
    summary.write("\n".join(checks[:80] or ["(no failed check: the test program failed)"]) + "\n")
PY
	count "$out"
	rm -f "$out"
}

if [ "$(id -u)" = 0 ]; then
	log "installing Debian packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null && apt-get install -y -qq $DEPS >/dev/null ||
		{ echo "apt-get failed"; echo "0 passed, 1 failed"; exit 1; }
	# the root runs mount as a user too (t0520, t0535): /dev/fuse is
	# 0666 as Debian's udev makes it, also where a machine has it 0600
	chmod 0666 /dev/fuse
fi

# An S3-compatible server for t0210, from the npm registry when npm is
# there (t0210 is skipped otherwise).
if [ "$(id -u)" = 0 ] && command -v npm >/dev/null 2>&1; then
	s3dir=/opt/hsmfs-test-s3rver
	[ -x "$s3dir/node_modules/.bin/s3rver" ] ||
		npm install --prefix "$s3dir" --no-audit --no-fund s3rver@3.7.1 >/dev/null 2>&1 ||
		log "npm install s3rver failed: the S3 test will be skipped"
	[ -x "$s3dir/node_modules/.bin/s3rver" ] && export HSMFS_S3RVER="$s3dir/node_modules/.bin/s3rver"
fi

# libfuse >= 3.17: the system's, or the pinned release (subprojects/)
subprojects/fill-cache.sh || { echo "0 passed, 1 failed"; exit 1; }

san="-Db_sanitize=address,undefined -Db_lundef=false"
build build-ci --werror && runtests build-ci "plain build, as $(id -un)"
# xfstests, the list in tests/ext/xfstests.ci (root: it mounts with
# mount(8) and needs its users), on the plain build; the whole quick
# group and pjdfstest are on demand (tests/ext/).
if [ "$(id -u)" = 0 ] && [ -x build-ci/hsmfs ]; then
	log "xfstests (tests/ext/xfstests.ci)"
	xout=$(mktemp)
	tests/ext/xfstests.sh -b build-ci >"$xout" 2>&1
	grep -E '^generic/|^(UNEXPECTED|expected failure|passes now)' "$xout" | cut -c1-200
	line=$(tail -1 "$xout")
	echo "$line"
	if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed,\ ([0-9]+)\ skipped ]]; then
		passed=$((passed + BASH_REMATCH[1]))
		failed=$((failed + BASH_REMATCH[2]))
		skipped=$((skipped + BASH_REMATCH[3]))
		[ "${BASH_REMATCH[2]}" = 0 ] || grep -E 'UNEXPECTED' "$xout" >>"$failures"
	else
		tail -30 "$xout"
		failed=$((failed + 1))
		echo "---- xfstests: did not run ($line)" >>"$failures"
	fi
	rm -f "$xout"
fi
# shellcheck disable=SC2086
build build-asan --werror $san && runtests build-asan "ASan+UBSan build, as $(id -un)"
# ThreadSanitizer: the unit tests and the engine's concurrent tests (the
# model-based test, writes racing fills, hostile hooks); a report makes
# the daemon exit 66, which fails its test.
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 suppressions=$src/tests/tsan.supp"
build build-tsan --werror -Db_sanitize=thread -Db_lundef=false &&
	TEST_ARGS="--suite unit --suite tsan" \
		runtests build-tsan "ThreadSanitizer build, as $(id -un)"

if [ "$(id -u)" = 0 ]; then
	id "$TEST_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$TEST_USER"
	work=$(mktemp -d /tmp/hsmfs-user-ci.XXXXXX)
	chmod 0755 "$work"
	git -C "$src" ls-files -z | (cd "$src" && xargs -0 cp --parents -t "$work")
	[ -d subprojects/packagecache ] && cp -r subprojects/packagecache "$work/subprojects/"
	chown -R "$TEST_USER": "$work"
	as_user=(runuser -u "$TEST_USER" -- env -C "$work" HOME="/home/$TEST_USER"
		HSMFS_S3RVER="${HSMFS_S3RVER:-}")
	# shellcheck disable=SC2086
	if "${as_user[@]}" meson setup build-user --werror >"$work/setup.log" 2>&1 &&
		"${as_user[@]}" ninja -C build-user >"$work/build.log" 2>&1; then
		runtests "$work/build-user" "plain build, as $TEST_USER" "${as_user[@]}"
	else
		tail -50 "$work/setup.log" "$work/build.log"
		failed=$((failed + 1))
	fi
	if "${as_user[@]}" meson setup build-asan --werror $san >"$work/setup.log" 2>&1 &&
		"${as_user[@]}" ninja -C build-asan >"$work/build.log" 2>&1; then
		runtests "$work/build-asan" "ASan+UBSan build, as $TEST_USER" "${as_user[@]}"
	else
		tail -50 "$work/setup.log" "$work/build.log"
		failed=$((failed + 1))
	fi
	rm -rf "$work"
fi

if [ -s "$failures" ]; then
	log "failed checks"
	cut -c1-600 "$failures" | head -150
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
