#!/usr/bin/env python3
"""File handles of the mount outlive the kernel's caches (#48; xfstests
generic/426, 467, 477, 756, 777): name_to_handle_at(2) of a file and of
directories, the kernel's caches dropped (echo 2 > drop_caches) and the
daemon told to forget, then open_by_handle_at(2):
  - a file's handle opens the same file (its bytes, its inode number);
    a handle taken before a rename through the mount still opens it;
  - a directory's handle opens the directory, reconnected to its path
    (the kernel asks the daemon for ".." up to the root): its /proc path
    and its ".." are right;
  - a file removed through the mount, or from the store behind it, is
    ESTALE, never another file, even when a new file got its node id
    (the handle's generation tells them apart);
  - a file of several links stays reachable by its handle while any name
    the daemon saw still reaches it: its names linked or looked up through
    the mount, removed through the mount or beside it, renamed away (up to
    INODE_NAMES_MAX = 8 names beside the last one seen; the oldest goes
    first), never another file at a name it had;
  - handles taken before hsmfsctl restart open the same files after it,
    and those taken before an unmount after the store is mounted again
    (generic/477, 777): files and directories, moved through the mount
    before; a file removed from the store meanwhile, or replaced by
    another (its inode number maybe used again), is ESTALE;
  - at most export_keep forgotten inodes are kept (the others' handles
    are ESTALE); export_keep=0 is no handle support.
open_by_handle_at needs CAP_DAC_READ_SEARCH and drop_caches root: as
another user these checks are skipped (name_to_handle_at still runs).
"""
import ctypes
import errno
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Mount, diag, eq, is_root, main, ok, run, skip,  # noqa: E402
                     tmpdir, wait_for, write_tree)

AT_FDCWD = -100
MAX_HANDLE_SZ = 128
libc = ctypes.CDLL(None, use_errno=True)


class FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * MAX_HANDLE_SZ)]


def name_to_handle(path):
    """path's handle: a FileHandle (raises OSError)."""
    fh = FileHandle(handle_bytes=MAX_HANDLE_SZ)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, os.fsencode(path), ctypes.byref(fh),
                              ctypes.byref(mount_id), 0):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return fh


def open_by_handle(mount_fd, fh, flags=os.O_RDONLY):
    fd = libc.open_by_handle_at(mount_fd, ctypes.byref(fh), flags | os.O_CLOEXEC)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fd


def node_of(fh):
    """(node id, generation) of a FUSE handle (fs/fuse/inode.c fuse_encode_fh)."""
    hi, lo, gen = struct.unpack("=III", bytes(fh.f_handle[:12]))
    return hi << 32 | lo, gen


def stats(m):
    return json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))


def forget_all(m):
    """Drop the kernel's dentries and inodes until the daemon has been
    told to forget every inode of this mount but the root (nothing of it
    is open or anyone's working directory)."""
    def dropped():
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")
        s = stats(m)
        return s["inodes"] - s.get("inodes_kept", 0) == 0
    wait_for(dropped, "the kernel forgets the mount's inodes")


def opened(mount_fd, fh, flags=os.O_RDONLY):
    """(errno 0, fd) or (errno, None)."""
    try:
        return 0, open_by_handle(mount_fd, fh, flags)
    except OSError as e:
        return e.errno, None


def read_fd(fd):
    out = b""
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return out
        out += b


def same_file(mount_fd, fh, data, ino, what):
    err, fd = opened(mount_fd, fh)
    if not eq(err, 0, "%s: open_by_handle_at succeeds" % what):
        return
    try:
        eq((os.fstat(fd).st_ino, read_fd(fd)), (ino, data),
           "%s: the same inode and bytes" % what)
    finally:
        os.close(fd)


def same_dir(m, mount_fd, fh, rel, what):
    err, fd = opened(mount_fd, fh, os.O_RDONLY | os.O_DIRECTORY)
    if not eq(err, 0, "%s: open_by_handle_at succeeds" % what):
        return
    try:
        eq(os.fstat(fd).st_ino, os.stat(m.path(rel)).st_ino, "%s: the same directory" % what)
        eq(os.readlink("/proc/self/fd/%d" % fd), m.path(rel),
           "%s: reconnected to its path (its parents asked by '..')" % what)
        eq(os.stat("..", dir_fd=fd).st_ino, os.stat(os.path.dirname(m.path(rel))).st_ino,
           "%s: its '..' is its parent" % what)
    finally:
        os.close(fd)


def can_run():
    if not is_root():
        skip("open_by_handle_at and drop_caches", "needs root (CAP_DAC_READ_SEARCH)")
        return False
    return True


def test_files_and_dirs():
    data = os.urandom(100000)
    with Mount() as m:
        write_tree(m.store, {"d/e/f": data, "d/g": b"g"})
        fh, dh, eh = (name_to_handle(m.path(p)) for p in ("d/e/f", "d", "d/e"))
        ok(fh.handle_bytes >= 12, "name_to_handle_at of a file (%d bytes, type %#x)" %
           (fh.handle_bytes, fh.handle_type))
        ino = os.stat(m.path("d/e/f")).st_ino
        if not can_run():
            return
        mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "a file forgotten")
            forget_all(m)
            same_dir(m, mount_fd, eh, "d/e", "a directory two deep forgotten")
            forget_all(m)
            same_dir(m, mount_fd, dh, "d", "a directory forgotten")
            # moved through the mount while forgotten: the handle follows
            os.mkdir(m.path("d2"))
            os.rename(m.path("d/e/f"), m.path("d2/h"))
            os.rename(m.path("d/e"), m.path("d2/e2"))
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "a file renamed, forgotten")
            forget_all(m)
            same_dir(m, mount_fd, eh, "d2/e2", "a directory renamed, forgotten")
            # the handle is the kernel's: the file opened again is the kernel's too
            same_file(mount_fd, fh, data, ino, "a file open again (the kernel's inode)")
        finally:
            os.close(mount_fd)


def test_removed():
    with Mount() as m:
        write_tree(m.store, {"a": b"a" * 10, "b": b"b" * 10, "c": b"c" * 10})
        ha, hb, hc = (name_to_handle(m.path(p)) for p in ("a", "b", "c"))
        inob = os.stat(m.path("b")).st_ino
        if not can_run():
            return
        mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.unlink(m.path("a"))
            forget_all(m)
            err, fd = opened(mount_fd, ha)
            eq(err, errno.ESTALE, "a file removed through the mount: ESTALE")
            if fd is not None:
                os.close(fd)
            same_file(mount_fd, hb, b"b" * 10, inob, "its neighbour still opens")
            # new files: one may take the removed file's node id
            reused = None
            for i in range(8):
                p = m.path("new%d" % i)
                with open(p, "wb") as f:
                    f.write(b"new")
                if node_of(name_to_handle(p))[0] == node_of(ha)[0]:
                    reused = p
            diag("the removed file's node id %d, generation %d; %s" %
                 (node_of(ha) + ("taken by " + reused if reused else "not reused",)))
            forget_all(m)
            err, fd = opened(mount_fd, ha)
            eq(err, errno.ESTALE, "the removed file's handle is ESTALE after new files came")
            if fd is not None:
                diag("it opened %r" % read_fd(fd))
                os.close(fd)
            # removed from the store behind the mount, while forgotten
            os.unlink(m.spath("c"))
            err, fd = opened(mount_fd, hc)
            eq(err, errno.ESTALE, "a file removed from the store behind the mount: ESTALE")
            if fd is not None:
                os.close(fd)
        finally:
            os.close(mount_fd)


def test_links():
    """xfstests generic/426 -l -u: a file reached by its other links."""
    data = b"linked" * 1000
    with Mount() as m:
        write_tree(m.store, {"d/f": data, "d/g": b"g"})
        fh, gh = (name_to_handle(m.path(p)) for p in ("d/f", "d/g"))
        ino = os.stat(m.path("d/f")).st_ino
        if not can_run():
            return
        mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # linked through the mount, the first name looked up again and removed
            os.link(m.path("d/f"), m.path("d/l"))
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "a file linked, forgotten")
            os.stat(m.path("d/f"))
            os.unlink(m.path("d/f"))
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "its name seen last removed, another link left")
            # the link seen last removed: back to the name seen before
            os.link(m.path("d/l"), m.path("d/l2"))
            os.unlink(m.path("d/l2"))
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "its link seen last removed")
            # renamed away, then that name removed
            os.link(m.path("d/l"), m.path("d/l3"))
            os.mkdir(m.path("e"))
            os.rename(m.path("d/l3"), m.path("e/moved"))
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "a link renamed away")
            os.unlink(m.path("e/moved"))
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "a link renamed away, then removed")
            # the name seen last removed beside the mount
            os.link(m.path("d/l"), m.path("d/l4"))
            os.stat(m.path("d/l4"))
            os.unlink(m.spath("d/l4"))
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "its name seen last removed beside the mount")
            # never another file: its other name is another file's now
            inog = os.stat(m.path("d/g")).st_ino
            os.link(m.path("d/g"), m.path("d/g2"))
            os.unlink(m.spath("d/g2"))
            write_tree(m.store, {"d/g2": b"another"})
            os.unlink(m.path("d/g"))
            forget_all(m)
            err, fd = opened(mount_fd, gh)
            eq(err, errno.ESTALE, "its other name is another file now: ESTALE")
            if fd is not None:
                diag("it opened %r (inode %d, was %d)" % (read_fd(fd), os.fstat(fd).st_ino, inog))
                os.close(fd)
        finally:
            os.close(mount_fd)


def test_links_limit():
    """The last name seen and INODE_NAMES_MAX (8) others are remembered."""
    files = {"d/h": b"h", "d/k": b"k"}
    files.update({"z/%d" % i: b"z" for i in range(24)})
    with Mount(opts="fd_cache=16") as m:
        write_tree(m.store, files)
        hh, kh = name_to_handle(m.path("d/h")), name_to_handle(m.path("d/k"))
        inoh, inok = os.stat(m.path("d/h")).st_ino, os.stat(m.path("d/k")).st_ino
        if not can_run():
            return
        mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(8):
                os.link(m.path("d/h"), m.path("d/h%d" % i))
            for i in range(9):
                os.link(m.path("d/k"), m.path("d/k%d" % i))
            forget_all(m)
            for i in range(8):
                os.unlink(m.spath("d/h%d" % i))
            for i in range(9):
                os.unlink(m.spath("d/k%d" % i))
            # the daemon's idle descriptors of h and k go (fd_cache=16)
            for i in range(24):
                with open(m.path("z/%d" % i), "rb") as f:
                    f.read()
            forget_all(m)
            same_file(mount_fd, hh, b"h", inoh, "nine names seen, the first one left")
            err, fd = opened(mount_fd, kh)
            eq(err, errno.ESTALE, "ten names seen, the first one left: forgotten, ESTALE")
            if fd is not None:
                diag("it opened inode %d (was %d)" % (os.fstat(fd).st_ino, inok))
                os.close(fd)
        finally:
            os.close(mount_fd)


def test_restart():
    data = os.urandom(5000)
    with Mount() as m:
        write_tree(m.store, {"x/y": data})
        fh, xh = name_to_handle(m.path("x/y")), name_to_handle(m.path("x"))
        ino = os.stat(m.path("x/y")).st_ino
        if not can_run():
            return
        mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            forget_all(m)
            rc, out = run([HSMFSCTL, "restart", m.mnt])
            eq(rc, 0, "hsmfsctl restart: " + out.strip())
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "a file forgotten, after a restart")
            forget_all(m)
            same_dir(m, mount_fd, xh, "x", "a directory forgotten, after a restart")
            # known to the kernel across the restart, forgotten after it
            err, fd = opened(mount_fd, fh)
            eq(err, 0, "a file opened by its handle after the restart")
            rc, out = run([HSMFSCTL, "restart", m.mnt])
            eq(rc, 0, "hsmfsctl restart again: " + out.strip())
            if fd is not None:
                os.close(fd)
            forget_all(m)
            same_file(mount_fd, fh, data, ino, "a file open across a restart, forgotten after")
        finally:
            os.close(mount_fd)


def test_remount():
    """Handles of a mount open the same files on the next mount of the store."""
    data = os.urandom(7000)
    store = tmpdir("hsmfs-store-")
    try:
        write_tree(store, {"t/d/f": data, "t/d/g": b"g" * 10, "t/r": b"r", "t/q": b"q",
                           "t/m/n": b"n" * 10, "t/s": b"s" * 10})
        with Mount(store=store) as m:
            hs = {p: name_to_handle(m.path(p)) for p in ("t/d/f", "t/d", "t/d/g", "t/r", "t/q",
                                                         "t/m/n", "t", "t/s")}
            ino = {p: os.stat(m.path(p)).st_ino for p in hs}
            if not can_run():
                return
            # moved through the mount before the unmount: the handle follows
            os.mkdir(m.path("t/new"))
            os.rename(m.path("t/m/n"), m.path("t/new/n2"))
        ok(os.path.exists(os.path.join(store, ".hsmfs", "nodes")), "the table written at unmount")
        # beside the mount while unmounted: one removed, one replaced
        os.unlink(os.path.join(store, "t/r"))
        os.rename(os.path.join(store, "t/s"), os.path.join(store, "t/s2"))
        os.unlink(os.path.join(store, "t/q"))
        write_tree(store, {"t/q": b"another q"})
        diag("t/q's inode number %d, its replacement's %d" %
             (ino["t/q"], os.stat(os.path.join(store, "t/q")).st_ino))
        with Mount(store=store) as m:
            ok(not os.path.exists(os.path.join(store, ".hsmfs", "nodes")),
               "the table read once, removed")
            mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
            try:
                same_file(mount_fd, hs["t/d/f"], data, ino["t/d/f"], "a file, a new mount")
                same_dir(m, mount_fd, hs["t/d"], "t/d", "a directory, a new mount")
                same_dir(m, mount_fd, hs["t"], "t", "a directory at the root, a new mount")
                same_file(mount_fd, hs["t/m/n"], b"n" * 10, ino["t/m/n"],
                          "a file moved before the unmount, a new mount")
                forget_all(m)
                same_file(mount_fd, hs["t/d/g"], b"g" * 10, ino["t/d/g"],
                          "a file of the last mount, forgotten again")
                for p, what in (("t/r", "removed"), ("t/q", "replaced by another")):
                    err, fd = opened(mount_fd, hs[p])
                    eq(err, errno.ESTALE, "a file %s while unmounted: ESTALE" % what)
                    if fd is not None:
                        diag("it opened %r" % read_fd(fd))
                        os.close(fd)
                # moved beside the mount: found by its new name, the same file (its store handle)
                os.stat(m.path("t/s2"))
                forget_all(m)
                same_file(mount_fd, hs["t/s"], b"s" * 10, ino["t/s"],
                          "a file moved while unmounted, looked up by its new name")
                # new files: one may take a node id of the last mount that was not kept
                for i in range(8):
                    with open(m.path("t/new/x%d" % i), "wb") as f:
                        f.write(b"x")
                forget_all(m)
                err, fd = opened(mount_fd, hs["t/r"])
                eq(err, errno.ESTALE, "a file removed while unmounted: ESTALE after new files came")
                if fd is not None:
                    os.close(fd)
                # the replacement looked up by name first: still not the old handle's
                os.stat(m.path("t/q"))
                err, fd = opened(mount_fd, hs["t/q"])
                eq(err, errno.ESTALE, "the replacement looked up: the old handle still ESTALE")
                if fd is not None:
                    os.close(fd)
            finally:
                os.close(mount_fd)
        # at most export_keep of them kept across the unmount too
        names = ("k0", "k1", "k2", "k3")
        write_tree(store, {p: p.encode() for p in names})
        with Mount(store=store, opts="export_keep=2") as m:
            hk = {p: name_to_handle(m.path(p)) for p in names}
            forget_all(m)
        with Mount(store=store, opts="export_keep=2") as m:
            mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
            fds = []
            try:
                errs = []
                for p in names:
                    err, fd = opened(mount_fd, hk[p])
                    errs.append(err)
                    if fd is not None:
                        fds.append(fd)
                        eq(read_fd(fd), p.encode(), "export_keep=2: %s is itself" % p)
                eq(sorted(errs), [0, 0, errno.ESTALE, errno.ESTALE],
                   "export_keep=2: two handles of the last mount open, the others ESTALE")
            finally:
                for fd in fds:
                    os.close(fd)
                os.close(mount_fd)
        # a table not whole: refused, the mount goes on, the handles are stale
        with Mount(store=store) as m:
            h = name_to_handle(m.path("t/d/f"))
        nodes = os.path.join(store, ".hsmfs", "nodes")
        if os.path.exists(nodes):
            os.truncate(nodes, os.path.getsize(nodes) - 1)
        else:
            ok(False, "a table written at unmount, to cut short")
        with Mount(store=store) as m:
            ok(m.logged("cannot read the file handles of the last mount"),
               "a table not whole: the log says so")
            mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
            try:
                err, fd = opened(mount_fd, h)
                eq(err, errno.ESTALE, "a table not whole: ESTALE")
                if fd is not None:
                    os.close(fd)
                eq(os.path.exists(nodes), False, "a table not whole: removed")
            finally:
                os.close(mount_fd)
        # a mount that did not write a table (killed): the handles are stale
        m = Mount(store=store)
        try:
            m.start()
            h = name_to_handle(m.path("t/d/f"))
            m.kill()
        finally:
            m.cleanup()
        with Mount(store=store) as m:
            mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
            try:
                err, fd = opened(mount_fd, h)
                eq(err, errno.ESTALE, "no table from a mount that was killed: ESTALE")
                if fd is not None:
                    os.close(fd)
            finally:
                os.close(mount_fd)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def test_limit():
    """export_keep bounds the forgotten inodes kept: the rest are ESTALE."""
    files = {"f%d" % i: (b"%d" % i) * 100 for i in range(6)}
    with Mount(opts="export_keep=2") as m:
        write_tree(m.store, files)
        hs = {n: name_to_handle(m.path(n)) for n in files}
        inos = {n: os.stat(m.path(n)).st_ino for n in files}
        if not can_run():
            return
        mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        fds = {}
        try:
            forget_all(m)
            eq(stats(m)["inodes_kept"], 2, "export_keep=2: two forgotten inodes kept")
            errs = {}
            for n in files:  # all open at once: none forgotten meanwhile
                errs[n], fd = opened(mount_fd, hs[n])
                if fd is not None:
                    fds[n] = fd
            eq(sorted(set(errs.values())), [0, errno.ESTALE], "the others are ESTALE")
            eq(len(fds), 2, "two handles open (%s)" % " ".join(sorted(fds)))
            eq({n: (os.fstat(fd).st_ino, read_fd(fd)) for n, fd in fds.items()},
               {n: (inos[n], files[n]) for n in fds}, "each the file it was taken of")
        finally:
            for fd in fds.values():
                os.close(fd)
            os.close(mount_fd)
    with Mount(opts="export_keep=0") as m:
        write_tree(m.store, {"f": b"f"})
        h = name_to_handle(m.path("f"))
        if not can_run():
            return
        mount_fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            forget_all(m)
            eq(stats(m)["inodes"], 0, "export_keep=0: nothing kept")
            err, fd = opened(mount_fd, h)
            eq(err, errno.ESTALE, "export_keep=0: no handle support, ESTALE")
            if fd is not None:
                os.close(fd)
        finally:
            os.close(mount_fd)


def all_tests():
    test_files_and_dirs()
    test_removed()
    test_links()
    test_links_limit()
    test_restart()
    test_remount()
    test_limit()


if __name__ == "__main__":
    main(all_tests)
