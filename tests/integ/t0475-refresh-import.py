#!/usr/bin/env python3
"""hsmfsctl refresh of a tree imported with import --listing (issue #36,
finding 3): the listing the import recorded is listed again; names gone
at the origin go, new ones appear, changed files become placeholders of
the new version; a file the user changed through the mount, and one
made through it, stay as the user left them; bytes already present of an
unchanged file stay.  Through a live mount against a real nginx, then
on the unmounted store (refresh -s STORE).
"""
import errno
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Mount, Nginx, eq, errno_of, main, ok, run,  # noqa: E402
                     run_on_tty, tmpdir, write_tree)

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test():
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    files = {"a.txt": b"a" * 5000, "b.txt": b"b" * 300, "c.txt": b"c" * 700,
             "d/e.txt": b"e" * 900, "u.txt": b"u" * 400, "v.txt": b"v" * 500,
             "gone/x.txt": b"x" * 600}
    write_tree(root, files)
    store = tmpdir("hsmfs-store-")
    with Nginx(root) as ng:
        # on a terminal: a progress line while it lists and imports (it printed
        # nothing until done), wiped before the summary on standard output
        rc, out, tty = run_on_tty([HSMFSCTL, "import", "-s", store, "--listing", ng.url()])
        eq((rc, out.strip()), (0, "imported 7 files: 7 new, 0 changed, 0 unchanged"),
           "import from the listing")
        ok("listing http://" in tty and "directories" in tty and tty.endswith("\r"),
           "on a terminal, progress on standard error, wiped at the end: %r" % tty[-200:])
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url())) as m:
            eq(read(m.path("a.txt")), files["a.txt"], "a file read through the mount")
            # the user's changes through the mount
            with open(m.path("u.txt"), "wb") as f:
                f.write(b"mine")
            with open(m.path("v.txt"), "wb") as f:
                f.write(b"mine too")
            with open(m.path("own.txt"), "wb") as f:
                f.write(b"made here")
            # the origin's changes
            os.unlink(os.path.join(root, "b.txt"))
            os.unlink(os.path.join(root, "v.txt"))
            shutil.rmtree(os.path.join(root, "gone"))
            new = {"n.txt": b"new" * 100, "d/n2.txt": b"n2" * 100,
                   "c.txt": b"C" * 1234, "u.txt": b"U" * 444}
            write_tree(root, new)
            ng.settle()
            before = len(ng.log())
            rc, out = run([HSMFSCTL, "refresh", "--recursive", m.mnt])
            eq(rc, 0, "refresh exits 0")
            ok(("refreshed %s: 2 new, 2 removed, 1 changed, 2 kept" % m.mnt) in out,
               "the summary line: " + out.strip().replace("\n", " | "))
            ok("kept 'u.txt': changed through the mount" in out and
               "kept 'v.txt': changed through the mount" in out,
               "says what it kept and why")
            ng.settle()
            ok(len(ng.log()) > before, "the origin was listed again")
            eq(errno_of(lambda: os.stat(m.path("b.txt"))), errno.ENOENT,
               "a file removed at the origin is gone")
            eq(errno_of(lambda: os.stat(m.path("gone"))), errno.ENOENT,
               "a directory removed at the origin is gone")
            eq(read(m.path("n.txt")), new["n.txt"], "a new file reads the new bytes")
            eq(read(m.path("d/n2.txt")), new["d/n2.txt"], "a new file below reads them")
            eq(read(m.path("c.txt")), new["c.txt"], "a changed file reads the new bytes")
            eq(read(m.path("u.txt")), b"mine", "the user's change wins over the origin's")
            eq(read(m.path("v.txt")), b"mine too", "a file the user changed is not removed")
            eq(read(m.path("own.txt")), b"made here", "a file made through the mount stays")
            ng.settle()
            n = len(ng.log())
            eq(read(m.path("a.txt")), files["a.txt"], "an unchanged file reads the same")
            ng.settle()
            eq([l for l in ng.log()[n:] if "a.txt" in l[1]], [],
               "and its bytes stayed: nothing fetched again")
            rc, out = run([HSMFSCTL, "refresh", "--recursive", m.mnt])
            ok(rc == 0 and ("refreshed %s: 0 new, 0 removed, 0 changed, 2 kept" % m.mnt) in out,
               "a second refresh changes nothing: " + out.strip().replace("\n", " | "))
        # the unmounted store
        a_ino = os.stat(os.path.join(store, "a.txt")).st_ino
        os.unlink(os.path.join(root, "a.txt"))
        write_tree(root, {"z.txt": b"z" * 321})
        rc, out = run([HSMFSCTL, "refresh", "-s", store])
        ok(rc == 0 and ("refreshed %s: 1 new, 1 removed, 0 changed, 2 kept" % store) in out,
           "refresh -s STORE: " + out.strip().replace("\n", " | "))
        ok(not os.path.exists(os.path.join(store, "a.txt")) and
           os.path.getsize(os.path.join(store, "z.txt")) == 321, "applied to the store")
        z_ino = os.stat(os.path.join(store, "z.txt")).st_ino
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url())) as m:
            got = read(m.path("z.txt"))
            if not eq(got, b"z" * 321, "the new file reads after a remount"):
                # once in CI (zeros, 1 run in about 15 here): what the mount
                # thought of it, for the next look
                diag("read %d bytes; z.txt's store inode %d (a.txt's was %s); status: %s; "
                     "the daemon's log: %s" % (
                         len(got), z_ino, a_ino, run([HSMFSCTL, "status", m.path("z.txt")])[1],
                         m.output()[-3000:]))
            eq(read(m.path("u.txt")), b"mine", "the user's bytes stayed")
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main(test)
