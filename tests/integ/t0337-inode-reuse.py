#!/usr/bin/env python3
"""A file a refresh drops keeps its inode number until its row is gone.

The store (ext4) gives a freed inode number to its next new file at once,
and a file's row in the database is keyed by that number.  A refresh
drops a file it made when the user's save took the name meanwhile (or
replaces or removes one); a file made through the mount between the
store's unlink and the row's removal (HSMFS_DELAY at listing-dropped holds
that window open) was given the dropped file's number, and the refresh
then removed the new file's row as the dropped one's: after a restart the
new file was no longer "new" (a write-back mount would never archive it),
and one that loaded the stale row first read it as a placeholder of
another size (EIO: t0335 saw that in CI).  Now the store keeps the number
until the row is gone.  The inode table's side of a reused number (a
removed file's inode still held) is test-engine's number_reused().
"""
import errno
import glob
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Mount, Nginx, diag, eq, main, ok, skip, steps,  # noqa: E402
                     tmpdir, wait_for, write_tree)
from archiving import HTTP, state  # noqa: E402

DELAY_MS = 2000


def read_or_errno(p):
    try:
        with open(p, "rb") as f:
            return f.read()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def test_row_of_a_dropped_file():
    """A refresh's file dropped for the user's save: its row outlives it."""
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    write_tree(root, {"c.txt": b"origin's c, version 1\n", "x.txt": b"x\n"})
    logdir = tmpdir("hsmfs-steps-")
    log = os.path.join(logdir, "steps")
    env = {"HSMFS_CRASH_LOG": log,
           "HSMFS_DELAY": "listing-made:%d,listing-dropped:%d" % (DELAY_MS, DELAY_MS)}
    store = tmpdir("hsmfs-store-")
    with Nginx(root) as ng, Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url()),
                                  env=env) as m:
        wait_for(lambda: m.logged("hook 'hsmfs-http'"), "hsmfs-http connected")
        eq(sorted(os.listdir(m.mnt)), ["c.txt", "x.txt"], "the root listed")
        with open(os.path.join(root, "c.txt"), "wb") as f:
            f.write(b"origin's c, version 2: another size " * 300)
        os.utime(os.path.join(root, "c.txt"), (1000000, 1000000))
        made0, dropped0 = steps(log, "listing-made"), steps(log, "listing-dropped")
        p = subprocess.Popen([HSMFSCTL, "refresh", m.mnt], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        try:
            try:
                wait_for(lambda: steps(log, "listing-made") > made0,
                         "the refresh's new file made", deadline=15)
            except TimeoutError:
                skip("a file made where a refresh dropped one",
                     "a release build has no delay points")
                return
            made = glob.glob(os.path.join(m.store, ".hsmfs", "refresh-*"))
            eq(len(made), 1, "the refresh made c.txt's new version in its state directory")
            dropped = os.stat(made[0]).st_ino
            # the user's save takes the name: the refresh drops its file
            tmp = m.path(".c.txt.tmp")
            with open(tmp, "wb") as f:
                f.write(b"the user's c\n")
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, m.path("c.txt"))
            wait_for(lambda: steps(log, "listing-dropped") > dropped0,
                     "the refresh's file dropped", deadline=15)
            mine = os.urandom(3000)
            with open(m.path("mine.bin"), "wb") as f:
                f.write(mine)
            reused = os.stat(m.path("mine.bin")).st_ino == dropped
            diag("the dropped file's inode %d; the new file's %d"
                 % (dropped, os.stat(m.path("mine.bin")).st_ino))
            got = read_or_errno(m.path("mine.bin"))
        finally:
            out = p.communicate(timeout=60)[0].decode(errors="replace")
        eq(p.returncode, 0, "hsmfsctl refresh: " + out.strip())
        ok(not reused, "the store gives no new file the number of a file a refresh "
           "dropped while its row is there")
        eq(got, mine, "a file made while a refresh drops another reads its own bytes")
        eq(read_or_errno(m.path("mine.bin")), mine, "and after the refresh")
        eq(read_or_errno(m.path("c.txt")), b"the user's c\n", "the user's save kept its name")
        mine_state = state(m, "mine.bin")
    with Nginx(root) as ng, Mount(store=store,
                                  opts="hook=%s,origin=%s" % (HTTP, ng.url())) as m2:
        eq((read_or_errno(m2.path("mine.bin")) == mine,
            state(m2, "mine.bin")), (True, mine_state),
           "the new file's bytes and state (%s) outlive the daemon: its row is its own"
           % mine_state)
    shutil.rmtree(logdir, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test():
    test_row_of_a_dropped_file()


main(test)
