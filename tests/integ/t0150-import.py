#!/usr/bin/env python3
"""hsmfsctl import: every bad manifest is refused with FILE:LINE and the
reason, and nothing of it is applied; good ones are idempotent; import
never follows a symlink out of the store.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFSCTL, Mount, eq, main, ok, run, tmpdir, tree_snapshot  # noqa: E402

BAD = [
    ({"path": "/etc/passwd", "size": 1}, "absolute path"),
    ({"path": "a/../b", "size": 1}, "'..'"),
    ({"path": "a//b", "size": 1}, "empty component"),
    ({"path": "x" * 256, "size": 1}, "longer than 255"),
    ({"path": "a\u0000b", "size": 1}, "NUL"),
    ({"path": "n", "size": -5}, "negative size"),
    ({"path": "n", "size": "12"}, "must be a number"),
    ({"path": ".hsmfs/meta.db", "size": 1}, "reserved"),
]


def write_manifest(d, lines):
    p = os.path.join(d, "m.jsonl")
    with open(p, "w") as f:
        for l in lines:
            f.write((l if isinstance(l, str) else json.dumps(l)) + "\n")
    return p


def test():
    d = tmpdir("hsmfs-import-")
    store = os.path.join(d, "store")
    os.mkdir(store)
    good = {"path": "ok/file", "size": 10}
    rc, out = run([HSMFSCTL, "import", "-s", store, write_manifest(d, [good])])
    eq(rc, 0, "a good manifest imports")
    with Mount(store=store) as m:
        ok(m.proc.poll() is None and "unclean" not in m.output(),
           "the first mount of a store made by import -s is not taken for a crash")
    before = tree_snapshot(store)
    for entry, why in BAD:
        m = write_manifest(d, [good, {"path": "new/one", "size": 3}, entry])
        rc, out = run([HSMFSCTL, "import", "-s", store, m])
        ok(rc == 2 and ("%s:3: " % m) in out and why in out and "nothing imported" in out,
           "refused with file:line and the reason: %s" % why)
        eq(tree_snapshot(store), before, "nothing applied (%s)" % why)
    for text, why in [('{"path": "x", "size": 1', "expected ',' or '}'"),
                      ("not json", "expected a JSON object")]:
        m = write_manifest(d, [good, text])
        rc, out = run([HSMFSCTL, "import", "-s", store, m])
        ok(rc == 2 and ("%s:2: " % m) in out and why in out, "malformed JSON: %s" % why)
        eq(tree_snapshot(store), before, "nothing applied (malformed JSON)")
    m = write_manifest(d, [good, {"path": "dup", "size": 1}, {"path": "dup", "size": 2}])
    rc, out = run([HSMFSCTL, "import", "-s", store, m])
    ok(rc == 2 and "%s:3: duplicate path 'dup' (first at line 2)" % m in out, "duplicate paths")
    eq(tree_snapshot(store), before, "nothing applied (duplicates)")

    # idempotent
    m = write_manifest(d, [good, {"path": "more/x", "size": 5}])
    eq(run([HSMFSCTL, "import", "-s", store, m]), (0, "imported 2 files: 1 new, 0 changed, 1 unchanged\n"),
       "a second import adds only what is new")
    eq(run([HSMFSCTL, "import", "-s", store, m]), (0, "imported 2 files: 0 new, 0 changed, 2 unchanged\n"),
       "and a third changes nothing")

    # never through a symlink out of the store
    outside = os.path.join(d, "outside")
    os.mkdir(outside)
    os.symlink(outside, os.path.join(store, "link"))
    m = write_manifest(d, [{"path": "link/evil", "size": 1}])
    rc, out = run([HSMFSCTL, "import", "-s", store, m])
    ok(rc != 0 and "symlink" in out, "a symlinked directory is refused: " + out.strip().splitlines()[0])
    eq(os.listdir(outside), [], "nothing written outside the store")
    # an existing local file is never overwritten
    with open(os.path.join(store, "local"), "w") as f:
        f.write("mine")
    m = write_manifest(d, [{"path": "local", "size": 100}])
    rc, out = run([HSMFSCTL, "import", "-s", store, m])
    ok(rc != 0 and "not managed by hsmfs" in out, "an unmanaged local file is refused")
    eq(open(os.path.join(store, "local")).read(), "mine", "and kept")
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main(test)
