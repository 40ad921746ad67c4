#!/usr/bin/env python3
"""The durability order, crashed at every step.

A debug build's daemon counts the steps of its durability order (fs/fault.h:
data synced, ranges committed, fill copied, eviction recorded, bytes
punched) and, with HSMFS_CRASH_AT=NAME:K, _exits at the Kth step NAME.
This test runs a mixed workload once to count its steps, then once per
step, crashing there (each kind's Kth, so that a run whose write-behind
batches fell otherwise still crashes at the kind it is for); after each
crash it remounts and checks every byte and every state against an
oracle:
  - an acknowledged write (its fsync returned) is there, and its file dirty;
  - an unacknowledged one is either there or not, byte for byte;
  - every other byte is the origin's: nothing present is wrong.
"""
import errno
import os
import shutil
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Hook, Mount, diag, dread, eq, evict_closed, import_manifest, main, ok,  # noqa: E402
                     skip, tmpdir, wait_for)

K64 = 64 << 10
SIZE_A, SIZE_B = 4 * K64, K64
UA, UB = b"USER-A", b"USER-B"
OFF_A, OFF_B, TRUNC_B = 70000, 1000, 3000


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
    res = evict_closed(a)
    if res:
        raise OSError(res, os.strerror(res))
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
    for kind in sorted(set(steps)):
        # one more of each: the write-behind may batch differently
        for k in range(1, steps.count(kind) + 2):
            log_n = os.path.join(logdir, "%s-%d" % (kind, k))
            status, acked, faults = one_run(origin, mirror, crash_at="%s:%d" % (kind, k),
                                            log=log_n)
            seen = steps_of(log_n)
            if status == 0:
                eq(faults, [], "%s %d: the workload ended before it (%d of them); every byte "
                   "right" % (kind, k, seen.count(kind)))
                break
            ok(seen.count(kind) == k and seen[-1] == kind,
               "crashed at %s %d (the run's step %d)" % (kind, k, len(seen)))
            kinds.add(kind)
            eq(faults, [], "crash at %s %d, acked %s: every byte and state right"
               % (kind, k, sorted(acked)))
    for k in ("data-synced", "ranges-committed", "fill-copied", "evict-recorded",
              "evict-punched"):
        ok(k in kinds, "a crash at a '%s' step was tested" % k)
    shutil.rmtree(logdir, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


def test_fsync_during_batch():
    """An fsync that comes while the write-behind holds a batch with its
    file returns: the file goes into the next batch.  The writer's delay
    at the step after it took its batch (HSMFS_DELAY) holds the batch
    open; the step's log line says when.  The batch is one the writer
    took by itself (its gathering ended), as in the workload above, where
    an fsync of b that came just then hung."""
    logdir, store = tmpdir("hsmfs-steps-"), tmpdir("hsmfs-store-")
    try:
        log = os.path.join(logdir, "log")
        hung = True
        with Mount(store=store, opts="timeout=10",
                   env={"HSMFS_CRASH_LOG": log, "HSMFS_DELAY": "batch-taken:1500"}) as m:
            rc, out = import_manifest(m.mnt, [{"path": "f", "size": K64}])
            if rc != 0:
                raise RuntimeError("import failed: %s" % out)
            # whole pages of a placeholder: no fill, and the file stays
            # partial (a file that becomes whole is queued again for its mark)
            fd = os.open(m.path("f"), os.O_WRONLY)
            try:
                os.pwrite(fd, b"x" * 4096, 0)
                taken = steps_of(log).count("batch-taken")
                os.pwrite(fd, b"y" * 4096, 4096)
                try:
                    wait_for(lambda: steps_of(log).count("batch-taken") > taken,
                             "the writer took a batch", deadline=10)
                except TimeoutError:
                    skip("an fsync while a batch is written", "a release build has no delay points")
                    return
                done = {}

                def fsync():
                    try:
                        os.fsync(fd)
                        done["fsync"] = 0
                    except OSError as e:
                        done["fsync"] = e.errno

                t = threading.Thread(target=fsync)
                t.start()
                t.join(15)
                hung = t.is_alive()
                if hung:
                    m.kill()  # the fsync fails then, and the test ends
                    t.join(15)
                ok(not hung, "an fsync while the writer holds a batch returns (%r)" % done)
                eq(done, {"fsync": 0}, "and is acknowledged")
            finally:
                try:
                    os.close(fd)
                except OSError:
                    pass  # the daemon was killed: its connection is gone
        if not hung:
            with Mount(store=store) as m2:
                eq(dread(m2.path("f"), 0, 8192), b"x" * 4096 + b"y" * 4096,
                   "after a remount: both writes")
                st = os.getxattr(m2.path("f"), "user.hsmfs.state").decode()
                ok(st.startswith("dirty"), "and the file dirty (%s)" % st)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)


main(lambda: (run(), test_fsync_during_batch()))
