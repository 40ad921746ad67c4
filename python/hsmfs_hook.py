"""hsmfs_hook - write hsmfs hooks in Python (standard library only).

The protocol of hsmfs-hooks(7): connect to a mount's hook socket, say
HELLO, receive events (a fill event comes with a descriptor of a staging
file to write the bytes into), answer them.

    import hsmfs_hook
    h = hsmfs_hook.connect("/mnt/data", "fill", ["access"], "mirror")
    for ev in h.events():               # dicts; ev["fd"] for fill events
        ...write ev["hint_start"]:ev["hint_end"] through ev["fd"]...
        os.close(ev["fd"])
        h.allow(ev["id"], ev["hint_start"], ev["hint_end"])

The lower-level functions (frame, connect_socket, recv_frame,
parse_event, answer, progress, filled, archived) are the same protocol piece by
piece.
"""
import array
import errno
import os
import socket
import struct

VERSION = 6
MAX_FRAME = 65536
HELLO, WELCOME, EVENT, ANSWER, PROGRESS, CANCEL, ERROR, FILLED, ARCHIVED = 1, 2, 3, 4, 5, 6, 7, 8, 9
# CANCEL reasons; any CANCEL ends its event
CANCEL_TIMEOUT, CANCEL_INTERRUPTED, CANCEL_CLOSED = 1, 2, 3
KIND = {"fill": 1, "watch": 2}
EV = {"access": 1, "modify": 2, "open": 3, "read": 4, "dir": 5, "lookup": 6, "archive": 7, "archive_name": 8}
EVNAME = {1: "PRE_ACCESS", 2: "PRE_MODIFY", 3: "OPEN_PERM", 4: "ACCESS_PERM",
          5: "PRE_DIR", 6: "PRE_LOOKUP", 7: "ARCHIVE",
          8: "ARCHIVE_NAME"}
ESTALE = 116  # DENY of an ARCHIVE: a conflict (the origin is not at the recorded version)
ALLOW, DENY = 0, 1
QUIET = 1  # flag of an allowing answer to PRE_MODIFY
HAS_FD = 1  # flag of an event frame that carries a descriptor


def frame(mtype, body, flags=0):
    """One protocol frame: u32 length, u16 type, u16 flags, body."""
    return struct.pack("<IHH", 8 + len(body), mtype, flags) + body


def string(b):
    return struct.pack("<H", len(b)) + b


class Reader:
    """Typed reads that fail on short data; done() fails on bytes left over."""

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


def connect_socket(mnt, kind="fill", mask=("access",), name="hook", subtree="",
                   version=VERSION):
    """Connect and say HELLO (speaking versions 1 to version); returns
    (socket, WELCOME as a dict)."""
    try:
        path = os.getxattr(mnt, "user.hsmfs.socket").decode()
    except OSError as e:
        # a fanotify mount is the store itself, bound: its state
        # directory holds the socket (hsmfs(8) BACKENDS)
        path = os.path.join(mnt, ".hsmfs", "hook.sock")
        if e.errno not in (errno.ENODATA, errno.ENOTSUP) or not os.path.exists(path):
            raise
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if len(path.encode()) < 108:
        s.connect(path)
    else:
        d = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
        try:
            s.connect("/proc/self/fd/%d/%s" % (d, os.path.basename(path)))
        finally:
            os.close(d)
    m = 0
    for e in mask:
        m |= 1 << EV[e]
    s.send(frame(HELLO, struct.pack("<IIII", 1, version, KIND[kind], m) +
                 string(name.encode()) + string(subtree.encode())))
    data = s.recv(MAX_FRAME + 1)
    if len(data) < 8:
        raise ConnectionError("connection closed before WELCOME")
    length, mtype, flags = struct.unpack_from("<IHH", data)
    if mtype == ERROR and length == len(data):
        r = Reader(data[8:])
        code, = r.take("<I")
        raise ConnectionError("refused: ERROR %d: %s" % (code, r.string().decode(errors="replace")))
    if mtype != WELCOME or length != len(data):
        raise ConnectionError("no WELCOME: %r" % data[:64])
    r = Reader(data[8:])
    version, max_frame, chunk, timeout_ms = r.take("<IIII")
    r.done()
    return s, {"version": version, "chunk": chunk, "timeout_ms": timeout_ms}


def recv_frame(s):
    """(frame bytes, [descriptors]); b"" when hsmfs closed the connection."""
    fds = array.array("i")
    data, anc, flags, _ = s.recvmsg(MAX_FRAME + 1, socket.CMSG_SPACE(4 * fds.itemsize))
    for level, ctype, cdata in anc:
        if level == socket.SOL_SOCKET and ctype == socket.SCM_RIGHTS:
            fds.frombytes(cdata[:len(cdata) - (len(cdata) % fds.itemsize)])
    return data, list(fds)


def parse_event(body, flags):
    """An EVENT frame's body (after the 8-byte header) as a dict."""
    r = Reader(body)
    (eid, etype, pid, uid, gid, file_id, size, start, end, hs, he) = r.take("<QIIIIQQQQQQ")
    path, origin, version = r.string(), r.string(), r.string()
    r.done()
    return dict(id=eid, type=EVNAME.get(etype, etype), pid=pid, uid=uid, gid=gid,
                file_id=file_id, size=size, start=start, end=end, hint_start=hs,
                hint_end=he, path=path.decode(errors="surrogateescape"),
                origin=origin.decode(errors="replace"),
                version=version.decode(errors="replace"), has_fd=bool(flags & HAS_FD))


def answer(s, eid, verdict=ALLOW, err=0, start=0, end=0, flags=0):
    s.send(frame(ANSWER, struct.pack("<QIIQQ", eid, verdict, err, start, end), flags))


def progress(s, eid, done):
    """done: bytes in hand for the event; only a growing count extends its timeout."""
    s.send(frame(PROGRESS, struct.pack("<QQ", eid, done)))


def filled(s, eid, start, end):
    """Version 5, before the answer of a PRE_ACCESS event: [start, end) of
    its descriptor is written and final; reads waiting inside it may go."""
    s.send(frame(FILLED, struct.pack("<QQQ", eid, start, end)))


def archived(s, eid, version, origin=b""):
    """Version 6, before the ALLOW of an ARCHIVE event: its snapshot is at
    the origin as version (bytes), at origin (b"": the recorded one)."""
    s.send(frame(ARCHIVED, struct.pack("<Q", eid) + string(version) + string(origin)))


class Hook:
    """One connection: events() yields events, allow()/deny()/progress()/filled() answer."""

    def __init__(self, mnt, kind="fill", mask=("access",), name="hook", subtree=""):
        self.sock, self.welcome = connect_socket(mnt, kind, mask, name, subtree)

    def events(self):
        """Yield each event as a dict (with "fd" for fill events, which the
        caller closes), and each CANCEL as {"cancel": id, "reason": n}."""
        while True:
            data, fds = recv_frame(self.sock)
            if not data:
                return
            length, mtype, flags = struct.unpack_from("<IHH", data)
            if mtype == EVENT:
                ev = parse_event(data[8:], flags)
                ev["fd"] = fds[0] if fds else None
                for extra in fds[1:]:
                    os.close(extra)
                yield ev
                continue
            for fd in fds:
                os.close(fd)
            if mtype == CANCEL:
                eid, reason = struct.unpack_from("<QI", data, 8)
                yield {"cancel": eid, "reason": reason}
            elif mtype == ERROR:
                raise ConnectionError("hsmfs closed the connection: error %d" %
                                      struct.unpack_from("<I", data, 8)[0])

    def allow(self, eid, filled_start=0, filled_end=0, quiet=False):
        answer(self.sock, eid, ALLOW, 0, filled_start, filled_end, QUIET if quiet else 0)

    def deny(self, eid, err):
        answer(self.sock, eid, DENY, err)

    def progress(self, eid, done):
        progress(self.sock, eid, done)

    def filled(self, eid, start, end):
        """FILLED (version 5); False, nothing sent, to an older mount."""
        if self.welcome.get("version", 0) < 5:
            return False
        filled(self.sock, eid, start, end)
        return True

    def archived(self, eid, version, origin=""):
        """ARCHIVED (version 6): the snapshot of ARCHIVE event eid is at the
        origin as version; allow() it next.  False, nothing sent, to an
        older mount."""
        if self.welcome.get("version", 0) < 6:
            return False
        archived(self.sock, eid, version.encode(), origin.encode())
        return True

    def close(self):
        self.sock.close()


def connect(mnt, kind="fill", mask=("access",), name="hook", subtree=""):
    return Hook(mnt, kind, mask, name, subtree)
