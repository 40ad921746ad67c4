#!/usr/bin/env python3
"""Archive: a new file's first upload that landed but was never answered (#49).

nginx with the WebDAV module is the origin.  A new file is archived and
the daemon crashes right after its hook answered (a debug build's crash
point archive-answered): the origin holds the object, the store's rows
do not say so.  A mount of the same store then changes the file, syncs,
and the origin must equal the mount, byte for byte, with sync exiting 0:

1. the file is renamed: nothing is left under the old name;
2. its directory is renamed: neither the old directory nor the object
   in it is left;
3. the file is removed: its object goes too;
4. the file is written again under the same name: the new bytes replace
   the landed ones, and it is no conflict (the object there is its own).

The same after a second upload whose answer was never read (the origin
had the first, recorded; it holds the second's bytes under a version
the store does not know):

5. renamed: the object moves whatever its version;
6. removed: it goes whatever its version;
7. written again: the new bytes replace it, no conflict.

And one answered, renamed while its answer is recorded:

8. the object moves with it.

And a rename whose move reached the origin but whose answer was never
read (the daemon crashed at name-answered), the file then removed on a
mount with no hook before the move was asked again:

9. neither the old name nor the new one is left at the origin (before,
   the removal went to the old name and the moved object stayed).

And a new file's first upload that failed while its directory was
renamed (the move recorded for the object it would make), the directory
renamed again, the file then uploaded under its newest name while the
names' queue was still behind (a hook of the test's own, an origin in
memory):

10. the stale move is not applied to the new object (before, the object
    went back to the name of the first rename, t0545 seed 688024038).

And a new file's first upload that landed unanswered (a crash), the
file then renamed away and back before the names were applied, then
changed:

12. its upload replaces the object its unanswered one left (before, the
    removal queued for that object found the file back at that name and
    kept the object, but forgot the landing: the next upload was a new
    file's, found another object there, and was a conflict, sync exiting
    4: t0545 seeds 2754626525 and 2424411091).

And a file the origin has, removed while its next upload is in flight,
the removal applied at the origin before that upload lands, which the
hook answers without a URL (the recorded one, as hsmfs-http does):

11. the object that upload made goes too (before, it stayed, sync
    exiting 0: t0545 seed 1212323881).

And a new file whose upload failed unanswered-like (EIO: what it made
is not known), replaced meanwhile by another file renamed over it (as
rsync saves), with the names applied after:

13. the other file's object stays under the name (before, the removal
    of what the failed upload might have made there removed it, sync
    exiting 0 with the name missing at the origin: rsync -a twice, 1
    run in 6).

Before, 1-3 left the landed object at the origin (sync exiting 0), 4
and 7 ended in a conflict, sync failing, 5 left the object under the
old name and 6 kept it as "changed at the origin".
"""
import contextlib
import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Mount, Nginx, eq, main, ok, run, skip, tmpdir,  # noqa: E402
                     wait_for)

from archiving import DAV, HTTP, MemOrigin, dav_root, differences, put, tree  # noqa: E402


def renamed(m):
    os.rename(m.path("d", "f.bin"), m.path("d", "g.bin"))


def dir_renamed(m):
    os.rename(m.path("d"), m.path("e"))


def removed(m):
    os.unlink(m.path("d", "f.bin"))


def written_again(m):
    put(m.path("d", "f.bin"), b"written again after the crash\n" * 50)


CASES = [("renamed", renamed), ("its directory renamed", dir_renamed),
         ("removed", removed), ("written again", written_again)]
# the same after a second upload (the origin had the first, recorded)
SECOND = [("renamed after a second upload", renamed),
          ("removed after a second upload", removed),
          ("written again after a second upload", written_again)]


def write_synced(path, data):
    """fsync'd: the file's row is durable before its upload (a new file
    not synced may not have one yet: hsmfs(8) BUGS)."""
    with open(path, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())


def crashed(store, opts, logdir, crash, work):
    """Run work(m) on a mount of store whose daemon crashes at the step
    crash (HSMFS_CRASH_AT): the daemon's exit status, or None if this build
    has no crash points (a release build logs no step)."""
    steps = os.path.join(logdir, "steps")
    m = Mount(store=store, opts=opts, env={"HSMFS_CRASH_AT": crash, "HSMFS_CRASH_LOG": steps},
              expect_exit=99)
    m.start()
    try:
        os.listdir(m.mnt)
        work(m)
        status = m.exited(30)
    finally:
        m.cleanup()
    return None if status is None and not os.path.exists(steps) else status


def synced_whole(m, root, name, what):
    """hsmfsctl sync of m exits 0, and the origin's tree (root/o) equals
    the mount's, byte for byte."""
    rc, out = run([HSMFSCTL, "sync", m.mnt])
    eq(rc, 0, "%s: hsmfsctl sync exits 0 (%s)" % (name, out.strip()))
    eq(differences(tree(os.path.join(root, "o")), tree(m.mnt)), [], "%s: %s" % (name, what))


def case(name, change, second=False):
    """False if this build has no crash points (a release build)."""
    with crash_setup() as (root, store, logdir, opts, _):
        def work(m):
            os.mkdir(m.path("d"))
            write_synced(m.path("d", "f.bin"), b"the first upload's bytes\n" * 200)
            if second:
                eq(run([HSMFSCTL, "archive", m.path("d", "f.bin")])[0], 0,
                   "%s: the first upload recorded" % name)
                write_synced(m.path("d", "f.bin"), b"the second upload's bytes\n" * 150)
            run([HSMFSCTL, "archive", m.path("d", "f.bin")])
        status = crashed(store, opts, logdir, "archive-answered:%d" % (2 if second else 1),
                         work)
        if status is None:
            return False
        eq(status, 99, "%s: the daemon crashed once its hook answered" % name)
        ok(os.path.exists(os.path.join(root, "o", "d", "f.bin")),
           "%s: the unanswered upload landed at the origin" % name)
        with Mount(store=store, opts=opts) as m2:
            change(m2)
            synced_whole(m2, root, name, "the origin's tree equals the mount's, byte for "
                         "byte")
    return True


def renamed_while_recorded():
    """8. A file renamed after its upload was answered, while the answer
    is being recorded (the writer held 1500 ms with its batch taken): the
    row does not say yet that the origin has the object, and the file is
    not new any more in memory.  Before, neither the rename's ops (from
    the row) nor its in-flight move (new files only) took the object
    along: it stayed under the old name, sync exiting 0.  False if this
    build has no delay points."""
    root, store, logdir = dav_root(), tmpdir("hsmfs-store-"), tmpdir("hsmfs-steps-")
    steps = os.path.join(logdir, "steps")
    try:
        with Nginx(root, extra=DAV) as ng:
            opts = "hook=%s,origin=%s,archive_after=3600" % (HTTP, ng.url("o/"))
            with Mount(store=store, opts=opts, env={"HSMFS_DELAY": "batch-taken:1500",
                                                    "HSMFS_CRASH_LOG": steps}) as m:
                os.listdir(m.mnt)
                os.mkdir(m.path("d"))
                write_synced(m.path("d", "f.bin"), b"renamed while recorded\n" * 100)
                if not os.path.exists(steps):
                    return False
                res = {}
                t = threading.Thread(target=lambda: res.update(
                    r=run([HSMFSCTL, "archive", m.path("d", "f.bin")])))
                t.start()
                wait_for(lambda: " archive-answered\n" in open(steps).read(),
                         "its upload answered")
                os.rename(m.path("d", "f.bin"), m.path("d", "g.bin"))
                t.join(60)
                synced_whole(m, root, "renamed while recorded",
                             "the origin's tree equals the mount's")
    finally:
        for d in (root, store, logdir):
            shutil.rmtree(d, ignore_errors=True)
    return True


@contextlib.contextmanager
def crash_setup():
    """nginx WebDAV over root/o, a new store and a directory for the crash
    log: (root, store, logdir, mount options with hsmfs-http, the origin's
    URL); all go after."""
    root, store, logdir = dav_root(), tmpdir("hsmfs-store-"), tmpdir("hsmfs-steps-")
    try:
        with Nginx(root, extra=DAV) as ng:
            yield (root, store, logdir, "hook=%s,origin=%s,archive_after=3600" % (
                HTTP, ng.url("o/")), ng.url("o/"))
    finally:
        for d in (root, store, logdir):
            shutil.rmtree(d, ignore_errors=True)


def moved_unanswered():
    """9. False if this build has no crash points."""
    with crash_setup() as (root, store, logdir, opts, url):
        def work(m):
            write_synced(m.path("f.bin"), b"moved, never answered\n" * 100)
            eq(run([HSMFSCTL, "archive", m.path("f.bin")])[0], 0, "move unanswered: archived")
            os.rename(m.path("f.bin"), m.path("g.bin"))
            run([HSMFSCTL, "sync", m.mnt])
        status = crashed(store, opts, logdir, "name-answered:1", work)
        if status is None:
            return False
        eq(status, 99, "move unanswered: the daemon crashed once the move was done")
        eq(sorted(os.listdir(os.path.join(root, "o"))), ["g.bin"],
           "move unanswered: the origin moved it")
        # no hook: the move is not asked again before the removal
        with Mount(store=store, opts="archive_after=3600") as m2:
            os.unlink(m2.path("g.bin"))
        with Mount(store=store, opts=opts) as m3:
            synced_whole(m3, root, "move unanswered", "then removed, nothing is left at the "
                         "origin")
    return True


@contextlib.contextmanager
def mem_mount():
    """A write-back mount of a new store whose archive hook is a MemOrigin:
    (mount, hook); the store goes after."""
    store = tmpdir("hsmfs-store-")
    try:
        with Mount(store=store, opts="archive_after=3600,timeout=20") as m:
            hook = MemOrigin(m.mnt)
            try:
                yield m, hook
            finally:
                hook.close()
    finally:
        shutil.rmtree(store, ignore_errors=True)


def stale_move():
    """10."""
    with mem_mount() as (m, hook):
        os.mkdir(m.path("d"))
        write_synced(m.path("d", "f.bin"), b"one file, three names\n" * 100)
        os.mkdir(m.path("x"))  # its op is held: the names' queue stays behind
        res = {}
        t = threading.Thread(target=lambda: res.update(
            a=run([HSMFSCTL, "archive", m.path("d", "f.bin")])))
        t.start()
        ok(hook.uploading.wait(20), "stale move: its first upload began")
        os.rename(m.path("d"), m.path("e"))  # its move recorded for that upload
        hook.fail_next = True
        hook.up.set()
        t.join(30)
        ok(res["a"][0] != 0, "stale move: the first upload failed (%s)" % res["a"][1].strip())
        os.rename(m.path("e"), m.path("g"))
        t = threading.Thread(target=lambda: res.update(
            b=run([HSMFSCTL, "archive", m.path("g", "f.bin")])))
        t.start()
        time.sleep(0.5)  # the archive's first look, before the names go (if it waits)
        hook.names.set()
        t.join(30)
        rc, out = run([HSMFSCTL, "sync", m.mnt])
        eq(rc, 0, "stale move: hsmfsctl sync exits 0 (%s)" % out.strip())
        eq(sorted(hook.objs), ["g/f.bin"],
           "stale move: the origin holds the file under its newest name only")


def renamed_back():
    """12.  False if this build has no crash points."""
    with crash_setup() as (root, store, logdir, opts, url):
        def work(m):
            write_synced(m.path("f.bin"), b"the unanswered upload's bytes\n" * 100)
            run([HSMFSCTL, "archive", m.path("f.bin")])
        status = crashed(store, opts, logdir, "archive-answered:1", work)
        if status is None:
            return False
        eq(status, 99, "renamed back: the daemon crashed once its hook answered")
        # no write-back: the names wait for the sync, after both renames
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, url)) as m2:
            os.rename(m2.path("f.bin"), m2.path("g.bin"))
            os.rename(m2.path("g.bin"), m2.path("f.bin"))
            put(m2.path("f.bin"), b"changed after it came back\n" * 80)
            synced_whole(m2, root, "renamed back", "the origin's tree equals the mount's, "
                         "byte for byte")
    return True


def removed_while_uploaded():
    """11."""
    with mem_mount() as (m, hook):
        hook.up.set()
        hook.names.set()
        write_synced(m.path("f.bin"), b"the first version\n" * 100)
        eq(run([HSMFSCTL, "archive", m.path("f.bin")])[0], 0, "removed while uploaded: "
           "archived once")
        write_synced(m.path("f.bin"), b"the second version\n" * 100)
        hook.up.clear()
        hook.uploading.clear()
        res = {}
        t = threading.Thread(target=lambda: res.update(
            a=run([HSMFSCTL, "archive", m.path("f.bin")])))
        t.start()
        ok(hook.uploading.wait(20), "removed while uploaded: the second upload began")
        os.unlink(m.path("f.bin"))
        wait_for(lambda: "f.bin" not in hook.objs, "the removal applied at the origin")
        hook.up.set()
        t.join(30)
        rc, out = run([HSMFSCTL, "sync", m.mnt])
        eq(rc, 0, "removed while uploaded: hsmfsctl sync exits 0 (%s)" % out.strip())
        eq(sorted(hook.objs), [], "removed while uploaded: nothing left at the origin")


def replaced_after_failure():
    """13."""
    with mem_mount() as (m, hook):
        hook.up.set()
        new = b"the file saved over it\n" * 100
        write_synced(m.path(".f.tmp"), new)
        eq(run([HSMFSCTL, "archive", m.path(".f.tmp")])[0], 0,
           "replaced after a failure: the temporary file archived")
        hook.up.clear()
        hook.uploading.clear()
        write_synced(m.path("f"), b"the file replaced\n" * 100)
        res = {}
        t = threading.Thread(target=lambda: res.update(a=run([HSMFSCTL, "archive", m.path("f")])))
        t.start()
        ok(hook.uploading.wait(20), "replaced after a failure: its upload began")
        os.rename(m.path(".f.tmp"), m.path("f"))  # over it, its upload in flight
        hook.fail_next = True
        hook.up.set()
        t.join(30)
        ok(res["a"][0] != 0, "replaced after a failure: the upload failed (%s)" %
           res["a"][1].strip())
        hook.names.set()
        rc, out = run([HSMFSCTL, "sync", m.mnt])
        eq(rc, 0, "replaced after a failure: hsmfsctl sync exits 0 (%s)" % out.strip())
        eq(hook.objs, {"f": new}, "replaced after a failure: the origin holds the file saved "
           "over it, under its name")


def test():
    only = os.environ.get("T0463_ONLY")
    if not only or "13" in only.split(","):
        replaced_after_failure()
    if not only or "10" in only.split(","):
        stale_move()
    if not only or "11" in only.split(","):
        removed_while_uploaded()
    if (not only or "12" in only.split(",")) and not renamed_back():
        skip("renamed away and back", "a release build has no crash points")
    for i, (name, change, second) in enumerate([c + (False,) for c in CASES] +
                                               [c + (True,) for c in SECOND]):
        if only and str(i + 1) not in only.split(","):
            continue
        if not case(name, change, second):
            skip("first uploads never answered", "a release build has no crash points")
            return
    if (not only or "8" in only.split(",")) and not renamed_while_recorded():
        skip("renamed while recorded", "a release build has no delay points")
    if (not only or "9" in only.split(",")) and not moved_unanswered():
        skip("a move never answered", "a release build has no crash points")


main(test)
