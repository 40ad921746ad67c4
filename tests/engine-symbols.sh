#!/bin/sh
# The engine links no front end (fs/front.h): its static library may not
# use a libfuse symbol, nor one the FUSE front end defines.  TAP output.
# Usage: engine-symbols.sh LIBENGINE.a LIBFRONT.a
set -u
engine=$1 front=$2
undef=$(nm -u "$engine" | awk '{ print $2 }' | sort -u)
fuse=$(printf '%s\n' "$undef" | grep -E '^fuse_' || true)
frontdefs=$(nm -g --defined-only "$front" | awk 'NF == 3 { print $3 }' | sort -u)
up=$(printf '%s\n' "$undef" | comm -12 - "$(printf '%s\n' "$frontdefs" > "${TMPDIR:-/tmp}/front.$$"; echo "${TMPDIR:-/tmp}/front.$$")")
rm -f "${TMPDIR:-/tmp}/front.$$"
echo "1..3"
n=$(printf '%s\n' "$undef" | grep -c .)
if [ "$n" -gt 0 ]; then echo "ok 1 - the engine's undefined symbols read ($n)"; else echo "not ok 1 - no undefined symbol read from $engine"; fi
if [ -z "$fuse" ]; then echo "ok 2 - no libfuse symbol in the engine"; else echo "not ok 2 - libfuse symbols in the engine:" $fuse; fi
if [ -z "$up" ]; then echo "ok 3 - no FUSE front-end symbol in the engine"; else echo "not ok 3 - the engine calls the front end:" $up; fi
