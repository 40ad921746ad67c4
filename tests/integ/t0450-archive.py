#!/usr/bin/env python3
"""Archive: what users change goes back to the origin.

A real nginx with the WebDAV module is the origin; hsmfs-http is the
mount's fill and archive hook.  Changed files, new files and a file
changed in part (its missing bytes fetched first) reach the origin byte
for byte with hsmfsctl archive and sync, and become clean (resident,
with the origin's new ETag).  A change made at the origin meanwhile is a
conflict: nothing is uploaded, the local bytes stay, resolve
--keep-local settles it.  A hook of our own holds an upload while the
user writes: the origin gets the one consistent snapshot, the file
stays dirty and is archived again with the later bytes.  The daemon is
killed at each archive step (archive-snapshot, archive-answered,
archive-committed): after the next mount, with archive_after=0, the
file is archived by itself, clean, and no conflict is reported that did
not happen (the origin holding our bytes under another version is not
one).
"""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Mount, Nginx, eq, main, ok, run, tmpdir,  # noqa: E402
                     wait_for, write_tree)

from archiving import (DAV, HTTP, Holder, archive, dav_root, differences,  # noqa: E402
                       get, passthrough_writer_archived, tree, put, state)

def etag_of(ng, name):
    """The ETag nginx gives the object now (a HEAD)."""
    s = socket.create_connection(("127.0.0.1", ng.port))
    s.sendall(b"HEAD /data/%s HTTP/1.0\r\n\r\n" % name.encode())
    head = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        head += b
    s.close()
    for line in head.decode().split("\r\n"):
        if line.lower().startswith("etag:"):
            return line.split(":", 1)[1].strip()
    return None


def test_dav():
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o777)
    big = os.urandom(3 << 20)
    write_tree(root, {"data/a.txt": b"alpha", "data/big.bin": big, "data/sub/c.txt": b"gamma"})
    os.chmod(os.path.join(root, "data"), 0o777)
    os.chmod(os.path.join(root, "data", "sub"), 0o777)
    for n in ("a.txt", "big.bin", "sub/c.txt"):
        os.chmod(os.path.join(root, "data", n), 0o666)
    with Nginx(root, extra=DAV) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/"))) as m:
            eq(get(m.path("a.txt")), b"alpha", "a file of the origin reads")
            eq(state(m, "a.txt"), "resident", "and is clean: resident, with its version")
            put(m.path("a.txt"), b"alpha, changed here")
            eq(state(m, "a.txt"), "dirty", "a change makes it dirty")
            rc, out = archive(m.path("a.txt"))
            eq(rc, 0, "hsmfsctl archive of it succeeds (%s)" % out.strip())
            eq(get(os.path.join(root, "data", "a.txt")), b"alpha, changed here",
               "the origin holds the change, byte for byte")
            eq(state(m, "a.txt"), "resident", "and the file is clean again")
            eq(os.getxattr(m.path("a.txt"), "user.hsmfs.version").decode(), etag_of(ng, "a.txt"),
               "its recorded version is the origin's new ETag")

            put(m.path("new.txt"), b"made on the mount")
            eq(state(m, "new.txt"), "dirty,new", "a file made on the mount is new")
            rc, out = archive(m.path("new.txt"))
            eq(rc, 0, "archive of a new file (%s)" % out.strip())
            eq(get(os.path.join(root, "data", "new.txt")), b"made on the mount",
               "it is at the origin, under the mount's origin and its path")
            eq(state(m, "new.txt"), "resident", "clean")
            ok(os.getxattr(m.path("new.txt"), "user.hsmfs.origin").decode().endswith("/new.txt"),
               "and its origin is recorded")

            # a change of part of a file whose rest was never fetched
            with open(m.path("big.bin"), "r+b") as f:
                f.seek(1 << 20)
                f.write(b"HERE")
            ok(state(m, "big.bin").startswith("dirty"), "a change in part: dirty")
            rc, out = archive(m.path("big.bin"))
            eq(rc, 0, "archive of a file changed in part (%s)" % out.strip())
            want = big[:1 << 20] + b"HERE" + big[(1 << 20) + 4:]
            ok(get(os.path.join(root, "data", "big.bin")) == want,
               "the origin holds the change and every byte around it")

            # a conflict: the origin changes under a local change
            put(m.path("a.txt"), b"mine again")
            put(os.path.join(root, "data", "a.txt"), b"theirs, written at the origin")
            rc, out = archive(m.path("a.txt"))
            ok(rc != 0 and "conflict" in out, "a change at the origin meanwhile: a conflict (%s)"
               % out.strip())
            eq(get(os.path.join(root, "data", "a.txt")), b"theirs, written at the origin",
               "nothing was uploaded")
            eq(get(m.path("a.txt")), b"mine again", "the local bytes are kept and read")
            eq(state(m, "a.txt"), "dirty,conflict", "and it shows conflict")
            st = json.loads(run([HSMFSCTL, "status", "--json", m.path("a.txt"),
                                 m.path("new.txt")])[1])
            eq([(f["archive"], "archive_error" in f) for f in st["files"]],
               [("conflict", True), ("clean", False)],
               "hsmfsctl status --json says conflict, with its error, and clean")
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            ok(rc != 0 and "conflict" in out, "sync says a file is in conflict (%s)" % out.strip())
            rc, out = run([HSMFSCTL, "resolve", "--keep-local", m.path("a.txt")])
            eq(rc, 0, "resolve --keep-local (%s)" % out.strip())
            eq(get(os.path.join(root, "data", "a.txt")), b"mine again",
               "the local bytes replaced the origin's")
            eq(state(m, "a.txt"), "resident", "clean")

            # sync: every changed file of the mount
            put(m.path("sub", "c.txt"), b"gamma, changed")
            os.mkdir(m.path("made"))
            put(m.path("made", "d.txt"), b"delta")
            for i in range(20):
                put(m.path("made", "f%02d" % i), b"file %d" % i)
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "hsmfsctl sync (%s)" % out.strip())
            eq(get(os.path.join(root, "data", "sub", "c.txt")), b"gamma, changed",
               "a changed file in a directory is at the origin")
            eq(get(os.path.join(root, "data", "made", "d.txt")), b"delta",
               "a new file in a new directory too")
            ok(all(get(os.path.join(root, "data", "made", "f%02d" % i)) == b"file %d" % i
                   for i in range(20)), "and all twenty small ones")
            stats = run([HSMFSCTL, "stats", "--json", m.mnt])[1]
            ok('"archived_files": 26' in stats and '"conflicts": 1' in stats,
               "stats count 26 files archived, one conflict")

            # names: removals and renames reach the origin at the next sync
            origin = os.path.join(root, "data")
            os.unlink(m.path("a.txt"))
            os.rename(m.path("sub", "c.txt"), m.path("sub", "c2.txt"))
            os.rename(m.path("made"), m.path("made2"))
            os.rename(m.path("new.txt"), m.path("big.bin"))  # over a file the origin has
            ok(os.path.exists(os.path.join(origin, "a.txt")), "not before the sync")

            def names_pending():
                s = json.loads(run([HSMFSCTL, "stats", "--json", m.mnt])[1])
                return s["names_pending"]
            wait_for(lambda: names_pending() >= 25, "25 name changes counted as pending")
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "sync applies the names (%s)" % out.strip())
            wait_for(lambda: names_pending() == 0, "none pending after it")
            ok(not os.path.exists(os.path.join(origin, "a.txt")),
               "a file removed on the mount is removed at the origin")
            ok(not os.path.exists(os.path.join(origin, "sub", "c.txt")) and
               get(os.path.join(origin, "sub", "c2.txt")) == b"gamma, changed",
               "a renamed file is moved at the origin")
            ok(not os.path.exists(os.path.join(origin, "made")) or
               not os.listdir(os.path.join(origin, "made")), "a renamed directory's files leave")
            ok(get(os.path.join(origin, "made2", "d.txt")) == b"delta" and
               all(get(os.path.join(origin, "made2", "f%02d" % i)) == b"file %d" % i
                   for i in range(20)), "and are at its new name")
            eq(get(os.path.join(origin, "big.bin")), b"made on the mount",
               "a rename over a name: the origin's object is replaced")
            ok(not os.path.exists(os.path.join(origin, "new.txt")), "and the old name is gone")
            put(m.path("sub", "c2.txt"), b"gamma, changed after its rename")
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq((rc, get(os.path.join(origin, "sub", "c2.txt"))),
               (0, b"gamma, changed after its rename"),
               "a change after the rename goes to the new name")
            eq(state(m, "sub", "c2.txt"), "resident", "clean")
            # a removal of a file changed at the origin meanwhile: theirs stays
            put(os.path.join(origin, "made2", "d.txt"), b"theirs, at the origin")
            os.unlink(m.path("made2", "d.txt"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            ok(rc == 4 and "the origin keeps names the mount removed" in out,
               "sync fails: the origin keeps a name the mount removed (%d: %s)" %
               (rc, out.strip()))
            eq(get(os.path.join(origin, "made2", "d.txt")), b"theirs, at the origin",
               "a file changed at the origin is not removed there")
            ok(m.logged("'made2/d.txt': a file removed on the mount, changed at the origin"),
               "the log names it, and why")
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 4, "so does the next sync (%s)" % out.strip())
            # the user removes theirs at the origin: the removal is done
            os.unlink(os.path.join(origin, "made2", "d.txt"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "mended at the origin: sync exits 0 (%s)" % out.strip())
            # or makes the name again on the mount: it is the mount's to replace
            put(os.path.join(origin, "made2", "f00"), b"theirs again")
            os.unlink(m.path("made2", "f00"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 4, "f00: sync fails (%s)" % out.strip())
            put(m.path("made2", "f00"), b"the mount's again")
            rc, out = run([HSMFSCTL, "resolve", "--keep-local", m.path("made2", "f00")])
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq((rc, get(os.path.join(origin, "made2", "f00"))), (0, b"the mount's again"),
               "made again on the mount: sync puts it there and exits 0 (%s)" % out.strip())
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test_write_during_upload():
    store = tmpdir("hsmfs-store-")
    # no origin to list from; files made on it are archived (archive_after=)
    with Mount(store=store, opts="archive_after=3600") as m:
        put(m.path("f"), b"first version")
        hook = Holder(m.mnt)
        res = {}
        t = threading.Thread(target=lambda: res.update(r=archive(m.path("f"))))
        t.start()
        ok(hook.got.wait(10), "the hook got the archive event")
        eq(state(m, "f"), "dirty,new,archiving", "the file shows archiving meanwhile")
        put(m.path("f"), b"second version, longer")
        hook.gate.set()
        t.join(30)
        eq(res.get("r", (None,))[0], 0, "the archive ends once the later bytes are archived too")
        eq([d for _, d in hook.uploads], [b"first version", b"second version, longer"],
           "the origin got the consistent snapshot, then the later bytes")
        eq(state(m, "f"), "resident", "clean only after the latest is archived")
        eq(os.getxattr(m.path("f"), "user.hsmfs.version").decode(), '"v2"',
           "its version is the second upload's")

        # renamed while its upload runs: archived as it was, clean
        put(m.path("g"), b"to be renamed")
        hook.gate.clear()
        hook.got.clear()
        t = threading.Thread(target=lambda: res.update(g=archive(m.path("g"))))
        t.start()
        ok(hook.got.wait(10), "the hook got the archive of g")
        os.rename(m.path("g"), m.path("g2"))
        hook.gate.set()
        t.join(30)
        eq(res.get("g", (None,))[0], 0, "a file renamed during its upload is archived")
        eq(hook.uploads[-1], ("g", b"to be renamed"), "its snapshot, under the path it had")
        eq(state(m, "g2"), "resident", "and clean under its new name")

        # removed while its upload runs: no row comes back
        put(m.path("h"), b"to be removed")
        hook.gate.clear()
        hook.got.clear()
        t = threading.Thread(target=lambda: res.update(h=archive(m.path("h"))))
        t.start()
        ok(hook.got.wait(10), "the hook got the archive of h")
        os.unlink(m.path("h"))
        hook.gate.set()
        t.join(30)
        eq(res.get("h", (None,))[0], 0, "a file removed during its upload: the archive ends")
        n_up = len(hook.uploads)
        rc, out = run([HSMFSCTL, "sync", m.mnt])
        eq(rc, 0, "sync after it (%s)" % out.strip())
        eq(len(hook.uploads), n_up, "and nothing more was archived")
        hook.close()
    import sqlite3
    db = sqlite3.connect(os.path.join(store, ".hsmfs", "meta.db"))
    paths = sorted(r[0] for r in db.execute("SELECT path FROM files WHERE path IS NOT NULL"))
    db.close()
    eq(paths, ["f", "g2"], "the database has rows of f and g2, none of the removed h")
    shutil.rmtree(store, ignore_errors=True)


def test_crash_points():
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o777)
    write_tree(root, {"data/a.txt": b"alpha"})
    os.chmod(os.path.join(root, "data"), 0o777)
    os.chmod(os.path.join(root, "data", "a.txt"), 0o666)
    with Nginx(root, extra=DAV) as ng:
        for step in ("archive-snapshot", "archive-answered", "archive-committed"):
            store = tmpdir("hsmfs-store-")
            body = ("changed before a crash at %s" % step).encode()
            m = Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/")),
                      env={"HSMFS_CRASH_AT": step + ":1"}, expect_exit=99)
            m.start()
            try:
                get(m.path("a.txt"))
                put(m.path("a.txt"), body)
                put(m.path("n-" + step), body)
                for n in ("a.txt", "n-" + step):
                    fd = os.open(m.path(n), os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)
                rc, out = archive(m.path("a.txt"))
                status = m.exited(10)
                eq(status, 99, "the daemon crashed at %s" % step)
            finally:
                m.cleanup()
            with Mount(store=store, opts="hook=%s,origin=%s,archive_after=0" %
                       (HTTP, ng.url("data/"))) as m2:
                wait_for(lambda: state(m2, "a.txt") == "resident" and
                         state(m2, "n-" + step) == "resident",
                         "both archived by themselves after %s" % step)
                eq(get(os.path.join(root, "data", "a.txt")), body,
                   "after a crash at %s the origin holds the change" % step)
                eq(get(os.path.join(root, "data", "n-" + step)), body, "and the new file")
                stats = run([HSMFSCTL, "stats", "--json", m2.mnt])[1]
                ok('"conflicts": 0' in stats, "no conflict that did not happen (%s)" % step)
            shutil.rmtree(store, ignore_errors=True)
        # a rename and a removal applied at the origin, the crash before their ops go
        store = tmpdir("hsmfs-store-")
        put(os.path.join(root, "data", "r.txt"), b"to be renamed")
        put(os.path.join(root, "data", "x.txt"), b"to be removed")
        for n in ("r.txt", "x.txt"):
            os.chmod(os.path.join(root, "data", n), 0o666)
        m = Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/")),
                  env={"HSMFS_CRASH_AT": "name-applied:2"}, expect_exit=99)
        m.start()
        try:
            get(m.path("r.txt"))
            get(m.path("x.txt"))
            os.rename(m.path("r.txt"), m.path("r2.txt"))
            os.unlink(m.path("x.txt"))
            run([HSMFSCTL, "sync", m.mnt])
            eq(m.exited(10), 99, "the daemon crashed as its second name was applied")
        finally:
            m.cleanup()
        with Mount(store=store, opts="hook=%s,origin=%s,archive_after=0" %
                   (HTTP, ng.url("data/"))) as m2:
            wait_for(lambda: not os.path.exists(os.path.join(root, "data", "x.txt")),
                     "the removal applied")
            eq(run([HSMFSCTL, "sync", m2.mnt])[0], 0, "sync after the crash")
            ok(not os.path.exists(os.path.join(root, "data", "r.txt")) and
               get(os.path.join(root, "data", "r2.txt")) == b"to be renamed",
               "the rename is at the origin once")
            eq(get(m2.path("r2.txt")), b"to be renamed", "and the file reads")
            stats = run([HSMFSCTL, "stats", "--json", m2.mnt])[1]
            ok('"conflicts": 0' in stats and '"archive_failed": 0' in stats,
               "applied again after the crash: no conflict, no failure")
        shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def test_passthrough_writer():
    """hsmfsctl archive of a file a passthrough writer has open waits for
    its close, then archives its last bytes (a change meanwhile put the
    archive asked for off to archive_after: it hung)."""
    with Mount(opts="archive_after=3600") as m:
        passthrough_writer_archived(m)


def test_dir_rename_unlisted():
    """mv of a directory whose tree was never listed, or listed at its top
    only, moves the whole tree at the origin: every directory below it is
    listed first, so that each file moves with it.  Before, the files
    stayed under the old name at the origin and the new name was empty
    there (15 of bash's files, 589 of git's), while sync exited 0."""
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    files = {}
    for top in ("bash", "git"):
        for rel in ("a.txt", "b.bin", "sub/c.txt", "sub/deep/d.txt", "sub/deep/e.bin",
                    "other/f.txt"):
            files["data/tools/%s/%s" % (top, rel)] = os.urandom(3000) + rel.encode()
    write_tree(root, files)
    for d, dirs, fs in os.walk(root):
        os.chmod(d, 0o777)
        for n in fs:
            os.chmod(os.path.join(d, n), 0o666)
    with Nginx(root, extra=DAV) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/"))) as m:
            eq(sorted(os.listdir(m.path("tools"))), ["bash", "git"], "tools is listed")
            os.rename(m.path("tools", "bash"), m.path("tools", "bash-renamed"))
            eq(sorted(os.listdir(m.path("tools", "git"))), ["a.txt", "b.bin", "other", "sub"],
               "git is listed, its subdirectories not")
            os.rename(m.path("tools", "git"), m.path("tools", "git-renamed"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "sync (%s)" % out.strip())
            origin = tree(os.path.join(root, "data"))
            mount = tree(m.mnt)
            eq(differences(origin, mount), [], "the origin holds the mount's tree")
            eq(len([p for p in mount if mount[p] is not None]), len(files),
               "and every file is there")
        store2 = tmpdir("hsmfs-store-")
        with Mount(store=store2, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/"))) as m2:
            eq(differences(tree(m2.mnt), mount, "second mount", "first mount"), [],
               "a second mount of the origin sees the same tree")
        shutil.rmtree(store2, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test_lock_file_again():
    """A file archived under a temporary name, renamed to its real one,
    and a new file made under the temporary name and archived before the
    rename reached the origin (git saves config.lock over config, then
    makes the next config.lock): the new file's upload finds the first
    one's object there.  That is no conflict while the rename is queued:
    the names go first, then the upload.  Before, the new file was in
    conflict for good, never archived, sync exiting 4 (t0547: 2 runs in
    5)."""
    root, store = dav_root(), tmpdir("hsmfs-store-")
    try:
        with Nginx(root, extra=DAV) as ng:
            # no write-back: the rename waits (for a sync, or an upload that needs it)
            with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("o/"))) as m:
                put(m.path("c.lock"), b"the first version\n")
                eq(archive(m.path("c.lock"))[0], 0, "lock file again: the first archived")
                os.rename(m.path("c.lock"), m.path("c"))
                put(m.path("c.lock"), b"the second version, not yet saved\n")
                rc, out = archive(m.path("c.lock"))
                eq(rc, 0, "lock file again: the second archived under the same name (%s)"
                   % out.strip())
                rc, out = run([HSMFSCTL, "sync", m.mnt])
                eq(rc, 0, "lock file again: sync exits 0 (%s)" % out.strip())
                eq(differences(tree(os.path.join(root, "o")), tree(m.mnt)), [],
                   "lock file again: the origin holds the mount's tree")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)


def test_link_then_unlink():
    """A file linked to its final name and its first name removed (git
    writes its objects, packs and refs so; so do mail tools) is a rename:
    its row and the origin's object follow the name it keeps.  Before,
    the row kept the removed name, and sync failed with EIO ("dirty inode
    ... is not at 'd/info/packs.lock'"): git gc, or a clone, on a
    write-back mount could never be synced."""
    root, store = dav_root(), tmpdir("hsmfs-store-")
    with Nginx(root, extra=DAV) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s,archive_after=3600"
                   % (HTTP, ng.url("o/"))) as m:
            os.makedirs(m.path("d", "info"))
            for i in range(2):  # the second over the first's name
                put(m.path("d", "info", "packs.lock"), b"packs %d" % i)
                if os.path.exists(m.path("d", "info", "packs")):
                    os.unlink(m.path("d", "info", "packs"))
                os.link(m.path("d", "info", "packs.lock"), m.path("d", "info", "packs"))
                os.unlink(m.path("d", "info", "packs.lock"))
            # one archived under its first name, then linked and unlinked
            put(m.path("d", "x.tmp"), b"archived first as x.tmp")
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "sync (%s)" % out.strip())
            ok(os.path.exists(os.path.join(root, "o", "d", "x.tmp")), "x.tmp is at the origin")
            os.link(m.path("d", "x.tmp"), m.path("d", "x"))
            os.unlink(m.path("d", "x.tmp"))
            # a file of two names replaced under one: its row goes to the other
            put(m.path("d", "a"), b"a's bytes")
            os.link(m.path("d", "a"), m.path("d", "a2"))
            put(m.path("d", "b"), b"b's bytes")
            os.rename(m.path("d", "b"), m.path("d", "a"))
            # git itself: objects, packs, refs, gc
            g = m.path("repo")
            os.mkdir(g)
            env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                       GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t", HOME=m.dir)
            for k in range(20):
                put(os.path.join(g, "f%02d.txt" % k), os.urandom(500) + b"%d" % k)
            for cmd in (["git", "init", "-q"], ["git", "add", "."],
                        ["git", "commit", "-qm", "one"], ["git", "gc", "-q"],
                        ["git", "fsck", "--no-progress"]):
                r = subprocess.run(cmd, cwd=g, env=env, capture_output=True, text=True)
                eq(r.returncode, 0, "%s (%s)" % (" ".join(cmd), r.stderr.strip()))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "sync after links, unlinks and git (%s)" % out.strip())
            origin, mount = tree(os.path.join(root, "o")), tree(m.mnt)
            eq(differences(origin, mount), [], "the origin holds the mount's tree")
            eq((origin.get("d/info/packs"), origin.get("d/x"), origin.get("d/a"),
                origin.get("d/a2")),
               (b"packs 1", b"archived first as x.tmp", b"b's bytes", b"a's bytes"),
               "each name holds its file's bytes")
            # a file that keeps two names: the origin gets one; sync says so
            # (before, it exited 0 with the other name missing there)
            put(m.path("d", "two"), b"one file, two names")
            os.link(m.path("d", "two"), m.path("d", "two-also"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            ok(rc == 4 and "several names" in out,
               "two names kept: sync fails, saying why (%d: %s)" % (rc, out.strip()))
            ok(m.logged("'d/two") and m.logged("has 2 names (hard links)"), "the log names it")
            os.unlink(m.path("d", "two-also"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "one name again: sync exits 0 (%s)" % out.strip())
            eq(differences(tree(os.path.join(root, "o")), tree(m.mnt)), [],
               "and the origin holds the mount's tree")
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test():
    test_lock_file_again()
    test_link_then_unlink()
    test_dir_rename_unlisted()
    test_dav()
    test_write_during_upload()
    test_passthrough_writer()
    test_crash_points()


main(test)
