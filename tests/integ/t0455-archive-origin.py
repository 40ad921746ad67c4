#!/usr/bin/env python3
"""Archive to a misbehaving origin of our own (harness.Origin on 127.0.0.1).

A conforming server that honours If-Match and If-None-Match: a change
landing between hsmfs-http's check and its PUT is refused with 412, and
that is a conflict (the other writer's bytes stay, ours stay local); a
new file whose name exists at the origin with other bytes is one too,
with the same bytes it is archived already.  500s then recovery, and a
connection reset mid-upload, are retried until the bytes are there.  A
stalled upload fails the archive at the mount's timeout, the file stays
dirty with its error shown, and the next archive succeeds.  hsmfs-http
killed mid-upload: the restarted one gets the same snapshot and archives
it.  A file whose object is gone from the origin is uploaded again when
renamed.  S3 multipart uploads carry their condition on their completion,
and one a kill left is aborted by the next hsmfs-http.
"""
import os
import shutil
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Mount, Nginx, Origin, eq, import_manifest, main,  # noqa: E402
                     ok, run, tmpdir, wait_for)
from archiving import DAV, HTTP, dav_root, get, put, state, tree  # noqa: E402

def archive(m, p):
    return run([HSMFSCTL, "archive", m.path(p)])



def test():
    store = tmpdir("hsmfs-store-")
    with Origin() as o:
        for n in ("race", "flaky", "reset", "stall"):
            o.add(n, ("%s at the origin" % n).encode())
        o.add("taken", b"someone else's")
        o.add("same", b"made twice")
        # archive_after= (not used here) tracks files made on the mount,
        # whose URL is hsmfs-http's --origin joined with their path
        with Mount(store=store, opts="hook=%s --retries 3 --origin %s,timeout=4,"
                   "archive_after=3600" % (HTTP, o.url())) as m:
            rc, out = import_manifest(m.mnt, [
                {"path": n, "size": len(o.files[n]), "url": o.url(n), "version": o.etag(n)}
                for n in ("race", "flaky", "reset", "stall")])
            eq(rc, 0, "imported with urls and ETags (%s)" % out.strip())
            for n in ("race", "flaky", "reset", "stall"):
                get(m.path(n))
                put(m.path(n), ("%s, changed on the mount" % n).encode())

            o.other["race"] = b"another writer's bytes"
            o.put_script["race"] = ["race-412"]
            rc, out = archive(m, "race")
            ok(rc != 0 and "conflict" in out,
               "a change between the check and the PUT: 412, a conflict (%s)" % out.strip())
            eq(o.files["race"], b"another writer's bytes", "the other writer's bytes stay")
            eq(get(m.path("race")), b"race, changed on the mount", "ours stay local")
            eq(state(m, "race"), "dirty,conflict", "shown as a conflict")
            puts = [p for p in o.requests if p[0] == "PUT" and p[1] == "race"]
            ok(puts and puts[0][4].get("If-Match") == o.etag_of_bytes(b"race at the origin"),
               "the PUT was conditional on the recorded ETag")

            o.put_script["flaky"] = ["500", "500"]
            rc, out = archive(m, "flaky")
            eq(rc, 0, "500, 500, then a good answer: archived (%s)" % out.strip())
            eq(o.files["flaky"], b"flaky, changed on the mount", "the origin holds the change")
            eq([s for p, s, _ in o.puts if p == "flaky"], [500, 500, 201], "after three PUTs")

            o.put_script["reset"] = ["reset"]
            rc, out = archive(m, "reset")
            eq(rc, 0, "a reset mid-upload, retried: archived (%s)" % out.strip())
            eq(o.files["reset"], b"reset, changed on the mount", "the whole change is there")

            o.put_script["stall"] = ["stall"]
            o.stall_s = 8
            rc, out = archive(m, "stall")
            ok(rc != 0, "a stalled upload fails the archive at the timeout (%s)" % out.strip())
            ok(state(m, "stall").startswith("dirty"), "the file stays dirty")
            err = os.getxattr(m.path("stall"), "user.hsmfs.archive_error").decode()
            ok("attempt" in err, "its last error is shown (%s)" % err)
            eq(o.files["stall"], b"stall at the origin", "and the origin has nothing of it")
            rc, out = archive(m, "stall")
            eq(rc, 0, "the next archive succeeds (%s)" % out.strip())
            eq(o.files["stall"], b"stall, changed on the mount", "the change is there")

            # hsmfs-http killed mid-upload: its restart archives the file
            o.add("killed", b"killed at the origin")
            rc, out = import_manifest(m.mnt, [{"path": "killed", "size": 20,
                                               "url": o.url("killed"),
                                               "version": o.etag("killed")}])
            put(m.path("killed"), b"killed, changed on the mount")
            o.put_script["killed"] = ["stall"]
            o.stall_s = 20
            res = {}
            t = threading.Thread(target=lambda: res.update(r=archive(m, "killed")))
            t.start()
            wait_for(lambda: any(p[0] == "killed" for p in o.puts), "the upload began")
            pids = [int(x) for x in subprocess.run(["pgrep", "-f", "hsmfs-http.*%s" % m.mnt],
                                                   stdout=subprocess.PIPE).stdout.split()]
            ok(len(pids) == 1, "one hsmfs-http serves the mount (%s)" % pids)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            t.join(40)
            eq(res.get("r", (None,))[0], 0,
               "hsmfs-http killed mid-upload: restarted, it archives the file")
            eq(o.files["killed"], b"killed, changed on the mount", "the origin holds it whole")
            eq(state(m, "killed"), "resident", "clean")

            put(m.path("taken"), b"mine")
            rc, out = archive(m, "taken")
            ok(rc != 0 and "conflict" in out,
               "a new file whose name the origin has with other bytes: a conflict (%s)"
               % out.strip())
            eq(o.files["taken"], b"someone else's", "nothing overwritten")
            put(m.path("same"), b"made twice")
            rc, out = archive(m, "same")
            eq(rc, 0, "a new file the origin has with the same bytes: archived already")
            eq(state(m, "same"), "resident", "clean")
            ok(not [p for p in o.puts if p[0] == "same"], "without a PUT")
            ok(state(m, "taken") == "dirty,new,conflict" and get(m.path("taken")) == b"mine",
               "the conflicting new file keeps its bytes")
    shutil.rmtree(store, ignore_errors=True)


def kill_hook(m):
    """SIGKILL to the mount's hsmfs-http; returns once the daemon saw it go."""
    for pid in [int(x) for x in subprocess.run(["pgrep", "-f", "hsmfs-http.*%s" % m.mnt],
                                               stdout=subprocess.PIPE).stdout.split()]:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: "hsmfs-http" not in os.getxattr(m.mnt, "user.hsmfs.hooks").decode(),
             "the hook gone")


def test_hook_restarting():
    """hsmfs-http killed while idle, and an archive or a sync asked before
    the daemon has it back: they wait for the mount's hook, as a read
    waits for a fill hook (they failed at once, "no archive hook is
    connected", exit 4, while the daemon was starting it again)."""
    root, store = dav_root(), tmpdir("hsmfs-store-")
    with Nginx(root, extra=DAV) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s,timeout=10,archive_after=3600"
                   % (HTTP, ng.url("o/"))) as m:
            os.listdir(m.mnt)
            put(m.path("a"), b"archived while the hook was down")
            kill_hook(m)
            rc, out = archive(m, "a")
            eq(rc, 0, "hsmfsctl archive with the hook restarting: it waits (%s)" % out.strip())
            eq(tree(os.path.join(root, "o")), {"a": b"archived while the hook was down"},
               "the origin has it")
            put(m.path("b"), b"synced while the hook was down")
            os.unlink(m.path("a"))
            kill_hook(m)
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "hsmfsctl sync with the hook restarting: it waits (%s)" % out.strip())
            eq(tree(os.path.join(root, "o")), {"b": b"synced while the hook was down"},
               "the origin has the names and bytes")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def test_move_finds_nothing():
    """A file whose object was removed at the origin behind the mount's
    back, then renamed on the mount: the move finds its object at
    neither place, and the file, all of whose bytes are here, is
    uploaded again under its new name (the move was dropped: sync
    exited 0 with the file at the origin under no name)."""
    root, store = dav_root(), tmpdir("hsmfs-store-")
    with open(os.path.join(root, "o", "f"), "wb") as f:
        f.write(b"its only copy is the mount's now")
    with Nginx(root, extra=DAV) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s,timeout=10"
                   % (HTTP, ng.url("o/"))) as m:
            with open(m.path("f"), "rb") as f:
                eq(f.read(), b"its only copy is the mount's now", "read whole: resident")
            os.unlink(os.path.join(root, "o", "f"))
            os.rename(m.path("f"), m.path("g"))
            rc, out = run([HSMFSCTL, "sync", m.mnt])
            eq((rc, tree(os.path.join(root, "o"))),
               (0, {"g": b"its only copy is the mount's now"}),
               "sync: the origin holds it under its new name (%s)" % out.strip())
            eq(state(m, "g"), "resident", "and it is clean")
            ok(m.logged("archived again as a new file"), "the log says why")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def test_move_finds_nothing_partial():
    """The same with only part of the file here: it cannot be archived
    (what is missing is nowhere), so sync must not exit 0 with it at the
    origin under no name; it did, and showed the file clean.  Once it is
    removed on the mount, sync exits 0."""
    root, store = dav_root(), tmpdir("hsmfs-store-")
    data = os.urandom(4 << 20)
    with open(os.path.join(root, "o", "f"), "wb") as f:
        f.write(data)
    with Nginx(root, extra=DAV) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s,timeout=10"
                   % (HTTP, ng.url("o/"))) as m:
            with open(m.path("f"), "rb") as f:
                eq(f.read(4096), data[:4096], "its first bytes read: partial")
            ok(state(m, "f") in ("partial", "placeholder"), "not all here (%s)" % state(m, "f"))
            os.unlink(os.path.join(root, "o", "f"))
            os.rename(m.path("f"), m.path("g"))
            rc, out = run([HSMFSCTL, "sync", "--timeout", "20", m.mnt])
            ok(rc != 0, "sync fails: the origin does not hold 'g' (%d: %s)" % (rc, out.strip()))
            eq(tree(os.path.join(root, "o")), {}, "nothing at the origin")
            eq(state(m, "g"), "dirty", "the file is shown changed, not clean")
            ok(m.logged("not all its bytes are here"), "the log says why")
            os.unlink(m.path("g"))
            rc, out = run([HSMFSCTL, "sync", "--timeout", "20", m.mnt])
            eq(rc, 0, "removed: sync exits 0 (%s)" % out.strip())
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def test_multipart():
    """S3 multipart uploads (--s3, parts of 5 MiB) to an origin that judges
    conditions as S3 does, on CompleteMultipartUpload: another writer's
    object landing while the parts go is a conflict there, for a change
    (If-Match) and for a new file (If-None-Match: *); before, the
    completion carried no condition and replaced the other writer's
    object, the archive exiting 0.  hsmfs-http killed while the parts
    go: the next one aborts the upload it left (before, it stayed, its
    parts kept)."""
    store, state_dir = tmpdir("hsmfs-store-"), tmpdir("hsmfs-state-")
    theirs = os.urandom(11 << 20)
    with Origin() as o:
        o.add("big", os.urandom(12 << 20))
        recorded = o.etag("big")
        hook = ("hook=%s --s3 --origin %s --part-size 5 --retries 1 --state-dir %s,timeout=30,"
                "archive_after=3600" % (HTTP, o.url(), state_dir))
        with Mount(store=store, opts=hook) as m:
            rc, out = import_manifest(m.mnt, [{"path": "big", "size": len(o.files["big"]),
                                               "url": o.url("big"),
                                               "version": o.etag("big")}])
            eq(rc, 0, "multipart: imported (%s)" % out.strip())
            ours = os.urandom(12 << 20)
            put(m.path("big"), ours)
            o.other["big"] = theirs
            o.complete_script["big"] = ["race-412"]
            rc, out = archive(m, "big")
            ok(rc != 0 and "conflict" in out,
               "multipart: another writer's object before the completion is a conflict "
               "(%s)" % out.strip())
            eq(o.files["big"] == theirs, True, "multipart: the other writer's object stays")
            eq(state(m, "big"), "dirty,conflict", "multipart: shown as a conflict")
            eq([w for w, k, _, st in o.mp_log if k == "big" and not w.startswith("part")],
               ["create", "complete", "abort"], "multipart: begun, refused, aborted")
            done = [h for c, p, _, _, h in o.requests if c == "POST" and p == "big"]
            eq(done[-1].get("If-Match") if done else None, recorded,
               "multipart: the completion carried If-Match on the recorded ETag")
            put(m.path("new"), ours)
            o.other["new"] = theirs
            o.complete_script["new"] = ["race-412"]
            rc, out = archive(m, "new")
            ok(rc != 0 and "conflict" in out, "multipart: a new file whose name another writer "
               "took meanwhile is a conflict (%s)" % out.strip())
            eq(o.files["new"] == theirs, True, "multipart: their object stays")
            done = [h for c, p, _, _, h in o.requests if c == "POST" and p == "new"]
            eq(done[-1].get("If-None-Match") if done else None, "*",
               "multipart: the completion carried If-None-Match: *")
            eq(o.mp, {}, "multipart: nothing left unfinished")
            # killed while its parts go: the next hsmfs-http aborts what it left
            o.part_script = ["stall"] * 4
            o.stall_s = 20
            put(m.path("left"), ours)
            res = {}
            t = threading.Thread(target=lambda: res.update(a=archive(m, "left")))
            t.start()
            wait_for(lambda: any(w == "part-begun" and k == "left" for w, k, _, _ in o.mp_log),
                     "the multipart upload's parts going")
            left = [u for u, (k, _) in o.mp.items() if k == "left"]
            kill_hook(m)
            wait_for(lambda: not o.mp, "the upload aborted by the next hsmfs-http")
            ok(("abort", "left", left[0], 204) in o.mp_log,
               "multipart: the upload a kill left is aborted at the next start")
            ok(m.logged("aborted 1 multipart upload a crash left unfinished"), "and said")
            t.join(60)
            rc, out = archive(m, "left")
            eq((rc, o.files.get("left") == ours), (0, True),
               "multipart: then archived whole (%s)" % out.strip())
            eq([os.path.getsize(os.path.join(state_dir, f)) for f in os.listdir(state_dir)],
               [0], "multipart: its journal is empty once none is unfinished")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(state_dir, ignore_errors=True)


main(lambda: (test(), test_hook_restarting(), test_move_finds_nothing(),
              test_move_finds_nothing_partial(), test_multipart()))
