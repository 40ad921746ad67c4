#!/usr/bin/env python3
"""The kernel keeps names, attributes, missing names and directory
listings long by default (entry_timeout, attr_timeout, negative_timeout
3600 s, cached readdir); every change the daemon makes by itself is
invalidated before it is reported done.

For each such change (a refresh adding, removing, renaming and changing
files and adding a directory; an import into a live mount; a fill; an
eviction; a listing made by a first look) a watcher thread keeps
stat-ing and listing the names involved with the caches warm, and from
the moment the change is reported done it must see the new truth only:
never an old name, size, time, link count or listing, and never a
missing name that exists now.  store_shared restores the short caches.
"""
import errno
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Hook, Mount, Nginx, diag, eq, import_manifest, main,
                     ok, run, tmpdir, wait_for, write_tree)  # noqa: E402
from harness import done as done_tests  # noqa: E402

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")


def view(path, names, dirstat=True):
    """What a user sees: the listing of path, its link count (dirstat)
    and (size, mtime, nlink) or an errno for each name below it."""
    got = {"": sorted(os.listdir(path))}
    if dirstat:
        # (which makes the kernel ask for the directory's attributes
        # again after a readdir: its atime; and a changed mtime drops
        # its cached listing)
        got[".nlink"] = os.stat(path).st_nlink
    for n in names:
        try:
            st = os.stat(os.path.join(path, n))
            got[n] = (st.st_size, int(st.st_mtime), st.st_nlink)
        except OSError as e:
            got[n] = errno.errorcode[e.errno]
    return got


class Watcher:
    """Looks at path and names in a loop; once told the change is done
    (expect()), every look must equal the truth given."""

    def __init__(self, path, names, dirstat=True):
        self.path, self.names, self.dirstat = path, names, dirstat
        self.want, self.bad, self.looks, self.seen = None, [], 0, 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            want = self.want
            got = view(self.path, self.names, self.dirstat)
            self.seen += 1
            if want is not None:
                self.looks += 1
                if got != want and len(self.bad) < 3:
                    self.bad.append(got)

    def warm(self, looks=20):
        """Wait until it looked that often: the caches are warm, missing
        names cached as missing."""
        base = self.seen
        wait_for(lambda: self.seen >= base + looks, "the watcher's looks")

    def expect(self, want, looks=200):
        """From now on every look must be want; wait for that many."""
        self.want = want
        wait_for(lambda: self.looks >= looks, "the watcher's looks")

    def close(self):
        self.stop.set()
        self.t.join()


def test_refresh():
    """hsmfsctl refresh: what the origin changed is seen at once."""
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o755)
    write_tree(root, {"keep.txt": b"keep", "gone.txt": b"gone", "old-name": b"renamed",
                      "changed.txt": b"first version"})
    names = ["keep.txt", "gone.txt", "old-name", "new-name", "changed.txt", "new.txt",
             "newdir"]
    with Nginx(root) as ng, Mount(store=store,
                                  opts="hook=%s,origin=%s" % (HTTP, ng.url())) as m:
        wait_for(lambda: m.logged("hook 'hsmfs-http'"), "hsmfs-http connected")
        before = view(m.mnt, names)
        eq(before["new.txt"], "ENOENT", "a name the origin does not have yet is missing")
        w = Watcher(m.mnt, names)
        w.warm()
        # the origin changes
        os.unlink(os.path.join(root, "gone.txt"))
        os.rename(os.path.join(root, "old-name"), os.path.join(root, "new-name"))
        with open(os.path.join(root, "changed.txt"), "wb") as f:
            f.write(b"the second version, longer")
        os.utime(os.path.join(root, "changed.txt"), (1000000, 1000000))
        write_tree(root, {"new.txt": b"new", "newdir/x": b"x"})
        os.chmod(os.path.join(root, "newdir"), 0o755)
        rc, out = run([HSMFSCTL, "refresh", m.mnt])
        eq(rc, 0, "hsmfsctl refresh: " + out.strip())
        want = {"": ["changed.txt", "keep.txt", "new-name", "new.txt", "newdir"],
                ".nlink": before[".nlink"] + 1,
                "keep.txt": before["keep.txt"], "gone.txt": "ENOENT", "old-name": "ENOENT",
                "new-name": (7, before["old-name"][1], 1),
                "changed.txt": (26, 1000000, 1), "new.txt": (3, before["keep.txt"][1], 1)}
        want["new.txt"] = (3, int(os.stat(os.path.join(root, "new.txt")).st_mtime), 1)
        want["new-name"] = (7, int(os.stat(os.path.join(root, "new-name")).st_mtime), 1)
        want["newdir"] = (os.stat(m.path("newdir")).st_size,
                          int(os.stat(m.path("newdir")).st_mtime), 2)
        w.expect(want)
        w.close()
        eq(w.bad, [], "after the refresh every look sees the origin's names and sizes "
           "(%d looks)" % w.looks)
        ok(w.looks > 10, "looked often (%d)" % w.looks)
        eq(os.listdir(m.path("newdir")), ["x"], "the new directory lists")
        # a name nobody looked up: no entry of the kernel's drops the
        # cached listing on its own
        w = Watcher(m.mnt, [], dirstat=False)
        w.warm()
        write_tree(root, {"later.txt": b"later"})
        rc, out = run([HSMFSCTL, "refresh", m.mnt])
        eq(rc, 0, "hsmfsctl refresh again: " + out.strip())
        w.expect({"": sorted(want[""] + ["later.txt"])})
        w.close()
        eq(w.bad, [], "a name only added is in the listing at once (%d looks)" % w.looks)
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test_import_live():
    """hsmfsctl import -m into a live mount: new names (missing until now,
    in a cached listing) and a changed size are seen at once."""
    mirror = tmpdir("hsmfs-mirror-")
    with Mount() as m:
        eq(import_manifest(m.mnt, [{"path": "a.txt", "size": 10, "mtime": 1000},
                                   {"path": "d/one", "size": 1, "mtime": 1000}])[0], 0,
           "first import")
        names = ["a.txt", "b.txt", "d", "e"]
        before = view(m.mnt, names)
        eq((before["b.txt"], sorted(os.listdir(m.path("d")))), ("ENOENT", ["one"]),
           "b.txt missing, d listed")
        w, wd = Watcher(m.mnt, names), Watcher(m.path("d"), ["one", "two"])
        w.warm()
        wd.warm()
        rc, out = import_manifest(m.mnt, [{"path": "a.txt", "size": 20, "mtime": 2000},
                                          {"path": "b.txt", "size": 5, "mtime": 3000},
                                          {"path": "d/two", "size": 2, "mtime": 4000},
                                          {"path": "e/f", "size": 3, "mtime": 5000}])
        eq(rc, 0, "import into the live mount: " + out.strip())
        want = {"": ["a.txt", "b.txt", "d", "e"], ".nlink": before[".nlink"] + 1,
                "a.txt": (20, 2000, 1), "b.txt": (5, 3000, 1),
                "d": before["d"][:2] + (2,), "e": None}
        st = os.stat(m.path("e"))
        want["e"] = (st.st_size, int(st.st_mtime), 2)
        want["d"] = (os.stat(m.path("d")).st_size, int(os.stat(m.path("d")).st_mtime), 2)
        wd.want = {"": ["one", "two"], ".nlink": 2, "one": (1, 1000, 1), "two": (2, 4000, 1)}
        w.expect(want)
        wd.expect(wd.want)
        w.close()
        wd.close()
        eq(w.bad, [], "after the import every look sees the new names and sizes (%d looks)"
           % w.looks)
        eq(wd.bad, [], "and the cached listing of d shows the new name (%d looks)" % wd.looks)
    shutil.rmtree(mirror, ignore_errors=True)


def test_fill_evict():
    """A file's blocks count the bytes not fetched yet as data (hsmfs(8),
    Holes and st_blocks), before a fill, after it and after an eviction;
    neither moves the times a stat shows."""
    data = os.urandom(3 << 20)
    mirror = write_tree(tmpdir("hsmfs-mirror-"), {"f": data})
    with Mount() as m:
        eq(import_manifest(m.mnt, [{"path": "f", "size": len(data), "mtime": 1234}])[0], 0,
           "import")
        with Hook(m.mnt, "--mirror", mirror):
            st = os.stat(m.path("f"))
            ok(st.st_blocks * 512 >= len(data) and int(st.st_mtime) == 1234,
               "a placeholder: its bytes not fetched yet count as blocks (%d), its time" %
               st.st_blocks)
            # filled with no read of the user's (a read alone makes the
            # kernel ask for the attributes again: its atime)
            rc, out = run([HSMFSCTL, "prefetch", m.path("f")])
            eq(rc, 0, "prefetch: " + out.strip())
            st = os.stat(m.path("f"))
            ok(st.st_blocks * 512 >= len(data), "filled: its blocks shown at once (%d)"
               % st.st_blocks)
            with open(m.path("f"), "rb") as f:
                eq(f.read() == data, True, "and it reads whole")
            eq(int(st.st_mtime), 1234, "and its time as it was")
            rc, out = run([HSMFSCTL, "evict", m.path("f")])
            eq(rc, 0, "evict: " + out.strip())
            st = os.stat(m.path("f"))
            eq((st.st_blocks * 512 >= len(data), int(st.st_mtime), st.st_size),
               (True, 1234, len(data)),
               "evicted: the bytes gone still count as blocks, time and size as they were")
    shutil.rmtree(mirror, ignore_errors=True)


def test_first_listing():
    """A directory's first look lists it: its link count is seen at once
    (the kernel had it from before the listing)."""
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    write_tree(root, {"a/b/x": b"x", "a/c/y": b"y", "a/z": b"z"})
    for d in ("a", "a/b", "a/c"):
        os.chmod(os.path.join(root, d), 0o755)
    with Nginx(root) as ng, Mount(opts="hook=%s,origin=%s" % (HTTP, ng.url())) as m:
        wait_for(lambda: m.logged("hook 'hsmfs-http'"), "hsmfs-http connected")
        def shown(p):
            st = os.stat(p)
            return st.st_nlink, st.st_mtime_ns

        eq(os.stat(m.path("a")).st_nlink, 2, "a, not listed yet: two links")
        # the lookup of a name in it makes that name (hsmfs-http answers
        # PRE_LOOKUP): a's time moved (a readdir would make the kernel ask
        # for its attributes again anyway: its atime)
        eq(os.stat(m.path("a/z")).st_size, 1, "a name in a looked up")
        eq(shown(m.path("a")), shown(m.spath("a")), "a's time is the store's at once")
        eq(sorted(os.listdir(m.path("a"))), ["b", "c", "z"], "a listed")
        eq(shown(m.path("a")), shown(m.spath("a")), "its two directories counted at once")


def test_cached():
    """The defaults keep names, missing names and listings in the kernel:
    what another program does to the store beside the mount is not seen
    (the daemon did not do it), even after a second; store_shared sees it
    within a second (its names and attributes cached for one, missing
    names and listings not at all)."""
    for opts, cached in (("", True), ("store_shared", False)):
        with Mount(opts=opts) as m:
            with open(m.path("f"), "w") as f:
                f.write("12345")
            names = ["f", "missing"]
            seen = view(m.mnt, names)
            eq(seen["missing"], "ENOENT", "missing")
            # beside the mount, as store_shared allows
            with open(m.spath("missing"), "w"):
                pass
            with open(m.spath("f"), "a") as f:
                f.write("678")
            time.sleep(1.3)  # what is measured: past store_shared's one second
            now = view(m.mnt, names)
            if cached:
                eq(now, seen, "defaults: names, sizes, missing names and the listing "
                   "come from the kernel's caches after a second")
            else:
                eq((now[""], now["missing"][0], now["f"][0]), (["f", "missing"], 0, 8),
                   "store_shared: a change beside the mount is seen after a second")


def abort_mount(m):
    """Unstick a deadlocked mount: abort its FUSE connection through a
    fusectl of our own (root; a daemon thread stuck in the kernel holds
    /dev/fuse, so killing it frees nothing); True if done."""
    d = tmpdir("hsmfs-fusectl-")
    try:
        if subprocess.run(["mount", "-t", "fusectl", "none", d],
                          stderr=subprocess.DEVNULL).returncode:
            return False
        try:
            with open(os.path.join(d, str(os.minor(m.dev)), "abort"), "w") as f:
                f.write("1")
            return True
        except OSError:
            return False
        finally:
            subprocess.run(["umount", d])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_refresh_rename_race():
    """A refresh drops the kernel's names without waiting for a
    directory's lock: a rename from the refreshed directory into one not
    listed yet holds that lock while its lookup waits for the lister,
    which hung behind the refresh for good."""
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    write_tree(root, {"x": b"x", "b/inside": b"i"})
    os.chmod(os.path.join(root, "b"), 0o755)
    flog = os.path.join(tmpdir("hsmfs-faults-"), "log")
    with Nginx(root) as ng, Mount(opts="hook=%s,origin=%s" % (HTTP, ng.url()),
                                  env={"HSMFS_DELAY": "listing-committed:2000",
                                       "HSMFS_CRASH_LOG": flog}) as m:
        wait_for(lambda: m.logged("hook 'hsmfs-http'"), "hsmfs-http connected")
        m.dev = os.stat(m.mnt).st_dev
        eq(sorted(os.listdir(m.mnt)), ["b", "x"], "the root listed")
        os.stat(m.path("b"))  # looked up, not listed
        write_tree(root, {"new": b"new"})
        def committed():
            with open(flog) as f:
                return f.read().count(" listing-committed\n")

        before = committed()  # the root's first listing passed there
        ref = subprocess.Popen([HSMFSCTL, "refresh", m.mnt])
        # the refresh committed; the lister waits at the point (logged first)
        wait_for(lambda: committed() > before, "the refresh at listing-committed")
        done = {}

        def mv():
            try:
                os.rename(m.path("x"), m.path("b", "x"))
                done["r"] = 0
            except OSError as e:
                done["r"] = e.errno

        t = threading.Thread(target=mv, daemon=True)
        t.start()
        t.join(15)
        hung = t.is_alive()
        ok(not hung and done.get("r") == 0, "the rename into the unlisted directory went "
           "on beside the refresh (%s)" % ("hung" if hung else done.get("r")))
        if hung and not abort_mount(m):
            diag("the mount cannot be aborted (not root): stopping here")
            done_tests()
            os._exit(1)
        if hung:
            ref.kill()
            m.restarts_expected = True
            m.expect_exit = None
        ok(ref.wait(10) == 0, "and the refresh finished")
        if hung:
            return
        if not hung:
            eq(sorted(os.listdir(m.mnt)), ["b", "new"], "the refresh's name and the rename "
               "both seen")
            eq(sorted(os.listdir(m.path("b"))), ["inside", "x"], "b listed with x in it")
    shutil.rmtree(root, ignore_errors=True)


def test_refresh_links():
    """A user's hard link to a file the origin removed keeps it; one to a
    file the origin changed shows its link count at once."""
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    write_tree(root, {"f": b"first", "gone": b"gone"})
    with Nginx(root) as ng, Mount(opts="hook=%s,origin=%s" % (HTTP, ng.url())) as m:
        wait_for(lambda: m.logged("hook 'hsmfs-http'"), "hsmfs-http connected")
        eq(sorted(os.listdir(m.mnt)), ["f", "gone"], "listed")
        os.mkdir(m.path("u"))
        os.link(m.path("f"), m.path("u/g"))
        os.link(m.path("gone"), m.path("u/gone2"))
        eq(os.stat(m.path("u/g")).st_nlink, 2, "linked")
        eq(open(m.path("u/gone2"), "rb").read(), b"gone", "read (its bytes are local)")
        with open(os.path.join(root, "f"), "wb") as fh:
            fh.write(b"second version")
        os.utime(os.path.join(root, "f"), (1, 1))
        os.unlink(os.path.join(root, "gone"))
        rc, out = run([HSMFSCTL, "refresh", m.mnt])
        eq(rc, 0, "refresh: " + out.strip())
        eq(os.stat(m.path("u/g")).st_nlink, 1, "the changed file's other name: one link "
           "now, seen at once")
        eq(open(m.path("f"), "rb").read(), b"second version", "f is the new version")
        eq(open(m.path("u/gone2"), "rb").read(), b"gone", "the user's link to a removed "
           "file reads on")
        ok("gone" in os.listdir(m.mnt), "and the name it shares stays (which one is the "
           "origin's is not known: the user's change wins)")
    shutil.rmtree(root, ignore_errors=True)


def test_evict_open():
    """The evictor's work on an open file shows at once: its blocks are
    the store's and the bytes gone (hsmfs(8), Holes and st_blocks)."""
    MiB = 1 << 20
    a, b = os.urandom(4 * MiB), os.urandom(8 * MiB)
    mirror = write_tree(tmpdir("hsmfs-mirror-"), {"a": a, "b": b})
    with Mount(opts="cache_max=4M,chunk=256k,prefetch=0") as m:
        eq(import_manifest(m.mnt, [{"path": "a", "size": len(a), "mtime": 1234},
                                   {"path": "b", "size": len(b), "mtime": 1234}])[0], 0,
           "import")
        with Hook(m.mnt, "--mirror", mirror):
            with open(m.path("a"), "rb") as fa:
                eq(fa.read() == a, True, "a read whole, and kept open")
                fa.seek(0)
                fa.read(4096)
                before = os.stat(m.path("a")).st_blocks
                with open(m.path("b"), "rb") as fb:
                    eq(fb.read() == b, True, "b read: the cache is over its limit")
                wait_for(lambda: os.stat(m.spath("a")).st_blocks < before,
                         "a evicted while open")
                st, real = os.stat(m.path("a")), os.stat(m.spath("a"))
                gone = len(a) - int(os.getxattr(m.path("a"), "user.hsmfs.present"))
                eq((st.st_blocks, int(st.st_mtime)),
                   (real.st_blocks + (gone + 511) // 512, 1234),
                   "the mount shows its blocks at once (the store's and the bytes "
                   "gone), its time as it was")
    shutil.rmtree(mirror, ignore_errors=True)


def test_import_nested():
    """An import that makes a directory below an existing one: the
    existing one's listing and links are seen at once."""
    with Mount() as m:
        eq(import_manifest(m.mnt, [{"path": "d/one", "size": 1, "mtime": 1000}])[0], 0,
           "first import")
        w = Watcher(m.path("d"), ["sub"])
        w.warm()
        rc, out = import_manifest(m.mnt, [{"path": "d/sub/x", "size": 2, "mtime": 2000}])
        eq(rc, 0, "a nested import into the live mount: " + out.strip())
        st = os.stat(m.path("d/sub"))
        w.expect({"": ["one", "sub"], ".nlink": 3, "sub": (st.st_size, int(st.st_mtime), 2)})
        w.close()
        eq(w.bad, [], "d shows the directory made in it (%d looks)" % w.looks)
        eq(os.listdir(m.path("d/sub")), ["x"], "which lists")


def test_takeover():
    """A daemon taking over drops what the kernel caches: the last one
    may have changed the store and died before telling it.  (Shown here
    with changes made beside the mount, which only that drop reveals.)"""
    with Mount() as m:
        with open(m.path("f"), "w") as f:
            f.write("12345")
        names = ["f", "missing"]
        seen = view(m.mnt, names)
        with open(m.spath("missing"), "w"):
            pass
        with open(m.spath("f"), "a") as f:
            f.write("678")
        eq(view(m.mnt, names), seen, "changes beside the mount: not seen (cached)")
        m.restarts_expected = True
        rc, out = run([HSMFSCTL, "restart", m.mnt])
        eq(rc, 0, "hsmfsctl restart: " + out.strip())
        ok(wait_for(lambda: view(m.mnt, names)["missing"] != "ENOENT",
                    "the new daemon's drop of the kernel's caches", deadline=10),
           "after the takeover the missing name is asked again")
        now = view(m.mnt, names)
        eq((now[""], now["f"][0]), (["f", "missing"], 8),
           "and the listing and the size are the store's")


def test_stale():
    """A file made stale by a digest mismatch: nothing a stat shows moves
    (no byte was kept), and its state says stale at once."""
    import hashlib
    data = b"twelve bytes"
    mirror = write_tree(tmpdir("hsmfs-mirror-"), {"f": data})
    with Mount() as m:
        eq(import_manifest(m.mnt, [{"path": "f", "size": len(data), "mtime": 1234,
                                    "sha256": hashlib.sha256(b"other").hexdigest()}])[0], 0,
           "import with a wrong sha256")
        with Hook(m.mnt, "--mirror", mirror):
            before = view(m.mnt, ["f"])
            eq(before["f"], (len(data), 1234, 1), "a placeholder")
            w = Watcher(m.mnt, ["f"])
            w.warm()
            try:
                open(m.path("f"), "rb").read()
                got = 0
            except OSError as e:
                got = e.errno
            eq(got, errno.EIO, "the read that completes it fails: the digest differs")
            ok(b"stale" in os.getxattr(m.path("f"), "user.hsmfs.state"), "stale at once")
            w.expect(before)
            w.close()
            eq(w.bad, [], "every look shows the file as it was (%d looks)" % w.looks)
            eq((os.stat(m.spath("f")).st_blocks, os.stat(m.path("f")).st_blocks), (0, 1),
               "with no block kept (the mount counts its 12 bytes not fetched: one block)")
    shutil.rmtree(mirror, ignore_errors=True)


def all_tests():
    test_cached()
    test_refresh()
    test_import_live()
    test_fill_evict()
    test_first_listing()
    test_refresh_rename_race()
    test_refresh_links()
    test_evict_open()
    test_import_nested()
    test_takeover()
    test_stale()


main(all_tests)
