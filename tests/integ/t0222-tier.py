#!/usr/bin/env python3
"""Many hosts, one origin, behind a cache tier.  The recipes of
doc/examples/ (hsmfs-squid.conf, hsmfs-nginx-tier.conf) run as written,
with this test's ports and paths.  Each host is a mount with its own
store, reading through hsmfs-http --proxy TIER; counts come from the
origin's own log.

 - The whole tree, read by every host at once: the origin serves it
   about once through either tier (at most 1.05 times the tree), and
   once per host with no tier.
 - Random 4 KiB reads on every host: behind the nginx tier the origin
   serves at most 1.1 times the distinct 1 MiB slices the reads need
   (hsmfs-http --align asks whole 1 MiB blocks, the tier's slices); with
   no tier the hosts fetch at most 4 times what they read.

HSMFS_TIER_HOSTS (default 6) and HSMFS_TIER_MIB (default 12) scale it;
the diag lines are the table of doc/benchmarks.md.  Skipped where squid
is missing.
"""
import json
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, Mount, Nginx, Squid, diag, dread, eq,  # noqa: E402
                     main, ok, run, skip, tmpdir, wait_for, write_tree)

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "doc",
                        "examples")
MiB, K = 1 << 20, 1024
HOSTS = int(os.environ.get("HSMFS_TIER_HOSTS", "6"))
TREE_MIB = int(os.environ.get("HSMFS_TIER_MIB", "12"))
READS = 40  # random 4 KiB reads a host


def make_tree():
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    files = {"big/a.bin": os.urandom(TREE_MIB * MiB // 2),
             "big/b.bin": os.urandom(TREE_MIB * MiB * 3 // 10 + 3),
             "c/d.bin": os.urandom(TREE_MIB * MiB // 5 - 64 * K)}
    for i in range(16):
        files["small/s%02d.txt" % i] = os.urandom(4 * K * (i + 1))
    write_tree(root, files, age=3600)
    return root, files


def nginx_tier(origin_url, cache_dir):
    """doc/examples/hsmfs-nginx-tier.conf's cache and location, with this
    test's paths and origin, as an Nginx (its own server is the tier)."""
    text = open(os.path.join(EXAMPLES, "hsmfs-nginx-tier.conf")).read()
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    text = text.replace("/var/cache/nginx/hsmfs", cache_dir)
    text = text.replace("http://origin.example.org", origin_url.rstrip("/"))
    http = text[:text.index("server {")]
    loc = text.index("location / {")
    depth, end = 0, loc
    for end in range(loc, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if text[end] == "}" and depth == 0:
            break
    return Nginx(tmpdir("hsmfs-tier-root-"), http=http, extra=text[loc:end + 1])


def file_bytes(ng, since=0):
    """Bytes the origin sent for files (not listings) since log entry since."""
    return sum(r[3] for r in ng.log()[since:] if r[0] == "GET" and not r[1].endswith("/"))


def hosts(n, hook):
    return [Mount(opts="timeout=60,%s" % hook) for _ in range(n)]


def all_at_once(mounts, fn):
    errs = []

    def run(m):
        try:
            fn(m)
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(repr(e))
    ts = [threading.Thread(target=run, args=(m,)) for m in mounts]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    return errs


def whole_tree(setup, ng, files, proxy):
    hook = "hook=%s%s,origin=%s" % (HTTP, " --proxy '%s'" % proxy if proxy else "", ng.url())
    mounts = hosts(HOSTS, hook)
    bad = []
    try:
        for m in mounts:
            m.start()
        n = len(ng.log())

        def read_all(m):
            for p, data in files.items():
                with open(m.path(p), "rb") as f:
                    if f.read() != data:
                        bad.append(p)
        errs = all_at_once(mounts, read_all)
        eq((errs, bad), ([], []), "%s: %d hosts read the whole tree right" % (setup, HOSTS))
        tree = sum(len(d) for d in files.values())
        got = file_bytes(ng, n)
        diag("whole tree, %s: origin served %.2f times the tree (%d hosts, %.1f MiB)" %
             (setup, got / tree, HOSTS, tree / MiB))
        if proxy:
            # each host's hsmfs-http says what came from the tier's cache
            # (hsmfsctl stats; sent at most once a second)
            def counted():
                tier = origin = 0
                for m in mounts:
                    rc, out = run([HSMFSCTL, "stats", "--json", m.mnt])
                    c = {x["counter"]: x["value"]
                         for x in json.loads(out).get("hook_counters", [])}
                    if c.get("tier_bytes_total", 0) + c.get("origin_bytes_total", 0) < tree:
                        return None
                    tier += c["tier_bytes_total"]
                    origin += c["origin_bytes_total"]
                return tier, origin
            tier, origin = wait_for(counted, "every host's counters")
            diag("whole tree, %s: the hosts say %.1f MiB from the tier's cache, %.1f MiB "
                 "from the origin through it" % (setup, tier / MiB, origin / MiB))
            if setup == "squid":
                # nginx with slice says the status of a request's first
                # slice (hsmfs-http(1), PROXIES): only squid's is exact
                ok(tier > 0, "hsmfsctl stats counts bytes from squid's cache (%d)" % tier)
        return got / tree
    finally:
        for m in mounts:
            m.stop()


def random_reads(setup, ng, files, proxy):
    hook = "hook=%s%s,origin=%s" % (HTTP, " --proxy '%s'" % proxy if proxy else "", ng.url())
    mounts = hosts(HOSTS, hook)
    big = [p for p in files if p.startswith("big/")]
    plan = {}
    rnd = random.Random(int(os.environ.get("HSMFS_SEED", "51")))
    for i in range(HOSTS):
        plan[i] = [(rnd.choice(big), 0) for _ in range(READS)]
        plan[i] = [(p, rnd.randrange(0, len(files[p]) // 4096) * 4096) for p, _ in plan[i]]
    try:
        for m in mounts:
            m.start()
        n = len(ng.log())
        bad = []

        def read_some(m):
            for p, o in plan[mounts.index(m)]:
                if dread(m.path(p), o, 4096) != files[p][o:o + 4096]:
                    bad.append((p, o))
        errs = all_at_once(mounts, read_some)
        eq((errs, bad), ([], []), "%s: %d hosts' random reads right" % (setup, HOSTS))
        got = file_bytes(ng, n)
        if os.environ.get("HSMFS_TIER_DEBUG"):
            import collections
            diag(repr(collections.Counter(r[3] for r in ng.log()[n:]).most_common(10)))
        slices = {(p, o // MiB) for reads in plan.values() for p, o in reads}
        need = sum(min(MiB, len(files[p]) - s * MiB) for p, s in slices)
        read = HOSTS * READS * 4096
        diag("random 4 KiB reads, %s: origin served %.2f times the distinct 1 MiB slices, "
             "%.2f times the bytes read" % (setup, got / need, got / read))
        return got / need, got / read
    finally:
        for m in mounts:
            m.stop()


def test():
    if not Squid.available():
        skip("cache tiers", "squid is not installed")
        return
    root, files = make_tree()
    with Nginx(root) as ng:
        none = whole_tree("no tier", ng, files, None)
        ok(none > HOSTS * 0.9, "no tier: the origin serves the tree once a host (%.2f)" % none)
        with Squid() as sq:
            r = whole_tree("squid", ng, files, sq.url() + ";DIRECT")
            ok(r <= 1.05, "behind squid the origin serves the tree about once (%.2f)" % r)
            ok(any("TCP_" in l for l in sq.log()), "through squid (its access log)")
        cache = tmpdir("hsmfs-tier-cache-")
        with nginx_tier(ng.url(), cache) as tier:
            r = whole_tree("nginx tier", ng, files, tier.url().rstrip("/") + ";DIRECT")
            ok(r <= 1.05, "behind the nginx tier the origin serves the tree about once (%.2f)" % r)
            ok(len(tier.log()) > len(files), "through the tier (its access log)")
        cache = tmpdir("hsmfs-tier-cache-")
        with nginx_tier(ng.url(), cache) as tier:
            per_slice, _ = random_reads("nginx tier", ng, files,
                                        tier.url().rstrip("/") + ";DIRECT")
            ok(per_slice <= 1.1, "random reads behind the nginx tier: the origin serves "
               "the slices they need about once (%.2f)" % per_slice)
        _, per_read = random_reads("no tier", ng, files, None)
        ok(per_read <= 4, "random reads with no tier fetch at most 4 times what they read "
           "(%.2f)" % per_read)


if __name__ == "__main__":
    main(test)
