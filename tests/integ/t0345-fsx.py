#!/usr/bin/env python3
"""fsx-style random file operations on hsmfs beside the native filesystem.

One file on the mount and its twin in a native directory get the same
seeded random operations: pwrite, pread, truncate, fallocate (keep size,
punch hole, zero range), copy_file_range within the file, shared mmap
writes and reads, O_DIRECT aligned reads and writes, fsync, and close and
reopen (read-only, read-write, O_APPEND), with several descriptors open
at once, so that opens in passthrough mode, through the page cache and
direct I/O meet.  Every read and the whole file after each reopen must
equal the twin; the first difference stops the run with its seed and the
operations that led there.

It runs twice: on a local file, and on a placeholder that a mirror hook
fills as it is read (the twin starts with the origin's bytes), so that
opens move from the daemon's path to passthrough as the file fills.
HSMFS_FSX_SEED=N repeats a run, HSMFS_FSX_OPS=N sets its length.
"""
import mmap
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Hook, Mount, diag, eq, import_manifest, main, ok, tmpdir  # noqa: E402

P = 4096
MAXLEN = 256 * 1024
OPS = int(os.environ.get("HSMFS_FSX_OPS", "3000"))
SEED = int(os.environ.get("HSMFS_FSX_SEED", str(int(time.time() * 1000) % 1000000)))


class Twin:
    """The same file twice: on the mount and on the native filesystem."""

    def __init__(self, mpath, npath):
        self.paths = (mpath, npath)
        self.fds = []  # (mount fd, native fd, flags)

    def open(self, flags):
        m = os.open(self.paths[0], flags | os.O_CREAT, 0o644)
        n = os.open(self.paths[1], flags | os.O_CREAT, 0o644)
        self.fds.append((m, n, flags))

    def close(self, i):
        m, n, _ = self.fds.pop(i)
        os.close(m)
        os.close(n)

    def both(self, fn):
        """fn(fd) on both sides; results (or errnos) must agree."""
        out = []
        for side in (0, 1):
            try:
                out.append(("ok", fn(side)))
            except OSError as e:
                out.append(("errno", e.errno))
        return out


def run_fsx(lazy):
    """lazy: the file starts as a placeholder of 200 000 bytes that a
    mirror hook fills as it is read (the twin starts with those bytes),
    so opens move from the daemon's path to passthrough as it fills."""
    seed = SEED + lazy
    rnd = random.Random(seed)
    diag("%s file: seed %d (HSMFS_FSX_SEED=%d repeats it), %d operations" %
         ("a lazy" if lazy else "a local", seed, SEED, OPS))
    native = tmpdir("hsmfs-fsx-native-")
    mirror = tmpdir("hsmfs-fsx-mirror-")
    hook = None
    with Mount(opts="chunk=16k") as m:
        if lazy:
            init = rnd.randbytes(200000)
            for d in (mirror, native):
                with open(os.path.join(d, "fsx"), "wb") as f:
                    f.write(init)
            eq(import_manifest(m.mnt, [{"path": "fsx", "size": len(init)}])[0], 0, "import")
            hook = Hook(m.mnt, "--mirror", mirror)
        t = Twin(m.path("fsx"), os.path.join(native, "fsx"))
        t.open(os.O_RDWR)
        log = []
        bad = None
        for i in range(OPS):
            if not t.fds:
                t.open(os.O_RDWR)
            k = rnd.randrange(len(t.fds))
            fm, fn, flags = t.fds[k]
            fd = (fm, fn)
            writable = flags & os.O_ACCMODE != os.O_RDONLY
            size = os.fstat(fn).st_size
            op = rnd.choice(["write", "read", "read", "truncate", "falloc", "copy", "mmap",
                             "direct", "fsync", "reopen", "reopen"])
            off = rnd.randrange(0, MAXLEN)
            n = rnd.randrange(1, 3 * P)
            if op == "write" and writable:
                data = rnd.randbytes(n)
                res = t.both(lambda s: os.pwrite(fd[s], data, off))
                log.append("pwrite fd%d %d+%d" % (k, off, n))
            elif op == "read":
                res = t.both(lambda s: os.pread(fd[s], n, off))
                log.append("pread fd%d %d+%d" % (k, off, n))
            elif op == "truncate" and writable:
                res = t.both(lambda s: os.ftruncate(fd[s], off))
                log.append("ftruncate fd%d %d" % (k, off))
            elif op == "falloc" and writable:
                mode = rnd.choice([0, 1, 3, 16])  # plain, keep size, punch, zero range
                res = t.both(lambda s: os.posix_fallocate(fd[s], off, n) if mode == 0 else
                             fallocate(fd[s], mode, off, n))
                log.append("fallocate fd%d mode %d %d+%d" % (k, mode, off, n))
            elif op == "copy" and writable and size:
                src = rnd.randrange(0, size)
                res = t.both(lambda s: os.copy_file_range(fd[s], fd[s], n, src, off))
                log.append("copy_file_range fd%d %d+%d -> %d" % (k, src, n, off))
            elif op == "mmap" and writable and size:
                moff = rnd.randrange(0, size) & ~(P - 1)
                ln = min(size - moff, rnd.randrange(1, 4 * P))
                data = rnd.randbytes(ln)
                w = rnd.random() < 0.5

                def mm(s):
                    with mmap.mmap(fd[s], ln, offset=moff) as mp:
                        if w:
                            mp[:ln] = data
                            mp.flush()
                        return bytes(mp[:ln])
                res = t.both(mm)
                log.append("mmap %s fd%d %d+%d" % ("write" if w else "read", k, moff, ln))
            elif op == "direct":
                doff = off & ~(P - 1)
                w = writable and rnd.random() < 0.5
                data = rnd.randbytes(P)

                def dio(s):
                    path = t.paths[s]
                    dfd = os.open(path, (os.O_RDWR if w else os.O_RDONLY) | os.O_DIRECT)
                    buf = mmap.mmap(-1, P)
                    try:
                        if w:
                            buf[:] = data
                            return os.pwritev(dfd, [buf], doff)
                        got = os.preadv(dfd, [buf], doff)
                        return bytes(buf[:got])
                    finally:
                        os.close(dfd)
                        buf.close()
                try:
                    res = t.both(dio)
                except OSError:
                    res = [("skip", 0)] * 2
                log.append("O_DIRECT %s %d" % ("write" if w else "read", doff))
            elif op == "fsync":
                res = t.both(lambda s: os.fsync(fd[s]))
                log.append("fsync fd%d" % k)
            elif op == "reopen":
                if rnd.random() < 0.2:
                    while t.fds:  # no open left: the next may pass through
                        t.close(0)
                    log.append("close all")
                elif rnd.random() < 0.5 or len(t.fds) >= 4:
                    t.close(k)
                    log.append("close fd%d" % k)
                mode = rnd.choice([os.O_RDONLY, os.O_RDWR, os.O_RDWR, os.O_WRONLY | os.O_APPEND])
                t.open(mode)
                log.append("open %o" % mode)
                whole = [open(p, "rb").read() for p in t.paths]
                res = [("ok", whole[0]), ("ok", whole[1])]
            else:
                continue
            # O_DIRECT needs alignment and support on each filesystem alike
            if res[0] != res[1] and not (op == "direct" and "errno" in (res[0][0], res[1][0])):
                bad = (i, log[-1], res)
                break
        for i in range(len(t.fds) - 1, -1, -1):
            t.close(i)
        import json
        st = json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))
        diag("opens passed through: %d (passthrough %s)" % (st["passthrough_opens"],
                                                            "on" if st["passthrough"] else "off"))
        if bad:
            diag("operations before it: " + "; ".join(log[-15:]))
            r0, r1 = bad[2]
            ok(False, "operation %d (%s) as native: hsmfs %s, native %s (seed %d)" %
               (bad[0], bad[1], repr(r0)[:80], repr(r1)[:80], seed))
        else:
            ok(True, "%d operations as native (seed %d)" % (len(log), seed))
        eq(open(m.path("fsx"), "rb").read() == open(os.path.join(native, "fsx"), "rb").read(),
           True, "the whole file at the end")
        if hook:
            hook.close()
    import shutil
    shutil.rmtree(native, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


def fallocate(fd, mode, off, n):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, off, n) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return 0


main(lambda: (run_fsx(0), run_fsx(1)))
