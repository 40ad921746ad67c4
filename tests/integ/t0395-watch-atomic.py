#!/usr/bin/env python3
"""Watchers see what they subscribed to, whatever races them (issue 31,
items 4 and 5).

  1. the decision "may this open pass through" and a PRE_MODIFY
     watcher's subscription are one step: with a watcher that denies the
     whole-file PRE_MODIFY of an open and allows the rest, read-only
     opens that start passthrough racing writers that map the file
     shared, store a byte, msync and close, every store is covered by an
     event or refused;
  2. ACCESS_PERM is asked for splice and sendfile too: the kernel's
     splice of a FUSE file reads through its page cache even for direct
     I/O opens, so what an allowed read cached must not be served to the
     next reader: two uids on an allow_other mount (root only), and one
     process whose allowed sendfile is followed by a deny-all watcher,
     with passthrough and with nopassthrough.
"""
import errno
import json
import mmap
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Hook, Mount, eq, is_root, main, ok, skip, wait_for  # noqa: E402

P = 4096
WHOLE = 2 ** 64 - 1


class Log:
    """The hook's log, read on from where it was last read."""

    def __init__(self, h):
        self.f = open(h.logpath)
        self.buf = ""
        self.ev = []

    def more(self):
        self.buf += self.f.read()
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            e = json.loads(line)
            if "id" in e:
                self.ev.append(e)
        return self.ev


def test_modify_race(opts, seconds=3.0):
    npages = 4
    with Mount(opts=opts) as m:
        with open(m.path("f"), "wb") as f:
            f.write(b"\0" * npages * P)
        with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "deny-whole",
                  "--errno", str(errno.EACCES), "--name", "changes") as h:
            log = Log(h)
            lock = threading.Lock()
            stop = time.monotonic() + seconds
            res = {"stores": 0, "refused": 0, "unseen": [], "errors": []}

            def reader():
                while time.monotonic() < stop:
                    try:
                        os.close(os.open(m.path("f"), os.O_RDONLY))
                    except OSError as e:
                        res["errors"].append("read open: %s" % e)
                        return

            def covered(page):
                with lock:
                    return sum(1 for e in log.more() if e["type"] == "PRE_MODIFY" and
                               e["end"] != WHOLE and e["start"] <= page * P < e["end"])

            def writer(page):
                n = 0
                while time.monotonic() < stop:
                    n += 1
                    before = covered(page)
                    try:
                        fd = os.open(m.path("f"), os.O_RDWR)
                    except PermissionError:
                        res["refused"] += 1  # the whole-file PRE_MODIFY, denied
                        continue
                    try:
                        mm = mmap.mmap(fd, npages * P, mmap.MAP_SHARED,
                                       mmap.PROT_READ | mmap.PROT_WRITE)
                        mm[page * P] = n % 255 + 1
                        mm.flush()
                        mm.close()
                    except OSError as e:
                        if e.errno != errno.EACCES:
                            res["errors"].append("store: %s" % e)
                        res["refused"] += 1
                        continue
                    finally:
                        os.close(fd)
                    res["stores"] += 1
                    if covered(page) == before:
                        res["unseen"].append(page)

            ts = [threading.Thread(target=reader) for _ in range(2)] + \
                 [threading.Thread(target=writer, args=(k,)) for k in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            eq(res["errors"], [], "%s: no other errors" % opts)
            ok(res["stores"] > 20, "%s: %d stores made, %d refused" %
               (opts, res["stores"], res["refused"]))
            eq(len(res["unseen"]), 0, "%s: every store is covered by an event "
               "(%d of %d were not)" % (opts, len(res["unseen"]), res["stores"]))


class Actor:
    """A child process of another uid that opens and reads on command, so
    that one uid's open outlives another's reads."""
    ends = set()  # the parent's ends of every actor's pipes: not a child's to keep

    def __init__(self, uid):
        self.r, cw = os.pipe()
        cr, self.w = os.pipe()
        Actor.ends |= {self.r, self.w}
        self.pid = os.fork()
        if self.pid == 0:
            for fd in Actor.ends:
                os.close(fd)
            code = 0
            try:
                os.setgid(uid)
                os.setuid(uid)
                self.serve(os.fdopen(cr, "r"), os.fdopen(cw, "w"))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(cw)
        os.close(cr)
        self.out = os.fdopen(self.w, "w")
        self.inp = os.fdopen(self.r, "r")

    @staticmethod
    def serve(inp, out):
        fds = {}
        for line in inp:
            cmd, *args = line.split()
            try:
                if cmd == "open":
                    fds[args[0]] = os.open(args[1], os.O_RDONLY)
                    got = "ok"
                else:
                    fd, off, n = fds[args[0]], int(args[1]), int(args[2])
                    if cmd == "pread":
                        got = os.pread(fd, n, off)
                    else:
                        pr, pw = os.pipe()
                        try:
                            if cmd == "splice":
                                k = os.splice(fd, pw, n, offset_src=off)
                            else:
                                k = os.sendfile(pw, fd, off, n)
                            got = os.read(pr, k) if k else b""
                        finally:
                            os.close(pr)
                            os.close(pw)
                    got = "data %s" % got.hex()
            except OSError as e:
                got = "errno %d" % e.errno
            out.write(got + "\n")
            out.flush()

    def do(self, *cmd):
        self.out.write(" ".join(str(c) for c in cmd) + "\n")
        self.out.flush()
        got = self.inp.readline().strip()
        if got.startswith("data "):
            return bytes.fromhex(got[5:])
        if got.startswith("errno "):
            return int(got[6:])
        return got

    def close(self):
        Actor.ends -= {self.r, self.w}
        self.out.close()
        self.inp.close()
        os.waitpid(self.pid, 0)


def drops(m):
    return json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))["cache_drops"]


def dropped(m, before, what):
    """Wait until the daemon has dropped what an allowed read left in the
    kernel's page cache (cache_drops passed before).  Until then a
    splice of another process is served from the cache unasked: the
    kernel's window hsmfs-hooks(7) states, microseconds long here, longer
    under ThreadSanitizer; the checks that follow are of hsmfs's drop,
    not of that window."""
    wait_for(lambda: drops(m) > before, "the page cache dropped after %s" % what)


def shown(got):
    """A result as a check shows it: the errno, or how many bytes came"""
    return got if isinstance(got, (int, str)) else "%d bytes" % len(got)


def test_two_uids(opts):
    if not is_root():
        skip("%s: another uid reads what was denied" % opts, "needs root to switch uids")
        return
    data = os.urandom(16 * P)
    with Mount(opts=opts) as m:
        os.chmod(m.dir, 0o755)
        os.chmod(m.mnt, 0o755)
        with open(m.path("secret.bin"), "wb") as f:
            f.write(data)
        os.chmod(m.path("secret.bin"), 0o644)
        with Hook(m.mnt, "--kind", "watch", "--mask", "read", "--mode", "allow-uid",
                  "--allow-uid", "2001", "--errno", str(errno.EACCES)) as h:
            a, b = Actor(2001), Actor(2002)
            try:
                path = m.path("secret.bin")
                eq(b.do("open", "x", path), "ok", "%s: uid 2002 opens" % opts)
                eq(b.do("pread", "x", 0, len(data)), errno.EACCES,
                   "%s: its pread is denied" % opts)
                for how in ("splice", "sendfile", "splice"):
                    eq(a.do("open", "y", path), "ok", "%s: uid 2001 opens" % opts)
                    before = drops(m)
                    eq(a.do(how, "y", 0, len(data)), data, "%s: its %s is allowed" % (opts, how))
                    dropped(m, before, "uid 2001's %s" % how)
                    for how2 in ("splice", "sendfile"):
                        asked = len([e for e in h.events("ACCESS_PERM") if e["uid"] == 2002])
                        got = shown(b.do(how2, "x", 0, len(data)))
                        eq(got, errno.EACCES, "%s: then a %s of uid 2002's earlier open is "
                           "denied (after 2001's %s)" % (opts, how2, how))
                        ok(len([e for e in h.events("ACCESS_PERM") if e["uid"] == 2002]) > asked,
                           "%s: and asked about" % opts)
            finally:
                a.close()
                b.close()


def xfer(how, fd, n):
    """splice or sendfile n bytes of fd from 0 into a fresh pipe: the bytes, or the errno"""
    pr, pw = os.pipe()
    try:
        k = os.splice(fd, pw, n, offset_src=0) if how == "splice" else os.sendfile(pw, fd, 0, n)
        return os.read(pr, k) if k else b""
    except OSError as e:
        return e.errno
    finally:
        os.close(pr)
        os.close(pw)


def test_one_process(opts):
    data = os.urandom(8 * P)
    with Mount(opts=opts) as m:
        with open(m.path("f"), "wb") as f:
            f.write(data)
        with Hook(m.mnt, "--kind", "watch", "--mask", "read", "--mode", "allow",
                  "--name", "first") as h:
            fd = os.open(m.path("f"), os.O_RDONLY)
            before = drops(m)
            eq(xfer("sendfile", fd, len(data)), data, "%s: an allowed sendfile" % opts)
            dropped(m, before, "the allowed sendfile")
            ok(h.events("ACCESS_PERM"), "%s: asked" % opts)
        try:
            with Hook(m.mnt, "--kind", "watch", "--mask", "read", "--mode", "deny",
                      "--errno", str(errno.EACCES), "--name", "second") as h:
                for how in ("sendfile", "splice", "sendfile"):
                    n = len(h.events("ACCESS_PERM"))
                    eq(shown(xfer(how, fd, len(data))), errno.EACCES,
                       "%s: a later %s of the same range is denied" % (opts, how))
                    ok(len(h.events("ACCESS_PERM")) > n, "%s: the deny-all watcher sees it"
                       % opts)
        finally:
            os.close(fd)


def run():
    random.seed(31)
    for opts in ("timeout=5", "nopassthrough,timeout=5"):
        test_modify_race(opts)
    for opts in ("allow_other,timeout=5", "allow_other,nopassthrough,timeout=5"):
        test_two_uids(opts)
    for opts in ("timeout=5", "nopassthrough,timeout=5"):
        test_one_process(opts)


main(run)
