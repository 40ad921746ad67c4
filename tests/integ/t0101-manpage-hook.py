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


def example_code():
    text = open(MAN).read()
    sect = text.split(".SH EXAMPLE", 1)[1]
    body = sect.split(".RS\n", 1)[1].split("\n.RE", 1)[0]
    return body.replace("\\\\", "\\").replace("\\(->", "->")


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
    import shutil
    shutil.rmtree(mirror, ignore_errors=True)


if __name__ == "__main__":
    main(test)
