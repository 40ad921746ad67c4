#!/usr/bin/env python3
"""Every byte right for every client, on a backend=fanotify mount: the
calls and the tools of t0510 (its matrix: every call and tool on files
in every state, each compared with a native oracle), run on a bind
mount of an ext4 store whose files not all present carry fanotify
pre-content marks.

The placeholders are imported into the store before the mount (a
fanotify mount has no live import), then put in their states through
the mount as on FUSE.  Where the kernel gives this front end no say,
the mount differs from the oracle, and hsmfs(8) FANOTIFY BACKEND says
so; each of those is listed here with the states it differs in, and
checked to differ exactly there, so that the list and the page stay
true: a difference that goes away, or a new one, fails.
Needs root and Linux 6.14.
"""
import importlib.util
import json
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Hook, Mount, diag, eq, fs_image, fs_image_drop, is_root,  # noqa: E402
                     main, run, skip, steps, tmpdir, wait_for)


def load(name):
    """Another test's module (its tests are not run)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


layout = load("t0510-layout")
fan = load("t0600-fanotify")

OPTS = "backend=fanotify,prefetch=0,chunk=64k,timeout=20"

# What hsmfs(8) FANOTIFY BACKEND says differs, by call: the states in
# which the mount's answer is not the native file's.  The kernel answers
# lseek itself, and the bytes not fetched are holes to it (allocated,
# unwritten: see fan.c give_blocks()).
MISSING = ("placeholder", "partial", "dirty", "grown", "punched-lazy", "evicted")
CALLS_DIFFER = {"lseek SEEK_DATA/SEEK_HOLE": MISSING}
# ... by check of the tools: why
CTIME = "a fill changes the ctime: tar says 'file changed as we read it'"
MARKS = "the store's marks are the files' own xattrs on this mount"
TOOLS_DIFFER = {
    "tar -S: the archive is made with exit 0": CTIME,
    "tar --xattrs: the archive is made with exit 0": CTIME,
    "tar --xattrs carries no user.hsmfs.* name": MARKS,
    "getfattr -d of every state: no user.hsmfs.* name, every name listed can be read": MARKS,
    "bsdtar: an archive of every state extracts every byte":
        "bsdtar looks for holes with lseek: the bytes not fetched are holes to it",
}


def blocks_cover(path):
    """Has path blocks for all its bytes?"""
    st = os.stat(path)
    return st.st_blocks * 512 >= st.st_size


class FanFiles(layout.Files):
    """t0510's files in every state, their placeholders imported into
    store before the mount: cells, every (prefix, sub) make() is asked."""

    def __init__(self, store, mirror, native, rng, cells):
        super().__init__(None, mirror, native, rng)
        self.pre, files = {}, {}
        for prefix, sub in cells:
            self.pre[(prefix, sub)] = self.origin_of(prefix, sub=sub)
            files.update(self.pre[(prefix, sub)])
        fan.import_offline(store, mirror, files)

    def make(self, prefix, sub="", origin=None):
        names = super().make(prefix, sub, origin=self.pre[(prefix, sub)])
        # a user's hole in a file with bytes missing: the daemon gives the
        # file its blocks back once it is told of the change (fan.c
        # give_blocks()), a moment after it
        for name, st in zip(names, self.states):
            if st in ("grown", "punched-lazy"):
                wait_for(lambda: blocks_cover(self.m.path(name)),
                         "%s given its blocks back" % name)
        return names

    def evict(self, name):
        """hsmfsctl evict (no xattr reaches a fanotify mount's daemon)."""
        rc, out = run([HSMFSCTL, "evict", self.m.path(name)])
        eq(rc, 0, "%s evicted (%s)" % (name, out.strip()))

    def state(self, name):
        """hsmfsctl status's state (a file the database does not know,
        one made on the mount, is resident: all its bytes are here)."""
        rc, out = run([HSMFSCTL, "status", "--json", self.m.path(name)])
        if rc:
            return "error: " + out.strip()
        return json.loads(out)["files"][0]["state"].split(",")[0]


def one(img, what, cells, body):
    """A store on img with cells imported, mounted on fanotify with a
    mirror hook; body(m, f, tmp, native).  Everything goes at the end."""
    store, native = os.path.join(img, what), os.path.join(img, what + "-native")
    os.makedirs(native)
    mirror, tmp = tmpdir("hsmfs-mirror-"), tmpdir()
    try:
        f = FanFiles(store, mirror, native, random.Random(layout.SEED), cells)
        with Mount(opts=OPTS, store=store) as m:
            f.m = m
            with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
                body(m, f, tmp, native)
    finally:
        for d in (store, native, mirror, tmp):
            shutil.rmtree(d, ignore_errors=True)


def user_time_wins(img):
    """The blocks a user's truncate up leaves a file without are given
    back (fan.c give_blocks()), and the fallocate that gives them sets
    the file's times: they are put back, as the user last set them, also
    by a utime made while the daemon was on its way (blocks-giving, 1 s).
    Before, the file's mtime became the daemon's fallocate's.  False if
    this build has no delay points."""
    store, mirror, logdir = os.path.join(img, "times"), tmpdir("hsmfs-mirror-"), tmpdir()
    log = os.path.join(logdir, "steps")
    fan.import_offline(store, mirror, {"t": bytes(range(256)) * 4096})
    try:
        with Mount(opts=OPTS, store=store, env={"HSMFS_DELAY": "blocks-giving:1000",
                                                "HSMFS_CRASH_LOG": log}) as m:
            p = m.path("t")
            os.truncate(p, 4 << 20)
            try:
                wait_for(lambda: steps(log, "blocks-giving"), "the daemon on its way",
                         deadline=10)
            except TimeoutError:
                if not os.path.exists(log):
                    return False
                raise
            os.utime(p, ns=(1234567890123456789, 1234567890123456789))
            wait_for(lambda: blocks_cover(p), "t given its blocks back")
            eq(os.stat(p).st_mtime_ns, 1234567890123456789,
               "blocks given back after a truncate up: the mtime is the user's")
    finally:
        for d in (store, mirror, logdir):
            shutil.rmtree(d, ignore_errors=True)
    return True


def test():
    if not is_root():
        skip("t0510's matrix on backend=fanotify", "needs root")
        return
    if not fan.kernel_has_pre_content():
        skip("t0510's matrix on backend=fanotify", "needs Linux 6.14")
        return
    diag("seed %d (HSMFS_SEED)" % layout.SEED)
    d, img = fs_image(640 << 20)
    try:
        if not user_time_wins(img):
            skip("a user's time after blocks given back", "a release build has no delay points")
        one(img, "calls", layout.CALL_CELLS,
            lambda m, f, tmp, native: layout.run_calls(
                m, f, random.Random(layout.SEED), "fanotify", CALLS_DIFFER))
        one(img, "tools", layout.TOOL_CELLS,
            lambda m, f, tmp, native: layout.run_tools(m, f, tmp, native, "fanotify",
                                                       TOOLS_DIFFER))
    finally:
        fs_image_drop(d, img)


if __name__ == "__main__":
    main(test)
