#!/usr/bin/env python3
"""A zero-setup store's origin at mount, and mounted again with another.

A new store whose origin cannot be listed (a wrong path, an unknown
scheme, nothing listening, a page that is no listing) fails the mount
with one line naming the cause and exit status 6, and is left unmounted
(it mounted, and every look failed with a bare EIO).  With nofail the
mount goes on and the first look fails; the root stays unlisted, and
mounted again with the right origin it is listed from it (it kept asking
the wrong URL for good).  A root listed before keeps its names, and the
log says the new origin is not used for them.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, HSMFSCTL, DaemonError, Mount, Nginx, diag, eq, errno_of, free_port,  # noqa: E402
                     is_mounted, main, ok, run, tmpdir, unmount, wait_for, write_tree)

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")


def mount_fails(store, origin, cause, what):
    """hsmfs daemonized, as a user types it: exit 6 and one line naming
    cause and the option to fix, nothing left mounted."""
    mnt = tmpdir("hsmfs-mnt-")
    try:
        r = subprocess.run([HSMFS, store, mnt, "-o", "hook=%s,origin=%s" % (HTTP, origin)],
                           capture_output=True, text=True, timeout=60)
        lines = r.stderr.strip().splitlines()
        eq(r.returncode, 6, "%s: the mount fails (exit 6)" % what)
        ok(len(lines) == 1 and cause in lines[0] and "origin=" in lines[0],
           "%s: one line naming the cause (%s) and origin=" % (what, cause)) or diag(r.stderr)
        ok(not is_mounted(mnt), "%s: nothing is left mounted" % what)
    finally:
        if is_mounted(mnt):
            unmount(mnt, lazy=True)
        os.rmdir(mnt)


def test():
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o755)
    write_tree(root, {"data/a.txt": b"alpha", "data/sub/b.txt": b"beta",
                      "page/index.html": b"<html><body>not a listing</body></html>"})
    with Nginx(root) as ng:
        mount_fails(store, ng.url("dta/"), "HTTP 404", "a wrong path")
        mount_fails(store, "htp://127.0.0.1/", "Unsupported protocol", "an unknown scheme")
        mount_fails(store, "http://127.0.0.1:%d/" % free_port(), "connect",
                    "an origin not listening")
        mount_fails(store, ng.url("page/"), "listing", "a page that is no listing")
        # the store of a failed first mount, imported instead: the import says
        # what the root holds, and a refresh takes the import's listing, not
        # the wrong origin the failed mount left on the root (EIO, exit 4)
        imp = tmpdir("hsmfs-store-")
        mount_fails(imp, ng.url("dta/"), "HTTP 404", "a wrong path, then imported")
        rc, out = run([HSMFSCTL, "import", "-s", imp, "--listing", ng.url("data/")])
        eq(rc, 0, "imported from the right listing: " + out.strip())
        with Mount(store=imp, opts="hook=" + HTTP) as m:
            eq(sorted(os.listdir(m.mnt)), ["a.txt", "sub"], "the import's names")
            rc, out = run([HSMFSCTL, "refresh", "--recursive", m.mnt])
            ok(rc == 0 and "Input/output error" not in out,
               "a refresh lists the import's origin: %s" % out.strip())
        shutil.rmtree(imp, ignore_errors=True)
        # the same in the foreground, with --ready-fd: closed unwritten
        m = Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("dta/")))
        try:
            m.start()
            ok(False, "-f --ready-fd: the mount fails")
            m.stop()
        except DaemonError as e:
            ok("exited 6" in str(e) and "HTTP 404" in m.output(),
               "-f --ready-fd: never ready, exit 6, the cause in the log") or diag(e)
        finally:
            m.cleanup()
        # nofail (or _netdev): the mount goes on, its first look fails
        with Mount(store=store, opts="nofail,hook=%s,origin=%s" % (HTTP, ng.url("dta/"))) as m:
            ok(errno_of(lambda: os.listdir(m.mnt)) != 0,
               "a mistyped origin with nofail: mounted, the first look fails")
            # the hook's line reaches the daemon through a pipe: a moment later
            said = wait_for(lambda: (lambda out: "HTTP 404" in out and out)(
                run([HSMFSCTL, "hooks", m.mnt])[1]), "the hook's last line in hsmfsctl hooks")
            ok("last said" in said, "hsmfsctl hooks shows why the origin fails") or diag(said)
            rc, out = run([HSMFSCTL, "doctor", m.mnt])
            ok(rc == 4 and re.search(r"^fail +origin .*dta/: HTTP 404$", out, re.M) and
               "last said" in out, "hsmfsctl doctor fails, naming the origin's 404") or diag(out)
            ok("consistency check" not in m.output(),
               "a new store logs no consistency check after an unclean stop")
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/"))) as m:
            eq(sorted(os.listdir(m.mnt)), ["a.txt", "sub"],
               "mounted again with the right origin: the root is listed from it")
            ok("refused" not in m.output(), "a right origin passes the check at mount")
            rc, out = run([HSMFSCTL, "doctor", m.mnt])
            ok(rc == 0 and re.search(r"^ok +origin .*data/ answers$", out, re.M) and
               re.search(r"^ok +hook hsmfs-http .*fill", out, re.M),
               "hsmfsctl doctor: healthy, its fill hook and origin there") or diag(out)
            eq(open(m.path("sub", "b.txt"), "rb").read(), b"beta", "and its files read")
            ok(m.logged("never listed"), "the log says the root is listed from the new origin")
        uris = [u for _, u, _, _, _, _ in ng.log()]
        ok("/data/" in uris, "the new origin was asked (%s)" % uris)
        eq(ng.probes(), ["/dta/", "/page/", "/dta/", "/dta/", "/dta/", "/data/", "/data/"],
           "each mount of a root never listed checked its origin with one HEAD, nofail "
           "did not; and each hsmfsctl doctor")
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("other/"))) as m:
            eq(sorted(os.listdir(m.mnt)), ["a.txt", "sub"], "a listed root keeps its names")
            ok(m.logged("its directories keep the origins"), "and the log says so")
        # a plain directory with files, mounted with origin=: served as it
        # is, nothing listed, and the log says so (it said nothing)
        plain = tmpdir("hsmfs-plain-")
        write_tree(plain, {"mine.txt": b"mine"})
        with Mount(store=plain, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/"))) as m:
            eq(sorted(os.listdir(m.mnt)), ["mine.txt"], "a plain store with origin=: as it is")
            ok(m.logged("is not empty"), "and the log says nothing is listed from the origin")
        # daemonized, as a user types it: the warning reaches the terminal
        mnt = tmpdir("hsmfs-mnt-")
        r = subprocess.run([HSMFS, plain, mnt, "-o", "hook=%s,origin=%s" % (HTTP, ng.url("data/"))],
                           capture_output=True, text=True, timeout=60)
        ok(r.returncode == 0 and is_mounted(mnt) and
           r.stderr.startswith("hsmfs: warning: origin=") and "is not empty" in r.stderr,
           "daemonized: mounted, and the warning printed on the terminal (it said nothing)") \
            or diag(r.stderr)
        if is_mounted(mnt):
            unmount(mnt)
        os.rmdir(mnt)
        shutil.rmtree(plain, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


def test_set_origin():
    """The origin moved (its tree at another path): hsmfsctl set-origin
    points the store at it.  Before, the names stayed but every file not
    fetched yet failed with EIO (HTTP 404 at the old URL) and refresh
    listed the old one; after, they read from the new place, the bytes
    present stay (not fetched again), and a refresh lists the new one."""
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o755)
    write_tree(root, {"old/a.txt": b"alpha", "old/sub/b.txt": b"beta", "old/c.txt": b"gamma"})
    with Nginx(root) as ng:
        # no sibling prefetch: c.txt is not fetched along with a.txt
        with Mount(store=store, opts="prefetch=0,hook=%s,origin=%s" % (HTTP, ng.url("old/"))) as m:
            eq(open(m.path("a.txt"), "rb").read(), b"alpha", "a.txt read from the old place")
            eq(sorted(os.listdir(m.mnt)), ["a.txt", "c.txt", "sub"], "the root listed")
            eq(sorted(os.listdir(m.path("sub"))), ["b.txt"], "sub listed")
        os.rename(os.path.join(root, "old"), os.path.join(root, "new"))
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("new/"))) as m:
            ok(errno_of(lambda: open(m.path("c.txt"), "rb").read()) != 0,
               "moved: a file not fetched yet fails (its URL is the old one)")
        rc, out = run([HSMFSCTL, "set-origin", "-s", store, ng.url("old/"), ng.url("new/")])
        ok(rc == 0 and "now at %s" % ng.url("new/") in out,
           "hsmfsctl set-origin: %s" % out.strip())
        before = len(ng.log())
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("new/"))) as m:
            eq(open(m.path("c.txt"), "rb").read(), b"gamma", "c.txt reads from the new place")
            eq(open(m.path("sub/b.txt"), "rb").read(), b"beta", "and so does sub/b.txt")
            eq(open(m.path("a.txt"), "rb").read(), b"alpha", "a.txt, present, still reads")
            with open(os.path.join(root, "new", "d.txt"), "wb") as f:
                f.write(b"delta")
            rc, out = run([HSMFSCTL, "refresh", m.mnt])
            eq(os.listdir(m.mnt).count("d.txt"), 1, "a refresh lists the new place")
        uris = [u for _, u, _, _, _, _ in ng.log()[before:]]
        ok("/new/a.txt" not in uris and all(not u.startswith("/old/") for u in uris),
           "nothing asked of the old place, nothing present fetched again (%s)" % uris)
        rc, out = run([HSMFSCTL, "set-origin", "-s", store, ng.url("new/"), ng.url("x/")])
        ok(rc == 0, "set-origin again")
        with Mount(store=store) as m:
            rc, out = run([HSMFSCTL, "set-origin", "-s", store, ng.url("x/"), ng.url("y/")])
            ok(rc == 3 and "mounted" in out, "a mounted store is refused: %s" % out.strip())
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


main(lambda: (test(), test_set_origin()))
