#!/usr/bin/env python3
"""mount(8) integration: `mount -t fuse.hsmfs` and an fstab line (root only).

mount(8) runs mount.fuse3, which runs `hsmfs STORE MNT -o OPTS` from
PATH; the options fstab adds for other tools must be accepted.
"""
import os
import re
import select
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEADLINE, HSMFS, Nginx, diag, eq, is_mounted, is_root, main, ok,
                     run, skip, tmpdir, write_tree)

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def fstype(mnt):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a = line.split()
            if a[4] == mnt:
                return a[a.index("-") + 1], a[a.index("-") + 2]
    return None


def wait_daemon_gone(store):
    pid = int(open(os.path.join(store, ".hsmfs", "lock")).read())
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    r, _, _ = select.select([fd], [], [], DEADLINE)
    os.close(fd)
    return bool(r)


def unit_mount(d, mnt):
    """The example unit (doc/examples/mnt-tree.mount, hsmfs(8) SYSTEMD)
    the way systemd starts it: mount WHAT WHERE -t TYPE -o OPTIONS, its
    own store and mountpoint, its origin a local nginx.  mount(8) and
    mount.fuse3 pass every option to hsmfs but _netdev and nofail; hsmfs
    takes hook= and origin=, and gives allow_other to the kernel.  With
    the origin a closed local port the mount fails in one line (the
    origin's check at mount), unless nocheck_origin is added."""
    unit = {}
    with open(os.path.join(SRC, "doc", "examples", "mnt-tree.mount")) as f:
        for line in f:
            k, eq_, v = line.strip().partition("=")
            if eq_ and not line.startswith("#"):
                unit[k] = v
    store = os.path.join(d, "unit-store")
    os.mkdir(store)
    closed = "http://127.0.0.1:9/tree/"
    opts = unit["Options"].replace("http://origin.example/tree/", closed)
    ok(unit["Type"] == "fuse.hsmfs" and "hook=hsmfs-http" in opts and closed in opts,
       "the unit: Type=fuse.hsmfs, Options=%s" % unit["Options"])
    env = dict(os.environ, PATH="/usr/bin:/bin")
    rc, out = run(["mount", store, mnt, "-t", unit["Type"], "-o", opts], env=env)
    ok(rc != 0 and "cannot list the origin" in out and not is_mounted(mnt),
       "its origin not answering: the mount fails, saying why") or diag(out)
    rc, out = run(["mount", store, mnt, "-t", unit["Type"], "-o", opts + ",nocheck_origin"],
                  env=env)
    ok(rc == 0 and is_mounted(mnt), "with nocheck_origin it mounts") or diag(out)
    if is_mounted(mnt):
        run(["umount", mnt])
        wait_daemon_gone(store)
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    write_tree(root, {"tree/a.txt": b"a"})
    ng = Nginx(root).start()
    try:
        unit_mount_live(store, mnt, unit, opts.replace(closed, ng.url("tree/")), env)
    finally:
        ng.stop()
        shutil.rmtree(root, ignore_errors=True)


def unit_mount_live(store, mnt, unit, opts, env):
    """The unit's mount of a live origin: what reached hsmfs and the kernel."""
    origin = opts.split("origin=")[1].split(",")[0]
    rc, out = run(["mount", store, mnt, "-t", unit["Type"], "-o", opts], env=env)
    if not eq((rc, out), (0, ""), "mount as the unit does, with its Options="):
        return
    try:
        eq(fstype(mnt), ("fuse.hsmfs", store), "type fuse.hsmfs, source its What=")
        pid = int(open(os.path.join(store, ".hsmfs", "lock")).read())
        args = open("/proc/%d/cmdline" % pid).read().split("\0")
        ok("hook=hsmfs-http" in ",".join(args) and ("origin=" + origin) in ",".join(args),
           "hsmfs got hook= and origin=: %s" % " ".join(args))
        rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "hooks", mnt])
        ok(rc == 0 and re.search(r"^hsmfs-http +\d+ fill ", out, re.M),
           "hsmfs-http, found beside hsmfs, is connected once mount(8) returns")
        opts = [l for l in open("/proc/self/mountinfo") if (" %s " % mnt) in l]
        ok(opts and "allow_other" in opts[0], "allow_other reached the kernel")
    finally:
        eq(run(["umount", mnt])[0], 0, "umount the unit's mount")
        ok(wait_daemon_gone(store), "daemon exits after umount")


def test():
    if not is_root():
        skip("mount -t fuse.hsmfs", "needs root")
        skip("fstab line", "needs root")
        return
    # libmount runs helpers with a fixed PATH starting at /usr/local/sbin,
    # where mount.fuse3 looks for "hsmfs".  In a private mount namespace,
    # a tmpfs there holds a link to the binary under test; the system's
    # own /usr/local/sbin is never touched.
    if not os.environ.get("HSMFS_IN_NS"):
        env = dict(os.environ, HSMFS_IN_NS="1")
        os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private",
                               sys.executable, os.path.abspath(__file__)], env)
    d = tmpdir()
    store, mnt = os.path.join(d, "store"), os.path.join(d, "mnt")
    os.mkdir(store)
    os.mkdir(mnt)
    with open(os.path.join(store, "hello"), "w") as f:
        f.write("hi\n")
    sbin = "/usr/local/sbin"
    os.makedirs(sbin, exist_ok=True)
    eq(run(["mount", "-t", "tmpfs", "tmpfs", sbin])[0], 0, "private /usr/local/sbin")
    os.symlink(os.path.abspath(HSMFS), os.path.join(sbin, "hsmfs"))
    env = None
    try:
        rc, out = run(["mount", "-t", "fuse.hsmfs", store, mnt, "-o",
                       "ro,defaults,_netdev,nofail,x-systemd.automount,comment=hsmfs"],
                      env=env)
        eq((rc, out), (0, ""), "mount -t fuse.hsmfs with fstab-only options")
        eq(fstype(mnt), ("fuse.hsmfs", store), "type fuse.hsmfs, source is the store")
        with open(os.path.join(mnt, "hello")) as f:
            eq(f.read(), "hi\n", "read through mount(8) mount")
        try:
            open(os.path.join(mnt, "new"), "w")
            ok(False, "ro mount refuses writes")
        except OSError as e:
            eq(e.errno, 30, "ro mount refuses writes with EROFS")
        eq(run(["umount", mnt])[0], 0, "umount")
        ok(wait_daemon_gone(store), "daemon exits after umount")

        fstab = os.path.join(d, "fstab")
        with open(fstab, "w") as f:
            f.write("# test fstab\n%s %s fuse.hsmfs defaults,allow_other,noauto,user,attr_timeout=5 0 0\n"
                    % (store, mnt))
        rc, out = run(["mount", "-T", fstab, mnt], env=env)
        eq((rc, out), (0, ""), "mount from an fstab line")
        opts = [l for l in open("/proc/self/mountinfo") if (" %s " % mnt) in l]
        ok(opts and "default_permissions" in opts[0] and "allow_other" in opts[0],
           "allow_other brings default_permissions")
        with open(os.path.join(mnt, "hello")) as f:
            eq(f.read(), "hi\n", "read through fstab mount")
        eq(run(["umount", mnt])[0], 0, "umount fstab mount")
        ok(wait_daemon_gone(store), "daemon exits after umount")

        # a hook with options in fstab (\040 for its spaces), found beside
        # the hsmfs that runs it; the background daemon's log goes to
        # STORE/.hsmfs/hsmfs.log where there is no syslog socket
        mirror = os.path.join(d, "mirror")
        os.mkdir(mirror)
        data = os.urandom(100000)
        with open(os.path.join(mirror, "lazy"), "wb") as f:
            f.write(data)
        man = os.path.join(d, "m.jsonl")
        with open(man, "w") as f:
            f.write('{"path": "lazy", "size": %d}\n' % len(data))
        eq(run([os.environ.get("HSMFSCTL", "hsmfsctl"), "import", "-s", store, man])[0], 0,
           "import a placeholder")
        with open(fstab, "w") as f:
            f.write("%s %s fuse.hsmfs noauto,hook=hsmfs-mirror\\040%s 0 0\n"
                    % (store, mnt, mirror))
        rc, out = run(["mount", "-T", fstab, mnt], env=dict(os.environ, PATH="/usr/bin:/bin"))
        eq((rc, out), (0, ""), "mount from an fstab line with hook=hsmfs-mirror\\040MIRROR")
        with open(os.path.join(mnt, "lazy"), "rb") as f:
            ok(f.read() == data, "the hook found beside hsmfs fills the placeholder")
        log = os.path.join(store, ".hsmfs", "hsmfs.log")
        if os.path.exists("/dev/log"):
            skip("the background daemon's log file", "this machine has a syslog socket")
        else:
            ok(os.path.exists(log) and "hsmfs-mirror" in open(log).read(),
               "no syslog socket: the background daemon logs to STORE/.hsmfs/hsmfs.log")
        eq(run(["umount", mnt])[0], 0, "umount")
        ok(wait_daemon_gone(store), "daemon exits after umount")

        unit_mount(d, mnt)
    finally:
        if is_mounted(mnt):
            run(["umount", "-l", mnt])
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    from harness import done
    try:
        test()
    except Exception:
        import traceback
        ok(False, "exception")
        diag(traceback.format_exc())
    done()
