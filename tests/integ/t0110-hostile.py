#!/usr/bin/env python3
"""Hostile hooks: junk, lies and floods against a live daemon.

Each bad peer gets its documented reaction (an ERROR frame with the
code, then the connection closes, or the frame is ignored), and after
each the daemon still serves the next good hook.
"""
# prefetch=0 on every mount here: these tests count events and cached
# files exactly; sibling prefetch (t0400) would add its own.

import errno
import os
import socket
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers"))
import pyhook  # noqa: E402
from harness import Hook, Mount, eq, import_manifest, is_root, main, ok, skip, tmpdir  # noqa: E402

P = 4096
E_VERSION, E_MALFORMED, E_UNKNOWN, E_STATE, E_DENIED = 1, 2, 3, 4, 5


def raw(mnt):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(30)
    s.connect(os.getxattr(mnt, "user.hsmfs.socket").decode())
    return s


def hello_body(vmin=1, vmax=1, kind=1, mask=2, name=b"x", subtree=b""):
    return (struct.pack("<IIII", vmin, vmax, kind, mask) + pyhook.string(name) +
            pyhook.string(subtree))


def reaction(s):
    """(error code or None, closed?) after what we sent."""
    code = None
    try:
        data = s.recv(70000)
        if data and struct.unpack_from("<H", data, 4)[0] == pyhook.ERROR:
            code = struct.unpack_from("<I", data, 8)[0]
            data = s.recv(70000)
        closed = data == b""
    except socket.timeout:
        closed = False
    return code, closed


def welcomed(s):
    data = s.recv(70000)
    return struct.unpack_from("<H", data, 4)[0] == pyhook.WELCOME


def serves(m, mirror, name, data):
    with Hook(m.mnt, "--mirror", mirror):
        with open(m.path(name), "rb") as f:
            return f.read() == data


def test():
    mirror = tmpdir("hsmfs-mirror-")
    files = {}
    for i in range(14):
        files["f%d" % i] = os.urandom(2 * P + i)
        with open(os.path.join(mirror, "f%d" % i), "wb") as f:
            f.write(files["f%d" % i])
    with Mount(opts="timeout=5,prefetch=0") as m:
        rc, out = import_manifest(m.mnt, [{"path": k, "size": len(v)} for k, v in files.items()])
        eq(rc, 0, "placeholders imported")
        n = iter(range(14))

        cases = [
            ("wrong version", pyhook.frame(pyhook.HELLO, hello_body(vmin=8, vmax=9)), E_VERSION),
            ("oversized frame", pyhook.frame(pyhook.HELLO, hello_body() + b"x" * 70000), E_MALFORMED),
            ("short frame", pyhook.frame(pyhook.HELLO, hello_body()[:10]), E_MALFORMED),
            ("trailing bytes", pyhook.frame(pyhook.HELLO, hello_body() + b"zz"), E_MALFORMED),
            ("length field lies", struct.pack("<IHH", 999, 1, 0) + hello_body(), E_MALFORMED),
            ("frame before handshake", pyhook.frame(pyhook.ANSWER, struct.pack("<QIIQQ", 1, 0, 0, 0, 0)), E_STATE),
            ("bad kind", pyhook.frame(pyhook.HELLO, hello_body(kind=9)), E_MALFORMED),
            ("NUL in name", pyhook.frame(pyhook.HELLO, hello_body(name=b"a\0b")), E_MALFORMED),
        ]
        for desc, payload, code in cases:
            s = raw(m.mnt)
            s.send(payload)
            eq(reaction(s), (code, True), "%s: ERROR %d and closed" % (desc, code))
            s.close()
        i = next(n)
        ok(serves(m, mirror, "f%d" % i, files["f%d" % i]), "after junk handshakes a good hook is served")

        after_hello = [
            ("unknown type", pyhook.frame(99, b""), E_UNKNOWN),
            ("second HELLO", pyhook.frame(pyhook.HELLO, hello_body()), E_STATE),
            ("malformed ANSWER", pyhook.frame(pyhook.ANSWER, b"\1\2\3"), E_MALFORMED),
            ("malformed PROGRESS", pyhook.frame(pyhook.PROGRESS, b"\1" * 17), E_MALFORMED),
            ("header only", b"\x08\x00\x00\x00\x04\x00\x00\x00", E_MALFORMED),
            ("FILLED at version 4", pyhook.frame(pyhook.FILLED, b"\1" * 24), E_UNKNOWN, 4),
            ("malformed FILLED", pyhook.frame(pyhook.FILLED, b"\1" * 16), E_MALFORMED, 5),
        ]
        for desc, payload, code, *vmax in after_hello:
            s = raw(m.mnt)
            s.send(pyhook.frame(pyhook.HELLO, hello_body(vmax=vmax[0] if vmax else 1)))
            ok(welcomed(s), "%s: welcomed first" % desc)
            s.send(payload)
            eq(reaction(s), (code, True), "%s: ERROR %d and closed" % (desc, code))
            s.close()

        # answers to unknown ids, and twice to the same id: ignored
        s = raw(m.mnt)
        s.send(pyhook.frame(pyhook.HELLO, hello_body(vmax=5)))
        welcomed(s)
        pyhook.answer(s, 123456789, pyhook.ALLOW, 0, 0, 1 << 40)
        pyhook.answer(s, 0, pyhook.DENY, errno.EPERM)
        pyhook.progress(s, 42, 1)
        pyhook.filled(s, 42, 0, 1 << 40)
        i = next(n)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=open(m.path("f%d" % i), "rb").read()))
        t.start()
        data, fds = pyhook.recv_frame(s)
        ev = pyhook.parse_event(data[8:], 1)
        d = files["f%d" % i]
        os.pwrite(fds[0], d[ev["hint_start"]:ev["hint_end"]], ev["hint_start"])
        os.close(fds[0])
        pyhook.answer(s, ev["id"], pyhook.ALLOW, 0, ev["hint_start"], ev["hint_end"])
        pyhook.answer(s, ev["id"], pyhook.DENY, errno.EPERM)  # twice: ignored
        t.join()
        eq(out.get("r"), d, "unknown ids ignored (FILLED too); a repeated answer ignored")
        s.settimeout(0.2)
        eq(reaction(s), (None, False), "the connection stays open after ignored answers")
        s.close()

        # an ALLOW that claims less than the required range fails with EIO
        s = raw(m.mnt)
        s.send(pyhook.frame(pyhook.HELLO, hello_body()))
        welcomed(s)
        i = next(n)

        def read_err():
            try:
                with open(m.path("f%d" % i), "rb") as f:
                    f.read()
                out["e"] = 0
            except OSError as e:
                out["e"] = e.errno
        t = threading.Thread(target=read_err)
        t.start()
        data, fds = pyhook.recv_frame(s)
        ev = pyhook.parse_event(data[8:], 1)
        os.close(fds[0])
        pyhook.answer(s, ev["id"], pyhook.ALLOW, 0, ev["start"], ev["start"] + 1)
        s.close()
        t.join()
        eq(out.get("e"), errno.EIO, "allow short of the required range: EIO, not zeros")

        # 10 000 connections opening and closing (past HOOKS_MAX at once,
        # a connection is refused with ERROR STATE: also a documented reaction)
        path = os.getxattr(m.mnt, "user.hsmfs.socket").decode()
        refused = 0
        for k in range(10000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(path)
            if k % 2:
                try:
                    s.send(pyhook.frame(pyhook.HELLO, hello_body()))
                except (BrokenPipeError, ConnectionResetError):
                    refused += 1
            s.close()
        i = next(n)
        ok(serves(m, mirror, "f%d" % i, files["f%d" % i]), "after 10 000 connections a good hook is served")

        # another uid is refused
        if is_root():
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    try:
                        s = raw(m.mnt)
                        s.send(pyhook.frame(pyhook.HELLO, hello_body()))
                        c, closed = reaction(s)
                        code = 0 if c == E_DENIED and closed else 2
                    except PermissionError:
                        code = 0  # cannot even reach the 0700 directory
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            eq(os.WEXITSTATUS(status), 0, "another uid is refused")
        else:
            skip("another uid is refused", "needs root to switch uid")
        i = next(n)
        ok(serves(m, mirror, "f%d" % i, files["f%d" % i]), "still serving at the end")
    import shutil
    shutil.rmtree(mirror, ignore_errors=True)


if __name__ == "__main__":
    main(test)
