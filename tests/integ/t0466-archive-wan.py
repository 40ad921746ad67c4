#!/usr/bin/env python3
"""Archive end to end through a wide-area link of our own.

nginx with the WebDAV module is the origin, behind the benchmarks'
wanproxy.py on 127.0.0.1 (10 ms each way, 120 MB/s shared).  On a
zero-setup mount, 200 small files (32 KiB, in a new directory) and one
big file are written; hsmfsctl sync returns 0; then every object is
fetched from the origin directly over HTTP (not through the mount) and
its digest compared with what was written.  The big file is 64 MiB in
the suite and 1 GiB with HSMFS_LONG=1 (the issue's size; a few minutes
under sanitizers).  The data is made from a seeded generator in chunks,
so nothing the size of the big file is held in memory.
"""
import hashlib
import os
import random
import shutil
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFSCTL, Mount, Nginx, WanProxy, diag, eq, main, ok, run, tmpdir  # noqa: E402

from archiving import DAV, HTTP, dav_root  # noqa: E402

MIB = 1 << 20
BIG = (1024 if os.environ.get("HSMFS_LONG") else 64) * MIB
SMALL, SMALL_SIZE = 200, 32 << 10


def chunks(seed, size, step=4 * MIB):
    """size bytes from a generator seeded with seed, step at a time."""
    r = random.Random(seed)
    left = size
    while left:
        n = min(step, left)
        yield r.randbytes(n)
        left -= n


def write(path, seed, size):
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for c in chunks(seed, size):
            f.write(c)
            h.update(c)
    return h.hexdigest()


def fetched(url):
    """The digest and size of the object at url, fetched directly."""
    h, n = hashlib.sha256(), 0
    with urllib.request.urlopen(url, timeout=120) as r:
        while True:
            b = r.read(4 * MIB)
            if not b:
                break
            h.update(b)
            n += len(b)
    return h.hexdigest(), n


def test():
    seed = int.from_bytes(os.urandom(4), "little")
    diag("seed %d (data of file i: random.Random(seed + i))" % seed)
    root, store = dav_root(), tmpdir("hsmfs-store-")
    want = {}
    with Nginx(root, extra=DAV) as ng:
        px = WanProxy(ng.port)
        try:
            with Mount(store=store, opts="hook=%s --connections 8,origin=%s"
                       % (HTTP, px.url("o/"))) as m:
                os.listdir(m.mnt)
                os.mkdir(m.path("small"))
                for i in range(SMALL):
                    p = "small/f%03d" % i
                    want[p] = (write(m.path(p), seed + i, SMALL_SIZE), SMALL_SIZE)
                want["big.bin"] = (write(m.path("big.bin"), seed + SMALL, BIG), BIG)
                rc, out = run([HSMFSCTL, "sync", m.mnt])
                eq(rc, 0, "hsmfsctl sync of %d small files and %d MiB through the link (%s)"
                   % (SMALL, BIG // MIB, out.strip()))
                states = {os.getxattr(m.path(p), "user.hsmfs.state").decode().split(",")[0]
                          for p in want}
                eq(states, {"resident"}, "every file is clean")
            got = {p: fetched(ng.url("o/" + p)) for p in want}
            bad = sorted(p for p in want if got[p] != want[p])
            eq(bad, [], "every object fetched from the origin directly equals what was "
               "written, byte for byte (sha256)")
        finally:
            px.stop()
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


main(test)
