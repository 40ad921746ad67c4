#!/usr/bin/env python3
"""Restarts of the serving daemon, measured (on demand; not part of the suite).

    HSMFS=... [HSMFS_OLD=...] python3 tests/bench/restart.py [--kills 20]
        [--files 100000] [--runs 5] [--parts pause,takeover,cost]

1. Pause: a reader streams a 256 MiB resident file through the mount in
   64 KiB reads, its cached pages dropped at each pass
   (POSIX_FADV_DONTNEED), while the serving daemon is killed with
   SIGKILL --kills times.  Reported: the longest gap between two reads
   around each kill (p50 and max over the kills), and the daemon's own
   figure (death to the next daemon serving, restart_pause_ms); with
   -o nopassthrough (every read goes to the daemon) and, as root, with
   passthrough (the kernel reads the store file itself).
2. Takeover with many remembered inodes: --files files are stat'ed
   through the mount (the kernel then holds a lookup of each), the
   daemon is killed; reported: restart_pause_ms, the time to rebuild the
   inode table from the keeper's records and serve.
3. The bookkeeping's cost: create, stat and unlink of 10 000 files and a
   cold `find -printf %s` (a lookup of every file) of the --files tree, on this build (keeper, the default)
   and on HSMFS_OLD (another build, e.g. the last main before keepers)
   in the same run, alternating, --runs each: medians and min-max.
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integ"))
from harness import Mount, wait_for  # noqa: E402


def stats(m):
    import json
    return json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))


def kill_daemon(m):
    old = m.daemon_pid()
    before = stats(m)["restarts"]
    t0 = time.monotonic()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: stats(m)["restarts"] == before + 1, "the restart")
    return time.monotonic() - t0


def pauses(kills, opts):
    with Mount(opts=opts) as m:
        size = 256 << 20
        with open(m.spath("stream"), "wb") as f:
            for _ in range(size >> 20):
                f.write(os.urandom(1 << 20))
        gaps, stop = [], threading.Event()
        last = [time.monotonic()]
        lock = threading.Lock()

        def reader():
            while not stop.is_set():
                with open(m.path("stream"), "rb", buffering=0) as f:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    while not stop.is_set():
                        if not f.read(64 << 10):
                            break
                        now = time.monotonic()
                        with lock:
                            gaps.append(now - last[0])
                            last[0] = now

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(0.5)
        per_kill, daemon = [], []
        for _ in range(kills):
            with lock:
                gaps.clear()
            time.sleep(0.3)
            kill_daemon(m)
            time.sleep(0.7)
            with lock:
                per_kill.append(max(gaps) if gaps else float("nan"))
            daemon.append(stats(m)["restart_pause_ms"])
        stop.set()
        t.join()
    per_kill_ms = sorted(x * 1000 for x in per_kill)
    print("pause seen by a streaming reader over %d kill -9 (%s): p50 %.1f ms, max %.1f ms"
          % (kills, opts or "defaults", statistics.median(per_kill_ms), per_kill_ms[-1]))
    print("  the daemon's figure (death to serving): p50 %d ms, max %d ms"
          % (statistics.median(daemon), max(daemon)))


def make_tree(root, n):
    per = 1000
    for d in range((n + per - 1) // per):
        dp = os.path.join(root, "t", "d%03d" % d)
        os.makedirs(dp, exist_ok=True)
        for i in range(min(per, n - d * per)):
            open(os.path.join(dp, "f%04d" % i), "w").close()


def takeover(n):
    with Mount(opts="entry_timeout=3600,attr_timeout=3600") as m:
        make_tree(m.store, n)
        subprocess.run(["find", m.path("t"), "-printf", "%s\\n"], stdout=subprocess.DEVNULL,
                       check=True)  # -printf %s: a lookup of every file
        inodes = stats(m)["inodes"]
        kill_daemon(m)
        s = stats(m)
        print("takeover with %d remembered inodes: %d ms (death to serving)"
              % (inodes, s["restart_pause_ms"]))


def meta_run(exe, opts, n):
    res = {}
    with Mount(exe=exe, opts=opts) as m:
        make_tree(m.store, n)
        d = m.path("w")
        os.mkdir(d)
        t0 = time.monotonic()
        for i in range(10000):
            os.close(os.open(os.path.join(d, "f%05d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
        res["create"] = time.monotonic() - t0
        t0 = time.monotonic()
        for i in range(10000):
            os.stat(os.path.join(d, "f%05d" % i))
        res["stat"] = time.monotonic() - t0
        t0 = time.monotonic()
        for i in range(10000):
            os.unlink(os.path.join(d, "f%05d" % i))
        res["unlink"] = time.monotonic() - t0
        t0 = time.monotonic()
        subprocess.run(["find", m.path("t"), "-printf", "%s\\n"], stdout=subprocess.DEVNULL,
                       check=True)
        res["find"] = time.monotonic() - t0
    return res


def cost(runs, n):
    old = os.environ.get("HSMFS_OLD")
    builds = [("this build", os.environ.get("HSMFS", "hsmfs"), "")]
    if old:
        builds.append(("HSMFS_OLD", old, ""))
    builds.append(("this build, norestart", builds[0][1], "norestart"))
    got = {b[0]: [] for b in builds}
    for _ in range(runs):
        for name, exe, opts in builds:
            got[name].append(meta_run(exe, opts, n))
    print("bookkeeping cost (%d runs, median and min-max, seconds):" % runs)
    for key in ("create", "stat", "unlink", "find"):
        cells = []
        for name, _, _ in builds:
            v = sorted(r[key] for r in got[name])
            cells.append("%s %.3f (%.3f-%.3f)" % (name, statistics.median(v), v[0], v[-1]))
        print("  %-7s %s" % (key, "; ".join(cells)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--files", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--parts", default="pause,takeover,cost")
    a = ap.parse_args()
    parts = a.parts.split(",")
    if "pause" in parts:
        pauses(a.kills, "nopassthrough")
        if os.geteuid() == 0:
            pauses(a.kills, "")
    if "takeover" in parts:
        takeover(a.files)
    if "cost" in parts:
        cost(a.runs, a.files)


main()
