#!/usr/bin/env python3
"""Every hook that must answer is asked, however many there are (#48).

A watcher of the last daemon that has not connected again since a
restart (an absent hook) must still answer the events it subscribed to.
The engine used to skip it once an event had HOOKS_MAX (64) targets, and
used to forget it once the table the next daemon reads was full:
  1. 64 watchers connected after a restart allow a change, the absent
     one is still waited for; back, it denies, and its deny wins;
  2. the table the next daemon reads holds at most 64 hooks: with 64
     connected and one absent at a second restart, the one that does
     not fit is not forgotten: its changes fail (at the timeout), they
     do not go ahead unasked;
  3. a watcher with a subtree is asked for a file whose path is longer
     than the protocol's path (HSMFS_MAX_PATH): it was skipped, as if
     the file were outside its subtree;
  4. a fill hook subscribed to PRE_MODIFY must answer it, connected or
     absent: absent, it was not waited for (only watchers were).
Raw protocol clients (tests/helpers/pyhook.py) play the hooks.
"""
import errno
import os
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers"))
import pyhook  # noqa: E402
from harness import Mount, diag, eq, main, ok, wait_for, write_tree  # noqa: E402

HOOKS_MAX = 64  # fs/hooks.h
TIMEOUT = 6     # the mount's: what an unanswered change waits


def stats(m):
    import json
    return json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))


def restart(m):
    """What hsmfsctl restart does, without its wait for the hooks to come
    back (the absent one does not): returns once the next daemon serves."""
    before = stats(m)["restarts"]
    m.restarts_expected = True
    os.getxattr(m.mnt, "user.hsmfs.restart")
    wait_for(lambda: stats(m)["restarts"] > before, "the next daemon serves")


class Crowd:
    """n watchers of changes, named w0..w{n-1}, that allow every event
    they get; one thread reads them all."""

    def __init__(self, m, n):
        self.m, self.n = m, n
        self.socks = {}
        self.seen = {}  # event id -> watchers that got it
        self.lock = threading.Lock()
        self.stop = False
        self.connect()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def connect(self):
        with self.lock:
            for k in range(self.n):
                if k not in self.socks:
                    s, _ = pyhook.connect(self.m.mnt, "watch", ["modify"], "w%d" % k)
                    self.socks[k] = s

    def run(self):
        while not self.stop:
            with self.lock:
                socks = dict(self.socks)
            if not socks:
                time.sleep(0.01)
                continue
            r, _, _ = select.select(list(socks.values()), [], [], 0.05)
            for s in r:
                k = next(k for k, v in socks.items() if v is s)
                try:
                    data, fds = pyhook.recv_frame(s)
                except OSError:
                    data, fds = b"", []
                for fd in fds:
                    os.close(fd)
                if not data:
                    with self.lock:
                        if self.socks.get(k) is s:
                            del self.socks[k]
                    s.close()
                    continue
                if data[4] != pyhook.EVENT:
                    continue
                ev = pyhook.parse_event(data[8:], data[6])
                with self.lock:
                    self.seen.setdefault(ev["id"], set()).add(k)
                pyhook.answer(s, ev["id"], pyhook.ALLOW)

    def drop(self, k):
        with self.lock:
            s = self.socks.pop(k)
        s.close()

    def gone(self):
        with self.lock:
            return not self.socks

    def asked_all(self):
        with self.lock:
            return any(len(v) == self.n for v in self.seen.values())

    def close(self):
        self.stop = True
        self.t.join()
        for s in self.socks.values():
            s.close()


def change_in_thread(path):
    res = {}

    def go():
        t0 = time.monotonic()
        try:
            with open(path, "r+b") as f:
                f.write(b"Z")
            res["err"] = 0
        except OSError as e:
            res["err"] = e.errno
        res["secs"] = time.monotonic() - t0
    t = threading.Thread(target=go)
    t.start()
    return t, res


def guard_deny(m):
    """The absent watcher, back: it denies every change with EPERM.
    Returns (socket, thread, the ids it was asked)."""
    got = {}

    def place():
        # refused while the daemon still counts the connection that left
        try:
            got["s"], _ = pyhook.connect(m.mnt, "watch", ["modify"], "guard")
        except ConnectionError:
            return False
        return True
    wait_for(place, "a place for 'guard'")
    s = got["s"]
    asked = []

    def run():
        while True:
            try:
                data, fds = pyhook.recv_frame(s)
            except OSError:
                return
            if not data:
                return
            if data[4] == pyhook.EVENT:
                ev = pyhook.parse_event(data[8:], data[6])
                asked.append(ev["id"])
                pyhook.answer(s, ev["id"], pyhook.DENY, errno.EPERM)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return s, t, asked


def test_absent_past_64():
    with Mount(opts="nopassthrough,timeout=%d" % TIMEOUT) as m:
        write_tree(m.store, {"f": b"abc", "g": b"xyz"})
        guard, _ = pyhook.connect(m.mnt, "watch", ["modify"], "guard")
        restart(m)
        guard.close()  # the last daemon's connection: gone with it
        ok(m.logged("for hook 'guard' of the last daemon"), "the next daemon waits for 'guard'")
        crowd = Crowd(m, HOOKS_MAX)
        try:
            t, res = change_in_thread(m.path("f"))
            wait_for(crowd.asked_all, "all 64 watchers asked")
            t.join(1.0)
            ok(t.is_alive(), "64 watchers allowed a change: it still waits for the absent 'guard' "
               "(%r)" % res)
            # a place for it: one of the 64 leaves (it allowed already)
            crowd.drop(0)
            g, gt, asked = guard_deny(m)
            t.join(TIMEOUT + 5)
            eq((res.get("err"), len(asked)), (errno.EPERM, 1),
               "'guard' back is asked, and its deny wins")
            eq(open(m.spath("f"), "rb").read(), b"abc", "the file did not change")
            g.shutdown(socket.SHUT_RDWR)
            gt.join()
            g.close()
        finally:
            crowd.close()


def test_table_full():
    with Mount(opts="nopassthrough,timeout=%d" % TIMEOUT) as m:
        write_tree(m.store, {"f": b"abc"})
        guard, _ = pyhook.connect(m.mnt, "watch", ["modify"], "guard")
        restart(m)
        guard.close()
        crowd = Crowd(m, HOOKS_MAX)
        try:
            # the second restart: 64 connected, 'guard' still absent
            restart(m)
            wait_for(crowd.gone, "the 64 watchers saw the last daemon go")
            crowd.connect()  # all 64 back under their names
            ok(m.logged("no room to remember"), "the daemon says it could not name every hook")
            t, res = change_in_thread(m.path("f"))
            wait_for(crowd.asked_all, "all 64 watchers asked")
            t.join(TIMEOUT + 5)
            ok(not t.is_alive(), "the change ended")
            eq(res.get("err"), errno.EIO,
               "a hook that did not fit in the table was not forgotten: the change failed "
               "(%.1f s)" % res.get("secs", -1))
            eq(open(m.spath("f"), "rb").read(), b"abc", "the file did not change")
        finally:
            crowd.close()


def test_long_path():
    with Mount(opts="nopassthrough,timeout=%d" % TIMEOUT) as m:
        os.mkdir(m.path("deep"))
        s, _ = pyhook.connect(m.mnt, "watch", ["modify"], "subtree", "deep")
        asked = []
        armed = threading.Event()  # the file is made: deny its change

        def run():
            while True:
                try:
                    data, fds = pyhook.recv_frame(s)
                except OSError:
                    return
                if not data:
                    return
                if data[4] == pyhook.EVENT:
                    ev = pyhook.parse_event(data[8:], data[6])
                    asked.append(ev["path"])
                    # the file's path cannot be sent whole: it comes empty
                    verdict = pyhook.DENY if armed.is_set() else pyhook.ALLOW
                    pyhook.answer(s, ev["id"], verdict, errno.EPERM)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        # a path of 17 * 250 bytes below deep/, made one directory at a time
        cwd = os.getcwd()
        fd = -1
        try:
            os.chdir(m.path("deep"))
            for i in range(17):
                name = "%02d" % i + "y" * 248
                os.mkdir(name)
                os.chdir(name)
            with open("long", "wb") as f:
                f.write(b"old")
            fd = os.open("long", os.O_WRONLY)
        finally:
            os.chdir(cwd)
        before = len(asked)
        armed.set()
        err = 0
        try:
            os.pwrite(fd, b"new", 0)
        except OSError as e:
            err = e.errno
        os.close(fd)
        diag("asked %d times, the last paths: %r" % (len(asked), [p[-20:] for p in asked[-2:]]))
        ok(len(asked) > before, "the watcher of deep/ was asked of a change of a file below it "
           "whose path is too long to send whole")
        eq(err, errno.EPERM, "and its deny wins")
        s.shutdown(socket.SHUT_RDWR)
        t.join()
        s.close()


def test_absent_fill_perm():
    with Mount(opts="nopassthrough,timeout=%d" % TIMEOUT) as m:
        write_tree(m.store, {"f": b"abc"})
        s, _ = pyhook.connect(m.mnt, "fill", ["modify"], "keeper-of-f")
        restart(m)
        s.close()
        t, res = change_in_thread(m.path("f"))
        t.join(1.0)
        ok(t.is_alive(), "a change waits for the absent fill hook subscribed to it (%r)" % res)
        s, _ = pyhook.connect(m.mnt, "fill", ["modify"], "keeper-of-f")
        s.settimeout(TIMEOUT + 5)
        try:
            data, _ = pyhook.recv_frame(s)
        except socket.timeout:
            data = b""
        ok(data and data[4] == pyhook.EVENT, "back, it is asked")
        if data and data[4] == pyhook.EVENT:
            ev = pyhook.parse_event(data[8:], data[6])
            pyhook.answer(s, ev["id"], pyhook.DENY, errno.EPERM)
        t.join(TIMEOUT + 5)
        eq(res.get("err"), errno.EPERM, "and its deny wins")
        eq(open(m.spath("f"), "rb").read(), b"abc", "the file did not change")
        s.close()


def all_tests():
    test_absent_past_64()
    test_table_full()
    test_long_path()
    test_absent_fill_perm()


if __name__ == "__main__":
    main(all_tests)
