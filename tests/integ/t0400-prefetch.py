#!/usr/bin/env python3
"""Sibling prefetch: the next files of a directory are fetched ahead of a
reader that walks it (fs/prefetch.c).

  1. a walk in readdir order (cp -r, tar c) and one in name order (a
     glob): the files ahead are asked for by the mount itself (events
     with no process behind them), all in parallel, every byte right,
     and the counters add up (prefetched = used, nothing wasted);
  2. a reader in random order: prefetch starts (three files of one
     directory in a row), finds itself unused, stops, and counts what
     it fetched for nothing;
  3. cache_max holds while it prefetches (the cache never grows past the
     limit plus one chunk), and every file the reader reads is right;
  4. noprefetch (or prefetch=0) turns it off; without either it is on.
"""
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Hook, Mount, diag, eq, import_manifest, main, ok,  # noqa: E402
                     tmpdir, write_tree)

K = 1024


def stats(m):
    return json.loads(subprocess.run([HSMFSCTL, "stats", "--json", m.mnt],
                                     stdout=subprocess.PIPE, check=True).stdout)


def make_dir(m, mirror, d, n, size):
    """n placeholders of size bytes in d, filled from mirror; returns their bytes."""
    files = {"%s/%s" % (d, name): os.urandom(size)
             for name in ("f%03d-%s" % (i, "abcdefghij"[(i * 7) % 10]) for i in range(n))}
    write_tree(mirror, files)
    rc, out = import_manifest(m.mnt, [{"path": p, "size": len(b),
                                       "url": "file://" + os.path.join(mirror, p)}
                                      for p, b in files.items()])
    if rc:
        raise RuntimeError(out)
    return files


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_walks():
    mirror = tmpdir("hsmfs-mirror-")
    with Mount(opts="timeout=10") as m:  # the default: on, 8 files ahead
        a = make_dir(m, mirror, "a", 30, 8 * K)
        b = make_dir(m, mirror, "b", 30, 8 * K)
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror, "--delay", "0.05") as h:
            order = os.listdir(m.path("a"))  # readdir order, as cp -r and tar
            good = all(read(m.path("a/" + n)) == a["a/" + n] for n in order)
            ok(good, "a walk in readdir order reads every byte right")
            ahead = [e for e in h.events("PRE_ACCESS") if e["pid"] == 0]
            ok(len({e["path"] for e in ahead}) >= 20,
               "the files ahead were asked for by the mount (%d of 30)" % len(ahead))
            s = stats(m)
            ok(s["prefetched_files"] >= 20 and s["prefetch_used_bytes"] == s["prefetched_bytes"]
               and s["prefetch_wasted_bytes"] == 0,
               "counted: %d files, %d bytes, all used, none wasted"
               % (s["prefetched_files"], s["prefetched_bytes"]))
            n0 = len(ahead)
            names = sorted(os.listdir(m.path("b")))
            ok(names != os.listdir(m.path("b")), "(names sorted differ from readdir's order)")
            good = all(read(m.path("b/" + n)) == b["b/" + n] for n in names)
            ok(good, "a walk in name order (a glob) reads every byte right")
            ahead = [e for e in h.events("PRE_ACCESS") if e["pid"] == 0]
            ok(len(ahead) - n0 >= 20, "and it is prefetched too (%d of 30)" % (len(ahead) - n0))
            s = stats(m)
            eq(s["prefetch_used_bytes"], s["prefetched_bytes"], "all of it used")


def test_big_files():
    """Of a file larger than 1 MiB a walk prefetches what its reader's first
    read from the start waits for (the kernel's first window, 128 KiB, or
    first_fill if larger), not its first MiB (a reader going on from there
    has the rest of the chunk asked at once; one that does not come
    leaves less on the link)."""
    mirror = tmpdir("hsmfs-mirror-")
    for opts, head in (("", 128 * K), (",first_fill=64k", 128 * K),
                       (",first_fill=256k", 256 * K)):
        with Mount(opts="timeout=10" + opts) as m:
            g = make_dir(m, mirror, "g", 12, 3 * 512 * K)
            with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror) as h:
                order = os.listdir(m.path("g"))
                ok(all(read(m.path("g/" + n)) == g["g/" + n] for n in order),
                   "a walk of 1.5 MiB files reads every byte right (%s)" % (opts[1:] or "default"))
                ahead = [(e["hint_start"], e["hint_end"]) for e in h.events("PRE_ACCESS")
                         if e["pid"] == 0]
                ok(len(ahead) >= 6, "files ahead were asked for by the mount (%d)" % len(ahead))
                eq(sorted(set(ahead)), [(0, head)], "each its first %d KiB" % (head // K))
                s = stats(m)
                eq(s["prefetched_bytes"], head * s["prefetched_files"], "and counted so")
    shutil.rmtree(mirror, ignore_errors=True)


def test_random_stops():
    mirror = tmpdir("hsmfs-mirror-")
    seed = int(os.environ.get("HSMFS_SEED", random.randrange(1 << 30)))
    diag("seed %d (HSMFS_SEED=%d to repeat)" % (seed, seed))
    with Mount(opts="timeout=10,prefetch=8") as m:
        c = make_dir(m, mirror, "c", 200, K)
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
            names = list(c)
            random.Random(seed).shuffle(names)
            good = all(read(m.path(p)) == c[p] for p in names[:40])
            ok(good, "40 files read in random order, every byte right")
            s = stats(m)
            # three opens in a row start it; eight that use none of it stop it
            ok(0 < s["prefetched_files"] <= 24,
               "prefetch starts, then stops when its files are not read "
               "(%d files asked ahead, of 200)" % s["prefetched_files"])
            ok(s["prefetch_wasted_bytes"] > 0,
               "and counts what it fetched for nothing (%d bytes)" % s["prefetch_wasted_bytes"])


def test_cache_max():
    mirror = tmpdir("hsmfs-mirror-")
    limit, chunk = 128 * K, 16 * K
    with Mount(opts="timeout=10,prefetch=8,cache_max=%d,chunk=%d" % (limit, chunk)) as m:
        d = make_dir(m, mirror, "d", 40, 16 * K)
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror, "--delay", "0.02"):
            worst, good = 0, True
            for n in os.listdir(m.path("d")):
                good = good and read(m.path("d/" + n)) == d["d/" + n]
                worst = max(worst, stats(m)["cache_bytes"])
            s = stats(m)
        ok(good, "a walk of 640 KiB through a 128 KiB cache reads every byte right")
        ok(worst <= limit + chunk, "the cache stayed within its limit: at most %d bytes" % worst)
        ok(s["prefetched_files"] > 0, "while prefetching (%d files)" % s["prefetched_files"])


def test_off():
    mirror = tmpdir("hsmfs-mirror-")
    with Mount(opts="timeout=10,noprefetch") as m:
        e = make_dir(m, mirror, "e", 12, 4 * K)
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror) as h:
            ok(all(read(m.path("e/" + n)) == e["e/" + n] for n in os.listdir(m.path("e"))),
               "noprefetch: the walk reads right")
            eq(stats(m)["prefetched_files"], 0, "and nothing is asked ahead")
            eq([e for e in h.events("PRE_ACCESS") if e["pid"] == 0], [], "no event without a reader")


def run():
    test_walks()
    test_big_files()
    test_random_stops()
    test_cache_max()
    test_off()


main(run)
