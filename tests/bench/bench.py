#!/usr/bin/env python3
"""hsmfs benchmark driver: repeated runs, mean, %stddev, %change, significance.

    tests/bench/bench.py [--quick] [--runs N] [--json] [--modes a,b] [--workloads x,y]

Each workload runs --runs times per mode, the modes alternating run by run
(A B C A B C ...) so that drift of the machine hits all of them alike.
For each workload it prints an LKP-style table: mode, mean, median,
min-max, %stddev, %change against the native store measured in the same
run, and a mark '*' where Welch's t-test puts the difference beyond
noise (two-sided p < 0.05); '~' means within noise; 'x base' is the
median (and min-max) of the per-run ratios to the baseline, run i of a
mode against run i of native (curl for the lazy workloads), which ran
next to it: the machine's drift between runs drops out of it.

Modes:
  native       the store directory itself
  hsmfs        the mount, no hook connected
  hsmfs-copy   the same with -o nopassthrough: every byte through the daemon
  hsmfs+watch  the mount with a watch hook subscribed to every event
               (noop-hook --watch, allowing each at once; files resident,
               so reads raise none: must equal hsmfs; writes ask it first)
  cold         every 4 KiB read is a miss answered by a no-op fill hook
  fanotify     the store itself, with the kernel's pre-content HSM watching
               it: a FAN_CLASS_PRE_CONTENT listener (fan-listener.c) marks
               the store directory for FAN_PRE_ACCESS and allows every event
  fanotify+ignore  the same with an ignore mark on the resident test file
               (what an HSM does for files it has filled)
  hsmfs-fan    hsmfs -o backend=fanotify: the store bound at the mountpoint,
               marks only on files not fetched (the test files are the
               store's own: resident, unmarked); with event-latency, the
               missed 4 KiB read on the FUSE and the fanotify front end,
               O_DIRECT and buffered (miss_latency())
  (fanotify modes need root and Linux 6.14; skipped with a note otherwise)
  passthrough_hp   libfuse's own example daemon (the libfuse hsmfs builds
               with) over the store, --nopassthrough: the kernel's limit
               for a FUSE daemon that copies data
  passthrough_hp+pt  the same with kernel passthrough (root only)
Lazy fetch from a loopback nginx (--lazy, its own table): curl (the
baseline: the same file downloaded to /dev/null), curl-file (http-cold
only: the download kept in a file on the stores' filesystem, what
keeping the bytes costs a plain client), hsmfs-http, and where
installed httpdirfs --cache --no-range-check and rclone mount
--vfs-cache-mode full; workloads http-cold (first sequential read of a
fresh file), http-warm (the second), http-rand (4 KiB random reads of a
fresh file, every one a miss at first), http-cold-4k (a fresh file
of 64 MiB read whole in 4 KiB reads, as dd bs=4k or a program's own
small reads do), http-first (ms to the first
4 KiB read at a random place of a fresh file; curl's row is a kept-alive
client's range request), http-small (200 files of 32 KiB
of a fresh directory read one after another in readdir order, as cp -r
or tar c do, files/s; curl's row is one kept-alive HTTP client fetching
them one by one).  --wan DELAY_MS,RATE_MBS puts wanproxy.py (ours, on
127.0.0.1) between every client and nginx: a link with that delay each
way and that rate shared by all connections (e.g. --wan 10,120).
HSMFS_BENCH_OPTS adds mount options to hsmfs-http's mount (e.g.
first_fill=0, to compare); a client hsmfs-http+OPT[+OPT...] is one more
hsmfs-http mount with those options, side by side in the same run (e.g.
--lazy curl,hsmfs-http,hsmfs-http+cold_reads=direct).  Before each client's run the machine is
synced, (as root) its caches are dropped and the origin's files read back
in, and it is left to go idle, so that no client's leftovers slow the
next one's run.  httpdirfs closes a file it read at random only after
2 s, untimed (it exits on a close during its background download).
Workloads: seqread (warm page cache), seqread-cold (drop_caches, root
only), randread (4 KiB, 2 processes), randread-cold (the same after
drop_caches, root only), seqwrite, create, stat, unlink, tar-x (this
source tree unpacked, files/s) and find (over what tar-x left, entries/s),
git-add and git-status (git init and add -A of that tree, then a status
with a fresh index: a developer's metadata-heavy round, files/s),
fio-seqread, fio-randread, fio-seqread-cold, fio-seqwrite (fio, psync, one
job: 1 MiB sequential reads of the warm file, 4 KiB random reads of it,
the same sequential read after drop_caches (root), and 1 MiB buffered
writes of a new file; warm runs pass --invalidate=0, since fio otherwise
drops the file's page cache before each job and every run is cold),
stalled-hook (stat, open, 4 KiB read and close of a resident file, alone
and while 100 reads wait for a fill hook that never answers),
event-latency (missing-page reads through the no-op hook, beside the raw
SOCK_SEQPACKET ping-pong floor between two processes), mount (time to a
live mount of an empty store and of one with many placeholders), and the
daemon's RSS in each mode.
A mode or lazy client named with the suffix @b (hsmfs@b, cold@b,
hsmfs-http@b, ...) is the same with the daemon $HSMFS_B instead of
$HSMFS: another build, e.g. the last release's or main's before a
change, measured side by side in the same run, alternating with the
first (its %change is against native too; compare the two rows).
"""
import argparse
import json
import math
import mmap
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
from harness import Mount, import_manifest, tmpdir, wait_for  # noqa: E402

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
settle = float(sys.argv[4]) if len(sys.argv) > 4 else 0
fd = os.open(p, os.O_RDONLY)
pages = os.fstat(fd).st_size // 4096
rnd = random.Random(seed)
offs = [rnd.randrange(pages) * 4096 for _ in range(count)]
t = time.perf_counter()
for o in offs:
    os.pread(fd, 4096, o)
print(time.perf_counter() - t, flush=True)
time.sleep(settle)  # untimed, before the close (Lazy.settle)
"""


def w_randread(d, count, name="seq.bin", seed=1, settle=0):
    p = os.path.join(d, name)
    procs = [subprocess.Popen([sys.executable, "-c", RAND_READER, p, str(count), str(seed + k),
                               str(settle)],
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


SOURCE_TAR = None


def w_tree(d, phase):
    """tar -x of this project's source tree, then find over it."""
    global SOURCE_TAR
    if SOURCE_TAR is None:
        SOURCE_TAR = os.path.join(tmpdir("hsmfs-bench-tar-"), "src.tar")
        top = os.path.join(HERE, "..", "..")
        # the tracked files of a checkout (not its build directories, whatever
        # their names), else the tree without build*
        listed = subprocess.run(["git", "-C", top, "ls-files"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        if listed.returncode == 0 and listed.stdout:
            subprocess.run(["tar", "-cf", SOURCE_TAR, "-C", top, "-T", "-"],
                           input=listed.stdout, check=True)
        else:
            subprocess.run(["tar", "-cf", SOURCE_TAR, "--exclude=./build*", "--exclude=./.git",
                            "-C", top, "."], check=True)
    base = os.path.join(d, "tree")
    if phase == "tar-x":
        shutil.rmtree(base, ignore_errors=True)
        drop_caches()
        os.mkdir(base)
        t = time.perf_counter()
        subprocess.run(["tar", "-xf", SOURCE_TAR, "-C", base], check=True)
        dt = time.perf_counter() - t
        n = sum(len(fs) for _, _, fs in os.walk(base))
        return n / dt, "files/s"
    t = time.perf_counter()
    out = subprocess.run(["find", base], stdout=subprocess.PIPE, check=True).stdout
    return out.count(b"\n") / (time.perf_counter() - t), "entries/s"


def w_git(d, phase):
    """A developer's metadata-heavy round over what tar-x left: git-add
    (git init and add -A: every file read, hashed and its object written,
    files/s), then git-status (every file stat'ed against the index,
    files/s: a warm tree, the index fresh)."""
    base = os.path.join(d, "tree")
    if not os.path.isdir(base):
        w_tree(d, "tar-x")
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", HOME=base, GIT_AUTHOR_NAME="b",
               GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
    n = sum(len(fs) for _, _, fs in os.walk(base))
    if phase == "git-add":
        shutil.rmtree(os.path.join(base, ".git"), ignore_errors=True)
        subprocess.run(["git", "init", "-q", base], check=True, env=env)
        t = time.perf_counter()
        subprocess.run(["git", "-C", base, "add", "-A"], check=True, env=env)
        return n / (time.perf_counter() - t), "files/s"
    if not os.path.isdir(os.path.join(base, ".git")):
        w_git(d, "git-add")
    subprocess.run(["git", "-C", base, "status", "--porcelain"], check=True, env=env,
                   stdout=subprocess.DEVNULL)  # the index's stat data fresh
    t = time.perf_counter()
    subprocess.run(["git", "-C", base, "status", "--porcelain"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return n / (time.perf_counter() - t), "files/s"


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

class Skip(Exception):
    pass


def start_fan(d, extra=()):
    """A fan-listener on d, ready; Skip where the kernel or rights say no."""
    prog = os.environ.get("HSMFS_FAN_LISTENER")
    if not prog or not os.path.exists(prog):
        raise Skip("fan-listener not built")
    p = subprocess.Popen([prog, d] + list(extra), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    line = p.stdout.readline()
    if line != b"ready\n":
        rc = p.wait()
        raise Skip("fanotify pre-content unavailable (%s): %s" %
                   (rc, p.stderr.read().decode().strip()))
    return p


def hook_connected(mnt, name):
    out = subprocess.run([os.environ["HSMFSCTL"], "hooks", mnt], capture_output=True,
                         text=True).stdout
    return any(line.split()[:1] == [name] for line in out.splitlines()[1:])


def daemon_of(mode):
    """The hsmfs binary a mode runs: $HSMFS_B for a name ending in @b."""
    if not mode.endswith("@b"):
        return None
    exe = os.environ.get("HSMFS_B")
    if not exe or not os.access(exe, os.X_OK):
        raise Skip("%s needs HSMFS_B, the other hsmfs binary" % mode)
    return exe


class Env:
    """The store, its mount, the hooks: set up once per mode."""

    def __init__(self, mode, size, opts=""):
        self.mode = mode
        exe = daemon_of(mode)
        mode = mode.split("@")[0]
        self.store = tmpdir("hsmfs-bench-store-")
        with open(os.path.join(self.store, "seq.bin"), "wb") as f:
            chunk = os.urandom(MiB)
            for _ in range(size // MiB):
                f.write(chunk)
        self.mount = None
        self.noop = None
        if mode in ("hsmfs", "hsmfs+watch", "cold", "hsmfs-copy", "hsmfs-fan"):
            if mode == "hsmfs-copy":
                opts = ",".join(o for o in (opts, "nopassthrough") if o)
            if mode == "hsmfs-fan":
                if not IS_ROOT:
                    raise Skip("backend=fanotify needs root")
                opts = ",".join(o for o in (opts, "backend=fanotify") if o)
            self.mount = Mount(store=self.store, opts=opts, exe=exe).start()
        if mode in ("hsmfs+watch", "cold"):
            # a C hook, like the fanotify listener: allows every event at once
            watch = ["--watch"] if mode == "hsmfs+watch" else []
            self.noop = subprocess.Popen([os.environ["HSMFS_NOOP_HOOK"]] + watch +
                                         [self.mount.mnt])
            wait_for(lambda: hook_connected(self.mount.mnt, "noop"), "the noop hook")
        self.phs = None
        if mode.startswith("passthrough_hp"):
            self.phs = start_passthrough_hp(self.store, "+pt" in mode)
        self.fan = None
        if mode.startswith("fanotify"):
            extra = ["--ignore", os.path.join(self.store, "seq.bin")] if "ignore" in mode else []
            self.fan = start_fan(self.store, extra)

    @property
    def dir(self):
        if self.phs:
            return self.phs
        return self.mount.mnt if self.mount else self.store

    def close(self):
        if self.phs:
            harness.unmount(self.phs)
            shutil.rmtree(os.path.dirname(self.phs), ignore_errors=True)
        if self.fan:
            self.fan.terminate()
            self.fan.wait()
        if self.noop:
            self.noop.kill()
            self.noop.wait()
        if self.mount:
            self.mount.stop()
            self.mount.cleanup()
        shutil.rmtree(self.store, ignore_errors=True)


def start_passthrough_hp(store, passthrough):
    """libfuse's passthrough_hp over store; returns its mountpoint."""
    exe = os.environ.get("HSMFS_PASSTHROUGH_HP")
    if not exe or not os.path.exists(exe):
        raise Skip("passthrough_hp was not built (the system's libfuse is in use: "
                   "ninja -C BUILD tests/bench/passthrough_hp where it is not)")
    if passthrough and not IS_ROOT:
        raise Skip("kernel passthrough needs root")
    mnt = os.path.join(tmpdir("hsmfs-bench-phs-"), "mnt")
    os.mkdir(mnt)
    args = [exe, store, mnt] + ([] if passthrough else ["--nopassthrough"])
    if subprocess.run(args).returncode:
        raise Skip("passthrough_hp did not mount")
    wait_for(lambda: harness.is_mounted(mnt), "passthrough_hp mounted")
    return mnt


def fio(d, name, rw, bs, size=None, cold=False, runtime=None):
    """One fio job on d/name; MB/s.  Warm jobs keep the page cache."""
    if not shutil.which("fio"):
        raise Skip("fio is not installed (apt-get install fio)")
    p = os.path.join(d, name)
    if cold:
        drop_caches()
    elif rw in ("read", "randread"):
        with open(p, "rb") as f:  # warm the page cache
            while f.read(MiB):
                pass
    args = ["fio", "--name=j", "--filename=" + p, "--rw=" + rw, "--bs=" + bs,
            "--ioengine=psync", "--numjobs=1", "--output-format=json",
            "--invalidate=%d" % (1 if cold else 0)]
    if size:
        args.append("--size=%d" % size)
    if runtime:
        args += ["--time_based", "--runtime=%d" % runtime]
    out = json.loads(subprocess.run(args, stdout=subprocess.PIPE, check=True).stdout)
    job = out["jobs"][0]
    side = job["write" if "write" in rw else "read"]
    return side["bw_bytes"] / MiB, "MB/s"


def cold_randread(env, count, size, run):
    """Random 4 KiB reads where every read is a miss (fresh placeholder)."""
    name = "cold%d.bin" % run
    rc, out = import_manifest(env.dir, [{"path": name, "size": size}])
    if rc:
        raise RuntimeError(out)
    return w_randread(env.dir, count, name, seed=run * 7)


def percentiles(lat):
    """p50, p90 and p99 of latencies."""
    lat = sorted(lat)
    return {q: lat[int(len(lat) * q / 100)] for q in (50, 90, 99)}


def fill_stats(mnt):
    s = json.loads(os.getxattr(mnt, "user.hsmfs.stats"))
    return s["misses"], s["readahead"]


def event_latency(env, count):
    """p50/p90/p99 (µs) of O_DIRECT 4 KiB reads of missing pages (chunk=4k).

    The pages are read in a shuffled order: in file order, readahead would
    fill them ahead of the reader and this would time page-cache misses
    served from the store, not events.  Checked with the daemon's counters.
    """
    name = "lat.bin"
    rc, out = import_manifest(env.dir, [{"path": name, "size": count * 4096}])
    if rc:
        raise RuntimeError(out)
    pages = list(range(count))
    random.Random(1).shuffle(pages)
    m0, r0 = fill_stats(env.dir)
    fd = os.open(os.path.join(env.dir, name), os.O_RDONLY | os.O_DIRECT)
    lat = []
    for i in pages:
        t = time.perf_counter_ns()
        os.pread(fd, 4096, i * 4096)
        lat.append((time.perf_counter_ns() - t) / 1000)
    os.close(fd)
    m1, r1 = fill_stats(env.dir)
    # each read raises its own event; a few of them count as readahead
    # too (the shuffle puts some neighbours in order), and still wait
    if m1 - m0 != count:
        raise RuntimeError("%d reads raised %d events, %d of them readahead" %
                           (count, m1 - m0, r1 - r0))
    return percentiles(lat)


RATE_READER = r"""
import os, random, sys, time
p, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pages = list(range(count))
random.Random(seed).shuffle(pages)
fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
t = time.perf_counter()
for i in pages:
    os.pread(fd, 4096, i * 4096)
print(time.perf_counter() - t)
"""


def stalled_hook(readers, count):
    """p50/p90/p99 (µs) of stat + open + 4 KiB read + close of a resident
    file, unloaded and while `readers` reads wait for a fill hook that
    never answers (each parked in the daemon, not a worker thread)."""
    import socket
    import threading
    sys.path.insert(0, os.path.join(HERE, "..", "helpers"))
    import pyhook
    m = Mount(opts="timeout=60,max_pending=%d" % (readers + 64)).start()
    try:
        rc, out = import_manifest(m.mnt, [{"path": "p%d" % k, "size": 4096}
                                          for k in range(readers)])
        if rc:
            raise RuntimeError(out)
        res = os.path.join(m.mnt, "resident")
        with open(res, "wb") as f:
            f.write(os.urandom(4096))

        def probe():
            lat = []
            for _ in range(count):
                t = time.perf_counter_ns()
                os.stat(res)
                with open(res, "rb", buffering=0) as f:
                    f.read(4096)
                lat.append((time.perf_counter_ns() - t) / 1000)
            return percentiles(lat)
        quiet = probe()
        s, _ = pyhook.connect(m.mnt, "fill", ["access"], "stalled")
        seen = []

        def drain():
            while True:
                try:
                    data, fds = pyhook.recv_frame(s)
                except OSError:
                    return
                if not data:
                    return
                for fd in fds:
                    os.close(fd)
                seen.append(1)
        threading.Thread(target=drain, daemon=True).start()

        def blocked(k):
            fd = os.open(os.path.join(m.mnt, "p%d" % k), os.O_RDONLY | os.O_DIRECT)
            try:
                os.pread(fd, 4096, 0)
            except OSError:
                pass
            finally:
                os.close(fd)
        ts = [threading.Thread(target=blocked, args=(k,), daemon=True) for k in range(readers)]
        for t in ts:
            t.start()
        wait_for(lambda: len(seen) >= readers, "%d blocked readers at the hook" % readers)
        loaded = probe()
        s.shutdown(socket.SHUT_RDWR)
        s.close()
        for t in ts:
            t.join()
        return quiet, loaded
    finally:
        m.stop()
        m.cleanup()


def event_rate(env, readers, count):
    """Events per second: readers processes, each reading count missing pages."""
    names = ["rate%d-%d.bin" % (readers, k) for k in range(readers)]
    rc, out = import_manifest(env.dir, [{"path": n, "size": count * 4096} for n in names])
    if rc:
        raise RuntimeError(out)
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", RATE_READER, os.path.join(env.dir, n),
                               str(count), str(k)], stdout=subprocess.PIPE)
             for k, n in enumerate(names)]
    for p in procs:
        p.communicate()
    return readers * count / (time.perf_counter() - t)


def miss_latency(count, fanotify, direct, exe=None):
    """p50/p90/p99 (µs) of 4 KiB reads of missing pages through the no-op
    fill hook (chunk=4k), on a FUSE mount or a backend=fanotify one, in a
    shuffled order: O_DIRECT (event_latency()'s way), or buffered with
    POSIX_FADV_RANDOM (what a program's reads are).  On fanotify an
    O_DIRECT read of a page just filled waits for the kernel to write the
    page back first (the store's own O_DIRECT rule): a cost of the
    measure, not of the event.  The placeholder of a fanotify mount is
    made before the mount (a fanotify mount has no live import); the
    hook's join is its line in the daemon's log."""
    if fanotify and not IS_ROOT:
        raise Skip("backend=fanotify needs root")
    store = tmpdir("hsmfs-bench-missstore-")
    entry = {"path": "lat.bin", "size": count * 4096}
    if fanotify:
        man = store + ".jsonl"
        with open(man, "w") as f:
            f.write(json.dumps(entry) + "\n")
        r = subprocess.run([os.environ["HSMFSCTL"], "import", "-s", store, man],
                           capture_output=True, text=True)
        os.unlink(man)
        if r.returncode:
            raise RuntimeError(r.stdout + r.stderr)
    m = Mount(store=store, opts=("backend=fanotify," if fanotify else "") +
              "chunk=4k,first_fill=0,prefetch=0", exe=exe).start()
    noop = None
    try:
        if not fanotify:
            rc, out = import_manifest(m.mnt, [entry])
            if rc:
                raise RuntimeError(out)
        noop = subprocess.Popen([os.environ["HSMFS_NOOP_HOOK"], m.mnt])
        if not m.logged("hook 'noop'"):
            raise RuntimeError("the noop hook did not join")
        pages = list(range(count))
        random.Random(1).shuffle(pages)
        fd = os.open(os.path.join(m.mnt, "lat.bin"), os.O_RDONLY | (os.O_DIRECT if direct else 0))
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        page = mmap.mmap(-1, 4096)
        lat = []
        for i in pages:
            t = time.perf_counter_ns()
            os.preadv(fd, [page], i * 4096)
            lat.append((time.perf_counter_ns() - t) / 1000)
        os.close(fd)
        return percentiles(lat)
    finally:
        if noop:
            noop.kill()
            noop.wait()
        m.stop()
        m.cleanup()
        shutil.rmtree(store, ignore_errors=True)


def fan_latency(count):
    """p50/p90/p99 (µs) of 4 KiB O_DIRECT reads, each one a FAN_PRE_ACCESS allowed."""
    d = tmpdir("hsmfs-bench-fan-")
    p = os.path.join(d, "lat.bin")
    with open(p, "wb") as f:
        f.write(os.urandom(count * 4096))
    try:
        fan = start_fan(d)
    except Skip:
        shutil.rmtree(d, ignore_errors=True)
        raise
    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    page = mmap.mmap(-1, 4096)  # O_DIRECT on ext4 wants an aligned buffer
    lat = []
    for i in range(count):
        t = time.perf_counter_ns()
        os.preadv(fd, [page], i * 4096)
        lat.append((time.perf_counter_ns() - t) / 1000)
    os.close(fd)
    fan.terminate()
    fan.wait()
    shutil.rmtree(d, ignore_errors=True)
    return percentiles(lat)


# ------------------------------------------------------------- lazy fetch

def read_all(p):
    n = 0
    buf = bytearray(MiB)
    with open(p, "rb", buffering=0) as f:
        while True:
            k = f.readinto(buf)
            if not k:
                return n
            n += k


class Lazy:
    """One lazy-fetch client of the origin, mounted at self.mnt."""

    def __init__(self, kind, url, names, size, sizes=None):
        self.kind, self.url = kind, url
        exe = daemon_of(kind)
        kind = kind.split("@")[0]
        # seconds to wait before closing a file just read at random:
        # httpdirfs 1.2.5 exits when a file is closed while its
        # background download of it runs ("Cache_free: could not destroy
        # w_lock!", fangfufu/httpdirfs#174, open upstream)
        self.settle = 2.0 if kind == "httpdirfs" else 0
        self.dir = tmpdir("hsmfs-bench-lazy-")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        self.proc = self.mount = None
        if kind == "hsmfs-http" or kind.startswith("hsmfs-http+"):
            extra = kind.split("+")[1:]
            if os.environ.get("HSMFS_BENCH_OPTS"):
                extra.insert(0, os.environ["HSMFS_BENCH_OPTS"])
            self.mount = Mount(store=os.path.join(self.dir, "store"), exe=exe,
                               opts="hook=%s,origin=%s,prefetch=8%s" % (
                                   os.environ["HSMFS_HTTP"], url,
                                   "".join("," + o for o in extra)))
            self.mount.start()
            self.mnt = self.mount.mnt
            sizes = sizes or {}
            rc, out = import_manifest(self.mnt, [{"path": n, "size": sizes.get(n, size)}
                                                 for n in names])
            if rc:
                raise RuntimeError(out)
        elif kind == "httpdirfs":
            exe = shutil.which("httpdirfs")
            if not exe:
                raise Skip("httpdirfs is not installed (apt-get install httpdirfs)")
            os.mkdir(os.path.join(self.dir, "cache"))
            self.proc = subprocess.Popen([exe, "-f", "--cache", "--cache-location",
                                          os.path.join(self.dir, "cache"), "--no-range-check",
                                          url, self.mnt], stdout=subprocess.DEVNULL,
                                         stderr=open(os.path.join(self.dir, "log"), "wb"))
        elif kind == "rclone":
            exe = shutil.which("rclone")
            if not exe:
                raise Skip("rclone is not installed (apt-get install rclone)")
            self.proc = subprocess.Popen([exe, "mount", ":http:", self.mnt, "--http-url", url,
                                          "--vfs-cache-mode", "full", "--cache-dir",
                                          os.path.join(self.dir, "cache"), "--read-only",
                                          "--config", "/dev/null"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.proc:
            harness.wait_for(lambda: harness.is_mounted(self.mnt) or self.proc.poll() is not None,
                             "%s mounted" % kind)
            if self.proc.poll() is not None:
                log = os.path.join(self.dir, "log")
                why = open(log, errors="replace").read().strip().splitlines()[:1] \
                    if os.path.exists(log) else []
                raise Skip("%s exited %s %s" % (kind, self.proc.returncode, " ".join(why)))

    def path(self, name):
        return os.path.join(self.mnt, name)

    def close(self):
        if self.mount:
            self.mount.stop()
            self.mount.cleanup()
        if self.proc:
            harness.unmount(self.mnt)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


SMALL_FILES, SMALL_SIZE = 200, 32 * 1024
SMALL_READS_SIZE = 64 * MiB  # the file http-cold-4k reads whole


class WanProxy:
    """wanproxy.py in front of a loopback origin: delay each way, shared rate."""

    def __init__(self, port, delay_ms, rate_mbs):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "wanproxy.py"),
                                      "--to", str(port), "--delay-ms", str(delay_ms),
                                      "--rate-mbs", str(rate_mbs)], stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()  # the readiness signal: its port
        if not line.strip().isdigit():
            raise RuntimeError("wanproxy did not start")
        self.port = int(line)

    def url(self, path):
        return "http://127.0.0.1:%d/%s" % (self.port, path)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def keepalive_get_all(port, paths):
    """One kept-alive HTTP client fetching paths one after another (bytes)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port)
    n = 0
    try:
        for p in paths:
            c.request("GET", "/" + p)
            r = c.getresponse()
            n += len(r.read())
            if r.status != 200:
                raise RuntimeError("GET %s: %d" % (p, r.status))
    finally:
        c.close()
    return n


def read_dir_files(d):
    """Read every file of d one after another, in readdir order (cp -r, tar c)."""
    return sum(read_all(os.path.join(d, n)) for n in os.listdir(d))


def cpu_idle_since(prev):
    """(idle share of all CPUs since prev, now) from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    now = (sum(v), v[3] + v[4])
    if not prev or now[0] == prev[0]:
        return 0.0, now
    return (now[1] - prev[1]) / (now[0] - prev[0]), now


def quiesce(limit=20.0, idle=0.9, window=0.25):
    """Wait until the machine is idle (a peer's writeback, its cache
    cleaner, a download it went on with after the reader stopped): what
    one client leaves running must not slow the next one's run.  Waits
    for an idle window (share of all CPUs) or limit seconds; returns the
    seconds waited."""
    t = time.monotonic()
    _, prev = cpu_idle_since(None)
    while time.monotonic() - t < limit:
        time.sleep(window)
        share, prev = cpu_idle_since(prev)
        if share >= idle:
            break
    return time.monotonic() - t


def settle_machine(origin_files, notes):
    """Before a client's run: what earlier runs wrote goes to disk and,
    as root, every cache is dropped and the origin's files read back in.
    Five runs of four clients leave tens of GiB in the page cache (the
    clients' caches, the stores); on a machine short of free memory the
    next run pays the kernel's reclaim (doc/benchmarks.md says what it
    cost a run).  The origin's
    own bytes stay cached, as every client's run found them."""
    os.sync()
    if not IS_ROOT:
        if "caches not dropped between runs (not root)" not in notes:
            notes.append("caches not dropped between runs (not root)")
        return
    drop_caches()
    for p in origin_files:
        with open(p, "rb", buffering=0) as f:
            while f.read(MiB):
                pass


def read_part(p, n, bs):
    """Read the first n bytes of p in reads of bs; returns the bytes read."""
    got = 0
    with open(p, "rb", buffering=0) as f:
        while got < n:
            k = len(f.read(bs))
            if not k:
                break
            got += k
    return got


def lazy_round(c, k, r, seq, rnd, s4k, sd, size, rcount):
    """One run of the lazy-fetch workloads on client c: {workload: value}."""
    got = {}
    os.sync()  # the last run's stores are written back first, not during
    t = time.perf_counter()
    n = read_all(c.path(seq))
    got["http-cold"] = n / MiB / (time.perf_counter() - t)
    t = time.perf_counter()
    n = read_all(c.path(seq))
    got["http-warm"] = n / MiB / (time.perf_counter() - t)
    # one 4 KiB read at a random place of a file nobody read yet, its
    # open and close included (a peer that needs to settle first closes
    # the file after the clock stopped)
    t = time.perf_counter()
    with open(c.path(rnd), "rb", buffering=0) as f:
        f.seek(random.Random(r).randrange(size // 4096) * 4096)
        f.read(4096)
        if c.settle:
            got["http-first"] = 1000 * (time.perf_counter() - t)
            time.sleep(c.settle)
    if not c.settle:
        got["http-first"] = 1000 * (time.perf_counter() - t)
    got["http-rand"] = w_randread(c.mnt, rcount, rnd, seed=r, settle=c.settle)[0]
    t = time.perf_counter()
    n = read_part(c.path(s4k), SMALL_READS_SIZE, 4096)
    got["http-cold-4k"] = n / MiB / (time.perf_counter() - t)
    t = time.perf_counter()
    n = read_dir_files(c.path(sd))
    if n != SMALL_FILES * SMALL_SIZE:
        raise RuntimeError("%s: read %d bytes of the small files" % (k, n))
    got["http-small"] = SMALL_FILES / (time.perf_counter() - t)
    return got


def fname(kind):
    """A client's name as a part of a file name."""
    return "".join(ch if ch.isalnum() or ch == "-" else "_" for ch in kind)


# the lazy-fetch clients that are one curl command, not a mount
PLAIN_CLIENTS = ("curl", "curl-file")


def curl_rate(url, out, size):
    """MB/s of one curl download of url (size bytes) into out."""
    t = time.perf_counter()
    subprocess.run(["curl", "-s", "-o", out, url], check=True)
    return size / MiB / (time.perf_counter() - t)


def lazy_bench(runs, size, rcount, kinds, wan=None):
    """Run the lazy-fetch workloads; returns (results, units, notes).

    wan: (delay_ms, rate_mbs) puts wanproxy.py between every client
    (curl too) and nginx: a link with that delay each way and that rate.
    http-small reads SMALL_FILES files of SMALL_SIZE one after another.
    """
    root = tmpdir("hsmfs-bench-origin-")
    os.chmod(root, 0o755)
    os.mkdir(os.path.join(root, "html"))
    os.chmod(os.path.join(root, "html"), 0o755)
    data = os.path.join(root, "data.bin")
    with open(data, "wb") as f:
        chunk = os.urandom(MiB)
        for _ in range(size // MiB):
            f.write(chunk)
    old = time.time() - 3600  # a strong Last-Modified validator
    os.utime(data, (old, old))
    small = os.path.join(root, "small.bin")
    with open(small, "wb") as f:
        f.write(os.urandom(SMALL_SIZE))
    os.utime(small, (old, old))
    # read whole, so that no readahead past where it stopped is left on
    # the link for the next workload
    part = os.path.join(root, "part.bin")
    with open(part, "wb") as f:
        for _ in range(SMALL_READS_SIZE // MiB):
            f.write(chunk)
    os.utime(part, (old, old))
    names, small_names, part_names = [], [], []
    for k in kinds:
        for r in range(runs):
            for w in ("seq", "rnd", "s4k"):
                n = "%s-%s-%d.bin" % (fname(k), w, r)
                os.link(part if w == "s4k" else data, os.path.join(root, "html", n))
                (part_names if w == "s4k" else names).append(n)
            sd = "small-%s-%d" % (fname(k), r)
            os.mkdir(os.path.join(root, "html", sd))
            os.chmod(os.path.join(root, "html", sd), 0o755)
            for i in range(SMALL_FILES):
                n = "%s/f%03d.bin" % (sd, i)
                os.link(small, os.path.join(root, "html", n))
                small_names.append(n)
    results, units, notes = {}, {}, []
    # the peers list directories from nginx's HTML index
    ng = harness.Nginx(root, extra="location /html/ { autoindex on; "
                                   "autoindex_format html; }").start()
    proxy = WanProxy(ng.port, *wan) if wan else None
    origin = proxy or ng
    clients = {}
    try:
        for k in kinds:
            if k in PLAIN_CLIENTS:
                continue
            try:
                sizes = {n: SMALL_SIZE for n in small_names}
                sizes.update((n, SMALL_READS_SIZE) for n in part_names)
                clients[k] = Lazy(k, origin.url("html/"), names + small_names + part_names,
                                  size, sizes)
            except Skip as e:
                notes.append("%s skipped: %s" % (k, e))
        for r in range(runs):
            for k in kinds:
                if k not in PLAIN_CLIENTS and k not in clients:
                    continue
                seq, rnd, s4k = ("%s-%s-%d.bin" % (fname(k), w, r)
                                 for w in ("seq", "rnd", "s4k"))
                sd = "small-%s-%d" % (fname(k), r)
                settle_machine([data, small, part], notes)
                waited = quiesce()
                if waited >= 20:
                    notes.append("before %s's run %d the machine was still busy after %.0f s"
                                 % (k, r, waited))
                if k == "curl-file":
                    # the same download kept in a file beside the stores:
                    # what keeping the bytes costs a plain client
                    d = tmpdir("hsmfs-bench-curl-file-")
                    try:
                        v = curl_rate(origin.url("html/" + seq), os.path.join(d, "f"), size)
                    finally:
                        shutil.rmtree(d)
                    results.setdefault("http-cold", {}).setdefault(k, []).append(v)
                    continue
                if k == "curl":
                    v = curl_rate(origin.url("html/" + seq), "/dev/null", size)
                    results.setdefault("http-cold", {}).setdefault(k, []).append(v)
                    results.setdefault("http-warm", {}).setdefault(k, []).append(v)
                    # a kept-alive client's 4 KiB range of a fresh file
                    import http.client
                    hc = http.client.HTTPConnection("127.0.0.1", origin.port)
                    hc.request("HEAD", "/html/" + rnd)
                    hc.getresponse().read()
                    off = random.Random(r).randrange(size // 4096) * 4096
                    t = time.perf_counter()
                    hc.request("GET", "/html/" + rnd,
                               headers={"Range": "bytes=%d-%d" % (off, off + 4095)})
                    hc.getresponse().read()
                    results.setdefault("http-first", {}).setdefault(k, []).append(
                        1000 * (time.perf_counter() - t))
                    hc.close()
                    t = time.perf_counter()
                    keepalive_get_all(origin.port, ["html/%s/f%03d.bin" % (sd, i)
                                                    for i in range(SMALL_FILES)])
                    results.setdefault("http-small", {}).setdefault(k, []).append(
                        SMALL_FILES / (time.perf_counter() - t))
                    continue
                c = clients[k]
                try:
                    got = lazy_round(c, k, r, seq, rnd, s4k, sd, size, rcount)
                except (OSError, ValueError, RuntimeError) as e:
                    notes.append("%s failed in run %d (%s): left out from then on" % (k, r, e))
                    c.close()
                    del clients[k]
                    continue
                for w, v in got.items():
                    results.setdefault(w, {}).setdefault(k, []).append(v)
        units = {"http-cold": "MB/s", "http-warm": "MB/s", "http-rand": "ops/s",
                 "http-cold-4k": "MB/s",
                 "http-small": "files/s", "http-first": "ms"}
    finally:
        for c in clients.values():
            c.close()
        if proxy:
            proxy.stop()
        ng.stop()
        shutil.rmtree(root, ignore_errors=True)
    return results, units, notes


def pingpong(count, cpus=()):
    """Round trips of the socket ping-pong; cpus: (a, b) pins its two ends."""
    out = subprocess.run([os.environ["HSMFS_PINGPONG"], str(count)] + [str(c) for c in cpus],
                         stdout=subprocess.PIPE)
    if out.returncode:
        raise Skip("cannot pin to CPUs %s" % (cpus,))
    return percentiles(int(x) / 1000 for x in out.stdout.split())


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
    ap.add_argument("--modes", default="native,hsmfs,hsmfs-copy,hsmfs+watch,cold,fanotify,"
                                       "fanotify+ignore,passthrough_hp,passthrough_hp+pt")
    ap.add_argument("--lazy", default="curl,hsmfs-http,httpdirfs,rclone",
                    help="lazy-fetch clients to compare ('' for none)")
    ap.add_argument("--wan", metavar="DELAY_MS,RATE_MBS",
                    help="lazy fetch through wanproxy.py: a link with DELAY_MS each way "
                         "and RATE_MBS MB/s shared (e.g. 10,120); default: plain loopback")
    ap.add_argument("--workloads",
                    default="seqread,seqread-cold,randread,randread-cold,seqwrite,"
                            "fio-seqread,fio-randread,fio-seqread-cold,fio-seqwrite,create,"
                            "stat,unlink,tar-x,find,git-add,git-status,event-latency,"
                            "stalled-hook,mount")
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

    notes = []
    envs = {}
    for m in list(modes):
        try:
            envs[m] = Env(m, size)
        except Skip as e:
            notes.append("%s skipped: %s" % (m, e))
            modes.remove(m)
    try:
        for r in range(runs):
            for m in modes:  # A B C A B C: drift hits every mode alike
                e = envs[m]
                for w in wls:
                    v = None
                    if m.split("@")[0] == "cold":
                        if w == "randread":
                            v, u = cold_randread(e, rcount, size, r)
                        else:
                            continue
                    elif w == "fio-seqread":
                        v, u = fio(e.dir, "seq.bin", "read", "1M")
                    elif w == "fio-randread":
                        v, u = fio(e.dir, "seq.bin", "randread", "4k", runtime=5)
                    elif w == "fio-seqread-cold":
                        if not IS_ROOT:
                            continue
                        v, u = fio(e.dir, "seq.bin", "read", "1M", cold=True)
                    elif w == "fio-seqwrite":
                        v, u = fio(e.dir, "fio-w%d.bin" % r, "write", "1M", size=size)
                        os.unlink(os.path.join(e.dir, "fio-w%d.bin" % r))
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
                    elif w in ("tar-x", "find"):
                        v, u = w_tree(e.dir, w)
                    elif w in ("git-add", "git-status"):
                        v, u = w_git(e.dir, w)
                    elif w == "randread-cold":
                        if not IS_ROOT:
                            continue
                        drop_caches()
                        v, u = w_randread(e.dir, rcount // 5)
                    else:
                        continue
                    results.setdefault(w, {}).setdefault(m, []).append(v)
                    units[w] = u
        rss = {m: rss_kib(e.mount.proc.pid) for m, e in envs.items() if e.mount}
        lat = {}
        rates = {}
        if "stalled-hook" in wls:
            quiet, loaded = stalled_hook(100, 500 if a.quick else 2000)
            lat["resident stat+read, unloaded"] = quiet
            lat["  with 100 reads blocked on a hook"] = loaded
        if "event-latency" in wls:
            for cm in [m for m in modes if m.split("@")[0] == "cold"]:
                tag = cm[4:]  # "" or "@b"
                e = Env(cm, MiB, opts="chunk=4k")
                try:
                    lat["hsmfs%s event (no-op fill hook)" % tag] = \
                        event_latency(e, 2000 if a.quick else 10000)
                    for k in (1, 2):
                        rates["%d reader%s%s" % (k, "s" if k > 1 else "", tag)] = \
                            event_rate(e, k, 2000 if a.quick else 10000)
                finally:
                    e.close()  # a failed workload leaves no mount behind
            if any(m.split("@")[0] == "hsmfs-fan" for m in modes):
                # the missed read on both front ends, side by side
                n = 2000 if a.quick else 10000
                try:
                    for direct in (True, False):
                        for fan in (False, True):
                            lat["%s miss, %s" % ("fanotify" if fan else "FUSE",
                                                  "O_DIRECT" if direct else "buffered")] = \
                                miss_latency(n, fan, direct)
                except Skip as e:
                    notes.append("backend=fanotify latency skipped: %s" % e)
            try:
                lat["fanotify event (listener allows)"] = fan_latency(2000 if a.quick else 10000)
            except Skip as e:
                notes.append("fanotify latency skipped: %s" % e)
            # where the ends run: the floor differs by a wake-up per hand-off
            n = 2000 if a.quick else 10000
            lat["SOCK_SEQPACKET ping-pong"] = pingpong(n)
            cpus = sorted(os.sched_getaffinity(0))
            try:
                lat["  ends on one core"] = pingpong(n, (cpus[0], cpus[0]))
                if len(cpus) > 1:
                    lat["  ends on two cores"] = pingpong(n, (cpus[0], cpus[1]))
            except Skip as e:
                notes.append("pinned ping-pong skipped: %s" % e)
            notes.append("hsmfs and fanotify events and the first ping-pong run where the "
                          "scheduler puts them (%d CPUs)" % len(cpus))
        mt = None
        if "mount" in wls:
            mt = mount_time(20000 if a.quick else 1000000, runs)
    finally:
        for e in envs.values():
            e.close()
    lazy_kinds = [k for k in a.lazy.split(",") if k]
    lazy_size = (64 if a.quick else 256) * MiB
    if lazy_kinds:
        wan = tuple(float(x) for x in a.wan.split(",")) if a.wan else None
        lres, lunits, lnotes = lazy_bench(runs, lazy_size,
                                          300 if a.quick else 1000, lazy_kinds, wan)
        if wan:
            notes.append("lazy fetch through wanproxy.py: %g ms each way, %g MB/s shared"
                         % wan)
        notes += lnotes
        for w, per in lres.items():
            results[w] = per
            units[w] = lunits[w]

    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "runs": runs, "size_mib": size // MiB,
              "lazy_size_mib": lazy_size // MiB if lazy_kinds else None,
              "seconds": round(time.time() - started), "workloads": {}, "latency_us": lat,
              "events_per_second": rates,
              "daemon_rss_kib": rss, "mount_seconds": mt}
    for w, per in results.items():
        bname = "curl" if w.startswith("http-") else "native"
        base = per.get(bname)
        rows = []
        for m in (lazy_kinds if w.startswith("http-") else modes):
            xs = per.get(m)
            if not xs:
                continue
            mean = statistics.mean(xs)
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            row = {"mode": m, "mean": mean, "stddev_pct": 100 * sd / mean if mean else 0,
                   "median": statistics.median(xs), "min": min(xs), "max": max(xs),
                   "runs": xs}
            if base and m != bname:
                bm = statistics.mean(base)
                row["change_pct"] = 100 * (mean - bm) / bm
                row["p"] = welch_p(xs, base)
                if len(base) == len(xs) and all(base):
                    # run i of every mode ran back to back: a ratio per
                    # run leaves out the drift of the machine between runs
                    r = [x / b for x, b in zip(xs, base)]
                    row["ratio"] = {"median": statistics.median(r), "min": min(r),
                                    "max": max(r)}
            if m == "hsmfs+watch" and per.get("hsmfs"):
                hm = statistics.mean(per["hsmfs"])
                row["vs_hsmfs_pct"] = 100 * (mean - hm) / hm
                row["vs_hsmfs_p"] = welch_p(xs, per["hsmfs"])
            rows.append(row)
        report["workloads"][w] = {"unit": units[w], "baseline": bname, "rows": rows}
    report["notes"] = notes
    if a.json:
        print(json.dumps(report, indent=1))
        return
    print("hsmfs benchmark %s: %d runs per mode, alternating; %d MiB files%s; %ds" %
          (report["date"], runs, size // MiB,
           ", %d MiB lazy files" % (lazy_size // MiB) if lazy_kinds else "",
           report["seconds"]))
    print("%change is against native (http-*: against curl) in the same run; "
          "* = Welch's t-test p < 0.05, ~ = noise")
    print("x base: the median of the per-run ratios to native (curl), run i against "
          "run i, and their min-max")
    for w, wr in report["workloads"].items():
        print("\n%s (%s, %s is better)" % (w, wr["unit"],
                                           "lower" if wr["unit"] == "ms" else "higher"))
        mw = max([16] + [len(row["mode"]) for row in wr["rows"]])
        print("  %-*s %10s %10s %21s %8s %10s %18s %10s" % (
            mw, "mode", "mean", "median", "min-max", "%stddev", "%change", "x base",
            "vs hsmfs"))
        for row in wr["rows"]:
            ch = vs = ra = ""
            if "change_pct" in row:
                ch = "%+7.1f%% %s" % (row["change_pct"], "*" if row["p"] < 0.05 else "~")
            if "ratio" in row:
                ra = "%.2f (%.2f-%.2f)" % (row["ratio"]["median"], row["ratio"]["min"],
                                           row["ratio"]["max"])
            if "vs_hsmfs_pct" in row:
                vs = "%+7.1f%% %s" % (row["vs_hsmfs_pct"],
                                      "*" if row["vs_hsmfs_p"] < 0.05 else "~")
            print("  %-*s %10.1f %10.1f %21s %7.1f%% %10s %18s %10s" % (
                mw, row["mode"], row["mean"], row["median"],
                "%.1f-%.1f" % (row["min"], row["max"]), row["stddev_pct"], ch, ra, vs))
    if lat:
        print("\n%-36s %7s  %7s  %7s" % ("round trip latency (µs)", "p50", "p90", "p99"))
        for k, v in lat.items():
            print("  %-34s %7.1f  %7.1f  %7.1f" % (k, v[50], v[90], v[99]))
    if rates:
        print("\nmissing-page reads through the no-op fill hook (events/s): " +
              ", ".join("%s %.0f" % kv for kv in rates.items()))
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
        notes.append("seqread-cold skipped: dropping caches needs root")
    for n in notes:
        print("note: " + n)


if __name__ == "__main__":
    main()
