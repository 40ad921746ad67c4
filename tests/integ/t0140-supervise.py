#!/usr/bin/env python3
"""-o hook=COMMAND: hsmfs starts its hook, restarts it, stops it.

Also runs the C example hook, hsmfs-mirror, the way a user would.
"""
import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, PYHOOK, Mount, eq, errno_of, import_manifest, main, ok,
                     tmpdir, wait_for)  # noqa: E402


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
        held = []
        for fd in os.listdir("/proc/%d/fd" % pids[0]):
            try:
                held.append(os.readlink("/proc/%d/fd/%s" % (pids[0], fd)))
            except OSError:
                pass
        eq([h for h in held if h == "/dev/fuse" or "hsmfs-saved" in h or h.endswith("/lock")],
           [], "the hook holds none of the keeper's descriptors (the mount, its table, the lock)")
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
    m = Mount(opts="timeout=1,hook=" + stubborn)
    m.start()
    try:
        pid = wait_for(lambda: started(m), "hook start line in the log")[-1]
        m.kill()
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
        # a mirror file of another size than recorded is another version
        with open(os.path.join(mirror, "g"), "wb") as f:
            f.write(os.urandom(5000))
        eq(import_manifest(m.mnt, [{"path": "g", "size": 4000}])[0], 0, "import")
        eq(errno_of(lambda: open(m.path("g"), "rb").read()), errno.EIO,
           "hsmfs-mirror refuses a mirror file whose size is not the recorded one")
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
        row = re.search(r"^hsmfs-mirror +\d+ fill +A- +0 +(\d+) +(\d+) +0 +(\S+) +(\S+) +/$",
                        out, re.M)
        ok(rc == 0 and row, "hsmfsctl hooks lists it:\n" + out)
        # its answers so far: the fills of the reads above (g's refused: once, or
        # twice when the kernel asks again for the page its readahead failed), each timed
        ok(row and int(row.group(1)) >= 3 and row.group(2) in ("1", "2") and
           row.group(3) != "-" and row.group(4) != "-",
           "with its answers, its denial and their latency counted")
        ok("last said: hsmfs-mirror: 'g' has 5000 bytes" in out,
           "and the hook's last line, its refusal of g")
    # a hook named without a path is looked up beside the running hsmfs
    # first: a build directory's hsmfs finds its own hsmfs-mirror
    with Mount(opts="hook=hsmfs-mirror %s" % mirror, env={"PATH": "/usr/bin:/bin"}) as m:
        eq(import_manifest(m.mnt, [{"path": "c", "size": len(data["c"])}])[0], 0, "import")
        with open(m.path("c"), "rb") as f:
            eq(f.read(), data["c"], "hook=hsmfs-mirror found beside hsmfs, PATH without it")
    import shutil
    shutil.rmtree(mirror, ignore_errors=True)


def hooks_listed(mnt):
    """The names hsmfsctl hooks lists as connected now."""
    from harness import HSMFSCTL, run
    rc, out = run([HSMFSCTL, "hooks", mnt])
    return [line.split()[0] for line in out.strip().splitlines()[1:]] if rc == 0 else None


def test_ready():
    """With hook=, the mount is ready (--ready-fd, mount(8) returning)
    once the hook has joined, or exited, or timeout= passed."""
    mirror = tmpdir("hsmfs-mirror-")
    log = os.path.join(mirror, "hook.log")
    hook = "%s %s --log %s --mirror %s --name early" % (sys.executable, PYHOOK, log, mirror)
    for what, cmd in (("the hook", hook),
                      ("a wrapper's child", "sh -c '%s \\\"$0\\\"; :'" % hook)):
        with Mount(opts="hook=" + cmd.replace(",", "\\,")) as m:
            eq(hooks_listed(m.mnt), ["early"], "ready: %s has joined already" % what)
    # a hook that never joins: ready after timeout=, and said so
    t = time.monotonic()
    stubborn = "%s -c 'import time; time.sleep(60)'" % sys.executable
    with Mount(opts="timeout=1,hook=" + stubborn) as m:
        took = time.monotonic() - t
        ok(1 <= took < 10, "a hook that never joins: ready after timeout=1 (%.2f s)" % took)
        ok(m.logged("has not joined within 1 s"), "and the log says why")
    # a hook that exits at once: ready then, not after the timeout
    t = time.monotonic()
    with Mount(opts="timeout=30,hook=false") as m:
        took = time.monotonic() - t
        ok(took < 10, "a hook that exits at once: ready at once (%.2f s)" % took)
    # daemonized (as mount(8) runs it): hsmfs returns once the hook joined
    store, mnt = tmpdir("hsmfs-store-"), tmpdir("hsmfs-mnt-")
    rc = subprocess.run([HSMFS, store, mnt, "-o", "hook=" + hook.replace(",", "\\,")]).returncode
    eq(rc, 0, "hsmfs without -f returns 0")
    try:
        if rc == 0:
            eq(hooks_listed(mnt), ["early"], "and its hook has joined when it does")
    finally:
        if rc == 0:
            pid = int(open(os.path.join(store, ".hsmfs", "lock")).read().split()[0])
            subprocess.run(["fusermount3", "-u", mnt])
            wait_for(lambda: not os.path.exists("/proc/%d" % pid), "the daemon to exit")
        shutil.rmtree(store, ignore_errors=True)
        os.rmdir(mnt)
    shutil.rmtree(mirror, ignore_errors=True)


def test_missing_hook():
    """A hook command that cannot be run fails the mount at once, with
    one line naming it and why (it mounted, and the first ls hung while
    the daemon restarted the missing command ten times)."""
    d = tmpdir("hsmfs-nohook-")
    store, mnt = os.path.join(d, "store"), os.path.join(d, "mnt")
    os.mkdir(store)
    os.mkdir(mnt)
    plain = os.path.join(d, "not-a-program")
    open(plain, "w").close()
    for cmd, why in (("hsmfs-htp --origin x", "not found"), (plain + " arg", "not executable")):
        p = subprocess.run([HSMFS, store, mnt, "-o", "hook=" + cmd], capture_output=True,
                           timeout=30)
        err = p.stderr.decode()
        ok(p.returncode != 0 and why in err and cmd.split()[0] in err,
           "hook=%s: the mount fails, saying so (%d: %s)" % (cmd.split()[0], p.returncode,
                                                            err.strip()))
        ok(not os.path.ismount(mnt), "and nothing is mounted")
        eq(len(err.strip().splitlines()), 1, "in one line")
    # a command led by a builtin of the shell is the shell's to run
    with Mount(opts="hook=exec true") as m:
        ok(os.path.ismount(m.mnt), "hook=exec true mounts")
    shutil.rmtree(d, ignore_errors=True)


def test_crashing_hook():
    """A fill hook that dies on every event it is handed (supervised: it
    is started again, and handed the same event) is not handed it for
    ever: after three, the event fails, long before its timeout, and the
    log says so."""
    d = tmpdir("hsmfs-crash-")
    log = os.path.join(d, "hook.log")
    cmd = "%s %s --log %s --mode crash" % (sys.executable, PYHOOK, log)
    with Mount(opts="timeout=60,hook=" + cmd.replace(",", "\\,")) as m:
        eq(import_manifest(m.mnt, [{"path": "p", "size": 5000}])[0], 0, "import")
        t0 = time.monotonic()
        err = errno_of(lambda: open(m.path("p"), "rb").read())
        took = time.monotonic() - t0
        ok(err == errno.EIO and took < 20,
           "a read whose hook dies on it fails with EIO in %.1f s (%s), not at the 60 s timeout"
           % (took, errno.errorcode.get(err, err)))
        ok(m.logged("left while handling"), "the log says why")
    shutil.rmtree(d, ignore_errors=True)


def run_all():
    test()
    test_crashing_hook()
    test_missing_hook()
    test_ready()


if __name__ == "__main__":
    main(run_all)
