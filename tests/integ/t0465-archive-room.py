#!/usr/bin/env python3
"""Archive, the rest of the cycle: the origin's side of a conflict, what a
later listing shows, and changed files that make room.

resolve --take-origin: a real nginx with the WebDAV module is the origin
of a zero-setup mount.  A conflict settled for the origin reads the
origin's bytes (a placeholder of the version listed now), uploads
nothing and counts no failure; a conflict of a file the origin removed
meanwhile takes the removal; a plain change is dropped the same way;
an open file, a file made on the mount (no origin to take) and a clean
file are refused or left as they are.

Changed files make room (as root, on a tmpfs store): with write-back on
and cache_min_free, a writer writes more than the store holds, at a
pace the origin keeps up with; no write fails, the oldest changes are
archived before their time and released, every byte reaches the origin
and every file reads back through the mount.

Later listings: files archived to nginx with times set on the mount
list, in a fresh mount of the origin, with the same names, sizes and
mtimes, and a refresh of the mount that archived them keeps them
resident (the listing's dates are the versions the uploads got; before,
every refresh made them placeholders, fetched again).

The upload rate of the statistics counts what the origin took.
"""
import errno
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Mount, Nginx, eq, is_root, main, ok, run, skip,  # noqa: E402
                     tmpdir, tmpfs, tmpfs_drop, wait_for, write_tree)

from archiving import DAV, HTTP, archive, get, put, state  # noqa: E402


def stats(m):
    return json.loads(run([HSMFSCTL, "stats", "--json", m.mnt])[1])


def resolve(how, *paths):
    return run([HSMFSCTL, "resolve", how] + list(paths))


def conflict(m, root, name, mine, theirs):
    """Make name a conflict: our change, theirs at the origin, an archive."""
    get(m.path(name))
    put(m.path(name), mine)
    theirs_path = os.path.join(root, "data", name)
    put(theirs_path, theirs)
    # another second than the one recorded: nginx's dates tell the versions apart
    t = os.stat(theirs_path).st_mtime + 10
    os.utime(theirs_path, (t, t))
    rc, out = archive(m.path(name))
    ok(rc != 0 and "conflict" in out, "%s: a conflict (%s)" % (name, out.strip()))


def test_take_origin():
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o777)
    files = {"a.txt": b"alpha", "b.txt": b"beta", "c.txt": b"gamma", "d.txt": b"delta",
             "e.txt": b"epsilon"}
    write_tree(root, {"data/" + k: v for k, v in files.items()})
    os.chmod(os.path.join(root, "data"), 0o777)
    for n in files:
        os.chmod(os.path.join(root, "data", n), 0o666)
    with Nginx(root, extra=DAV) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/"))) as m:
            conflict(m, root, "a.txt", b"mine", b"theirs, longer than mine")
            puts = ng.log().count("PUT ")
            rc, out = resolve("--take-origin", m.path("a.txt"))
            eq(rc, 0, "resolve --take-origin (%s)" % out.strip())
            eq(get(m.path("a.txt")), b"theirs, longer than mine",
               "the file reads the origin's bytes, at their new size")
            eq(state(m, "a.txt"), "resident", "and is clean")
            eq(get(os.path.join(root, "data", "a.txt")), b"theirs, longer than mine",
               "the origin keeps its bytes")
            eq(ng.log().count("PUT "), puts, "nothing was uploaded")
            rc, out = archive(m.path("a.txt"))
            eq(rc, 0, "an archive after it has nothing to do (%s)" % out.strip())

            # the origin removed the file under our change: the removal wins
            conflict(m, root, "b.txt", b"mine, b", b"theirs, b")
            os.unlink(os.path.join(root, "data", "b.txt"))
            rc, out = resolve("--take-origin", m.path("b.txt"))
            eq(rc, 0, "resolve --take-origin of a file removed at the origin (%s)" % out.strip())
            ok(not os.path.exists(m.path("b.txt")), "the name is gone on the mount too")
            ok("b.txt" not in os.listdir(m.mnt), "and from its listing")

            # a change that is no conflict is dropped the same way
            put(m.path("c.txt"), b"a change I regret")
            eq(state(m, "c.txt"), "dirty", "a plain change: dirty")
            rc, out = resolve("--take-origin", m.path("c.txt"))
            eq((rc, get(m.path("c.txt"))), (0, b"gamma"),
               "resolve --take-origin drops it: the origin's bytes (%s)" % out.strip())

            # refused: open, made on the mount, both sides at once
            put(m.path("d.txt"), b"changed while open")
            with open(m.path("d.txt"), "rb"):
                rc, out = resolve("--take-origin", m.path("d.txt"))
                ok(rc != 0 and "open" in out, "refused while the file is open (%s)"
                   % out.strip())
            eq(get(m.path("d.txt")), b"changed while open", "and the change is kept")
            put(m.path("new.txt"), b"made here")
            rc, out = resolve("--take-origin", m.path("new.txt"))
            ok(rc != 0 and "origin" in out,
               "a file made on the mount has no origin to take (%s)" % out.strip())
            eq(get(m.path("new.txt")), b"made here", "and keeps its bytes")
            rc, out = resolve("--take-origin", m.path("e.txt"))
            eq(rc, 0, "a clean file: nothing to do (%s)" % out.strip())
            eq(get(m.path("e.txt")), b"epsilon", "and it reads as before")
            rc, out = run([HSMFSCTL, "resolve", "--keep-local", "--take-origin",
                           m.path("d.txt")])
            ok(rc != 0 and "one of" in out, "both sides at once is refused (%s)" % out.strip())
            s = stats(m)
            eq((s["conflicts"], s["archive_failed"]), (2, 0),
               "two conflicts counted, no failed attempt")
            # the upload rate counts what the origin took
            rc, out = archive(m.path("d.txt"), m.path("new.txt"))
            eq(rc, 0, "two more archives (%s)" % out.strip())
            ok(stats(m)["archive_rate"] > 0, "the upload rate of the last seconds is shown")
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test_times():
    """What a later listing of the origin shows: the names, sizes and
    times the mount gave (nginx keeps a PUT's Date as the mtime)."""
    root, s1, s2 = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o777)
    write_tree(root, {"data/old.txt": b"old bytes"})
    os.chmod(os.path.join(root, "data"), 0o777)
    os.chmod(os.path.join(root, "data", "old.txt"), 0o666)
    when = {"old.txt": 1700000000, "new.txt": 1600000000, "sub/deep.txt": 1500000000}
    body = {"old.txt": b"old bytes, changed", "new.txt": b"new", "sub/deep.txt": b"deep" * 999}
    with Nginx(root, extra=DAV) as ng:
        opts = "hook=%s,origin=%s" % (HTTP, ng.url("data/"))
        with Mount(store=s1, opts=opts) as m:
            os.listdir(m.mnt)
            os.mkdir(m.path("sub"))
            for name, data in body.items():
                put(m.path(name), data)
                os.utime(m.path(name), (when[name], when[name]))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "sync (%s)" % out.strip())
            rc, out = run([HSMFSCTL, "refresh", "--recursive", m.mnt])
            eq([state(m, n) for n in body], ["resident"] * len(body),
               "a refresh after the archive keeps them: the listing's dates are the "
               "versions the uploads got (%s)" % out.strip())
        with Mount(store=s2, opts=opts) as m:
            got = {}
            for name in body:
                st = os.stat(m.path(name))
                got[name] = (st.st_size, int(st.st_mtime))
            eq(got, {n: (len(body[n]), when[n]) for n in body},
               "a fresh mount of the origin lists the same names, sizes and times")
            ok(all(get(m.path(n)) == body[n] for n in body), "and reads the same bytes")
    for d in (root, s1, s2):
        shutil.rmtree(d, ignore_errors=True)


def test_dirs():
    """Directories made, removed and renamed on the mount follow at the
    origin, empty ones too; one the origin filled meanwhile is kept.
    RENAME_EXCHANGE, which no origin applies in one step, is refused."""
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o777)
    write_tree(root, {"data/keep/k.txt": b"k", "data/old/o.txt": b"o"})
    for d in ("data", "data/keep", "data/old"):
        os.chmod(os.path.join(root, d), 0o777)
    for f in ("data/keep/k.txt", "data/old/o.txt"):
        os.chmod(os.path.join(root, f), 0o666)
    o = os.path.join(root, "data")
    with Nginx(root, extra=DAV) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/"))) as m:
            os.listdir(m.mnt)
            os.mkdir(m.path("empty"))
            os.makedirs(m.path("a", "b", "c"))
            os.makedirs(m.path("x", "y"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "sync (%s)" % out.strip())
            ok(os.path.isdir(os.path.join(o, "empty")) and
               os.path.isdir(os.path.join(o, "a", "b", "c")),
               "empty directories made on the mount are made at the origin, nested ones too")
            os.rename(m.path("x"), m.path("z"))
            os.rmdir(m.path("empty"))
            os.unlink(m.path("old", "o.txt"))
            os.rmdir(m.path("old"))
            os.listdir(m.path("keep"))
            os.unlink(m.path("keep", "k.txt"))
            os.rmdir(m.path("keep"))
            put(os.path.join(o, "keep", "theirs.txt"), b"made at the origin meanwhile")
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            ok(rc == 4 and "the origin keeps names the mount removed" in out,
               "sync fails: the origin keeps a directory the mount removed (%d: %s)" %
               (rc, out.strip()))
            ok(os.path.isdir(os.path.join(o, "z", "y")) and
               not os.path.exists(os.path.join(o, "x")),
               "a renamed tree of empty directories moves at the origin")
            ok(not os.path.exists(os.path.join(o, "empty")) and
               not os.path.exists(os.path.join(o, "old")),
               "removed directories are removed at the origin, with the files removed in them")
            eq(sorted(os.listdir(os.path.join(o, "keep"))), ["theirs.txt"],
               "a directory the origin filled meanwhile is kept there, with what it holds")
            eq(stats(m)["archive_failed"], 0, "no failed attempt")
            ok(m.logged("'keep': a directory removed on the mount, kept at the origin: it "
                        "holds objects the mount does not have there"),
               "the log says why it was kept")
            # mended at the origin: the next sync removes it there, and exits 0
            os.unlink(os.path.join(o, "keep", "theirs.txt"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq((rc, os.path.exists(os.path.join(o, "keep"))), (0, False),
               "mended at the origin: sync removes it there and exits 0 (%s)" % out.strip())
            # two objects swapped in one step: no origin can, so the mount refuses
            import ctypes
            put(m.path("s1"), b"one")
            put(m.path("s2"), b"two")
            libc = ctypes.CDLL(None, use_errno=True)
            rc = libc.renameat2(-100, m.path("s1").encode(), -100, m.path("s2").encode(), 2)
            eq((rc, ctypes.get_errno(), get(m.path("s1")), get(m.path("s2"))),
               (-1, errno.EINVAL, b"one", b"two"),
               "RENAME_EXCHANGE on a mount that archives: EINVAL, nothing swapped")
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


MIB = 1 << 20


def test_room():
    if not is_root():
        skip("changed files make room", "mounting a tmpfs store needs root")
        return
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o777)
    os.makedirs(os.path.join(root, "data"))
    os.chmod(os.path.join(root, "data"), 0o777)
    fs = tmpfs("64M")
    store = os.path.join(fs, "store")
    os.mkdir(store)
    n, size = 24, 4 * MIB  # 96 MiB through a 64 MiB store
    blobs = [os.urandom(size) for _ in range(n)]
    try:
        with Nginx(root, extra=DAV) as ng:
            opts = ("hook=%s,origin=%s,archive_after=3600,cache_min_free=24M"
                    % (HTTP, ng.url("data/")))
            with Mount(store=store, opts=opts) as m:
                failed = []
                for i, b in enumerate(blobs):
                    try:
                        with open(m.path("f%02d" % i), "wb") as f:
                            f.write(b)
                            f.flush()
                            os.fsync(f.fileno())
                    except OSError as e:
                        failed.append((i, errno.errorcode.get(e.errno, e.errno)))
                    time.sleep(0.4)  # 10 MiB/s: an origin on loopback keeps up
                eq(failed, [], "%d MiB written through a 64 MiB store: no write failed"
                   % (n * size // MIB))
                s = stats(m)
                ok(s["archived_for_room"] > 0 and s["evicted_files"] > 0,
                   "changed files were archived early (%d) and released (%d)"
                   % (s["archived_for_room"], s["evicted_files"]))
                rc, out = run([HSMFSCTL, "sync", m.mnt])
                eq(rc, 0, "sync (%s)" % out.strip())
                bad = [i for i, b in enumerate(blobs)
                       if get(os.path.join(root, "data", "f%02d" % i)) != b]
                eq(bad, [], "every file is at the origin, byte for byte")
                bad = [i for i, b in enumerate(blobs) if get(m.path("f%02d" % i)) != b]
                eq(bad, [], "and reads back through the mount (released ones fetched again)")
                ok(m.logged("changed files archived now, to be released"), "the log says why")
    finally:
        tmpfs_drop(fs)
        shutil.rmtree(root, ignore_errors=True)


def test_not_for_cache_max():
    """cache_max does not count changed files: a fill short of room under
    it (answered past the limit, nothing else to evict) archives none of them early (archived, they would count, and only
    be evicted again)."""
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o777)
    write_tree(root, {"data/pinned.bin": os.urandom(3 * MIB // 2), "data/r.bin": os.urandom(MIB)})
    os.chmod(os.path.join(root, "data"), 0o777)
    with Nginx(root, extra=DAV) as ng:
        opts = ("hook=%s,origin=%s,archive_after=3600,cache_max=2M,chunk=1M,prefetch=0"
                % (HTTP, ng.url("data/")))
        with Mount(store=store, opts=opts) as m:
            os.listdir(m.mnt)
            rc, out = run([HSMFSCTL, "pin", m.path("pinned.bin")])
            eq(rc, 0, "a pinned file fills the cache (%s)" % out.strip())
            put(m.path("mine.txt"), b"a change" * 1000)
            eq(get(m.path("r.bin")), open(os.path.join(root, "data", "r.bin"), "rb").read(),
               "a read that needs room nothing can give is answered, past cache_max")
            s = stats(m)
            ok(s["over_fills"] > 0, "counted as a fill past cache_max")
            eq((s["archived_for_room"], state(m, "mine.txt")), (0, "dirty,new"),
               "and no changed file was archived early for it")
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test():
    test_take_origin()
    test_times()
    test_dirs()
    test_not_for_cache_max()
    test_room()


main(test)
