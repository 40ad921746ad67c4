#!/bin/bash
# The README's first command: install, build, and show a mount working.
#
#   sudo tests/demo.sh
#
# Installs the Debian packages hsmfs needs, builds it, installs it to
# /usr/local (so mount(8) and fstab find it), then, as the user who ran
# sudo, mounts a sample store, shows reads and writes passing through to
# the store, and unmounts.  Nothing is left mounted.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq build-essential meson ninja-build pkg-config \
		python3 fuse3 libfuse3-dev libsqlite3-dev libcurl4-openssl-dev >/dev/null
	[ -d build ] || meson setup build >/dev/null
	ninja -C build >/dev/null
	meson install -C build --quiet
	if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
		exec runuser -u "$SUDO_USER" -- "$0" --as-user
	fi
fi
hsmfs=$(command -v hsmfs || echo /usr/local/sbin/hsmfs)
demo=$(mktemp -d /tmp/hsmfs-demo.XXXXXX)
trap 'fusermount3 -u "$demo/mnt" 2>/dev/null; rm -rf "$demo"' EXIT
mkdir -p "$demo/store/docs" "$demo/mnt"
echo "hello from the store" >"$demo/store/docs/hello.txt"
truncate -s 1G "$demo/store/sparse.img"

echo "\$ hsmfs $demo/store $demo/mnt"
"$hsmfs" "$demo/store" "$demo/mnt"
echo "\$ ls -l $demo/mnt"
ls -l "$demo/mnt"
echo "\$ cat $demo/mnt/docs/hello.txt"
cat "$demo/mnt/docs/hello.txt"
echo "\$ echo written through the mount > $demo/mnt/docs/new.txt"
echo "written through the mount" >"$demo/mnt/docs/new.txt"
echo "\$ cat $demo/store/docs/new.txt    # the store has it"
cat "$demo/store/docs/new.txt"
echo "\$ ls -a $demo/mnt    # STORE/.hsmfs stays hidden"
ls -a "$demo/mnt"
echo "\$ fusermount3 -u $demo/mnt"
fusermount3 -u "$demo/mnt"
echo "demo done: hsmfs is installed as $hsmfs"
