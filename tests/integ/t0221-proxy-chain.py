#!/usr/bin/env python3
"""hsmfs-http's chain of proxies (--proxy 'P1;P2', '...;DIRECT'): a read
never fails while a member of the chain works.

 - The first proxy is not there at all: reads, listings and lookups go
   through the second at once, and the log says the first failed once.
 - The first proxy is killed in the middle of a big sequential read: the
   read finishes right, through the second proxy, or through the origin
   itself with DIRECT.  (Before: --proxy took one URL, and every fill
   failed with EIO once it stopped.)
 - With no member left the read fails (EIO), as without a chain.

Counts come from the proxies' and the origin's own logs.  Skipped where
squid is missing.
"""
import errno
import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Mount, Nginx, Squid, diag, eq, errno_of,  # noqa: E402
                     free_port, import_manifest, main, ok, run, skip, tmpdir, wait_for,
                     write_tree)

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")
MiB = 1 << 20


def origin_tree():
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    files = {"big.bin": os.urandom(24 * MiB), "d/small.txt": b"small file\n" * 100}
    write_tree(root, files, age=3600)
    return root, files


def read_in_thread(path, out):
    def run():
        t0 = time.monotonic()
        try:
            with open(path, "rb") as f:
                out["data"] = f.read()
        except OSError as e:
            out["err"] = e
        out["took"] = time.monotonic() - t0
    t = threading.Thread(target=run)
    t.start()
    return t


def dead_port(*taken):
    """A port nothing listens on, picked after the servers of the test
    took theirs (picked before, one of them could take it)."""
    while True:
        p = free_port()
        if p not in taken:
            return "http://127.0.0.1:%d" % p


def test_dead_first():
    root, files = origin_tree()
    with Nginx(root) as ng, Squid() as sq:
        dead = dead_port(ng.port, sq.port)
        hook = "hook=%s --proxy '%s;%s',origin=%s" % (HTTP, dead, sq.url(), ng.url())
        with Mount(opts=hook) as m:
            eq(sorted(os.listdir(m.mnt)), ["big.bin", "d"],
               "the root listed through the second proxy")
            with open(m.path("d/small.txt"), "rb") as f:
                eq(f.read(), files["d/small.txt"], "a lookup and a read through it")
            with open(m.path("big.bin"), "rb") as f:
                eq(f.read() == files["big.bin"], True, "a big file read through it")
            ok(m.logged("proxy %s failed" % dead), "the log says the first proxy failed")
            eq(m.output().count("proxy %s failed" % dead), 1, "once, not at each request")
            ok(len(sq.log()) >= 3, "the second proxy served them (%d requests)" % len(sq.log()))
            # what the chain says of itself: hsmfsctl stats, --json, --prometheus, doctor
            want = 'proxy_up{proxy="%s"} 0' % dead

            def said():
                # sent at most once a second: until they count the reads above
                rc, out = run([HSMFSCTL, "stats", m.mnt])
                n = [int(l.split()[-1]) for l in out.splitlines()
                     if 'proxy_requests_total{proxy="%s"' % sq.url() in l]
                return rc == 0 and want.replace("} 0", "}") in out and n and n[0] >= 3 and out
            out = wait_for(said, "the chain's counters in hsmfsctl stats")
            line = [l for l in out.splitlines() if 'proxy_up{proxy="%s"}' % dead in l]
            ok(line and line[0].startswith("hsmfs-http ") and line[0].split()[-1] == "0",
               "stats: the first proxy is down (%s)" % line)
            line = [l for l in out.splitlines()
                    if 'proxy_requests_total{proxy="%s"' % sq.url() in l]
            ok(line and int(line[0].split()[-1]) >= 3, "stats: the second's requests (%s)" % line)
            rc, out = run([HSMFSCTL, "stats", "--json", m.mnt])
            js = json.loads(out)
            ok(any(c["counter"].startswith("proxy_failures_total") and c["value"] >= 1
                   for c in js.get("hook_counters", [])), "--json: the first proxy's failure")
            rc, out = run([HSMFSCTL, "stats", "--prometheus", m.mnt])
            ok(re.search(r'^hsmfs_hook_proxy_up\{mountpoint="[^"]*",hook="hsmfs-http",pid="\d+",'
                         r'proxy="%s"\} 0$' % re.escape(dead), out, re.M) is not None and
               "# TYPE hsmfs_hook_proxy_requests_total counter" in out,
               "--prometheus: a family per counter, labelled with the hook and the proxy")
            rc, out = run([HSMFSCTL, "doctor", m.mnt])
            ok("proxy %s failed and is skipped" % dead in out and "1 of 2 proxies up" in out,
               "doctor says the first proxy is skipped, 1 of 2 up")


def kill_mid_read(second, stop=False):
    """The first squid killed in the middle of a read of 24 MiB from an
    origin at 8 MiB/s; second: 'squid' or 'DIRECT'.  stop: stopped
    (SIGSTOP: it holds its connections and says nothing), with the
    mount's default timeout=."""
    root, files = origin_tree()
    with Nginx(root, extra="limit_rate 8m;") as ng, Squid() as sq1, Squid() as sq2:
        chain = "%s;%s" % (sq1.url(), sq2.url() if second == "squid" else "DIRECT")
        hook = "hook=%s --proxy '%s',origin=%s" % (HTTP, chain, ng.url())
        with Mount(opts=("" if stop else "timeout=60,") + hook) as m:
            eq(import_manifest(m.mnt, [{"path": "big.bin", "size": len(files["big.bin"])}])[0], 0,
               "import")
            out = {}
            t = read_in_thread(m.path("big.bin"), out)
            wait_for(lambda: int(os.getxattr(m.path("big.bin"), "user.hsmfs.present")) >= 2 * MiB,
                     "the read under way through the first proxy")
            t_kill = time.monotonic()
            if stop:
                os.kill(sq1.proc.pid, signal.SIGSTOP)
            else:
                sq1.kill()
            t.join(120)
            if stop:
                os.kill(sq1.proc.pid, signal.SIGCONT)
            eq(out.get("err"), None, "no read failed (%s after the %s)" %
               (second, "stop" if stop else "kill"))
            eq(out.get("data") == files["big.bin"], True, "every byte right")
            after = time.monotonic() - t_kill
            diag("read took %.2f s, %.2f s of it after the kill" % (out.get("took", 0), after))
            ok(after < 25, "the chain went on well within the mount's timeout (%.1f s)" % after)
            ok(m.logged("proxy %s failed" % sq1.url()), "the log says the first proxy failed")
            if second == "squid":
                ok(len(sq2.log()) >= 1, "the rest came through the second proxy (%d requests)" %
                   len(sq2.log()))
            else:
                direct = [r for r in ng.log() if r[4].startswith("bytes=")]
                ok(direct, "the rest came from the origin itself (%d ranged requests)" %
                   len(direct))


def test_kill_second_squid():
    kill_mid_read("squid")


def test_kill_direct():
    kill_mid_read("DIRECT")


def test_stop_second_squid():
    """A proxy that hangs: its requests fail after --proxy-timeout (10 s)
    and go on through the next member (before: each waited the low-speed
    time, 30 s, and the read took 33 s after the stop)."""
    kill_mid_read("squid", stop=True)


def test_none_left():
    root, files = origin_tree()
    with Nginx(root) as ng:
        dead1 = dead_port(ng.port)
        dead2 = dead_port(ng.port, int(dead1.rsplit(":", 1)[1]))
        # no origin= (the hook would refuse the mount it cannot list)
        hook = "hook=%s --proxy '%s|%s' --retries 1" % (HTTP, dead1, dead2)
        with Mount(opts="timeout=20," + hook) as m:
            eq(import_manifest(m.mnt, [{"path": "big.bin", "size": len(files["big.bin"]),
                                        "url": ng.url("big.bin")}])[0], 0, "import")
            eq(errno_of(lambda: open(m.path("big.bin"), "rb").read(4096)), errno.EIO,
               "every member down: the read fails with EIO")
            eq(ng.log(), [], "and the origin was never asked (no DIRECT in the chain)")


def test():
    if not Squid.available():
        skip("proxy chains", "squid is not installed")
        return
    test_dead_first()
    test_kill_second_squid()
    test_kill_direct()
    test_stop_second_squid()
    test_none_left()


if __name__ == "__main__":
    main(test)
