#!/usr/bin/env python3
"""Origins that serve a directory's index.html instead of its index (#50).

nginx's default `index index.html` (with autoindex on: the page wins)
and python's http.server (which cannot turn it off) answer a directory
holding index.html with that page.  Such a directory gets a best-effort
listing: index.html and the names one level down the page links to,
each confirmed by a HEAD; its user.hsmfs.state says ",partial"; nothing
is EIO; doctor fails and names the fix.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Mount, Nginx, eq, free_port, main, ok, run,  # noqa: E402
                     tmpdir, wait_for, write_tree)

HTTP = os.environ.get("HSMFS_HTTP") or os.path.join(
    os.path.dirname(os.environ.get("HSMFS", "")), "hsmfs-http")

PAGE = b"""<!DOCTYPE html><html><head><title>The docs</title></head><body>
<a href="guide.txt">guide</a> <a href="sub/">sub</a> <a href="./guide.txt">again</a>
<a href="gone.txt">gone</a> <a href="../up.txt">up</a> <a href="/abs.txt">abs</a>
<a href="https://other.example/x">other</a> <a href="deep/er.txt">deeper</a>
<a href="sp%20ace.txt">space</a> <a href="#top">top</a>
</body></html>
"""


def make_origin():
    root = tmpdir("hsmfs-origin-")
    files = {
        "top.txt": b"top\n",
        "docs/index.html": PAGE,
        "docs/guide.txt": os.urandom(5000),
        "docs/sp ace.txt": b"spaced\n",
        "docs/unlinked.txt": b"not linked\n",
        "docs/sub/inner.txt": os.urandom(3000),
        "docs/deep/er.txt": b"deep\n",
    }
    write_tree(root, files)
    return root, files


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check(m, files, what):
    eq(sorted(os.listdir(m.path("docs"))), ["guide.txt", "index.html", "sp ace.txt", "sub"],
       "%s: the page's directory lists index.html and the names it links to" % what)
    for name in ("index.html", "guide.txt", "sp ace.txt", "sub/inner.txt"):
        eq(read(m.path("docs", name)), files["docs/" + name],
           "%s: docs/%s byte for byte" % (what, name))
    eq(os.getxattr(m.path("docs"), "user.hsmfs.state"), b"listed,partial",
       "%s: user.hsmfs.state marks the directory partial" % what)
    eq(os.getxattr(m.path("docs/sub"), "user.hsmfs.state"), b"unlisted",
       "%s: its subdirectory is a directory, not listed yet" % what)
    eq(sorted(os.listdir(m.path("docs/sub"))), ["inner.txt"],
       "%s: the linked directory lists (an index there)" % what)
    eq(os.getxattr(m.path("docs/sub"), "user.hsmfs.state"), b"listed",
       "%s: an index's directory is not partial" % what)
    st = run([HSMFSCTL, "status", m.path("docs")])[1]
    ok("partial" in st, "%s: hsmfsctl status shows partial" % what)
    rc, out = run([HSMFSCTL, "doctor", m.mnt])
    ok(rc != 0, "%s: doctor exits non-zero (%d)" % (what, rc))
    ok("fail" in out and "index .hsmfs-no-index;" in out and "autoindex_format json" in out,
       "%s: doctor names the fix: %r" % (what, out[-600:]))


def test_nginx_index():
    """nginx, autoindex json on and `index index.html` (its default)."""
    root, files = make_origin()
    with Nginx(root, extra="index index.html;") as ng, \
            Mount(store=tmpdir("hsmfs-store-"),
                  opts="hook=%s,origin=%s" % (HTTP, ng.url())) as m:
        eq(sorted(os.listdir(m.mnt)), ["docs", "top.txt"], "nginx: the root is an index")
        check(m, files, "nginx")
        # the fix doctor names: an `index` no file has, and the JSON autoindex
        ng.stop()
        ng.extra = "index .hsmfs-no-index;"
        ng.start(ng.port)
        rc, out = run([HSMFSCTL, "refresh", m.path("docs")])
        eq(rc, 0, "refresh after the fix: %s" % out)
        eq(sorted(os.listdir(m.path("docs"))),
           ["deep", "guide.txt", "index.html", "sp ace.txt", "sub", "unlinked.txt"],
           "with `index .hsmfs-no-index;` every name is listed")
        eq(os.getxattr(m.path("docs"), "user.hsmfs.state"), b"listed",
           "and the directory is no longer partial")
        eq(read(m.path("docs/unlinked.txt")), files["docs/unlinked.txt"],
           "a name the page did not link reads byte for byte")


def test_python_http_server():
    """python3 -m http.server: a directory with index.html is the page."""
    root, files = make_origin()
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                            "--directory", root, str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import socket

        def up():
            if srv.poll() is not None:
                raise RuntimeError("http.server exited")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(up, "http.server listening")
        with Mount(store=tmpdir("hsmfs-store-"),
                   opts="hook=%s,origin=http://127.0.0.1:%d/" % (HTTP, port)) as m:
            eq(sorted(os.listdir(m.mnt)), ["docs", "top.txt"], "python: the root is an index")
            check(m, files, "python")
    finally:
        srv.terminate()
        srv.wait()


def test():
    test_nginx_index()
    test_python_http_server()


if __name__ == "__main__":
    main(test)
