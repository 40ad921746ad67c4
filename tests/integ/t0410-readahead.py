#!/usr/bin/env python3
"""readahead=: the kernel's readahead window of the mount.

As root the mount's bdi gets it once the session is up (the kernel caps it
at INIT, so it is set after); without the option it stays the kernel's.
Unprivileged, the mount goes on and says why it could not.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Mount, eq, main, ok, wait_for  # noqa: E402


def bdi_ra(mnt):
    d = os.stat(mnt).st_dev
    with open("/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(d), os.minor(d))) as f:
        return int(f.read())


def test():
    m = Mount(opts="prefetch=0")
    m.start()
    try:
        plain = bdi_ra(m.mnt)
        # a FUSE mount starts with the kernel's default, VM_READAHEAD_PAGES
        eq(plain, 128, "without readahead= the window is the kernel's default (KiB)")
        with open(m.path("g"), "wb") as f:
            f.write(b"y" * 300000)
        with open(m.path("g"), "rb") as f:
            f.read()
        eq(bdi_ra(m.mnt), 128, "and after the mount served requests, still")
        eq(m.stop(), 0, "daemon exited 0 after unmount")
        # the whole log, the daemon gone: a window set would be in it
        ok("kernel readahead of the mount" not in m.output(), "and nothing set it")
    finally:
        m.cleanup()
    with Mount(opts="prefetch=0,readahead=2M") as m:
        if os.geteuid() == 0:
            ok(wait_for(lambda: bdi_ra(m.mnt) == 2048 or None, "the window set"),
               "readahead=2M: the mount's window is 2048 KiB")
            ok(m.logged("kernel readahead of the mount: 2048 KiB (was %d KiB)" % plain),
               "and logged")
        else:
            ok(m.logged("needs root"), "unprivileged: the mount says it needs root")
            eq(bdi_ra(m.mnt), plain, "and the window stays the kernel's")
        with open(m.path("f"), "wb") as f:
            f.write(b"x" * 3000000)
        with open(m.path("f"), "rb") as f:
            eq(len(f.read()), 3000000, "the mount serves reads")


if __name__ == "__main__":
    main(test)
