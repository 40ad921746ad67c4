#!/usr/bin/env python3
"""hsmfs-http keeps an origin's bytes only when the answer proves them.

An origin of our own on 127.0.0.1 (harness.Origin) answers the way broken
servers and proxies do: a 206 whose Content-Range does not parse or is
missing, a range other than the one asked, a gzip-coded body, a short
body, a same-second rewrite whose size changed.  Each is refused whole:
the read fails, nothing of the answer is committed (once the origin
answers right, every byte read is the file's), and a proven change makes
the file stale.  Answers that do prove their bytes (a unit in another
case, a 200 that ignored Range) are kept.  Every combination of chunk
size, first_fill and buffered or O_DIRECT reads.  Then the same-second
rewrite against a real nginx, and an origin trickling bytes below the
floor while a reader waits.
"""
import errno
import os
import shutil
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, Mount, Nginx, Origin, dread, eq, errno_of,  # noqa: E402
                     import_manifest, main, ok, tmpdir, wait_for)

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")
K, MiB = 1024, 1 << 20
SIZE = 4 * MiB
DATE = "Wed, 02 Dec 2026 10:00:00 GMT"

# (mount options, O_DIRECT reads?): chunk sizes, first_fill, the read path
COMBOS = [(o, d) for o in ("", "chunk=256k", "first_fill=0", "chunk=2m,first_fill=0",
                           "first_fill=64k")
          for d in (False, True)]
REFUSED = ("no-range", "wrong-range", "gzip", "gzip-range")
# a short body: what it brought is proven (a reader may get it), the rest is not
SHORT = ("short",)
KEPT = ("range-case", "ignore-range")


def read_at(path, off, n, direct):
    if direct:
        return dread(path, off, n)
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(n)


def read_other(path, off, n, direct, limit=60):
    """read_at() in another process: the daemon answers the same process's
    retry of a failed read with the same failure for a moment
    (hsmfs(8), timeout=), another process is asked afresh."""
    code = ("import sys; sys.path.insert(0, %r); from harness import dread; "
            "import os\n"
            "off, n, d = %d, %d, %r\n"
            "if d:\n    b = dread(%r, off, n)\n"
            "else:\n    f = open(%r, 'rb'); f.seek(off); b = f.read(n)\n"
            "sys.stdout.buffer.write(b)\n"
            % (os.path.dirname(os.path.abspath(__file__)), off, n, direct, path, path))
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=limit)
    if r.returncode:
        raise OSError(errno.EIO, r.stderr.decode()[-300:])
    return r.stdout


def state(m, name):
    return os.getxattr(m.path(name), "user.hsmfs.state").decode()


def mount(opts="", store=None):
    """A mount whose fills hsmfs-http makes, once each (no retries): the
    files carry their own URLs."""
    return Mount(opts="prefetch=0,hook=%s --retries 0%s" % (HTTP, "," + opts if opts else ""),
                 store=store)


def test_answers():
    """Each behaviour, each combination: refused whole or kept right."""
    data = os.urandom(SIZE)
    with Origin() as org:
        for mode in REFUSED + SHORT + KEPT:
            org.add(mode, data, DATE)
            org.modes[mode] = mode
        for opts, direct in COMBOS:
            how = "%s, %s" % (opts or "defaults", "O_DIRECT" if direct else "buffered")
            with mount(opts) as m:
                rc, out = import_manifest(m.mnt, [
                    {"path": p, "size": SIZE, "url": org.url(p), "version": DATE}
                    for p in REFUSED + SHORT + KEPT])
                eq(rc, 0, "import (%s): %s" % (how, out))
                for mode in REFUSED:
                    org.modes[mode] = mode
                    # a cold 4 KiB read in the middle of a chunk
                    off = 1114112
                    e = errno_of(lambda: read_at(m.path(mode), off, 4 * K, direct))
                    eq(e, errno.EIO, "%s (%s): a cold read fails with EIO" % (mode, how))
                    ok("stale" not in state(m, mode),
                       "%s (%s): the file is not marked stale (%s)"
                       % (mode, how, state(m, mode)))
                    # nothing of it was kept: with a good origin, every byte right
                    org.modes[mode] = "good"
                    eq(read_other(m.path(mode), off, 4 * K, direct), data[off:off + 4 * K],
                       "%s (%s): once the origin answers right, another process reads "
                       "the file's bytes" % (mode, how))
                    with open(m.path(mode), "rb") as f:
                        ok(f.read() == data, "%s (%s): the whole file reads right" % (mode, how))
                for mode in SHORT:
                    off = 1114112
                    try:
                        got = read_at(m.path(mode), off, 4 * K, direct)
                    except OSError as e:
                        got = e.errno
                    ok(got in (errno.EIO, data[off:off + 4 * K]),
                       "%s (%s): a cold read fails with EIO or gets the right bytes"
                       % (mode, how))
                    org.modes[mode] = "good"
                    eq(read_other(m.path(mode), 0, SIZE, direct), data,
                       "%s (%s): then the whole file reads right" % (mode, how))
                for mode in KEPT:
                    off = 1114112
                    eq(read_at(m.path(mode), off, 4 * K, direct), data[off:off + 4 * K],
                       "%s (%s): the read is right" % (mode, how))
                    with open(m.path(mode), "rb") as f:
                        ok(f.read() == data, "%s (%s): the whole file reads right" % (mode, how))
        gets = org.gets()
        ok(gets and all(h.get("Accept-Encoding") == "identity" for _, _, _, h in gets),
           "every GET asks for the identity coding (%d GETs)" % len(gets))
        cut = [whole for p, st, whole in org.bodies if p == "ignore-range" and st == 200]
        ok(cut and not all(cut),
           "a 200 of the whole file is stopped once the range asked is in (%d of %d)"
           % (cut.count(False), len(cut)))


def test_small_gzip():
    """A 100-byte file answered with a 200 and its gzip coding (which is
    longer than the file): the old code kept the coding's first bytes."""
    data = os.urandom(100)
    with Origin() as org:
        org.add("small", data, DATE)
        org.mode = "gzip"
        with mount() as m:
            eq(import_manifest(m.mnt, [{"path": "small", "size": 100, "url": org.url("small"),
                                        "version": DATE}])[0], 0, "import")
            eq(errno_of(lambda: open(m.path("small"), "rb").read()), errno.EIO,
               "a gzip-coded answer is refused")
            org.mode = "good"
            eq(read_other(m.path("small"), 0, 100, False), data, "then the file's own bytes")


def test_other_size():
    """A same-second rewrite: the Last-Modified is the recorded one, the
    size is not (every 206 says so): refused, and the file is stale."""
    data, new = os.urandom(2 * MiB), os.urandom(3 * MiB)
    with Origin() as org:
        org.add("f", data, DATE)
        org.other["f"] = new
        with mount("chunk=1m,first_fill=0") as m:
            eq(import_manifest(m.mnt, [{"path": "f", "size": 2 * MiB, "url": org.url("f"),
                                        "version": DATE}])[0], 0, "import")
            eq(read_at(m.path("f"), 0, 4 * K, False), data[:4 * K], "the first chunk reads")
            org.mode = "other-size"
            eq(errno_of(lambda: read_at(m.path("f"), MiB, 4 * K, True)), errno.EIO,
               "the second chunk, from a version of another size, is refused")
            wait_for(lambda: "stale" in state(m, "f"), "the file is stale")


def test_changed_size_locally():
    """A file the user grew or shrank through the mount still fills its
    missing bytes from the recorded version, whose size is the origin's,
    not the file's: also after a remount (the recorded size is kept)."""
    data = os.urandom(SIZE)
    store = tmpdir("hsmfs-store-")
    with Origin() as org:
        org.add("grown", data, DATE)
        org.add("shrunk", data, DATE)
        with mount("chunk=1m,first_fill=0", store=store) as m:
            eq(import_manifest(m.mnt, [{"path": p, "size": SIZE, "url": org.url(p),
                                        "version": DATE} for p in ("grown", "shrunk")])[0],
               0, "import")
            with open(m.path("grown"), "ab") as f:
                f.write(b"appended")
            os.truncate(m.path("shrunk"), 3 * MiB)
            eq(read_at(m.path("grown"), MiB, 4 * K, True), data[MiB:MiB + 4 * K],
               "a grown file's missing bytes fill from the origin")
            eq(read_at(m.path("shrunk"), MiB, 4 * K, True), data[MiB:MiB + 4 * K],
               "a shrunk file's too")
        with mount("chunk=1m,first_fill=0", store=store) as m:
            eq(read_at(m.path("grown"), 2 * MiB, 4 * K, True), data[2 * MiB:2 * MiB + 4 * K],
               "after a remount too")
            with open(m.path("grown"), "rb") as f:
                ok(f.read() == data + b"appended", "the grown file reads whole")
            with open(m.path("shrunk"), "rb") as f:
                ok(f.read() == data[:3 * MiB], "the shrunk file reads whole")
    shutil.rmtree(store, ignore_errors=True)


def timed_read(path, off, n, limit):
    """(errno or the bytes, seconds) of a read in another process, killed
    after limit seconds (then (None, limit))."""
    t0 = time.monotonic()
    try:
        got = read_other(path, off, n, True, limit)
    except OSError as e:
        got = e.errno
    except subprocess.TimeoutExpired:
        got = None
    return got, time.monotonic() - t0


def test_trickle():
    """An origin sending 2 bytes a second: each second's PROGRESS is new
    bytes, but far below progress_floor, so the read fails at its
    timeout (5 s) instead of waiting for the trickle.  One sending above
    the floor holds the reader past the timeout, until its bytes are in."""
    data = os.urandom(SIZE)
    with Origin() as org:
        org.add("slow", data, DATE)
        org.add("steady", data, DATE)
        org.modes["slow"] = "trickle"
        org.modes["steady"] = "trickle"
        org.trickle_rate = 48 * K
        with mount("timeout=3,chunk=256k,first_fill=0") as m:
            eq(import_manifest(m.mnt, [{"path": p, "size": SIZE, "url": org.url(p),
                                        "version": DATE} for p in ("slow", "steady")])[0],
               0, "import")
            # 256 KiB at 48 KiB a second: about 5 s, past the 3 s timeout
            # the chunk's last page: its bytes come last
            got, t = timed_read(m.path("steady"), 252 * K, 4 * K, 30)
            eq(got, data[252 * K:256 * K], "an origin above the floor: the read gets its bytes")
            ok(t > 3.0, "after longer than the timeout (%.1f s)" % t)
            org.trickle_rate = 2
            got, t = timed_read(m.path("slow"), 0, 4 * K, 20)
            ok(got not in (None, data[:4 * K]) and isinstance(got, int),
               "a trickling origin fails the read (%s)" % got)
            ok(t < 3.0 + 2.0, "at its timeout, not later (%.1f s, timeout 3 s)" % t)


def test_nginx_same_second_rewrite():
    """The same against a real nginx: a 2 MiB file rewritten as 3 MiB with
    its mtime kept, after the first chunk was read."""
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    data, new = os.urandom(2 * MiB), os.urandom(3 * MiB)
    p = os.path.join(root, "f.bin")
    with open(p, "wb") as f:
        f.write(data)
    with Nginx(root) as ng:
        lm = urllib.request.urlopen(urllib.request.Request(ng.url("f.bin"), method="HEAD")) \
            .headers["Last-Modified"]
        with mount("chunk=1m,first_fill=0") as m:
            eq(import_manifest(m.mnt, [{"path": "f.bin", "size": 2 * MiB,
                                        "url": ng.url("f.bin"), "version": lm}])[0], 0,
               "import")
            eq(read_at(m.path("f.bin"), 0, 4 * K, True), data[:4 * K], "the first chunk reads")
            st = os.stat(p)
            with open(p, "wb") as f:
                f.write(new)
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
            lm2 = urllib.request.urlopen(urllib.request.Request(ng.url("f.bin"),
                                                                method="HEAD")) \
                .headers["Last-Modified"]
            eq(lm2, lm, "nginx says the same Last-Modified")
            got = None
            try:
                got = read_at(m.path("f.bin"), MiB, 4 * K, True)
            except OSError as e:
                got = e.errno
            eq(got, errno.EIO, "the new version's bytes are refused")
            ok(got != new[MiB:MiB + 4 * K], "not the new version's bytes inside the old file")
            wait_for(lambda: "stale" in state(m, "f.bin"), "the file is stale")


if __name__ == "__main__":
    main(lambda: [t() for t in (test_answers, test_small_gzip, test_other_size,
                                test_changed_size_locally, test_trickle,
                                test_nginx_same_second_rewrite)])
