#!/usr/bin/env python3
"""The Python fill hook printed in hsmfs-hooks(7) works as printed.

The EXAMPLE section of man/hsmfs-hooks.7 is extracted, pointed at this
test's mount and mirror, run as the mount's only fill hook, and a
placeholder read through it must return the mirror's bytes.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Mount, eq, import_manifest, main, ok, tmpdir

MAN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "man",
                   "hsmfs-hooks.7")


PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def example_code(which=0):
    """The which-th .RS block of the EXAMPLE section, as printed."""
    text = open(MAN).read()
    sect = text.split(".SH EXAMPLE", 1)[1]
    body = sect.split(".RS\n")[1 + which].split("\n.RE", 1)[0]
    return body.replace("\\\\", "\\").replace("\\(->", "->").replace("\\-", "-")


def test():
    code = example_code()
    ok("SCM_RIGHTS" not in code and "recvmsg" in code, "example extracted from the man page")
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(3 * 1024 * 1024 + 123)
    with open(os.path.join(mirror, "blob"), "wb") as f:
        f.write(data)
    with Mount() as m:
        rc, out = import_manifest(m.mnt, [{"path": "blob", "size": len(data)}])
        eq(rc, 0, "import a placeholder")
        code = code.replace('"/mnt/data"', repr(m.mnt)).replace('"/srv/mirror"', repr(mirror))
        hook = subprocess.Popen([sys.executable, "-c", code])
        try:
            with open(m.path("blob"), "rb") as f:
                got = f.read()
            eq(got == data, True, "a read through the man page's hook returns the origin bytes")
        finally:
            hook.kill()
            hook.wait()
        # the second example, on the installed module (here: the source's)
        code2 = example_code(1)
        ok("import os, hsmfs_hook" in code2, "the module example extracted")
        rc, out = import_manifest(m.mnt, [{"path": "blob2", "size": len(data),
                                           "url": "blob"}])
        eq(rc, 0, "import a placeholder whose origin is blob")
        code2 = code2.replace('"/mnt/data"', repr(m.mnt)).replace('"/srv/mirror"', repr(mirror))
        hook = subprocess.Popen([sys.executable, "-c", code2],
                                env=dict(os.environ, PYTHONPATH=PYTHON))
        try:
            with open(m.path("blob2"), "rb") as f:
                got = f.read()
            eq(got == data, True, "a read through the module example's hook")
        finally:
            hook.kill()
            hook.wait()
    # the third: a lazy mount of a local tree, directories listed on first look
    code3 = example_code(2)
    ok('"PRE_DIR"' in code3, "the listing example extracted")
    files = {"top": os.urandom(1000), "d/e/deep": os.urandom(200000), "d/x y": b"",
             "empty-dir/": None}
    for p, d in files.items():
        full = os.path.join(mirror, "tree", p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if d is not None:
            with open(full, "wb") as f:
                f.write(d)
    with Mount(opts="origin=local") as m:
        code3 = code3.replace('"/mnt/data"', repr(m.mnt)).replace(
            '"/srv/tree"', repr(os.path.join(mirror, "tree")))
        hook = subprocess.Popen([sys.executable, "-c", code3],
                                env=dict(os.environ, PYTHONPATH=PYTHON))
        try:
            got = {}
            for d, dirs, fs in os.walk(m.mnt):
                for n in dirs:
                    if not os.listdir(os.path.join(d, n)):
                        got[os.path.relpath(os.path.join(d, n), m.mnt) + "/"] = None
                for n in fs:
                    with open(os.path.join(d, n), "rb") as f:
                        got[os.path.relpath(os.path.join(d, n), m.mnt)] = f.read()
            eq(sorted(got), sorted(files), "the mount shows the tree, listed on first look")
            ok(all(got[k] == v for k, v in files.items()), "with the tree's bytes")
        finally:
            hook.kill()
            hook.wait()
    import shutil
    shutil.rmtree(mirror, ignore_errors=True)


if __name__ == "__main__":
    main(test)
