#!/usr/bin/env python3
"""OPEN_PERM and ACCESS_PERM: permission events for every open and every
read, resident files too.

Events used to fire only for missing bytes, so a policy such as "no
process of user X opens *.secret" could not be built: a resident file
was readable whatever the hooks said.  A hook that negotiated protocol
version 2 may subscribe to OPEN_PERM (mask "open"): every open of a
regular file in its subtree waits (parked, not in a worker thread) for
every such hook; deny wins; a timeout fails the open with EIO.  Version
3 adds ACCESS_PERM (mask "read"), asked for each read(2) and each
copy_file_range source, as fanotify's FAN_ACCESS_PERM.
"""
import errno
import os
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers"))
import pyhook  # noqa: E402
from harness import (Hook, Mount, eq, errno_of, main, ok, skip, wait_for)  # noqa: E402

P = 4096


def read(path):
    with open(path, "rb") as f:
        return f.read()


def stats(m):
    import json
    import subprocess
    from harness import HSMFSCTL
    return json.loads(subprocess.run([HSMFSCTL, "stats", "--json", m.mnt],
                                     stdout=subprocess.PIPE, check=True).stdout)


def test_deny_resident():
    with Mount(opts="timeout=5") as m:
        os.mkdir(m.path("sec"))
        for name in ("sec/a.secret", "plain"):
            with open(m.path(name), "wb") as f:
                f.write(b"s" * P)
        eq(stats(m).get("open_perm"), 0, "no subscriber: no OPEN_PERM event")
        with Hook(m.mnt, "--kind", "watch", "--mask", "open", "--mode", "deny",
                  "--errno", str(errno.EACCES), "--name", "policy") as h:
            eq(h.lines()[0]["welcome"]["version"], 6, "WELCOME says version 6 (the newest)")
            eq(errno_of(lambda: read(m.path("sec/a.secret"))), errno.EACCES,
               "open of a resident file denied by the hook")
            ev = h.events("OPEN_PERM")
            ok(len(ev) == 1 and ev[0]["path"] == "sec/a.secret" and
               ev[0]["start"] & 3 == os.O_RDONLY and ev[0]["pid"] > 0,
               "the event names the file, the open flags and the opener")
            ok(os.stat(m.path("sec/a.secret")).st_size == P, "stat is not an open")
            eq(errno_of(lambda: os.open(m.path("plain"), os.O_WRONLY | os.O_TRUNC)),
               errno.EACCES, "a denied O_TRUNC open")
        eq(read(m.path("plain")), b"s" * P, "truncates nothing")
        with Hook(m.mnt, "--kind", "watch", "--mask", "open", "--mode", "allow",
                  "--delay", "0.3"):
            t0 = time.monotonic()
            eq(read(m.path("sec/a.secret")), b"s" * P, "allowed after 0.3 s: the bytes")
            ok(time.monotonic() - t0 >= 0.25, "the open waited for the answer")
        eq(read(m.path("sec/a.secret")), b"s" * P, "no subscriber: opens as before")
        ok(stats(m).get("open_perm", 0) >= 3, "counted in stats")


def test_subtree_and_all_must_allow():
    with Mount(opts="timeout=5") as m:
        os.mkdir(m.path("sec"))
        for name in ("sec/f", "other"):
            with open(m.path(name), "wb") as f:
                f.write(b"x")
        s, w = pyhook.connect(m.mnt, "watch", ["open"], "sub", "/sec")
        s2, _ = pyhook.connect(m.mnt, "watch", ["open"], "all")
        got = {}

        def answer(sock, verdict, delay, key):
            sock.settimeout(10)
            data, fds = pyhook.recv_frame(sock)
            ev = pyhook.parse_event(data[8:], 0)
            got[key] = ev["path"]
            time.sleep(delay)
            pyhook.answer(sock, ev["id"], verdict, errno.EPERM)
        t1 = threading.Thread(target=answer, args=(s, pyhook.DENY, 0.3, "sub"))
        t2 = threading.Thread(target=answer, args=(s2, pyhook.ALLOW, 0, "all"))
        t1.start()
        t2.start()
        e = errno_of(lambda: read(m.path("sec/f")))
        t1.join()
        t2.join()
        eq(e, errno.EPERM, "one allows at once, the other denies later: denied")
        eq(got, {"sub": "sec/f", "all": "sec/f"}, "both were asked")
        # outside the subtree only the second hook is asked
        t2 = threading.Thread(target=answer, args=(s2, pyhook.ALLOW, 0, "other"))
        t2.start()
        eq(read(m.path("other")), b"x", "outside the subtree one allow is enough")
        t2.join()
        s.close()
        s2.close()


def older_hook(version, etype, evname):
    """A watch hook offering at most `version` that asks for the bit of a
    newer event type gets that version and no such events: nothing waits
    for a hook that cannot know them."""
    with Mount(opts="timeout=5") as m:
        with open(m.path("f"), "wb") as f:
            f.write(b"x")
        path = os.getxattr(m.mnt, "user.hsmfs.socket").decode()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        s.send(pyhook.frame(pyhook.HELLO, struct.pack("<IIII", 1, version, 2, 1 << etype) +
                            pyhook.string(b"old") + pyhook.string(b"")))
        data = s.recv(pyhook.MAX_FRAME)
        eq(struct.unpack_from("<I", data, 8)[0], version, "WELCOME says version %d" % version)
        eq(read(m.path("f")), b"x", "its %s bit is ignored" % evname)
        eq(stats(m).get(evname.lower()), 0, "no %s event" % evname)
        s.close()


def test_v1_hook():
    older_hook(1, 3, "OPEN_PERM")


def test_silent_hook_parks():
    n = 40
    with Mount(opts="timeout=4") as m:
        for k in range(n):
            with open(m.path("f%d" % k), "wb") as f:
                f.write(b"x")
        os.mkdir(m.path("d"))
        with Hook(m.mnt, "--kind", "watch", "--mask", "open", "--mode", "silent") as h:
            errs = [None] * n
            ts = [threading.Thread(target=lambda k=k: errs.__setitem__(
                k, errno_of(lambda: read(m.path("f%d" % k))))) for k in range(n)]
            for t in ts:
                t.start()
            try:
                wait_for(lambda: len(h.events("OPEN_PERM")) >= n, "events", deadline=3)
                got_all = True
            except TimeoutError:
                got_all = False
            ok(got_all, "all %d opens reached the hook at once" % n)
            t0 = time.monotonic()
            os.listdir(m.path("d"))
            os.stat(m.path("f0"))
            took = time.monotonic() - t0
            ok(took < 0.5, "a directory and stat meanwhile: %.3f s" % took)
            for t in ts:
                t.join()
        eq(sorted(set(errs)), [errno.EIO], "the opens fail with EIO at the timeout")


def test_access_perm():
    with Mount(opts="timeout=5") as m:
        os.mkdir(m.path("sec"))
        for name in ("sec/a", "sec/b", "plain"):
            with open(m.path(name), "wb") as f:
                f.write(name[-1].encode() * (3 * P))
        eq(read(m.path("sec/a")), b"a" * 3 * P, "no subscriber: read")
        eq(stats(m).get("access_perm"), 0, "and no ACCESS_PERM event")
        with Hook(m.mnt, "--kind", "watch", "--mask", "read", "--mode", "allow",
                  "--name", "reads") as h:
            fd = os.open(m.path("sec/a"), os.O_RDONLY)
            try:
                got = [os.pread(fd, P, 0), os.pread(fd, P, 0), os.pread(fd, 100, 2 * P + 5)]
            finally:
                os.close(fd)
            eq(got, [b"a" * P, b"a" * P, b"a" * 100], "allowed reads return the bytes")
            ev = [(e["start"], e["end"]) for e in h.events("ACCESS_PERM")]
            eq(ev, [(0, P), (0, P), (2 * P + 5, 2 * P + 105)],
               "one event per read(2), with its range; a repeated read is asked again")
            import mmap
            fd = os.open(m.path("sec/a"), os.O_RDONLY)
            try:
                mm = mmap.mmap(fd, 3 * P, prot=mmap.PROT_READ)
                ok(mm[P:P + 1] == b"a", "a mapping works; its page faults are asked too (%d)"
                   % (len(h.events("ACCESS_PERM")) - len(ev)))
                mm.close()
            finally:
                os.close(fd)
        with Hook(m.mnt, "--kind", "watch", "--mask", "read", "--mode", "deny",
                  "--errno", str(errno.EACCES)) as h:
            fd = os.open(m.path("sec/b"), os.O_RDONLY)
            try:
                eq(errno_of(lambda: os.pread(fd, P, 0)), errno.EACCES,
                   "a read of a resident file denied by the hook")
                out = os.open(m.path("plain"), os.O_WRONLY)
                try:
                    eq(errno_of(lambda: os.copy_file_range(fd, out, P, 0, 0)),
                       errno.EACCES, "a copy from it too (its source is read)")
                finally:
                    os.close(out)
                import subprocess
                r = subprocess.run([sys.executable, "-c", "import mmap, os; "
                                    "fd = os.open(%r, os.O_RDONLY); "
                                    "print(mmap.mmap(fd, %d, prot=mmap.PROT_READ)[:1])"
                                    % (m.path("sec/b"), P)], stderr=subprocess.DEVNULL)
                eq(r.returncode, -signal.SIGBUS, "a mapped page it denies is SIGBUS")
            finally:
                os.close(fd)
        eq(read(m.path("plain")), b"n" * 3 * P, "the copy changed nothing")
        ok(stats(m).get("access_perm", 0) >= 5, "counted in stats")


def test_access_perm_placeholder():
    """A denied read fetches nothing: ACCESS_PERM comes before PRE_ACCESS."""
    with Mount(opts="timeout=5") as m:
        from harness import import_manifest
        eq(import_manifest(m.mnt, [{"path": "p", "size": 4 * P}])[0], 0, "import")
        with Hook(m.mnt, "--mode", "allow") as fill, \
                Hook(m.mnt, "--kind", "watch", "--mask", "read", "--mode", "deny",
                     "--errno", str(errno.EPERM)) as w:
            eq(errno_of(lambda: read(m.path("p"))), errno.EPERM, "read of a placeholder denied")
            ok(w.events("ACCESS_PERM") and not fill.events("PRE_ACCESS"),
               "the watcher was asked, the fill hook never")


def test_access_perm_passthrough():
    """An open that must pass through (the file is open in passthrough mode
    already) is asked once, for the whole file, at open."""
    with Mount(opts="timeout=5") as m:
        with open(m.path("f"), "wb") as f:
            f.write(b"f" * P)
        keep = os.open(m.path("f"), os.O_RDONLY)  # before the hook: may pass through
        try:
            with Hook(m.mnt, "--kind", "watch", "--mask", "read", "--mode", "deny",
                      "--errno", str(errno.EACCES)) as h:
                def again():
                    fd = os.open(m.path("f"), os.O_RDONLY)
                    try:
                        return os.pread(fd, P, 0)
                    finally:
                        os.close(fd)
                eq(errno_of(again), errno.EACCES, "a new open of it cannot read unasked")
                whole = [e for e in h.events("ACCESS_PERM") if e["end"] == 2 ** 64 - 1]
                pt = os.getxattr(m.path("f"), "user.hsmfs.state").decode().endswith("passthrough")
                ok(not pt or whole, "passed through: asked at open for the whole file (%s)"
                   % ("passthrough" if pt else "not passed through here"))
        finally:
            os.close(keep)


def test_access_perm_passthrough_reads():
    """Reads through an open that had to pass through are asked each, as
    other reads are: such an open takes its reads to the daemon beside
    its backing file (only its mappings rely on the ask at open)."""
    with Mount(opts="timeout=5") as m:
        with open(m.path("f"), "wb") as f:
            f.write(b"f" * 4 * P)
        keep = os.open(m.path("f"), os.O_RDONLY)  # before the hook: may pass through
        try:
            pt = os.getxattr(m.path("f"), "user.hsmfs.state").decode().endswith("passthrough")
            with Hook(m.mnt, "--kind", "watch", "--mask", "read") as h:
                fd = os.open(m.path("f"), os.O_RDONLY)
                try:
                    eq(os.pread(fd, P, 2 * P), b"f" * P, "the read is allowed")
                finally:
                    os.close(fd)
                asked = [(e["start"], e["end"]) for e in h.events("ACCESS_PERM")
                         if e["end"] != 2 ** 64 - 1]
                if pt:
                    ok((2 * P, 3 * P) in asked,
                       "a read of a file open in passthrough mode is asked (%r)" % asked)
                else:
                    skip("a read of a file open in passthrough mode is asked",
                         "the kernel did not pass the file through here")
        finally:
            os.close(keep)


def test_v2_hook_no_reads():
    older_hook(2, 4, "ACCESS_PERM")


def run():
    test_access_perm()
    test_access_perm_placeholder()
    test_access_perm_passthrough()
    test_access_perm_passthrough_reads()
    test_v2_hook_no_reads()
    test_deny_resident()
    test_subtree_and_all_must_allow()
    test_v1_hook()
    test_silent_hook_parks()


main(run)
