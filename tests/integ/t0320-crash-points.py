#!/usr/bin/env python3
"""The durability order, crashed at every step.

A debug build's daemon counts the steps of its durability order (fs/fault.h:
data synced, ranges committed, fill copied, eviction recorded, bytes
punched) and, with HSMFS_CRASH_AT=N, _exits at the Nth.  This test runs a
mixed workload once to count its steps, then once per step N, crashing
there; after each crash it remounts and checks every byte and every state
against an oracle:
  - an acknowledged write (its fsync returned) is there, and its file dirty;
  - an unacknowledged one is either there or not, byte for byte;
  - every other byte is the origin's: nothing present is wrong.
"""
import errno
import mmap
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Hook, Mount, diag, eq, import_manifest, main, ok, skip,  # noqa: E402
                     tmpdir)

K64 = 64 << 10
SIZE_A, SIZE_B = 4 * K64, K64
UA, UB = b"USER-A", b"USER-B"
OFF_A, OFF_B, TRUNC_B = 70000, 1000, 3000


def dread(path, off, n):
    buf = mmap.mmap(-1, n)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        os.preadv(fd, [buf], off)
    finally:
        os.close(fd)


def fsync_path(path, flags=os.O_RDONLY):
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def workload(m, acked):
    """The operations, each made durable by an fsync; acked records which
    fsyncs returned.  Stops at the first failure (the daemon is gone)."""
    a, b = m.path("a"), m.path("b")
    dread(a, 0, K64)
    fsync_path(a)
    fd = os.open(b, os.O_WRONLY)
    os.pwrite(fd, UB, OFF_B)
    os.fsync(fd)
    os.close(fd)
    acked.add("b-write")
    os.setxattr(a, "user.hsmfs.evict", b"")
    fsync_path(a)
    dread(a, K64, 2 * K64)
    fsync_path(a)
    os.truncate(b, TRUNC_B)
    fsync_path(b, os.O_WRONLY)
    acked.add("b-truncate")
    fd = os.open(a, os.O_WRONLY)
    os.pwrite(fd, UA, OFF_A)
    os.fsync(fd)
    os.close(fd)
    acked.add("a-write")


def check(m, origin, acked, label):
    """Every byte and state against the oracle; returns a list of faults."""
    faults = []
    with open(m.path("a"), "rb") as f:
        ga = f.read()
    with open(m.path("b"), "rb") as f:
        gb = f.read()
    oa, ob = origin["a"], origin["b"]
    if len(ga) != SIZE_A:
        faults.append("a: size %d" % len(ga))
    for i in range(min(len(ga), SIZE_A)):
        if OFF_A <= i < OFF_A + len(UA):
            want = {UA[i - OFF_A]} if "a-write" in acked else {UA[i - OFF_A], oa[i]}
        else:
            want = {oa[i]}
        if ga[i] not in want:
            faults.append("a: byte %d is %r" % (i, ga[i]))
            break
    sizes = {TRUNC_B} if "b-truncate" in acked else {TRUNC_B, SIZE_B}
    if len(gb) not in sizes:
        faults.append("b: size %d, want one of %s" % (len(gb), sorted(sizes)))
    for i in range(len(gb)):
        if OFF_B <= i < OFF_B + len(UB):
            want = {UB[i - OFF_B]} if "b-write" in acked else {UB[i - OFF_B], ob[i]}
        else:
            want = {ob[i]}
        if gb[i] not in want:
            faults.append("b: byte %d is %r" % (i, gb[i]))
            break
    st = os.getxattr(m.path("b"), "user.hsmfs.state").decode()
    if "b-write" in acked and not st.startswith("dirty"):
        faults.append("b: state %s after an acknowledged write" % st)
    st = os.getxattr(m.path("a"), "user.hsmfs.state").decode()
    if "a-write" in acked and not st.startswith("dirty"):
        faults.append("a: state %s after an acknowledged write" % st)
    return faults


def one_run(origin, mirror, crash_at=None, log=None):
    """Import, run the workload (crashing at step crash_at), remount and
    check.  Returns (daemon status: 99 crashed at the step, 0 it ended
    before it; acked; faults)."""
    env = {}
    if crash_at:
        env["HSMFS_CRASH_AT"] = str(crash_at)
    if log:
        env["HSMFS_CRASH_LOG"] = log
    store = tmpdir("hsmfs-store-")
    acked = set()
    m = Mount(store=store, opts="chunk=64k,timeout=10", env=env)
    m.start()
    try:
        rc, out = import_manifest(m.mnt, [{"path": "a", "size": SIZE_A},
                                          {"path": "b", "size": SIZE_B}])
        if rc != 0:
            raise RuntimeError("import failed: %s" % out)
        with Hook(m.mnt, "--mirror", mirror):
            try:
                workload(m, acked)
            except OSError as e:
                if not crash_at or e.errno not in (errno.ENOTCONN, errno.ECONNABORTED,
                                                   errno.EIO):
                    raise
        status = m.exited(2)
        if status is None:
            status = m.stop()
    finally:
        m.cleanup()
    faults = []
    if status not in (0, 99):
        faults = ["daemon exited %s" % status]
    else:
        with Mount(store=store) as m2:
            with Hook(m2.mnt, "--mirror", mirror):
                faults = check(m2, origin, acked, crash_at)
    shutil.rmtree(store, ignore_errors=True)
    return status, acked, faults


def steps_of(log):
    try:
        with open(log) as f:
            return [l.split()[1] for l in f if l.strip()]
    except OSError:
        return []


def run():
    mirror = tmpdir("hsmfs-mirror-")
    origin = {"a": os.urandom(SIZE_A), "b": os.urandom(SIZE_B)}
    for n, d in origin.items():
        with open(os.path.join(mirror, n), "wb") as f:
            f.write(d)
    logdir = tmpdir("hsmfs-steps-")
    log = os.path.join(logdir, "dry")
    status, acked, faults = one_run(origin, mirror, log=log)
    steps = steps_of(log)
    if not steps:
        skip("crash at every durability step", "a release build has no crash points")
        return
    eq(faults, [], "the workload without a crash: every byte right")
    eq(acked, {"b-write", "b-truncate", "a-write"}, "every fsync acknowledged")
    diag("durability steps of the workload: %d (%s)" % (len(steps), " ".join(steps)))
    kinds = set()
    # one more than counted: the step order of the write-behind may vary by one
    for n in range(1, len(steps) + 2):
        log_n = os.path.join(logdir, "run%d" % n)
        status, acked, faults = one_run(origin, mirror, crash_at=n, log=log_n)
        seen = steps_of(log_n)
        if status == 0:
            eq(faults, [], "step %d: the workload ended before it (%d steps); every byte right"
               % (n, len(seen)))
            break
        at = seen[n - 1] if len(seen) >= n else "?"
        kinds.add(at)
        eq(faults, [], "crash at step %d (%s), acked %s: every byte and state right"
           % (n, at, sorted(acked)))
    for k in ("data-synced", "ranges-committed", "fill-copied", "evict-recorded",
              "evict-punched"):
        ok(k in kinds, "a crash at a '%s' step was tested" % k)
    shutil.rmtree(logdir, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


main(run)
