#!/usr/bin/env python3
"""Write-back to the origin, measured (on demand; not part of the suite).

    HSMFS=... HSMFSCTL=... HSMFS_HTTP=... python3 tests/bench/archive.py
        [--runs 3] [--wan 10,120] [--big-mib 1024] [--small 200] [--small-kib 32]

The origin is a real nginx with its WebDAV module on 127.0.0.1, behind
wanproxy.py (ours: DELAY ms each way, RATE MB/s shared; default 10 ms
and 120 MB/s).  Two workloads: one big file, and many small files in a
directory.  Each is written into a fresh zero-setup hsmfs mount
(origin=, hook=hsmfs-http); the clock starts at the last close and stops
when `hsmfsctl sync` returns (every byte at the origin and recorded
clean), so it measures the archive alone: snapshot, upload, commit.
Against it, in the same run and through the same link: curl uploading
the same files one at a time (one process, one kept-alive connection,
PUT after PUT), and rclone mount of the same origin as a WebDAV remote
with --vfs-cache-mode writes, timed from the last close until every
object is at the origin (skipped when rclone, or nginx's dav-ext module
for the PROPFIND it lists with, libnginx-mod-http-dav-ext, is not
installed).  After
each run every object at the origin is compared with what was written.

Reported: seconds per run (median, min-max), the big file's rate against
the link's, and hsmfs's time as a ratio of curl's and rclone's.
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
from harness import Mount, Nginx, WanProxy, run, tmpdir, wait_for  # noqa: E402

HSMFSCTL = os.environ.get("HSMFSCTL", "hsmfsctl")
HTTP = os.environ.get("HSMFS_HTTP", "hsmfs-http")
DAV = ("dav_methods PUT DELETE MKCOL MOVE; create_full_put_path on; "
       "dav_access user:rw group:rw all:r; client_max_body_size 0;")
# rclone's WebDAV remote lists with PROPFIND: Debian's dav-ext module
DAV_EXT_SO = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so"


def files_of(kind, args):
    """[(relative path, bytes)] of a workload."""
    if kind == "big":
        return [("big.bin", os.urandom(args.big_mib << 20))]
    return [("small/f%03d" % i, os.urandom(args.small_kib << 10)) for i in range(args.small)]


def check_origin(root, files):
    for p, data in files:
        with open(os.path.join(root, p), "rb") as f:
            if f.read() != data:
                raise RuntimeError("origin's %s differs from what was written" % p)


def fresh_origin():
    root = tmpdir("hsmfs-bench-origin-")
    os.chmod(root, 0o777)
    os.mkdir(os.path.join(root, "o"))
    os.chmod(os.path.join(root, "o"), 0o777)
    return root


def run_hsmfs(px, root, files):
    store = tmpdir("hsmfs-bench-store-")
    with Mount(store=store, opts="hook=%s --connections 8,origin=%s" % (HTTP, px.url("o/"))) as m:
        os.listdir(m.mnt)  # listed (empty) before the clock
        for p, data in files:
            d = os.path.dirname(m.path(p))
            os.makedirs(d, exist_ok=True)
            with open(m.path(p), "wb") as f:
                f.write(data)
        t0 = time.monotonic()
        rc, out = run([HSMFSCTL, "sync", m.mnt])
        took = time.monotonic() - t0
        if rc:
            raise RuntimeError("hsmfsctl sync failed: %s" % out)
    shutil.rmtree(store, ignore_errors=True)
    check_origin(os.path.join(root, "o"), files)
    return took


def run_curl(px, root, files):
    src = tmpdir("hsmfs-bench-src-")
    cfg = os.path.join(src, "curl.cfg")
    with open(cfg, "w") as c:
        for i, (p, data) in enumerate(files):
            local = os.path.join(src, "%d" % i)
            with open(local, "wb") as f:
                f.write(data)
            c.write('upload-file = "%s"\nurl = "%s"\noutput = "/dev/null"\n' %
                    (local, px.url("o/" + p)))
    t0 = time.monotonic()
    rc, out = run(["curl", "-s", "-f", "-K", cfg])
    took = time.monotonic() - t0
    shutil.rmtree(src, ignore_errors=True)
    if rc:
        raise RuntimeError("curl failed: %s" % out)
    check_origin(os.path.join(root, "o"), files)
    return took


def run_rclone(px, root, files):
    exe = shutil.which("rclone")
    if not exe or not os.path.exists(DAV_EXT_SO):
        return None  # rclone, or the PROPFIND it lists with, is not installed
    mnt, cache = tmpdir("hsmfs-bench-rclone-"), tmpdir("hsmfs-bench-rcache-")
    env = dict(os.environ, RCLONE_CONFIG_O_TYPE="webdav", RCLONE_CONFIG_O_URL=px.url("o/"),
               RCLONE_CONFIG_O_VENDOR="other")
    proc = subprocess.Popen([exe, "mount", "o:", mnt, "--vfs-cache-mode", "writes",
                             "--cache-dir", cache, "--vfs-write-back", "0s"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: os.path.ismount(mnt), "rclone mounted")
        for p, data in files:
            os.makedirs(os.path.dirname(os.path.join(mnt, p)), exist_ok=True)
            with open(os.path.join(mnt, p), "wb") as f:
                f.write(data)
        t0 = time.monotonic()
        origin = os.path.join(root, "o")

        def there():
            try:
                check_origin(origin, files)
                return True
            except (OSError, RuntimeError):
                return False
        wait_for(there, "rclone uploaded everything", deadline=3600)
        return time.monotonic() - t0
    finally:
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
        proc.wait()
        shutil.rmtree(cache, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wan", default="10,120", help="DELAY_MS,RATE_MBS of wanproxy.py")
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--small-kib", type=int, default=32)
    ap.add_argument("--workloads", default="big,small")
    args = ap.parse_args()
    delay, rate = (float(x) for x in args.wan.split(","))
    results = {}
    for kind in args.workloads.split(","):
        files = files_of(kind, args)
        for r in range(args.runs):
            for tool, fn in (("hsmfs", run_hsmfs), ("curl", run_curl), ("rclone", run_rclone)):
                root = fresh_origin()
                ext = os.path.exists(DAV_EXT_SO)
                ng = Nginx(root, extra=DAV + (" dav_ext_methods PROPFIND OPTIONS;" if ext else ""),
                           main="load_module %s;\n" % DAV_EXT_SO if ext else "").start()
                px = WanProxy(ng.port, delay, rate)
                try:
                    t = fn(px, root, files)
                finally:
                    px.stop()
                    ng.stop()
                    shutil.rmtree(root, ignore_errors=True)
                if t is not None:
                    results.setdefault((kind, tool), []).append(t)
                print("# %s %s run %d: %s" % (kind, tool, r + 1,
                                              "%.2f s" % t if t is not None else "skipped"),
                      flush=True)
    print("\nworkload  tool     median s   min-max s        vs hsmfs")
    for (kind, tool), ts in sorted(results.items()):
        med = statistics.median(ts)
        h = statistics.median(results[(kind, "hsmfs")])
        print("%-9s %-8s %8.2f   %6.2f-%-8.2f %s" % (kind, tool, med, min(ts), max(ts),
                                                     "" if tool == "hsmfs" else
                                                     "hsmfs/%s = %.2f" % (tool, h / med)))
    if ("big", "hsmfs") in results:
        mb = args.big_mib * 1.048576
        print("\nbig file: %.1f MB/s by hsmfs, %.2f of the link's %g MB/s" %
              (mb / statistics.median(results[("big", "hsmfs")]),
               mb / statistics.median(results[("big", "hsmfs")]) / rate, rate))


if __name__ == "__main__":
    main()
