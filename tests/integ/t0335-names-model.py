#!/usr/bin/env python3
"""Model-based test of names: users' saves racing re-listings.

A zero-setup mount of a real nginx on 127.0.0.1 lists one directory
again and again (dir_ttl, and hsmfsctl refresh from a thread of its own)
while the origin rewrites its files (each version with a Last-Modified
of its own) and adds names, and users save through the mount the usual
atomic way (write a temporary file, fsync, rename it over the name),
create names of their own and rename them, and readers read everything.
The oracle knows which changes are the users':
  - a read of a name returns one whole version of it: one the origin
    had, or one a user saved; never a mix, never zeros; once a user's
    save took a name, no read opened later sees an origin version there;
  - at the end, after one more refresh, every name a user saved holds the
    user's last bytes, every name a user made holds its bytes, and every
    origin name no user touched holds the origin's last version.

HSMFS_NAMES_SEED=N repeats a run; HSMFS_NAMES_OPS=N sets the operations
per user thread (the default is CI's; a soak uses more).
"""
import errno
import os
import random
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Mount, Nginx, diag, eq, main, run,  # noqa: E402
                     tmpdir, wait_for)

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")
OPS = int(os.environ.get("HSMFS_NAMES_OPS", "200"))
SEED = int(os.environ.get("HSMFS_NAMES_SEED", str(int(time.time() * 1000) % 1000000)))
USERS = 2
CONTESTED = 48   # origin names the users also save
UNTOUCHED = 8    # origin names no user touches
# the tolerated errors of a read racing a rename or a re-listing, or of
# a file whose origin changed since it was listed (stale until listed again)
RACE_ERRORS = (errno.ENOENT, errno.ESTALE, errno.EIO)


class Origin:
    """The origin's files, each version with a Last-Modified of its own."""

    def __init__(self, root, rnd):
        self.root = root
        self.d = os.path.join(root, "d")
        os.mkdir(self.d)
        os.chmod(self.d, 0o755)
        self.rnd = rnd
        self.t = 1_600_000_000
        self.versions = {}    # name -> [bytes of every version]
        self.lock = threading.Lock()

    def write(self, name):
        with self.lock:
            data = ("%s v%d " % (name, len(self.versions.get(name, [])))).encode() + \
                os.urandom(self.rnd.randrange(1, 20000))
            self.t += 1
            p = os.path.join(self.d, name)
            with open(p + ".new", "wb") as f:
                f.write(data)
            os.utime(p + ".new", (self.t, self.t))
            self.versions.setdefault(name, []).append(data)
            os.rename(p + ".new", p)

    def latest(self, name):
        with self.lock:
            return self.versions[name][-1]

    def all(self, name):
        with self.lock:
            return list(self.versions.get(name, []))


def test():
    diag("seed %d, %d ops per user (HSMFS_NAMES_SEED=%d HSMFS_NAMES_OPS=%d)"
         % (SEED, OPS, SEED, OPS))
    rnd = random.Random(SEED)
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    org = Origin(root, random.Random(rnd.random()))
    contested = ["c%02d" % i for i in range(CONTESTED)]
    untouched = ["u%02d" % i for i in range(UNTOUCHED)]
    for n in contested + untouched:
        org.write(n)
    saved = {}          # name -> [every version a user saved], owned by one user
    saved_at = {}       # name -> when a user's save first took it
    made = {}           # user-made name -> bytes
    bad = []
    counts = {"saves": 0, "renames": 0, "makes": 0, "reads": 0, "refreshes": 0,
              "origin": 0, "race_errors": 0}
    stop = threading.Event()
    clock = threading.Lock()

    def count(k):
        with clock:
            counts[k] += 1

    # a listing's entries are made and synced, then it sleeps before its
    # commit and renames (debug builds: fault.h): the window in which a
    # user's save meets a replacement planned before it is wide
    with Nginx(root) as ng, Mount(opts="hook=%s,origin=%s,dir_ttl=0.3" % (HTTP, ng.url()),
                                  env={"HSMFS_DELAY": "listing-made:20"}) as m:
        wait_for(lambda: m.logged("hook 'hsmfs-http'"), "hsmfs-http connected")
        d = m.path("d")
        eq(sorted(os.listdir(d)), sorted(contested + untouched), "the directory lists")

        def user(k):
            r = random.Random(rnd.random())
            mine = [n for i, n in enumerate(contested) if i % USERS == k]
            own = []
            for i in range(OPS):
                time.sleep(r.random() * 0.05)  # the run spans many re-listings
                op = r.random()
                if op < 0.55:
                    # an atomic save over an origin name; a first save is what
                    # a listing planned before it can meet, so they are spread
                    fresh = [n for n in mine if n not in saved]
                    n = r.choice(fresh if fresh and r.random() < 0.3 else mine)
                    data = ("user%d save %d of %s " % (k, i, n)).encode() + \
                        os.urandom(r.randrange(1, 20000))
                    tmp = os.path.join(d, ".%s.tmp%d" % (n, k))
                    with open(tmp, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                    saved.setdefault(n, []).append(data)  # a reader may see it from now
                    os.rename(tmp, os.path.join(d, n))
                    # from now on the name is the user's: no origin version again
                    saved_at.setdefault(n, time.monotonic())
                    count("saves")
                elif op < 0.75 or not own:
                    n = "m%d-%d" % (k, i)
                    data = os.urandom(r.randrange(0, 5000))
                    with open(os.path.join(d, n), "wb") as f:
                        f.write(data)
                    made[n] = data
                    own.append(n)
                    count("makes")
                else:
                    # a user's name renamed to another of the user's
                    a = r.choice(own)
                    b = "m%d-%d" % (k, i)
                    os.rename(os.path.join(d, a), os.path.join(d, b))
                    made[b] = made.pop(a)
                    own[own.index(a)] = b
                    count("renames")

        def origin():
            r = random.Random(rnd.random())
            while not stop.is_set():
                # mostly names still the origin's: their listings plan replacements
                fresh = [n for n in contested if n not in saved]
                org.write(r.choice(fresh if fresh and r.random() < 0.7 else
                                   contested + untouched))
                count("origin")
                time.sleep(r.random() * 0.02)

        def refresher():
            r = random.Random(rnd.random())
            while not stop.is_set():
                run([HSMFSCTL, "refresh", d])
                count("refreshes")
                time.sleep(r.random() * 0.05)

        def reader():
            r = random.Random(rnd.random())
            while not stop.is_set():
                n = r.choice(contested + untouched)
                t0 = time.monotonic()
                try:
                    with open(os.path.join(d, n), "rb") as f:
                        got = f.read()
                        if got not in org.all(n) and got not in saved.get(n, []):
                            # what the daemon says of it, for the report
                            try:
                                how = "inode %d, %s, present %s" % (
                                    os.fstat(f.fileno()).st_ino,
                                    os.getxattr(os.path.join(d, n), "user.hsmfs.state"),
                                    os.getxattr(os.path.join(d, n), "user.hsmfs.present"))
                            except OSError as e:
                                how = str(e)
                            bad.append("read of %s: %d bytes that are no version of it "
                                       "(%r...; %s)" % (n, len(got), got[:16], how))
                            continue
                except OSError as e:
                    if e.errno in RACE_ERRORS:
                        count("race_errors")
                        continue
                    bad.append("read of %s: %s" % (n, e))
                    continue
                count("reads")
                if got not in org.all(n) and got not in saved.get(n, []):
                    bad.append("read of %s: %d bytes that are no version of it (%r...)"
                               % (n, len(got), got[:24]))
                elif got not in saved.get(n, []) and n in saved_at and t0 > saved_at[n]:
                    bad.append("read of %s: the origin's %r... after a user's save took "
                               "the name: a listing replaced the user's file" % (n, got[:12]))

        users = [threading.Thread(target=user, args=(k,)) for k in range(USERS)]
        others = [threading.Thread(target=f) for f in (origin, refresher, reader, reader)]
        for t in users + others:
            t.start()
        for t in users:
            t.join()
        stop.set()
        for t in others:
            t.join()
        diag("counts: %s" % counts)
        eq(bad[:5], [], "every read is one whole version (%d reads)" % counts["reads"])
        rc, out = run([HSMFSCTL, "refresh", d])
        eq(rc, 0, "a last refresh: " + out.strip())
        lost = []
        for n, versions in saved.items():
            try:
                with open(os.path.join(d, n), "rb") as f:
                    if f.read() != versions[-1]:
                        lost.append(n)
            except OSError as e:
                lost.append("%s (%s)" % (n, e))
        eq(lost, [], "every name a user saved holds the user's last save (%d names, %d saves)"
           % (len(saved), counts["saves"]))
        gone = [n for n, data in made.items()
                if not os.path.exists(os.path.join(d, n)) or
                open(os.path.join(d, n), "rb").read() != data]
        eq(gone, [], "every name a user made holds its bytes (%d)" % len(made))
        stale = [n for n in untouched if open(os.path.join(d, n), "rb").read() != org.latest(n)]
        eq(stale, [], "every origin name no user touched holds the origin's last version")
        left = [n for n in os.listdir(d) if ".tmp" in n]
        eq(left, [], "no temporary name is left")
    shutil.rmtree(root, ignore_errors=True)


main(test)
