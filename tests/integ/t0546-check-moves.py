#!/usr/bin/env python3
"""The consistency check after an unclean stop, while the user renames.

After a kill -9 of the daemon, the next one walks the store in the
background (check.h) and deletes the rows of files it does not find.
The mount serves meanwhile.  A file renamed from a directory the walk
has not read yet into one it has read is not found by that walk, though
it is there: before, its row was deleted (t0545 seeds 301281633 and
276389831, "23 gone" in one check of seed 498126140), and

1. on a mount that archives, the file's move was dropped: its object
   stayed under the old name at the origin, the mount's file was never
   archived again, and hsmfsctl sync exited 0 with the origin different
   (a new file was never archived at all);
2. on a lazy mount, a file not fetched yet lost its state: its reads
   failed where the origin's bytes were to be fetched.

Each daemon sleeps 1.5 s after the check walked each directory (a debug
build's delay point check-dir).  The store's root holds x/ and y/; once
the walk has read one of them, x/f moves to y/ and y/g to x/: whichever
was read first, one file moves into it, unseen.  The check must find
every file (no row gone).  The store is then mounted again, and each
file renamed and changed once more: the origin equals the mount after a
sync (1); or read: every byte is the origin's (2).
"""
import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Mount, Nginx, eq, main, ok, run, skip, tmpdir,  # noqa: E402
                     wait_for)

from archiving import DAV, HTTP, differences, get, tree  # noqa: E402

F = b"the file that starts in x\n" * 300
G = b"the file that starts in y\n" * 500


def write_synced(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def moved_during_check(archives):
    """1 (archives) or 2.  False if this build has no delay points."""
    what = "archived" if archives else "lazy"
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o777)
    data = os.path.join(root, "data")
    for d in ("", "x", "y") if not archives else ("",):
        os.makedirs(os.path.join(data, d), exist_ok=True)
        os.chmod(os.path.join(data, d), 0o777)
    if not archives:
        with open(os.path.join(data, "x", "f"), "wb") as f:
            f.write(F)
        with open(os.path.join(data, "y", "g"), "wb") as f:
            f.write(G)
    store, logdir = tmpdir("hsmfs-store-"), tmpdir("hsmfs-steps-")
    steps = os.path.join(logdir, "steps")

    def walked():
        try:
            with open(steps) as f:
                return f.read().count(" check-dir\n")
        except OSError:
            return 0
    try:
        with Nginx(root, extra=DAV) as ng:
            opts = "hook=%s,origin=%s" % (HTTP, ng.url("data/"))
            if archives:
                opts += ",archive_after=0"
            with Mount(store=store, opts=opts,
                       env={"HSMFS_DELAY": "check-dir:1500", "HSMFS_CRASH_LOG": steps}) as m:
                m.restarts_expected = True
                if archives:
                    os.mkdir(m.path("x"))
                    os.mkdir(m.path("y"))
                    write_synced(m.path("x", "f"), F)
                    write_synced(m.path("y", "g"), G)
                    rc, out = run([HSMFSCTL, "sync", m.mnt])
                    eq(rc, 0, "%s: both files archived (%s)" % (what, out.strip()))
                else:
                    # listed: their rows are placeholders, no byte fetched
                    eq(sorted(os.listdir(m.path("x")) + os.listdir(m.path("y"))), ["f", "g"],
                       "%s: both files listed" % what)
                old = m.daemon_pid()
                os.kill(old, signal.SIGKILL)
                wait_for(lambda: m.daemon_pid() not in (old, m.proc.pid), "the next daemon")
                try:
                    wait_for(lambda: walked() >= 1, "the check inside its walk", deadline=10)
                except TimeoutError:
                    return False
                # one of x and y is read, the other not yet: a file moves each way
                os.rename(m.path("x", "f"), m.path("y", "f2"))
                os.rename(m.path("y", "g"), m.path("x", "g2"))
                ok(m.logged("consistency check after an unclean stop"), "%s: the check ended"
                   % what)
                said = [ln for ln in m.output().splitlines()
                        if "consistency check after an unclean stop" in ln]
                ok(said and " 0 gone" in said[-1],
                   "%s: the check found both files, moved during its walk (%s)" %
                   (what, said[-1] if said else "no line"))
            # the next mount of the store (its state read from the rows)
            with Mount(store=store, opts=opts) as m:
                if archives:
                    # changed again: a file without its row is never archived again
                    for a, b in (("y/f2", "y/f3"), ("x/g2", "x/g3")):
                        os.rename(m.path(a), m.path(b))
                        with open(m.path(b), "ab") as f:
                            f.write(b"and changed once moved\n")
                    rc, out = run([HSMFSCTL, "sync", m.mnt])
                    eq(rc, 0, "%s: hsmfsctl sync exits 0 (%s)" % (what, out.strip()))
                    eq(differences(tree(data), tree(m.mnt)), [],
                       "%s: then the origin equals the mount, names and bytes" % what)
                else:
                    got = []
                    for p, want in ((m.path("y", "f2"), F), (m.path("x", "g2"), G)):
                        try:
                            got.append(get(p) == want)
                        except OSError as e:
                            got.append(str(e))
                    eq(got, [True, True], "%s: each moved file reads as the origin's bytes"
                       % what)
    finally:
        for d in (root, store, logdir):
            shutil.rmtree(d, ignore_errors=True)
    return True


def test():
    for archives in (True, False):
        if not moved_during_check(archives):
            skip("renamed during the check", "a release build has no delay points")
            return


if __name__ == "__main__":
    main(test)
