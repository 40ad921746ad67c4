#!/usr/bin/env python3
"""The origin as the second reference: a write-back mount's names and
bytes reach the origin whole across kills of the daemon and of its hook.

One user works on a write-back mount of an nginx WebDAV origin
(hsmfs-http): files made, written and fsync'd, overwritten, renamed
across directories, removed; directories made, removed and renamed, each
directory change acknowledged by an fsync of its parent.  Meanwhile the
serving daemon (the keeper starts the next) or hsmfs-http (the daemon
starts it again) is killed with SIGKILL every second or two.  A model
holds what the mount must hold.  At the end:
  - every operation succeeded and the mount equals the model;
  - hsmfsctl sync exits 0, and then the origin equals the mount, name
    for name (files and directories) and byte for byte.

HSMFS_SEED=N repeats a run (the seed is printed); HSMFS_KILLS=N sets the
number of kills (CI's default is small; a soak uses more);
HSMFS_KILLS_KINDS the operations drawn from; HSMFS_KILLS_LOG=FILE writes
each operation the model made, one a line; HSMFS_KILLS_OPTS more mount
options (log_level=debug).

The long crash run (on demand, in the style of JuiceFS's crash test):
HSMFS_CRASH_FILES=100000 works until the tree holds that many fsync'd
files (and up to a hundredth as many directories), killing the daemon
or its hook every 2 to 5 seconds, however many kills that takes, then
syncs and compares the whole origin byte for byte.
"""
import hashlib
import os
import random
import shutil
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Mount, Nginx, diag, eq, main, ok, run,  # noqa: E402
                     tmpdir, wait_for)

from archiving import DAV, HTTP, differences, tree  # noqa: E402

FILES = int(os.environ.get("HSMFS_CRASH_FILES", "0"))  # the long run's target
KILLS = int(os.environ.get("HSMFS_KILLS", "8")) if not FILES else 1 << 30
# the operations drawn from (each as often as it is listed)
KINDS = os.environ.get(
    "HSMFS_KILLS_KINDS",
    "create create write rename unlink mkdir mkdir rmdir dirmv" if not FILES else
    "create create create create create write rename unlink mkdir rmdir dirmv").split()
MAX_FILES = FILES or 60        # a tree of a bounded size
MAX_DIRS = max(12, FILES // 100)
SIZES = [0, 1, 100, 5000, 70000] if not FILES else [0, 1, 100, 4000, 20000]


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def digest(data):
    return (len(data), hashlib.sha256(data).hexdigest())


class Node:
    """A name in the model: a file (data: its digest) or a directory."""
    __slots__ = ("name", "parent", "data", "kids", "at")

    def __init__(self, name, parent, data=None):
        self.name, self.parent, self.data = name, parent, data
        self.kids = {} if data is None else None
        self.at = -1  # its index in Model.files or Model.dirs


class Pool:
    """Nodes drawn at random: O(1) add, remove and choice."""

    def __init__(self):
        self.v = []

    def add(self, n):
        n.at = len(self.v)
        self.v.append(n)

    def remove(self, n):
        last = self.v.pop()
        if last is not n:
            self.v[n.at] = last
            last.at = n.at

    def __len__(self):
        return len(self.v)


class Model:
    """What the mount holds, as a tree: a directory's rename moves one node."""

    def __init__(self, m, rnd, log=None):
        self.m = m
        self.rnd = rnd
        self.root = Node("", None)
        self.files = Pool()
        self.dirs = Pool()   # not the root
        self.n = 0
        self.log = log

    def rel(self, node):
        parts = []
        while node.parent:
            parts.append(node.name)
            node = node.parent
        return "/".join(reversed(parts))

    def path(self, node, name=None):
        p = self.rel(node)
        if name is not None:
            p = os.path.join(p, name) if p else name
        return self.m.path(p) if p else self.m.mnt

    def depth(self, d):
        k = 0
        while d.parent:
            k += 1
            d = d.parent
        return k

    def name(self, prefix):
        self.n += 1
        return "%s%d" % (prefix, self.n)

    def a_dir(self, ok=lambda d: True):
        """A random directory (the root too) for which ok() holds, or None."""
        for _ in range(20):
            i = self.rnd.randrange(len(self.dirs) + 1)
            d = self.dirs.v[i] if i < len(self.dirs) else self.root
            if ok(d):
                return d
        return self.root if ok(self.root) else None

    def attach(self, node, parent, name):
        node.parent, node.name = parent, name
        parent.kids[name] = node

    def detach(self, node):
        del node.parent.kids[node.name]

    def note(self, *what):
        if self.log:
            self.log.write(" ".join(what) + "\n")

    def write(self, p, size):
        data = os.urandom(size)
        with open(p, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return digest(data)

    def step(self):
        r = self.rnd
        k = r.choice(KINDS)
        if k == "create" and len(self.files) >= MAX_FILES:
            k = "unlink"
        if k == "create" or (k in ("write", "rename", "unlink") and not len(self.files)):
            d = self.a_dir()
            name = self.name("f")
            p = self.path(d, name)
            node = Node(name, d, self.write(p, r.choice(SIZES)))
            fsync_path(os.path.dirname(p))
            self.attach(node, d, name)
            self.files.add(node)
            self.note("create", self.rel(node))
        elif k == "write":
            node = r.choice(self.files.v)
            node.data = self.write(self.path(node), r.choice([1, 3000, 40000]))
            self.note("write", self.rel(node))
        elif k == "rename":
            self.move("rename", r.choice(self.files.v), self.a_dir(), self.name("r"))
        elif k == "unlink":
            self.remove("unlink", r.choice(self.files.v), self.files)
        elif k == "mkdir" or not len(self.dirs):
            if len(self.dirs) >= MAX_DIRS:
                return
            d = self.a_dir(lambda d: self.depth(d) < 2)
            name = self.name("d")
            p = self.path(d, name)
            os.mkdir(p)
            fsync_path(os.path.dirname(p))
            node = Node(name, d)
            self.attach(node, d, name)
            self.dirs.add(node)
            self.note("mkdir", self.rel(node))
        elif k == "rmdir":
            node = self.a_dir(lambda d: d.parent and not d.kids)
            if node:
                self.remove("rmdir", node, self.dirs)
        else:  # a directory renamed, with what is under it
            node = self.a_dir(lambda d: d.parent is not None)
            if not node:
                return

            def outside(d):
                while d:
                    if d is node:
                        return False
                    d = d.parent
                return True
            to = self.a_dir(lambda d: outside(d) and self.depth(d) < 2)
            if to:
                self.move("dirmv", node, to, self.name("m"))

    def remove(self, kind, node, pool):
        """node (a file: unlink; an empty directory: rmdir) removed, its
        directory fsync'd."""
        p = self.path(node)
        (os.unlink if kind == "unlink" else os.rmdir)(p)
        fsync_path(os.path.dirname(p))
        self.note(kind, self.rel(node))
        self.detach(node)
        pool.remove(node)

    def move(self, kind, node, to, name):
        """node renamed to to/name, both directories fsync'd."""
        p, q = self.path(node), self.path(to, name)
        os.rename(p, q)
        fsync_path(os.path.dirname(p))
        fsync_path(os.path.dirname(q))
        self.note(kind, self.rel(node), self.rel(to), name)
        self.detach(node)
        self.attach(node, to, name)

    def tree(self):
        """{relative path: digest, or None for a directory}."""
        out = {}
        todo = [self.root]
        while todo:
            d = todo.pop()
            for node in d.kids.values():
                out[self.rel(node)] = node.data
                if node.data is None:
                    todo.append(node)
        return out


def hook_pid(m):
    """The pid of the daemon's hsmfs-http, or None."""
    daemon = m.daemon_pid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                st = f.read()
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        ppid = int(st.rsplit(")", 1)[1].split()[1])
        if ppid == daemon and b"hsmfs-http" in cmd:
            return int(pid)
    return None


def test():
    seed = int(os.environ.get("HSMFS_SEED", random.randrange(1 << 30)))
    diag("seed %d (HSMFS_SEED=%d repeats it)" % (seed, seed))
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o777)
    os.mkdir(os.path.join(root, "data"))
    os.chmod(os.path.join(root, "data"), 0o777)
    store = tmpdir("hsmfs-store-")
    logname = os.environ.get("HSMFS_KILLS_LOG")
    log = open(logname, "w", buffering=1) if logname else None
    with Nginx(root, extra=DAV) as ng:
        m = Mount(store=store, opts="hook=%s,origin=%s,archive_after=0%s" % (
            HTTP, ng.url("data/"), "," + os.environ["HSMFS_KILLS_OPTS"]
            if os.environ.get("HSMFS_KILLS_OPTS") else ""))
        with m:
            m.restarts_expected = True
            model = Model(m, random.Random(seed), log)
            stop = threading.Event()
            failures = []
            done = [0]

            def work():
                try:
                    while not stop.is_set() and not (FILES and len(model.files) >= FILES):
                        model.step()
                        done[0] += 1
                except OSError as e:
                    failures.append("operation %d: %s" % (done[0], e))

            began = time.monotonic()
            t = threading.Thread(target=work)
            t.start()
            kills = random.Random(seed)
            daemon_kills = hook_kills = 0
            gap = (1.05, 2.0) if not FILES else (2.0, 5.0)  # each daemon lives > KEEPER_QUICK_S
            while t.is_alive() and daemon_kills + hook_kills < KILLS:
                time.sleep(kills.uniform(*gap))
                if not t.is_alive():
                    break
                if kills.random() < 0.7:
                    old = m.daemon_pid()
                    os.kill(old, signal.SIGKILL)
                    wait_for(lambda: m.daemon_pid() not in (old, m.proc.pid), "the next daemon")
                    daemon_kills += 1
                else:
                    pid = hook_pid(m)
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                        hook_kills += 1
                if FILES and (daemon_kills + hook_kills) % 20 == 0:
                    diag("%.0f s: %d operations, %d files, %d directories, %d kills" %
                         (time.monotonic() - began, done[0], len(model.files),
                          len(model.dirs), daemon_kills + hook_kills))
            stop.set()
            t.join()
            worked = time.monotonic() - began
            diag("%d operations in %.0f s, %d daemon kills, %d hook kills; "
                 "%d files, %d directories" %
                 (done[0], worked, daemon_kills, hook_kills, len(model.files), len(model.dirs)))
            eq(failures, [], "no operation failed (seed %d)" % seed)
            want = model.tree()
            mine = tree(m.mnt, digest)
            eq(differences(want, mine, "model", "mount"), [],
               "the mount equals the model (seed %d)" % seed)
            t0 = time.monotonic()
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "hsmfsctl sync exits 0 (%s)" % out.strip())
            if FILES:
                diag("sync took %.1f s" % (time.monotonic() - t0))
            origin = tree(os.path.join(root, "data"), digest)
            eq(differences(mine, origin, "mount", "origin"), [],
               "then the origin equals the mount, names and bytes (seed %d)" % seed)
    if log:
        log.close()
    if os.environ.get("HSMFS_KEEP"):
        diag("kept %s and %s" % (store, root))
        return
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(test)
