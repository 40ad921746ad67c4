#!/usr/bin/env python3
"""Lazy directories: time to the first ls and to a full find of a big tree.

    tests/bench/dirs.py [--dirs D] [--files F] [--runs N] [--wan DELAY_MS,RATE_MBS]
                        [--clients hsmfs,hsmfs-import,rclone,httpdirfs] [--s3]

An origin tree of D directories of F files each (default 1000 x 100:
100 000 files, 8 bytes each) under one root, served by a loopback nginx
(JSON autoindex for hsmfs-http, HTML for the peers), optionally through
wanproxy.py (a link with that delay each way and rate).  For each client,
each run on a fresh mount and a fresh cache:
  first-ls   seconds from starting the mount to the first ls of the root
             returning (hsmfs: an empty store mounted with origin=, the
             root listed on that ls; hsmfs-import: hsmfsctl import
             --listing of the whole tree, then the mount; hsmfs-fan:
             backend=fanotify, zero setup, every directory listed at
             mount (root, an ext4 image); rclone mount
             :http: --vfs-cache-mode full; httpdirfs --cache)
  find       seconds for a find of the whole tree after that (every
             directory listed, every entry stat'ed)
  listings   directory listings the origin served during the run (from
             nginx's access log): hsmfs lists each directory once; for
             hsmfs, also the listings after the first ls (ls-listed) and
             in all (listed) by its own count (user.hsmfs.stats), which
             is there for S3 too
  deep-stat  (hsmfs, zero setup) another fresh mount whose first request
             is a stat of one file two levels down: its time, and the
             directories listed and names looked up for it (PRE_LOOKUP:
             none listed)
With --s3 the same tree is a bucket of an s3rver on 127.0.0.1
(HSMFS_S3RVER; its store written directly, one object a file), listed
with ListObjectsV2 (hsmfs-http --aws-sigv4, hsmfsctl import --s3, rclone
mount :s3:); httpdirfs has no S3 and s3rver keeps no access log, so the
nginx listings column is left out there.
Medians and spread (min-max) over the runs; the clients alternate run
by run.  Needs: nginx; rclone and httpdirfs where installed (skipped
with a note otherwise).  HSMFS, HSMFSCTL, HSMFS_HTTP as for bench.py.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integ"))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import Mount, tmpdir  # noqa: E402
from bench import Lazy, WanProxy  # noqa: E402


def make_tree(dirs, files):
    root = tmpdir("hsmfs-bench-dirs-")
    os.chmod(root, 0o755)
    t = os.path.join(root, "tree")
    os.mkdir(t)
    for d in range(dirs):
        p = os.path.join(t, "d%04d" % d)
        os.mkdir(p)
        for f in range(files):
            with open(os.path.join(p, "f%03d" % f), "wb") as fh:
                fh.write(b"12345678")
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)
    return root


def hsmfs_stats(c):
    """hsmfs's own counters of client c's mount (None for the peers)."""
    if not c.kind.startswith("hsmfs"):
        return None
    if c.kind == "hsmfs-fan":  # no xattr reaches its daemon: its control socket
        return json.loads(subprocess.run([os.environ["HSMFSCTL"], "stats", "--json", c.mnt],
                                         check=True, stdout=subprocess.PIPE).stdout)
    return json.loads(os.getxattr(c.mnt, "user.hsmfs.stats"))


def find(mnt):
    n = 0
    for d, dirs, fs in os.walk(mnt):
        if d == mnt and ".hsmfs" in dirs:  # a fanotify mount shows the store's state
            dirs.remove(".hsmfs")
        for x in dirs + fs:
            os.lstat(os.path.join(d, x))
            n += 1
    return n


SIG = "aws:amz:us-east-1:s3"


class S3rver:
    """s3rver on 127.0.0.1 with bucket bkt holding the tree (D x F objects)."""

    def __init__(self, dirs, files):
        import socket
        self.dir = tmpdir("hsmfs-bench-s3-")
        b = os.path.join(self.dir, "data", "bkt")
        for d in range(dirs):
            os.makedirs(os.path.join(b, "d%04d" % d))
            for f in range(files):
                with open(os.path.join(b, "d%04d" % d, "f%03d._S3rver_object" % f), "wb") as fh:
                    fh.write(b"12345678")
        self.keys = os.path.join(self.dir, "keys")
        with open(self.keys, "w") as fh:
            fh.write("S3RVER\nS3RVER\n")
        os.chmod(self.keys, 0o600)
        self.port = harness.free_port()
        self.proc = subprocess.Popen([os.environ["HSMFS_S3RVER"], "-d",
                                      os.path.join(self.dir, "data"), "-a", "127.0.0.1",
                                      "-p", str(self.port), "--configure-bucket", "bkt",
                                      "--silent"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ,
                                              NODE_OPTIONS="--openssl-legacy-provider"))

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return self.proc.poll() is not None
        harness.wait_for(up, "s3rver listening")
        self.bucket = "http://127.0.0.1:%d/bkt" % self.port

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Client(Lazy):
    """A client mounted of the whole tree (close() as bench.py's Lazy)."""

    def __init__(self, kind, json_url, html_url, s3=None, img=None):
        self.kind = kind
        self.dir = tmpdir("hsmfs-bench-dc-")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        self.proc = self.mount = None
        http = os.environ["HSMFS_HTTP"]
        self.img = img
        if kind in ("hsmfs", "hsmfs-import", "hsmfs-fan"):
            store = os.path.join(self.dir, "store")
            if kind == "hsmfs-fan":
                # backend=fanotify: an ext4 store (img, made before the
                # clock starts); the whole tree listed at mount (no
                # directory event there)
                store = os.path.join(self.img[1], "store")
            os.mkdir(store)
            sig = ["--s3", "--aws-sigv4", SIG, "--aws-keys-file", s3.keys] if s3 else []
            if kind == "hsmfs-import":
                subprocess.run([os.environ["HSMFSCTL"], "import", "-s", store, "--listing",
                                s3.bucket + "/" if s3 else json_url] + sig, check=True,
                               stdout=subprocess.DEVNULL)
            hook = http + (" --aws-sigv4 %s --aws-keys-file %s" % (SIG, s3.keys) if s3 else "")
            self.mount = Mount(store=store, opts="%shook=%s,origin=%s" % (
                "backend=fanotify," if kind == "hsmfs-fan" else "", hook,
                s3.bucket if s3 else json_url))
            self.mount.start()
            self.mnt = self.mount.mnt
        elif kind == "rclone":
            exe = shutil.which("rclone")
            if not exe:
                raise RuntimeError("rclone is not installed")
            where = ([":s3:bkt", self.mnt, "--s3-provider", "Other", "--s3-endpoint",
                      "http://127.0.0.1:%d" % s3.port, "--s3-access-key-id", "S3RVER",
                      "--s3-secret-access-key", "S3RVER"] if s3 else
                     [":http:", self.mnt, "--http-url", html_url])
            self.proc = subprocess.Popen([exe, "mount"] + where + [ "--vfs-cache-mode", "full", "--cache-dir",
                                          os.path.join(self.dir, "cache"), "--read-only",
                                          "--config", "/dev/null"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         # rclone 1.60 refuses any AWS_CA_BUNDLE
                                         env={k: v for k, v in os.environ.items()
                                              if k != "AWS_CA_BUNDLE"})
        elif kind == "httpdirfs" and s3:
            raise RuntimeError("httpdirfs has no S3")
        elif kind == "httpdirfs":
            exe = shutil.which("httpdirfs")
            if not exe:
                raise RuntimeError("httpdirfs is not installed")
            os.mkdir(os.path.join(self.dir, "cache"))
            self.proc = subprocess.Popen([exe, "-f", "--cache", "--cache-location",
                                          os.path.join(self.dir, "cache"), "--no-range-check",
                                          html_url, self.mnt],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            raise RuntimeError("unknown client %s" % kind)
        if self.proc:
            harness.wait_for(lambda: harness.is_mounted(self.mnt) or self.proc.poll() is not None,
                             "%s mounted" % kind)
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %s" % (kind, self.proc.returncode))



    def close(self):
        super().close()
        if self.img:
            harness.fs_image_drop(*self.img)


def listings(ng):
    return sum(1 for (m, u, st, *_r) in ng.log() if u.endswith("/") and st == 200)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dirs", type=int, default=1000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wan")
    ap.add_argument("--clients", default="hsmfs,hsmfs-import,rclone,httpdirfs")
    ap.add_argument("--s3", action="store_true")
    a = ap.parse_args()
    t = time.perf_counter()
    root = make_tree(a.dirs, a.files)
    print("origin: %d directories of %d files (%.1f s to make)" %
          (a.dirs, a.files, time.perf_counter() - t), flush=True)
    # (no slash after the location: httpdirfs asks for /h first)
    ng = harness.Nginx(root, extra="location /j { alias %s/tree; autoindex on; "
                                   "autoindex_format json; } "
                                   "location /h { alias %s/tree; autoindex on; "
                                   "autoindex_format html; }" % (root, root)).start()
    s3 = S3rver(a.dirs, a.files) if a.s3 else None
    proxy = WanProxy(s3.port if s3 else ng.port,
                     *[float(x) for x in a.wan.split(",")]) if a.wan else None
    if s3 and proxy:
        s3.bucket, s3.port = "http://127.0.0.1:%d/bkt" % proxy.port, proxy.port
    origin = proxy or ng
    res, notes = {}, []
    kinds = a.clients.split(",")
    try:
        for r in range(a.runs):
            for k in kinds:
                if k in notes:
                    continue
                before = listings(ng)
                img = None
                if k == "hsmfs-fan":
                    if os.geteuid() != 0:
                        notes.append(k)
                        print("note: %s skipped: backend=fanotify needs root" % k, flush=True)
                        continue
                    img = harness.fs_image(8 << 30)
                t0 = time.perf_counter()
                try:
                    c = Client(k, origin.url("j/"), origin.url("h/"), s3, img)
                except RuntimeError as e:
                    if img:
                        harness.fs_image_drop(*img)
                    notes.append(k)
                    print("note: %s skipped: %s" % (k, e), flush=True)
                    continue
                try:
                    names = [x for x in os.listdir(c.mnt) if x != ".hsmfs"]
                    t1 = time.perf_counter()
                    st1 = hsmfs_stats(c)
                    n = find(c.mnt)
                    t2 = time.perf_counter()
                    st2 = hsmfs_stats(c)
                finally:
                    c.close()
                if len(names) != a.dirs or n != a.dirs * (a.files + 1):
                    print("note: %s saw %d names in the root, %d in all" % (k, len(names), n))
                res.setdefault(k, {}).setdefault("first-ls", []).append(t1 - t0)
                res.setdefault(k, {}).setdefault("find", []).append(t2 - t1)
                res.setdefault(k, {}).setdefault("listings", []).append(listings(ng) - before)
                own = ""
                if st1:
                    res[k].setdefault("ls-listed", []).append(st1["listed"])
                    res[k].setdefault("listed", []).append(st2["listed"])
                    own = "  hsmfs listed %d after the ls, %d in all" % (st1["listed"],
                                                                        st2["listed"])
                print("run %d %-13s first-ls %7.3f s  find %7.3f s  listings %d%s" %
                      (r, k, t1 - t0, t2 - t1, listings(ng) - before, own), flush=True)
                if k == "hsmfs":
                    c = Client(k, origin.url("j/"), origin.url("h/"), s3)
                    try:
                        deep = os.path.join(c.mnt, "d%04d" % (a.dirs // 2),
                                            "f%03d" % (a.files // 2))
                        t3 = time.perf_counter()
                        os.stat(deep)
                        t4 = time.perf_counter()
                        st3 = hsmfs_stats(c)
                    finally:
                        c.close()
                    res[k].setdefault("deep-stat", []).append(t4 - t3)
                    print("run %d %-13s deep stat %.3f s: %d listed, %d looked up" %
                          (r, k, t4 - t3, st3["listed"], st3["pre_lookup"]), flush=True)
    finally:
        if proxy:
            proxy.stop()
        if s3:
            s3.stop()
        ng.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("\n%-13s %22s %22s %9s" % ("client", "first ls, s (min-max)", "find, s (min-max)",
                                    "listings"))
    for k, v in res.items():
        print("%-13s %8.3f (%.3f-%.3f) %8.3f (%.3f-%.3f) %9d" % (
            k, statistics.median(v["first-ls"]), min(v["first-ls"]), max(v["first-ls"]),
            statistics.median(v["find"]), min(v["find"]), max(v["find"]),
            statistics.median(v["listings"])) if not a.s3 else
              "%-13s %8.3f (%.3f-%.3f) %8.3f (%.3f-%.3f) %9s" % (
            k, statistics.median(v["first-ls"]), min(v["first-ls"]), max(v["first-ls"]),
            statistics.median(v["find"]), min(v["find"]), max(v["find"]), "-"))
    for k, v in res.items():
        if "listed" in v:
            print("%s: listed by its own count: %s after the first ls, %s in all (per run)" %
                  (k, v["ls-listed"], v["listed"]))
        if "deep-stat" in v:
            print("%s: a stat two levels down on a fresh mount: %.3f s median (%.3f-%.3f)" %
                  (k, statistics.median(v["deep-stat"]), min(v["deep-stat"]),
                   max(v["deep-stat"])))


if __name__ == "__main__":
    main()
