#!/usr/bin/env python3
"""kill -9 with a new version imported between rounds: no byte of an old
version is ever served from a range marked present.

Each round writes a new version of the origin file, imports it (offline,
hsmfsctl import -s, a new version string), mounts with a supervised
slow hook, starts readers, and kills the daemon at a random moment while
fills are in flight.  A hook of the killed daemon dies with it; were one
to live on, its fills go to staging files of a mount that is gone.  The
next round's remount reads the whole file through a hook serving the new
version: every byte must be the new version's.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, PYHOOK, Hook, Mount, diag, main, ok, run,  # noqa: E402
                     tmpdir)

ROUNDS = int(os.environ.get("HSMFS_VERSION_ROUNDS", "6"))
SIZE = 4 << 20

READER = r"""
import os, random, sys
path, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
while True:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        os.pread(fd, 4096, rnd.randrange(0, size // 4096) * 4096)
    except OSError:
        pass
    os.close(fd)
"""


def import_version(store, mirror, k):
    data = random.Random(k).randbytes(SIZE)
    with open(os.path.join(mirror, "f"), "wb") as f:
        f.write(data)
    man = os.path.join(mirror, "m.jsonl")
    with open(man, "w") as f:
        f.write(json.dumps({"path": "f", "size": SIZE, "version": "v%d" % k}) + "\n")
    rc, out = run([HSMFSCTL, "import", "-s", store, man])
    return data, rc, out


def run_test():
    store, mirror = tmpdir("hsmfs-store-"), tmpdir("hsmfs-mirror-")
    seed = random.randrange(1 << 30)
    diag("seed %d" % seed)
    rnd = random.Random(seed)
    bad = []
    # a hook that keeps writing after its daemon died (if it lives on)
    hook = "hook=%s %s --log %s --mirror %s --delay 0.3 --linger 2" % (
        sys.executable, PYHOOK, os.path.join(mirror, "hook.log"), mirror)
    for k in range(ROUNDS):
        data, rc, out = import_version(store, mirror, k)
        if rc != 0:
            bad.append("round %d: import failed: %s" % (k, out))
            break
        # the previous round's crash left ranges of version k-1: none may show
        with Mount(store=store) as m:
            with Hook(m.mnt, "--mirror", mirror):
                with open(m.path("f"), "rb") as f:
                    if f.read() != data:
                        bad.append("round %d: bytes of another version after the re-import" % k)
        m = Mount(store=store, opts="chunk=256k," + hook)
        m.start()
        readers = []
        try:
            readers = [subprocess.Popen([sys.executable, "-c", READER, m.path("f"), str(SIZE),
                                         str(seed + k * 10 + j)], stderr=subprocess.DEVNULL)
                       for j in range(3)]
            time.sleep(rnd.uniform(0.1, 0.6))  # a random moment, by design
            m.kill()
            m.proc.wait()
        finally:
            for r in readers:
                r.kill()
                r.wait()
            m.cleanup()
    # the last version, after the last crash
    data, rc, out = import_version(store, mirror, ROUNDS)
    with Mount(store=store) as m:
        with Hook(m.mnt, "--mirror", mirror):
            with open(m.path("f"), "rb") as f:
                if f.read() != data:
                    bad.append("final: bytes of another version after the re-import")
    ok(not bad, "%d kill -9 rounds with a new version imported between them: "
       "no byte of an old version served" % ROUNDS)
    for b in bad[:5]:
        diag(b)
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(mirror, ignore_errors=True)


main(run_test)
