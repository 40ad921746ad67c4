#!/usr/bin/env python3
"""Every byte right for every client: the calls that expose a file's
content or layout, and the tools users run, on files in every state.

Each file is imported lazily from a mirror and put in its state as a
user would, with no prefetch to hide a bug; beside it an oracle, a plain
file of the native store's filesystem, gets the origin's bytes and the
same writes, truncates and punches.  States:
  placeholder  never read
  partial      4 KiB read in the middle
  resident     read whole
  dirty        100 bytes written in the middle, never read
  grown        truncated up by the user (a real hole at the end)
  punched      read whole, then a hole punched in the middle
  punched-lazy a hole punched in a file never read
  new          made on the mount, with a hole the user left
  evicted      read whole, then evicted (its bytes gone from the store)
  1. the calls, on the default mount (passthrough where root may) and
     -o nopassthrough: read, pread, preadv, mmap, sendfile, splice,
     copy_file_range out of the mount and into it, lseek SEEK_DATA and
     SEEK_HOLE (every hole reported reads as zeros in the oracle; every
     hole of the oracle is reported), fallocate punch and zero range,
     stat's size and blocks, du and find -size (never fewer blocks than
     the data needs, never 0 blocks for data): each compared with the
     oracle;
  2. the tools, a fresh file for each tool and state, each copy compared
     byte for byte: cp (default, --sparse=never, --sparse=always,
     --reflink=auto, -a of a tree, within the mount), mv to another
     filesystem, install, GNU tar -S and --xattrs, bsdtar, rsync -a, -S
     and -aX, getfattr -d, Python shutil.copyfile and copy2, git add and
     checkout, and sqlite3's .backup of a database never read;
  3. no user.hsmfs.* name of the store is listed, and every name listed
     can be read (files and unlisted directories);
  4. fallocate --dig-holes of a clean file changes no byte, so it stays
     clean; a punch of real data makes it dirty.
"""
import ctypes
import errno
import mmap
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Hook, Mount, Nginx, diag, eq, evict_closed, import_manifest,  # noqa: E402
                     main, mirror_files, ok, tmpdir)

from archiving import HTTP  # noqa: E402

K = 1024
SIZE = 700_001  # not a block multiple
SEED = int(os.environ.get("HSMFS_SEED", random.randrange(1 << 30)))
SEEK_DATA, SEEK_HOLE = 3, 4
STATES = ("placeholder", "partial", "resident", "dirty", "grown", "punched", "punched-lazy",
          "new", "evicted")
# what user.hsmfs.state says of each (its first word)
SHOWN = {"placeholder": "placeholder", "partial": "partial", "resident": "resident",
         "dirty": "dirty", "grown": "dirty", "punched": "dirty", "punched-lazy": "dirty",
         "new": "resident", "evicted": "placeholder"}

libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 1, 2, 16


def fallocate(path, mode, off, length):
    fd = os.open(path, os.O_RDWR)
    try:
        if libc.fallocate(fd, mode, off, length) < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), path)
    finally:
        os.close(fd)


def punch(path, off, length):
    fallocate(path, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, length)


def pwrite(path, off, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def get(path):
    with open(path, "rb") as f:
        return f.read()


def state_of(path):
    return os.getxattr(path, "user.hsmfs.state").decode().split(",")[0]


class Files:
    """Files in each state on mount m, named PREFIX-STATE, each with its
    oracle in the native directory."""

    def __init__(self, m, mirror, native, rng):
        self.m, self.mirror, self.native, self.rng = m, mirror, native, rng
        self.made = []

    states = STATES  # the states make() puts files in

    def origin_of(self, prefix, sub=""):
        """The origin's bytes of prefix-STATE for each state but new."""
        return {os.path.join(sub, "%s-%s" % (prefix, st)): self.rng.randbytes(SIZE)
                for st in self.states if st != "new"}

    def evict(self, name):
        eq(evict_closed(self.m.path(name)), 0, "%s evicted" % name)

    def make(self, prefix, sub="", origin=None):
        """Make prefix-STATE for each state, under sub/; returns the names.
        origin: origin_of()'s, imported already (else made and imported)."""
        states = self.states
        if origin is None:
            origin = self.origin_of(prefix, sub)
            mirror_files(self.m, self.mirror, origin)
        names = []
        for st in states:
            name = os.path.join(sub, "%s-%s" % (prefix, st))
            mp, op = self.m.path(name), os.path.join(self.native, name)
            os.makedirs(os.path.dirname(op), exist_ok=True)
            if st == "new":
                data = self.rng.randbytes(100 * K)
                for p in (mp, op):
                    with open(p, "wb") as f:
                        f.write(data)
                        f.seek(1024 * K)
                        f.write(data)
            else:
                with open(op, "wb") as f:
                    f.write(origin[name])
            if st == "partial":
                fd = os.open(mp, os.O_RDONLY)
                os.pread(fd, 4 * K, 300 * K)
                os.close(fd)
            elif st in ("resident", "punched", "evicted"):
                get(mp)
            if st == "evicted":
                self.evict(name)
            if st == "dirty":
                for p in (mp, op):
                    pwrite(p, 500_000, b"X" * 100)
            elif st == "grown":
                for p in (mp, op):
                    os.truncate(p, SIZE + 1024 * K)
            elif st in ("punched", "punched-lazy"):
                for p in (mp, op):
                    punch(p, 256 * K, 128 * K)
            names.append(name)
            self.made.append((name, st))
        return names

    def state(self, name):
        """The state the mount shows of name (its first word)."""
        return state_of(self.m.path(name))

    def check_states(self):
        bad = [(n, st, self.state(n)) for n, st in self.made if self.state(n) != SHOWN[st]]
        ok(not bad, "every file is in the state it is meant to be in%s" %
           (": %s" % bad[:4] if bad else ""))

    def oracle(self, name):
        return os.path.join(self.native, name)


def holes(path):
    """The holes lseek reports, as [(start, end)]."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        out, off = [], 0
        while off < size:
            h = os.lseek(fd, off, SEEK_HOLE)
            if h >= size:
                break
            try:
                d = os.lseek(fd, h, SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                d = size
            out.append((h, d))
            off = d
        return out
    finally:
        os.close(fd)


def covered(small, big):
    """Is every byte of the ranges small inside the ranges big?"""
    for a, b in small:
        while a < b:
            for c, d in big:
                if c <= a < d:
                    a = d
                    break
            else:
                return False
    return True


def splice_read(path):
    fd = os.open(path, os.O_RDONLY)
    r, w = os.pipe()
    out = bytearray()
    try:
        while True:
            n = os.splice(fd, w, 65536)
            if not n:
                break
            out += os.read(r, n)
    finally:
        for x in (fd, r, w):
            os.close(x)
    return bytes(out)


def sendfile_read(path, dst):
    fd, out = os.open(path, os.O_RDONLY), os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        off, size = 0, os.fstat(fd).st_size
        while off < size:
            n = os.sendfile(out, fd, off, size - off)
            if not n:
                break
            off += n
    finally:
        os.close(fd)
        os.close(out)
    got = get(dst)
    os.unlink(dst)
    return got


def cfr_read(path, dst):
    """copy_file_range out of path into dst (a new file beside it: the
    kernel copies across filesystems of one type only)."""
    fd, out = os.open(path, os.O_RDONLY), os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        size = os.fstat(fd).st_size
        while os.lseek(out, 0, os.SEEK_CUR) < size:
            if not os.copy_file_range(fd, out, size):
                break
    finally:
        os.close(fd)
        os.close(out)
    got = get(dst)
    os.unlink(dst)
    return got


def call_pread(mp, op, want, rng):
    fd = os.open(mp, os.O_RDONLY)
    try:
        for _ in range(8):
            off, n = rng.randrange(len(want)), rng.choice((1, 4096, 65536, 300_000))
            if os.pread(fd, n, off) != want[off:off + n]:
                return "pread %d+%d" % (off, n)
    finally:
        os.close(fd)
    return None


def call_preadv(mp, op, want, rng):
    fd = os.open(mp, os.O_RDONLY)
    try:
        a, b = bytearray(123_457), bytearray(len(want))
        n = os.preadv(fd, [a, b], 0)
        return None if bytes(a + b)[:n] == want else "wrong bytes"
    finally:
        os.close(fd)


def call_mmap(mp, op, want, rng):
    fd = os.open(mp, os.O_RDONLY)
    try:
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
            return None if mm[:] == want else "wrong bytes"
    finally:
        os.close(fd)


def call_stat(mp, op, want, rng):
    st, nst = os.stat(mp), os.stat(op)
    if st.st_size != nst.st_size:
        return "st_size %d, native %d" % (st.st_size, nst.st_size)
    if nst.st_blocks and not st.st_blocks:
        return "st_blocks 0 for data"
    if st.st_blocks * 512 + 64 * K < nst.st_blocks * 512:
        return "st_blocks %d, fewer than the data needs (native %d)" % (st.st_blocks,
                                                                        nst.st_blocks)
    return None


def call_du_find(mp, op, want, rng):
    """du and find -size, as the native file answers them."""
    def du(p):
        return int(subprocess.run(["du", "-B1", p], stdout=subprocess.PIPE,
                                  check=True).stdout.split()[0])
    if du(mp) + 64 * K < du(op) or (du(op) and not du(mp)):
        return "du %d, native %d" % (du(mp), du(op))
    for arg in ("-%dc" % (len(want) + 1), "+%dc" % (len(want) - 1)):
        found = subprocess.run(["find", mp, "-size", arg], stdout=subprocess.PIPE).stdout
        if found.strip() != mp.encode():
            return "find -size %s: %r" % (arg, found)
    return None


def call_lseek(mp, op, want, rng):
    mh, nh = holes(mp), holes(op)
    zeros = [(a, b) for a, b in mh if want[a:b].count(0) != b - a]
    if zeros:
        return "holes %s where the data is not zeros" % zeros[:3]
    if not covered(nh, mh):
        return "the holes %s not reported (reported %s)" % (nh, mh)
    return None


def call_cfr_in(mp, op, want, rng):
    """copy_file_range into the file from a file beside it, on both."""
    chunk = rng.randbytes(50_000)
    for path in (mp, op):
        src = path + ".src"
        with open(src, "wb") as s:
            s.write(chunk)
        fi, fo = os.open(src, os.O_RDONLY), os.open(path, os.O_WRONLY)
        try:
            left, off = len(chunk), 0
            while left:
                n = os.copy_file_range(fi, fo, left, off, 600_000 + off)
                if not n:
                    break
                left, off = left - n, off + n
        finally:
            os.close(fi)
            os.close(fo)
            os.unlink(src)
    return None if get(mp) == get(op) else "wrong bytes after it"


def call_punch_zero(mp, op, want, rng):
    for p in (mp, op):
        punch(p, 100 * K, 64 * K)
        fallocate(p, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 450 * K + 3, 50 * K)
    return None if get(mp) == get(op) else "wrong bytes after them"


def same(got, want):
    return None if got == want else "wrong bytes"


# each on files of its own, in every state, nothing read before it
CALLS = {
    "lseek SEEK_DATA/SEEK_HOLE": call_lseek,
    "stat": call_stat,
    "du, find -size": call_du_find,
    "read": lambda mp, op, want, rng: same(get(mp), want),
    "pread": call_pread,
    "preadv": call_preadv,
    "mmap": call_mmap,
    "splice": lambda mp, op, want, rng: same(splice_read(mp), want),
    "sendfile": lambda mp, op, want, rng: same(sendfile_read(mp, mp + ".sf"), want),
    "copy_file_range out": lambda mp, op, want, rng: same(cfr_read(mp, mp + ".cfr"), want),
    "copy_file_range in": call_cfr_in,
    "fallocate punch, zero range": call_punch_zero,
}


CALL_CELLS = [("c%d" % i, "") for i in range(len(CALLS))]


def run_calls(m, f, rng, label, differs=None):
    """Each call of CALLS on its files (CALL_CELLS) made by f on mount m,
    with a mirror hook connected.  differs: {call: the states where the
    mount is known to differ} (said, not failed; each must still differ,
    or the list is out of date)."""
    cells = {c: f.make(CALL_CELLS[i][0], sub=CALL_CELLS[i][1]) for i, c in enumerate(CALLS)}
    f.check_states()
    for c, fn in CALLS.items():
        wrong = []
        for name, st in zip(cells[c], f.states):
            op = f.oracle(name)
            bad = fn(m.path(name), op, get(op), rng)
            if bad:
                wrong.append((st, bad))
        known = (differs or {}).get(c, ())
        if known:
            eq(sorted(st for st, _ in wrong), sorted(known),
               "%s, %s: differs from the native file where it is said to, only there (%s)" %
               (label, c, "; ".join("%s: %s" % w for w in wrong)))
            continue
        ok(not wrong, "%s, %s: as on the native file, every state%s" %
           (label, c, "; wrong in " + "; ".join("%s: %s" % w for w in wrong) if wrong else ""))


def test_calls():
    rng = random.Random(SEED)
    diag("seed %d (HSMFS_SEED)" % SEED)
    for opts in ("", "nopassthrough"):
        mirror, native = tmpdir("hsmfs-mirror-"), tmpdir("hsmfs-native-")
        with Mount(opts="prefetch=0,chunk=64k,timeout=20" + ("," + opts if opts else "")) as m:
            f = Files(m, mirror, native, rng)
            with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
                run_calls(m, f, rng, opts or "default")
        for d in (mirror, native):
            shutil.rmtree(d, ignore_errors=True)


def tool(args, **kw):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    return r.returncode, r.stdout.decode(errors="replace").strip()


def same_tree(a, b):
    """Names and bytes of the regular files below a and b: equal?"""
    def walk(root):
        out = {}
        for d, _, fs in os.walk(root):
            for n in fs:
                p = os.path.join(d, n)
                out[os.path.relpath(p, root)] = get(p)
        return out
    return walk(a) == walk(b)


COPIES = {
    "cp": lambda src, dst: tool(["cp", src, dst]),
    "cp --sparse=never": lambda src, dst: tool(["cp", "--sparse=never", src, dst]),
    "cp --sparse=always": lambda src, dst: tool(["cp", "--sparse=always", src, dst]),
    "cp --reflink=auto": lambda src, dst: tool(["cp", "--reflink=auto", src, dst]),
    "install": lambda src, dst: tool(["install", "-m", "0644", src, dst]),
    "rsync -a": lambda src, dst: tool(["rsync", "-a", src, dst]),
    "rsync -S": lambda src, dst: tool(["rsync", "-S", src, dst]),
    "rsync -aX": lambda src, dst: tool(["rsync", "-aX", src, dst]),
    "shutil.copyfile": lambda src, dst: (shutil.copyfile(src, dst), (0, ""))[1],
    "shutil.copy2": lambda src, dst: (shutil.copy2(src, dst), (0, ""))[1],
}
OTHER_TOOLS = ("mv", "tar -S", "tar --xattrs", "bsdtar", "cp -a", "cp in", "getfattr")
# the files run_tools() makes: (prefix, sub)
TOOL_CELLS = ([("t%d" % i, "") for i in range(len(COPIES))] +
              [(t.replace(" ", "").replace("-", "").replace("=", ""), "") for t in OTHER_TOOLS] +
              [("a", "tree")])


def run_tools(m, f, tmp, native, label, differs=None):
    """The tools users copy with, each on its files (TOOL_CELLS) made by
    f on mount m, with a mirror hook connected; tmp: a directory for the
    copies.  differs: {check: why} for the checks known to fail on this
    mount (said, not failed; each must still fail)."""
    out = os.path.join(tmp, "out")
    differs = differs or {}

    def fresh():
        shutil.rmtree(out, ignore_errors=True)
        os.mkdir(out)
        return out

    def check(what, good, detail):
        if what in differs:
            ok(not good, "%s, %s: differs as said (%s)%s" %
               (label, what, differs[what], ": " + detail if detail else ""))
        else:
            ok(good, "%s, %s%s" % (label, what, ": " + detail if detail else ""))

    cells = {}
    for t, (prefix, sub) in zip(list(COPIES) + list(OTHER_TOOLS), TOOL_CELLS):
        cells[t] = f.make(prefix, sub=sub)
    f.check_states()
    for t, fn in COPIES.items():
        wrong = []
        for name, st in zip(cells[t], f.states):
            dst = os.path.join(fresh(), "copy")
            rc, said = fn(m.path(name), dst)
            if rc or not os.path.exists(dst) or get(dst) != get(f.oracle(name)):
                wrong.append("%s (exit %d%s)" % (st, rc, ": " + said if said else ""))
        check("%s copies every byte, every state" % t, not wrong,
              "wrong in " + ", ".join(wrong) if wrong else "")

    wrong = []
    for name, st in zip(cells["mv"], f.states):
        dst = os.path.join(fresh(), "moved")
        rc, said = tool(["mv", m.path(name), dst])
        if rc or get(dst) != get(f.oracle(name)) or os.path.exists(m.path(name)):
            wrong.append("%s (exit %d %s)" % (st, rc, said))
    check("mv to another filesystem moves every byte", not wrong,
          "wrong in " + ", ".join(wrong) if wrong else "")

    for t, create, extract in (
            ("tar -S", ["tar", "-S", "-cf"], ["tar", "-xf"]),
            ("tar --xattrs", ["tar", "--xattrs", "-cf"], ["tar", "--xattrs", "-xf"]),
            ("bsdtar", ["bsdtar", "-cf"], ["bsdtar", "-xf"])):
        archive = os.path.join(tmp, "a.tar")
        rc, said = tool(create + [archive, "-C", m.mnt] +
                        [os.path.basename(n) for n in cells[t]])
        d = fresh()
        rc2, said2 = tool(extract + [archive, "-C", d])
        wrong = [st for name, st in zip(cells[t], f.states)
                 if not os.path.exists(os.path.join(d, name)) or
                 get(os.path.join(d, name)) != get(f.oracle(name))]
        check("%s: an archive of every state extracts every byte" % t, not rc2 and not wrong,
              "(%d %s) wrong in %s" % (rc2, said2, wrong) if rc2 or wrong else "")
        check("%s: the archive is made with exit 0" % t, not rc,
              "%d %s" % (rc, said) if rc else "")
        if t == "tar --xattrs":
            _, listing = tool(["tar", "--xattrs", "-tvvf", archive])
            check("tar --xattrs carries no user.hsmfs.* name", "user.hsmfs" not in listing, "")

    # a tree: cp -a of a directory holding every state
    tree = m.path("tree")
    os.makedirs(tree, exist_ok=True)
    os.makedirs(os.path.join(native, "tree"), exist_ok=True)
    f.make(TOOL_CELLS[-1][0], sub=TOOL_CELLS[-1][1])
    rc, said = tool(["cp", "-a", tree, os.path.join(fresh(), "tree")])
    check("cp -a of a tree with a file in every state copies every byte",
          not rc and same_tree(os.path.join(out, "tree"), os.path.join(native, "tree")),
          "(%d %s)" % (rc, said) if rc else "")

    wrong = []
    for name, st in zip(cells["cp in"], f.states):
        rc, said = tool(["cp", m.path(name), m.path(name + ".copy")])
        if rc or get(m.path(name + ".copy")) != get(f.oracle(name)):
            wrong.append("%s (%d %s)" % (st, rc, said))
    check("cp within the mount copies every byte", not wrong,
          "wrong in " + ", ".join(wrong) if wrong else "")

    # what the store keeps for itself is never shown
    wrong = []
    for name, st in zip(cells["getfattr"], f.states):
        rc, said = tool(["getfattr", "-d", "-m", "-", m.path(name)])
        if rc or "user.hsmfs" in said:
            wrong.append("%s (%d: %s)" % (st, rc, said))
        for x in os.listxattr(m.path(name)):
            try:
                os.getxattr(m.path(name), x)
            except OSError as e:
                wrong.append("%s: %s listed, cannot be read (%s)" % (st, x, e))
    check("getfattr -d of every state: no user.hsmfs.* name, every name listed can be read",
          not wrong, "; ".join(wrong))
    state_cells = [(n, st) for n, st in f.made if not n.startswith(("mv", "cpin"))]
    bad = [(n, st, f.state(n)) for n, st in state_cells
           if f.state(n) == "dirty" and SHOWN[st] != "dirty"]
    check("reading a file to copy it made no file dirty", not bad,
          "%s" % bad[:4] if bad else "")


def test_tools():
    rng = random.Random(SEED + 1)
    mirror, native, tmp = tmpdir("hsmfs-mirror-"), tmpdir("hsmfs-native-"), tmpdir()
    with Mount(opts="prefetch=0,chunk=64k,timeout=20") as m:
        f = Files(m, mirror, native, rng)
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
            run_tools(m, f, tmp, native, "default")
    for d in (mirror, native, tmp):
        shutil.rmtree(d, ignore_errors=True)


def test_unlisted_dir_xattrs():
    """A directory not listed yet carries the store's mark of it: it is
    never listed, and rsync -aX copies the directory."""
    with Mount(opts="prefetch=0,chunk=64k,timeout=20") as m:
        os.mkdir(m.spath("d"))
        os.setxattr(m.spath("d"), "user.hsmfs.unlisted", b"file:///nowhere/")
        os.setxattr(m.spath("d"), "user.other", b"kept")
        names = os.listxattr(m.path("d"))
        ok(not any(x.startswith("user.hsmfs.") for x in names) and "user.other" in names,
           "a directory's store marks are not listed, its own names are (%s)" % names)
        ok(not any(x.startswith("user.hsmfs.") for x in os.listxattr(m.mnt)),
           "nor the root's")
        eq(os.listxattr(m.path("d")), ["user.other"], "listxattr")
        eq(len(b"user.other\0"), ctypes.CDLL(None).listxattr(m.path("d").encode(), None, 0),
           "the size a probe is told is the size of what is shown")


def test_dig_holes():
    """fallocate --dig-holes of a clean resident file whose bytes hold
    runs of zeros changes no byte: it stays clean (resident); a punch of
    data makes it dirty."""
    mirror, native = tmpdir("hsmfs-mirror-"), tmpdir("hsmfs-native-")
    data = bytearray(random.Random(SEED + 2).randbytes(SIZE))
    data[128 * K:384 * K] = bytes(256 * K)
    with Mount(opts="prefetch=0,chunk=64k,timeout=20") as m:
        mirror_files(m, mirror, {"z": bytes(data), "y": bytes(data)})
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
            for n in ("z", "y"):
                eq(get(m.path(n)), bytes(data), "%s read whole" % n)
            eq(state_of(m.path("z")), "resident", "a file read whole is resident")
            mtime = os.stat(m.path("z")).st_mtime_ns
            rc, said = tool(["fallocate", "--dig-holes", m.path("z")])
            eq((rc, said), (0, ""), "fallocate --dig-holes")
            eq(get(m.path("z")), bytes(data), "no byte changed")
            ok(any(b - a >= 64 * K for a, b in holes(m.path("z"))), "its zeros are a hole now")
            eq(state_of(m.path("z")), "resident", "and it is still clean (resident)")
            eq(os.stat(m.path("z")).st_mtime_ns, mtime, "with its version's time")
            punch(m.path("y"), 4 * K, 4 * K)
            eq(state_of(m.path("y")), "dirty", "a punch of data makes a file dirty")
    for d in (mirror, native):
        shutil.rmtree(d, ignore_errors=True)


def test_declared_holes():
    """A manifest's "holes": the origin's declared zeros are holes from the
    first look (lseek, st_blocks), read as zeros without a request, and
    the file read whole passes its sha256; a hole past the size is refused."""
    import hashlib
    root = tmpdir("hsmfs-origin-")
    size = 1024 * K
    decl = [(0, 64 * K), (256 * K, 128 * K), (960 * K, 64 * K)]
    data = bytearray(random.Random(SEED + 3).randbytes(size))
    for a, n in decl:
        data[a:a + n] = bytes(n)
    data = bytes(data)
    with open(os.path.join(root, "s.bin"), "wb") as f:
        f.write(data)
    with Nginx(root) as ng, Mount(opts="hook=%s,prefetch=0" % HTTP) as m:
        rc, out = import_manifest(m.mnt, [{
            "path": "s.bin", "size": size, "url": ng.url("s.bin"),
            "sha256": hashlib.sha256(data).hexdigest(), "holes": [list(h) for h in decl]}])
        eq(rc, 0, "imported with its holes (%s)" % out.strip())
        want = [(a, a + n) for a, n in decl]
        eq(holes(m.path("s.bin")), want, "lseek finds the declared holes, and only them")
        st = os.stat(m.path("s.bin"))
        eq(st.st_blocks * 512, size - sum(n for _, n in decl),
           "st_blocks counts the data not fetched, not the holes")
        before = len(ng.log())
        fd = os.open(m.path("s.bin"), os.O_RDONLY)
        got = os.pread(fd, 128 * K, 256 * K)
        os.close(fd)
        eq(got, bytes(128 * K), "a declared hole reads as zeros")
        eq(len(ng.log()), before, "without a request to the origin")
        copy = os.path.join(root, "copy")
        eq(tool(["cp", "--sparse=always", m.path("s.bin"), copy]), (0, ""), "cp --sparse=always")
        eq(get(copy), data, "copies every byte")
        eq(get(m.path("s.bin")), data, "the file reads whole")
        eq(state_of(m.path("s.bin")), "resident", "its digest checked: resident, not stale")
        eq(holes(m.path("s.bin")), want, "and its holes are still holes")
        rc, out = import_manifest(m.mnt, [{"path": "t.bin", "size": 10, "url": ng.url("s.bin"),
                                           "holes": [[8, 4]]}])
        ok(rc != 0 and "past the size" in out, "a hole past the size is refused (%s)" %
           out.strip())
    shutil.rmtree(root, ignore_errors=True)


def test_git_and_sqlite():
    """git add and checkout of lazy files in a work tree on the mount; the
    sqlite3 .backup of a database never read."""
    mirror, tmp = tmpdir("hsmfs-mirror-"), tmpdir()
    rng = random.Random(SEED + 3)
    db = os.path.join(tmp, "db.sqlite")
    rc, said = tool(["sqlite3", db, "create table t(a, b); "
                     "with recursive n(i) as (select 1 union all select i+1 from n where i<3000) "
                     "insert into t select i, randomblob(200) from n;"])
    eq((rc, said), (0, ""), "a database of 3000 rows")
    files = {"repo/a.bin": rng.randbytes(SIZE), "repo/b.txt": b"hello\n" * 1000,
             "db.sqlite": get(db)}
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", HOME=tmp, GIT_CONFIG_NOSYSTEM="1")
    with Mount(opts="prefetch=0,chunk=64k,timeout=20") as m:
        os.mkdir(m.path("repo"))
        mirror_files(m, mirror, files)
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
            repo = m.path("repo")
            rc, said = tool(["git", "init", "-q", repo], env=env)
            rc2, said2 = tool(["git", "-C", repo, "add", "."], env=env)
            rc3, said3 = tool(["git", "-C", repo, "commit", "-qm", "lazy"], env=env)
            ok(not (rc or rc2 or rc3), "git init, add, commit of lazy files (%s %s %s)" %
               (said, said2, said3))
            r = subprocess.run(["git", "-C", repo, "show", "HEAD:a.bin"], env=env,
                               stdout=subprocess.PIPE)
            ok(r.stdout == files["repo/a.bin"], "git stored every byte of the lazy file")
            os.unlink(os.path.join(repo, "a.bin"))
            rc, said = tool(["git", "-C", repo, "checkout", "--", "a.bin"], env=env)
            ok(not rc and get(os.path.join(repo, "a.bin")) == files["repo/a.bin"],
               "git checkout writes it back whole (%d %s)" % (rc, said))
            backup = os.path.join(tmp, "backup.sqlite")
            rc, said = tool(["sqlite3", m.path("db.sqlite"), ".backup " + backup])
            _, dump1 = tool(["sqlite3", backup, ".dump"])
            _, dump2 = tool(["sqlite3", db, ".dump"])
            ok(not rc and dump1 == dump2 and "3000" in tool(["sqlite3", backup,
                                                             "select count(*) from t"])[1],
               "sqlite3 .backup of a database never read is the database (%d %s)" %
               (rc, said))
    for d in (mirror, tmp):
        shutil.rmtree(d, ignore_errors=True)


def test_mv_writeback():
    """On a mount that archives to a real origin (nginx WebDAV): mv of a
    file never read to another filesystem moves every byte, and sync then
    removes it at the origin; a cp within the mount of a file never read,
    and a file changed without being read, reach the origin byte for byte."""
    from archiving import DAV, HTTP
    from harness import HSMFSCTL, Nginx, write_tree
    root, out = tmpdir("hsmfs-origin-"), tmpdir()
    rng = random.Random(SEED + 4)
    files = {"data/a.bin": rng.randbytes(500_000), "data/b.bin": rng.randbytes(SIZE),
             "data/c.bin": rng.randbytes(SIZE)}
    write_tree(root, files)
    for d, _, fs in os.walk(root):
        os.chmod(d, 0o777)
        for n in fs:
            os.chmod(os.path.join(d, n), 0o666)
    with Nginx(root, extra=DAV) as ng:
        with Mount(opts="hook=%s,origin=%s,prefetch=0" % (HTTP, ng.url("data/"))) as m:
            rc, said = tool(["mv", m.path("a.bin"), os.path.join(out, "a.bin")])
            ok(not rc and get(os.path.join(out, "a.bin")) == files["data/a.bin"],
               "mv of a file never read off a write-back mount moves every byte (%d %s)" %
               (rc, said))
            rc, said = tool(["cp", m.path("b.bin"), m.path("b.copy")])
            eq((rc, said), (0, ""), "cp within the mount of a file never read")
            pwrite(m.path("c.bin"), 300_000, b"HERE")
            want_c = files["data/c.bin"][:300_000] + b"HERE" + files["data/c.bin"][300_004:]
            rc, said = tool([HSMFSCTL, "sync", m.mnt])
            eq(rc, 0, "hsmfsctl sync (%s)" % said)
            ok(not os.path.exists(os.path.join(root, "data", "a.bin")),
               "the moved file is gone from the origin")
            ok(get(os.path.join(root, "data", "b.copy")) == files["data/b.bin"],
               "the copy made on the mount is at the origin, byte for byte")
            ok(get(os.path.join(root, "data", "c.bin")) == want_c,
               "the file changed without being read is at the origin, every byte around the "
               "change")
    for d in (root, out):
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    def test():
        test_unlisted_dir_xattrs()
        test_dig_holes()
        test_declared_holes()
        test_calls()
        test_tools()
        test_git_and_sqlite()
        test_mv_writeback()
    main(test)
