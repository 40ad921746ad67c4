#!/usr/bin/env python3
"""Unmount, then mount the same store at once (xfstests generic/604, 259).

umount(2) returns while the daemon (and the keeper, which holds the
store's lock for the daemons it starts) still winds down, the lock
STORE/.hsmfs/lock held: the next `hsmfs STORE MNT` was refused with
"already mounted by another hsmfs".  It now waits for a holder whose
mount is gone (a bounded few seconds); a store mounted elsewhere is
still refused:
  1. umount(8), then hsmfs at once, in a tight loop: every mount works;
  2. the same with fusermount3 -u, and with -o norestart (no keeper);
  3. as an unprivileged user (fusermount3), when this machine can;
  4. the store mounted at another mountpoint: refused after a second
     (STORE_LIVE_WAIT_MS: an unmount of it may be under way).
"""
import os
import pwd
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFS, diag, eq, is_mounted, is_root, main, ok, skip, tmpdir, unmount  # noqa: E402

ROUNDS = 8


def mount(store, mnt, opts="", user=None):
    cmd = [HSMFS, store, mnt] + (["-o", opts] if opts else [])
    if user:
        cmd = ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
               "--clear-groups", "--"] + cmd
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout.strip()


def umount(mnt, how, user=None):
    cmd = ["umount", mnt] if how == "umount" else ["fusermount3", "-u", mnt]
    if user:
        cmd = ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
               "--clear-groups", "--"] + cmd
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT).returncode


def as_user(user, cmd):
    if user:
        cmd = ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
               "--clear-groups", "--"] + cmd
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT).returncode


def daemon_gone(store, deadline=20):
    """Wait until the store's lock is free (its last holder exited)."""
    import fcntl
    end = time.monotonic() + deadline
    try:
        fd = os.open(os.path.join(store, ".hsmfs", "lock"), os.O_RDONLY)
    except FileNotFoundError:
        return True  # never mounted
    try:
        while time.monotonic() < end:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                time.sleep(0.02)
        return False
    finally:
        os.close(fd)


def loop(what, how, opts="", user=None, d=None):
    d = d or tmpdir("hsmfs-remount-")
    store, mnt = os.path.join(d, "store"), os.path.join(d, "mnt")
    for p in (store, mnt):
        os.makedirs(p, exist_ok=True)
        if user:
            os.chown(p, user.pw_uid, user.pw_gid)
    fails = []
    try:
        rc, out = mount(store, mnt, opts, user)
        if not eq(rc, 0, "%s: the first mount (%s)" % (what, out)):
            return
        for i in range(ROUNDS):
            # something for the daemon to wind down: a file written
            as_user(user, ["dd", "if=/dev/zero", "of=" + os.path.join(mnt, "f%d" % i),
                           "bs=64k", "count=1", "status=none"])
            urc = umount(mnt, how, user)
            t0 = time.monotonic()
            rc, out = mount(store, mnt, opts, user)
            if urc or rc:
                fails.append((i, urc, rc, out, round(time.monotonic() - t0, 2)))
                if rc:
                    break
        eq(fails, [], "%s: %d rounds of %s then mount at once" % (what, ROUNDS, how))
        ok(fails or all(as_user(user, ["test", "-s", os.path.join(mnt, "f%d" % i)]) == 0
                        for i in range(ROUNDS)),
           "%s: every file written is there" % what)
    finally:
        if is_mounted(mnt):
            umount(mnt, how, user)
        ok(daemon_gone(store), "%s: the last daemon exited" % what)
        if is_mounted(mnt):
            unmount(mnt, lazy=True)
        shutil.rmtree(d, ignore_errors=True)


def test_elsewhere():
    d = tmpdir("hsmfs-remount-")
    store, a, b = (os.path.join(d, n) for n in ("store", "a", "b"))
    for p in (store, a, b):
        os.mkdir(p)
    try:
        eq(mount(store, a)[0], 0, "mounted at a")
        t0 = time.monotonic()
        rc, out = mount(store, b)
        took = time.monotonic() - t0
        ok(rc != 0 and "already mounted" in out,
           "the store mounted at a: a mount at b is refused (%s)" % out)
        ok(took < 2.5, "after a second's wait at most: an unmount may be under way "
           "(%.2f s)" % took)
        ok(not is_mounted(b), "nothing mounted at b")
    finally:
        umount(a, "umount")
        ok(daemon_gone(store), "the daemon exited")
        shutil.rmtree(d, ignore_errors=True)


def unprivileged_user():
    """A user that can mount with fusermount3, or None."""
    if not is_root() or not shutil.which("setpriv"):
        return None
    try:
        u = pwd.getpwnam("nobody")
    except KeyError:
        return None
    fm = shutil.which("fusermount3")
    if not fm or not os.stat(fm).st_mode & 0o4000:
        return None
    return u


def all_tests():
    if not is_root():
        skip("umount(8) then mount, as root", "not root")
    else:
        loop("umount(8)", "umount")
        loop("norestart", "umount", opts="norestart")
    loop("fusermount3 -u", "fusermount3")
    u = unprivileged_user()
    if u is None:
        skip("an unprivileged user's umount then mount", "no setpriv, nobody or setuid fusermount3")
    else:
        base = tmpdir("hsmfs-remount-user-")
        os.chmod(base, 0o755)
        d = os.path.join(base, "d")
        os.mkdir(d)
        os.chown(d, u.pw_uid, u.pw_gid)
        loop("unprivileged", "fusermount3", user=u, d=d)
        shutil.rmtree(base, ignore_errors=True)
    test_elsewhere()
    diag("rounds: %d each" % ROUNDS)


if __name__ == "__main__":
    main(all_tests)
