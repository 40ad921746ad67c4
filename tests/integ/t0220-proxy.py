#!/usr/bin/env python3
"""hsmfs-http through a squid proxy on loopback: reads work through it,
and a second mount behind the same proxy is served from the proxy's
cache: no request reaches the origin.  Skipped where squid is missing.

The origin file's mtime is set an hour back.  A Last-Modified date is a
strong validator only when it is at least a second older than the
response (RFC 9110, 8.8.2.2); a file written a moment before it is
served has a weak one, and a cache must then not answer an If-Range
carrying it from its copy.  That, not squid, was why the second mount
sometimes reached the origin.
"""
import email.utils
import os
import shutil
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, Mount, Nginx, diag, eq, free_port, import_manifest, is_root, main,
                     ok, run, skip, tmpdir, wait_for)  # noqa: E402

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")
SQUID = shutil.which("squid") or "/usr/sbin/squid"

CONF = """
http_port 127.0.0.1:%(port)d
pid_filename %(d)s/squid.pid
access_log stdio:%(d)s/access.log
cache_log %(d)s/cache.log
cache_store_log none
coredump_dir %(d)s
cache_mem 128 MB
maximum_object_size_in_memory 32 MB
maximum_object_size 32 MB
range_offset_limit -1
quick_abort_min -1 KB
collapsed_forwarding on
http_access allow localhost
http_access deny all
refresh_pattern . 60 50%% 600
shutdown_lifetime 0 seconds
netdb_filename none
%(user)s
"""


def test():
    if not os.access(SQUID, os.X_OK):
        skip("squid proxy", "squid is not installed")
        return
    d = tmpdir("hsmfs-squid-")
    os.chmod(d, 0o777)  # squid started as root works as 'nobody'
    squid = None
    for attempt in range(3):  # a port picked free may be taken meanwhile
        port = free_port()
        with open(os.path.join(d, "squid.conf"), "w") as f:
            f.write(CONF % {"port": port, "d": d,
                            "user": "cache_effective_user nobody" if is_root() else ""})
        # its own service name: squid instances must not share IPC names
        squid = subprocess.Popen([SQUID, "-N", "-n", "hsmfs%d" % port,
                                  "-f", os.path.join(d, "squid.conf")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            if squid.poll() is not None:
                return "exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return "up"
            except OSError:
                return None
        if wait_for(up, "squid listening") == "up":
            break
        diag("squid exited %s:\n%s" % (squid.returncode, open(os.path.join(d, "cache.log")).read()[-1500:]
                                       if os.path.exists(os.path.join(d, "cache.log")) else ""))
    else:
        ok(False, "squid starts")
        return
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    data = os.urandom(5 * 1024 * 1024 + 3)
    with open(os.path.join(root, "f.bin"), "wb") as f:
        f.write(data)
    old = os.stat(os.path.join(root, "f.bin")).st_mtime - 3600
    os.utime(os.path.join(root, "f.bin"), (old, old))
    lastmod = email.utils.formatdate(os.stat(os.path.join(root, "f.bin")).st_mtime, usegmt=True)
    try:
        with Nginx(root) as ng:
            hook = "hook=%s --proxy http://127.0.0.1:%d" % (HTTP, port)
            entry = [{"path": "f.bin", "size": len(data), "url": ng.url("f.bin"),
                      "version": lastmod}]
            with Mount(opts=hook) as m:
                eq(import_manifest(m.mnt, entry)[0], 0, "import")
                with open(m.path("f.bin"), "rb") as f:
                    eq(f.read() == data, True, "read through the proxy")
            # hsmfs-http always asks for ranges; squid fetches whole objects
            full = wait_for(lambda: [l for l in ng.log() if l[2] == 200 and l[3] == len(data)],
                            "squid's whole-object fetch in nginx's log")
            ok(full and all(l[4] == "-" or not l[4].startswith("bytes=") for l in full),
               "the requests went through squid (whole-object fetches, no Range)")
            # squid decides itself whether it keeps an object: ask it first
            proxy = "http://127.0.0.1:%d" % port
            for _ in range(2):
                rc, out = run(["curl", "-s", "-D", "-", "-o", "/dev/null", "-x", proxy,
                               ng.url("f.bin")])
            cached = "HIT" in "".join(l for l in out.splitlines()
                                      if l.lower().startswith("x-cache:"))
            n = len(ng.log())
            with Mount(opts=hook) as m:
                eq(import_manifest(m.mnt, entry)[0], 0, "import into a second mount")
                with open(m.path("f.bin"), "rb") as f:
                    eq(f.read() == data, True, "second mount reads through the proxy")
            ok(cached, "squid kept the object (curl through it gets a HIT)")
            extra = ng.log()[n:]
            eq(extra, [], "the second mount was served from squid's cache: "
               "no request reached the origin")
    finally:
        squid.terminate()
        squid.wait()
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(test)
