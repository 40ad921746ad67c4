"""What the archive tests share (t0450, t0455, t0460): reading and writing
whole files, a file's state, hsmfsctl archive, and an archive hook of our
own that holds each upload until released."""
import errno
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFS, HSMFSCTL, run, tmpdir  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import hsmfs_hook  # noqa: E402

HTTP = os.environ.get("HSMFS_HTTP") or os.path.join(os.path.dirname(os.path.abspath(HSMFS)),
                                                    "hsmfs-http")
# nginx as a WebDAV origin
DAV = ("dav_methods PUT DELETE MKCOL MOVE; create_full_put_path on; "
       "dav_access user:rw group:r all:r; client_max_body_size 0;")


def dav_root():
    """A new directory for nginx to serve, with "o/" in it for the
    origin's objects (both writable by nginx's workers)."""
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o777)
    os.mkdir(os.path.join(root, "o"))
    os.chmod(os.path.join(root, "o"), 0o777)
    return root


def tree(root, of=None):
    """{relative path: bytes (or of(bytes)), or None for a directory} under
    root."""
    out = {}
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        for n in dirs:
            out[os.path.normpath(os.path.join(rel, n))] = None
        for n in files:
            with open(os.path.join(d, n), "rb") as f:
                data = f.read()
                out[os.path.normpath(os.path.join(rel, n))] = of(data) if of else data
    return out


def differences(a, b, an="origin", bn="mount"):
    """A line for each path where trees a and b (tree()) differ."""
    def size(v):  # bytes, or a digest (size, sha256)
        return "dir" if v is None else len(v) if isinstance(v, bytes) else v[0]
    out = []
    for p in sorted(set(a) | set(b)):
        if p not in a:
            out.append("%s: only on the %s" % (p, bn))
        elif p not in b:
            out.append("%s: only on the %s" % (p, an))
        elif a[p] != b[p]:
            out.append("%s: differs (%s %s, %s %s)" % (
                p, an, size(a[p]), bn, size(b[p])))
    return out


def state(m, *p):
    """The file's state, less ",passthrough" (an open of root's mount may
    still be releasing)."""
    return os.getxattr(m.path(*p), "user.hsmfs.state").decode().replace(",passthrough", "")


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def get(path):
    with open(path, "rb") as f:
        return f.read()


def archive(*paths):
    """hsmfsctl archive PATHS: (exit status, output)."""
    return run([HSMFSCTL, "archive"] + list(paths))


class Holder:
    """An archive hook of our own: each upload is held until gate is set
    (set at once unless hold), then answered ARCHIVED "vN" (N: its number)
    and allowed.  uploads: (path, the snapshot's bytes) of each."""

    def __init__(self, mnt, hold=True):
        self.h = hsmfs_hook.connect(mnt, "fill", ["archive"], "holder")
        self.uploads = []
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.got = threading.Event()  # an event arrived (cleared by the test)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        try:
            for ev in self.h.events():
                if "cancel" in ev:
                    continue
                data = os.pread(ev["fd"], ev["size"], 0)
                os.close(ev["fd"])
                self.got.set()
                self.gate.wait()
                self.h.archived(ev["id"], '"v%d"' % (len(self.uploads) + 1))
                self.h.allow(ev["id"])
                self.uploads.append((ev["path"], data))  # once answered
        except OSError:
            pass

    def bytes(self):
        return [d for _, d in self.uploads]

    def close(self):
        self.h.close()


class MemOrigin:
    """An archive hook of the test's own over an origin in memory
    ({path: bytes}): uploads are answered once up is set (or failed with
    EIO if fail_next), name changes once names is set, each after
    name_delay seconds."""

    def __init__(self, mnt):
        self.h = hsmfs_hook.connect(mnt, "fill", ["archive", "archive_name"], "memorigin")
        self.objs = {}
        self.up = threading.Event()
        self.names = threading.Event()
        self.uploading = threading.Event()  # an upload arrived
        self.fail_next = False
        self.name_delay = 0
        self.n = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def key(self, ev):
        o = ev["origin"]
        return o[len("mem:/"):] if o.startswith("mem:/") else ev["path"].strip("/")

    def run(self):
        try:
            for ev in self.h.events():
                if "cancel" in ev:
                    continue
                threading.Thread(target=self.one, args=(ev,), daemon=True).start()
        except OSError:
            pass

    def one(self, ev):
        path = ev["path"].strip("/")
        self.n += 1
        if ev["type"] == "ARCHIVE":
            data = os.pread(ev["fd"], ev["size"], 0)
            os.close(ev["fd"])
            self.uploading.set()
            self.up.wait()
            if self.fail_next:
                self.fail_next = False
                self.h.deny(ev["id"], errno.EIO)
                return
            # to the recorded URL if the event has one, said as no URL (as
            # hsmfs-http does), else to the path's
            self.objs[self.key(ev)] = data
            self.h.archived(ev["id"], '"v%d"' % self.n, "" if ev["origin"] else "mem:/" + path)
            self.h.allow(ev["id"])
            return
        self.names.wait()
        time.sleep(self.name_delay)
        kind = ev["start"]
        if kind == 1:  # removed
            self.objs.pop(self.key(ev), None)
        elif kind == 2:  # renamed
            k = self.key(ev)
            if k not in self.objs:
                self.h.deny(ev["id"], errno.ENOENT)
                return
            self.objs[path] = self.objs.pop(k)
            self.h.archived(ev["id"], '"v%d"' % self.n, "mem:/" + path)
        elif kind == 4 and any(p.startswith(path + "/") for p in self.objs):
            self.h.deny(ev["id"], errno.ENOTEMPTY)
            return
        self.h.allow(ev["id"])

    def close(self):
        self.h.close()


def passthrough_writer_archived(m, between=None):
    """A file made on m (archive_after=) and opened for writing through
    passthrough (root: the kernel writes the store, unseen), between(m)
    called while it is open; then hsmfsctl archive of it must take no
    snapshot until it is closed, and archive its last bytes then.
    False (nothing checked) where it does not pass through."""
    from harness import eq, skip, wait_for
    put(m.path("f"), b"first")
    f = open(m.path("f"), "r+b")
    os.fsync(f.fileno())  # its row committed
    if "passthrough" not in os.getxattr(m.path("f"), "user.hsmfs.state").decode():
        f.close()
        skip("an archive waits for a passthrough writer", "no passthrough (not root)")
        return False
    if between:
        between(m)
    hook = Holder(m.mnt, hold=False)
    res = {}
    deferred = m.stats()["archive_deferred"]
    t = threading.Thread(target=lambda: res.update(r=archive(m.path("f"))))
    t.start()
    # an attempt came to it and put it off, taking no snapshot
    wait_for(lambda: m.stats()["archive_deferred"] > deferred, "an archive attempt put off")
    eq(hook.uploads, [], "no snapshot while the passthrough writer is open")
    f.write(b"second")
    f.close()
    t.join(30)
    eq((res.get("r", (None,))[0], hook.uploads[-1:]), (0, [("f", b"second")]),
       "archived once it is closed, with its last bytes")
    hook.close()
    return True
