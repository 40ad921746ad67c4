#!/usr/bin/env python3
"""The hook library as users get it: installed to a temporary prefix
(meson install --destdir), only its API exported (shared and static), a C
hook built against it through pkg-config and a Python hook on the
installed module, each filling a placeholder of a live mount.
"""
import glob
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFS, Mount, diag, eq, import_manifest, main, ok, skip, tmpdir  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.path.dirname(os.path.abspath(HSMFS))


def sh(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    return p.returncode, p.stdout.decode(errors="replace")


def exported(path, dynamic):
    rc, out = sh(["nm", "-g", "--defined-only"] + (["-D"] if dynamic else []) + [path])
    return sorted({l.split()[-1].split("@")[0] for l in out.splitlines()
                   if len(l.split()) == 3 and l.split()[1] in "TDBR"})


def run_hook(cmd, env, data, mirror):
    with Mount() as m:
        eq(import_manifest(m.mnt, [{"path": "f", "size": len(data)}])[0], 0, "import")
        hook = subprocess.Popen(cmd + [mirror, m.mnt] if cmd[-1] != "-c" else cmd, env=env)
        try:
            with open(m.path("f"), "rb") as f:
                return f.read() == data
        finally:
            hook.kill()
            hook.wait()


def test():
    if not shutil.which("pkg-config") or not shutil.which("cc"):
        skip("the installed hook library", "pkg-config or cc missing")
        return
    rc, out = sh(["ldd", os.path.join(BUILD, "libhsmfs-hook.so")])
    if any(s in out for s in ("libasan", "libtsan", "libubsan")):
        skip("the installed hook library", "a sanitizer build: its library needs the "
             "sanitizer runtime first in any program that loads it")
        return
    dest = tmpdir("hsmfs-destdir-")
    rc, out = sh(["meson", "install", "-C", BUILD, "--destdir", dest, "--no-rebuild",
                  "--quiet"])
    if not eq(rc, 0, "meson install --destdir"):
        diag(out[-2000:])
        return
    pcs = glob.glob(os.path.join(dest, "**", "hsmfs-hook.pc"), recursive=True)
    ok(len(pcs) == 1, "hsmfs-hook.pc installed")
    sos = glob.glob(os.path.join(dest, "**", "libhsmfs-hook.so.1"), recursive=True)
    ars = glob.glob(os.path.join(dest, "**", "libhsmfs-hook.a"), recursive=True)
    ok(len(sos) == 1 and len(ars) == 1, "a shared library with a versioned soname, and a static one")
    api = ["hsmfs_hook_allow", "hsmfs_hook_archived", "hsmfs_hook_chunk", "hsmfs_hook_close",
           "hsmfs_hook_connect", "hsmfs_hook_deny", "hsmfs_hook_event_flags", "hsmfs_hook_fd",
           "hsmfs_hook_filled", "hsmfs_hook_next", "hsmfs_hook_progress", "hsmfs_hook_stats",
           "hsmfs_hook_timeout_ms"]
    eq(exported(sos[0], True), api, "the shared library exports its API and nothing else")
    eq(exported(ars[0], False), api, "so does the static one")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]), PKG_CONFIG_SYSROOT_DIR=dest)
    rc, flags = sh(["pkg-config", "--cflags", "--libs", "hsmfs-hook"], env=env)
    eq(rc, 0, "pkg-config hsmfs-hook: %s" % flags.strip())
    work = tmpdir("hsmfs-lib-")
    exe = os.path.join(work, "mirror")
    srcs = glob.glob(os.path.join(dest, "**", "doc", "hsmfs", "examples", "hsmfs-mirror.c"),
                     recursive=True)
    ok(len(srcs) == 1, "the C example hsmfs-hooks(7) builds is installed")
    rc, out = sh(["cc", "-o", exe, srcs[0] if srcs else "hsmfs-mirror.c"] + flags.split(),
                 env=env)
    if not eq(rc, 0, "a hook built against the installed library through pkg-config"):
        diag(out[-2000:])
        return
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(300000)
    with open(os.path.join(mirror, "f"), "wb") as f:
        f.write(data)
    lib_env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(sos[0]))
    ok(run_hook([exe], lib_env, data, mirror), "it fills a placeholder (shared library)")
    rc, sflags = sh(["pkg-config", "--cflags", "hsmfs-hook"], env=env)
    sexe = os.path.join(work, "mirror-static")
    rc, out = sh(["cc", "-o", sexe, os.path.join(SRC, "cmd", "hsmfs-mirror.c")] +
                 sflags.split() + [ars[0]], env=env)
    eq(rc, 0, "and against the static library")
    ok(run_hook([sexe], dict(os.environ), data, mirror), "which fills a placeholder too")
    mods = glob.glob(os.path.join(dest, "**", "hsmfs_hook.py"), recursive=True)
    ok(len(mods) == 1, "the Python module installed: %s" % mods)
    if mods and os.path.exists("/usr/bin/python3"):
        # where the system's python3 finds it, with no PYTHONPATH
        where = os.path.dirname(mods[0])[len(dest.rstrip("/")):]
        rc, out = sh(["/usr/bin/python3", "-I", "-c", "import sys; print('\\n'.join(sys.path))"])
        prefix = sh(["meson", "introspect", "--buildoptions", BUILD])[1]
        import json
        pfx = [o["value"] for o in json.loads(prefix) if o["name"] == "prefix"][0]
        if pfx in ("/usr", "/usr/local"):
            ok(where in out.split(), "installed where /usr/bin/python3 looks (%s)" % where)
    if mods:
        code = ("import os, sys, hsmfs_hook\n"
                "mirror, mnt = sys.argv[1], sys.argv[2]\n"
                "h = hsmfs_hook.connect(mnt, 'fill', ['access'], 'py')\n"
                "for ev in h.events():\n"
                "    if 'cancel' in ev: continue\n"
                "    hs, he = ev['hint_start'], ev['hint_end']\n"
                "    with open(os.path.join(mirror, ev['path']), 'rb') as f:\n"
                "        f.seek(hs); os.pwrite(ev['fd'], f.read(he - hs), hs)\n"
                "    os.close(ev['fd']); h.allow(ev['id'], hs, he)\n")
        py_env = dict(os.environ, PYTHONPATH=os.path.dirname(mods[0]))
        ok(run_hook([sys.executable, "-c", code], py_env, data, mirror),
           "a hook on the installed Python module fills a placeholder")
    for d in (dest, work, mirror):
        shutil.rmtree(d, ignore_errors=True)


main(test)
