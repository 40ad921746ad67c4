#!/usr/bin/env python3
"""Data integrity under concurrency, checked against an in-memory model.

Threads do random pwrite, pread, truncate, fsync and reopen on a set of
files through the mount, each operation under the file's model lock so
the model is exact.  Every read is checked, and after unmount the store
files must equal the model byte for byte.  Bounded in operations, not
time, so the run is the same on a slow machine (seed printed).
"""
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Mount, diag, eq, main, ok, tmpdir

FILES = 8
THREADS = 8
OPS = int(os.environ.get("HSMFS_STRESS_OPS", "1200"))
MAXSIZE = 3 << 20


def test():
    seed = int(os.environ.get("HSMFS_SEED", random.randrange(1 << 30)))
    diag("seed %d (set HSMFS_SEED to repeat)" % seed)
    for opts in ("", "writeback"):
        diag("mount options: %r" % opts)
        stress(seed, opts)


def stress(seed, opts):
    store = tmpdir("hsmfs-store-")
    model = [bytearray() for _ in range(FILES)]
    locks = [threading.Lock() for _ in range(FILES)]
    errors = []

    with Mount(store=store, opts=opts) as m:
        names = [m.path("f%d" % i) for i in range(FILES)]
        for n in names:
            open(n, "wb").close()

        def worker(tid):
            rnd = random.Random(seed * 100 + tid)
            fds = {}
            try:
                for _ in range(OPS):
                    i = rnd.randrange(FILES)
                    with locks[i]:
                        fd = fds.get(i)
                        if fd is None or rnd.random() < 0.02:
                            if fd is not None:
                                os.close(fd)
                            fd = fds[i] = os.open(names[i], os.O_RDWR)
                        op = rnd.random()
                        cur = model[i]
                        if op < 0.45:
                            off = rnd.randrange(0, MAXSIZE - 1)
                            ln = rnd.choice([1, 17, 4096, 4097, 65536, 200000])
                            ln = min(ln, MAXSIZE - off)
                            data = rnd.randbytes(ln)
                            eq_n = os.pwrite(fd, data, off)
                            if eq_n != ln:
                                errors.append("short write %d/%d" % (eq_n, ln))
                            if off > len(cur):
                                cur.extend(b"\0" * (off - len(cur)))
                            cur[off:off + ln] = data
                        elif op < 0.85:
                            off = rnd.randrange(0, max(1, len(cur) + 100))
                            ln = rnd.choice([1, 4096, 70000, 1 << 20])
                            got = os.pread(fd, ln, off)
                            want = bytes(cur[off:off + ln])
                            if got != want:
                                errors.append("file %d read %d@%d: mismatch" % (i, ln, off))
                        elif op < 0.95:
                            size = rnd.randrange(0, MAXSIZE)
                            os.ftruncate(fd, size)
                            if size < len(cur):
                                del cur[size:]
                            else:
                                cur.extend(b"\0" * (size - len(cur)))
                        else:
                            os.fsync(fd) if rnd.random() < 0.5 else os.fdatasync(fd)
                        if os.fstat(fd).st_size != len(cur):
                            errors.append("file %d size %d, model %d" %
                                          (i, os.fstat(fd).st_size, len(cur)))
            except Exception as e:
                errors.append("thread %d: %r" % (tid, e))
            finally:
                for fd in fds.values():
                    os.close(fd)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ok(not errors, "%s: %d threads x %d ops: every read and size matched the model"
           % (opts or "default", THREADS, OPS))
        for e in errors[:10]:
            diag(e)
        for i, n in enumerate(names):
            with open(n, "rb") as f:
                if f.read() != bytes(model[i]):
                    ok(False, "file %d through the mount equals model" % i)
                    break
        else:
            ok(True, "all files through the mount equal the model")
    for i in range(FILES):
        with open(os.path.join(store, "f%d" % i), "rb") as f:
            if f.read() != bytes(model[i]):
                ok(False, "store file %d equals model after unmount" % i)
                break
    else:
        ok(True, "store files equal the model after unmount")
    import shutil
    shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main(test)
