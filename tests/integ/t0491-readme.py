#!/usr/bin/env python3
"""The README's "Using it" examples, run as printed.

Each fenced block (```) of README.md's "Using it" section follows a line
<!-- test: KIND -->, and KIND says how it runs:
  - a name (lazy, import): a session.  The blocks of one session run in
    the order printed, each by bash with set -e, in one HOME of their own
    (a temporary directory), so each goes on from the last;
  - fstab: each line is mounted the way mount.fuse3 runs a fuse.hsmfs
    line, `hsmfs SPEC FILE -o OPTIONS`, with SPEC and FILE moved under a
    temporary directory (mount(8) itself needs root and hsmfs installed
    in /usr/local/sbin: t0050 and t0492 run that);
  - local: the first example, which makes its own origin (python's
    http.server of a directory with an index.html on 127.0.0.1:8000):
    run exactly as printed (port 8000 becomes a free one only when
    something else holds it, and says so);
  - nginx: an nginx configuration block: run by a real nginx (its root
    /srv/www the test's), whose listing of a directory holding
    index.html must be its JSON autoindex;
  - no (WHY): not run, and said so (the S3 block: t0210 runs S3).
A block with no such line fails the test, and so does a README without
the sessions this test is for (the mount, status, stats, hooks, refresh,
prefetch, pin, evict, sync, restart and unmount).  The only changes made
to a block: the example origin http://origin.example/tree/ becomes a
real nginx on 127.0.0.1 (JSON autoindex, WebDAV for the archive), HOME
is a temporary directory, and the build directory (hsmfs, hsmfsctl,
hsmfs-http) is first in PATH.  What a session leaves mounted is
unmounted after it, and its daemons must then exit; a session that
unmounts as printed must leave nothing mounted.  A README that changes
an example changes this test's input: a wrong command fails it.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Nginx, diag, eq, is_mounted, main, ok,  # noqa: E402
                     skip, tmpdir, unmount_all, write_tree)
from harness import PrintedPort, nginx_lists_index  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ORIGIN = "http://origin.example/tree/"
FSTAB_PATHS = ("/srv/store", "/mnt/tree")
DAV = ("dav_methods PUT DELETE MKCOL MOVE; create_full_put_path on; "
       "dav_access user:rw group:r all:r; client_max_body_size 0;")
# what the sessions must hold between them
MUST = ("hsmfs ~/store ~/mnt", "hsmfsctl import", "hsmfsctl status", "hsmfsctl stats",
        "hsmfsctl hooks", "hsmfsctl refresh", "hsmfsctl prefetch", "hsmfsctl pin",
        "hsmfsctl evict", "hsmfsctl sync", "hsmfsctl restart", "hsmfsctl unmount")


def blocks():
    """The Using it section's blocks: [(kind, [lines], README line number)],
    and the line numbers of blocks with no test line."""
    with open(os.path.join(SRC, "README.md")) as f:
        text = f.read().splitlines()
    out, unmarked = [], []
    inside, kind, block, start = False, None, None, 0
    for n, line in enumerate(text, 1):
        if line.startswith("## "):
            inside = line.strip() == "## Using it"
            continue
        if not inside:
            continue
        if block is not None:
            if line.startswith("```"):
                out.append((kind, block, start))
                block, kind = None, None
            else:
                block.append(line)
            continue
        m = re.match(r"<!-- test: (.*?) -->$", line.strip())
        if m:
            kind = m.group(1)
        elif line.startswith("```"):
            block, start = [], n
            if kind is None:
                unmarked.append(n)
        elif line.strip():
            kind = None  # a test line goes right before its block
    return out, unmarked


class Place:
    """A temporary HOME (and root for fstab paths) for one session."""

    def __init__(self):
        self.t = tmpdir("hsmfs-readme-")
        os.chmod(self.t, 0o755)
        self.home = os.path.join(self.t, "home")
        os.makedirs(self.home)
        for p in FSTAB_PATHS:
            os.makedirs(self.t + p)

    def mounts(self):
        with open("/proc/self/mountinfo") as f:
            return [l.split()[4] for l in f if l.split()[4].startswith(self.t + "/")]

    def stores(self):
        out = []
        for d, subs, _ in os.walk(self.t):
            if os.path.exists(os.path.join(d, ".hsmfs", "lock")):
                out.append(d)
            subs[:] = [s for s in subs if s != ".hsmfs" and not is_mounted(os.path.join(d, s))]
        return out

    def clean(self, what):
        """Unmount what the session left; its daemons must exit."""
        unmount_all(self.mounts(), self.stores(), what)
        shutil.rmtree(self.t, ignore_errors=True)


def run_block(place, url, lines, what):
    script = "set -e\n" + "\n".join(lines).replace(ORIGIN, url or ORIGIN) + "\n"
    path = os.path.dirname(os.path.abspath(HSMFS))
    ctl = os.path.dirname(os.path.abspath(HSMFSCTL))
    env = dict(os.environ, HOME=place.home,
               PATH=path + ":" + (ctl + ":" if ctl != path else "") + os.environ["PATH"])
    p = subprocess.run(["bash", "-c", script], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    if not eq(p.returncode, 0, "%s runs as printed" % what):
        diag(script)
        diag(out)
    return out


def run_fstab(place, url, lines, what):
    for line in lines:
        f = line.replace(ORIGIN, url).split()
        ok(len(f) == 6 and f[2] == "fuse.hsmfs", "%s is an fstab line of type fuse.hsmfs" % what)
        if len(f) != 6:
            continue
        spec, mnt = (place.t + p if p in FSTAB_PATHS else p for p in f[:2])
        p = subprocess.run([HSMFS, spec, mnt, "-o", f[3]], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        ok(p.returncode == 0 and is_mounted(mnt), "%s mounts as mount.fuse3 runs it" % what) or \
            diag(line + "\n" + p.stdout.decode(errors="replace"))
        if is_mounted(mnt):
            ok("top.txt" in os.listdir(mnt), "%s: its tree is there" % what)


def run_local(lines, what):
    """The example that starts its own origin: as printed, in a HOME of its own."""
    place = Place()
    try:
        # not printed: the origin goes with the shell even when a line fails
        trap = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"
        with PrintedPort(what) as printed:
            script = printed("\n".join(lines))
            out = run_block(place, None, [trap] + script.splitlines(), what)
        ok("hello\n" in out, "%s: the file reads" % what) or diag(out)
        ok(re.search(r"^guide\.txt\nindex\.html$", out, re.M),
           "%s: docs lists index.html and the name its page links to" % what) or diag(out)
        ok("listed,partial" in out, "%s: status shows docs listed,partial" % what) or diag(out)
        ok("index .hsmfs-no-index;" in out and "doctor: the origin needs fixing" in out,
           "%s: doctor fails, naming the fix" % what) or diag(out)
        eq(place.mounts(), [], "%s: its unmount leaves nothing mounted" % what)
    finally:
        place.clean(what)


def test():
    found, unmarked = blocks()
    eq(unmarked, [], "every block of Using it has a test line (README lines listed)")
    sessions = {}
    for kind, lines, n in found:
        what = "README line %d (%s)" % (n, kind)
        if kind is None:
            continue
        if kind.startswith("no"):
            skip("README line %d" % n, "not run: " + kind[2:].strip(" ()"))
        elif kind in ("local", "nginx"):
            sessions.setdefault(kind, []).append((lines, what))
        elif kind == "fstab":
            sessions.setdefault("fstab", []).append((lines, what))
        else:
            sessions.setdefault(kind, []).append((lines, what))
    for lines, what in sessions.pop("local", []):
        run_local(lines, what)
    for lines, what in sessions.pop("nginx", []):
        nginx_lists_index(lines, what)
    text = "\n".join("\n".join(l) for k, s in sessions.items() if k != "fstab" for l, _ in s)
    for m in MUST:
        ok(m in text, "the README's run blocks have %s" % m)

    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    write_tree(root, {"tree/top.txt": b"top\n", "tree/data/a.txt": b"a\n",
                      "tree/data/big.bin": os.urandom(300000)})
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)
    with Nginx(root, extra=DAV) as ng:
        url = ng.url("tree/")
        for name, session in sessions.items():
            place = Place()
            try:
                outs = []
                for lines, what in session:
                    if name == "fstab":
                        run_fstab(place, url, lines, what)
                    else:
                        outs.append(run_block(place, url, lines, what))
                every = "\n".join("\n".join(l) for l, _ in session)
                if "fusermount3 -u" in every or "hsmfsctl unmount" in every:
                    eq(place.mounts(), [], "session %s: its unmount leaves nothing mounted" % name)
                if name == "lazy":
                    ok("top\n" in outs[0], "session lazy: the mount's file reads") or diag(outs[0])
                if name == "import":
                    ok(re.search(r"^placeholder .*/mnt/data/big\.bin$", outs[0], re.M),
                       "session import: status shows the imported files") or diag(outs[0])
                if "hsmfsctl sync" in every:
                    notes = os.path.join(root, "tree", "notes.txt")
                    ok(os.path.exists(notes), "session %s: the file made is at the origin" % name)
            finally:
                place.clean("session %s" % name)
    shutil.rmtree(root, ignore_errors=True)


main(test)
