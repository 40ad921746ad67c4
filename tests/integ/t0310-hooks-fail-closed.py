#!/usr/bin/env python3
"""Hooks cannot silence, outvote or stall each other: the engine fails closed.

Each part is a reproduction of a way the engine used to let an operation
through that a hook had not allowed, or to wait longer than the user's
timeout, driven by raw protocol clients (tests/helpers/pyhook.py):
  1. a watch hook that stops reading its socket (its queue full) has not
     allowed: writes and reads fail, never succeed without its answer;
  2. QUIET from one watcher does not quiet another that denies;
  3. a watcher's deny is not lost when the fill hook answers first;
  4. readahead events nobody waits for time out, are cancelled and free
     their slots;
  5. the timeout is the bound the user set: a buffered read with no hook
     is not retried into a second timeout; PROGRESS that reports no new
     bytes does not extend it;
  6. smaller: a connection that never says HELLO is closed; a hook name
     with control characters is refused; subtrees "/sub" and "sub/"
     match; a DENY with ETIMEDOUT reaches the caller as ETIMEDOUT;
     PRE_MODIFY events carry the file's origin and version.
"""
import errno
import os
import shutil
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers"))
import pyhook  # noqa: E402
from harness import (Hook, Mount, diag, dread, eq, errno_of, errnos_in_threads,  # noqa: E402
                     import_manifest, main, ok, tmpdir, wait_for)

P = 4096


def deep_name(m):
    """A file at a path of ~3 KiB, so that each event frame is large."""
    parts = ["d%02d" % i + "x" * 240 for i in range(12)]
    d = m.path(*parts)
    os.makedirs(d)
    return os.path.join(d, "f")


def test_backpressure():
    """Each file in its own write, so that the kernel sends them at once."""
    n = 60
    with Mount(opts="timeout=1") as m:
        path = deep_name(m)
        d = os.path.dirname(path)
        for k in range(n):
            with open(os.path.join(d, "f%d" % k), "wb") as f:
                f.write(b"o" * P)
        s, _ = pyhook.connect(m.mnt, "watch", ["modify"], "stuck")  # never reads

        def writer(k):
            fd = os.open(os.path.join(d, "f%d" % k), os.O_WRONLY)
            try:
                os.pwrite(fd, b"W", 0)
            finally:
                os.close(fd)
        # enough events (and CANCELs) to fill its socket several times over
        results = errnos_in_threads(writer, n)
        eq(sorted(set(results)), [errno.EIO],
           "a watcher that stopped reading: every write fails (%d writes)" % len(results))
        ok(all(open(os.path.join(d, "f%d" % k), "rb").read() == b"o" * P for k in range(n)),
           "and none of them changed a file")
        s.close()

        # reads: a fill hook that answers, a watcher of reads that does not read
        mirror = tmpdir("hsmfs-mirror-")
        rel = os.path.relpath(d, m.mnt)
        os.makedirs(os.path.join(mirror, rel))
        data = os.urandom(P)
        for k in range(n):
            with open(os.path.join(mirror, rel, "g%d" % k), "wb") as f:
                f.write(data)
        eq(import_manifest(m.mnt, [{"path": os.path.join(rel, "g%d" % k), "size": P}
                                   for k in range(n)])[0], 0, "import")
        with Hook(m.mnt, "--mirror", mirror):
            w, _ = pyhook.connect(m.mnt, "watch", ["access"], "stuck-reader")
            errs = errnos_in_threads(lambda k: dread(os.path.join(d, "g%d" % k), 0, P), n)
            eq(sorted(set(errs)), [errno.EIO],
               "a watcher of reads that stopped reading: every read fails")
            w.close()
        shutil.rmtree(mirror, ignore_errors=True)


def test_quiet_scope():
    with Mount(opts="timeout=5") as m:
        with open(m.path("f"), "wb") as f:
            f.write(b"o" * 100)
        with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "allow",
                  "--quiet", "--name", "quiet-a"), \
             Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "deny",
                  "--errno", str(errno.EPERM), "--delay", "0.3", "--name", "deny-b"):
            errs = []
            for k in range(3):
                fd = os.open(m.path("f"), os.O_WRONLY)
                errs.append(errno_of(lambda: os.pwrite(fd, b"X", k)))
                os.close(fd)
            eq(errs, [errno.EPERM] * 3, "one watcher's QUIET does not outvote another's deny")
        with open(m.path("f"), "rb") as f:
            eq(f.read(), b"o" * 100, "the file is unchanged")


def test_fill_then_deny():
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(8 * P)
    with open(os.path.join(mirror, "f"), "wb") as f:
        f.write(data)
    with Mount(opts="timeout=5,chunk=64k") as m:
        eq(import_manifest(m.mnt, [{"path": "f", "size": len(data)}])[0], 0, "import")
        with Hook(m.mnt, "--mirror", mirror, "--name", "fast-fill"), \
             Hook(m.mnt, "--kind", "watch", "--mask", "access", "--mode", "deny",
                  "--errno", str(errno.EACCES), "--delay", "0.3", "--name", "slow-deny") as d:
            eq(errno_of(lambda: dread(m.path("f"), 0, P)), errno.EACCES,
               "O_DIRECT read: the watcher's deny wins over the fill's allow")
            eq(errno_of(lambda: dread(m.path("f"), 0, P)), errno.EACCES,
               "and the next read is asked again and denied again")
            ok(len(d.events("PRE_ACCESS")) >= 2, "the watcher saw both reads")
            eq(os.getxattr(m.path("f"), "user.hsmfs.present"), b"0",
               "nothing the fill hook wrote was committed")

            def buffered():
                with open(m.path("f"), "rb") as f:
                    return f.read()
            eq(errno_of(buffered), errno.EACCES, "a buffered read is denied too")
    shutil.rmtree(mirror, ignore_errors=True)


def test_readahead_timeout():
    mirror = tmpdir("hsmfs-mirror-")
    chunk = 64 << 10
    data = os.urandom(32 * chunk)
    for n in ("a", "b"):
        with open(os.path.join(mirror, n), "wb") as f:
            f.write(data)
    with Mount(opts="timeout=1,chunk=64k,max_pending=8") as m:
        eq(import_manifest(m.mnt, [{"path": n, "size": len(data)} for n in "ab"])[0], 0,
           "import")
        s, _ = pyhook.connect(m.mnt, "fill", ["access"], "head-only")
        s.settimeout(10)
        ignored, cancelled = set(), set()
        stop = threading.Event()

        def serve():
            # fills the first 6 chunks of any file; ignores the rest
            while not stop.is_set():
                try:
                    data_, fds = pyhook.recv_frame(s)
                except (socket.timeout, OSError):
                    return
                if not data_:
                    return
                length, mtype, flags = struct.unpack_from("<IHH", data_)
                if mtype == pyhook.CANCEL:
                    cancelled.add(struct.unpack_from("<Q", data_, 8)[0])
                    continue
                ev = pyhook.parse_event(data_[8:], flags)
                if ev["hint_start"] < 6 * chunk:
                    # a moment late, so that the reader always finds the next
                    # chunk still being fetched: each read then drives readahead
                    threading.Thread(target=fill_late, args=(ev, fds[0])).start()
                else:
                    ignored.add(ev["id"])
                    for fd in fds:
                        os.close(fd)

        def fill_late(ev, fd):
            time.sleep(0.05)
            lo, hi = ev["hint_start"], ev["hint_end"]
            os.pwrite(fd, data[lo:hi], lo)
            os.close(fd)
            with alock:
                pyhook.answer(s, ev["id"], pyhook.ALLOW, 0, lo, hi)
        alock = threading.Lock()
        t = threading.Thread(target=serve)
        t.start()
        try:
            for k in range(6):  # sequential: readahead asks the chunks beyond
                eq(dread(m.path("a"), k * chunk, chunk), data[k * chunk:(k + 1) * chunk],
                   "sequential read of chunk %d" % k)
            wait_for(lambda: ignored, "readahead events")
            try:
                wait_for(lambda: ignored <= cancelled, "CANCEL of every ignored event",
                         deadline=10)
            except TimeoutError:
                pass
            ok(ignored <= cancelled, "%d readahead events timed out and were cancelled, %d not"
               % (len(ignored), len(ignored - cancelled)))
            eq(dread(m.path("b"), 0, P), data[:P],
               "their slots are free again: another file's read works (max_pending=8)")
        finally:
            stop.set()
            s.close()
            t.join()
    shutil.rmtree(mirror, ignore_errors=True)


def test_timeout_bound():
    data = os.urandom(64 * P)
    with Mount(opts="timeout=2") as m:
        eq(import_manifest(m.mnt, [{"path": "f", "size": len(data)},
                                   {"path": "g", "size": len(data)}])[0], 0, "import")

        def buffered():
            with open(m.path("f"), "rb") as f:
                return f.read(P)
        t0 = time.monotonic()
        e = errno_of(buffered)
        took = time.monotonic() - t0
        eq(e, errno.EIO, "a buffered read with no hook fails with EIO")
        ok(took < 3.0, "within the timeout, not twice it (%.1f s, timeout=2)" % took)

        # PROGRESS with no new bytes does not hold the read
        s, _ = pyhook.connect(m.mnt, "fill", ["access"], "stalled")
        stop = threading.Event()

        def stall():
            data_, fds = pyhook.recv_frame(s)
            for fd in fds:
                os.close(fd)
            ev = pyhook.parse_event(data_[8:], 1)
            end = time.monotonic() + 8  # bounded, so that old code fails, not hangs
            while not stop.is_set() and time.monotonic() < end:
                pyhook.progress(s, ev["id"], 100)  # the same count, again and again
                stop.wait(0.3)
        t = threading.Thread(target=stall)
        t.start()
        t0 = time.monotonic()
        e = errno_of(lambda: dread(m.path("g"), 0, P))
        took = time.monotonic() - t0
        stop.set()
        t.join()
        # the event ran out of time while the stalled hook had it: counted
        line = [ln.split("\t") for ln in os.getxattr(m.mnt, "user.hsmfs.hooks").decode()
                .splitlines() if ln.startswith("stalled\t")]
        eq([ln[7] for ln in line], ["1"], "user.hsmfs.hooks counts the stalled hook's timeout")
        s.close()
        eq(e, errno.EIO, "a stalled fill that repeats its PROGRESS fails")
        ok(took < 4.0, "PROGRESS without new bytes extends nothing (%.1f s, timeout=2)" % took)


def test_stalled_hook():
    """40 reads wait for a fill hook that never answers: each is parked,
    not a FUSE worker thread, so every event reaches the hook and other
    requests are served at once."""
    n = 40
    with Mount(opts="timeout=5") as m:
        eq(import_manifest(m.mnt, [{"path": "p%d" % k, "size": P} for k in range(n)])[0], 0,
           "import")
        with open(m.path("resident"), "wb") as f:
            f.write(b"r" * P)
        s, _ = pyhook.connect(m.mnt, "fill", ["access"], "silent")
        seen = []

        def drain():
            s.settimeout(0.5)
            while True:
                try:
                    data_, fds = pyhook.recv_frame(s)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data_:
                    return
                for fd in fds:
                    os.close(fd)
                if data_[4] == pyhook.EVENT:
                    seen.append(1)
        t = threading.Thread(target=drain)
        t.start()
        errs = []
        readers = [threading.Thread(target=lambda k=k: errs.append(
            errno_of(lambda: dread(m.path("p%d" % k), 0, P)))) for k in range(n)]
        for r in readers:
            r.start()
        try:
            wait_for(lambda: len(seen) >= n, "%d events at the hook" % n, deadline=4)
            got_all = True
        except TimeoutError:
            got_all = False
        ok(got_all, "all %d reads reached the hook at once (%d did)" % (n, len(seen)))
        t0 = time.monotonic()
        st = os.stat(m.path("resident"))
        with open(m.path("resident"), "rb") as f:
            data_ = f.read()
        took = time.monotonic() - t0
        ok(st.st_size == P and data_ == b"r" * P and took < 0.5,
           "stat and read of a resident file meanwhile: %.3f s" % took)
        for r in readers:
            r.join()
        eq(sorted(set(errs)), [errno.EIO], "the parked reads fail with EIO at the timeout")
        s.shutdown(socket.SHUT_RDWR)
        s.close()
        t.join()


def test_small():
    with Mount(opts="timeout=5") as m:
        path = os.getxattr(m.mnt, "user.hsmfs.socket").decode()
        # a connection that never says HELLO is closed
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        c.connect(path)
        c.settimeout(15)
        t0 = time.monotonic()
        try:
            got = c.recv(pyhook.MAX_FRAME)
        except socket.timeout:
            got = None
        took = time.monotonic() - t0
        ok(got is not None and len(got) >= 8 and got[4] == pyhook.ERROR,
           "a connection without HELLO gets ERROR and is closed")
        ok(took < 10, "within the HELLO timeout (%.1f s)" % took)
        c.close()

        # a name with a newline would forge lines in status and the log
        try:
            s, _ = pyhook.connect(m.mnt, "watch", ["modify"], "evil\nhook 'x' connected")
            refused = False
            s.close()
        except (ConnectionError, OSError):
            refused = True
        ok(refused, "a hook name with a control character is refused")

        os.mkdir(m.path("sub"))
        with open(m.path("sub", "f"), "wb") as f:
            f.write(b"o")
        for sub in ("/sub", "sub/", "/sub/"):
            s, _ = pyhook.connect(m.mnt, "watch", ["modify"], "sub", sub)
            res = {}

            def w():
                # asked at open or at the write (the file may still be open
                # in passthrough mode: its release is asynchronous)
                def write():
                    fd = os.open(m.path("sub", "f"), os.O_WRONLY)
                    try:
                        os.pwrite(fd, b"x", 0)
                    finally:
                        os.close(fd)
                res["e"] = errno_of(write)
            t = threading.Thread(target=w)
            t.start()
            s.settimeout(10)
            try:
                data_, fds = pyhook.recv_frame(s)
                ev = pyhook.parse_event(data_[8:], 0)
                pyhook.answer(s, ev["id"], pyhook.DENY, errno.ETIMEDOUT)
                got = True
            except OSError:
                got = False
            t.join()
            s.close()
            ok(got, "subtree %r matches files below it" % sub)
            if sub == "/sub":
                eq(res.get("e"), errno.ETIMEDOUT,
                   "a DENY with ETIMEDOUT reaches the caller as ETIMEDOUT")

        # PRE_MODIFY of an imported file carries its origin and version
        eq(import_manifest(m.mnt, [{"path": "imp", "size": 10, "url": "http://o.example/imp",
                                    "version": "\"v1\""}])[0], 0, "import")
        s, _ = pyhook.connect(m.mnt, "watch", ["modify"], "mod")
        t = threading.Thread(target=lambda: errno_of(lambda: os.truncate(m.path("imp"), 5)))
        t.start()
        s.settimeout(10)
        data_, fds = pyhook.recv_frame(s)
        ev = pyhook.parse_event(data_[8:], 0)
        pyhook.answer(s, ev["id"], pyhook.ALLOW)
        t.join()
        s.close()
        eq((ev["origin"], ev["version"]), ("http://o.example/imp", "\"v1\""),
           "PRE_MODIFY carries the file's origin and version")


def test_join_race(rounds=50):
    """A watcher that has its WELCOME is asked for the very next change:
    WELCOME and the join are one step (a write racing the join used to
    go through unasked)."""
    with Mount(opts="timeout=5") as m:
        with open(m.path("f"), "wb") as f:
            f.write(b"o" * 4096)
        slipped = 0
        for i in range(rounds):
            s, _ = pyhook.connect(m.mnt, "watch", ["modify"], "race%d" % i)
            res = {}

            def write():
                fd = os.open(m.path("f"), os.O_WRONLY)
                try:
                    os.pwrite(fd, b"x", i)
                finally:
                    os.close(fd)
            t = threading.Thread(target=lambda: res.__setitem__("e", errno_of(write)))
            t.start()
            s.settimeout(5)
            try:
                data_, fds = pyhook.recv_frame(s)
                ev = pyhook.parse_event(data_[8:], 0)
                pyhook.answer(s, ev["id"], pyhook.DENY, errno.EPERM)
            except OSError:
                pass
            t.join()
            s.close()
            slipped += res.get("e") != errno.EPERM
        eq(slipped, 0, "%d writes right after the watcher's WELCOME: every one asked" % rounds)
        eq(open(m.path("f"), "rb").read(), b"o" * 4096, "and none changed the file")


def run():
    test_join_race()
    test_backpressure()
    test_quiet_scope()
    test_fill_then_deny()
    test_readahead_timeout()
    test_timeout_bound()
    test_stalled_hook()
    test_small()


main(run)
