#!/usr/bin/env python3
"""Archive: names changed while a file's first upload is in flight (#49).

nginx with the WebDAV module is the origin, behind tests/bench/wanproxy.py
throttled to 2 MB/s, so that the first upload of a new 8 MiB file takes
seconds; each case waits until the file shows ",archiving" (the upload
runs) and its PUT's body is arriving at nginx (nginx's temporary file
for it has begun), then changes a name:

1. the file is removed: it is never left published at the origin;
2. removed and made again under the same name: the new file reaches the
   origin (no conflict with the bytes of the removed one);
3. another new file is renamed over it: the origin ends with that file's
   bytes under the name and nothing under the source name;
4. the file itself is renamed: its bytes end under the new name, no
   stray copy under the old one.

The removal is also crashed at its step of the durability order
(archive-gone-recorded: the upload landed after the file's removal, its
own removal recorded), and a mount of the same store then syncs; the
removal and the rename are crashed at archive-answered too (the upload
landed, its answer never read: the next daemon finds where it went in
the landings table and removes the object there).

Each case ends with hsmfsctl sync exiting 0 and the origin's tree equal
to the mount's, byte for byte.
"""
import contextlib
import os
import re
import shutil
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Mount, Nginx, WanProxy, diag, eq, evict_closed, main, run, skip,  # noqa: E402
                     steps, tmpdir, wait_for)

from archiving import (DAV, HTTP, archive, dav_root, differences, get, put,  # noqa: E402
                       state, tree)

MIB = 1 << 20
BIG = 8 * MIB


def body_arriving(ng):
    """Is a request body on its way into nginx (its temporary file begun)?"""
    for d, _, files in os.walk(os.path.join(ng.dir, "body")):
        for n in files:
            try:
                if os.path.getsize(os.path.join(d, n)):
                    return True
            except OSError:
                pass
    return False


def case(name, change, crash=None, sub=""):
    """A mount whose new file big.bin's upload is in flight when change(m)
    runs; then sync, and the origin compared with the mount.  crash: a
    durability step the daemon crashes at (its first), then a mount of the
    same store syncs.  sub: the directory of big.bin and other.bin (made on
    the mount), "" for the root."""
    root, store = dav_root(), tmpdir("hsmfs-store-")
    with Nginx(root, extra=DAV) as ng:
        px = WanProxy(ng.port, delay_ms=1, rate_mbs=2)
        opts = "hook=%s,origin=%s,archive_after=3600" % (HTTP, px.url("o/"))
        try:
            m = Mount(store=store, opts=opts, env={"HSMFS_CRASH_AT": crash + ":1"} if crash
                      else None, expect_exit=99 if crash else 0)
            m.start()
            try:
                os.listdir(m.mnt)
                if sub:
                    os.mkdir(m.path(sub))
                put(m.path(sub, "big.bin"), os.urandom(BIG))
                put(m.path(sub, "other.bin"), b"the other file\n" * 100)
                res = {}
                t = threading.Thread(target=lambda: res.update(
                    r=archive(m.path(sub, "big.bin"))))
                t.start()
                wait_for(lambda: "archiving" in state(m, sub, "big.bin"),
                         "the archive of big.bin runs")
                wait_for(lambda: body_arriving(ng), "its PUT's body arrives at the origin")
                change(m)
                t.join(120)
                diag("%s: the archive in flight answered %r; origin then: %s" % (
                    name, res.get("r"), sorted(os.listdir(os.path.join(root, "o")))))
                if crash:
                    eq(m.exited(30), 99, "%s: the daemon crashed at %s" % (name, crash))
                else:
                    synced_like_mount(name, m, root)
            finally:
                if crash:
                    m.cleanup()
                else:
                    m.__exit__(*sys.exc_info())
            if crash:
                with Mount(store=store, opts=opts) as m2:
                    synced_like_mount(name + ", crashed at %s" % crash, m2, root)
        finally:
            px.stop()
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def synced_like_mount(name, m, root):
    rc, out = run([HSMFSCTL, "sync", m.mnt])
    eq(rc, 0, "%s: hsmfsctl sync exits 0 (%s)" % (name, out.strip()))
    eq(differences(tree(os.path.join(root, "o")), tree(m.mnt)), [],
       "%s: the origin's tree equals the mount's, byte for byte" % name)


def removed(m):
    os.unlink(m.path("big.bin"))


def made_again(m):
    os.unlink(m.path("big.bin"))
    put(m.path("big.bin"), b"made again\n" * 1000)


def renamed_over(m):
    os.rename(m.path("other.bin"), m.path("big.bin"))


def renamed(m):
    os.rename(m.path("big.bin"), m.path("moved.bin"))


def dir_renamed(m):
    os.rename(m.path("d"), m.path("d2"))


def dir_renamed_twice(m):
    os.rename(m.path("d"), m.path("d2"))
    os.rename(m.path("d2"), m.path("d3"))


CASES = [("removed during its upload", removed),
         ("removed and made again during its upload", made_again),
         ("another new file renamed over it during its upload", renamed_over),
         ("renamed during its upload", renamed)]
# (name, change, its directory)
DIR_CASES = [("its directory renamed during its upload", dir_renamed, "d"),
             ("its directory renamed twice during its upload", dir_renamed_twice, "d")]
CRASHES = [("removed during its upload", removed, "archive-gone-recorded"),
           # the answer never read: the next daemon removes what landed
           ("removed during its upload", removed, "archive-answered"),
           ("renamed during its upload", renamed, "archive-answered")]


def removed_before_upload():
    """A guard: a new file removed after its snapshot but before its
    upload began (the daemon held at "archive-snapshot"): nothing is sent,
    not a PUT then a DELETE (a removed file published, however briefly).
    The archive of a removed file fails (ENOENT) before any request."""
    root, store, logdir = dav_root(), tmpdir("hsmfs-store-"), tmpdir("hsmfs-steps-")
    steps = os.path.join(logdir, "steps")
    with Nginx(root, extra=DAV) as ng:
        opts = "hook=%s,origin=%s,archive_after=3600" % (HTTP, ng.url("o/"))
        with Mount(store=store, opts=opts, env={"HSMFS_DELAY": "archive-snapshot:1500",
                                                "HSMFS_CRASH_LOG": steps}) as m:
            os.listdir(m.mnt)
            put(m.path("gone.bin"), b"removed before its upload\n")
            res = {}
            t = threading.Thread(target=lambda: res.update(r=archive(m.path("gone.bin"))))
            t.start()

            def snapshotted():
                try:
                    return " archive-snapshot\n" in open(steps).read()
                except OSError:
                    return False
            wait_for(snapshotted, "its snapshot taken, the upload not begun")
            os.unlink(m.path("gone.bin"))
            t.join(60)
            eq(run([HSMFSCTL, "sync", m.mnt])[0], 0, "removed before its upload: sync exits 0")
            eq([r for r in ng.log() if r[0] == "PUT" and "gone.bin" in r[1]], [],
               "removed before its upload: no PUT of it reached the origin")
            eq(differences(tree(os.path.join(root, "o")), tree(m.mnt)), [],
               "removed before its upload: the origin's tree equals the mount's")
    for d in (root, store, logdir):
        shutil.rmtree(d, ignore_errors=True)


class Held:
    """What held_mount() yields: m, the mount; root, the origin's
    directory (its objects under o/); ng, nginx; log, the daemon's
    HSMFS_CRASH_LOG (its delay points' lines)."""

    def __init__(self, m, root, ng, log):
        self.m, self.root, self.ng, self.log = m, root, ng, log

    def __iter__(self):
        return iter((self.m, self.root))

    def has_delays(self):
        """Does this build have delay points (a debug build's)?"""
        return os.path.exists(self.log)


@contextlib.contextmanager
def held_mount(archive_after, delay, opts=""):
    """A mount of an nginx WebDAV origin ("o/" under root) whose daemon
    sleeps at the fault points HSMFS_DELAY names (a debug build's):
    yields a Held; every directory goes at the end.  opts: more mount
    options."""
    root, store, logdir = dav_root(), tmpdir("hsmfs-store-"), tmpdir("hsmfs-steps-")
    log = os.path.join(logdir, "steps")
    try:
        with Nginx(root, extra=DAV) as ng:
            o = "hook=%s,origin=%s,archive_after=%d" % (HTTP, ng.url("o/"), archive_after)
            with Mount(store=store, opts=o + ("," + opts if opts else ""),
                       env={"HSMFS_DELAY": delay, "HSMFS_CRASH_LOG": log}) as m:
                os.listdir(m.mnt)
                yield Held(m, root, ng, log)
    finally:
        for d in (root, store, logdir):
            shutil.rmtree(d, ignore_errors=True)


def renamed_then_removed():
    """A directory renamed, and a file of it removed before the rename
    reached the origin (the namer held at each op: name-applied 700 ms):
    the file's move is dropped (it is gone), its removal is recorded after
    the old directory's, which then finds the object still there.  The
    directory's removal is asked again after the file's (ENOTEMPTY from
    the hook); before, it was dropped and the old directory stayed at the
    origin with the removed file in it, sync exiting 0."""
    with held_mount(3600, "name-applied:700") as (m, root):
        os.mkdir(m.path("d"))
        put(m.path("d", "f"), b"to be removed")
        put(m.path("d", "g"), b"to stay")
        eq(run([HSMFSCTL, "sync", m.mnt])[0], 0, "renamed then removed: first sync")
        eq(sorted(os.listdir(os.path.join(root, "o", "d"))), ["f", "g"],
           "renamed then removed: both files at the origin")
        os.rename(m.path("d"), m.path("d2"))
        os.unlink(m.path("d2", "f"))
        synced_like_mount("renamed then removed", m, root)


def number_reused():
    """A file renamed and then removed before its move reached the origin,
    and a new file that the store gives the removed one's inode number,
    uploaded at once (archive_after=0) while the namer is held
    (name-applied 2000 ms after a directory's op): the removed file's move
    must not move the new file's object under the removed file's name.
    Before, the origin held the new file's bytes as "b" and nothing as
    "c", sync exiting 0."""
    with held_mount(0, "name-applied:2000") as (m, root):
        put(m.path("a"), b"the first file")
        eq(run([HSMFSCTL, "sync", m.mnt])[0], 0, "number reused: first sync")
        old = os.stat(m.spath("a")).st_ino
        os.mkdir(m.path("d"))  # the namer applies it, then waits 2 s
        os.rename(m.path("a"), m.path("b"))
        os.unlink(m.path("b"))
        put(m.path("c"), b"the new file, which took a's number")
        if os.stat(m.spath("c")).st_ino != old:
            skip("number reused", "the store's filesystem gave c another inode number")
            return
        wait_for(lambda: state(m, "c") == "resident", "c uploaded (the namer still held)")
        synced_like_mount("number reused", m, root)


def renamed_while_moved():
    """A file renamed twice; the namer applies the first move while the
    second rename has moved the store's name but not yet the row (the
    namer held 4000 ms after a directory's op, each rename 3000 ms
    at rename-stored).  Before, the namer's walk to the first new name
    missed and forgot the row's path, the second rename then found no row
    to move, and the object stayed under the first name while sync exited
    0.  Now it ends under the last one."""
    with held_mount(3600, "name-applied:4000,rename-stored:3000") as (m, root):
        put(m.path("a"), b"renamed twice")
        eq(run([HSMFSCTL, "sync", m.mnt])[0], 0, "renamed while moved: first sync")
        os.mkdir(m.path("x"))  # the namer applies it, then waits
        os.rename(m.path("a"), m.path("b"))
        os.rename(m.path("b"), m.path("c"))
        synced_like_mount("renamed while moved", m, root)


def saved_over_while_answered(other=False):
    """A file the origin has, changed and uploaded; while that upload's
    answer is held (archive-answered 3000 ms, the object landed), another
    file with the same bytes and mtime is saved over it (as git gc writes
    logs/HEAD.lock and renames it over logs/HEAD), and sync runs at once:
    its upload gets the validator the held one got (nginx's ETag is the
    mtime and size).  Before, the held upload's answer recorded a removal
    of its object at the name, of that version, which removed the other
    file's: sync exited 0 with the name missing at the origin (t0547 in
    CI, ASan, root: repo/.git/logs/HEAD).  Now the namer finds that object
    is the other file's and keeps it.  other: the file saved over has
    other bytes and mtime (an editor's save by rename), so another
    version: the object is that file's all the same, and the removal is
    not applied (a conditional one would find that version and say the
    origin changed under it: a conflict).  False if this build has no
    delay points."""
    with held_mount(3600, "archive-answered:3000") as h:
        m = h.m
        put(m.path("f"), b"the first version\n" * 100)
        eq(run([HSMFSCTL, "sync", m.mnt])[0], 0, "saved over while answered: first sync")
        if not h.has_delays():
            return False
        with open(m.path("f"), "ab") as f:
            f.write(b"appended\n" * 10)
        data, st = get(m.path("f")), os.stat(m.path("f"))
        n = steps(h.log, "archive-answered")
        res = {}
        t = threading.Thread(target=lambda: res.update(r=archive(m.path("f"))))
        t.start()
        wait_for(lambda: steps(h.log, "archive-answered") > n, "its upload answered")
        what = "saved over while answered" + (" (other bytes)" if other else "")
        put(m.path("f.lock"), data + b"saved by an editor\n" if other else data)
        if not other:
            os.utime(m.path("f.lock"), ns=(st.st_atime_ns, st.st_mtime_ns))
        os.rename(m.path("f.lock"), m.path("f"))
        rc, out = run([HSMFSCTL, "sync", m.mnt])  # at once, the answer still held
        t.join(60)
        diag("%s: the held archive answered %r" % (what, res.get("r")))
        eq(rc, 0, "%s: hsmfsctl sync exits 0 (%s)" % (what, out.strip()))
        eq(differences(tree(os.path.join(h.root, "o")), tree(m.mnt)), [],
           "%s: the origin's tree equals the mount's, byte for byte" % what)
        eq(m.stats()["conflicts"], 0, "%s: no conflict counted" % what)
    return True


def removed_before_its_row(held_open=False):
    """A new file uploaded at once (archive_after=0) while the writer holds
    a batch it took before the file was made (batch-taken 4000 ms): the
    upload answers and memory records the object ("new" gone from its
    state) while its row is still the writer's next batch; the file is
    removed then.  That batch skips a removed file, so no row ever says
    the origin has it.  Before, its removal found no row and recorded
    nothing (its archiver then forgot its landing), and sync exited 0
    with the file still at the origin (t0547, 1 run in 10: rm -rf
    include/hsmfs left protocol.h there).  held_open: the file is open
    while removed, so the keeper's orphan link takes over its name before
    the removal is recorded (its path was then not known: nothing was
    recorded still).  False if this build has no delay points."""
    with held_mount(0, "batch-taken:4000") as h:
        m = h.m
        n = steps(h.log, "batch-taken")
        put(m.path("a"), b"a file whose row the writer holds\n")
        try:
            wait_for(lambda: steps(h.log, "batch-taken") > n, "the writer holds a batch",
                     deadline=10)
        except TimeoutError:
            if not h.has_delays():
                return False
            raise
        n = steps(h.log, "batch-taken")
        put(m.path("f"), b"removed before its row was written\n" * 100)
        wait_for(lambda: ",new" not in state(m, "f"), "f uploaded, its row not written")
        fd = os.open(m.path("f"), os.O_RDONLY) if held_open else -1
        what = "removed before its row" + (", open" if held_open else "")
        try:
            os.unlink(m.path("f"))
            eq(steps(h.log, "batch-taken"), n, "%s: the writer took no batch since f was "
               "made (its row was not written)" % what)
            synced_like_mount(what, m, h.root)
        finally:
            if fd >= 0:
                os.close(fd)
    return True


def moved_then_read():
    """A file the origin has, evicted, renamed; the hook moves its object
    (copied to the new place, removed from the old) and the daemon has
    not recorded the new place yet (name-answered 3000 ms), and the file
    is read then.  Its fill waits for the move and asks the new place.
    Before, it asked the old one, which the move had just emptied: 404,
    and the reader got EIO (t0210 met it on S3 in CI).  False if this
    build has no delay points."""
    what = "moved then read"
    data = b"moved, then read\n" * 1000
    with held_mount(3600, "name-answered:3000") as h:
        m = h.m
        put(m.path("f"), data)
        eq(run([HSMFSCTL, "sync", m.mnt])[0], 0, "%s: first sync" % what)
        if not h.has_delays():
            return False
        evict_closed(m.path("f"))
        n = steps(h.log, "name-answered")
        os.rename(m.path("f"), m.path("g"))
        t = threading.Thread(target=lambda: run([HSMFSCTL, "sync", m.mnt]))
        t.start()
        wait_for(lambda: steps(h.log, "name-answered") > n,
                 "the object moved, the new place not recorded", deadline=30)
        got = {}
        try:
            with open(m.path("g"), "rb") as f:
                got["data"] = f.read()
        except OSError as e:
            got["errno"] = e.errno
        eq(got, {"data": data}, "%s: the file reads right while its object moves" % what)
        t.join(60)
        synced_like_mount(what, m, h.root)
    return True


def moved_then_removed():
    """A file the origin has, renamed; the namer moves its object and
    waits for the writer's batch that records the new place (every batch
    held: batch-taken 3000 ms), and the file is removed then (name-moved:
    its new place is in memory).  Its removal is recorded with that new
    place.  Before, the namer, finding the file gone once the batch was
    written, recorded the removal again: a second removal of the new
    name, conditional on the removed object's version, asked of the
    origin after the first (the daemon's log shows two: log_level=debug).  Harmless only while
    nothing else is there by then: a new file saved at that name and
    uploaded, then renamed away before the duplicate ran, made it find
    another version (a false conflict) or, with the same validator,
    remove that file's object.  Now the namer records a removal only for
    a file removed while its move was in flight (recorded then with the
    old place).  False if this build has no delay points."""
    what = "moved then removed"
    with held_mount(3600, "batch-taken:3000,name-moved:1", opts="log_level=debug") as h:
        m = h.m
        put(m.path("f"), b"moved, then removed\n" * 100)
        eq(run([HSMFSCTL, "sync", m.mnt])[0], 0, "%s: first sync" % what)
        if not h.has_delays():
            return False
        n = steps(h.log, "name-moved")
        os.rename(m.path("f"), m.path("g"))
        t = threading.Thread(target=lambda: run([HSMFSCTL, "sync", m.mnt]))
        t.start()
        wait_for(lambda: steps(h.log, "name-moved") > n,
                 "the object moved, its batch not written", deadline=30)
        os.unlink(m.path("g"))
        t.join(60)
        synced_like_mount(what, m, h.root)
        eq([r[:3] for r in h.ng.log() if r[:2] == ("DELETE", "/o/g")],
           [("DELETE", "/o/g", 204)], "%s: one DELETE of the new name" % what)
        # its removal recorded once (an unland of the move's place may
        # follow, when the move was the first op: journal.c)
        removals = re.findall(r"name op \d+ \(kind 1, inode \d+, 'g'", m.output())
        eq(len(removals), 1, "%s: one removal of the new name recorded" % what)
        eq(m.stats()["conflicts"], 0, "%s: no conflict counted" % what)
    return True


def test():
    only = os.environ.get("T0462_ONLY")
    if not only or "b" in only.split(","):
        removed_before_upload()
    if not only or "r" in only.split(","):
        renamed_then_removed()
    if not only or "n" in only.split(","):
        number_reused()
    if not only or "s" in only.split(","):
        renamed_while_moved()
    # the cases on a debug build's delay points: (letters, name, run)
    for key, name, fn in (
            ("w", "saved over while answered", saved_over_while_answered),
            ("wo", "saved over while answered (other bytes)",
             lambda: saved_over_while_answered(other=True)),
            ("u", "removed before its row", removed_before_its_row),
            ("uo", "removed before its row, open", lambda: removed_before_its_row(held_open=True)),
            ("md", "moved then removed", moved_then_removed),
            ("mr", "moved then read", moved_then_read)):
        if (not only or key in only.split(",")) and not fn():
            skip(name, "a release build has no delay points")
    for i, (name, change) in enumerate(CASES):
        if not only or str(i + 1) in only.split(","):
            case(name, change)
    for i, (name, change, sub) in enumerate(DIR_CASES):
        if not only or "d%d" % (i + 1) in only.split(","):
            case(name, change, sub=sub)
    for i, (name, change, step) in enumerate(CRASHES):
        if not only or "c%d" % (i + 1) in only.split(","):
            case(name, change, crash=step)


main(test)
