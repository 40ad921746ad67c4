#!/usr/bin/env python3
"""Per-file state survives remounts, renames, links, truncates and crashes.

After kill -9 of the daemon (or of the hook) at random moments while many
ranges are being filled, a remount must serve exactly the origin's bytes:
every range the database calls present really is on disk, and the rest
is fetched again.  A corrupt database must not turn placeholders into
files of zeros.
"""
# prefetch=0 on every mount here: these tests count events, parked
# requests and file states exactly; sibling prefetch (t0400) adds its own.

import os
import random
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Hook, Mount, diag, eq, import_manifest, main, ok,
                     run, tmpdir, wait_for)  # noqa: E402

P = 4096
ROUNDS = int(os.environ.get("HSMFS_CRASH_ROUNDS", "20"))

READER = r"""
import os, random, sys
path, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
while True:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    off = rnd.randrange(0, size // 4096) * 4096
    os.pread(fd, 4096, off)
    os.close(fd)
"""


def present(p):
    return int(os.getxattr(p, "user.hsmfs.present"))


def state(p):
    return os.getxattr(p, "user.hsmfs.state").decode()


def test_remount():
    store, mirror = tmpdir("hsmfs-store-"), tmpdir("hsmfs-mirror-")
    data = os.urandom(8 << 20)
    for n in ("a", "b", "c", "d", "e"):
        with open(os.path.join(mirror, n), "wb") as f:
            f.write(data)
    with Mount(opts="prefetch=0", store=store) as m:
        rc, out = import_manifest(m.mnt, [{"path": n, "size": len(data)} for n in "abcde"])
        eq(rc, 0, "import")
        with Hook(m.mnt, "--mirror", mirror):
            for n in "abcde":
                with open(m.path(n), "rb") as f:
                    f.seek(3 << 20)
                    f.read(100)
            # the rest of each chunk is fetched once its read is served
            wait_for(lambda: "fetching" not in run([HSMFSCTL, "status", m.mnt])[1],
                     "the fills beside the reads")
        before = {n: present(m.path(n)) for n in "abcde"}
        ok(all(0 < v < len(data) for v in before.values()), "partial reads: partly present")
        os.rename(m.path("b"), m.path("b2"))
        os.link(m.path("c"), m.path("c2"))
        os.truncate(m.path("d"), 1 << 20)
        with open(m.path("e"), "r+b") as f:
            f.seek(6 << 20)
            f.write(b"local change")
        rc, out = run([HSMFSCTL, "status", m.mnt])
        st_before = out.replace(m.mnt, "MNT")
    with Mount(opts="prefetch=0", store=store) as m:
        eq(present(m.path("a")), before["a"], "after remount: exactly the bytes read are present")
        eq(state(m.path("a")), "partial", "after remount: still partial")
        eq(present(m.path("b2")), before["b"], "state followed the rename")
        eq(present(m.path("c2")), before["c"], "state seen through a hard link")
        eq((state(m.path("d")), os.stat(m.path("d")).st_size), ("dirty", 1 << 20),
           "truncated file: dirty, new size")
        eq(state(m.path("e")), "dirty", "written file stays dirty")
        rc, out = run([HSMFSCTL, "status", m.mnt])
        eq(out.replace(m.mnt, "MNT"), st_before, "hsmfsctl status is the same before and after remount")
        with Hook(m.mnt, "--mirror", mirror) as h:
            with open(m.path("a"), "rb") as f:
                eq(f.read(), data, "a partial file completes from the origin")
            with open(m.path("e"), "rb") as f:
                got = f.read()
            eq(got[6 << 20:(6 << 20) + 12], b"local change", "a dirty file keeps the local change")
            eq(got[:6 << 20], data[:6 << 20], "and fetches the rest")
            with open(m.path("d"), "rb") as f:
                eq(f.read(), data[:1 << 20], "truncated file reads its kept part from the origin")
        os.unlink(m.path("c"))
        eq(state(m.path("c2")), "partial", "unlinking one link keeps the state")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


def crash_round(store, mirror, data, seed, kill_what):
    rnd = random.Random(seed)
    m = Mount(store=store, opts="chunk=64k,timeout=2")
    m.start()
    readers = []
    hook = Hook(m.mnt, "--mirror", mirror)
    try:
        readers = [subprocess.Popen([sys.executable, "-c", READER, m.path("big"),
                                     str(len(data)), str(seed * 10 + k)],
                                    stderr=subprocess.DEVNULL) for k in range(4)]
        time.sleep(rnd.uniform(0.02, 0.4))  # a random moment, by design
        if kill_what == "daemon":
            m.kill()
            m.proc.wait()
        else:
            hook.kill()
    finally:
        for r in readers:
            r.kill()
            r.wait()
        hook.close()
        if kill_what == "daemon":
            m.cleanup()
        else:
            rc = m.stop()
            log = m.output()
            m.cleanup()
            if rc != 0:
                return "daemon exited %d after the hook was killed:\n%s" % (rc, log[-3000:])
    return None


def test_crash():
    store, mirror = tmpdir("hsmfs-store-"), tmpdir("hsmfs-mirror-")
    data = os.urandom(16 << 20)
    with open(os.path.join(mirror, "big"), "wb") as f:
        f.write(data)
    with Mount(opts="prefetch=0", store=store) as m:
        eq(import_manifest(m.mnt, [{"path": "big", "size": len(data)}])[0], 0, "import")
    seed = random.randrange(1 << 30)
    diag("crash seed %d" % seed)
    bad = []
    for r in range(ROUNDS):
        what = "daemon" if r % 2 == 0 else "hook"
        err = crash_round(store, mirror, data, seed + r, what)
        if err:
            bad.append(err)
        with Mount(opts="prefetch=0", store=store) as m:
            pr = present(m.path("big"))
            with Hook(m.mnt, "--mirror", mirror):
                with open(m.path("big"), "rb") as f:
                    if f.read() != data:
                        bad.append("round %d (%s killed, %d bytes present): wrong bytes"
                                   % (r, what, pr))
            # back to a placeholder for the next round
        with Mount(opts="prefetch=0", store=store) as m:
            pass
        eq_r = run([HSMFSCTL, "import", "-s", store, "/dev/null"])
        subprocess.run(["sqlite3", os.path.join(store, ".hsmfs", "meta.db"),
                        "UPDATE files SET present = x'', state = 1"], check=False)
        os.truncate(os.path.join(store, "big"), 0)
        os.truncate(os.path.join(store, "big"), len(data))
    ok(not bad, "%d crash rounds (daemon and hook killed in turn): every byte right" % ROUNDS)
    for b in bad[:5]:
        diag(b)
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


def test_unclean():
    store, mirror = tmpdir("hsmfs-store-"), tmpdir("hsmfs-mirror-")
    data = os.urandom(4 << 20)
    for n in "abc":
        with open(os.path.join(mirror, n), "wb") as f:
            f.write(data)
    m = Mount(opts="prefetch=0", store=store)
    m.start()
    try:
        eq(import_manifest(m.mnt, [{"path": n, "size": len(data)} for n in "abc"])[0], 0, "import")
        with Hook(m.mnt, "--mirror", mirror):
            for n in "bc":
                with open(m.path(n), "rb") as f:
                    f.read(4096)
        wait_for(lambda: run(["sqlite3", os.path.join(store, ".hsmfs", "meta.db"),
                              "SELECT count(*) FROM files WHERE state = 2"])[1].strip() == "2",
                 "partial state committed")
        m.kill()
        m.proc.wait()
    finally:
        m.cleanup()
    # behind hsmfs's back: one file gone, one changed
    os.unlink(os.path.join(store, "a"))
    with open(os.path.join(store, "b"), "ab") as f:
        f.write(b"more")
    with Mount(opts="prefetch=0", store=store) as m:
        line = wait_for(lambda: [l for l in m.output().splitlines() if "consistency check" in l],
                        "the consistency check's log line")
        eq(line[0].split(": ", 2)[-1], "3 files, 1 gone, 1 changed and fetched again, "
           "0 kept as changed on the mount, 0 left to a removal resent",
           "unclean stop: the check found the gone and the changed file")
        eq(run(["sqlite3", os.path.join(store, ".hsmfs", "meta.db"),
                "SELECT count(*) FROM files"])[1].strip(), "2", "the gone file's row is deleted")
        eq((state(m.path("b")), present(m.path("b"))), ("placeholder", 0),
           "the changed placeholder is fetched again, nothing trusted")
        eq(state(m.path("c")), "partial", "the untouched file keeps its state")
    with Mount(opts="prefetch=0", store=store) as m:
        ok("consistency check" not in m.output(), "after a clean unmount no check runs")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


def test_corrupt():
    for how in ("truncated", "garbage"):
        store, mirror = tmpdir("hsmfs-store-"), tmpdir("hsmfs-mirror-")
        data = os.urandom(1 << 20)
        with open(os.path.join(mirror, "f"), "wb") as f:
            f.write(data)
        with Mount(opts="prefetch=0", store=store) as m:
            eq(import_manifest(m.mnt, [{"path": "f", "size": len(data), "url": "u1",
                                        "version": "v1"}])[0], 0, "import")
        db = os.path.join(store, ".hsmfs", "meta.db")
        with open(db, "r+b") as f:
            if how == "truncated":
                f.truncate(100)
            else:
                f.write(os.urandom(4096))
        for sfx in ("-wal", "-shm"):
            if os.path.exists(db + sfx):
                os.unlink(db + sfx)
        with Mount(opts="prefetch=0", store=store) as m:
            log = m.output()
            eq(len([l for l in log.splitlines() if "corrupt" in l]), 1,
               "%s database: one log line" % how)
            eq(state(m.path("f")), "placeholder", "%s database: the file is still a placeholder" % how)
            with Hook(m.mnt, "--mirror", mirror) as h:
                with open(m.path("f"), "rb") as f:
                    eq(f.read(), data, "%s database: data refetched, no zeros served" % how)
                ok(h.events(), "%s database: the bytes came from the hook" % how)
        ok(any(n.startswith("meta.db.corrupt-") for n in os.listdir(os.path.join(store, ".hsmfs"))),
           "%s database moved aside" % how)
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(mirror, ignore_errors=True)


if __name__ == "__main__":
    main(lambda: (test_remount(), test_crash(), test_unclean(), test_corrupt()))
