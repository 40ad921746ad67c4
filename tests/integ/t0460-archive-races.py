#!/usr/bin/env python3
"""Archive: the races and answers a review found, each a case.

1. A write through a passthrough open (root: the kernel writes the store
   file itself) during an upload is a change: the file stays dirty and
   the later bytes are archived too, never marked clean on the old ones.
2. A file imported with a manifest sha256, changed and archived, is read
   back after an eviction: the digest of the old version is not checked
   against the new one (it would make the file stale, unreadable).
3. A watcher that fails the event (by its silence: the timeout) after
   the archive hook uploaded: the origin has the bytes, so their version
   is recorded; the next archive is no conflict.
4. An unmount while an upload runs waits for it (its hook still there)
   and records it: clean after the next mount.
5. A new file renamed while the writer inserts its row (an editor's save:
   a temporary name, then the real one): hsmfsctl sync still finds it.
6. A file made on a mount with no origin: hsmfs-http refuses to archive
   it (EINVAL) rather than asking a host named after its first path
   component.
7. An origin that refuses a file as too large (413): EFBIG, not retried
   as if it would pass later.
8. resolve --keep-local (an unconditional overwrite at the origin) is the
   file's owner's: another user who can read the file may not.
9. hsmfsctl sync and archive return when interrupted (Ctrl-C) or when
   their --timeout ends, while the upload goes on (they waited for the
   upload: the kernel waits for the daemon's answer); hsmfsctl unmount
   says whether every change reached the origin, and names what did not;
   with the origin down, sync and archive say the hook's reason.
10. A rename, then at once hsmfsctl sync, while the namer is between
   finding no op left and saying so (held there by the delay point
   names-looked): the sync waits for a look that began after it asked.
   Before, it took the earlier look's word and exited 0 with the rename
   not at the origin.
11. hsmfsctl sync of 1500 new files, which the archivers take while the
   sync still pages through the dirty rows: each is at the origin when
   sync exits 0.  Before, pages went by an offset into a set the
   archived files had left, and sync exited 0 with 1% of them never
   uploaded.
12. A new file renamed while its first upload is in flight and its row
   not written yet (rsync's temporary name; the writer held by the delay
   point batch-taken): the object moves to the new name once the upload
   ends.  Before, the move found no row and was dropped; the object
   stayed under the temporary name, sync exiting 0 (rsync -a of 70
   files: 2 runs in 3 left some).
"""
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Mount, Nginx, eq, import_manifest, is_mounted,  # noqa: E402
                     main, ok, run, skip, tmpdir, wait_for, write_tree)

from archiving import HTTP, Holder, archive, dav_root, get, put, state  # noqa: E402
import hsmfs_hook  # noqa: E402,I100 (on the path archiving puts it on)

core = state


def open_pt(m, name, flags):
    """An open of name in passthrough mode (root), or None."""
    for _ in range(200):
        fd = os.open(m.path(name), flags)
        if "passthrough" in os.getxattr(m.path(name), "user.hsmfs.state").decode():
            return fd
        os.close(fd)
        time.sleep(0.02)
    return None


def test_passthrough_write():
    if os.geteuid() != 0:
        skip("a passthrough write during an upload", "passthrough needs root")
        return
    store = tmpdir("hsmfs-store-")
    with Mount(store=store, opts="archive_after=3600") as m:
        put(m.path("f"), b"first version!")
        hook = Holder(m.mnt)
        res = {}
        t = threading.Thread(target=lambda: res.update(r=archive(m.path("f"))))
        t.start()
        ok(hook.got.wait(10), "the upload of the first version runs")
        fd = open_pt(m, "f", os.O_WRONLY)
        ok(fd is not None, "an open for writing passes through")
        if fd is not None:
            os.pwrite(fd, b"FIRST VERSION!", 0)
            os.close(fd)
            wait_for(lambda: "passthrough" not in
                     os.getxattr(m.path("f"), "user.hsmfs.state").decode(), "its release")
        hook.gate.set()
        t.join(30)
        eq(res.get("r", (None,))[0], 0, "the archive ends")
        eq(hook.bytes(), [b"first version!", b"FIRST VERSION!"],
           "the passthrough write was a change: archived again with its bytes")
        eq(core(m, "f"), "resident", "and clean only then")
        hook.close()
    shutil.rmtree(store, ignore_errors=True)


def test_digest():
    import hashlib
    mirror, store = tmpdir("hsmfs-mirror-"), tmpdir("hsmfs-store-")
    data = b"original bytes\n"
    write_tree(mirror, {"a.txt": data})
    with Mount(store=store, opts="hook=%s" % HTTP) as m:
        rc, out = import_manifest(m.mnt, [{
            "path": "a.txt", "size": len(data), "url": "file://" + os.path.join(mirror, "a.txt"),
            "sha256": hashlib.sha256(data).hexdigest()}])
        eq(rc, 0, "imported with a sha256 (%s)" % out.strip())
        eq(get(m.path("a.txt")), data, "it reads, its digest checked")
        with open(m.path("a.txt"), "r+b") as f:
            f.write(b"CHANGED")
        rc, out = archive(m.path("a.txt"))
        eq(rc, 0, "archived to file:// (%s)" % out.strip())
        want = b"CHANGED" + data[7:]
        eq(get(os.path.join(mirror, "a.txt")), want, "the origin has the change")
        rc, out = run([HSMFSCTL, "evict", m.path("a.txt")])
        eq(rc, 0, "evicted (%s)" % out.strip())
        try:
            got = get(m.path("a.txt"))
        except OSError as e:
            got = e.errno
        eq(got, want, "read back from the origin: the old digest is not checked")
        ok("stale" not in state(m, "a.txt"), "not stale (%s)" % state(m, "a.txt"))
    shutil.rmtree(mirror, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test_watcher_after_upload():
    store = tmpdir("hsmfs-store-")
    with Mount(store=store, opts="archive_after=3600,timeout=2") as m:
        put(m.path("f"), b"first version!")
        hook = Holder(m.mnt, hold=False)
        w = hsmfs_hook.connect(m.mnt, "watch", ["archive"], "silent")
        silent = [True]

        def wrun():
            for ev in w.events():
                # the first: never answered (it fails at the timeout, after
                # the archive hook's allow); the next: allowed
                if "cancel" not in ev and not silent[0]:
                    w.allow(ev["id"])
        threading.Thread(target=wrun, daemon=True).start()
        rc, out = archive(m.path("f"))
        ok(rc != 0 and hook.uploads,
           "a watcher that does not answer fails the archive after the upload (%s)" % out.strip())
        eq(os.getxattr(m.path("f"), "user.hsmfs.version").decode(), '"v1"',
           "but the origin has the bytes: their version is recorded")
        eq(core(m, "f"), "dirty", "the file stays dirty, no longer new")
        silent[0] = False
        rc, out = archive(m.path("f"))
        eq(rc, 0, "the next archive is no conflict (%s)" % out.strip())
        eq(core(m, "f"), "resident", "clean")
        hook.close()
        w.close()
    shutil.rmtree(store, ignore_errors=True)


def held_upload(opts, data):
    """A mount of a new store (opts), an archive hook that holds each
    upload until its gate is set, and f written with data: (store, m,
    hook), m started; the caller stops and cleans up."""
    store = tmpdir("hsmfs-store-")
    m = Mount(store=store, opts=opts)
    m.start()
    hook = Holder(m.mnt)
    put(m.path("f"), data)
    return store, m, hook


def test_unmount_finishes():
    store, m, hook = held_upload("archive_after=1,timeout=20", b"bytes before the unmount")
    try:
        ok(hook.got.wait(10), "its upload runs")
        threading.Timer(1.0, hook.gate.set).start()
        t0 = time.monotonic()
        eq(m.stop(), 0, "unmounted")
        took = time.monotonic() - t0
        ok(0.8 <= took < 10, "the unmount waited for the upload (%.1f s), not the timeout" % took)
        eq(hook.bytes(), [b"bytes before the unmount"], "which was made")
    finally:
        m.cleanup()
    db = sqlite3.connect(os.path.join(store, ".hsmfs", "meta.db"))
    rows = list(db.execute("SELECT state, version FROM files"))
    db.close()
    eq(rows, [(3, '"v1"')], "and recorded: the row is resident at its version")
    shutil.rmtree(store, ignore_errors=True)


def test_rename_before_row():
    store, logdir = tmpdir("hsmfs-store-"), tmpdir("hsmfs-steps-")
    steps = os.path.join(logdir, "steps")
    with Mount(store=store, opts="archive_after=3600",
               env={"HSMFS_DELAY": "batch-taken:1000", "HSMFS_CRASH_LOG": steps}) as m:
        hook = Holder(m.mnt, hold=False)

        def taken():
            try:
                return open(steps).read().count("- batch-taken")
            except OSError:
                return 0
        before = taken()
        put(m.path("f.tmp"), b"saved bytes")
        # the writer took its batch with the row of f.tmp (and waits a second)
        wait_for(lambda: taken() > before, "the writer's batch with the new row")
        os.rename(m.path("f.tmp"), m.path("f"))
        rc, out = run([HSMFSCTL, "sync", m.mnt])
        eq(rc, 0, "sync (%s)" % out.strip())
        eq(hook.bytes(), [b"saved bytes"], "the renamed new file was archived")
        eq(core(m, "f"), "resident", "clean")
        hook.close()
    db = sqlite3.connect(os.path.join(store, ".hsmfs", "meta.db"))
    paths = [r[0] for r in db.execute("SELECT path FROM files")]
    db.close()
    eq(paths, ["f"], "its row has its name")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(logdir, ignore_errors=True)


def test_no_origin():
    store = tmpdir("hsmfs-store-")
    with Mount(store=store, opts="archive_after=3600,hook=%s" % HTTP) as m:
        wait_for(lambda: "hsmfs-http" in run([HSMFSCTL, "hooks", m.mnt])[1], "hsmfs-http joined")
        os.mkdir(m.path("somehost.invalid"))
        put(m.path("somehost.invalid", "secret.txt"), b"private")
        rc, out = archive(m.path("somehost.invalid", "secret.txt"))
        ok(rc != 0 and "Invalid argument" in out, "no origin: refused (%s)" % out.strip())
        ok("resolve host" not in m.output() and "no origin to archive to" in m.output(),
           "and no host was asked")
    shutil.rmtree(store, ignore_errors=True)


def test_too_large():
    root, store = dav_root(), tmpdir("hsmfs-store-")
    with Nginx(root, extra="dav_methods PUT DELETE MOVE; create_full_put_path on; "
               "client_max_body_size 1k;") as ng:
        with Mount(store=store, opts="hook=%s,origin=%s,archive_after=0" %
                   (HTTP, ng.url("o/"))) as m:
            os.listdir(m.mnt)
            put(m.path("big"), b"x" * 4096)
            rc, out = archive(m.path("big"))
            ok(rc != 0 and "too large" in out, "413: EFBIG (%s)" % out.strip())
            # the attempt ended without a retry queued (a retry would be
            # due 1 s later: attempt_ended() leaves EFBIG to who asks)
            err = os.getxattr(m.path("big"), "user.hsmfs.archive_error").decode()
            eq((err, m.stats()["archive_pending"]), ("File too large (1 attempt)", 0),
               "not queued again with write-back on")
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def way_in_for_others(m):
    """Let another user reach the mount: every directory on the way to it."""
    d = m.mnt
    while d != "/":
        os.chmod(d, os.stat(d).st_mode | 0o005)
        d = os.path.dirname(d)


def test_resolve_owner():
    """resolve --keep-local overwrites the origin's object: the file's owner
    (or root, or the mount's owner) may, another user who can read it not."""
    import pwd
    if os.geteuid() != 0:
        skip("resolve --keep-local by another user", "needs root to be another user")
        return
    store = tmpdir("hsmfs-store-")
    # (timeout=2: with no archive hook the archive waits for one that long)
    with Mount(store=store, opts="allow_other,archive_after=3600,timeout=2") as m:
        way_in_for_others(m)
        put(m.path("f"), b"root's bytes")
        os.chmod(m.path("f"), 0o644)
        rc, out = run(["runuser", "-u", pwd.getpwuid(65534).pw_name, "--", HSMFSCTL, "resolve",
                       "--keep-local", m.path("f")])
        ok(rc != 0 and "Operation not permitted" in out,
           "another user who can read it may not (%s)" % out.strip())
        rc, out = run([HSMFSCTL, "resolve", "--keep-local", m.path("f")])
        ok(rc != 0 and "no archive hook" in out,
           "its owner may: the archive itself is what fails here (%s)" % out.strip())
    shutil.rmtree(store, ignore_errors=True)


def test_archive_writer():
    """hsmfsctl archive publishes a file's bytes, drafts included: root,
    the mount's owner or a caller who may write the file may; another user
    who can read it may not (EPERM), nor one who cannot; another user's
    sync archives what that user may write and leaves the rest (exit 4);
    the owner's sync, everything."""
    import pwd
    if os.geteuid() != 0:
        skip("archive by another user", "needs root to be another user")
        return
    nobody = pwd.getpwuid(65534).pw_name
    store = tmpdir("hsmfs-store-")
    # (timeout=2: with no archive hook an archive waits for one that long)
    with Mount(store=store, opts="allow_other,archive_after=3600,timeout=2") as m:
        way_in_for_others(m)
        put(m.path("readable"), b"root's draft")
        os.chmod(m.path("readable"), 0o644)
        put(m.path("secret"), b"root's secret draft")
        os.chmod(m.path("secret"), 0o600)
        put(m.path("shared"), b"everyone's")
        os.chmod(m.path("shared"), 0o666)
        for name, why in (("readable", "Operation not permitted"),
                          ("secret", "Permission denied")):
            rc, out = run(["runuser", "-u", nobody, "--", HSMFSCTL, "archive", m.path(name)])
            ok(rc != 0 and why in out,
               "another user may not archive %s (%s)" % (name, out.strip()))
        rc, out = run(["runuser", "-u", nobody, "--", HSMFSCTL, "archive", m.path("shared")])
        ok("Operation not permitted" not in out,
           "a user who may write the file may archive it (%s)" % out.strip())
        rc, out = run([HSMFSCTL, "archive", m.path("readable")])
        ok("Operation not permitted" not in out,
           "its owner may (%s)" % out.strip())
        # another user's sync: what that user may write goes, the rest stays
        # (it was refused whole: EPERM)
        hook = Holder(m.mnt, hold=False)
        rc, out = run(["runuser", "-u", nobody, "--", HSMFSCTL, "sync", m.mnt])
        ok(rc == 4 and "other users'" in out,
           "another user's sync: exit 4, saying what it left (%s)" % out.strip())
        eq(sorted(p for p, _ in hook.uploads), ["shared"],
           "it archived the file that user may write, only that one")
        eq([state(m, n) for n in ("readable", "secret")], ["dirty,new", "dirty,new"],
           "the others are left as they were")
        rc, out = run([HSMFSCTL, "sync", m.mnt])
        eq((rc, sorted(p for p, _ in hook.uploads)), (0, ["readable", "secret", "shared"]),
           "the owner's sync archives the rest (%s)" % out.strip())
        hook.close()
    shutil.rmtree(store, ignore_errors=True)


def test_redispatched_path():
    """An upload asked of one hook, the file renamed, the hook gone with no
    answer (it may have uploaded): the next hook is sent the same path,
    the one its landing was recorded at, not the file's new name (it was:
    the first hook's object stayed at the old name, unrecorded, once the
    second one's answer was)."""
    store = tmpdir("hsmfs-store-")
    with Mount(store=store, opts="archive_after=3600,timeout=20") as m:
        put(m.path("f"), b"a new file")
        a = hsmfs_hook.connect(m.mnt, "fill", ["archive"], "first")
        res = {}
        t = threading.Thread(target=lambda: res.update(r=archive(m.path("f"))))
        t.start()
        ev = next(e for e in a.events() if "cancel" not in e)
        os.close(ev["fd"])
        os.rename(m.path("f"), m.path("g"))
        b = Holder(m.mnt, hold=False)
        a.close()  # gone without an answer
        t.join(30)
        eq(res.get("r", (None,))[0], 0, "archived by the next hook")
        eq([p for p, _ in b.uploads], [ev["path"]],
           "the next hook was sent the first one's path (%s)" % ev["path"])
        b.close()
    shutil.rmtree(store, ignore_errors=True)


GETXATTR = {"x86_64": "191", "aarch64": "8"}.get(os.uname().machine)


def in_getxattr(pid):
    """Is process pid in getxattr(2), its request with the daemon?"""
    try:
        with open("/proc/%d/syscall" % pid) as f:
            return f.read().split()[0] == GETXATTR
    except (OSError, IndexError):
        return False


def ctl_bg(*args):
    return subprocess.Popen([HSMFSCTL] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def ended(p, limit):
    """p's (returncode, seconds it took, stdout, stderr), killed after limit."""
    t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return p.returncode, time.monotonic() - t0, out, err


def test_interrupted():
    """An upload held at the origin: hsmfsctl sync and archive, interrupted
    or past their --timeout, return at once (they returned only when the
    upload ended), and the upload goes on; hsmfsctl unmount waits for it
    and says every change is there."""
    if not GETXATTR:
        skip("interrupted sync and archive", "a machine whose getxattr number is not known")
        return
    store, m, hook = held_upload("archive_after=3600,timeout=30", b"held at the origin")
    try:
        for what, args in (("sync", ["sync", m.mnt]), ("archive", ["archive", m.path("f")])):
            p = ctl_bg(*args)
            wait_for(lambda: in_getxattr(p.pid), "hsmfsctl %s to wait in the daemon" % what)
            ok(hook.got.wait(10), "the upload is held")
            p.send_signal(signal.SIGINT)
            rc, took, _, _ = ended(p, 10)
            ok(rc == -signal.SIGINT and took < 3,
               "Ctrl-C of hsmfsctl %s ends it at once (%.1f s, status %s)" % (what, took, rc))
        for what, args in (("sync", [m.mnt]), ("archive", [m.path("f")])):
            rc, took, _, err = ended(ctl_bg(what, "--timeout", "1", *args), 15)
            ok(rc == 4 and 0.9 <= took < 4 and "not done within" in err,
               "hsmfsctl %s --timeout 1: exit 4 after %.1f s, saying so (%r)"
               % (what, took, err.strip()))
        ok(state(m, "f").startswith("dirty"), "the file is not archived yet (%s)" % state(m, "f"))
        # the upload is held until the mount is gone: the sync cannot end
        # first, the daemon finishes the upload after the unmount
        p = ctl_bg("unmount", "--timeout", "0.5", m.mnt)
        wait_for(lambda: not is_mounted(m.mnt), "hsmfsctl unmount to unmount")
        hook.gate.set()
        rc, took, out, err = ended(p, 30)
        ok(rc == 0 and "every change is at the origin" in out and "not done within" in err,
           "hsmfsctl unmount: the sync it waited half a second for was not done, but the "
           "daemon finished the upload before it ended: exit 0, saying so (%s, %r, %r)"
           % (rc, out.strip(), err.strip()))
        eq(m.proc.wait(10), 0, "its daemon exited 0")
        eq(hook.bytes(), [b"held at the origin"], "the one upload was made, once")
    finally:
        m.cleanup()
    shutil.rmtree(store, ignore_errors=True)


def test_unmount_tells():
    """hsmfsctl unmount --timeout 0 (no sync) of a mount with an origin and
    no write-back: exit 4, the file not archived named; the daemon's log
    names it too (it logged only the files queued: here none)."""
    store, root = tmpdir("hsmfs-store-"), dav_root()
    ng = Nginx(root, extra="dav_methods PUT DELETE MOVE; create_full_put_path on;")
    ng.__enter__()
    m = Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("o/")))
    m.start()
    try:
        os.listdir(m.mnt)
        put(m.path("new-one"), b"never archived")
        rc, _, _, err = ended(ctl_bg("status", "-s", store), 10)
        ok(rc == 3 and "mounted" in err, "hsmfsctl status -s of the store while mounted: "
           "exit 3, saying so (%r)" % err.strip())
        rc, took, out, err = ended(ctl_bg("unmount", "--timeout", "0", m.mnt), 30)
        ok(rc == 4 and "1 file and 0 name changes not at the origin yet" in out and
           "not archived: new-one" in out and took < 10,
           "hsmfsctl unmount, not synced: exit 4 (%.1f s), the file named (%s, %r, %r)"
           % (took, rc, out.strip(), err.strip()))
        ok(not is_mounted(m.mnt), "unmounted all the same")
        eq(m.proc.wait(10), 0, "its daemon exited 0")
        ok("unmounted with 1 file changed and not at the origin ('new-one')" in m.output(),
           "the daemon's log names it")
        rc, _, out, err = ended(ctl_bg("status", "-s", store), 10)
        lines = out.splitlines()
        ok(rc == 0 and len(lines) == 3 and lines[1].split() == ["dirty,new", "14", "new-one"]
           and lines[2] == "1 file and 0 name changes not at the origin",
           "hsmfsctl status -s of the unmounted store lists it (%r, %r)" % (out, err))
        rc, _, _, err = ended(ctl_bg("unmount", m.mnt), 10)
        ok(rc == 3 and "not" in err, "unmount of what is no mount: exit 3 (%r)" % err.strip())
    finally:
        m.cleanup()
        ng.__exit__(None, None, None)
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def test_origin_down_said():
    """The origin down: hsmfsctl sync and archive say the hook's reason
    (Couldn't connect to server), not only the kernel's EIO."""
    store, root = tmpdir("hsmfs-store-"), dav_root()
    ng = Nginx(root, extra="dav_methods PUT DELETE MOVE; create_full_put_path on;")
    ng.__enter__()
    try:
        with Mount(store=store, opts="hook=%s --retries 0,origin=%s,timeout=10"
                   % (HTTP, ng.url("o/"))) as m:
            os.listdir(m.mnt)
            put(m.path("f"), b"the origin is down")
            ng.__exit__(None, None, None)
            ng = None
            for what, path in (("sync", m.mnt), ("archive", m.path("f"))):
                rc, _, _, err = ended(ctl_bg(what, path), 30)
                ok(rc == 4 and "Couldn't connect to server" in err,
                   "hsmfsctl %s with the origin down says why (%r)" % (what, err.strip()))
    finally:
        if ng:
            ng.__exit__(None, None, None)
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def test_sync_after_look():
    """10.  False if this build has no delay points."""
    from archiving import MemOrigin
    store, logdir = tmpdir("hsmfs-store-"), tmpdir("hsmfs-steps-")
    steps = os.path.join(logdir, "steps")
    try:
        with Mount(store=store, opts="archive_after=0,timeout=20",
                   env={"HSMFS_DELAY": "names-looked:700", "HSMFS_CRASH_LOG": steps}) as m:
            hook = MemOrigin(m.mnt)
            hook.up.set()
            hook.names.set()
            hook.name_delay = 0.3  # a move takes a while at this origin
            put(m.path("f0"), b"renamed, then synced at once")
            eq(run([HSMFSCTL, "sync", m.mnt])[0], 0, "look then sync: archived")
            if not os.path.exists(steps):
                hook.close()
                return False
            def looks():
                with open(steps) as f:
                    return f.read().count(" names-looked\n")
            missed = []
            for i in range(1, 7):
                # once the namer is inside a look that found nothing (its
                # step logged as it enters the delay), the rename and the sync
                seen = looks()
                wait_for(lambda: looks() > seen, "the namer inside a look")
                os.rename(m.path("f%d" % (i - 1)), m.path("f%d" % i))
                rc, out = run([HSMFSCTL, "sync", m.mnt])
                if rc != 0 or sorted(hook.objs) != ["f%d" % i]:
                    missed.append((i, rc, sorted(hook.objs)))
            eq(missed, [], "look then sync: each sync found the rename just made at the origin")
            hook.close()
    finally:
        for d in (store, logdir):
            shutil.rmtree(d, ignore_errors=True)
    return True


def test_sync_pages():
    """11."""
    from archiving import MemOrigin
    store = tmpdir("hsmfs-store-")
    try:
        with Mount(store=store, opts="archive_after=3600,timeout=20") as m:
            hook = MemOrigin(m.mnt)
            hook.up.set()
            hook.names.set()
            for d in range(10):
                os.mkdir(m.path("d%d" % d))
            want = ["d%d/f%d" % (i % 10, i) for i in range(1500)]
            for p in want:
                with open(m.path(p), "wb") as f:
                    f.write(p.encode())
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "sync of 1500 new files: exit 0 (%s)" % out.strip())
            missing = sorted(set(want) - set(hook.objs))
            eq((len(missing), missing[:5]), (0, []),
               "sync of 1500 new files: each is at the origin once sync exits 0")
            hook.close()
    finally:
        shutil.rmtree(store, ignore_errors=True)


def test_renamed_first_upload():
    """12."""
    from archiving import MemOrigin
    store = tmpdir("hsmfs-store-")
    try:
        with Mount(store=store, opts="archive_after=0,timeout=20,log_level=debug",
                   env={"HSMFS_DELAY": "batch-taken:1500"}) as m:
            hook = MemOrigin(m.mnt)
            hook.names.set()
            put(m.path(".f.tmp"), b"written under a temporary name\n" * 50)
            ok(hook.uploading.wait(20), "renamed during its first upload: the upload began")
            os.rename(m.path(".f.tmp"), m.path("f"))
            # the namer at the move: applied (before), or waiting for the upload
            ok(wait_for(lambda: re.search(r"name op \d+( \(kind 2, inode \d+, 'f', .*\): done|"
                                          r": waits for the upload)", m.output()),
                        "the namer at the move"), "renamed during its first upload: the move "
               "is asked")
            hook.up.set()
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "renamed during its first upload: sync exits 0 (%s)" % out.strip())
            eq(sorted(hook.objs), ["f"],
               "renamed during its first upload: the origin holds it under its new name only")
            hook.close()
    finally:
        shutil.rmtree(store, ignore_errors=True)


def test():
    test_renamed_first_upload()
    test_sync_pages()
    if not test_sync_after_look():
        skip("a sync while the namer looks", "a release build has no delay points")
    test_origin_down_said()
    test_interrupted()
    test_unmount_tells()
    test_redispatched_path()
    test_archive_writer()
    test_resolve_owner()
    test_passthrough_write()
    test_digest()
    test_watcher_after_upload()
    test_unmount_finishes()
    test_rename_before_row()
    test_no_origin()
    test_too_large()


main(test)
