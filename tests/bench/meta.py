#!/usr/bin/env python3
"""Metadata on a warm and a cold tree: hsmfs against the store's own
filesystem and libfuse's passthrough_hp, in the same run.

    tests/bench/meta.py [--runs N] [--modes native,hsmfs,hsmfs-shared,passthrough_hp]
                        [--workloads stat-idle,ls-l,git-status,cold-stat,create,unlink]

Each mode has its own copy of the same store (on the same filesystem);
the modes alternate within each run, so that a drift of the machine
falls on all of them.  Workloads:
  stat-idle   a tree of 100 directories x 100 files, each file stat'ed
              once to warm the caches; then, each run, 1.5 s idle and
              every file stat'ed again (stat/s).  With short kernel
              timeouts every stat after the idle second is a round trip.
  ls-l        `ls -l` of one directory of 10 000 files, its second run
              (seconds; reported as runs/s).
  git-status  `git status` in a repository of 10 000 committed files
              (100 directories), its second run (runs/s).  The first
              run on a mount rewrites git's index (other st_dev).
  cold-stat   every file of the tree stat'ed (stat/s): one LOOKUP each.
  create      5 000 empty files made (open O_CREAT, close) in a new
              directory (files/s).
  unlink      and removed (files/s).
  The last three start each run with echo 3 > drop_caches (root only:
  otherwise warm), the others each workload.
Modes: native (the store itself), hsmfs (defaults: names and attributes
cached 3600 s, listings kept), hsmfs-shared (-o store_shared: 1 s, as
before 0.x), passthrough_hp (libfuse's example, its defaults: 86400 s,
kernel passthrough off: --nopassthrough, as hsmfs is for metadata).
Reported: each mode's median and min-max over the runs, and its ratio
to native (the median of the per-run ratios, with their min-max).
Needs root for cold-stat (skipped otherwise).  HSMFS, HSMFSCTL and
HSMFS_PASSTHROUGH_HP as for bench.py (meson sets them).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integ"))
import harness  # noqa: E402
from harness import Mount, tmpdir, wait_for  # noqa: E402

IS_ROOT = os.geteuid() == 0
TREE_DIRS, TREE_FILES = 100, 100
BIG = 10000
MANY = 5000


def make_store(src=None):
    s = tmpdir("hsmfs-meta-store-")
    if src:
        subprocess.run(["cp", "-a", src + "/.", s], check=True)
        return s
    for d in range(TREE_DIRS):
        os.makedirs(os.path.join(s, "t", "d%d" % d))
        for f in range(TREE_FILES):
            with open(os.path.join(s, "t", "d%d" % d, "f%d" % f), "w") as fh:
                fh.write("x")
    os.mkdir(os.path.join(s, "big"))
    for f in range(BIG):
        with open(os.path.join(s, "big", "e%05d" % f), "w") as fh:
            fh.write("y")
    repo = os.path.join(s, "repo")
    for d in range(100):
        os.makedirs(os.path.join(repo, "src%d" % d))
        for f in range(BIG // 100):
            with open(os.path.join(repo, "src%d" % d, "m%d.c" % f), "w") as fh:
                fh.write("int f%d_%d;\n" % (d, f))
    git = ["git", "-C", repo, "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "tree"], check=True)
    return s


def start_phs(store, var="HSMFS_PASSTHROUGH_HP"):
    exe = os.environ.get(var)
    if not exe or not os.path.exists(exe):
        return None
    mnt = os.path.join(tmpdir("hsmfs-meta-phs-"), "mnt")
    os.mkdir(mnt)
    # it keeps a descriptor for every inode the kernel knows (up to the
    # hard RLIMIT_NOFILE): the kernel's are dropped between workloads
    if subprocess.run([exe, store, mnt, "--nopassthrough"]).returncode:
        return None
    wait_for(lambda: harness.is_mounted(mnt), "passthrough_hp mounted")
    return mnt


class Target:
    def __init__(self, mode, src):
        self.mode, self.store = mode, make_store(src)
        self.made = {}
        self.mount = self.phs = None
        if mode == "hsmfs":
            self.mount = Mount(store=self.store).start()
        elif mode == "hsmfs-dp":
            self.mount = Mount(store=self.store, opts="default_permissions").start()
        elif mode == "hsmfs-shared":
            self.mount = Mount(store=self.store, opts="store_shared").start()
        elif mode == "passthrough_hp":
            self.phs = start_phs(self.store)
        elif mode == "passthrough_hp+xattr":
            self.phs = start_phs(self.store, "HSMFS_PASSTHROUGH_HP_XATTR")
        self.dir = self.phs or (self.mount.mnt if self.mount else self.store)

    def ok(self):
        return not self.mode.startswith("passthrough_hp") or self.phs

    def close(self):
        if self.phs:
            harness.unmount(self.phs)
            shutil.rmtree(os.path.dirname(self.phs), ignore_errors=True)
        if self.mount:
            self.mount.stop()
            self.mount.cleanup()
        shutil.rmtree(self.store, ignore_errors=True)


def tree_paths(d):
    return [os.path.join(d, "t", "d%d" % i, "f%d" % j)
            for i in range(TREE_DIRS) for j in range(TREE_FILES)]


def stat_all(paths):
    t = time.perf_counter()
    for p in paths:
        os.stat(p)
    return len(paths) / (time.perf_counter() - t)


def timed_run(cmd, cwd=None):
    """runs/s of the second of two runs of cmd."""
    subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    return 1 / (time.perf_counter() - t)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def w_stat_idle(t, r):
    paths = tree_paths(t.dir)
    if r == 0:
        stat_all(paths)
    time.sleep(1.5)
    return stat_all(paths)


def w_ls_l(t, r):
    return timed_run(["ls", "-l", os.path.join(t.dir, "big")])


def w_git_status(t, r):
    return timed_run(["git", "-c", "safe.directory=*", "status", "--porcelain"],
                     cwd=os.path.join(t.dir, "repo"))


def w_cold_stat(t, r):
    return stat_all(tree_paths(t.dir))


def w_create(t, r):
    d = os.path.join(t.dir, "new%d" % r)
    os.mkdir(d)
    t.made[r] = made = [os.path.join(d, "n%d" % i) for i in range(MANY)]
    s = time.perf_counter()
    for p in made:
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
    return MANY / (time.perf_counter() - s)


def w_unlink(t, r):
    made = t.made.pop(r)
    s = time.perf_counter()
    for p in made:
        os.unlink(p)
    rate = MANY / (time.perf_counter() - s)
    os.rmdir(os.path.dirname(made[0]))
    return rate


WORKLOADS = {"stat-idle": (w_stat_idle, "stat/s"), "ls-l": (w_ls_l, "runs/s"),
             "git-status": (w_git_status, "runs/s"), "cold-stat": (w_cold_stat, "stat/s"),
             "create": (w_create, "files/s"), "unlink": (w_unlink, "files/s")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--modes", default="native,hsmfs,hsmfs-shared,passthrough_hp")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    a = ap.parse_args()
    modes = a.modes.split(",")
    wls = [w for w in a.workloads.split(",") if w != "cold-stat" or IS_ROOT]
    if not IS_ROOT:
        print("note: not root: cold-stat skipped, create and unlink warm (drop_caches)")
    src = make_store()
    targets = []
    try:
        for mode in modes:
            t = Target(mode, src)
            if t.ok():
                targets.append(t)
            else:
                print("note: %s skipped (not built or did not mount)" % mode)
                t.close()
        res, failed = {}, {}
        for w in wls:
            fn = WORKLOADS[w][0]
            cold = w in ("cold-stat", "create", "unlink")
            if IS_ROOT and not cold:
                drop_caches()  # each workload from the same start
            for r in range(a.runs):
                for t in targets:
                    if (w, t.mode) in failed:
                        continue
                    if IS_ROOT and cold:
                        drop_caches()  # the dentry and inode caches cold
                    try:
                        res.setdefault(w, {}).setdefault(t.mode, []).append(fn(t, r))
                    except (OSError, subprocess.CalledProcessError) as e:
                        failed[(w, t.mode)] = str(e)
                        res[w].pop(t.mode, None)
    finally:
        for t in targets:
            t.close()
        shutil.rmtree(src, ignore_errors=True)
    print("%-11s %-21s %12s %22s %18s" % ("workload", "mode", "median", "min-max",
                                          "ratio to native"))
    for w in wls:
        unit = WORKLOADS[w][1]
        base = res[w].get("native")
        for mode, xs in res[w].items():
            line = "%-11s %-21s %12.1f %22s" % (w, mode, statistics.median(xs),
                                                "%.1f-%.1f %s" % (min(xs), max(xs), unit))
            if base and mode != "native":
                rs = [x / b for x, b in zip(xs, base)]
                line += " %6.2f (%.2f-%.2f)" % (statistics.median(rs), min(rs), max(rs))
            print(line)
    for (w, mode), e in failed.items():
        print("note: %s on %s failed: %s" % (w, mode, e))


if __name__ == "__main__":
    main()
