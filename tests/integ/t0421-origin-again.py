#!/usr/bin/env python3
"""A zero-setup store mounted again with another origin=.

A mistyped origin on the first mount: the first look fails (HTTP 404)
and the root stays unlisted; mounted again with the right origin, the
root is listed from it (it kept asking the wrong URL for good).  A root
listed before keeps its names, and the log says the new origin is not
used for them.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFS, Mount, Nginx, eq, errno_of, main, ok, tmpdir, write_tree  # noqa: E402

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")


def test():
    root, store = tmpdir("hsmfs-origin-"), tmpdir("hsmfs-store-")
    os.chmod(root, 0o755)
    write_tree(root, {"data/a.txt": b"alpha", "data/sub/b.txt": b"beta"})
    with Nginx(root) as ng:
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("dta/"))) as m:
            ok(errno_of(lambda: os.listdir(m.mnt)) != 0, "a mistyped origin: the first look fails")
            ok("consistency check" not in m.output(),
               "a new store logs no consistency check after an unclean stop")
        with Mount(store=store, opts="hook=%s,origin=%s" % (HTTP, ng.url("data/"))) as m:
            eq(sorted(os.listdir(m.mnt)), ["a.txt", "sub"],
               "mounted again with the right origin: the root is listed from it")
            eq(open(m.path("sub", "b.txt"), "rb").read(), b"beta", "and its files read")
            ok(m.logged("never listed"), "the log says the root is listed from the new origin")
        uris = [u for _, u, _, _, _, _ in ng.log()]
        ok("/data/" in uris, "the new origin was asked (%s)" % uris)
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
        shutil.rmtree(plain, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)


main(test)
