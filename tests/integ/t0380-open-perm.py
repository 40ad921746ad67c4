#!/usr/bin/env python3
"""OPEN_PERM: permission events for every open, resident files too.

Events used to fire only for missing bytes, so a policy such as "no
process of user X opens *.secret" could not be built: a resident file
was readable whatever the hooks said.  A hook that negotiated protocol
version 2 may subscribe to OPEN_PERM (mask "open"): every open of a
regular file in its subtree waits (parked, not in a worker thread) for
every such hook; deny wins; a timeout fails the open with EIO.
"""
import errno
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers"))
import pyhook  # noqa: E402
from harness import (Hook, Mount, eq, errno_of, main, ok, wait_for)  # noqa: E402

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
            eq(h.lines()[0]["welcome"]["version"], 2, "WELCOME says version 2")
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


def test_v1_hook():
    """A version-1 hook asking for the OPEN_PERM bit gets version 1 and
    no such events: opens are not held for a hook that cannot know them."""
    with Mount(opts="timeout=5") as m:
        with open(m.path("f"), "wb") as f:
            f.write(b"x")
        path = os.getxattr(m.mnt, "user.hsmfs.socket").decode()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        s.send(pyhook.frame(pyhook.HELLO, struct.pack("<IIII", 1, 1, 2, 1 << 3) +
                            pyhook.string(b"old") + pyhook.string(b"")))
        data = s.recv(pyhook.MAX_FRAME)
        eq(struct.unpack_from("<I", data, 8)[0], 1, "WELCOME says version 1")
        eq(read(m.path("f")), b"x", "its OPEN_PERM bit is ignored")
        s.close()


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


def run():
    test_deny_resident()
    test_subtree_and_all_must_allow()
    test_v1_hook()
    test_silent_hook_parks()


main(run)
