#!/usr/bin/env python3
"""Every passthrough operation, on the mount and on a plain directory.

The same script of operations runs against a plain directory of the
same filesystem and against the mount; the transcripts (results, errno
names, attributes) must be identical, and so must the resulting trees.
"""
import ctypes
import errno
import fcntl
import mmap
import os
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Mount, diag, eq, is_root, main, ok, tmpdir, tree_snapshot

libc = ctypes.CDLL(None, use_errno=True)
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
GiB = 1 << 30


def renameat2(old, new, flags):
    r = libc.renameat2(-100, os.fsencode(old), -100, os.fsencode(new), flags)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def fallocate(fd, mode, off, length):
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                               ctypes.c_longlong]
    if libc.fallocate(fd, mode, off, length) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def st(p, follow=False):
    s = os.stat(p, follow_symlinks=follow)
    return (stat.S_IFMT(s.st_mode), oct(stat.S_IMODE(s.st_mode)), s.st_nlink,
            s.st_size if not stat.S_ISDIR(s.st_mode) else "dir", s.st_uid,
            s.st_gid)


def exercise(root):
    """Run the operation script under root; return the transcript."""
    out = []

    def rec(name, fn, *a, **kw):
        try:
            r = fn(*a, **kw)
        except OSError as e:
            r = "E" + errno.errorcode.get(e.errno, str(e.errno))
        out.append((name, r))
        return r

    P = lambda *parts: os.path.join(root, *parts)

    def write(p, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644):
        fd = os.open(p, flags, mode)
        try:
            return os.write(fd, data)
        finally:
            os.close(fd)

    def read(p, n=1 << 20, off=0):
        fd = os.open(p, os.O_RDONLY)
        try:
            return os.pread(fd, n, off)
        finally:
            os.close(fd)

    # files: create, read, write at offsets, append, truncate
    rec("create", write, P("f"), b"hello world")
    rec("read", read, P("f"))
    rec("pread", read, P("f"), 5, 6)
    def pwrite_hole():
        fd = os.open(P("f"), os.O_WRONLY)
        os.pwrite(fd, b"X", 100)
        os.close(fd)
        return read(P("f"))
    rec("pwrite past end", pwrite_hole)
    rec("append", write, P("f"), b"APP", os.O_WRONLY | os.O_APPEND)
    rec("after append", read, P("f"))
    rec("O_EXCL on existing", write, P("f"), b"", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    rec("open missing", read, P("nope"))
    rec("open dir for writing", os.open, P("."), os.O_WRONLY)
    rec("truncate grow", os.truncate, P("f"), 1000)
    rec("stat grown", st, P("f"))
    rec("truncate shrink", os.truncate, P("f"), 3)
    rec("read shrunk", read, P("f"))
    def ftrunc():
        fd = os.open(P("f"), os.O_RDWR)
        os.ftruncate(fd, 2)
        r = os.fstat(fd).st_size
        os.close(fd)
        return r
    rec("ftruncate", ftrunc)
    rec("O_TRUNC", write, P("f"), b"new", os.O_WRONLY | os.O_TRUNC)
    rec("read after O_TRUNC", read, P("f"))

    # attributes
    rec("chmod", os.chmod, P("f"), 0o600)
    rec("stat chmod", st, P("f"))
    rec("chmod setuid", os.chmod, P("f"), 0o4755)
    rec("stat setuid", st, P("f"))
    rec("utime", os.utime, P("f"), ns=(1234567890123456789, 1111111111222222222))
    rec("mtime", lambda: (os.stat(P("f")).st_mtime_ns, os.stat(P("f")).st_atime_ns))
    if is_root():
        rec("chown", os.chown, P("f"), 1234, 5678)
        rec("stat chown", st, P("f"))
    else:
        rec("chown to self", os.chown, P("f"), os.getuid(), os.getgid())
        rec("chown to root", os.chown, P("f"), 0, 0)
    rec("access r", os.access, P("f"), os.R_OK)
    rec("access missing", os.access, P("nope"), os.F_OK)

    # directories
    rec("mkdir", os.mkdir, P("d"), 0o755)
    rec("mkdir existing", os.mkdir, P("d"))
    rec("file in dir", write, P("d", "g"), b"g")
    rec("rmdir non-empty", os.rmdir, P("d"))
    rec("rmdir file", os.rmdir, P("f"))
    rec("unlink dir", os.unlink, P("d"))
    rec("mkdir sgid", os.mkdir, P("sg"), 0o2775)
    rec("stat sgid", st, P("sg"))

    # special files
    rec("mkfifo", os.mkfifo, P("fifo"), 0o644)
    rec("stat fifo", st, P("fifo"))
    rec("mknod socket", os.mknod, P("sock"), stat.S_IFSOCK | 0o644)
    rec("stat socket", st, P("sock"))
    if is_root():
        rec("mknod chr", os.mknod, P("null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
        rec("rdev", lambda: os.stat(P("null"), follow_symlinks=False).st_rdev)

    # symlinks
    rec("symlink", os.symlink, "d/g", P("sl"))
    rec("readlink", os.readlink, P("sl"))
    rec("lstat symlink", st, P("sl"))
    rec("read via symlink", read, P("sl"))
    rec("dangling symlink", os.symlink, "nowhere/x", P("dangle"))
    rec("read dangling", read, P("dangle"))
    rec("long symlink", os.symlink, "x" * 4000, P("longlink"))
    rec("readlink long", lambda: len(os.readlink(P("longlink"))))

    # hard links
    rec("link", os.link, P("d", "g"), P("hl"))
    rec("nlink", st, P("hl"))
    rec("same inode", lambda: os.stat(P("hl")).st_ino == os.stat(P("d", "g")).st_ino)
    rec("unlink one link", os.unlink, P("d", "g"))
    rec("other link alive", read, P("hl"))
    rec("nlink after", st, P("hl"))
    rec("link to dir", os.link, P("d"), P("dl"))

    # open-unlinked file
    def open_unlinked():
        write(P("u"), b"unlinked data")
        fd = os.open(P("u"), os.O_RDWR)
        os.unlink(P("u"))
        r = [os.pread(fd, 100, 0), os.fstat(fd).st_nlink]
        os.pwrite(fd, b"!", 0)
        os.ftruncate(fd, 5)
        r += [os.pread(fd, 100, 0), os.fstat(fd).st_size]
        os.close(fd)
        return r
    rec("open unlinked", open_unlinked)

    # renames
    rec("rename", os.rename, P("hl"), P("r1"))
    rec("read renamed", read, P("r1"))
    write(P("r2"), b"victim")
    rec("rename over", os.rename, P("r1"), P("r2"))
    rec("read over", read, P("r2"))
    write(P("r3"), b"three")
    rec("noreplace", renameat2, P("r2"), P("r3"), RENAME_NOREPLACE)
    rec("noreplace free", renameat2, P("r3"), P("r4"), RENAME_NOREPLACE)
    rec("exchange", renameat2, P("r2"), P("r4"), RENAME_EXCHANGE)
    rec("exchanged", lambda: (read(P("r2")), read(P("r4"))))
    rec("exchange missing", renameat2, P("r2"), P("r5"), RENAME_EXCHANGE)
    os.mkdir(P("e1"))
    os.mkdir(P("e2"))
    write(P("e2", "x"), b"x")
    rec("dir over non-empty dir", os.rename, P("e1"), P("e2"))
    rec("dir over empty dir", os.rename, P("e2"), P("e1"))
    rec("moved dir contents", read, P("e1", "x"))
    rec("file over dir", os.rename, P("r2"), P("e1"))
    rec("dir into itself", os.rename, P("e1"), P("e1", "sub"))
    rec("dir exchange with file", renameat2, P("e1"), P("r4"), RENAME_EXCHANGE)
    rec("after dir exchange", lambda: (st(P("e1")), read(P("r4", "x"))))

    # xattrs
    rec("setxattr a", os.setxattr, P("r2"), "user.a", b"1")
    rec("setxattr b", os.setxattr, P("r2"), "user.b", b"22")
    rec("listxattr", lambda: sorted(os.listxattr(P("r2"))))
    rec("getxattr", os.getxattr, P("r2"), "user.b")
    rec("xattr create existing", os.setxattr, P("r2"), "user.a", b"x", os.XATTR_CREATE)
    rec("xattr replace missing", os.setxattr, P("r2"), "user.c", b"x", os.XATTR_REPLACE)
    rec("removexattr", os.removexattr, P("r2"), "user.a")
    rec("getxattr removed", os.getxattr, P("r2"), "user.a")
    rec("xattr on dir", os.setxattr, P("d"), "user.dir", b"v")
    rec("xattr of dir", os.getxattr, P("d"), "user.dir")
    rec("xattr on symlink", os.setxattr, P("sl"), "user.s", b"v", follow_symlinks=False)
    rec("list symlink xattrs", lambda: sorted(os.listxattr(P("sl"), follow_symlinks=False)))
    rec("big xattr", os.setxattr, P("r2"), "user.big", b"v" * 3000)
    rec("read big xattr", lambda: len(os.getxattr(P("r2"), "user.big")))

    # locks: a child process must see the parent's locks
    def child_probe(path, how):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                fd = os.open(path, os.O_RDWR)
                if how == "posix":
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
                else:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                code = e.errno
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        c = os.WEXITSTATUS(status)
        return errno.errorcode.get(c, c) if c else "acquired"
    def locks():
        write(P("lk"), b"0123456789")
        fd = os.open(P("lk"), os.O_RDWR)
        r = [child_probe(P("lk"), "posix")]
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        r.append(child_probe(P("lk"), "posix"))
        fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0)
        r.append(child_probe(P("lk"), "posix"))
        fcntl.flock(fd, fcntl.LOCK_EX)
        r.append(child_probe(P("lk"), "flock"))
        fcntl.flock(fd, fcntl.LOCK_UN)
        r.append(child_probe(P("lk"), "flock"))
        os.close(fd)
        return r
    rec("locks", locks)

    # fallocate, punch hole, SEEK_DATA / SEEK_HOLE
    def falloc():
        fd = os.open(P("fa"), os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(fd, 0, 1 << 20)
        r = [os.fstat(fd).st_size, os.fstat(fd).st_blocks >= 2048]
        os.pwrite(fd, b"A" * (1 << 20), 0)
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 8192)
        r += [os.pread(fd, 4, 4094), os.fstat(fd).st_size]
        r += [os.lseek(fd, 0, os.SEEK_HOLE), os.lseek(fd, 4096, os.SEEK_DATA)]
        fallocate(fd, FALLOC_FL_KEEP_SIZE, 1 << 20, 4096)
        r.append(os.fstat(fd).st_size)
        os.close(fd)
        return r
    rec("fallocate", falloc)

    def sparse_big():
        fd = os.open(P("big"), os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, b"tail", 5 * GiB + 123)
        r = [os.fstat(fd).st_size, os.fstat(fd).st_blocks < 1024,
             os.lseek(fd, 0, os.SEEK_HOLE), os.lseek(fd, 0, os.SEEK_DATA),
             os.pread(fd, 8, 5 * GiB + 120), os.pread(fd, 4, 4 * GiB)]
        try:
            os.lseek(fd, 5 * GiB + 200, os.SEEK_DATA)
        except OSError as e:
            r.append(errno.errorcode[e.errno])
        os.close(fd)
        return r
    rec("sparse over 4 GiB", sparse_big)

    # copy_file_range
    def cfr():
        write(P("src"), b"0123456789abcdef")
        write(P("dst"), b"................")
        a = os.open(P("src"), os.O_RDONLY)
        b = os.open(P("dst"), os.O_WRONLY)
        n = os.copy_file_range(a, b, 6, 3, 8)
        os.close(a)
        os.close(b)
        return n, read(P("dst"))
    rec("copy_file_range", cfr)

    # mmap write and read back
    def mm():
        write(P("mm"), b"\0" * 8192)
        fd = os.open(P("mm"), os.O_RDWR)
        m = mmap.mmap(fd, 8192)
        m[4096:4101] = b"mmapd"
        m.flush()
        m.close()
        os.close(fd)
        return read(P("mm"), 5, 4096)
    rec("mmap", mm)

    # fsync of a file and of a directory
    def syncs():
        fd = os.open(P("mm"), os.O_RDWR)
        os.fsync(fd)
        os.fdatasync(fd)
        os.close(fd)
        fd = os.open(P("d"), os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
        return True
    rec("fsync", syncs)

    # names
    for name in ["with space", "ünïcødé ✓", "x" * 255]:
        rec("name %r" % name[:20], write, P(name), name.encode())
    rec("raw bytes name", write, os.path.join(os.fsencode(root), b"\xff\xfe raw"), b"r")
    rec("name too long", write, P("y" * 256), b"")
    rec("list raw", lambda: sorted(os.listdir(os.fsencode(root))))

    # deep tree
    def deep():
        p = root
        for i in range(80):
            p = os.path.join(p, "level%02d" % i)
            os.mkdir(p)
        write(os.path.join(p, "leaf"), b"deep")
        return read(os.path.join(p, "leaf")), len(p) - len(root)
    rec("deep tree", deep)

    def walk():
        r = []
        for dp, dn, fn in os.walk(root):
            dn.sort()
            r.append((os.path.relpath(dp, root), sorted(fn)))
        return r
    rec("walk", walk)
    rec("statvfs", lambda: (os.statvfs(root).f_bsize, os.statvfs(root).f_namemax))
    return out


def compare_trees(a, b):
    sa, sb = tree_snapshot(a), tree_snapshot(b)
    # directory mtimes move with the clock; contents and modes must match
    strip = lambda s: {k: (v[0], v[1] if not stat.S_ISDIR(v[0]) else 0, v[3])
                       for k, v in s.items()}
    return strip(sa), strip(sb)


def test():
    plain = tmpdir("hsmfs-plain-")
    store = tmpdir("hsmfs-store-")
    try:
        want = exercise(plain)
        with Mount(store=store) as m:
            got = exercise(m.mnt)
            for (name, w), (_, g) in zip(want, got):
                eq(g, w, "same result on mount: %s" % name)
            eq(len(got), len(want), "transcript length")
            # an unprivileged mount cannot pass through: expected, not news
            ok("refused a passthrough" not in m.output(),
               "no log line about a refused passthrough backing file")

            # the mount's view of inode numbers is the store's
            eq(os.stat(m.path("mm")).st_ino, os.stat(m.spath("mm")).st_ino,
               "st_ino passes through")

            # STORE/.hsmfs is neither listed nor reachable
            ok(".hsmfs" not in os.listdir(m.mnt), ".hsmfs not listed")
            for what, fn in [
                ("stat", lambda: os.stat(m.path(".hsmfs"))),
                ("open lock", lambda: os.open(m.path(".hsmfs", "lock"), os.O_RDONLY)),
            ]:
                try:
                    fn()
                    ok(False, ".hsmfs %s refused" % what)
                except OSError as e:
                    eq(e.errno, errno.ENOENT, ".hsmfs %s gives ENOENT" % what)
            for what, fn in [
                ("mkdir", lambda: os.mkdir(m.path(".hsmfs"))),
                ("create", lambda: os.close(os.open(m.path(".hsmfs"), os.O_CREAT | os.O_WRONLY))),
                ("rename onto", lambda: os.rename(m.path("mm"), m.path(".hsmfs"))),
                ("symlink", lambda: os.symlink("x", m.path(".hsmfs"))),
            ]:
                try:
                    fn()
                    ok(False, ".hsmfs %s refused" % what)
                except OSError as e:
                    ok(e.errno in (errno.EPERM, errno.ENOENT),
                       ".hsmfs %s refused (%s)" % (what, errno.errorcode[e.errno]))
            ok(os.path.exists(m.spath(".hsmfs", "lock")), "lock file still in the store")
        a, b = compare_trees(plain, store)
        b = {k: v for k, v in b.items() if k.split(os.sep)[0] != ".hsmfs"}
        eq(sorted(b), sorted(a), "store tree names equal plain tree")
        diff = [k for k in a if a.get(k) != b.get(k)]
        ok(not diff, "store tree contents equal plain tree")
        if diff:
            diag("differ: %r" % diff[:10])
    finally:
        import shutil
        shutil.rmtree(plain, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main(test)
