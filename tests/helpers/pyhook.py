#!/usr/bin/env python3
"""A fill/watch hook in Python, written from hsmfs-hooks(7) alone.

    pyhook.py MOUNTPOINT --log FILE [--mode mirror|deny|silent|allow]
              [--mirror DIR] [--errno N] [--delay S] [--progress S]
              [--kind fill|watch] [--mask access,modify] [--quiet]
              [--name NAME] [--fill required|hint] [--linger S]

Every frame it receives is appended to --log as one JSON line (flushed at
once), so a test can wait on the log instead of sleeping.
"""
import argparse
import array
import errno
import json
import os
import socket
import struct
import sys
import threading
import time

VERSION = 1
MAX_FRAME = 65536
HELLO, WELCOME, EVENT, ANSWER, PROGRESS, CANCEL, ERROR = 1, 2, 3, 4, 5, 6, 7
KIND = {"fill": 1, "watch": 2}
EV = {"access": 1, "modify": 2}
EVNAME = {1: "PRE_ACCESS", 2: "PRE_MODIFY"}
ALLOW, DENY = 0, 1
QUIET = 1


def frame(mtype, body, flags=0):
    return struct.pack("<IHH", 8 + len(body), mtype, flags) + body


def string(b):
    return struct.pack("<H", len(b)) + b


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        n = struct.calcsize(fmt)
        if self.p + n > len(self.d):
            raise ValueError("short frame")
        v = struct.unpack_from(fmt, self.d, self.p)
        self.p += n
        return v

    def string(self):
        (n,) = self.take("<H")
        if self.p + n > len(self.d):
            raise ValueError("string past the end")
        s = self.d[self.p:self.p + n]
        self.p += n
        return s

    def done(self):
        if self.p != len(self.d):
            raise ValueError("trailing bytes")


def connect(mnt, kind="fill", mask=("access",), name="pyhook", subtree=""):
    path = os.getxattr(mnt, "user.hsmfs.socket").decode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if len(path.encode()) < 108:
        s.connect(path)
    else:
        d = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
        s.connect("/proc/self/fd/%d/%s" % (d, os.path.basename(path)))
        os.close(d)
    m = 0
    for e in mask:
        m |= 1 << EV[e]
    s.send(frame(HELLO, struct.pack("<IIII", VERSION, VERSION, KIND[kind], m) +
                 string(name.encode()) + string(subtree.encode())))
    data = s.recv(MAX_FRAME + 1)
    length, mtype, flags = struct.unpack_from("<IHH", data)
    if mtype != WELCOME or length != len(data):
        raise ConnectionError("no WELCOME: %r" % data[:64])
    r = Reader(data[8:])
    version, max_frame, chunk, timeout_ms = r.take("<IIII")
    r.done()
    return s, {"version": version, "chunk": chunk, "timeout_ms": timeout_ms}


def recv_frame(s):
    fds = array.array("i")
    data, anc, flags, _ = s.recvmsg(MAX_FRAME + 1, socket.CMSG_SPACE(4 * fds.itemsize))
    for level, ctype, cdata in anc:
        if level == socket.SOL_SOCKET and ctype == socket.SCM_RIGHTS:
            fds.frombytes(cdata[:len(cdata) - (len(cdata) % fds.itemsize)])
    return data, list(fds)


def parse_event(body, flags):
    r = Reader(body)
    (eid, etype, pid, uid, gid, file_id, size, start, end, hs, he) = r.take("<QIIIIQQQQQQ")
    path, origin, version = r.string(), r.string(), r.string()
    r.done()
    return dict(id=eid, type=EVNAME.get(etype, etype), pid=pid, uid=uid, gid=gid,
                file_id=file_id, size=size, start=start, end=end, hint_start=hs,
                hint_end=he, path=path.decode(errors="surrogateescape"),
                origin=origin.decode(errors="replace"),
                version=version.decode(errors="replace"), has_fd=bool(flags & 1))


def answer(s, eid, verdict=ALLOW, err=0, start=0, end=0, flags=0):
    s.send(frame(ANSWER, struct.pack("<QIIQQ", eid, verdict, err, start, end), flags))


def progress(s, eid, done):
    s.send(frame(PROGRESS, struct.pack("<QQ", eid, done)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mnt")
    ap.add_argument("--log", required=True)
    ap.add_argument("--mode", default="mirror")
    ap.add_argument("--mirror")
    ap.add_argument("--errno", type=int, default=errno.EIO)
    ap.add_argument("--delay", type=float, default=0)
    ap.add_argument("--progress", type=float, default=0)
    ap.add_argument("--kind", default="fill")
    ap.add_argument("--mask", default="access")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--name", default="pyhook")
    ap.add_argument("--fill", default="hint")
    ap.add_argument("--linger", type=float, default=0,
                    help="after the connection closes, let fills in flight finish")
    a = ap.parse_args()
    log = open(a.log, "a", buffering=1)
    s, welcome = connect(a.mnt, a.kind, a.mask.split(","), a.name)
    log.write(json.dumps({"welcome": welcome}) + "\n")
    lock = threading.Lock()

    def handle(ev, fd):
        try:
            if a.delay or a.progress:
                end = time.monotonic() + a.delay
                done = 0
                while time.monotonic() < end:
                    time.sleep(min(a.progress or a.delay, max(0, end - time.monotonic())))
                    if a.progress:
                        done += 1  # progress is bytes advancing
                        with lock:
                            progress(s, ev["id"], done)
            if a.mode == "deny":
                with lock:
                    answer(s, ev["id"], DENY, a.errno)
                return
            if ev["type"] == "PRE_ACCESS" and a.mode == "mirror":
                lo, hi = ((ev["hint_start"], ev["hint_end"]) if a.fill == "hint"
                          else (ev["start"], ev["end"]))
                with open(os.path.join(a.mirror, ev["path"]), "rb") as src:
                    src.seek(lo)
                    data = src.read(hi - lo)
                done = 0
                while done < len(data):  # a short write is not a fill
                    done += os.pwrite(fd, data[done:], lo + done)
                with lock:
                    answer(s, ev["id"], ALLOW, 0, lo, lo + len(data))
            else:
                with lock:
                    answer(s, ev["id"], ALLOW, 0, 0, 0, QUIET if a.quiet else 0)
        except OSError as e:
            with lock:
                answer(s, ev["id"], DENY, e.errno)
        finally:
            if fd is not None:
                os.close(fd)

    while True:
        try:
            data, fds = recv_frame(s)
        except OSError:
            break
        if not data:
            break
        length, mtype, flags = struct.unpack_from("<IHH", data)
        if mtype == EVENT:
            ev = parse_event(data[8:], flags)
            log.write(json.dumps(ev) + "\n")
            fd = fds[0] if fds else None
            for extra in fds[1:]:
                os.close(extra)
            if a.mode == "silent":
                if fd is not None:
                    os.close(fd)
                continue
            threading.Thread(target=handle, args=(ev, fd), daemon=True).start()
        elif mtype == CANCEL:
            eid, reason = struct.unpack_from("<QI", data, 8)
            log.write(json.dumps({"cancel": eid, "reason": reason}) + "\n")
        elif mtype == ERROR:
            log.write(json.dumps({"error": struct.unpack_from("<I", data, 8)[0]}) + "\n")
            break
    log.write(json.dumps({"closed": True}) + "\n")
    if a.linger:
        time.sleep(a.linger)  # an orphan still writing through its descriptors


if __name__ == "__main__":
    main()
