#!/usr/bin/env python3
"""The EXAMPLES of the man pages, run as printed.

Each block of an EXAMPLES section (.nf ... .fi) is read from the page,
its roff escapes undone, and run against a real nginx on 127.0.0.1: a
block of commands by bash -e, an fstab(5) line through mount -T (as
root, in a private mount namespace where /usr/local/sbin holds the hsmfs
under test, as t0050 does).  The only changes made to a block: the
example origin's URL becomes nginx's, absolute paths (/srv/store,
/mnt/tree, /home/ann/...) move under a temporary directory, and HOME is
a temporary directory holding store/, mnt/ and node-exporter/.  The
hsmfsctl(1) blocks run in order in one HOME (each goes on from the last);
every other block in a HOME of its own.  What a block leaves mounted is
unmounted after it, and its daemon must then exit.  A block for S3 is
skipped (s3rver, t0210).  A block that starts its own origin (python's
http.server on 127.0.0.1:8000) runs exactly as printed (another port
only when 8000 is taken, said so); an nginx block ("location ...") is
served by a real nginx (its root /srv/www the test's), which must then
list a directory holding an index.html as JSON.  A page that changes an example changes this
test's input: a wrong command fails it.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, Nginx, diag, eq, is_mounted, is_root, main, ok,  # noqa: E402
                     skip, tmpdir, unmount_all, write_tree)
from harness import PrintedPort, nginx_lists_index  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.path.dirname(os.path.abspath(HSMFS))
ORIGINS = ("http://origin.example/tree/", "http://origin/tree/")
PATHS = ("/srv/store", "/mnt/data", "/mnt/tree", "/home/ann/store", "/home/ann/mnt")


def unroff(line):
    for a, b in (("\\-", "-"), ("\\(dq", '"'), ("\\&", ""), ("\\e", "\\")):
        line = line.replace(a, b)
    return line


def examples(page):
    """The blocks of page's EXAMPLES section, each a list of lines."""
    with open(os.path.join(SRC, "man", page)) as f:
        text = f.read().splitlines()
    out, block, inside = [], None, False
    for line in text:
        if line.startswith(".SH"):
            inside = line.strip() == ".SH EXAMPLES"
            continue
        if not inside:
            continue
        if line.startswith(".nf"):
            block = []
        elif line.startswith(".fi") and block is not None:
            out.append(block)
            block = None
        elif block is not None and not line.startswith("."):
            block.append(unroff(line))
    return out


def is_fstab(line):
    f = line.split()
    return len(f) == 6 and f[2] == "fuse.hsmfs"


class Place:
    """A temporary HOME and root for one run of examples."""

    def __init__(self, url):
        self.t = tmpdir("hsmfs-man-")
        os.chmod(self.t, 0o755)
        self.home = os.path.join(self.t, "home")
        for d in ("store", "mnt", "node-exporter"):
            os.makedirs(os.path.join(self.home, d))
        for p in PATHS:
            os.makedirs(self.t + p, exist_ok=True)
        self.url = url

    def text(self, line):
        for o in ORIGINS:
            line = line.replace(o, self.url)
        for p in PATHS:
            line = re.sub(r"(?<![\w/~.])" + re.escape(p) + r"(?![\w])", self.t + p, line)
        return line

    def mounts(self):
        with open("/proc/self/mountinfo") as f:
            return [l.split()[4] for l in f if l.split()[4].startswith(self.t)]

    def clean(self, what):
        """Unmount what the examples left; their daemons must exit."""
        stores = [s for s in [os.path.join(self.home, "store")] + [self.t + p for p in PATHS]
                  if os.path.exists(os.path.join(s, ".hsmfs", "lock"))]
        unmount_all(self.mounts(), stores, what)
        shutil.rmtree(self.t, ignore_errors=True)


def run_commands(place, lines, what):
    script = "set -e\n" + "\n".join(place.text(l) for l in lines) + "\n"
    env = dict(os.environ, HOME=place.home, PATH=BUILD + ":" + os.environ["PATH"])
    p = subprocess.run(["bash", "-c", script], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode(errors="replace")
    if not eq(p.returncode, 0, "%s runs as printed" % what):
        diag(script)
        diag(out)
    return out


def run_fstab(place, line, what):
    line = place.text(line)
    fstab = os.path.join(place.t, "fstab")
    with open(fstab, "w") as f:
        f.write(line + "\n")
    mnt = line.split()[1]
    p = subprocess.run(["mount", "-T", fstab, mnt], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    ok(p.returncode == 0 and is_mounted(mnt), "%s mounts as printed" % what) or \
        diag(line + "\n" + p.stdout.decode(errors="replace"))
    if is_mounted(mnt) and "origin=" in line:
        ok(len(os.listdir(mnt)) > 0, "%s: its tree is there" % what)


def run_local(block, what):
    """An example with its own origin: as printed, in a HOME of its own."""
    place = Place(None)
    try:
        with PrintedPort(what) as printed:
            run_printed(printed("\n".join(block)), place, what)
    finally:
        place.clean(what)


def run_printed(text, place, what):
    # not printed: the origin goes with the shell even when a line fails
    lines = ["trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"] + text.splitlines()
    script = "set -e\n" + "\n".join(lines) + "\n"
    env = dict(os.environ, HOME=place.home, PATH=BUILD + ":" + os.environ["PATH"])
    p = subprocess.run(["bash", "-c", script], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode(errors="replace")
    eq(p.returncode, 0, "%s runs as printed" % what) or diag(script + out)
    ok("hello\n" in out and re.search(r"^guide\.txt\nindex\.html$", out, re.M),
       "%s: the file reads, docs lists index.html and the linked name" % what) or diag(out)


def run_block(url, page, i, block):
    what = "%s example %d" % (page, i + 1)
    text = "\n".join(block)
    if "aws-sigv4" in text:
        skip(what, "S3: s3rver (t0210)")
        return
    if block[0].startswith("location "):
        nginx_lists_index(block, what)
        return
    if "http.server" in text:
        run_local(block, what)
        return
    root_only = is_fstab(block[0]) or block[0].startswith("mount ")
    if root_only and not is_root():
        skip(what, "mount(8) and fstab: root")
        return
    place = Place(url)
    try:
        if is_fstab(block[0]):
            for line in block:
                run_fstab(place, line, what)
        else:
            run_commands(place, block, what)
    finally:
        place.clean(what)


def test():
    if is_root() and not os.environ.get("HSMFS_IN_NS"):
        # mount(8) runs mount.fuse3, which finds hsmfs in /usr/local/sbin:
        # in a private mount namespace a tmpfs there holds the one under test
        env = dict(os.environ, HSMFS_IN_NS="1")
        os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private",
                               sys.executable, os.path.abspath(__file__)], env)
    if is_root():
        sbin = "/usr/local/sbin"
        os.makedirs(sbin, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", sbin], check=True)
        os.symlink(os.path.abspath(HSMFS), os.path.join(sbin, "hsmfs"))
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    write_tree(root, {"tree/top.txt": b"top\n", "tree/data/a.txt": b"a\n",
                      "tree/data/big.bin": os.urandom(300000)})
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)
    with Nginx(root) as ng:
        url = ng.url("tree/")
        for page in ("hsmfs.8", "hsmfs-http.1"):
            blocks = examples(page)
            ok(len(blocks) >= 3, "%s has its examples (%d)" % (page, len(blocks)))
            for i, b in enumerate(blocks):
                run_block(url, page, i, b)
        # hsmfsctl(1): one session, each block going on from the last
        blocks = examples("hsmfsctl.1")
        ok(len(blocks) >= 5, "hsmfsctl.1 has its examples (%d)" % len(blocks))
        place = Place(url)
        try:
            for i, b in enumerate(blocks):
                out = run_commands(place, b, "hsmfsctl.1 example %d" % (i + 1))
                if "doctor" in "\n".join(b):
                    ok("0 failures" in out, "hsmfsctl doctor finds the mount healthy") or diag(out)
            proms = os.listdir(os.path.join(place.home, "node-exporter"))
            ok(len(proms) == 1 and proms[0].endswith(".prom"), "the textfile is written")
        finally:
            place.clean("hsmfsctl.1")
    shutil.rmtree(root, ignore_errors=True)


main(test)
