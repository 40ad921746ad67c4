#!/bin/sh
# localize.sh IN.a OUT.a: one relocatable object of all of IN's members,
# with every symbol that is not the public API (hidden visibility) made
# local, so that the installed static library exports only hsmfs_hook_*.
# IN may be a thin archive (meson's for libraries it does not install).
set -eu
in=$(realpath "$1")
out=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$(head -c 7 "$in")" = '!<thin>' ]; then
	dir=$(dirname "$in")
	set --
	for m in $(ar t "$in"); do
		case $m in
		/*) set -- "$@" "$m" ;;
		*) set -- "$@" "$dir/$m" ;;
		esac
	done
else
	(cd "$tmp" && ar x "$in")
	set -- "$tmp"/*.o
fi
ld -r -o "$tmp/hsmfs-hook.o" "$@"
objcopy --localize-hidden "$tmp/hsmfs-hook.o"
rm -f "$out"
ar rcs "$out" "$tmp/hsmfs-hook.o"
