#!/usr/bin/env python3
"""find, du and tar over many files with a small descriptor limit.

The daemon runs with RLIMIT_NOFILE far below the number of files the
kernel remembers; an inode must not pin a descriptor, so find, du, tar
-c and tar -x through the mount all succeed and the daemon's open
descriptors stay bounded.  HSMFS_MANY sets the file count (the 'large'
suite runs 1 000 000 at the machine's own limit).
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Mount, diag, eq, main, ok, run, tmpdir

N = int(os.environ.get("HSMFS_MANY", "20000"))
NOFILE = int(os.environ.get("HSMFS_MANY_NOFILE", "256"))
PER_DIR = 1000


def populate(store):
    dirs = (N + PER_DIR - 1) // PER_DIR
    made = 0
    for d in range(dirs):
        dp = os.path.join(store, "dir%04d" % d)
        os.mkdir(dp)
        for i in range(min(PER_DIR, N - made)):
            fd = os.open(os.path.join(dp, "file%06d" % i), os.O_CREAT | os.O_WRONLY, 0o644)
            if i % 100 == 0:
                os.write(fd, b"x" * 5000)
            os.close(fd)
            made += 1
    return dirs


def daemon_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def test():
    store = tmpdir("hsmfs-store-")
    work = tmpdir("hsmfs-work-")
    try:
        dirs = populate(store)
        diag("%d files in %d directories, daemon RLIMIT_NOFILE %s" % (N, dirs, NOFILE or "default"))
        with Mount(store=store, rlimit_nofile=NOFILE or None) as m:
            rc, out = run(["find", m.mnt])
            eq((rc, len(out.splitlines())), (0, N + dirs + 1), "find lists every entry")
            rc, out = run(["find", m.mnt, "-type", "f", "-size", "+1k"])
            eq((rc, len(out.splitlines())), (0, (N + 99) // 100), "find -size stats every file")
            rc, out = run(["du", "-s", "--apparent-size", "-B1", m.mnt])
            ok(rc == 0 and int(out.split()[0]) >= ((N + 99) // 100) * 5000,
               "du sums the tree: " + out.strip())
            fds = daemon_fds(m.daemon_pid())
            ok(fds < (NOFILE or 20000), "daemon holds %d descriptors" % fds)

            tarball = os.path.join(work, "t.tar")
            rc, out = run(["tar", "-C", m.mnt, "-cf", tarball, "."])
            eq((rc, out), (0, ""), "tar -c of the whole tree")
            os.mkdir(m.path("copy"))
            rc, out = run(["tar", "-C", m.path("copy"), "-xf", tarball, "--exclude=./copy"])
            eq((rc, out), (0, ""), "tar -x of the whole tree into the mount")
            rc, out = run(["diff", "-r", m.path("dir0000"), m.path("copy", "dir0000")])
            eq(rc, 0, "extracted copy equals the original")
            rc, out = run(["find", m.path("copy"), "-type", "f"])
            eq(len(out.splitlines()), N, "extracted file count")
            fds = daemon_fds(m.daemon_pid())
            ok(fds < (NOFILE or 20000), "daemon still holds only %d descriptors" % fds)
            rc, out = run(["rm", "-rf", m.path("copy")])
            eq(rc, 0, "rm -rf of the copy")
    finally:
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(test)
