#!/bin/sh
# link-sbin.sh BINDIR SBINDIR (meson install script): mount(8) and fstab's
# fuse.hsmfs find helpers in sbin, users find commands in bin; hsmfs lives
# in bin and sbin/hsmfs links to it, replacing what an older install put
# there.
set -eu
dir="${DESTDIR:-}$2"
mkdir -p "$dir"
ln -sfn "$1/hsmfs" "$dir/hsmfs"
