#!/usr/bin/env python3
"""-o hook=COMMAND: hsmfs starts its hook, restarts it, stops it.

Also runs the C example hook, hsmfs-mirror, the way a user would.
"""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, PYHOOK, Mount, eq, import_manifest, main, ok, tmpdir,
                     wait_for)  # noqa: E402


def started(m):
    return [int(p) for p in re.findall(r"started \(pid (\d+)\)", m.output())]


def test():
    mirror = tmpdir("hsmfs-mirror-")
    data = {n: os.urandom(100000 + i) for i, n in enumerate("abc")}
    for n, d in data.items():
        with open(os.path.join(mirror, n), "wb") as f:
            f.write(d)
    log = os.path.join(mirror, "hook.log")
    cmd = "%s %s --log %s --mirror %s" % (sys.executable, PYHOOK, log, mirror)
    with Mount(opts="hook=" + cmd.replace(",", "\\,")) as m:
        eq(import_manifest(m.mnt, [{"path": n, "size": len(d)} for n, d in data.items()])[0], 0,
           "import")
        with open(m.path("a"), "rb") as f:
            eq(f.read(), data["a"], "the supervised hook fills reads")
        pids = wait_for(lambda: started(m), "hook start line in the log")
        os.kill(pids[0], signal.SIGKILL)
        wait_for(lambda: len(started(m)) >= 2, "the hook restarted")
        ok(m.logged("killed by signal 9"), "the hook's death is logged")
        with open(m.path("b"), "rb") as f:
            eq(f.read(), data["b"], "the restarted hook fills reads")
        last = started(m)[-1]
    ok(not os.path.exists("/proc/%d" % last) or
       open("/proc/%d/stat" % last).read().split()[2] == "Z",
       "the hook is stopped at unmount")

    # kill -9 of the daemon takes the hook along (it would otherwise keep
    # fetching into a store that another mount may serve next), even one
    # that does not notice its connection is gone (busy, or never connected)
    stubborn = "%s -c 'import time; time.sleep(120)'" % sys.executable
    m = Mount(opts="hook=" + stubborn)
    m.start()
    try:
        pid = wait_for(lambda: started(m), "hook start line in the log")[-1]
        m.proc.kill()
        m.proc.wait()

        def gone():
            try:
                return open("/proc/%d/stat" % pid).read().split()[2] == "Z"
            except OSError:
                return True
        try:
            ok(wait_for(gone, "the hook to die with its daemon", deadline=5),
               "kill -9 of the daemon: its hook dies too")
        except TimeoutError:
            ok(False, "kill -9 of the daemon: its hook dies too (pid %d still runs)" % pid)
            os.kill(pid, signal.SIGKILL)
    finally:
        m.cleanup()

    mirror_bin = os.path.join(os.path.dirname(HSMFS), "hsmfs-mirror")
    with Mount(opts="hook=%s %s" % (mirror_bin, mirror)) as m:
        eq(import_manifest(m.mnt, [{"path": "c", "size": len(data["c"])}])[0], 0, "import")
        with open(m.path("c"), "rb") as f:
            eq(f.read(), data["c"], "hsmfs-mirror (the C example hook) fills reads")
        # keyed by origin: two placeholders exchanged between the event
        # and the fill still get their own bytes
        import ctypes
        for n, d in (("x", os.urandom(70000)), ("y", os.urandom(70000))):
            data[n] = d
            with open(os.path.join(mirror, n), "wb") as f:
                f.write(d)
        eq(import_manifest(m.mnt, [{"path": n, "size": 70000, "url": n} for n in "xy"])[0], 0,
           "import x and y with their origins")
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.renameat2(-100, m.path("x").encode(), -100, m.path("y").encode(), 2)
        eq(rc, 0, "RENAME_EXCHANGE of two placeholders")
        with open(m.path("x"), "rb") as f:
            ok(f.read() == data["y"], "the file now named x reads y's bytes (its origin)")
        with open(m.path("y"), "rb") as f:
            ok(f.read() == data["x"], "and the one named y, x's")
        from harness import HSMFSCTL, run
        rc, out = run([HSMFSCTL, "hooks", m.mnt])
        ok(rc == 0 and re.search(r"^hsmfs-mirror +\d+ fill +A- +0 +/$", out, re.M),
           "hsmfsctl hooks lists it: " + out.strip().splitlines()[-1])
    # a hook named without a path is looked up beside the running hsmfs
    # first: a build directory's hsmfs finds its own hsmfs-mirror
    with Mount(opts="hook=hsmfs-mirror %s" % mirror, env={"PATH": "/usr/bin:/bin"}) as m:
        eq(import_manifest(m.mnt, [{"path": "c", "size": len(data["c"])}])[0], 0, "import")
        with open(m.path("c"), "rb") as f:
            eq(f.read(), data["c"], "hook=hsmfs-mirror found beside hsmfs, PATH without it")
    import shutil
    shutil.rmtree(mirror, ignore_errors=True)


if __name__ == "__main__":
    main(test)
