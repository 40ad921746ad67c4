#!/usr/bin/env python3
"""Two mounts of one nginx origin write the same file (#49 items 3, 4).

Each mount reaches nginx through a proxy of the test's own (127.0.0.1),
which can hold a request until released and, with enforce, honours
If-Match / If-None-Match on PUT against the object's current ETag the
way S3 does (the check and the PUT under one lock).

1. Not honoured (plain nginx): A's PUT lands, then B's lands before A
   reads the object back.  A must not take B's version as its own: a
   conflict, sync non-zero, B's bytes at the origin, A's on A's mount.
2. Honoured (enforce): A's PUT is held, B's lands; A's is refused with
   412 when released: a conflict, the same two places.
3. A change that keeps size and mtime (touch -r) gets a validator of its
   own at the origin: B, with the old version's first MiB cached, reads
   the rest stale (an error) or whole, never old and new mixed.
Each part ends comparing the origin with the mounts.
"""
import http.client
import os
import shutil
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFSCTL, Mount, Nginx, eq, main, ok, run, wait_for  # noqa: E402
from archiving import DAV, HTTP, dav_root, get, put, state  # noqa: E402

MIB = 1 << 20
LOCK = threading.Lock()  # the origin's, shared by every proxy: check and PUT as one


class Proxy:
    """A proxy to nginx at port.  hold[(method, path)]: an Event the
    request waits on (arrived[(method, path)] is set when it comes);
    enforce: conditions on PUT refused with 412 as S3 does."""

    def __init__(self, port, enforce=False):
        self.port_up, self.enforce = port, enforce
        self.hold, self.arrived, self.log, self.skip = {}, {}, [], {}
        proxy = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                key = (self.command, self.path)
                proxy.log.append(key)
                if proxy.skip.get(key):
                    proxy.skip[key] -= 1  # let through: the next one is held
                else:
                    if key in proxy.arrived:
                        proxy.arrived[key].set()
                    if key in proxy.hold:
                        proxy.hold[key].wait(60)
                hdrs = {k: v for k, v in self.headers.items()
                        if k.lower() not in ("connection", "host")}
                with LOCK:
                    if self.command == "PUT" and proxy.enforce and (
                            "If-Match" in hdrs or "If-None-Match" in hdrs):
                        c = http.client.HTTPConnection("127.0.0.1", proxy.port_up)
                        c.request("HEAD", self.path)
                        r = c.getresponse()
                        r.read()
                        cur = r.getheader("ETag") if r.status == 200 else None
                        c.close()
                        im, inm = hdrs.get("If-Match"), hdrs.get("If-None-Match")
                        if (im and im != cur) or (inm == "*" and cur):
                            return self.answer(412, [], b"")
                    c = http.client.HTTPConnection("127.0.0.1", proxy.port_up)
                    c.request(self.command, self.path, body=body, headers=hdrs)
                    r = c.getresponse()
                    data = r.read()
                    c.close()
                self.answer(r.status, r.getheaders(), data)

            def answer(self, status, headers, data):
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("connection", "transfer-encoding", "content-length",
                                         "server", "date"):
                        self.send_header(k, v)
                if self.command == "HEAD":  # the object's length, not the body's
                    self.send_header("Content-Length", dict(
                        (k.lower(), v) for k, v in headers).get("content-length", "0"))
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_DELETE = do_MKCOL = do_MOVE = do_COPY = any

        class S(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.srv = S(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def url(self, p=""):
        return "http://127.0.0.1:%d/%s" % (self.port, p)

    def stop(self):
        for e in self.hold.values():
            e.set()
        self.srv.shutdown()
        self.srv.server_close()


def two_writers(ng, root, enforce, big=False):
    tag = "honoured" if enforce else "plain, validators" if big else "plain"
    name = "w-%s" % tag.replace(", ", "-")
    more = " --read-back-max 0" if big else ""
    with open(os.path.join(root, "o", name), "wb") as f:
        f.write(b"0" * 100000)
    pa, pb = Proxy(ng.port, enforce), Proxy(ng.port, enforce)
    try:
        with Mount(opts="hook=%s%s,origin=%s" % (HTTP, more, pa.url("o/"))) as a, \
                Mount(opts="hook=%s%s,origin=%s" % (HTTP, more, pb.url("o/"))) as b:
            rc, out = run([HSMFSCTL, "doctor", a.mnt])
            ok(("honours conditional PUTs" if enforce else "ignores conditional PUTs") in out,
               "%s: doctor says whether the origin honours conditions (%s)"
               % (tag, [x for x in out.splitlines() if "conditional" in x]))
            eq(get(a.path(name)), b"0" * 100000, "%s: A reads the file" % tag)
            eq(get(b.path(name)), b"0" * 100000, "%s: B reads the file" % tag)
            put(a.path(name), b"A" * 100000)
            put(b.path(name), b"B" * 100000)
            # another second than A's: the validators can tell them apart
            st = os.stat(b.path(name))
            os.utime(b.path(name), (st.st_atime, st.st_mtime + 100))
            path = "/o/" + name
            res = {}

            def bg(who, m):
                t = threading.Thread(target=lambda: res.update(
                    {who: run([HSMFSCTL, "archive", m.path(name)])}))
                t.start()
                return t

            def hold(px, key):
                px.hold[key], px.arrived[key] = threading.Event(), threading.Event()

            if enforce:
                # A's PUT waits; B's lands; A's, released, is refused
                hold(pa, ("PUT", path))
                ta = bg("a", a)
                wait_for(pa.arrived[("PUT", path)].is_set, "%s: A's PUT came" % tag)
                rc, out = run([HSMFSCTL, "archive", b.path(name)])
                eq(rc, 0, "%s: B archives meanwhile (%s)" % (tag, out.strip()))
                pa.hold[("PUT", path)].set()
            else:
                # B checked, its PUT waits; A's lands, its read-back waits;
                # B's lands; then A reads back
                hold(pb, ("PUT", path))
                tb = bg("b", b)
                wait_for(pb.arrived[("PUT", path)].is_set, "%s: B's PUT came" % tag)
                after = ("HEAD", path) if big else ("GET", path)
                if big:
                    pa.skip[after] = 1  # its check before the PUT
                hold(pa, after)
                ta = bg("a", a)
                # (an hsmfs-http that reads nothing back has finished instead)
                wait_for(lambda: pa.arrived[after].is_set() or not ta.is_alive(),
                         "%s: A's PUT landed" % tag)
                pb.hold[("PUT", path)].set()
                tb.join(60)
                eq(res.get("b", (None,))[0], 0, "%s: B archives meanwhile (%s)"
                   % (tag, res.get("b")))
                pa.hold[after].set()
            ta.join(60)
            rc, out = res.get("a", (None, ""))
            ok(rc not in (0, None) and "conflict" in out,
               "%s: A's archive is a conflict, not a lost update (%s, %s)"
               % (tag, rc, out.strip()))
            with open(os.path.join(root, "o", name), "rb") as f:
                eq(f.read(), b"B" * 100000, "%s: the origin holds B's bytes" % tag)
            eq(get(a.path(name)), b"A" * 100000, "%s: A's bytes stay on A's mount" % tag)
            ok("conflict" in state(a, name), "%s: shown as a conflict on A (%s)"
               % (tag, state(a, name)))
            rc, out = run([HSMFSCTL, "sync", a.mnt])
            ok(rc != 0, "%s: sync of A is non-zero (%d)" % (tag, rc))
            eq(state(b, name), "resident", "%s: clean on B" % tag)
            with open(os.path.join(root, "o", name), "rb") as f:
                eq(get(b.path(name)), f.read(), "%s: origin and B's mount the same" % tag)
    finally:
        pa.stop()
        pb.stop()


def etag(ng, name):
    c = http.client.HTTPConnection("127.0.0.1", ng.port)
    c.request("HEAD", "/o/" + name)
    r = c.getresponse()
    r.read()
    c.close()
    return r.getheader("ETag")


def kept_mtime(ng, root):
    name = "kept"
    old = bytes(range(256)) * (4 * MIB // 256)
    p = os.path.join(root, "o", name)
    with open(p, "wb") as f:
        f.write(old)
    os.utime(p, (1600000000, 1600000000))
    url = "http://127.0.0.1:%d/o/" % ng.port
    etag0 = etag(ng, name)
    with Mount(opts="hook=%s,origin=%s" % (HTTP, url)) as a, \
            Mount(opts="hook=%s,origin=%s,noprefetch" % (HTTP, url)) as b:
        fd = os.open(b.path(name), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            eq(os.pread(fd, 4096, 0), old[:4096], "kept: B reads the start of the old version")
        finally:
            os.close(fd)
        present = os.getxattr(b.path(name), "user.hsmfs.present").decode()
        ok(present and present != "0-%d" % (len(old) - 1) and "%d" % len(old) not in present,
           "kept: B has only part of it (%s)" % present)
        eq(get(a.path(name)), old, "kept: A reads the old version")
        new = b"n" * len(old)
        put(a.path(name), new)
        os.utime(a.path(name), (1600000000, 1600000000))  # touch -r: size and mtime kept
        rc, out = run([HSMFSCTL, "archive", a.path(name)])
        eq(rc, 0, "kept: A archives the change (%s)" % out.strip())
        with open(p, "rb") as f:
            eq(f.read(), new, "kept: the origin holds the new bytes")
        try:
            with open(b.path(name), "rb") as f:
                got = f.read()
        except OSError as e:
            got = e
        ok(isinstance(got, OSError) or got in (old, new),
           "kept: B's read of the rest is stale or whole, never mixed (%s)"
           % (got if isinstance(got, OSError) else
              "%d MiB old of %d" % (sum(1 for i in range(0, len(got), MIB)
                                        if got[i:i + MIB] == old[i:i + MIB]),
                                    len(got) // MIB)))
        eq(get(a.path(name)), new, "kept: origin and A's mount the same")
        # once more with the mtime kept: a validator neither of the two before
        tags = [etag0, etag(ng, name)]
        new2 = b"m" * len(old)
        put(a.path(name), new2)
        os.utime(a.path(name), (1600000000, 1600000000))
        rc, out = run([HSMFSCTL, "archive", a.path(name)])
        eq(rc, 0, "kept: A archives a second change (%s)" % out.strip())
        tags.append(etag(ng, name))
        eq(len(set(tags)), 3, "kept: three versions, three validators (%s)" % tags)
        with open(p, "rb") as f:
            eq(get(a.path(name)), f.read(), "kept: origin and A's mount the same")


def test():
    root = dav_root()
    with Nginx(root, extra=DAV) as ng:
        two_writers(ng, root, enforce=False)
        two_writers(ng, root, enforce=False, big=True)
        two_writers(ng, root, enforce=True)
        kept_mtime(ng, root)
    shutil.rmtree(root, ignore_errors=True)


main(test)
