#!/usr/bin/env python3
"""The hsmfs command: help, version, daemonizing, and every bad input.

Each bad input must give exit status and one clear line, and leave the
store exactly as it was.
"""
import errno
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, DEADLINE, Hook, Mount, diag, eq, is_mounted, is_root,
                     main, ok, run, skip, tmpdir, tree_snapshot, unmount, wait_for)


def fresh():
    d = tmpdir()
    store, mnt = os.path.join(d, "store"), os.path.join(d, "mnt")
    os.mkdir(store)
    os.mkdir(mnt)
    with open(os.path.join(store, "keep"), "wb") as f:
        f.write(b"precious")
    return d, store, mnt


def bad(desc, args, code, needle, store=None):
    """Run hsmfs with args; expect exit code, one line with needle, store untouched."""
    before = tree_snapshot(store) if store else None
    rc, out = run([HSMFS] + args)
    lines = [l for l in out.splitlines() if l.strip()]
    ok(rc == code and len(lines) >= 1 and needle in lines[-1] and
       lines[-1].startswith("hsmfs: "),
       "%s: exit %d and '%s'" % (desc, code, needle))
    if not (rc == code and lines and needle in lines[-1]):
        diag("exit %d, output: %s" % (rc, out))
    if store:
        eq(tree_snapshot(store), before, "%s: store untouched" % desc)


def test():
    rc, out = run([HSMFS, "--help"])
    ok(rc == 0 and "usage: hsmfs STORE MOUNTPOINT" in out, "--help")
    rc, out = run([HSMFS, "--version"])
    ok(rc == 0 and out.startswith("hsmfs "), "--version: " + out.strip())
    # every program answers the same two questions the same way
    bindir = os.path.dirname(os.path.abspath(HSMFS))
    for prog in ("hsmfs", "hsmfsctl", "hsmfs-http", "hsmfs-mirror"):
        exe = os.path.join(bindir, prog)
        for flag in ("--version", "-V"):
            rc, out = run([exe, flag])
            ok(rc == 0 and out.startswith(prog + " 0"), "%s %s: %s" % (prog, flag, out.strip()))
        for flag in ("--help", "-h"):
            rc, out = run([exe, flag])
            ok(rc == 0 and "usage: " + prog in out, "%s %s: its usage, exit 0" % (prog, flag))

    # hsmfsctl status of a directory that is not on a mount: an error,
    # not an empty table with a total and exit 0
    plain = tmpdir("hsmfs-plain-")
    rc, out = run([HSMFSCTL, "status", plain])
    ok(rc != 0 and "not on an hsmfs mount" in out and "total" not in out,
       "hsmfsctl status of a plain directory fails, saying so (%d: %s)" % (rc, out.strip()))
    shutil.rmtree(plain, ignore_errors=True)
    with Mount() as m:
        open(m.path("f"), "w").close()
        os.symlink("f", m.path("l"))
        rc, out = run([HSMFSCTL, "status", m.path("f"), m.path("l")])
        ok(rc == 0 and "total" in out, "hsmfsctl status of a file and a link on a mount: "
           "a table (%d)" % rc)

    # log=FILE, log_level=: the lines go there, each naming the mount,
    # at the level asked; a bad level is refused at once
    logdir = tmpdir("hsmfs-log-")
    logf = os.path.join(logdir, "my.log")
    with Mount(opts="log=%s,log_level=debug" % logf) as m:
        Hook(m.mnt, "--kind", "watch", "--mask", "modify").kill()  # logged: info
        wait_for(lambda: os.path.exists(logf) and "disconnected" in open(logf).read(),
                 "the hook's lines in the log")
    lines = open(logf).read().splitlines() if os.path.exists(logf) else []
    ok(lines and all(m.mnt in ln for ln in lines) and "hsmfs: " not in m.output(),
       "log=FILE: the lines go there, each naming the mount (%d lines)" % len(lines))
    with Mount(opts="log=%s,log_level=err" % logf) as m:
        Hook(m.mnt, "--kind", "watch", "--mask", "modify").kill()
    eq(open(logf).read().splitlines(), lines, "log_level=err: no info line added")
    bad("log_level=loud", [logdir, logdir + "/mnt", "-o", "log_level=loud"], 1, "log_level")
    bad("log=relative", [logdir, logdir + "/mnt", "-o", "log=my.log"], 1, "absolute path")
    shutil.rmtree(logdir, ignore_errors=True)

    d, store, mnt = fresh()
    try:
        bad("no arguments", [], 1, "missing STORE and MOUNTPOINT")
        bad("unknown option", [store, mnt, "-o", "frobnicate"], 1,
            "unknown option 'frobnicate'", store)
        bad("unknown flag", [store, mnt, "--bogus"], 1, "unknown option '--bogus'", store)
        bad("bad timeout", [store, mnt, "-o", "attr_timeout=soon"], 1,
            "attr_timeout=soon", store)
        bad("missing store", [os.path.join(d, "nostore"), mnt], 2,
            "no such directory")
        bad("store is a file", [os.path.join(store, "keep"), mnt], 2,
            "not a directory", store)
        bad("missing mountpoint", [store, os.path.join(d, "nomnt")], 3,
            "does not exist", store)
        with open(os.path.join(d, "file"), "w"):
            pass
        bad("mountpoint is a file", [store, os.path.join(d, "file")], 3,
            "is not a directory", store)
        inside = os.path.join(store, "sub")
        os.mkdir(inside)
        bad("mountpoint inside store", [store, inside], 3, "inside the store", store)
        os.rmdir(inside)
        if is_root():
            skip("allow_other without user_allow_other", "root may always use it")
        else:
            conf = open("/etc/fuse.conf").read() if os.path.exists("/etc/fuse.conf") else ""
            if any(l.strip() == "user_allow_other" for l in conf.splitlines()):
                skip("allow_other without user_allow_other", "fuse.conf allows it here")
            else:
                bad("allow_other without user_allow_other",
                    [store, mnt, "-o", "allow_other"], 1, "user_allow_other", store)
        ok(not os.path.exists(os.path.join(store, ".hsmfs")),
           "failed starts created no state")

        # second mount of the same store
        with Mount(store=store) as m:
            other = os.path.join(d, "mnt2")
            os.mkdir(other)
            bad("store already mounted", [store, other], 2,
                "already mounted by another hsmfs (pid %d)" % m.proc.pid, None)
            ok(not is_mounted(other), "second mount did not happen")
            with open(m.path("keep"), "rb") as f:
                eq(f.read(), b"precious", "first mount still serves")

        # stale mount: the daemon dies, the mountpoint stays
        m = Mount(store=store)
        m.start()
        m.kill()
        m.proc.wait()
        try:
            os.stat(m.mnt)
            ok(False, "dead daemon leaves a stale mountpoint")
        except OSError as e:
            # ECONNABORTED while the kernel is still ending the connection
            ok(e.errno in (errno.ENOTCONN, errno.ECONNABORTED),
               "dead daemon leaves ENOTCONN (%s)" % errno.errorcode.get(e.errno))
        bad("stale mount", [store, m.mnt], 3, "fusermount3 -u %s" % m.mnt, store)
        unmount(m.mnt)
        ok(not is_mounted(m.mnt), "stale mount cleared as the message says")
        m.cleanup()

        # daemon mode: the parent returns only once the mount serves
        rc, out = run([HSMFS, store, mnt])
        ok(rc == 0 and out == "", "daemonizing mount exits 0 quietly")
        try:
            with open(os.path.join(mnt, "keep"), "rb") as f:
                eq(f.read(), b"precious", "served as soon as the parent returned")
            pid = int(open(os.path.join(store, ".hsmfs", "lock")).read())
            ok(os.path.exists("/proc/%d" % pid), "daemon pid recorded in lock file")
            fd = os.pidfd_open(pid)
        finally:
            eq(unmount(mnt), 0, "fusermount3 -u")
        import select
        r, _, _ = select.select([fd], [], [], DEADLINE)
        ok(r, "daemon exits after unmount")
        os.close(fd)
    finally:
        if is_mounted(mnt):
            unmount(mnt, lazy=True)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main(test)
