#!/usr/bin/env python3
"""backend=fanotify: the same hooks and fills, raised by the kernel's
fanotify pre-content events (Linux 6.14) on a bind mount of the store.

In the spirit of LTP fanotify24: the range the kernel asks for reaches
the hook, the hook's errno reaches the reader (FAN_DENY_ERRNO), a write
into a missing range is filled first, an mmap raises one event for its
range, no event for bytes present, and the mark of a file goes once it
is all present (the group's marks read from /proc/PID/fdinfo).  Then
the tools users copy with (cp, tar, rsync) on files not fetched yet,
and the end: an unmount, a signal, and events no hook answered denied
at the end, never allowed.  Needs root, a 6.14 kernel and an ext4
store (a loop image); the refusals run everywhere.
"""

import contextlib
import errno
import mmap
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Hook, Mount, Nginx, WanProxy, diag, dread, eq, errno_of,
                     fs_image, fs_image_drop, is_mounted, is_root, main, ok, run, skip, tmpdir,
                     tmpfs, tmpfs_drop, unmount, wait_for, write_tree)

P = 4096
FAN = "backend=fanotify,timeout=3,first_fill=0" + os.environ.get("FANX", "")


def kernel_has_pre_content():
    rel = os.uname().release.split("-")[0].split(".")
    return (int(rel[0]), int(rel[1])) >= (6, 14)


def has_point(name):
    """Has this hsmfs the fault point name (fs/fault.h)?  A release build has none."""
    with open(HSMFS, "rb") as f:
        return name.encode() in f.read()


def import_offline(store, mirror, files, relative=False):
    """Placeholders for files (name: bytes) in the unmounted store, each
    with its file:// url in mirror (hsmfsctl import -s), or relative:
    its name in mirror (hsmfs-mirror's way)."""
    import json
    write_tree(mirror, files)
    os.makedirs(store, exist_ok=True)
    d = tmpdir("hsmfs-man-")
    p = os.path.join(d, "m.jsonl")
    with open(p, "w") as f:
        for name, data in files.items():
            f.write(json.dumps({"path": name, "size": len(data),
                                "url": name if relative else
                                "file://" + os.path.join(mirror, name)}) + "\n")
    rc, out = run([HSMFSCTL, "import", "-s", store, p])
    if rc:
        raise RuntimeError("import failed: " + out)


def group_marks(pid):
    """The inode numbers the daemon's pre-content group marks (fdinfo)."""
    marks = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) != "anon_inode:[fanotify]":
                continue
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                for line in f:
                    w = dict(x.split(":", 1) for x in line.split()[1:] if ":" in x)
                    # the pre-content group's (mask FAN_PRE_ACCESS), not the watch's
                    if line.startswith("fanotify ino:") and int(w["mask"], 16) & 0x100000:
                        marks.add(int(w["ino"], 16))
        except OSError:
            pass
    return marks


def sqlite_db():
    """The bytes of a SQLite database of 500 rows of 1000 bytes."""
    import sqlite3
    d = tmpdir("hsmfs-db-")
    p = os.path.join(d, "db")
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    db.executemany("INSERT INTO t (v) VALUES (?)", [(os.urandom(1000),) for _ in range(500)])
    db.commit()
    db.close()
    with open(p, "rb") as f:
        data = f.read()
    subprocess.run(["rm", "-rf", d])
    return data


def test_refusals():
    """What cannot work fails the mount in one line, before anything is
    mounted."""
    d = tmpdir()
    store, mnt = os.path.join(d, "store"), os.path.join(d, "mnt")
    os.mkdir(store)
    os.mkdir(mnt)
    rc, out = run([HSMFS, "-f", store, mnt, "-o", "backend=fanotify,archive_after=1"])
    ok(rc == 1 and "backend=fanotify does not support archive_after yet" in out,
       "archive_after= is refused on backend=fanotify (exit 1)")
    rc, out = run([HSMFS, "-f", store, mnt, "-o", "backend=fanotify,cache_max=1G"])
    ok(rc == 1 and "cache_max needs thin" in out,
       "cache_max= without thin is refused on backend=fanotify (exit 1): %s" % out.strip())
    rc, out = run([HSMFS, "-f", store, mnt, "-o", "thin"])
    ok(rc == 1 and "option 'thin' is backend=fanotify's" in out,
       "thin is refused on a FUSE mount (exit 1): %s" % out.strip())
    rc, out = run([HSMFS, "-f", store, mnt, "-o", "backend=nfs"])
    ok(rc == 1 and "needs 'fuse' or 'fanotify'" in out, "an unknown backend is refused")
    if not is_root():
        rc, out = run([HSMFS, "-f", store, mnt, "-o", "backend=fanotify"])
        ok(rc == 4 and "needs CAP_SYS_ADMIN" in out and len(out.strip().splitlines()) == 1,
           "a user's fanotify mount fails in one line: CAP_SYS_ADMIN (exit 4)")
    elif kernel_has_pre_content():
        t = tmpfs("16M")
        try:
            rc, out = run([HSMFS, "-f", t, mnt, "-o", "backend=fanotify"])
            ok(rc == 4 and "has no pre-content events" in out and
               len(out.strip().splitlines()) == 1,
               "a store on tmpfs fails in one line: no pre-content events (exit 4)")
        finally:
            tmpfs_drop(t)
    ok(not os.path.ismount(mnt), "nothing is left mounted by a refusal")


def test_events(img):
    store = os.path.join(img, "store-events")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(300 * P)
    files = {"f": data, "g": data, "h": data, "r": data[:40 * P], "m": data,
             "deny/a": data[:P], "deny/b": data[:P], "deny/c": data[:P], "deny/d": data[:P],
             "db.sqlite": sqlite_db()}
    import_offline(store, mirror, files)
    ino = {n: os.stat(os.path.join(store, n)).st_ino for n in files}
    with Mount(opts=FAN, store=store) as m:
        ok(m.mnt != store and os.path.ismount(m.mnt), "the store is bound at the mountpoint")
        eq(group_marks(m.proc.pid), set(ino.values()), "every file not fetched is marked")
        st = os.stat(m.path("h"))
        ok(st.st_blocks * 512 >= st.st_size,
           "a file not fetched has blocks for all its bytes (no tool takes it for sparse)")
        with Hook(m.mnt, "--mirror", mirror, "--fill", "required") as h:
            got = dread(m.path("f"), 2 * P, 256)
            eq(got, data[2 * P:2 * P + 256], "O_DIRECT pread of a placeholder returns origin bytes")
            evs = h.events("PRE_ACCESS")
            eq([(e["start"], e["end"]) for e in evs], [(2 * P, 3 * P)],
               "pread 256 at 2*PAGE: one event, required [2P, 3P)")
            ok(evs and evs[0]["pid"] == os.getpid() and evs[0]["path"] == "f",
               "the event carries the reader's pid and the file's path")
            before = len(h.events())
            eq(dread(m.path("f"), 2 * P, P), data[2 * P:3 * P], "present page read again")
            eq(len(h.events()), before, "reading a present range asks no hook")

            # mmap of 2 pages at page 100: one event for the mapped range
            before = len(h.events())
            with open(m.path("m"), "rb") as f:
                mm = mmap.mmap(f.fileno(), 2 * P, access=mmap.ACCESS_READ, offset=100 * P)
                eq(mm[:], data[100 * P:102 * P], "mmap of 2 pages reads origin bytes")
                mm.close()
            eq([(e["start"], e["end"]) for e in h.events()[before:]], [(100 * P, 102 * P)],
               "mmap: the hook is asked for the mapped range")

            # a write into a missing range: filled first, then written over
            before = len(h.events())
            fd = os.open(m.path("g"), os.O_WRONLY)
            os.pwrite(fd, b"abc", 20000)
            os.close(fd)
            eq([(e["start"], e["end"]) for e in h.events()[before:]], [(4 * P, 5 * P)],
               "a 3-byte write at 20000: its page [16384, 20480) is filled first")
            want = data[4 * P:20000] + b"abc" + data[20003:5 * P]
            eq(dread(m.path("g"), 4 * P, P), want, "the page holds the origin's bytes and the write")

            # the tools users copy with, on files not fetched yet
            out = tmpdir("hsmfs-copy-")
            subprocess.run(["cp", m.path("h"), os.path.join(out, "h")], check=True)
            eq(open(os.path.join(out, "h"), "rb").read(), data, "cp of a file not fetched copies its bytes")
            subprocess.run(["tar", "cf", os.path.join(out, "t.tar"), "-C", m.mnt, "deny/a"],
                           check=False)
            r = subprocess.run(["tar", "xOf", os.path.join(out, "t.tar"), "deny/a"],
                               stdout=subprocess.PIPE)
            eq(r.stdout, data[:P], "tar of a file not fetched archives its bytes")
            # a database not fetched, queried where it lies: sqlite3 reads pages at random
            r = subprocess.run(["sqlite3", "-readonly", m.path("db.sqlite"),
                                "SELECT count(*), sum(length(v)) FROM t"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            eq(r.stdout.decode().strip(), "500|500000",
               "sqlite3 queries a database not fetched: the rows the origin has")
            # the whole of r: all present, its mark goes
            subprocess.run(["rsync", m.path("r"), os.path.join(out, "r")], check=True)
            eq(open(os.path.join(out, "r"), "rb").read(), data[:40 * P],
               "rsync of a file not fetched copies its bytes")
            wait_for(lambda: ino["r"] not in group_marks(m.proc.pid), "r's mark to go")
            ok(ino["r"] not in group_marks(m.proc.pid) and ino["f"] in group_marks(m.proc.pid),
               "a file all present loses its mark; one partly present keeps it")
            before = len(h.events())
            eq(open(m.path("r"), "rb").read(), data[:40 * P], "r read again, unmarked")
            eq(len(h.events()), before, "no hook is asked for it")
            subprocess.run(["rm", "-rf", out])

        # the hook's errno reaches the reader (FAN_DENY_ERRNO); one the
        # kernel does not pass is EIO
        for name, err, want in (("deny/b", errno.EPERM, errno.EPERM),
                                ("deny/c", errno.ENOSPC, errno.ENOSPC),
                                ("deny/d", errno.ENOENT, errno.EIO)):
            with Hook(m.mnt, "--mode", "deny", "--errno", str(err)) as h:
                eq(errno_of(lambda: open(m.path(name), "rb").read()), want, "a hook's deny with %s fails the read with %s" %
                   (errno.errorcode[err], errno.errorcode[want]))

        # events the kernel does not raise: a hook is refused, never joined unasked
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "python"))
        import hsmfs_hook
        for mask in (("modify",), ("open",), ("read",)):
            try:
                hsmfs_hook.connect_socket(m.mnt, kind="watch", mask=mask)
                got = "joined"
            except ConnectionError as e:
                got = str(e)
            ok("ERROR 6:" in got,
               "a hook subscribing to %s is refused at HELLO: %s" % (mask[0], got[:100]))
        s, w = hsmfs_hook.connect_socket(m.mnt, kind="fill", mask=("access",))
        ok(w["version"] >= 1, "a PRE_ACCESS hook joins")
        s.close()


def row_states(store):
    """{path: state} of the store's rows (meta.h: 1 placeholder, 2 partial,
    3 resident, 4 dirty), read after the unmount."""
    import sqlite3
    db = sqlite3.connect(os.path.join(store, ".hsmfs", "meta.db"))
    try:
        return dict(db.execute("SELECT path, state FROM files"))
    finally:
        db.close()


def test_changes(img):
    """A user's change wins, seen or not before it is made: open(O_TRUNC)
    and truncate(2) raise no pre-content event, a file no longer marked
    raises none at all; the changes are the user's, recorded dirty."""
    store = os.path.join(img, "store-changes")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(64 * P)
    names = ("trunc-open", "trunc-path", "trunc-zero", "append", "same")
    import_offline(store, mirror, dict({n: data for n in names}, **{"d/moved": data,
                                                                 "hole": data, "bystore": data,
                                                                 "rofile": data}))
    with Mount(opts=FAN, store=store) as m:
        with Hook(m.mnt, "--mirror", mirror, "--fill", "required"):
            with open(m.path("trunc-open"), "wb") as f:  # O_TRUNC, then a write
                f.write(b"new")
            eq(open(m.path("trunc-open"), "rb").read(), b"new",
               "a file not fetched, written over with O_TRUNC: the user's 3 bytes, no more")
            os.truncate(m.path("trunc-zero"), 0)
            with open(m.path("trunc-zero"), "r+b") as f:
                f.write(b"ab")
            eq(open(m.path("trunc-zero"), "rb").read(), b"ab",
               "truncate(2) to 0 of a file not fetched, then written: the user's bytes only")
            # a write into a file not fetched: the rest is fetched still, after a remount too
            with open(m.path("hole"), "r+b") as f:
                f.seek(10 * P)
                f.write(b"xyz")
            # the store's own path raises the events too
            eq(open(os.path.join(store, "bystore"), "rb").read(), data,
               "a file not fetched read by the store's own path: the origin's bytes")
            os.truncate(m.path("trunc-path"), 5000)
            eq(open(m.path("trunc-path"), "rb").read(), data[:5000],
               "truncate(2) of a file not fetched: its first 5000 bytes, the origin's")
            eq(open(m.path("append"), "rb").read(), data, "a file read whole")
            with open(m.path("append"), "ab") as f:
                f.write(b"xyz")
            eq(open(m.path("append"), "rb").read(), data + b"xyz",
               "appended to once unmarked: the user's bytes after the origin's")
            eq(open(m.path("same"), "rb").read(), data, "a file read and left alone")

            # names changed beside the daemon (it sees none here): a file
            # partly read, renamed, its directory renamed, is read whole
            eq(dread(m.path("d/moved"), P, P), data[P:2 * P], "a page of d/moved")
            os.rename(m.path("d/moved"), m.path("d/moved2"))
            os.rename(m.path("d"), m.path("e"))
            eq(open(m.path("e/moved2"), "rb").read(), data,
               "renamed after a partial read, and its directory too: read whole")
    st = row_states(store)
    eq({n: st.get(n) for n in names},
       {"trunc-open": 4, "trunc-path": 4, "trunc-zero": 4, "append": 4, "same": 3},
       "the changed files are dirty (never fetched or replaced again), the other resident")
    want = data[:10 * P] + b"xyz" + data[10 * P + 3:]
    with Mount(opts=FAN, store=store) as m:
        with Hook(m.mnt, "--mirror", mirror):
            eq(open(m.path("hole"), "rb").read(), want,
               "mounted again: a changed file's bytes not fetched are fetched (it is marked)")
    with Mount(opts=FAN + ",ro", store=store) as m:
        with Hook(m.mnt, "--mirror", mirror):
            eq(open(m.path("rofile"), "rb").read(), data, "a read-only mount fetches too")
            eq(errno_of(lambda: open(m.path("same"), "ab").close()), errno.EROFS,
               "a read-only mount refuses a write open")


def test_truncate_wins(img):
    """A fill in flight when a user cuts the file below it: the fill's
    copy never grows the file back.  A truncate(2) to a length that is
    not a page's start raises, on Linux 6.18, a pre-content event for the
    page at the new end, as a read would (to a page's start: one of count
    0, which says it is a truncate), and the kernel reports the change
    after it is made (a FAN_MODIFY, here held 3 s: fault.h change-seen),
    so the engine still has the old size when the hook answers.  Before:
    the copy wrote the chunk past the new end, and the file came back
    3 MiB long with the origin's bytes.  Debug builds only."""
    if not has_point("change-seen"):
        skip("backend=fanotify truncate during a fill", "a release build has no delay points")
        return
    MiB = 1 << 20
    store = os.path.join(img, "store-truncate-wins")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(4 * MiB)
    import_offline(store, mirror, {"t": data}, relative=True)
    with Mount(opts=FAN, store=store, env={"HSMFS_DELAY": "change-seen:3000"}) as m:
        with Hook(m.mnt, "--mirror", mirror):
            eq(dread(m.path("t"), 0, P), data[:P], "the first chunk read")
        with Hook(m.mnt, "--mirror", mirror, "--delay", "1.5") as h:
            got = {}
            t = threading.Thread(target=lambda: got.update(
                e=errno_of(lambda: dread(m.path("t"), 2 * MiB, P))))
            t.start()
            wait_for(lambda: h.events("PRE_ACCESS"), "the far fill asked")
            # not at a page's start (see above)
            os.truncate(m.path("t"), 30000)
            t.join()
            wait_for(lambda: states(m, ["t"])["t"][0].startswith("dirty"), "the truncate seen",
                     deadline=20)
        st = os.stat(m.path("t"))
        eq(st.st_size, 30000, "the file keeps the user's size")
        eq(open(m.path("t"), "rb").read(), data[:30000], "and the origin's bytes before it")


def test_ctl(img):
    """hsmfsctl asks a fanotify mount's daemon through its control socket
    (lib/ctlsock.h): status, stats, hooks, pin and unpin as on FUSE; what
    that daemon does not do yet is said in one line; the store's state
    directory, which the bind shows, is not walked; the socket is the
    next daemon's after a crash."""
    import json
    store = os.path.join(img, "store-ctl")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(8 * P)
    import_offline(store, mirror, {"a": data, "b": data, "d/c": data, "e": data, "f": data,
                                   "g": data}, relative=True)
    # each daemon's socket stays bound a moment after its thread ended
    # (HSMFS_DELAY=ctl-stopped): hsmfsctl restart waits that out too; the
    # next daemon starts slowly (take-reserved): hsmfsctl waits for it
    with Mount(opts=FAN, store=store, restart=True, env={"HSMFS_DELAY": "ctl-stopped:1500,take-reserved:1000"}) as m:
        m.restarts_expected = True
        mirror_hook = subprocess.Popen([MIRROR, mirror, m.mnt])
        try:
            ok(m.logged("hook 'hsmfs-mirror'"), "hsmfs-mirror joined")
            eq(open(m.path("b"), "rb").read(), data, "b read")
            rc, out = run([HSMFSCTL, "status", "--json", m.mnt])
            ok(rc == 0, "status of the mount: exit 0" + ("" if rc == 0 else ": " + out))
            got = {os.path.relpath(f["path"], m.mnt): (f["state"], f["present"])
                   for f in json.loads(out)["files"]} if rc == 0 else {}
            eq(got, {"a": ("placeholder", 0), "b": ("resident", 8 * P), "d/c": ("placeholder", 0),
                     "e": ("placeholder", 0), "f": ("placeholder", 0), "g": ("placeholder", 0)},
               "status: each file's state and bytes, and nothing of the store's state directory")
            rc, out = run([HSMFSCTL, "stats", m.mnt])
            ok(rc == 0 and "PRE_ACCESS events                  1" in out,
               "stats: the daemon's counters (one PRE_ACCESS event)")
            rc, out = run([HSMFSCTL, "hooks", m.mnt])
            ok(rc == 0 and "hsmfs-mirror" in out, "hooks: the hook connected")
            # hsmfsctl watch: PRE_ACCESS only, said, and the events shown
            w = subprocess.Popen([HSMFSCTL, "watch", "--json", m.mnt], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            try:
                wait_for(lambda: m.logged("hook 'hsmfsctl-watch'"), "the watch joined")
                eq(read_bounded(m.path("d", "c")), {"data": data}, "d/c read while watched")
            finally:
                w.terminate()
                wout, werr = w.communicate(timeout=30)
            ok("watching PRE_ACCESS only" in werr.decode(), "watch says what it cannot watch")
            ok(any(json.loads(l).get("event") == "PRE_ACCESS" and l.find('d/c"') > 0
                   for l in wout.decode().splitlines()), "watch shows the read's event")
            # a file the daemon has no row of: an error answered as such
            with open(m.path("mine"), "wb") as f:
                f.write(b"mine")
            rc, out = run([HSMFSCTL, "evict", m.path("mine")])
            ok("1 not managed by hsmfs" in out, "evict of a user's file: not managed (" +
               out.strip().splitlines()[-1] + ")")
            rc, out = run([HSMFSCTL, "pin", m.path("a"), m.path("e")])
            ok(rc == 0 and "pin: 2 files, 0 not managed by hsmfs, 0 failed" in out,
               "pin of two files at once (parallel jobs, one connection)" +
               ("" if rc == 0 else ": " + out))
            rc, out = run([HSMFSCTL, "unpin", m.path("e")])
            rc, out = run([HSMFSCTL, "status", m.path("a")])
            ok(rc == 0 and "resident,pinned" in out, "pin fetched the file and pinned it")
            rc, out = run([HSMFSCTL, "unpin", m.path("a")])
            rc, out2 = run([HSMFSCTL, "status", m.path("a")])
            ok(rc == 0 and "resident " in out2 and "pinned" not in out2, "unpin")
            rc, out = run([HSMFSCTL, "prefetch", m.path("g")])
            rc2, out2 = run([HSMFSCTL, "status", m.path("g")])
            ok(rc == 0 and "resident " in out2, "prefetch fetches a file whole" +
               ("" if rc == 0 else ": " + out))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            ok(rc != 0 and out.splitlines()[0] ==
               "hsmfsctl: the daemon of a backend=fanotify mount does not do sync yet "
               "(hsmfs(8) FANOTIFY BACKEND)", "sync: what the daemon does not do yet is said")
            before = m.daemon_pid()
            os.kill(before, signal.SIGKILL)
            # asked at once: hsmfsctl waits for the next daemon (slowed: take-reserved)
            rc, out = run([HSMFSCTL, "status", m.path("d", "c")])
            # (its state may be the last committed: a kill loses the writer's batch)
            ok(rc == 0 and "c" in out, "the next daemon answers hsmfsctl, "
               "asked while it starts" + ("" if rc == 0 else ": " + out))
            ok(crashed(m, before), "a daemon killed, the next up")

            # hsmfsctl restart: a handover to the binary installed now, the mount kept
            before = m.daemon_pid()
            rc, out = run([HSMFSCTL, "restart", m.mnt])
            ok(rc == 0 and out.startswith("restarted: the mount paused "),
               "hsmfsctl restart: " + out.strip())
            ok(m.daemon_pid() not in (before, m.proc.pid), "another daemon serves")
            rc, out = run([HSMFSCTL, "stats", "--json", m.mnt])
            st = json.loads(out) if rc == 0 else {}
            eq((st.get("restarts"), st.get("handovers")), (2, 1),
               "two restarts counted, one of them a handover")
            eq(read_bounded(m.path("f")), {"data": data},
               "a file not fetched reads right after the handover (the hook back)")
        finally:
            mirror_hook.terminate()
            mirror_hook.wait()


def states(m, names):
    """hsmfsctl status --json of names: name -> (state, present)."""
    import json
    rc, out = run([HSMFSCTL, "status", "--json"] + [m.path(n) for n in names])
    if rc:
        return {"error": out}
    return {os.path.relpath(f["path"], m.mnt): (f["state"], f["present"])
            for f in json.loads(out)["files"]}


def test_evict(img):
    """Eviction on a fanotify mount (fan.c fan_evicting()): a write lease
    keeps opens out while the file is recorded missing, marked and
    punched; a file open or mapped anywhere is not evicted; the bytes
    evicted come back through the hook; with thin, an eviction frees the
    blocks (without, t0610 checks they stay, and that cp copies an
    evicted file right), and cache_max keeps the store within its bound
    by evicting."""
    store = os.path.join(img, "store-evict")
    mirror = tmpdir("hsmfs-mirror-")
    data = {n: os.urandom(32 * P) for n in ("a", "b", "c", "d", "e", "f")}
    import_offline(store, mirror, data, relative=True)
    ino = {n: os.stat(os.path.join(store, n)).st_ino for n in data}
    with Mount(opts=FAN + ",chunk=64k,thin,cache_max=384k", store=store) as m:
        mirror_hook = subprocess.Popen([MIRROR, mirror, m.mnt])
        try:
            ok(m.logged("hook 'hsmfs-mirror'"), "hsmfs-mirror joined")
            eq(open(m.path("a"), "rb").read(), data["a"], "a read whole")
            ok(ino["a"] not in group_marks(m.proc.pid), "a all present: no mark")
            rc, out = run([HSMFSCTL, "evict", m.path("a")])
            ok(rc == 0, "hsmfsctl evict a: exit 0" + ("" if rc == 0 else ": " + out))
            eq(states(m, ["a"]), {"a": ("placeholder", 0)}, "a evicted: a placeholder again")
            ok(os.stat(m.path("a")).st_blocks == 0, "thin: its blocks are freed")
            ok(ino["a"] in group_marks(m.proc.pid), "and marked again")
            eq(open(m.path("a"), "rb").read(), data["a"], "a read again: the origin's bytes")

            # open, or only mapped: the lease cannot be taken, nothing goes
            eq(open(m.path("b"), "rb").read(), data["b"], "b read whole")
            with open(m.path("b"), "rb") as f:
                rc, out = run([HSMFSCTL, "evict", m.path("b")])
                ok(rc != 0 and "open" in out, "evict of a file open elsewhere fails: " + out.strip().splitlines()[0])
                eq(states(m, ["b"]), {"b": ("resident", 32 * P)}, "and keeps it")
                mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            rc, out = run([HSMFSCTL, "evict", m.path("b")])
            ok(rc != 0 and "open" in out, "evict of a file mapped, its descriptor closed, fails: " + out.strip().splitlines()[0])
            eq(mm[:], data["b"], "the mapping still reads the file's bytes")
            mm.close()
            rc, out = run([HSMFSCTL, "evict", m.path("b")])
            ok(rc == 0 and states(m, ["b"]) == {"b": ("placeholder", 0)},
               "closed and unmapped: evicted")

            # cache_max: reading all six (1.5 MiB) through 384 KiB
            for n in sorted(data):
                eq(open(m.path(n), "rb").read(), data[n], "%s read (cache_max)" % n)
            wait_for(lambda: sum(p for _, p in states(m, sorted(data)).values()) <= 384 << 10,
                     "the evictor within cache_max")
            for n in sorted(data):
                eq(open(m.path(n), "rb").read(), data[n], "%s read again, right" % n)
        finally:
            mirror_hook.terminate()
            mirror_hook.wait()


def test_answered_let_go(img):
    """The daemon lets an event's file go before it answers (fan.c
    answer_number()): the file, opened through the mount, would keep
    the reader's next step from it.  With the daemon slowed just after
    its answer (HSMFS_DELAY=fan-answered), a file just read is evicted
    at once and the mount unmounts at once.  The writer's own open of
    the file (its data sync, slowed: batch-synced) is waited for, not
    taken for a user's that refuses the lease.  Debug builds only."""
    if not has_point("fan-answered"):
        skip("backend=fanotify: the answer's delay", "a release build has no delay points")
        return
    store = os.path.join(img, "store-let-go")
    mirror = tmpdir("hsmfs-mirror-")
    data = {"a": os.urandom(8 * P), "b": os.urandom(8 * P)}
    import_offline(store, mirror, data, relative=True)
    log = os.path.join(tmpdir(), "steps")
    with Mount(opts=FAN, store=store, env={"HSMFS_DELAY": "fan-answered:2000,batch-synced:1000",
                                           "HSMFS_CRASH_LOG": log}) as m:
        mirror_hook = subprocess.Popen([MIRROR, mirror, m.mnt])
        try:
            ok(m.logged("hook 'hsmfs-mirror'"), "hsmfs-mirror joined")
            eq(read_bounded(m.path("a")), {"data": data["a"]}, "a read")
            rc, out = run([HSMFSCTL, "evict", m.path("a")])
            ok(rc == 0, "a file just read is evicted at once" + ("" if rc == 0 else ": " + out))
            synced = open(log).read().count("- batch-synced")
            eq(read_bounded(m.path("b")), {"data": data["b"]}, "b read")
            # evicted while the writer holds it open to sync it
            wait_for(lambda: open(log).read().count("- batch-synced") > synced, "b's data sync")
            rc, out = run([HSMFSCTL, "evict", m.path("b")])
            ok(rc == 0, "a file the writer syncs is evicted once synced" +
               ("" if rc == 0 else ": " + out + m.output()[-2000:]))
        finally:
            mirror_hook.terminate()
            mirror_hook.wait()
        eq(unmount(m.mnt), 0, "and the mount unmounts at once")


def test_evict_crash(img):
    """An eviction crashed at each of its steps (fs/fault.h: recorded,
    punched), the keeper starting the next daemon: the file reads the
    origin's bytes, never zeros.  Debug builds only."""
    if not has_point("evict-recorded"):
        skip("backend=fanotify eviction crash points", "a release build has no crash points")
        return
    data = os.urandom(8 * P)
    for step in ("evict-recorded", "evict-punched"):
        with crash_mount(img, step, data) as (m, mirror):
            mirror_hook = subprocess.Popen([MIRROR, mirror, m.mnt])
            try:
                ok(m.logged("hook 'hsmfs-mirror'"), "%s: hsmfs-mirror joined" % step)
                eq(read_bounded(m.path("a")), {"data": data}, "%s: a read whole" % step)
                before = m.daemon_pid()
                rc, out = run([HSMFSCTL, "evict", m.path("a")])
                took = crashed(m, before)
                ok(took, "%s: the daemon crashed there, another took over" % step +
                   ("" if took else ": " + out + m.output()[-3000:]))
                eq(read_bounded(m.path("a")), {"data": data},
                   "%s: a reads the origin's bytes after the crash" % step)
                # what the crash left is evicted again, and read again
                rc, out = run([HSMFSCTL, "evict", m.path("a")])
                ok(rc == 0, "%s: evicted again by the next daemon" % step + ("" if rc == 0 else
                                                                          ": " + out))
                ok(os.stat(m.path("a")).st_ino in group_marks(m.daemon_pid()),
                   "%s: and marked" % step)
                eq(read_bounded(m.path("a")), {"data": data}, "%s: and read again, right" % step)
            finally:
                mirror_hook.terminate()
                mirror_hook.wait()


def test_walk_ends(img):
    """The walk at mount ended early: the daemon killed (the keeper ends
    the mount: nothing is left bound, and it says the store was not bound
    yet), or SIGTERM (exit 0, nothing bound).  What was listed stays
    listed: the next mount lists only the rest."""
    root = tmpdir("hsmfs-origin-")
    files = {"d%d/e%d/f.txt" % (i, j): b"f%d%d" % (i, j) for i in range(10) for j in range(10)}
    write_tree(root, files)
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)
    with Nginx(root) as ng:
        wan = WanProxy(ng.port, delay_ms=100)  # 111 listings: a few seconds
        try:
            for how in ("kill", "term"):
                store = os.path.join(img, "store-walk-" + how)
                os.makedirs(store)
                d = tmpdir("hsmfs-walk-")
                mnt, log = os.path.join(d, "mnt"), os.path.join(d, "log")
                os.mkdir(mnt)
                with open(log, "w") as lf:
                    p = subprocess.Popen([HSMFS, "-f", store, mnt, "-o",
                                          "backend=fanotify,hook=%s,origin=%s" % (HTTP, wan.url())],
                                         stdout=lf, stderr=subprocess.STDOUT)
                try:
                    wait_for(lambda: "listing the tree from the origin" in open(log).read(),
                             "the walk under way")
                    if how == "kill":
                        with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
                            os.kill(int(f.read().split()[0]), signal.SIGKILL)
                    else:
                        os.kill(p.pid, signal.SIGTERM)
                    rc = p.wait(timeout=60)
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                out = open(log).read()
                if how == "kill":
                    ok(rc != 0 and "the mount fails: the store was not bound yet" in out,
                       "the daemon killed during the walk: the mount fails (%d), said" % rc)
                else:
                    ok(rc == 0 and "stopped while the tree was listed" in out,
                       "SIGTERM during the walk: exit 0, said (%d)" % rc)
                ok(not is_mounted(mnt) and os.listdir(mnt) == [],
                   "%s: nothing is bound at the mountpoint" % how)
                before = len(ng.log())
                with Mount(opts=FAN + ",hook=%s,origin=%s" % (HTTP, ng.url()),
                           store=store) as m:
                    got = [u for (meth, u, st, *_r) in ng.log()[before:]
                           if u.endswith("/") and st == 200]
                    ok(0 < len(got) < 111 and "/" not in got,
                       "%s: mounted again, only the rest is listed (%d)" % (how, len(got)))
                    tree = user_tree(m.mnt)
                    ok(tree == files, "%s: and every file is there, the origin's bytes" % how)
                shutil.rmtree(d, ignore_errors=True)
        finally:
            wan.stop()


def test_bind_steps(img):
    """The bind at mount (fan-kernel.h fan_mount()), crashed at each of
    its steps with the keeper up: its id recorded and not yet at the
    mountpoint (the keeper finds nothing there: the mount fails, nothing
    is bound), and bound (the keeper's next daemon serves it: a file not
    fetched reads the origin's bytes).  Debug builds only."""
    if not has_point("fan-bind-recorded"):
        skip("backend=fanotify bind crash points", "a release build has no crash points")
        return
    data = os.urandom(8 * P)
    for step in ("fan-bind-recorded", "fan-bound"):
        store = os.path.join(img, "store-" + step)
        mirror = tmpdir("hsmfs-mirror-")
        import_offline(store, mirror, {"a": data}, relative=True)
        d = tmpdir("hsmfs-bind-")
        mnt, log = os.path.join(d, "mnt"), os.path.join(d, "log")
        os.mkdir(mnt)
        with open(log, "w") as lf:
            p = subprocess.Popen([HSMFS, "-f", store, mnt, "-o", FAN],
                                 stdout=lf, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, HSMFS_CRASH_AT=step + ":1"))
        try:
            if step == "fan-bind-recorded":
                rc = p.wait(timeout=60)
                out = open(log).read()
                ok(rc != 0 and "the mount is gone already" in out,
                   "%s: the keeper ends the mount (%d)" % (step, rc))
                ok(not is_mounted(mnt) and os.listdir(mnt) == [],
                   "%s: nothing is bound at the mountpoint" % step)
                continue
            wait_for(lambda: "keeper: the daemon" in open(log).read() and is_mounted(mnt),
                     "the daemon crashed, the mount bound")

            def listening():
                import socket
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    s.connect(os.path.join(mnt, ".hsmfs", "hook.sock"))
                    return True
                except OSError:
                    return False
                finally:
                    s.close()
            wait_for(listening, "the next daemon's hook socket")
            mirror_hook = subprocess.Popen([MIRROR, mirror, mnt])
            try:
                eq(read_bounded(os.path.join(mnt, "a")), {"data": data},
                   "%s: the next daemon serves the bind: a file not fetched reads right" % step)
            finally:
                mirror_hook.terminate()
                mirror_hook.wait()
            os.kill(p.pid, signal.SIGTERM)
            eq(p.wait(timeout=60), 0, "%s: and the mount ends as one ends (exit 0)" % step)
            ok(not is_mounted(mnt), "%s: unbound" % step)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            if is_mounted(mnt):
                unmount(mnt)
            shutil.rmtree(d, ignore_errors=True)


def test_lost(img):
    """An event lost to an overflow (fs/fault.h: fan-events-lost and
    fan-changes-lost inject one before the next event): the kernel let
    it through, so hsmfsctl stats counts it (lost_events, lost_changes,
    over the mount's life: a restarted daemon keeps the count) and
    hsmfsctl doctor fails, saying what may have happened (before: a line
    of the log only, and doctor said the mount was healthy).  Debug
    builds only."""
    import json
    if not has_point("fan-events-lost"):
        skip("backend=fanotify lost events", "a release build has no fault points")
        return
    data = os.urandom(8 * P)
    for name, key, doing in (("fan-events-lost", "lost_events", "a read"),
                             ("fan-changes-lost", "lost_changes", "a write")):
        store = os.path.join(img, "store-" + name)
        mirror = tmpdir("hsmfs-mirror-")
        import_offline(store, mirror, {"a": data}, relative=True)
        with Mount(opts=FAN, store=store, restart=True, env={"HSMFS_FAIL": name}) as m:
            m.restarts_expected = True
            rc, out = run([HSMFSCTL, "doctor", m.mnt])
            ok(not any(l.startswith("fail") for l in out.splitlines()),
               "%s: doctor finds nothing to fail before" % key)
            mirror_hook = subprocess.Popen([MIRROR, mirror, m.mnt])
            try:
                ok(m.logged("hook 'hsmfs-mirror'"), "%s: hsmfs-mirror joined" % key)
                eq(read_bounded(m.path("a")), {"data": data}, "%s: a read whole" % key)
                with open(m.path("a"), "r+b") as f:
                    f.write(b"mine")
                want = (1, 0) if key == "lost_events" else (0, 1)

                def counts():
                    rc, out = run([HSMFSCTL, "stats", "--json", m.mnt])
                    st = json.loads(out) if rc == 0 else {}
                    return (st.get("lost_events"), st.get("lost_changes"))
                wait_for(lambda: counts() == want, "the loss counted")
                eq(counts(), want, "%s: stats counts one loss, after %s" % (key, doing))
                before = m.daemon_pid()
                os.kill(before, signal.SIGKILL)
                ok(crashed(m, before), "%s: a daemon killed, the next up" % key)
                eq(counts(), want, "%s: the next daemon keeps the count" % key)
                rc, out = run([HSMFSCTL, "doctor", m.mnt])
                fails = [l for l in out.splitlines() if l.startswith("fail")]
                ok(rc != 0 and len(fails) == 1 and "to an overflow" in fails[0] and
                   ("served zeros" if key == "lost_events" else "not be recorded dirty")
                   in fails[0], "%s: doctor fails, saying what may have happened (%s)"
                   % (key, fails[0] if fails else out.strip()))
                ok("overflowed" in m.output(), "%s: and the log says so" % key)
            finally:
                mirror_hook.terminate()
                mirror_hook.wait()


def test_unlisted(img):
    """A directory not listed yet shows no names on a fanotify mount (no
    event lists it): the mount says so, on the terminal, and how to list."""
    store = os.path.join(img, "store-unlisted")
    os.makedirs(store)
    mirror = tmpdir("hsmfs-mirror-")
    write_tree(mirror, {"x": b"x"})
    # a FUSE mount of an origin, never looked at: its root is not listed
    with Mount(opts="origin=file://%s/,nocheck_origin" % mirror, store=store):
        pass
    with Mount(opts=FAN, store=store) as m:
        ok("directories not listed yet show no names on this mount (no event lists them; "
           "1 of them): mount with hook= and an origin, or list them first with hsmfsctl "
           "import -s STORE --listing URL" in m.output(),
           "a store with a directory not listed, mounted with no hook: the mount says how "
           "to list it")


HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")


def origin_tree():
    root = tmpdir("hsmfs-origin-")
    files = {"top.txt": b"top\n", "a/one.bin": os.urandom(70000),
             "a/b/c/deep.txt": b"deep\n" * 1000, "a/b/sibling": b"s",
             "with space/caf\u00e9 #1.txt": b"x" * 5, "z/empty-file": b"",
             "bad/x": b"x", "bad/under/y": b"y"}
    write_tree(root, files)
    os.mkdir(os.path.join(root, "empty"))
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)
    return root, files


def user_tree(mnt):
    """{path: bytes} of every file through mnt (the state directory left out)."""
    out = {}
    for d, dirs, fs in os.walk(mnt):
        dirs[:] = [x for x in dirs if not (d == mnt and x == ".hsmfs")]
        for n in fs:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, mnt)] = f.read()
    return out


def test_walk(img):
    """A zero-setup fanotify mount (hook=hsmfs-http,origin=URL, an empty
    store): no event lists a directory on this front end, so the mount
    lists the whole tree through the hook before it is bound (before:
    the mountpoint showed an empty root).  Every directory is listed once,
    before the mount returns; every byte is the origin's; mounted again,
    nothing is listed again.  A wrong origin fails the mount in one line
    (exit 6); a directory whose listing fails fails the mount, naming it,
    or with nocheck_origin mounts without its names."""
    root, files = origin_tree()
    # /bad/under/ answers 500: its listing fails
    with Nginx(root, extra="location /bad/under/ { return 500; }") as ng:
        def daemonized(store, origin, extra=""):
            """hsmfs as a user types it; a mount left behind by a failing
            check is ended by gone()."""
            mnt = tmpdir("hsmfs-mnt-")
            r = subprocess.run([HSMFS, store, mnt, "-o", "backend=fanotify,hook=%s,origin=%s%s"
                                % (HTTP, origin, extra)], capture_output=True, text=True,
                               timeout=120)
            return r, mnt

        def gone(mnt):
            if is_mounted(mnt):
                unmount(mnt)
            os.rmdir(mnt)

        store = os.path.join(img, "store-walk")
        os.makedirs(store)
        r, mnt = daemonized(store, ng.url("dta/"))
        lines = r.stderr.strip().splitlines()
        eq(r.returncode, 6, "a wrong origin: the mount fails (exit 6)")
        ok(len(lines) == 1 and "HTTP 404" in lines[0] and "origin=" in lines[0],
           "in one line naming the cause and origin=") or diag(r.stderr)
        ok(not is_mounted(mnt), "nothing is left mounted")
        gone(mnt)

        r, mnt = daemonized(store, ng.url())
        lines = r.stderr.strip().splitlines()
        eq(r.returncode, 6, "a directory whose listing fails: the mount fails (exit 6)")
        ok(len(lines) == 1 and "cannot list 'bad/under' from the origin" in lines[0] and
           "nocheck_origin" in lines[0], "in one line naming it and nocheck_origin") or \
            diag(r.stderr)
        ok(not is_mounted(mnt), "nothing is left mounted")
        gone(mnt)

        r, mnt = daemonized(store, ng.url(), ",nocheck_origin")
        try:
            eq(r.returncode, 0, "with nocheck_origin it mounts") or diag(r.stderr)
            ok("cannot list 1 directory from the origin (the first, 'bad/under'" in r.stderr,
               "and says on the terminal what it could not list")
            ok(is_mounted(mnt) and os.listdir(os.path.join(mnt, "bad/under")) == [],
               "without the names of the directory whose listing failed")
            eq(sorted(user_tree(mnt)), sorted(k for k in files if not k.startswith("bad/under/")),
               "and with every other name: the walk went on past the failure")
        finally:
            gone(mnt)

        store = os.path.join(img, "store-walk2")
        os.makedirs(store)
        with Nginx(root) as ok_ng:
            opts = FAN + ",hook=%s,origin=%s" % (HTTP, ok_ng.url())
            with Mount(opts=opts, store=store) as m:
                ok("listed 9 directories from the origin" in m.output(),
                   "an empty store and an origin: it mounts, and says what it listed")
                got = [u for (meth, u, st, *_r) in ok_ng.log() if u.endswith("/") and st == 200]
                eq(sorted(got), sorted(set(got)), "each directory listed once")
                eq(len(got), 9, "every directory listed before the mount was ready")
                tree = user_tree(m.mnt)
                eq(sorted(tree), sorted(files), "every file of the origin is there")
                ok(all(tree[k] == v for k, v in files.items()), "every byte is the origin's")
            n = len(ok_ng.log())
            with Mount(opts=opts, store=store) as m:
                eq(len(ok_ng.log()), n, "mounted again: nothing asked of the origin")
                eq(sorted(user_tree(m.mnt)), sorted(files), "every file still there")


def test_number_reused(img):
    """A row's file removed beside the mount, its number taken by a user's
    new file: that file is not the row's, and is never marked or filled
    over.  ext4 gives a freed number again only after a while, so the
    row is pointed at the user's file in the database instead."""
    import sqlite3
    store = os.path.join(img, "store-reused")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(8 * P)
    import_offline(store, mirror, {"victim": data})
    os.unlink(os.path.join(store, "victim"))
    with open(os.path.join(store, "mine"), "wb") as f:
        f.write(b"mine" * 1000)
    mine = os.stat(os.path.join(store, "mine")).st_ino
    db = sqlite3.connect(os.path.join(store, ".hsmfs", "meta.db"))
    db.execute("UPDATE files SET ino = ? WHERE path = 'victim'", (mine,))
    db.commit()
    db.close()
    with Mount(opts=FAN, store=store) as m:
        with Hook(m.mnt, "--mirror", mirror):
            eq(open(m.path("mine"), "rb").read(), b"mine" * 1000,
               "a user's file with the number of a removed row keeps its bytes")
        ok(mine not in group_marks(m.proc.pid), "and is not marked")


def test_end(img):
    """The mount ends by umount or a signal; an event no hook answered
    is denied at the end, never allowed (a closed group allows)."""
    store = os.path.join(img, "store-end")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(8 * P)
    import_offline(store, mirror, {"a": data, "b": data})
    # a bound longer than the test: the end, not the timeout, answers
    m = Mount(opts=FAN.replace("timeout=3", "timeout=120"), store=store).start()
    try:
        with Hook(m.mnt, "--mode", "silent") as h:
            res = {}

            def reader():
                try:
                    res["data"] = open(m.path("a"), "rb").read()
                except OSError as e:
                    res["errno"] = e.errno

            t = threading.Thread(target=reader)
            t.start()
            wait_for(lambda: h.events("PRE_ACCESS"), "the read's event at the hook")
            os.kill(m.proc.pid, signal.SIGTERM)
            t0 = time.monotonic()
            t.join(30)
            ok(not t.is_alive() and time.monotonic() - t0 < 20,
               "the reader is answered at the end, not at the timeout")
            eq(res, {"errno": errno.EIO}, "a read no hook answered fails with EIO at the end")
            eq(m.proc.wait(30), 0, "SIGTERM: the daemon exits 0")
            ok(not os.path.ismount(m.mnt), "SIGTERM: the mountpoint is given back")
            ok(not m.daemon_failures(), "no sanitizer's report")
    finally:
        m.cleanup()
    with Mount(opts=FAN, store=store) as m:
        ok(os.path.ismount(m.mnt), "mounted again")
    # Mount's own stop is a umount(8): the daemon saw it and exited 0


MIRROR = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-mirror")


def read_all(path, got):
    try:
        with open(path, "rb") as f:
            got["data"] = f.read()
    except OSError as e:
        got["errno"] = e.errno


@contextlib.contextmanager
def crash_mount(img, step, data):
    """A store of one file "a" (data) on the image, its mirror, mounted
    with the keeper and the daemon crashing at its first step (fault.h)
    step: (mount, mirror)."""
    store = os.path.join(img, "store-" + step)
    mirror = tmpdir("hsmfs-mirror-")
    import_offline(store, mirror, {"a": data}, relative=True)
    with Mount(opts=FAN.replace("timeout=3", "timeout=30"), store=store, restart=True,
               env={"HSMFS_CRASH_AT": step + ":1"}) as m:
        m.restarts_expected = True
        yield m, mirror


def read_bounded(path, deadline=40):
    """read_all() in a thread: {"hung": True} if it did not end within
    deadline seconds (an event nobody answers), not a test that hangs."""
    got = {}
    t = threading.Thread(target=read_all, args=(path, got), daemon=True)
    t.start()
    t.join(deadline)
    return {"hung": True} if t.is_alive() else got


def crashed(m, before):
    """Whether the keeper started another daemon after the one of pid
    before, and it took the mount over (a crash mount's one takeover)."""
    try:
        wait_for(lambda: m.daemon_pid() not in (before, m.proc.pid), "the next daemon",
                 deadline=15)
    except TimeoutError:
        return False
    return m.logged("took over the mount at")


def test_keeper(img):
    """kill -9 of the daemon while a read waits on its fill: the keeper
    holds both groups, so the kernel keeps the reader waiting; the next
    daemon answers the event the dead one read, by its number, and the
    reader gets the origin's bytes, never zeros."""
    store = os.path.join(img, "store-keeper")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(64 * P)
    import_offline(store, mirror, {"slow": data, "after": data[:P]}, relative=True)
    with Mount(opts=FAN.replace("timeout=3", "timeout=30"), store=store, restart=True) as m:
        m.restarts_expected = True
        hook = Hook(m.mnt, "--mirror", mirror, "--delay", "1.5")
        got = {}
        t = threading.Thread(target=read_all, args=(m.path("slow"), got))
        t.start()
        wait_for(lambda: hook.events(), "the hook asked")
        before = m.daemon_pid()
        os.kill(before, signal.SIGKILL)
        hook.kill()  # pyhook does not connect again
        ok(m.logged("took over the mount"), "the next daemon took over, its hooks' socket made")
        mirror_hook = subprocess.Popen([MIRROR, mirror, m.mnt])
        try:
            t.join(40)
            ok(not t.is_alive(), "the read the dead daemon held ended")
            eq((got.get("errno"), got.get("data") == data), (None, True),
               "kill -9 during a fill: the reader gets the origin's bytes, not zeros")
            ok(crashed(m, before), "the keeper started another daemon")
            ok(m.logged("1 event the last daemon read and did not answer; 0 denied"),
               "the next daemon took over the event the dead one read")
            eq(open(m.path("after"), "rb").read(), data[:P],
               "the next daemon serves new events")
            ok(os.path.ismount(m.mnt), "the mount stayed")
        finally:
            mirror_hook.terminate()
            mirror_hook.wait()


def test_keeper_end(img):
    """The mount gone while its daemon is dead: the keeper ends it, and
    the read the dead daemon held is denied (EIO) before the keeper
    closes the group, which would allow it (zeros)."""
    store = os.path.join(img, "store-keeper-end")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(4 * P)
    import_offline(store, mirror, {"a": data})
    m = Mount(opts=FAN.replace("timeout=3", "timeout=120"), store=store, restart=True).start()
    m.restarts_expected = True
    try:
        with Hook(m.mnt, "--mode", "silent") as h:
            got = {}
            t = threading.Thread(target=read_all, args=(m.path("a"), got), daemon=True)
            t.start()
            wait_for(lambda: h.events("PRE_ACCESS"), "the read's event at the hook")
            pid = m.daemon_pid()
            os.kill(pid, signal.SIGSTOP)
            run(["umount", "-l", m.mnt])
            os.kill(pid, signal.SIGKILL)
            t.join(30)
            eq(got, {"errno": errno.EIO},
               "the keeper denies the read a dead daemon held, never allows it (zeros)")
            eq(m.exited(30), 5, "the keeper ends with the mount (exit 5)")
            ok(m.logged("keeper: denied 1 event no daemon answered"), "the keeper said so")
    finally:
        m.cleanup()


def test_unmounted_restarting(img):
    """The mount unmounted while the keeper's next daemon starts: the
    user's end of the mount, which ends clean (exit 0), as when a daemon
    sees it; it exited 5, the daemon's failure to take the mount over.
    Debug builds only (the start slowed: HSMFS_DELAY=take-reserved)."""
    if not has_point("take-reserved"):
        skip("backend=fanotify: a takeover slowed", "a release build has no delay points")
        return
    store = os.path.join(img, "store-unmounted-restarting")
    log = os.path.join(tmpdir(), "steps")
    import_offline(store, tmpdir("hsmfs-mirror-"), {"a": os.urandom(P)})
    m = Mount(opts=FAN, store=store, restart=True,
              env={"HSMFS_DELAY": "take-reserved:3000", "HSMFS_CRASH_LOG": log}).start()
    m.restarts_expected = True
    try:
        before = m.daemon_pid()
        os.kill(before, signal.SIGKILL)
        wait_for(lambda: os.path.exists(log) and "- take-reserved" in open(log).read(),
                 "the next daemon's start")
        eq(unmount(m.mnt), 0, "unmounted while the next daemon starts")
        eq(m.exited(30), 0, "the mount ends clean (exit 0)")
        ok(m.logged("unmounted while the daemon restarted"), "and says so")
    finally:
        m.cleanup()


def test_keeper_steps(img):
    """The reader's durability order (fs/fault.h, saved.h), crashed at
    each step: events read and not recorded (the next daemon denies what
    it cannot know: EIO, never zeros), recorded and not handed on, and
    answered with the record not freed.  Debug builds only."""
    if not has_point("fan-recorded"):
        skip("backend=fanotify crash points", "a release build has no crash points")
        return
    # one page, one event: a crash in one thread lands wherever the
    # reader thread is, and a second event read then is denied
    data = os.urandom(P)
    for step, want in (("fan-read", "eio"), ("fan-recorded", "data"), ("fan-answered", "data")):
        with crash_mount(img, step, data) as (m, mirror):
            keeper_step(m, mirror, step, want, data)


def keeper_step(m, mirror, step, want, data):
    """One crash point of test_keeper_steps()."""
    mirror_hook = subprocess.Popen([MIRROR, mirror, m.mnt])
    try:
        ok(m.logged("hook 'hsmfs-mirror'"), "%s: hsmfs-mirror joined" % step)
        before = m.daemon_pid()
        got = read_bounded(m.path("a"))
        ok(crashed(m, before), "%s: the daemon crashed there and another took over" % step)
        if want == "eio":
            eq(got, {"errno": errno.EIO},
               "%s: the read the dead daemon read and did not record fails (EIO), "
               "never zeros" % step)
            ok(m.logged("(1 read and not recorded)"), "%s: the next daemon said so" % step)
            got = read_bounded(m.path("a"))
        eq((got.get("errno"), got.get("data") == data), (None, True),
           "%s: the reader gets the origin's bytes" % step)
        ok(os.path.ismount(m.mnt), "%s: the mount stayed" % step)
        ok(mirror_hook.poll() is None, "%s: hsmfs-mirror connected again and still runs" % step)
    finally:
        mirror_hook.terminate()
        mirror_hook.wait()


def test():
    test_refusals()
    if not is_root():
        skip("backend=fanotify events", "needs root")
        return
    if not kernel_has_pre_content():
        skip("backend=fanotify events", "needs Linux 6.14")
        return
    d, img = fs_image(256 << 20)
    try:
        test_events(img)
        test_changes(img)
        test_truncate_wins(img)
        test_unlisted(img)
        test_walk(img)
        test_walk_ends(img)
        test_number_reused(img)
        test_end(img)
        test_keeper(img)
        test_keeper_steps(img)
        test_keeper_end(img)
        test_unmounted_restarting(img)
        test_ctl(img)
        test_evict(img)
        test_answered_let_go(img)
        test_evict_crash(img)
        test_lost(img)
        test_bind_steps(img)
    finally:
        fs_image_drop(d, img)


if __name__ == "__main__":
    main(test)
