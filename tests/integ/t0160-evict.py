#!/usr/bin/env python3
"""hsmfsctl evict, pin, unpin and prefetch on files, trees and ranges.

Evicted bytes leave the store (its blocks are freed) and are fetched
again, correctly, on the next read; dirty, pinned and open files are
never evicted; a pinned file is complete.
"""
import errno
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Hook, Mount, eq, import_manifest, main, ok, run,
                     tmpdir, write_tree)  # noqa: E402

MiB = 1 << 20


def st(m, p):
    return (os.getxattr(m.path(p), "user.hsmfs.state").decode(),
            int(os.getxattr(m.path(p), "user.hsmfs.present")))


def test():
    files = {"t/a": os.urandom(3 * MiB), "t/b": os.urandom(2 * MiB + 5), "c": os.urandom(4 * MiB)}
    mirror = write_tree(tmpdir("hsmfs-mirror-"), files)
    with Mount() as m:
        eq(import_manifest(m.mnt, [{"path": p, "size": len(d)} for p, d in files.items()])[0], 0,
           "import")
        with Hook(m.mnt, "--mirror", mirror) as h:
            rc, out = run([HSMFSCTL, "prefetch", m.path("t")])
            ok(rc == 0 and "prefetch: 2 files, 0 not managed by hsmfs, 0 failed" in out,
               "prefetch of a tree")
            eq([st(m, "t/a"), st(m, "t/b")], [("resident", 3 * MiB), ("resident", 2 * MiB + 5)],
               "the tree is resident")
            blocks = os.stat(m.spath("t/a")).st_blocks
            before = json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))
            rc, out = run([HSMFSCTL, "evict", m.path("t/a")])
            eq(rc, 0, "evict a file")
            after = json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))
            ok(after["evicted_files"] == before["evicted_files"] + 1 and
               after["evicted_bytes"] >= before["evicted_bytes"] + 2 * MiB,
               "counted in evicted_files and evicted_bytes (%d, %d bytes)"
               % (after["evicted_files"], after["evicted_bytes"]))
            eq(st(m, "t/a"), ("placeholder", 0), "evicted: a placeholder again")
            ok(os.stat(m.spath("t/a")).st_blocks < blocks // 10, "its blocks left the store")
            n = len(h.events())
            with open(m.path("t/a"), "rb") as f:
                eq(f.read() == files["t/a"], True, "evicted bytes come back right")
            ok(len(h.events()) > n, "fetched again through the hook")

            rc, out = run([HSMFSCTL, "evict", "--range", "%d-%d" % (MiB, 2 * MiB), m.path("t/a")])
            eq((rc, st(m, "t/a")), (0, ("partial", 2 * MiB)), "evict a range")
            with open(m.path("t/a"), "rb") as f:
                eq(f.read() == files["t/a"], True, "the range comes back right")

            with open(m.path("c"), "r+b") as f:
                f.write(b"LOCAL")
            rc, out = run([HSMFSCTL, "evict", m.path("c")])
            ok(rc != 0 and "dirty: changed through the mount" in out,
               "a dirty file is not evicted, and hsmfsctl says why: " + out.strip())
            with open(m.path("c"), "rb") as f:
                eq(f.read(5), b"LOCAL", "and keeps its bytes")

            rc, out = run([HSMFSCTL, "pin", m.path("t/b")])
            eq((rc, st(m, "t/b")), (0, ("resident,pinned", 2 * MiB + 5)), "pin: complete and pinned")
            rc, out = run([HSMFSCTL, "evict", m.path("t")])
            ok(rc != 0 and st(m, "t/b") == ("resident,pinned", 2 * MiB + 5),
               "a pinned file survives evicting its tree")
            ok("pinned (hsmfsctl unpin first)" in out, "and hsmfsctl says why: " + out.strip())
            eq(st(m, "t/a"), ("placeholder", 0), "while the rest of the tree is evicted")
            rc, out = run([HSMFSCTL, "unpin", m.path("t/b")])
            eq((rc, st(m, "t/b")[0]), (0, "resident"), "unpin")
            with open(m.path("t/b"), "rb") as held:
                rc, out = run([HSMFSCTL, "evict", m.path("t/b")])
                ok(rc != 0 and ("open or being filled" in out or "open in passthrough" in out),
                   "an open file is not evicted: " + out.strip())
                eq(held.read() == files["t/b"], True, "and reads right meanwhile")
            eq(run([HSMFSCTL, "evict", m.path("t/b")])[0], 0, "evicted once closed")
            with open(os.path.join(m.mnt, "plain"), "wb") as f:
                f.write(b"x")
            rc, out = run([HSMFSCTL, "evict", m.path("plain")])
            ok(rc == 0 and "1 not managed by hsmfs" in out, "a plain file is left alone")
    shutil.rmtree(mirror, ignore_errors=True)


if __name__ == "__main__":
    main(test)
