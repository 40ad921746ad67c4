#!/usr/bin/env python3
"""Direct and buffered I/O of one file are coherent (xfstests generic/451):
readers loop reading a file through the page cache while asynchronous
O_DIRECT writes (io_submit) rewrite it whole with a new pattern each
round; after each write an open without O_DIRECT must read the new
bytes.  A buffered read racing the direct write could cache the old
bytes after the kernel's own invalidation, and every later open kept
them.  Run on the store's own filesystem first (the same program must
pass there), then on the mount, with and without passthrough.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Mount, eq, main, tmpdir  # noqa: E402

PROG = os.environ.get("HSMFS_AIO_DIO_STALE") or os.path.join(
    os.path.dirname(os.path.abspath(os.environ.get("HSMFS", "hsmfs"))), "tests", "aio-dio-stale")
SECONDS = "4"


def run(path):
    r = subprocess.run([PROG, path, SECONDS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return r.returncode, r.stdout.decode(errors="replace").strip()


def test():
    d = tmpdir()
    rc, out = run(os.path.join(d, "native"))
    eq(rc, 0, "the store's filesystem: coherent (%s)" % out)
    for opts in ("", "nopassthrough"):
        with Mount(opts=opts) as m:
            rc, out = run(m.path("f"))
            eq(rc, 0, "%s: a buffered open after an async direct write reads its bytes (%s)" %
               (opts or "default", out))


if __name__ == "__main__":
    main(test)
