#!/bin/sh
# The engine links no front end (fs/front.h): its static library may not
# use a libfuse symbol, nor one the FUSE front end defines.  TAP output.
# Usage: engine-symbols.sh LIBENGINE.a LIBFRONT.a
set -u
engine=$1 front=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -u "$engine" | awk '{ print $2 }' | sort -u > "$tmp/undef"
nm -g --defined-only "$front" | awk 'NF == 3 { print $3 }' | sort -u > "$tmp/front"
n=$(grep -c . "$tmp/undef")
fuse=$(grep -E '^fuse_' "$tmp/undef")
up=$(comm -12 "$tmp/undef" "$tmp/front")
echo "1..3"
if [ "$n" -gt 0 ]; then echo "ok 1 - the engine's undefined symbols read ($n)"; else echo "not ok 1 - no undefined symbol read from $engine"; fi
if [ -z "$fuse" ]; then echo "ok 2 - no libfuse symbol in the engine"; else echo "not ok 2 - libfuse symbols in the engine:" $fuse; fi
if [ -z "$up" ]; then echo "ok 3 - no FUSE front-end symbol in the engine"; else echo "not ok 3 - the engine calls the front end:" $up; fi
