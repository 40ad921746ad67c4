#!/usr/bin/env python3
"""PRE_MODIFY: the bytes about to change, vetoes, the quiet flag, dirty state."""
import errno
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Hook, Mount, eq, import_manifest, main, ok, tmpdir, wait_for  # noqa: E402

P = 4096


def test():
    with Mount(opts="timeout=3") as m:
        with open(m.path("w"), "wb") as f:
            f.write(b"a" * 3 * P)
        with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "allow") as h:
            fd = os.open(m.path("w"), os.O_WRONLY)
            os.pwrite(fd, b"B", P)
            os.close(fd)
            evs = h.events("PRE_MODIFY")
            eq([(e["start"], e["end"] - e["start"]) for e in evs], [(P, 1)],
               "pwrite of 1 byte at PAGE: PRE_MODIFY {PAGE, 1}")
            ok(evs and evs[0]["pid"] == os.getpid() and evs[0]["path"] == "w",
               "with the writer's pid and the path")
            with open(m.path("w"), "rb") as f:
                eq(f.read()[P - 1:P + 2], b"aBa", "the byte landed")
            os.truncate(m.path("w"), P)
            eq([(e["start"], e["end"]) for e in h.events("PRE_MODIFY")[1:]], [(P, 3 * P)],
               "truncate 3P -> P: PRE_MODIFY [P, 3P)")
            with open(m.path("r"), "wb") as f:
                f.write(b"x")
            eq(len(h.events("PRE_MODIFY")), 3, "a write to a new file is one event")
            before = len(h.events())
            with open(m.path("r"), "rb") as f:
                f.read()
            eq(len(h.events()), before, "reads raise no PRE_MODIFY")

        with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "deny",
                  "--errno", str(errno.EPERM)) as h:
            try:
                with open(m.path("w"), "r+b") as f:
                    f.write(b"Z")
                ok(False, "a vetoed write fails")
            except OSError as e:
                eq(e.errno, errno.EPERM, "a vetoed write fails with the hook's errno")
            with open(m.path("w"), "rb") as f:
                eq(f.read(1), b"a", "and changes nothing")

        with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "allow",
                  "--quiet") as h:
            for k in range(3):
                with open(m.path("w"), "r+b") as f:
                    f.seek(k)
                    f.write(b"q")
            eq(len(h.events("PRE_MODIFY")), 1, "quiet answer: no more PRE_MODIFY for the file")

        # a watcher that leaves with an event pending: the event waits for a
        # hook of the same name and goes to it
        out = {}
        with open(m.path("w2"), "wb") as f:
            f.write(b"x")

        def writer():
            try:
                with open(m.path("w2"), "r+b") as f:
                    f.write(b"W")
                out["e"] = 0
            except OSError as e:
                out["e"] = e.errno
        with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "silent",
                  "--name", "audit") as h:
            t = threading.Thread(target=writer)
            t.start()
            wait_for(lambda: h.events(), "the event at the first watcher")
            h.kill()
            with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "allow",
                      "--name", "audit") as h2:
                t.join()
                eq(out.get("e"), 0, "the write went through once 'audit' came back")
                eq(len(h2.events()), 1, "the pending event was sent to the new 'audit'")
        with Hook(m.mnt, "--kind", "watch", "--mask", "modify", "--mode", "silent",
                  "--name", "gone") as h:
            t = threading.Thread(target=writer)
            t.start()
            wait_for(lambda: h.events(), "the event at the watcher")
            h.kill()
            t.join()
            eq(out.get("e"), errno.EIO, "a watcher that never comes back: EIO after the timeout")

        # writes to a placeholder make it dirty, the written range present
        mirror = tmpdir("hsmfs-mirror-")
        rc, _ = import_manifest(m.mnt, [{"path": "p", "size": 4 * P}])
        eq(rc, 0, "placeholder imported")
        fd = os.open(m.path("p"), os.O_WRONLY)
        os.pwrite(fd, b"D" * P, P)
        os.close(fd)
        eq(os.getxattr(m.path("p"), "user.hsmfs.state"), b"dirty", "written placeholder is dirty")
        eq(os.getxattr(m.path("p"), "user.hsmfs.present"), b"%d" % P, "the written page is present")
        fd = os.open(m.path("p"), os.O_RDONLY | os.O_DIRECT)
        eq(os.pread(fd, P, P), b"D" * P, "written bytes read back without a hook")
        os.close(fd)
        import shutil
        shutil.rmtree(mirror, ignore_errors=True)


if __name__ == "__main__":
    main(test)
