#!/bin/bash
# xfstests on plain ext4, on libfuse's passthrough_hp and on hsmfs, one
# after another, and a table of the three, on demand (root; the quick
# group takes about half an hour on each, on two cores).
#
#   tests/ext/xfstests-compare.sh [-t TARGETS] [-n] [-w WORK] [-b BUILD]
#                                 [-s SRC] [-o OPTS] [-g GROUP | TEST...]
#
#   -t TARGETS  which to run, of "native passthrough_hp hsmfs" (the
#               default, and the columns of the table)
#   -n          run nothing: tabulate the logs a former run left in WORK
#   -g GROUP    a group (default quick), or name the tests
#   -w, -b, -s, -o  as for tests/ext/xfstests.sh (WORK defaults to
#               /var/tmp/hsmfs-ext/xfstests-compare)
#
# Each target is run by tests/ext/xfstests.sh -f TARGET -l -x: every
# test (hsmfs's expected failures too), with the test and scratch
# filesystems on two loop-mounted ext4 images of their own (for the FUSE
# targets the stores are directories in them), so a test that fills its
# filesystem never fills the host's disk.  Both FUSE targets mount with
# allow_other,default_permissions (and OPTS).  Logs: WORK/check-TARGET.log,
# results in WORK/results-TARGET/, wall time (s) in WORK/time-TARGET.
#
# Prints, per target, the tests that ran (not counting "not run"),
# passed, failed and were not run, and the wall time; the failures of
# each; then every test that failed anywhere, grouped by where it failed
# (an hsmfs failure listed in tests/ext/xfstests.expected is marked so).
set -u
here=$(cd "$(dirname "$0")" && pwd)
WORK=/var/tmp/hsmfs-ext/xfstests-compare GROUP=quick RUN=1
ALL_TARGETS="native passthrough_hp hsmfs" TARGETS="native passthrough_hp hsmfs"
pass=()
while getopts "t:nw:b:s:o:g:" o; do
	case $o in
	t) TARGETS=$OPTARG ;;
	n) RUN=0 ;;
	w) WORK=$OPTARG ;;
	b | s | o) pass+=("-$o" "$OPTARG") ;;
	g) GROUP=$OPTARG ;;
	*) sed -n '2,26p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -gt 0 ]; then tests=("$@"); else tests=(-g "$GROUP"); fi

if [ "$RUN" = 1 ]; then
	for t in $TARGETS; do
		echo "==== xfstests on $t"
		start=$(date +%s)
		"$here/xfstests.sh" -f "$t" -l -x -w "$WORK" "${pass[@]}" "${tests[@]}"
		echo $(($(date +%s) - start)) >"$WORK/time-$t"
	done
fi

# the words after "Key: " in the last such line of a log; of a run cut
# short (no "Ran: "), taken from the lines of the tests that ended
field() {
	if grep -q '^Ran: ' "$1"; then
		sed -n "s/^$2: //p" "$1" | tail -1
		return
	fi
	awk -v k="$2" '$1 ~ /^[a-z0-9]+\/[0-9]+$/ && NF > 1 {
		f = /output mismatch|\[failed|_check_/; n = /\[not run\]/
		p = $2 ~ /^[0-9]+s$/
		if (k == "Ran" && (f || n || p)) printf "%s ", $1
		if (k == "Not run" && n) printf "%s ", $1
		if (k == "Failures" && f) printf "%s ", $1
	}' "$1"
}
declare -A state
printf '\n%-10s' ""
for t in $ALL_TARGETS; do printf ' %15s' "$t"; done
echo
for row in ran passed failed "not run" "wall time"; do
	printf '%-10s' "$row"
	for t in $ALL_TARGETS; do
		log=$WORK/check-$t.log v="-"
		if [ -e "$log" ]; then
			ran=$(field "$log" Ran | wc -w)
			nr=$(field "$log" "Not run" | wc -w)
			nf=$(field "$log" Failures | wc -w)
			case $row in
			ran) v=$((ran - nr)) ;;
			passed) v=$((ran - nr - nf)) ;;
			failed) v=$nf ;;
			"not run") v=$nr ;;
			"wall time")
				[ -e "$WORK/time-$t" ] && s=$(cat "$WORK/time-$t") &&
					v="$((s / 60))m$((s % 60))s" ;;
			esac
		fi
		printf ' %15s' "$v"
	done
	echo
done
for t in $ALL_TARGETS; do
	log=$WORK/check-$t.log
	[ -e "$log" ] || continue
	for x in $(field "$log" Ran); do state[$t:$x]=pass; done
	for x in $(field "$log" "Not run"); do state[$t:$x]=notrun; done
	for x in $(field "$log" Failures); do state[$t:$x]=FAIL; done
	echo
	grep -q '^Ran: ' "$log" || echo "($t: cut short, counted from the tests that ended)"
	echo "failed on $t: $(field "$log" Failures)"
done

# every test that failed somewhere, by the set of targets it failed on
expected=$here/xfstests.expected
declare -A groups
for k in "${!state[@]}"; do
	[ "${state[$k]}" = FAIL ] || continue
	x=${k#*:} where=""
	for t in $ALL_TARGETS; do
		[ "${state[$t:$x]:-}" = FAIL ] && where="$where${where:+ and }$t"
	done
	grep -qw "$x" <<<"${groups[$where]:-}" || groups[$where]="${groups[$where]:-} $x"
done
echo
echo "by where they fail (a target where the test did not fail says how it went):"
printf '%s\n' "${!groups[@]}" | sort | while read -r where; do
	echo "fail on $where only:"
	for x in $(tr ' ' '\n' <<<"${groups[$where]}" | sort); do
		line="  $x"
		for t in $ALL_TARGETS; do
			[ "${state[$t:$x]:-}" = FAIL ] || line="$line, $t ${state[$t:$x]:-not in its run}"
		done
		[ "${state[hsmfs:$x]:-}" = FAIL ] && grep -qE "^$x( |$)" "$expected" &&
			line="$line (hsmfs: in xfstests.expected)"
		echo "$line"
	done
done | sed 's/^fail on native and passthrough_hp and hsmfs only:/fail on all three:/'
