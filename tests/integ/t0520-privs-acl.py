#!/usr/bin/env python3
"""Privileges, ACLs, atime and remount as the kernel's own filesystems
keep them (#48 item 3: xfstests generic/355, 683-685, 375, 099, 319,
444, 120, 294, 306, 452), each run on a native directory and on the
mount, and compared:
  1. a change by a user without CAP_FSETID drops set-ID bits (write,
     O_DIRECT write, fallocate, punch hole, zero range, copy_file_range,
     truncate, an open for writing of a file that passes through), and
     a stat asking for the mode alone (statx STATX_MODE, as `stat -c %a`)
     sees it at once, not the mode the kernel cached for attr_timeout;
     root's change keeps them; on a root mount and on a mount made by a
     user (the daemon runs as nobody);
  2. an access ACL set by the owner outside the file's group drops
     set-group-ID;
  3. a directory's default ACL decides the mode of what is made in it
     (create, mkdir, mknod), not the umask; without one the umask does;
  4. noatime: a read and a listing the daemon serves leave the access
     time as it was (a file read in passthrough mode: as the store's mount says);
     relatime, strictatime and atime are accepted;
  5. mount -o remount,ro and remount,rw (mount(8), mount.fuse3, hsmfs)
     make the mount read-only and writable again; a user's mount refuses
     a remount in one line with its own exit status.
Root only for most: another user, allow_other, ACLs, mount(8).
"""
import ctypes
import errno
import mmap
import os
import shutil
import stat
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, Mount, diag, eq, in_child, is_mounted, is_root, main, ok,  # noqa: E402
                     run, skip, tmpdir, tmpfs, tmpfs_drop)

NOBODY = 65534
OTHER_GID = 4242  # a group nobody is not in
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 1, 2, 0x10
EXIT_REMOUNT = 7  # hsmfs(8) EXIT STATUS


def statx_mode(path):
    """The mode as statx(STATX_MODE) gives it: asking for nothing else,
    the kernel answers from its cache while the attributes last."""
    buf = ctypes.create_string_buffer(256)
    if libc.statx(-100, path.encode(), 0, 0x2, buf):  # AT_FDCWD, STATX_MODE
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return struct.unpack_from("<H", buf.raw, 28)[0]


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# ------------------------------------------------------------ 1. set-ID

def change(p, how, src):
    """Change the file p as how says; runs in the child."""
    if how == "truncate":
        os.truncate(p, 10)
        return "done"
    fd = os.open(p, os.O_WRONLY | (os.O_DIRECT if how == "odirect" else 0))
    try:
        if how in ("write", "pt-open"):
            os.pwrite(fd, b"y", 100)
        elif how == "odirect":
            buf = mmap.mmap(-1, 4096)  # page-aligned
            buf.write(b"z" * 4096)
            os.pwrite(fd, buf, 0)
        elif how == "falloc":
            fallocate(fd, 0, 0, 16384)
        elif how == "punch":
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096)
        elif how == "zero":
            fallocate(fd, FALLOC_FL_ZERO_RANGE, 0, 4096)
        elif how == "copy":
            s = os.open(src, os.O_RDONLY)
            try:
                os.copy_file_range(s, fd, 100)
            finally:
                os.close(s)
    finally:
        os.close(fd)
    return "done"


KINDS = ("write", "odirect", "falloc", "punch", "zero", "copy", "truncate", "pt-open")


def killpriv_case(d, who, owner=None):
    """Each kind of change of a set-ID file by who: the mode statx
    (STATX_MODE) shows right after, the full stat's, and the child's
    result.  owner: the files' owner (None: root)."""
    src = os.path.join(d, "src")
    with open(src, "wb") as f:
        f.write(b"s" * 8192)
    os.chmod(src, 0o644)
    cases = [(how, 0o6777) for how in KINDS] + \
        [(how, 0o6666) for how in ("write", "falloc", "copy")]
    out = {}
    for how, mode in cases:
        name = "%s-%o" % (how, mode)
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(b"x" * 8192)
        if owner is not None:
            os.chown(p, owner, owner)
        os.chmod(p, mode)
        statx_mode(p)  # the kernel caches it
        # on the mount the inode passes through, where the kernel can
        held = os.open(p, os.O_RDONLY) if how == "pt-open" else -1
        try:
            res = in_child(lambda: change(p, how, src), uid=who,
                           gid=None if who is None else who)
        finally:
            if held >= 0:
                os.close(held)
        out[name] = (res, oct(statx_mode(p)), oct(os.stat(p).st_mode))
    return out


def test_killpriv(native):
    with Mount(opts="allow_other") as m:
        os.chmod(m.dir, 0o755)  # nobody must reach the mountpoint
        os.chmod(m.mnt, 0o777)
        want = killpriv_case(native, NOBODY)
        got = killpriv_case(m.mnt, NOBODY)
        for k in want:
            eq(got.get(k), want[k], "a change by nobody (%s): set-ID bits as native" % k)
        shutil.rmtree(native)
        os.mkdir(native)
        for k, v in killpriv_case(m.mnt, None).items():
            eq(v, killpriv_case_native_root[k], "the same by root (%s): kept" % k)


class UserMount(Mount):
    """A mount made by nobody: the daemon runs as nobody, through fusermount3."""

    def __init__(self, **kw):
        super().__init__(**kw)
        for p in (self.dir, self.store, self.mnt):
            os.chown(p, NOBODY, NOBODY)

    def cmdline(self):
        return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                "--"] + super().cmdline()


def test_killpriv_user(native):
    """nobody's own mount, nobody's files, nobody changes them."""
    os.chown(native, NOBODY, NOBODY)
    with UserMount() as m:
        want = in_child(lambda: killpriv_case(native, None), uid=NOBODY, gid=NOBODY)
        got = in_child(lambda: killpriv_case(m.mnt, None), uid=NOBODY, gid=NOBODY)
        for k in sorted(want):
            eq(got.get(k), want[k],
               "a user's mount, a change by its owner (%s): set-ID bits as native" % k)


# -------------------------------------------------------------- 2. ACLs

ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER = 1, 2, 4, 0x10, 0x20
ACL_ALL = [(ACL_USER_OBJ, 7, 0xFFFFFFFF), (ACL_USER, 5, 4243),
           (ACL_GROUP_OBJ, 7, 0xFFFFFFFF), (ACL_MASK, 7, 0xFFFFFFFF),
           (ACL_OTHER, 7, 0xFFFFFFFF)]


def acl_xattr(entries):
    """The system.posix_acl_* value for [(tag, perm, id)]."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


def acl_sgid_case(d):
    """nobody owns files with set-group-ID, of its group and of another,
    and sets an access ACL on each: their modes after."""
    out = {}
    for name, gid in (("own-group", NOBODY), ("other-group", OTHER_GID)):
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(b"x")
        os.chown(p, NOBODY, gid)
        os.chmod(p, 0o2775)
        statx_mode(p)
        res = in_child(lambda: os.setxattr(p, "system.posix_acl_access", acl_xattr(ACL_ALL)),
                       uid=NOBODY, gid=NOBODY)
        out[name] = (res, oct(statx_mode(p)), oct(os.stat(p).st_mode))
    return out


def made_case(d):
    """What a umask of 022 makes in a directory with a default ACL, in a
    set-group-ID one with a default ACL, and in one without: modes and
    access ACLs (runs as nobody)."""
    out = {}
    for sub in ("acl", "gacl", "plain"):
        for name, mk in (("f", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o666))),
                         ("x", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o2777))),
                         ("d", lambda p: os.mkdir(p, 0o777)),
                         ("n", lambda p: os.mknod(p, 0o666 | stat.S_IFIFO)),
                         ("r", lambda p: os.mknod(p, 0o666 | stat.S_IFREG))):
            p = os.path.join(d, sub, name)
            mk(p)
            st = os.stat(p)
            try:
                acl = os.getxattr(p, "system.posix_acl_access").hex()
            except OSError as e:
                acl = e.errno
            out[sub + "/" + name] = (oct(st.st_mode), st.st_gid, acl)
    return out


def made_setup(d):
    for sub, mode, gid in (("acl", 0o777, 0), ("gacl", 0o2777, OTHER_GID), ("plain", 0o777, 0)):
        p = os.path.join(d, sub)
        os.mkdir(p)
        os.chown(p, 0, gid)
        os.chmod(p, mode)
        if sub != "plain":
            os.setxattr(p, "system.posix_acl_default", acl_xattr(
                [(ACL_USER_OBJ, 7, 0xFFFFFFFF), (ACL_GROUP_OBJ, 7, 0xFFFFFFFF),
                 (ACL_OTHER, 7, 0xFFFFFFFF)]))


def test_acls(native):
    with Mount(opts="allow_other") as m:
        os.chmod(m.dir, 0o755)
        for d in (native, m.mnt):
            os.chmod(d, 0o777)
        want = acl_sgid_case(native)
        got = acl_sgid_case(m.mnt)
        for k in want:
            eq(got.get(k), want[k], "an ACL set by the owner (%s): set-group-ID as native" % k)
        for d in (native, m.mnt):
            made_setup(d)
        want = in_child(lambda: made_case(native), uid=NOBODY, gid=NOBODY, umask=0o022)
        got = in_child(lambda: made_case(m.mnt), uid=NOBODY, gid=NOBODY, umask=0o022)
        for k in sorted(want):
            eq(got.get(k), want[k], "made with umask 022 (%s): mode and ACL as native" % k)


# ------------------------------------------------------------- 3. atime

OLD = 1_000_000_000  # 2001: older than the mtime, and than a day


def atime_case(d, pre=None):
    """A file and a directory with an old atime, read and listed: their
    atimes after, older than before or not.  pre: where they are made (a
    store, before its mount), else d."""
    pre = pre or d
    os.makedirs(os.path.join(pre, "adir"), exist_ok=True)
    with open(os.path.join(pre, "afile"), "wb") as f:
        f.write(b"a" * 8192)
    for n in ("afile", "adir"):
        os.utime(os.path.join(pre, n), (OLD, OLD + 1000))
    return pre, d


def atime_check(d):
    with open(os.path.join(d, "afile"), "rb") as f:
        f.read()
    os.listdir(os.path.join(d, "adir"))
    return {n: int(os.stat(os.path.join(d, n)).st_atime) == OLD for n in ("afile", "adir")}


def test_atime():
    for opts in ("noatime", "noatime,nopassthrough", "", "nodiratime"):
        native = tmpfs("16M") if is_root() else None
        try:
            if native:
                subprocess.run(["mount", "-o", "remount," + (opts.split(",")[0] or "relatime"),
                                native], check=True)
            m = Mount(opts=opts)
            atime_case(m.mnt, pre=m.store)
            with m:
                got = atime_check(m.mnt)
            if native:
                atime_case(native)
                want = atime_check(native)
            else:
                # as the kernel keeps them (an ext4 or tmpfs under relatime)
                want = {"afile": "noatime" in opts, "adir": "noatime" in opts or
                        "nodiratime" in opts}
            if opts == "noatime" and is_root():
                # passed through: the kernel reads the store file with the
                # opener's flags, as the store's mount says (hsmfs(8))
                want["afile"] = False
            eq(got, want, "-o %s: the read and the listing leave atime as native "
               "(True: unchanged)" % (opts or "(none)"))
        finally:
            if native:
                tmpfs_drop(native)
    for opts in ("relatime", "strictatime", "atime", "noatime,atime"):
        m = Mount(opts=opts)
        atime_case(m.mnt, pre=m.store)
        with m:
            eq(atime_check(m.mnt), {"afile": False, "adir": False},
               "-o %s: accepted, and a read updates atime" % opts)


# ----------------------------------------------------------- 4. remount

def writable(d):
    """errno of making a file and a directory in d (0: made)."""
    def mk():
        with open(os.path.join(d, "w%d" % mk.n), "wb") as f:
            f.write(b"w")
    mk.n = len(os.listdir(d))
    e1 = errno_of_call(mk)
    e2 = errno_of_call(lambda: os.mkdir(os.path.join(d, "wd%d" % mk.n)))
    return (e1, e2)


def errno_of_call(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


def test_remount():
    """mount(8) runs mount.fuse3, which runs hsmfs from /usr/local/sbin
    (t0050-fstab.py): a tmpfs there in this test's own mount namespace."""
    sbin = "/usr/local/sbin"
    os.makedirs(sbin, exist_ok=True)
    eq(run(["mount", "-t", "tmpfs", "tmpfs", sbin])[0], 0, "private /usr/local/sbin")
    os.symlink(os.path.abspath(HSMFS), os.path.join(sbin, "hsmfs"))
    native = tmpfs("16M")
    d = tmpdir()
    store, mnt = os.path.join(d, "store"), os.path.join(d, "mnt")
    os.mkdir(store)
    os.mkdir(mnt)
    try:
        rc, out = run(["mount", "-t", "fuse.hsmfs", store, mnt, "-o", "allow_other,norestart"])
        eq((rc, out), (0, ""), "mount -t fuse.hsmfs")
        with open(os.path.join(mnt, "kept"), "wb") as f:
            f.write(b"k")
        for how in ("ro", "rw", "ro", "rw"):
            rc, out = run(["mount", "-o", "remount," + how, mnt])
            eq((rc, out.strip()), (0, ""), "mount -o remount,%s" % how)
            run(["mount", "-o", "remount," + how, native])
            eq(writable(mnt), writable(native),
               "remount,%s: making a file and a directory as native" % how)
            with open(os.path.join(mnt, "kept"), "rb") as f:
                eq(f.read(), b"k", "remount,%s: still read" % how)
        rc, out = run([HSMFS, store, mnt, "-o", "remount,hook=x"])
        ok(rc == 0 or (rc == 1 and "remount" in out), "remount with an hsmfs option: "
           "applied (its value kept) or refused, saying so (%d: %s)" % (rc, out.strip()))
        rc, out = run([HSMFS, store, os.path.join(d, "nothere"), "-o", "remount,ro"])
        ok(rc == EXIT_REMOUNT and len(out.strip().splitlines()) == 1,
           "remount of a path that is no hsmfs mount: one line, exit %d (%d: %s)"
           % (EXIT_REMOUNT, rc, out.strip()))
    finally:
        if is_mounted(mnt):
            run(["umount", mnt])
        tmpfs_drop(native)
        run(["umount", sbin])
        shutil.rmtree(d, ignore_errors=True)


def test_remount_user():
    with UserMount() as m:
        def remount():
            p = subprocess.run([HSMFS, m.store, m.mnt, "-o", "remount,ro"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            return (p.returncode, p.stdout.decode(errors="replace"))
        rc, out = in_child(remount, uid=NOBODY, gid=NOBODY)
        ok(rc == EXIT_REMOUNT and len(out.strip().splitlines()) == 1 and "remount" in out,
           "a user's mount: remount refused in one line, exit %d (%d: %s)"
           % (EXIT_REMOUNT, rc, out.strip()))
        eq(in_child(lambda: writable(m.mnt), uid=NOBODY, gid=NOBODY), (0, 0),
           "and the mount is as it was")


killpriv_case_native_root = None


def run_all():
    global killpriv_case_native_root
    if not is_root():
        skip("set-ID bits, ACLs, remount", "needs root (another user, allow_other)")
        test_atime()
        return
    if not os.environ.get("HSMFS_IN_NS"):
        # test_remount's /usr/local/sbin: in a mount namespace of its own
        env = dict(os.environ, HSMFS_IN_NS="1")
        os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private",
                               sys.executable, os.path.abspath(__file__)], env)
    native = tmpdir("hsmfs-native-")
    os.chmod(native, 0o777)
    try:
        killpriv_case_native_root = killpriv_case(native, None)
        shutil.rmtree(native)
        os.mkdir(native)
        os.chmod(native, 0o777)
        test_killpriv(native)
        shutil.rmtree(native)
        os.mkdir(native)
        test_killpriv_user(native)
        shutil.rmtree(native)
        os.mkdir(native)
        test_acls(native)
    finally:
        shutil.rmtree(native, ignore_errors=True)
    test_atime()
    test_remount()
    test_remount_user()


main(run_all)
