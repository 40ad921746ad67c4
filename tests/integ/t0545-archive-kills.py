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
HSMFS_KILLS_KINDS the operations drawn from.
"""
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

KILLS = int(os.environ.get("HSMFS_KILLS", "8"))
# the operations drawn from (each as often as it is listed)
KINDS = os.environ.get("HSMFS_KILLS_KINDS",
                       "create create write rename unlink mkdir mkdir rmdir dirmv").split()


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Model:
    """What the mount holds: {path: bytes or None (a directory)}."""

    def __init__(self, m, rnd):
        self.m = m
        self.rnd = rnd
        self.t = {}
        self.n = 0

    def dirs(self):
        return [""] + [p for p, v in self.t.items() if v is None]

    def files(self):
        return [p for p, v in self.t.items() if v is not None]

    def name(self, prefix):
        self.n += 1
        return "%s%d" % (prefix, self.n)

    def path(self, p):
        return self.m.path(p) if p else self.m.mnt

    def sync_dir(self, p):
        fsync_path(self.path(os.path.dirname(p)))

    def step(self):
        r = self.rnd
        k = r.choice(KINDS)
        files = self.files()
        dirs = self.dirs()
        if k == "create" and len(files) >= 60:
            k = "unlink"  # a tree of a bounded size
        if k == "create" or (k in ("write", "rename", "unlink") and not files):
            p = os.path.join(r.choice(dirs), self.name("f"))
            data = os.urandom(r.choice([0, 1, 100, 5000, 70000]))
            with open(self.path(p), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            self.sync_dir(p)
            self.t[p] = data
        elif k == "write":
            p = r.choice(files)
            data = os.urandom(r.choice([1, 3000, 40000]))
            with open(self.path(p), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            self.t[p] = data
        elif k == "rename":
            p = r.choice(files)
            q = os.path.join(r.choice(dirs), self.name("r"))
            os.rename(self.path(p), self.path(q))
            self.sync_dir(p)
            self.sync_dir(q)
            self.t[q] = self.t.pop(p)
        elif k == "unlink":
            p = r.choice(files)
            os.unlink(self.path(p))
            self.sync_dir(p)
            del self.t[p]
        elif k == "mkdir" or len(dirs) < 2:
            if len([d for d in dirs if d]) >= 12:
                return
            parent = r.choice([d for d in dirs if d.count("/") < 2])
            p = os.path.join(parent, self.name("d"))
            os.mkdir(self.path(p))
            self.sync_dir(p)
            self.t[p] = None
        elif k == "rmdir":
            empty = [d for d in dirs if d and not any(x.startswith(d + "/") for x in self.t)]
            if not empty:
                return
            p = r.choice(empty)
            os.rmdir(self.path(p))
            self.sync_dir(p)
            del self.t[p]
        else:  # a directory renamed, with what is under it
            src = [d for d in dirs if d]
            if not src:
                return
            p = r.choice(src)
            to = [d for d in dirs if d != p and not d.startswith(p + "/") and d.count("/") < 2]
            q = os.path.join(r.choice(to), self.name("m"))
            os.rename(self.path(p), self.path(q))
            self.sync_dir(p)
            self.sync_dir(q)
            for x in [x for x in self.t if x == p or x.startswith(p + "/")]:
                self.t[q + x[len(p):]] = self.t.pop(x)


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
    with Nginx(root, extra=DAV) as ng:
        m = Mount(store=store, opts="hook=%s,origin=%s,archive_after=0" % (HTTP, ng.url("data/")))
        with m:
            m.restarts_expected = True
            model = Model(m, random.Random(seed))
            stop = threading.Event()
            failures = []
            done = [0]

            def work():
                try:
                    while not stop.is_set():
                        model.step()
                        done[0] += 1
                except OSError as e:
                    failures.append("operation %d: %s" % (done[0], e))

            t = threading.Thread(target=work)
            t.start()
            kills = random.Random(seed)
            daemon_kills = hook_kills = 0
            while t.is_alive() and daemon_kills + hook_kills < KILLS:
                time.sleep(kills.uniform(1.05, 2.0))  # each daemon lives > KEEPER_QUICK_S
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
            stop.set()
            t.join()
            diag("%d operations, %d daemon kills, %d hook kills" %
                 (done[0], daemon_kills, hook_kills))
            eq(failures, [], "no operation failed (seed %d)" % seed)
            mine = tree(m.mnt)
            eq(differences(model.t, mine, "model", "mount"), [],
               "the mount equals the model (seed %d)" % seed)
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "hsmfsctl sync exits 0 (%s)" % out.strip())
            origin = tree(os.path.join(root, "data"))
            eq(differences(mine, origin, "mount", "origin"), [],
               "then the origin equals the mount, names and bytes (seed %d)" % seed)
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(test)
