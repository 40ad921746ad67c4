#!/usr/bin/env python3
"""Kernel FUSE passthrough for resident files, decided at open.

  1. a resident file opened passes through (the kernel reads the store
     file itself); a placeholder does not until it is filled;
  2. a PRE_MODIFY watcher still sees every write of files opened for
     writing after it subscribed (those opens are not passed through);
  3. eviction skips a file open in passthrough mode;
  4. what is written through passthrough is marked dirty and survives a
     remount;
  5. a re-import of a file open in passthrough mode is refused, never
     served as zeros;
  6. where the kernel refuses (unprivileged mounts) opens fall back to
     the daemon's path, counted in the stats;
  7. a write through a shared mapping of a file open for writing in
     passthrough mode shows its times (the attributes are not cached
     while such an open lasts).
"""
import errno
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Hook, Mount, eq, errno_of, import_manifest, main,  # noqa: E402
                     ok, skip, tmpdir, unmount, wait_for)

P = 4096


def stats(m):
    return json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))


def released(m, name):
    """Wait until the kernel's release of name's last passthrough open
    (sent after close(2) returns, asynchronously) reached the daemon."""
    wait_for(lambda: "passthrough" not in state(m, name), "the release of %s" % name)


def open_pt(m, name, flags=os.O_RDONLY):
    """Open name so that it passes through: the releases of earlier opens
    through the page cache reach the daemon after close(2) returns, and
    until they have, a new open cannot pass through.  Returns the fd."""
    fds = []

    def try_open():
        fd = os.open(m.path(name), flags)
        if "passthrough" in state(m, name):
            fds.append(fd)
            return True
        os.close(fd)
        return False
    try:
        wait_for(try_open, "an open of %s in passthrough mode" % name)
    except TimeoutError:
        return os.open(m.path(name), flags)  # the checks that follow fail
    return fds[0]


def state(m, name):
    return os.getxattr(m.path(name), "user.hsmfs.state").decode()


def test_unprivileged_fallback():
    with Mount() as m:
        with open(m.path("f"), "wb") as f:
            f.write(b"x" * P)
        eq(open(m.path("f"), "rb").read(), b"x" * P, "reads right")
        s = stats(m)
        ok(s.get("passthrough") == 0 or s.get("passthrough_refused", 0) > 0,
           "passthrough off or refused, counted (%s)" % {k: v for k, v in s.items()
                                                         if k.startswith("passthrough")})
        ok("passthrough" not in state(m, "f"), "the file is served through the daemon")


def test_passthrough():
    store, mirror = tmpdir("hsmfs-store-"), tmpdir("hsmfs-mirror-")
    data = os.urandom(256 << 10)
    with open(os.path.join(mirror, "p"), "wb") as f:
        f.write(data)
    with Mount(store=store, opts="chunk=64k") as m:
        with open(m.path("plain"), "wb") as f:
            f.write(b"r" * P)
        if not stats(m).get("passthrough"):
            skip("passthrough", "the kernel did not offer FUSE passthrough")
            return
        n0 = stats(m)["passthrough_opens"]
        with os.fdopen(open_pt(m, "plain"), "rb") as f:
            ok("passthrough" in state(m, "plain"), "a resident file opens in passthrough mode")
            eq(f.read(), b"r" * P, "and reads right")
        ok(stats(m)["passthrough_opens"] > n0, "counted")
        released(m, "plain")
        ok("passthrough" not in state(m, "plain"), "closed: no longer in passthrough mode")

        # 1. a placeholder is read through its hook, then passes through
        eq(import_manifest(m.mnt, [{"path": "p", "size": len(data), "url": "file:///p",
                                    "version": "v1"}])[0], 0, "import")
        with Hook(m.mnt, "--mirror", mirror) as h:
            with open(m.path("p"), "rb") as f:
                ok("passthrough" not in state(m, "p"), "a placeholder does not pass through")
                eq(f.read(), data, "its bytes come from the hook")
            ok(len(h.events("PRE_ACCESS")) > 0, "through PRE_ACCESS events")
        eq(state(m, "p"), "resident", "filled")
        with os.fdopen(open_pt(m, "p"), "rb") as f:
            ok("passthrough" in state(m, "p"), "filled, the next open passes through")
            eq(f.read(), data, "same bytes")

            # 3. eviction skips it while it is open so
            e = errno_of(lambda: os.setxattr(m.path("p"), "user.hsmfs.evict", b""))
            eq(e, errno.EBUSY, "evicting a file open in passthrough mode: EBUSY")
            f.seek(0)
            eq(f.read(), data, "its bytes stay")

            # 5. a new version while it is open: refused, never zeros
            with open(os.path.join(mirror, "p"), "wb") as g:
                g.write(os.urandom(len(data)))
            rc, out = import_manifest(m.mnt, [{"path": "p", "size": len(data),
                                               "url": "file:///p", "version": "v2"}])
            ok(rc != 0 and "passthrough" in out, "re-import refused while open (%d)" % rc)
            f.seek(0)
            eq(f.read(), data, "the open file still reads the old version, whole")

        # a write meeting a full store evicts and retries in the daemon
        # only: with evictable bytes in the store, writes do not pass through
        released(m, "p")
        fd = os.open(m.path("plain"), os.O_WRONLY)
        try:
            ok("passthrough" not in state(m, "plain"),
               "opened for writing while the store holds evictable bytes: not passed through")
        finally:
            os.close(fd)

        # 2. a watcher sees writes of files opened after it subscribed
        with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "allow") as h:
            fd = os.open(m.path("p"), os.O_WRONLY)
            try:
                ok("passthrough" not in state(m, "p"),
                   "opened for writing with a watcher: not passed through")
                os.pwrite(fd, b"USER", 100)
            finally:
                os.close(fd)
            ok(len(h.events("PRE_MODIFY")) >= 1, "the watcher saw the write")
            with os.fdopen(open_pt(m, "p"), "rb") as f:
                ok("passthrough" in state(m, "p"), "a read-only open still passes through")
            released(m, "p")
        eq(state(m, "p"), "dirty", "written: dirty, nothing evictable left")
        # the kernel passes every open of an inode in passthrough mode
        # through: a watcher is asked at open for the whole file (its
        # mappings), and about each write (they come to the daemon)
        released(m, "plain")
        with os.fdopen(open_pt(m, "plain"), "rb") as f:
            ok("passthrough" in state(m, "plain"), "open in passthrough mode")
            with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "deny",
                      "--errno", str(errno.EPERM)) as h:
                eq(errno_of(lambda: os.open(m.path("plain"), os.O_WRONLY)), errno.EPERM,
                   "a write open beside it: the watcher's deny at open holds")
                ev = h.events("PRE_MODIFY")
                ok(len(ev) == 1 and ev[0]["start"] == 0 and ev[0]["end"] == 2**64 - 1,
                   "asked for the whole file: %s" % [(e["start"], e["end"]) for e in ev])
            with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "allow") as h:
                fd = os.open(m.path("plain"), os.O_WRONLY)
                os.pwrite(fd, b"Z", 0)
                os.pwrite(fd, b"Z", 1)
                os.close(fd)
                eq([(e["start"], e["end"]) for e in h.events("PRE_MODIFY")],
                   [(0, 2**64 - 1), (0, 1), (1, 2)],
                   "asked at open for the whole file, then about each write")
                eq(f.read(2), b"ZZ", "and the reader sees them")

        # 4. written through passthrough: recorded, and kept
        fd = open_pt(m, "p", os.O_WRONLY)
        try:
            ok("passthrough" in state(m, "p"), "opened for writing, no watcher: passthrough")
            os.pwrite(fd, b"MORE", len(data) + 10)
        finally:
            os.close(fd)
        released(m, "p")
        eq(state(m, "p"), "dirty", "what passthrough wrote is recorded dirty")
        eq(int(os.getxattr(m.path("p"), "user.hsmfs.present")), len(data) + 14,
           "with its new size, all present")
        eq(errno_of(lambda: os.setxattr(m.path("p"), "user.hsmfs.evict", b"")), errno.EBUSY,
           "and never evicted")
    want = data[:100] + b"USER" + data[104:] + b"\0" * 10 + b"MORE"
    with Mount(store=store) as m:
        with open(m.path("p"), "rb") as f:
            got = f.read()
        eq(got, want, "after a remount: the user's bytes")
        released(m, "p")  # the read's open passed through; RELEASE comes after close
        eq(state(m, "p"), "dirty", "still dirty")
        eq(int(os.getxattr(m.path("p"), "user.hsmfs.present")), len(want),
           "the size passthrough left was committed")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


def test_passthrough_killed():
    """A dirty file grown through passthrough, then the daemon killed
    before the open's release: the next mount counts what the store file
    holds, the user's bytes, as present (it said 8192 of 16384 bytes)."""
    store, mirror = tmpdir("hsmfs-store-"), tmpdir("hsmfs-mirror-")
    data = os.urandom(8192)
    with open(os.path.join(mirror, "p"), "wb") as f:
        f.write(data)
    with Mount(store=store) as m:
        if not stats(m).get("passthrough"):
            skip("passthrough killed", "the kernel did not offer FUSE passthrough")
            return
        eq(import_manifest(m.mnt, [{"path": "p", "size": len(data), "url": "file:///p",
                                    "version": "v1"}])[0], 0, "import")
        with Hook(m.mnt, "--mirror", mirror):
            with open(m.path("p"), "r+b") as f:
                eq(f.read(), data, "filled")
                f.seek(0)
                f.write(b"U")  # dirty: nothing evictable is left in the store
        released(m, "p")
        fd = open_pt(m, "p", os.O_WRONLY)
        ok("passthrough" in state(m, "p"), "opened for writing in passthrough mode")
        os.pwrite(fd, b"G" * 8192, 8192)
        os.fsync(fd)
        m.kill()
        m.proc.wait()
        try:
            os.close(fd)
        except OSError:
            pass  # ENOTCONN: the flush of a dead daemon's file
        unmount(m.mnt, lazy=True)
        m.proc = None  # killed on purpose: not a failure of the test
    with Mount(store=store) as m:
        with open(m.path("p"), "rb") as f:
            eq(f.read(), b"U" + data[1:] + b"G" * 8192, "the user's bytes, all of them")
        eq(int(os.getxattr(m.path("p"), "user.hsmfs.present")), 16384, "all present")
        ok(state(m, "p").startswith("dirty"), "dirty (%s)" % state(m, "p"))
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


def test_mapped_times():
    """A file open for writing in passthrough mode, written through a
    shared mapping: a stat shows the new modification and change times
    the store file got, during the open and after it (xfstests
    generic/080, 215: the kernel kept the times it had cached)."""
    import mmap
    import time

    def times(p):
        """mtime and ctime as stat -c asks them: statx of those alone,
        which the kernel answers from what it cached (a plain stat asks
        for the atime too, which a read invalidates)."""
        out = subprocess.run(["stat", "-c", "%.9Y %.9Z", p], stdout=subprocess.PIPE,
                             check=True).stdout.split()
        return tuple(int(x.replace(b".", b"")) for x in out)
    with Mount() as m:
        if not stats(m).get("passthrough"):
            skip("mapped times", "the kernel did not offer FUSE passthrough")
            return
        with open(m.path("t"), "wb") as f:
            f.write(b"x" * 4 * P)
        released(m, "t")
        before = times(m.path("t"))
        time.sleep(0.05)  # the clock moves: what is measured
        fd = open_pt(m, "t", os.O_RDWR)
        ok("passthrough" in state(m, "t"), "opened for writing in passthrough mode")
        with mmap.mmap(fd, 4 * P) as mm:
            mm[P:P + 4] = b"MAPD"
            during = times(m.path("t"))
        os.close(fd)
        after, real = times(m.path("t")), times(m.spath("t"))
        ok(during[0] > before[0] and during[1] > before[1],
           "during the open stat -c shows the mapped write's times (%s, before %s)" %
           (during, before))
        eq(after, real, "after it, the store file's times")
        with open(m.path("t"), "rb") as f:
            eq(f.read()[P:P + 4], b"MAPD", "and its bytes")


def run():
    if os.geteuid() != 0:
        test_unprivileged_fallback()
        return
    test_passthrough()
    test_passthrough_killed()
    test_mapped_times()


main(run)
