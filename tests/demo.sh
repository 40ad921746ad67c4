#!/bin/bash
# The README's first command: install, build, and show a lazy-fetch mount.
#
#   sudo tests/demo.sh
#
# Installs the Debian packages hsmfs needs, builds it, installs it to
# /usr/local (so mount(8) and fstab find it), then, as the user who ran
# sudo, makes a lazy-fetch mount of a sample tree whose bytes live in a
# local "origin" directory (a slow tier, file:// URLs), with hsmfs-http as the fill
# hook: the first read of a range fetches it, the second does not; a
# change made on the mount is archived back to the origin.
# Nothing is left mounted.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq build-essential meson ninja-build pkg-config \
		python3 fuse3 libsqlite3-dev sqlite3 \
		libcurl4-openssl-dev >/dev/null
	subprojects/fill-cache.sh >/dev/null # libfuse >= 3.17, linked statically
	[ -d build ] || meson setup build >/dev/null
	ninja -C build >/dev/null
	# libfuse's headers and library stay out of /usr/local
	meson install -C build --quiet --skip-subprojects
	if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
		exec runuser -u "$SUDO_USER" -- "$0" --as-user
	fi
fi
PATH=/usr/local/sbin:/usr/local/bin:$PATH
demo=$(mktemp -d /tmp/hsmfs-demo.XXXXXX)
[ -n "$demo" ] && [ -d "$demo" ] || exit 1
cleanup() {
	fusermount3 -u "$demo/mnt" 2>/dev/null || true
	# the daemon finishes its state files after the unmount: let it
	pid=$(cat "$demo/store/.hsmfs/lock" 2>/dev/null || true)
	for _ in $(seq 50); do
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	rm -rf "$demo"
}
trap cleanup EXIT
cd "$demo"
mkdir -p origin/docs store mnt
echo "hello from the origin" >origin/docs/hello.txt
head -c 64M /dev/urandom >origin/big.bin
for f in docs/hello.txt big.bin; do
	printf '{"path": "%s", "size": %s, "url": "file://%s"}\n' \
		"$f" "$(stat -c %s "origin/$f")" "$demo/origin/$f"
done >manifest.jsonl
say() { printf '\n$ %s\n' "$*"; }

echo "In $demo: origin/ is a slow tier, mnt/ the lazy mount of store/."
say hsmfsctl import -s store manifest.jsonl
hsmfsctl import -s store manifest.jsonl
say hsmfs store mnt -o hook=hsmfs-http "   # file:// origins need no server"
hsmfs store mnt -o hook=hsmfs-http
say "ls -l mnt            # names and sizes are local, no byte is here yet"
ls -l mnt
hsmfsctl status mnt
say "dd if=mnt/big.bin bs=4k skip=2560 count=1   # first touch fetches one 1 MiB chunk"
dd if=mnt/big.bin of=/dev/null bs=4k skip=2560 count=1 2>&1 | tail -1
hsmfsctl status mnt
say "dd if=mnt/big.bin bs=4k skip=2560 count=1   # again: served from the store, nothing fetched"
dd if=mnt/big.bin of=/dev/null bs=4k skip=2560 count=1 2>&1 | tail -1
hsmfsctl status mnt/big.bin | tail -1
say cat mnt/docs/hello.txt
cat mnt/docs/hello.txt
say "cmp mnt/big.bin origin/big.bin   # the rest is fetched as it is read"
cmp mnt/big.bin origin/big.bin && echo identical
hsmfsctl status mnt
say "echo 'and from the mount' >>mnt/docs/hello.txt   # a change: dirty, local"
echo "and from the mount" >>mnt/docs/hello.txt
hsmfsctl status mnt/docs/hello.txt | head -2
say "hsmfsctl archive mnt/docs/hello.txt   # back to the origin; clean again"
hsmfsctl archive mnt/docs/hello.txt
hsmfsctl status mnt/docs/hello.txt | head -2
say cat origin/docs/hello.txt
cat origin/docs/hello.txt
say fusermount3 -u mnt
fusermount3 -u mnt
echo
echo "demo done: hsmfs, hsmfsctl, hsmfs-http and hsmfs-mirror are installed (man hsmfs)"
