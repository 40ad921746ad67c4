#!/usr/bin/env python3
"""On demand (root, minutes to hours): soak tests from real work, issue
#50 item 4, each with the daemon's footprint against the limits.

  cache-small  nginx serves TREE (default /usr/share) as a zero-setup
               mount under cache_max of 1% of its bytes (at least 4M);
               every regular file is read twice and checked (sha256).
  git          git clone of this repository onto a write-back mount
               (nginx WebDAV origin), a build there (meson + ninja, or a
               few C files at small scales), git gc, hsmfsctl sync.
  sqlite       two writer processes, K transactions each, on one
               database on a write-back mount, journal_mode delete and wal.
  tar          tar x of 24 000 generated small files onto a write-back
               mount, hsmfsctl sync, the origin compared with the source.

A sampler polls /proc/PID of the daemon every 100 ms (open descriptors,
VmRSS/VmHWM, utime+stime, RLIMIT_NOFILE) and the store's allocation
(statvfs of its loop-mounted ext4 image) every second.  One line a
workload; exit status 1 on wrong bytes, failed transactions, errors or a
failed sync.

    python3 tests/soak/workloads.py BUILD [--only NAME,...] [--scale S]

--scale 0.05 shrinks every size for a quick trial (git builds with
meson + ninja from --scale 0.5 up, else compiles a few C files).

First found: git gc on a write-back mount left hsmfsctl sync failing
(EIO, "dirty inode N is not at '.git/objects/info/packs'"): a name made
by link() whose first name is then removed, twice over (fixed; t0450
test_link_then_unlink).
"""
import argparse
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integ"))
import harness  # noqa: E402
from harness import Mount, Nginx, fs_image, fs_image_drop, tmpdir  # noqa: E402


class Sampler(threading.Thread):
    """Peaks of a daemon's descriptors and RSS, its CPU seconds, and the
    peak allocation of the filesystem holding its store."""

    def __init__(self, pid, fsroot):
        super().__init__(daemon=True)
        self.pid, self.fsroot = pid, fsroot
        self.fds = self.rss = self.hwm = self.cpu = 0
        self.store = 0
        self.base = self.used()
        self.soft = self.hard = None
        self.stopping = threading.Event()
        try:
            with open("/proc/%d/limits" % pid) as f:
                for line in f:
                    if line.startswith("Max open files"):
                        self.soft, self.hard = line.split()[3:5]
        except OSError:
            pass

    def used(self):
        st = os.statvfs(self.fsroot)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def poll(self):
        p = "/proc/%d/" % self.pid
        try:
            self.fds = max(self.fds, len(os.listdir(p + "fd")))
            with open(p + "status") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k == "VmRSS":
                        self.rss = max(self.rss, int(v.split()[0]) * 1024)
                    elif k == "VmHWM":
                        self.hwm = max(self.hwm, int(v.split()[0]) * 1024)
            with open(p + "stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            self.cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass

    def run(self):
        n = 0
        while not self.stopping.is_set():
            self.poll()
            if n % 10 == 0:
                self.store = max(self.store, self.used() - self.base)
            n += 1
            self.stopping.wait(0.1)

    def stop(self):
        self.poll()
        self.store = max(self.store, self.used() - self.base)
        self.stopping.set()
        self.join()


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def files_of(root):
    out = []
    for d, _, fs in os.walk(root):
        for n in fs:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(os.path.relpath(p, root))
    return sorted(out)


def run(cmd, errors, what, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    if r.returncode:
        errors.append("%s: exit %d: %s" % (what, r.returncode,
                                            r.stdout.decode(errors="replace")[-600:]))
    return r.returncode == 0


def sync(m, errors):
    if run([harness.HSMFSCTL, "sync", m.mnt], errors, "hsmfsctl sync"):
        return True
    try:  # what the daemon said
        with open(m.log, errors="replace") as f:
            errors.extend("  log: " + line.rstrip() for line in f.readlines()[-15:])
    except OSError:
        pass
    return False


class Env:
    """What a workload gets: the build, the scale, a store on an ext4 image."""

    def __init__(self, build, scale):
        self.build, self.scale = build, scale
        self.http = os.path.join(build, "hsmfs-http")

    def n(self, full, least=1):
        return max(least, int(full * self.scale))


def cache_small(env, mount, errors):
    root = os.environ.get("TREE", "/usr/share")
    files = files_of(root)
    if env.scale < 1:
        files = files[:env.n(len(files), 50)]
    size = sum(os.path.getsize(os.path.join(root, p)) for p in files)
    cap = max(4 << 20, size // 100)
    want = {}
    with Nginx(root) as ng:
        with mount("hook=%s,origin=%s,cache_max=%d" % (env.http, ng.url(), cap)) as m:
            for rnd in (1, 2):
                for p in files:
                    try:
                        if p not in want:
                            want[p] = sha(os.path.join(root, p))
                        if sha(m.path(p)) != want[p]:
                            errors.append("round %d: %s: wrong bytes" % (rnd, p))
                    except OSError as e:
                        errors.append("round %d: %s: %s" % (rnd, p, e))
    return "%d files, %.1f MiB, cache_max %.1f MiB" % (len(files), size / 2**20, cap / 2**20)


def dav_mount(env, mount, ng):
    return mount("hook=%s,origin=%s,archive_after=1" % (env.http, ng.url("o/")))


def git(env, mount, errors):
    import archiving
    root = archiving.dav_root()
    src = os.path.abspath(os.path.join(HERE, "..", ".."))
    with Nginx(root, extra=archiving.DAV) as ng, dav_mount(env, mount, ng) as m:
        w = m.path("w")
        if not run(["git", "clone", "-q", src, w], errors, "git clone"):
            return "clone failed"
        if env.scale >= 0.5:
            # libfuse's tarball as this checkout has it (no download)
            cache = os.path.join(src, "subprojects", "packagecache")
            if os.path.isdir(cache):
                shutil.copytree(cache, os.path.join(w, "subprojects", "packagecache"),
                                dirs_exist_ok=True)
            ok = run(["meson", "setup", "b"], errors, "meson setup", cwd=w) and \
                run(["ninja", "-C", "b"], errors, "ninja", cwd=w)
            what = "meson + ninja"
        else:
            cs = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(w, "lib"))
                        for f in fs if f.endswith(".c"))[:env.n(40, 3)]
            inc = ["-I" + os.path.join(w, "include"), "-I" + os.path.join(w, "lib")]
            cc = ["cc", "-c", "-w", "-D_GNU_SOURCE"] + inc
            ok = all(run(cc + [c, "-o", c[:-2] + ".o"], errors, "cc " + os.path.basename(c))
                     for c in cs)
            what = "cc of %d files" % len(cs)
        run(["git", "gc", "-q"], errors, "git gc", cwd=w)
        run(["git", "fsck", "--no-progress"], errors, "git fsck", cwd=w)
        sync(m, errors)
    shutil.rmtree(root, ignore_errors=True)
    return "clone, %s%s, gc, sync" % (what, "" if ok else " (failed)")


def writer(db, mode, k, tag, out):
    done = 0
    err = []
    try:
        c = sqlite3.connect(db, timeout=60)
        c.execute("PRAGMA journal_mode=%s" % mode)
        for i in range(k):
            try:
                with c:
                    c.execute("INSERT INTO t VALUES (?, ?, ?)", (tag, i, os.urandom(200)))
                done += 1
            except sqlite3.Error as e:
                err.append("%s %d: %s" % (tag, i, e))
        c.close()
    except sqlite3.Error as e:
        err.append("%s: %s" % (tag, e))
    out[tag] = (done, err)


def sqlite(env, mount, errors):
    import archiving
    from multiprocessing import Manager, Process
    root = archiving.dav_root()
    k = env.n(2000, 20)
    notes = []
    with Nginx(root, extra=archiving.DAV) as ng, dav_mount(env, mount, ng) as m, \
            Manager() as mgr:
        for mode in ("delete", "wal"):
            db = m.path("db-" + mode)
            c = sqlite3.connect(db)
            c.execute("PRAGMA journal_mode=%s" % mode)
            c.execute("CREATE TABLE t (w TEXT, i INTEGER, b BLOB)")
            c.commit()
            c.close()
            out = mgr.dict()
            ps = [Process(target=writer, args=(db, mode, k, t, out)) for t in ("a", "b")]
            for p in ps:
                p.start()
            for p in ps:
                p.join()
            done = 0
            for t in ("a", "b"):
                d, err = out.get(t, (0, ["%s: no result" % t]))
                done += d
                errors.extend("%s: %s" % (mode, e) for e in err[:5])
            c = sqlite3.connect(db)
            rows = c.execute("SELECT count(*) FROM t").fetchone()[0]
            check = c.execute("PRAGMA integrity_check").fetchone()[0]
            c.close()
            if done != 2 * k or rows != done:
                errors.append("%s: %d of %d committed, %d rows" % (mode, done, 2 * k, rows))
            if check != "ok":
                errors.append("%s: integrity_check: %s" % (mode, check))
            notes.append("%s %d/%d" % (mode, done, 2 * k))
        sync(m, errors)
    shutil.rmtree(root, ignore_errors=True)
    return "committed " + ", ".join(notes)


def tar(env, mount, errors):
    import archiving
    n = env.n(24000, 100)
    src = tmpdir("hsmfs-tar-")
    tree = os.path.join(src, "t")
    for i in range(n):
        d = os.path.join(tree, "d%03d" % (i // 200))
        if i % 200 == 0:
            os.makedirs(d)
        with open(os.path.join(d, "f%05d" % i), "wb") as f:
            f.write(os.urandom(i % 4096 + 1))
    ball = os.path.join(src, "t.tar")
    with tarfile.open(ball, "w") as t:
        t.add(tree, arcname="t")
    root = archiving.dav_root()
    with Nginx(root, extra=archiving.DAV) as ng, dav_mount(env, mount, ng) as m:
        run(["tar", "xf", ball, "-C", m.mnt], errors, "tar x")
        sync(m, errors)
        diff = archiving.differences(archiving.tree(os.path.join(root, "o", "t")),
                                     archiving.tree(tree), "origin", "source")
        errors.extend(diff[:20])
        if len(diff) > 20:
            errors.append("... %d differences in all" % len(diff))
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    return "%d files" % n


WORKLOADS = {"cache-small": cache_small, "git": git, "sqlite": sqlite, "tar": tar}


def mib(b):
    return "%.1f" % (b / 2**20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit(__doc__)
    build = os.path.abspath(a.build)
    harness.HSMFSCTL = os.path.join(build, "hsmfsctl")
    os.environ["HSMFS_HTTP"] = os.path.join(build, "hsmfs-http")
    import archiving
    archiving.HSMFSCTL = harness.HSMFSCTL
    env = Env(build, a.scale)
    names = a.only.split(",")
    bad = [n for n in names if n not in WORKLOADS]
    if bad:
        sys.exit("unknown workload %s (of %s)" % (", ".join(bad), ", ".join(WORKLOADS)))
    print("%-12s %8s %-7s %14s %9s %7s %10s  %s" % (
        "workload", "seconds", "result", "fds/soft", "RSS MiB", "CPU s", "store MiB", "what"),
        flush=True)
    failed = False
    limits = set()
    for name in names:
        errors = []
        samplers = []
        img_size = max(1 << 30, int(8 * (1 << 30) * a.scale))
        d, img = fs_image(img_size)

        class M(Mount):
            def __enter__(self):
                r = super().__enter__()
                s = Sampler(self.daemon_pid(), img)
                samplers.append(s)
                s.start()
                return r

            def __exit__(self, *exc):
                for s in samplers:
                    if not s.stopping.is_set():
                        s.stop()
                return super().__exit__(*exc)

        def mount(opts):
            return M(store=os.path.join(img, "store"), exe=os.path.join(build, "hsmfs"),
                     opts=opts)

        t = time.monotonic()
        try:
            what = WORKLOADS[name](env, mount, errors)
        except Exception as e:  # a workload that breaks is a failed workload
            errors.append("%s: %r" % (name, e))
            what = "raised"
        finally:
            for s in samplers:
                if not s.stopping.is_set():
                    s.stop()
            fs_image_drop(d, img)
        took = time.monotonic() - t
        s = samplers[0] if samplers else Sampler(os.getpid(), "/")
        limits.add("RLIMIT_NOFILE %s/%s" % (s.soft, s.hard))
        print("%-12s %8.1f %-7s %14s %9s %7.1f %10s  %s" % (
            name, took, "errors" if errors else "ok", "%d/%s" % (s.fds, s.soft),
            mib(max(s.rss, s.hwm)), s.cpu, mib(s.store), what), flush=True)
        for e in errors[:20]:
            print("  " + e, flush=True)
        failed = failed or bool(errors)
    print("limits: %s (of the daemon)" % ", ".join(sorted(limits)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
