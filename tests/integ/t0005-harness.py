#!/usr/bin/env python3
"""The harness's own promises that other tests lean on.

Nginx.log() is the record most HTTP tests check ("the origin was asked
for its bytes only"): a response read in full must be in it at once.
nginx writes a request's line after the response's last byte, so
reading the file alone misses a line now and then (14 and 3 in 20000
requests in two runs here); log() first waits for nginx (see
Nginx.settle).  This asks a small file 5000 times on one kept-alive
connection and looks at the log after each response.
"""
import http.client
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Nginx, eq, main, ok, tmpdir  # noqa: E402

N = int(os.environ.get("HSMFS_HARNESS_REQUESTS", "5000"))


def test_log_complete():
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o755)
    with open(os.path.join(root, "f"), "wb") as f:
        f.write(b"x" * 100)
    with Nginx(root) as ng:
        c = http.client.HTTPConnection("127.0.0.1", ng.port, timeout=30)
        logpath = os.path.join(ng.dir, "access.log")
        late = []
        for i in range(1, N + 1):
            c.request("GET", "/f?%d" % i)
            r = c.getresponse()
            r.read()
            ng.settle()
            with open(logpath, "rb") as f:  # its last line: log() would parse all
                f.seek(max(0, os.fstat(f.fileno()).st_size - 200))
                last = f.read().decode().splitlines()[-1:]
            if not last or last[0].split()[1] != "/f?%d" % i:
                late.append((i, last))
        c.close()
        eq(late[:5], [], "every response read is in the log at once (%d of %d late)"
           % (len(late), N))
        log = ng.log()
        eq(len(log), N, "and the barrier's own requests are not")
        ok(all(st == 200 for (_m, _u, st, *_r) in log), "all answered 200")


def run():
    test_log_complete()


if __name__ == "__main__":
    main(run)
