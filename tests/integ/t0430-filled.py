#!/usr/bin/env python3
"""FILLED (protocol version 5): a fill hook says part of its fill is in
before it answers, and the reads waiting inside that part go on.

Only bytes the commit would copy are served early: every hook that must
answer has allowed, no user change began on the file since the fill was
delivered, the bytes are still missing.  Nothing is committed before the
answer, a deny after FILLED fails the reads still waiting, and a hook of
an older version that sends FILLED is refused as before.  The fill hook
is tests/helpers/pyhook.py; a raw client checks the protocol's edges.
"""
# prefetch=0: these tests count events exactly.

import errno
import json
import os
import shutil
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import hsmfs_hook  # noqa: E402
from harness import (Hook, Mount, dread, eq, errno_of, main, mirror_files, ok,  # noqa: E402
                     tmpdir, wait_for)

K, MiB, P = 1024, 1 << 20, 4096


def stats(m):
    return json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))


def present(m, name):
    return int(os.getxattr(m.path(name), "user.hsmfs.present"))


def in_thread(fn):
    """Run fn in a thread; returns a function that joins it and gives
    (result or exception, seconds it took)."""
    box = {}

    def run():
        t0 = time.monotonic()
        try:
            box["r"] = fn()
        except OSError as e:
            box["r"] = e
        box["t"] = time.monotonic() - t0
    t = threading.Thread(target=run)
    t.start()

    def join():
        t.join(30)
        return box.get("r"), box.get("t")
    return join


def test_early():
    """A read waits for its own bytes, not for the rest of the fill: the
    hook says FILLED and answers 3 s later; the read is back at once,
    right, and nothing is present until the answer commits it."""
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(MiB)
    with Mount(opts="prefetch=0") as m:
        mirror_files(m, mirror, {"f": data})
        with Hook(m.mnt, "--mirror", mirror, "--filled", "3") as h:
            t0 = time.monotonic()
            eq(dread(m.path("f"), 300 * K, P), data[300 * K:300 * K + P],
               "a 4 KiB read of a cold chunk is right")
            took = time.monotonic() - t0
            ok(took < 2, "and came back before the answer (%.2f s; the answer takes 3 s)" %
               took)
            eq(stats(m)["early_reads"], 1, "counted as an early read")
            eq(present(m, "f"), 0, "nothing committed before the answer")
            wait_for(lambda: present(m, "f") == 8 * K, "the answer commits the read's block")
            eq(dread(m.path("f"), 0, MiB), data, "and the whole chunk is right")
    shutil.rmtree(mirror, ignore_errors=True)


def test_deny_after():
    """FILLED is not an allow of the rest: the hook fills only the bytes
    the read needs, says so, then denies.  The first read has its bytes;
    a second read parked on the same fill for bytes nobody said are in
    fails with the deny's errno, never zeros; nothing is committed."""
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(MiB)
    with Mount(opts="prefetch=0,timeout=20,first_fill=128k") as m:
        mirror_files(m, mirror, {"f": data})
        with Hook(m.mnt, "--mirror", mirror, "--fill", "required", "--filled", "2",
                  "--then", "deny", "--errno", str(errno.EIO)) as h:
            eq(dread(m.path("f"), 300 * K, P), data[300 * K:300 * K + P],
               "the read whose bytes were said FILLED is right")
            evs = h.events("PRE_ACCESS")
            eq([(e["start"], e["hint_start"], e["hint_end"]) for e in evs],
               [(300 * K, 256 * K, 384 * K)], "one event: the 128 KiB block of the read")
            second = in_thread(lambda: dread(m.path("f"), 360 * K, P))
            r, took = second()
            ok(isinstance(r, OSError) and r.errno == errno.EIO,
               "a read of the same fill's other bytes fails with the deny (%r)" % (r,))
            eq(present(m, "f"), 0, "nothing committed")
    shutil.rmtree(mirror, ignore_errors=True)


def test_watcher_decides():
    """FILLED goes nowhere while another hook still must answer: a
    watcher that denies after 1 s fails the read with its errno, though
    the fill hook said FILLED at once; one that allows after 1 s lets it
    go then, not before."""
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(MiB)
    with Mount(opts="prefetch=0") as m:
        mirror_files(m, mirror, {"f": data, "g": data})
        with Hook(m.mnt, "--mirror", mirror, "--filled", "3") as h, \
                Hook(m.mnt, "--kind", "watch", "--mask", "access", "--mode", "deny",
                     "--errno", str(errno.EACCES), "--delay", "1", "--name", "policy") as w:
            eq(errno_of(lambda: dread(m.path("f"), 300 * K, P)), errno.EACCES,
               "a watcher's deny after the fill hook's FILLED fails the read")
            ok(any("filled" in l for l in h.lines()), "the fill hook did say FILLED")
            eq(stats(m)["early_reads"], 0, "no early read")
        with Hook(m.mnt, "--mirror", mirror, "--filled", "3") as h, \
                Hook(m.mnt, "--kind", "watch", "--mask", "access", "--mode", "allow",
                     "--delay", "1", "--name", "policy") as w:
            t0 = time.monotonic()
            eq(dread(m.path("g"), 300 * K, P), data[300 * K:300 * K + P],
               "with a watcher that allows: right")
            took = time.monotonic() - t0
            ok(took >= 0.9, "not before the watcher allowed (%.2f s)" % took)
    shutil.rmtree(mirror, ignore_errors=True)


def test_user_write_wins():
    """A user's write during the fill wins over FILLED: the hook waits
    1.5 s, writes the origin's bytes, says FILLED, answers 1 s later.
    The user writes the read's page meanwhile; the read waiting for it
    gets the user's bytes (before the fix: the origin's, from the
    staging file), and so does every read after."""
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(MiB)
    mine = b"u" * P
    with Mount(opts="prefetch=0") as m:
        mirror_files(m, mirror, {"f": data})
        with Hook(m.mnt, "--mirror", mirror, "--delay", "1.5", "--filled", "1") as h:
            reader = in_thread(lambda: dread(m.path("f"), 300 * K, P))
            wait_for(lambda: h.events("PRE_ACCESS"), "the fill under way")
            fd = os.open(m.path("f"), os.O_WRONLY | os.O_DIRECT)
            try:
                eq(os.pwrite(fd, mine, 300 * K), P, "the user writes the read's page")
            finally:
                os.close(fd)
            r, took = reader()
            eq(r, mine, "the waiting read gets the user's bytes")
            wait_for(lambda: any("filled" in l for l in h.lines()), "FILLED said")
            eq(stats(m)["early_reads"], 0, "no early read after a user's change")
            wait_for(lambda: present(m, "f") >= 8 * K, "the fill committed")
            eq(dread(m.path("f"), 300 * K, P), mine, "and reads after it too")
            eq(dread(m.path("f"), 296 * K, P), data[296 * K:300 * K],
               "the fill's other bytes are the origin's")
    shutil.rmtree(mirror, ignore_errors=True)


def test_protocol():
    """A hook that spoke version 4 and sends FILLED is refused (UNKNOWN),
    as it always was; at version 5, FILLED of an unknown event, of bytes
    outside the event's hint, or of a part a read is not inside, releases
    nothing (no sleep: a second read inside the part is the signal)."""
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(MiB)
    with Mount(opts="prefetch=0,timeout=10,first_fill=128k") as m:
        mirror_files(m, mirror, {"f": data})
        s, welcome = hsmfs_hook.connect_socket(m.mnt, "fill", ["access"], "old", version=4)
        eq(welcome["version"], 4, "an old hook speaks version 4")
        hsmfs_hook.filled(s, 1, 0, P)
        frame, fds = hsmfs_hook.recv_frame(s)
        length, mtype, flags = struct.unpack_from("<IHH", frame)
        eq((mtype, struct.unpack_from("<I", frame, 8)[0]),
           (hsmfs_hook.ERROR, 3), "FILLED from it: ERROR UNKNOWN")
        s.close()

        h = hsmfs_hook.connect(m.mnt, "fill", ["access"], "raw")
        eq(h.welcome["version"], 6, "a new hook speaks version 6")
        h.filled(999999, 0, P)  # no such event: ignored
        first = in_thread(lambda: dread(m.path("f"), 300 * K, P))
        ev = next(e for e in h.events() if e.get("type") == "PRE_ACCESS")
        eq((ev["start"], ev["hint_start"], ev["hint_end"]), (300 * K, 256 * K, 384 * K),
           "the first read's event: the 128 KiB block of the read")
        os.pwrite(ev["fd"], data[ev["hint_start"]:ev["hint_end"]], ev["hint_start"])
        # two more reads wait on the same fill: one inside its hint, one
        # across the hint's start (its first page is not the fill's)
        second = in_thread(lambda: dread(m.path("f"), 360 * K, P))
        across = in_thread(lambda: dread(m.path("f"), 256 * K - P, 2 * P))
        wait_for(lambda: stats(m)["parked"] == 3, "three reads parked on the fill")
        # A part the first read is not inside but the second is: the second
        # comes back.  One FILLED is taken whole under the engine's lock
        # before its replies, so the count then says who went with it.
        h.filled(ev["id"], ev["start"] + P, ev["hint_end"])
        r, took = second()
        eq(r, data[360 * K:360 * K + P], "the read inside the part is back, right")
        eq(stats(m)["early_reads"], 1, "and only it: a read not inside the part waits")
        # from the file's start: taken as the hint's part, so the first read
        # goes and the read across the hint's start does not
        h.filled(ev["id"], 0, ev["hint_end"])
        r, took = first()
        eq(r, data[300 * K:300 * K + P], "FILLED covering the first: it is back, right")
        eq(stats(m)["early_reads"], 2,
           "the read across the hint's start still waits: nothing outside the hint is "
           "served from the staging file")
        h.filled(ev["id"], ev["start"], ev["start"] + P)  # again: nothing waits

        def serve():
            # what comes after the answer (the rest of the chunk, the page
            # before the hint), as a mirror would
            try:
                for e in h.events():
                    if e.get("type") == "PRE_ACCESS":
                        os.pwrite(e["fd"], data[e["hint_start"]:e["hint_end"]],
                                  e["hint_start"])
                        h.allow(e["id"], e["hint_start"], e["hint_end"])
                    if e.get("fd") is not None:
                        os.close(e["fd"])
            except OSError:
                pass
        rest = threading.Thread(target=serve)
        rest.start()
        h.allow(ev["id"], ev["hint_start"], ev["hint_end"])
        os.close(ev["fd"])
        r, took = across()
        eq(r, data[256 * K - P:256 * K + P], "the read across it is right after the answers")
        eq(stats(m)["early_reads"], 2, "and was not an early read")
        wait_for(lambda: present(m, "f") >= ev["hint_end"] - ev["hint_start"],
                 "the answer commits the fill")
        h.sock.shutdown(socket.SHUT_RDWR)
        rest.join(10)
        h.close()
    shutil.rmtree(mirror, ignore_errors=True)


if __name__ == "__main__":
    main(lambda: (test_early(), test_deny_after(), test_watcher_decides(),
                  test_user_write_wins(), test_protocol()))
