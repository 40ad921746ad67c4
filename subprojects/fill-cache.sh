#!/bin/sh
# Make libfuse >= 3.17 available to the build without touching the
# machine's own libfuse or apt setup.
#
#   subprojects/fill-cache.sh
#
# Nothing to do when the system's libfuse is 3.17 or newer (the build
# uses it), or when the tarball the wrap file pins is already in
# subprojects/packagecache/.  Otherwise meson would download it from the
# upstream address in subprojects/libfuse.wrap; where that address is out
# of reach, this takes the same file from Debian's own source package of
# that release, with apt-get in a private state directory that lists only
# Debian's source suite carrying it (the machine's sources, lists and
# installed packages are left as they are), checks it against the wrap's
# sha256 and puts it in packagecache/.  Needs apt-get and the Debian
# archive keyring; works as any user.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
wrap=$here/libfuse.wrap
suite=${HSMFS_LIBFUSE_SUITE:-trixie}
file=$(sed -n 's/^source_filename *= *//p' "$wrap")
hash=$(sed -n 's/^source_hash *= *//p' "$wrap")
version=$(echo "$file" | sed -n 's/^fuse-\(.*\)\.tar\.gz$/\1/p')
cache=$here/packagecache
have() { [ -f "$cache/$file" ] && echo "$hash  $cache/$file" | sha256sum -c --status; }

if pkg-config --atleast-version=3.17 fuse3 2>/dev/null; then
	echo "fill-cache: the system's libfuse $(pkg-config --modversion fuse3) is new enough"
	exit 0
fi
if have; then
	echo "fill-cache: $file is in subprojects/packagecache"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/state/lists/partial" "$tmp/cache/archives/partial" "$tmp/parts" "$tmp/prefs" "$tmp/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" \
	>"$tmp/sources.list"
set -- -q -o Dir::State="$tmp/state" -o Dir::Cache="$tmp/cache" \
	-o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts="$tmp/parts" \
	-o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$tmp/prefs"
[ "$(id -u)" = 0 ] && set -- "$@" -o APT::Sandbox::User=root
echo "fill-cache: fetching libfuse $version from Debian's $suite source package (private apt state)"
apt-get "$@" update >/dev/null
(cd "$tmp/src" && apt-get "$@" source --download-only fuse3 >/dev/null)
orig=$tmp/src/fuse3_$version.orig.tar.gz
if [ ! -f "$orig" ]; then
	echo "fill-cache: Debian $suite does not carry libfuse $version (found: $(ls "$tmp/src" | tr '\n' ' '))" >&2
	exit 1
fi
if ! echo "$hash  $orig" | sha256sum -c --status; then
	echo "fill-cache: Debian's fuse3_$version.orig.tar.gz does not match the sha256 in libfuse.wrap" >&2
	exit 1
fi
mkdir -p "$cache"
cp "$orig" "$cache/$file.part"
mv "$cache/$file.part" "$cache/$file"
echo "fill-cache: $file is in subprojects/packagecache"
