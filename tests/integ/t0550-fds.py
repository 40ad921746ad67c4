#!/usr/bin/env python3
"""No limit of the daemon's own breaks a user's write (#50, item 2).

On a write-back mount (nginx WebDAV as the origin, hsmfs-http the hook,
archive_after so that changed files wait in the archive queue):

- Two SQLite writers with a rollback journal (journal_mode=delete) each
  commit their small transactions, every one of them; SQLite creates
  and removes its journal at every commit.  The daemon's descriptors
  stay bounded by what the users hold open plus a constant (the removed
  journals, waiting in the archive queue, held one each before: 1 005
  at the peak for 3 000 transactions, EMFILE beyond), and no
  STORE/.hsmfs/open-* link is left once the writers closed.  Once with
  kernel passthrough where the mount has it (root) and once without
  (nopassthrough: each open costs the daemon a descriptor, as on an
  unprivileged mount).
- Started with a soft limit of 256 and a hard one of 4096, the daemon
  raises its own to 4096 (stats: fds_limit), and 3 000 files held open
  at once through the mount all open and take a byte; once closed the
  descriptors go back down.
- At a limit it cannot raise, users' opens past it fail with EMFILE (the
  user's call fails cleanly), and a write acknowledged before is not
  lost: its fsync waits for a descriptor instead of failing with EIO,
  and returns 0 once the user closes files.
"""
import errno as E
import json
import os
import resource
import sqlite3
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Mount, Nginx, eq, is_root, main, ok, skip, tmpdir, wait_for  # noqa: E402

from archiving import DAV, HTTP  # noqa: E402

TX = int(os.environ.get("HSMFS_FDS_TX", "400"))  # transactions per writer
HELD = int(os.environ.get("HSMFS_FDS_HELD", "3000"))  # files held open at once
BOUND = 150  # the daemon's descriptors: what the users hold, plus this


def fds_of(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


def soft_limit_of(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def stats(m):
    return json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))


def orphan_links(m):
    return [n for n in os.listdir(os.path.join(m.store, ".hsmfs")) if n.startswith("open-")]


class Peak:
    """The most descriptors pid held at once while a with lasts."""

    def __init__(self, pid):
        self.pid = pid
        self.peak = 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, fds_of(self.pid))
            self.stop.wait(0.005)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.t.join()


def origin():
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o777)
    os.mkdir(os.path.join(root, "data"))
    os.chmod(os.path.join(root, "data"), 0o777)
    return root


def two_writers(ng, extra):
    opts = "hook=%s,origin=%s,archive_after=5%s" % (HTTP, ng.url("data/"), extra)
    with Mount(opts=opts) as m:
        pid = m.daemon_pid()
        db = m.path("t.db")
        c = sqlite3.connect(db)
        c.execute("pragma journal_mode=delete")
        c.execute("create table t(k, v)")
        c.commit()
        c.close()
        done, errors = [0, 0], []

        def writer(k):
            c = sqlite3.connect(db, timeout=60)
            c.execute("pragma journal_mode=delete")
            for i in range(TX):
                try:
                    c.execute("insert into t values(?, ?)", (k, i))
                    c.commit()
                    done[k] += 1
                except sqlite3.Error as e:
                    errors.append(str(e))
                    c.rollback()
            c.close()

        with Peak(pid) as peak:
            ts = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        what = "rollback journal%s:" % extra.replace(",", " ")
        eq(errors[:3], [], "%s no transaction fails" % what)
        eq(done, [TX, TX], "%s every transaction of both writers commits" % what)
        c = sqlite3.connect(db)
        eq(c.execute("select count(*) from t").fetchone()[0], 2 * TX,
           "%s and every row is there" % what)
        c.close()
        ok(peak.peak < BOUND, "%s the daemon held at most %d descriptors (bound %d)"
           % (what, peak.peak, BOUND))
        wait_for(lambda: not orphan_links(m), "the open-* links to go")
        ok(True, "%s no open-* link is left once the writers closed" % what)
        s = stats(m)
        ok(0 < s["fds"] <= s["fds_limit"],
           "%s stats show descriptors open against the limit (%d of %d)"
           % (what, s["fds"], s["fds_limit"]))
        ok("Too many open files" not in m.output(), "%s the daemon never ran out" % what)


def held_open(ng):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HELD + 200:
        skip("%d files held open" % HELD, "this process's hard limit is %d" % hard)
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # the idle descriptors cached: 64 (the default would be 4096/4)
    opts = "hook=%s,origin=%s,nopassthrough,fd_cache=64" % (HTTP, ng.url("data/"))
    with Mount(opts=opts, rlimit_nofile=(256, 4096)) as m:
        pid = m.daemon_pid()
        eq(soft_limit_of(pid), 4096, "started with a soft limit of 256, the daemon raised it "
           "to the hard limit")
        eq(stats(m)["fds_limit"], 4096, "and its stats say so")
        kids = []
        for task in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                    kids += [int(k) for k in f.read().split()]
            except FileNotFoundError:
                pass  # a thread that ended since the listing (CI saw one)
        eq([soft_limit_of(k) for k in kids], [256],
           "its hook (daemon started by the keeper) has the soft limit it was given")
        os.mkdir(m.path("many"))
        files, failed = [], None
        try:
            for i in range(HELD):
                files.append(open(m.path("many", "f%d" % i), "wb", buffering=0))
            for f in files:
                f.write(b"x")
        except OSError as e:
            failed = e
        eq(failed, None, "%d files open at once through the mount, each written" % HELD)
        eq(len(files), HELD, "all of them")
        for f in files:
            f.close()
        wait_for(lambda: fds_of(pid) < BOUND + 64, "the daemon's descriptors to go back down")
        ok(True, "closed, the daemon's descriptors go back down to its cache and a few (%d)"
           % fds_of(pid))
        eq(sorted(os.listdir(m.path("many")))[:2], ["f0", "f1"], "and the files are there")
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def at_the_limit(ng):
    opts = "hook=%s,origin=%s,nopassthrough" % (HTTP, ng.url("data/"))
    with Mount(opts=opts, rlimit_nofile=(160, 160)) as m:
        pid = m.daemon_pid()
        eq(soft_limit_of(pid), 160, "a limit the daemon cannot raise")
        f = open(m.path("kept.bin"), "wb", buffering=0)
        f.write(b"before")
        os.fsync(f.fileno())
        os.mkdir(m.path("fill"))
        held, err = [], None
        try:
            for i in range(400):
                held.append(open(m.path("fill", "f%d" % i), "wb", buffering=0))
        except OSError as e:
            err = e.errno
        ok(err in (E.EMFILE, E.ENFILE),
           "past the daemon's limit an open fails with EMFILE (%s), after %d files"
           % (err and os.strerror(err), len(held)))
        # each EMFILE an open met is counted, whichever path replied it
        before, refused = stats(m)["fds_exhausted"], 0
        for i in range(20):
            try:
                held.append(open(m.path("fill", "g%d" % i), "wb", buffering=0))
            except OSError as e:
                refused += e.errno in (E.EMFILE, E.ENFILE)
        counted = stats(m)["fds_exhausted"] - before
        ok(refused and counted >= refused,
           "stats count each EMFILE an open met (%d of %d)" % (counted, refused))
        # an acknowledged write whose state needs the writer, which needs a
        # descriptor: its fsync waits rather than fail
        f.write(b", and after")
        res = {}

        def sync():
            try:
                os.fsync(f.fileno())
                res["rc"] = 0
            except OSError as e:
                res["rc"] = e.errno

        t = threading.Thread(target=sync)
        t.start()
        try:
            # the writer meets the limit too (it says so), or the fsync is done
            wait_for(lambda: res or "out of descriptors syncing" in m.output(),
                     "the writer to meet the limit")
            # the writer may have found a descriptor first (one freed meanwhile):
            # then the fsync is done, and must have succeeded
            ok(not res or res.get("rc") == 0,
               "the fsync waits while the daemon has no descriptor, or succeeds (%r)" % res)
        finally:
            for h in held:
                h.close()
            t.join(60)
        eq(res.get("rc"), 0, "the fsync of a write made at the limit returns 0 once users "
           "close files (no EIO)")
        f.close()
        with open(m.path("kept.bin"), "rb") as g:
            eq(g.read(), b"before, and after", "and every byte is there")
        ok("its ranges are not committed" not in m.output(),
           "no file was left uncommitted")
        ok(stats(m)["fds_exhausted"] > 0,
           "stats count the EMFILE met (%d)" % stats(m)["fds_exhausted"])


def test():
    with Nginx(origin(), extra=DAV) as ng:
        two_writers(ng, "")
        two_writers(ng, ",nopassthrough")
        held_open(ng)
        at_the_limit(ng)
    if not is_root():
        ok(True, "ran as an unprivileged user")


main(test)
