#!/usr/bin/env python3
"""cold_reads=direct: a read-only open of a file with bytes missing reads
past the mount's page cache (FOPEN_DIRECT_IO), so that a cold file's
bytes are in memory once (the store's cache), not twice.

  1. under cold_reads=direct a read of bytes already fetched, through
     the same open, reaches the daemon again (its "hits" count grows);
     under the default (cached) the page cache answers it;
  2. every byte right: whole reads, reads at random places, a mapping
     of such an open (DIRECT_IO_ALLOW_MMAP);
  3. coherent with writers: a user's write through another descriptor,
     and a shared mapping's dirty page not yet written back, are what a
     direct read then returns;
  4. once the file is whole, an open is as any other (not direct).
"""
import json
import mmap
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Hook, Mount, eq, main, mirror_files, ok,  # noqa: E402
                     tmpdir)

K = 1024
M = K * K


def hits(m):
    return json.loads(subprocess.run([HSMFSCTL, "stats", "--json", m.mnt],
                                     stdout=subprocess.PIPE, check=True).stdout)["hits"]


def reread_reaches_daemon(opts):
    """Read 1 MiB of a cold file, then the same MiB again through the same
    open: does the second read reach the daemon?"""
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(3 * M)
    with Mount(opts="prefetch=0,timeout=10" + opts) as m:
        mirror_files(m, mirror, {"f": data})
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
            fd = os.open(m.path("f"), os.O_RDONLY)
            try:
                first = os.pread(fd, M, 0)
                before = hits(m)
                again = os.pread(fd, M, 0)
                after = hits(m)
            finally:
                os.close(fd)
        good = first == data[:M] and again == data[:M]
    return good, after - before


def test_reread():
    good, n = reread_reaches_daemon(",cold_reads=direct")
    ok(good, "cold_reads=direct: the bytes read twice are right")
    ok(n >= 1, "and the second read reached the daemon (hits +%d): no page cache" % n)
    good, n = reread_reaches_daemon("")
    ok(good, "default (cached): the bytes read twice are right")
    eq(n, 0, "and the page cache answered the second read")


def test_bytes_and_mapping():
    mirror = tmpdir("hsmfs-mirror-")
    files = {"whole": os.urandom(5 * M + 123), "rand": os.urandom(4 * M + 7),
             "mapped": os.urandom(2 * M + 4097)}
    with Mount(opts="prefetch=0,timeout=10,cold_reads=direct") as m:
        mirror_files(m, mirror, files)
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
            with open(m.path("whole"), "rb", buffering=0) as f:
                got = bytearray()
                while True:
                    b = f.read(random.choice((4 * K, 100 * K, M)))
                    if not b:
                        break
                    got += b
            ok(bytes(got) == files["whole"], "a whole read in mixed sizes is right")
            rng = random.Random(7)
            seed_ok = True
            fd = os.open(m.path("rand"), os.O_RDONLY)
            try:
                for _ in range(40):
                    off, n = rng.randrange(len(files["rand"])), rng.randrange(1, 300 * K)
                    seed_ok &= os.pread(fd, n, off) == files["rand"][off:off + n]
            finally:
                os.close(fd)
            ok(seed_ok, "reads at 40 random places are right (seed 7)")
            fd = os.open(m.path("mapped"), os.O_RDONLY)
            try:
                mp = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
                got = bytes(mp[M - 10:M + 10]) + bytes(mp[-100:])
                mp.close()
            finally:
                os.close(fd)
            ok(got == files["mapped"][M - 10:M + 10] + files["mapped"][-100:],
               "a mapping of a direct open of a cold file reads the right bytes")


def test_writers():
    mirror = tmpdir("hsmfs-mirror-")
    files = {"w": os.urandom(3 * M), "mw": os.urandom(3 * M)}
    with Mount(opts="prefetch=0,timeout=10,cold_reads=direct") as m:
        mirror_files(m, mirror, files)
        with Hook(m.mnt, "--mode", "mirror", "--mirror", mirror):
            with open(m.path("w"), "r+b", buffering=0) as f:
                f.seek(M + 5)
                f.write(b"user" * 1000)
            with open(m.path("w"), "rb", buffering=0) as f:
                got = f.read()
            want = files["w"][:M + 5] + b"user" * 1000 + files["w"][M + 5 + 4000:]
            ok(got == want, "a user's write, then a direct read: the write is what it reads")
            fd = os.open(m.path("mw"), os.O_RDWR)
            try:
                mp = mmap.mmap(fd, 0)
                mp[2 * M + 100:2 * M + 104] = b"MMAP"  # dirty, not written back
                rfd = os.open(m.path("mw"), os.O_RDONLY)
                try:
                    seen = os.pread(rfd, 8, 2 * M + 98)
                finally:
                    os.close(rfd)
                mp.close()
            finally:
                os.close(fd)
            eq(seen, files["mw"][2 * M + 98:2 * M + 100] + b"MMAP" +
               files["mw"][2 * M + 104:2 * M + 106],
               "a shared mapping's dirty page is what a direct read returns")
            # now whole: read every byte, then a fresh open is not direct
            with open(m.path("w"), "rb") as f:
                f.read()
            fd = os.open(m.path("w"), os.O_RDONLY)
            try:
                os.pread(fd, M, 0)
                before = hits(m)
                os.pread(fd, M, 0)
                eq(hits(m) - before, 0, "a whole file's open is not direct (nothing reaches "
                   "the daemon's missing-bytes path)")
            finally:
                os.close(fd)


def test():
    test_reread()
    test_bytes_and_mapping()
    test_writers()


if __name__ == "__main__":
    main(test)
