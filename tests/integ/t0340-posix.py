#!/usr/bin/env python3
"""POSIX where pjdfstest does not look, each behaviour run on the native
store filesystem and on the mount, and compared:
  1. writes with an explicit offset on an O_APPEND descriptor
     (pwritev2 RWF_NOAPPEND) land at that offset;
  2. set-user-ID and set-group-ID bits asked for by a non-root creator
     are kept (open, mkdir, mknod), and a set-group-ID directory's group
     is inherited (root mounts with allow_other);
  3. POSIX ACLs are obeyed where the kernel checks permissions, and
     refused (EOPNOTSUPP) where nothing would enforce them;
  4. a working directory that was removed still answers stat (nlink 0)
     and readdir as the native one does, not ESTALE;
  5. a write or truncate by a user without CAP_FSETID clears set-ID
     bits, root's does not (through the daemon and through passthrough).
"""
import errno
import os
import shutil
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Mount, eq, in_child, is_root, main, ok, skip, tmpdir  # noqa: E402

RWF_NOAPPEND = 0x20
NOBODY = 65534


def append_case(d, name="app", hold=False):
    """With hold, a reader keeps the file open meanwhile: on the mount
    the inode passes through the kernel then (when it can), and the
    O_APPEND open comes while it does."""
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.write(b"0123456789abcdef")
    rfd = os.open(p, os.O_RDONLY) if hold else -1
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            os.pwritev(fd, [b"XY"], 10, RWF_NOAPPEND)
            os.write(fd, b"!")  # a plain write still appends
        finally:
            os.close(fd)
    finally:
        if rfd >= 0:
            os.close(rfd)
    with open(p, "rb") as f:
        return f.read()


def create_case(d):
    """As nobody, in a 0777 directory: modes of what it creates."""
    out = {}
    fd = os.open(os.path.join(d, "suid"), os.O_CREAT | os.O_WRONLY, 0o4755)
    os.close(fd)
    fd = os.open(os.path.join(d, "sgid"), os.O_CREAT | os.O_WRONLY, 0o2755)
    os.close(fd)
    os.mkfifo(os.path.join(d, "fifo"), 0o4755)
    os.mkdir(os.path.join(d, "sub"), 0o2755)
    os.mkdir(os.path.join(d, "gdir", "inherit"), 0o755)
    for n in ("suid", "sgid", "fifo", "sub", "gdir/inherit"):
        st = os.stat(os.path.join(d, n))
        out[n] = (oct(st.st_mode), st.st_uid, st.st_gid)
    return out


def killpriv_case(d):
    """Set-ID bits of a 06777 file after a write and a truncate by nobody
    (cleared: it lacks CAP_FSETID), and after root's write (kept)."""
    out = {}
    for name, who, how in (("w-nobody", NOBODY, "write"), ("t-nobody", NOBODY, "truncate"),
                           ("w-root", None, "write")):
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(b"x" * 8192)
        os.chmod(p, 0o6777)

        def change(p=p, how=how):
            if how == "write":
                fd = os.open(p, os.O_WRONLY)
                try:
                    os.pwrite(fd, b"y", 100)
                finally:
                    os.close(fd)
            else:
                os.truncate(p, 10)
            return "done"
        out[name] = (in_child(change, uid=who, gid=NOBODY if who else None),
                     oct(os.stat(p).st_mode))
    return out


def acl_xattr(entries):
    """The system.posix_acl_access value for [(tag, perm, id)]."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


def acl_case(d, acl_ok):
    """Deny nobody in a 0777 directory by an ACL; returns what nobody
    gets creating in it, or the setxattr refusal."""
    sub = os.path.join(d, "acl")
    os.mkdir(sub)
    os.chmod(sub, 0o777)
    ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER = 1, 2, 4, 0x10, 0x20
    try:
        os.setxattr(sub, "system.posix_acl_access", acl_xattr(
            [(ACL_USER_OBJ, 7, 0xFFFFFFFF), (ACL_USER, 0, NOBODY),
             (ACL_GROUP_OBJ, 7, 0xFFFFFFFF), (ACL_MASK, 7, 0xFFFFFFFF),
             (ACL_OTHER, 7, 0xFFFFFFFF)]))
    except OSError as e:
        return ("setxattr", e.errno)
    return in_child(lambda: os.close(os.open(os.path.join(sub, "f"),
                                             os.O_CREAT | os.O_WRONLY, 0o644)) or "created",
                    uid=NOBODY, gid=NOBODY)


def cwd_case(d):
    """Remove the working directory, let attributes expire, look at it."""
    def fn():
        os.mkdir(os.path.join(d, "gone"))
        os.chdir(os.path.join(d, "gone"))
        os.rmdir(os.path.join(d, "gone"))
        time.sleep(1.2)  # past the mount's attr_timeout of 1 s, by design
        st = os.stat(".")
        try:
            listing = sorted(os.listdir("."))
        except OSError as e:
            listing = ("errno", e.errno)
        return (st.st_nlink, listing)
    return in_child(fn)


def run():
    native = tmpdir("hsmfs-native-")
    opts = "allow_other" if is_root() else ""
    with Mount(opts=opts) as m:
        want = append_case(native)
        eq(append_case(m.mnt), want,
           "pwritev2 RWF_NOAPPEND on an O_APPEND descriptor: as native (%r)" % want)
        eq(append_case(m.mnt, "app-held", True), append_case(native, "app-held", True),
           "the same while another open of the file passes through")
        eq(cwd_case(m.mnt), cwd_case(native),
           "a removed working directory: stat and readdir as native")
        if is_root():
            os.chmod(m.dir, 0o755)  # nobody must reach the mountpoint
            for d in (m.mnt, native):
                os.chmod(d, 0o777)
                os.mkdir(os.path.join(d, "gdir"))
                os.chown(os.path.join(d, "gdir"), 0, 4242)
                os.chmod(os.path.join(d, "gdir"), 0o2777)
            got = in_child(lambda: create_case(m.mnt), uid=NOBODY, gid=NOBODY)
            want = in_child(lambda: create_case(native), uid=NOBODY, gid=NOBODY)
            eq(got, want, "created by nobody: set-ID bits and inherited group as native")
            want = killpriv_case(native)
            eq(killpriv_case(m.mnt), want,
               "set-ID bits after writes and truncates by nobody and root: as native (%s)"
               % want)
            got = acl_case(m.mnt, True)
            want = acl_case(native, True)
            ok(got == want or got == ("setxattr", errno.EOPNOTSUPP),
               "an ACL denying nobody: enforced as native (%r), or refused (got %r)"
               % (want, got))
            eq(got, want, "with default_permissions the kernel enforces it")
        else:
            skip("set-ID bits of files a non-root user creates", "needs root")
            eq(acl_case(m.mnt, False), ("setxattr", errno.EOPNOTSUPP),
               "without default_permissions an ACL is refused, not stored and ignored")
    if is_root():
        # the same through the daemon (no passthrough): hsmfs drops them itself
        with Mount(opts="allow_other,nopassthrough") as m:
            os.chmod(m.dir, 0o755)
            os.chmod(m.mnt, 0o777)
            shutil.rmtree(native, ignore_errors=True)
            os.mkdir(native)
            want = killpriv_case(native)
            eq(killpriv_case(m.mnt), want,
               "set-ID bits through the daemon (nopassthrough): as native")
    shutil.rmtree(native, ignore_errors=True)


main(run)
