#!/usr/bin/env python3
"""hsmfs benchmark driver: repeated runs, mean, %stddev, %change, significance.

    tests/bench/bench.py [--quick] [--runs N] [--json] [--modes a,b] [--workloads x,y]

Each workload runs --runs times per mode, the modes alternating run by run
(A B C A B C ...) so that drift of the machine hits all of them alike.
For each workload it prints an LKP-style table: mode, mean, %stddev,
%change against the native store measured in the same run, and a mark
'*' where Welch's t-test puts the difference beyond noise (two-sided
p < 0.05); '~' means within noise.

Modes:
  native       the store directory itself
  hsmfs        the mount, no hook connected
  hsmfs+watch  the mount with a watch hook subscribed to every event
               (files resident, so reads raise none: must equal hsmfs)
  cold         every 4 KiB read is a miss answered by a no-op fill hook
Workloads: seqread (warm page cache), seqread-cold (drop_caches, root
only), randread (4 KiB, 2 processes), seqwrite, create, stat, unlink,
event-latency (missing-page reads through the no-op hook, beside the raw
SOCK_SEQPACKET ping-pong floor between two processes), mount (time to a
live mount of an empty store and of one with many placeholders), and the
daemon's RSS in each mode.
"""
import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integ"))
import harness  # noqa: E402
from harness import Hook, Mount, import_manifest, tmpdir  # noqa: E402

MiB = 1 << 20
IS_ROOT = os.geteuid() == 0


# ------------------------------------------------------------ statistics

def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function (Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1) < 1e-12:
            break
    return h


def _ibeta(a, b, x):
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1 - math.exp(lbt) * _betacf(b, a, 1 - x) / b


def welch_p(xs, ys):
    """Two-sided p-value of Welch's t-test (1.0 when it cannot be computed)."""
    if len(xs) < 2 or len(ys) < 2:
        return 1.0
    mx, my = statistics.mean(xs), statistics.mean(ys)
    vx, vy = statistics.variance(xs) / len(xs), statistics.variance(ys) / len(ys)
    if vx + vy == 0:
        return 0.0 if mx != my else 1.0
    t = (mx - my) / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / ((vx ** 2) / (len(xs) - 1) + (vy ** 2) / (len(ys) - 1))
    return _ibeta(df / 2, 0.5, df / (df + t * t))


# ------------------------------------------------------------- workloads

def drop_caches():
    if IS_ROOT:
        subprocess.run(["sync"])
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")


def w_seqread(d, size, cold=False):
    p = os.path.join(d, "seq.bin")
    if cold:
        drop_caches()
    else:
        with open(p, "rb") as f:  # warm the page cache
            while f.read(MiB):
                pass
    t = time.perf_counter()
    n = 0
    buf = bytearray(MiB)
    for _ in range(1 if cold else 4):  # warm passes are short: take several
        with open(p, "rb", buffering=0) as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                n += k
    return n / MiB / (time.perf_counter() - t), "MB/s"


RAND_READER = r"""
import os, random, sys, time
p, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(p, os.O_RDONLY)
pages = os.fstat(fd).st_size // 4096
rnd = random.Random(seed)
offs = [rnd.randrange(pages) * 4096 for _ in range(count)]
t = time.perf_counter()
for o in offs:
    os.pread(fd, 4096, o)
print(time.perf_counter() - t)
"""


def w_randread(d, count, name="seq.bin", seed=1):
    p = os.path.join(d, name)
    procs = [subprocess.Popen([sys.executable, "-c", RAND_READER, p, str(count), str(seed + k)],
                              stdout=subprocess.PIPE) for k in range(2)]
    secs = [float(pr.communicate()[0]) for pr in procs]
    return 2 * count / max(secs), "ops/s"


def w_seqwrite(d, size):
    p = os.path.join(d, "w.bin")
    buf = os.urandom(MiB)
    t = time.perf_counter()
    with open(p, "wb", buffering=0) as f:
        for _ in range(size // MiB):
            f.write(buf)
    r = size / MiB / (time.perf_counter() - t)
    os.unlink(p)
    return r, "MB/s"


def w_meta(d, n, phase):
    base = os.path.join(d, "meta")
    names = [os.path.join(base, "f%06d" % i) for i in range(n)]
    if phase == "create":
        shutil.rmtree(base, ignore_errors=True)
        drop_caches()  # this machine's ext4 reuses fresh inodes slowly after mass unlink
        os.mkdir(base)
        t = time.perf_counter()
        for p in names:
            os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
    elif phase == "stat":
        t = time.perf_counter()
        for p in names:
            os.stat(p)
    else:
        t = time.perf_counter()
        for p in names:
            os.unlink(p)
        os.rmdir(base)
    return n / (time.perf_counter() - t), "ops/s"


# ----------------------------------------------------------------- modes

class Env:
    """The store, its mount, the hooks: set up once per mode."""

    def __init__(self, mode, size, opts=""):
        self.mode = mode
        self.store = tmpdir("hsmfs-bench-store-")
        with open(os.path.join(self.store, "seq.bin"), "wb") as f:
            chunk = os.urandom(MiB)
            for _ in range(size // MiB):
                f.write(chunk)
        self.mount = None
        self.hook = None
        self.noop = None
        if mode != "native":
            self.mount = Mount(store=self.store, opts=opts).start()
        if mode == "hsmfs+watch":
            self.hook = Hook(self.mount.mnt, "--kind", "watch", "--mask", "access,modify",
                             "--mode", "allow")
        if mode == "cold":
            self.noop = subprocess.Popen([os.environ["HSMFS_NOOP_HOOK"], self.mount.mnt])

    @property
    def dir(self):
        return self.mount.mnt if self.mount else self.store

    def close(self):
        if self.hook:
            self.hook.close()
        if self.noop:
            self.noop.kill()
            self.noop.wait()
        if self.mount:
            self.mount.stop()
            self.mount.cleanup()
        shutil.rmtree(self.store, ignore_errors=True)


def cold_randread(env, count, size, run):
    """Random 4 KiB reads where every read is a miss (fresh placeholder)."""
    name = "cold%d.bin" % run
    rc, out = import_manifest(env.dir, [{"path": name, "size": size}])
    if rc:
        raise RuntimeError(out)
    return w_randread(env.dir, count, name, seed=run * 7)


def event_latency(env, count):
    """p50/p90/p99 (µs) of O_DIRECT 4 KiB reads of missing pages (chunk=4k)."""
    name = "lat.bin"
    rc, out = import_manifest(env.dir, [{"path": name, "size": count * 4096}])
    if rc:
        raise RuntimeError(out)
    fd = os.open(os.path.join(env.dir, name), os.O_RDONLY | os.O_DIRECT)
    lat = []
    for i in range(count):
        t = time.perf_counter_ns()
        os.pread(fd, 4096, i * 4096)
        lat.append((time.perf_counter_ns() - t) / 1000)
    os.close(fd)
    lat.sort()
    return {q: lat[int(len(lat) * q / 100)] for q in (50, 90, 99)}


def pingpong(count):
    out = subprocess.run([os.environ["HSMFS_PINGPONG"], str(count)],
                         stdout=subprocess.PIPE).stdout.split()
    lat = sorted(int(x) / 1000 for x in out)
    return {q: lat[int(len(lat) * q / 100)] for q in (50, 90, 99)}


def mount_time(nfiles, runs):
    """Seconds from starting hsmfs to a live mount: empty store vs nfiles placeholders."""
    stores = {"empty": tmpdir("hsmfs-bench-m0-"), "placeholders": tmpdir("hsmfs-bench-m1-")}
    man = os.path.join(stores["placeholders"], "..", os.path.basename(stores["placeholders"]) + ".jsonl")
    with open(man, "w") as f:
        for i in range(nfiles):
            f.write('{"path": "d%03d/f%07d", "size": 1048576}\n' % (i % 1000, i))
    subprocess.run([os.environ["HSMFSCTL"], "import", "-s", stores["placeholders"], man],
                   check=True, stdout=subprocess.DEVNULL)
    os.unlink(man)
    mnt = tmpdir("hsmfs-bench-mnt-")
    out = {k: [] for k in stores}
    for r in range(runs):
        for k, st in stores.items():
            t = time.perf_counter()
            subprocess.run([harness.HSMFS, st, mnt], check=True)
            os.stat(os.path.join(mnt, "."))
            out[k].append(time.perf_counter() - t)
            harness.unmount(mnt)
            lock = os.path.join(st, ".hsmfs", "lock")
            pid = int(open(lock).read())
            harness.wait_for(lambda: not os.path.exists("/proc/%d" % pid), "daemon exit")
    for st in stores.values():
        shutil.rmtree(st, ignore_errors=True)
    shutil.rmtree(mnt, ignore_errors=True)
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--modes", default="native,hsmfs,hsmfs+watch,cold")
    ap.add_argument("--workloads",
                    default="seqread,seqread-cold,randread,seqwrite,create,stat,unlink,"
                            "event-latency,mount")
    a = ap.parse_args()
    runs = a.runs or (3 if a.quick else 5)
    size = (256 if a.quick else 1024) * MiB
    rcount = 5000 if a.quick else 20000
    mcount = 2000 if a.quick else 20000
    modes = a.modes.split(",")
    wls = a.workloads.split(",")
    results = {}  # workload -> mode -> [values]
    units = {}
    started = time.time()

    envs = {m: Env(m, size) for m in modes}
    try:
        for r in range(runs):
            for m in modes:  # A B C A B C: drift hits every mode alike
                e = envs[m]
                for w in wls:
                    v = None
                    if m == "cold":
                        if w == "randread":
                            v, u = cold_randread(e, rcount, size, r)
                        else:
                            continue
                    elif w == "seqread":
                        v, u = w_seqread(e.dir, size)
                    elif w == "seqread-cold":
                        if not IS_ROOT:
                            continue
                        v, u = w_seqread(e.dir, size, cold=True)
                    elif w == "randread":
                        v, u = w_randread(e.dir, rcount)
                    elif w == "seqwrite":
                        v, u = w_seqwrite(e.dir, size)
                    elif w in ("create", "stat", "unlink"):
                        v, u = w_meta(e.dir, mcount, w)
                    else:
                        continue
                    results.setdefault(w, {}).setdefault(m, []).append(v)
                    units[w] = u
        rss = {m: rss_kib(e.mount.proc.pid) for m, e in envs.items() if e.mount}
        lat = {}
        if "event-latency" in wls:
            e = Env("cold", MiB, opts="chunk=4k") if "cold" in modes else None
            if e:
                lat["hsmfs event (no-op fill hook)"] = event_latency(e, 2000 if a.quick else 10000)
                e.close()
            lat["SOCK_SEQPACKET ping-pong"] = pingpong(2000 if a.quick else 10000)
        mt = None
        if "mount" in wls:
            mt = mount_time(20000 if a.quick else 1000000, runs)
    finally:
        for e in envs.values():
            e.close()

    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "runs": runs, "size_mib": size // MiB,
              "seconds": round(time.time() - started), "workloads": {}, "latency_us": lat,
              "daemon_rss_kib": rss, "mount_seconds": mt}
    for w, per in results.items():
        base = per.get("native")
        rows = []
        for m in modes:
            xs = per.get(m)
            if not xs:
                continue
            mean = statistics.mean(xs)
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            row = {"mode": m, "mean": mean, "stddev_pct": 100 * sd / mean if mean else 0,
                   "runs": xs}
            if base and m != "native":
                bm = statistics.mean(base)
                row["change_pct"] = 100 * (mean - bm) / bm
                row["p"] = welch_p(xs, base)
            if m == "hsmfs+watch" and per.get("hsmfs"):
                hm = statistics.mean(per["hsmfs"])
                row["vs_hsmfs_pct"] = 100 * (mean - hm) / hm
                row["vs_hsmfs_p"] = welch_p(xs, per["hsmfs"])
            rows.append(row)
        report["workloads"][w] = {"unit": units[w], "rows": rows}
    if a.json:
        print(json.dumps(report, indent=1))
        return
    print("hsmfs benchmark %s: %d runs per mode, alternating; %d MiB files; %ds" %
          (report["date"], runs, size // MiB, report["seconds"]))
    print("%change is against native in the same run; * = Welch's t-test p < 0.05, ~ = noise")
    for w, wr in report["workloads"].items():
        print("\n%s (%s, higher is better)" % (w, wr["unit"]))
        print("  %-12s %12s %9s %11s %14s" % ("mode", "mean", "%stddev", "%change",
                                              "vs hsmfs"))
        for row in wr["rows"]:
            ch = vs = ""
            if "change_pct" in row:
                ch = "%+8.1f%% %s" % (row["change_pct"], "*" if row["p"] < 0.05 else "~")
            if "vs_hsmfs_pct" in row:
                vs = "%+8.1f%% %s" % (row["vs_hsmfs_pct"],
                                      "*" if row["vs_hsmfs_p"] < 0.05 else "~")
            print("  %-12s %12.1f %8.1f%% %11s %14s" % (row["mode"], row["mean"],
                                                       row["stddev_pct"], ch, vs))
    if lat:
        print("\nround trip latency (µs)   p50      p90      p99")
        for k, v in lat.items():
            print("  %-28s %7.1f  %7.1f  %7.1f" % (k, v[50], v[90], v[99]))
    if mt:
        print("\nmount time (s)      mean    %%stddev   (placeholders: %s files)" %
              ("20 000" if a.quick else "1 000 000"))
        for k, xs in mt.items():
            print("  %-14s %8.3f %8.1f%%" % (k, statistics.mean(xs),
                                          100 * statistics.stdev(xs) / statistics.mean(xs)
                                          if len(xs) > 1 else 0))
    if rss:
        print("\ndaemon RSS after the workloads (KiB): " +
              ", ".join("%s %d" % kv for kv in rss.items()))
    if not IS_ROOT:
        print("\n(seqread-cold skipped: dropping caches needs root)")


if __name__ == "__main__":
    main()
