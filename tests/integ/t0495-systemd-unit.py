#!/usr/bin/env python3
"""The example systemd units (doc/examples/mnt-tree.{mount,automount}).

Installed with meson install --destdir, they pass systemd-analyze verify
(with the installed man pages their Documentation= names); the same
verify refuses the unit under a name its Where= does not give, so it
does read it.  hsmfs(8)'s SYSTEMD section shows the unit's lines and the
fstab line the unit's comment gives.  That mount(8) passes the unit's
Options= through to hsmfs is t0050's (it needs root).  No mount.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFS, diag, eq, main, ok, run, skip, tmpdir  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.path.dirname(os.path.abspath(HSMFS))


def directives(text):
    """The unit's KEY=VALUE lines, without comments and sections."""
    return [ln for ln in text.splitlines() if re.match(r"[A-Za-z]+=", ln)]


def test():
    if not shutil.which("meson") or not os.path.isdir(os.path.join(BUILD, "meson-info")):
        skip("the installed units", "no meson, or %s is not a meson build" % BUILD)
        return
    dest = tmpdir("hsmfs-destdir-")
    try:
        rc, out = run(["meson", "install", "-C", BUILD, "--destdir", dest, "--no-rebuild",
                       "--quiet"])
        if not eq(rc, 0, "meson install --destdir"):
            diag(out[-2000:])
            return
        units = sorted(glob.glob(os.path.join(dest, "**", "doc", "hsmfs", "examples", "mnt-tree.*"),
                                 recursive=True))
        eq([os.path.basename(u) for u in units], ["mnt-tree.automount", "mnt-tree.mount"],
           "the units are installed in share/doc/hsmfs/examples")
        if len(units) != 2:
            return
        with open(units[1]) as f:
            mount = f.read()
        with open(units[0]) as f:
            automount = f.read()
        check_manpage(mount, automount)

        analyze = shutil.which("systemd-analyze")
        if not analyze:
            skip("systemd-analyze verify", "systemd-analyze is not installed (package systemd)")
            return
        mans = glob.glob(os.path.join(dest, "**", "share", "man"), recursive=True)
        env = dict(os.environ, SYSTEMD_LOG_COLOR="0")
        man = "--man=no"
        if shutil.which("man") and mans:
            env["MANPATH"] = mans[0]
            man = "--man=yes"
        rc, out = run([analyze, "verify", man] + units, env=env)
        eq((rc, out), (0, ""), "systemd-analyze verify %s: both units" % man)
        other = os.path.join(dest, "mnt-other.mount")
        shutil.copy(units[1], other)
        rc, out = run([analyze, "verify", "--man=no", other], env=env)
        ok(rc != 0 and "Where=" in out, "and it refuses the unit named for another mountpoint")
        if shutil.which("systemd-escape"):
            name = subprocess.run(["systemd-escape", "--path", "--suffix=mount", "/mnt/tree"],
                                  stdout=subprocess.PIPE, check=True).stdout.decode().strip()
            eq(name, "mnt-tree.mount", "its name is systemd-escape --path --suffix=mount's")
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def check_manpage(mount, automount):
    """hsmfs(8)'s SYSTEMD shows the units as installed, and the fstab line
    of the unit's comment."""
    with open(os.path.join(SRC, "man", "hsmfs.8")) as f:
        page = f.read()
    sec = page.split("\n.SH SYSTEMD\n", 1)[-1].split("\n.SH ", 1)[0].replace("\\-", "-")
    ok(sec != page, "hsmfs(8) has a SYSTEMD section")
    shown = [ln for ln in sec.splitlines() if re.match(r"[A-Za-z]+=", ln)]
    want = directives(mount) + [d for d in directives(automount) if not d.startswith(
        ("Description=", "Documentation="))]
    eq(shown, want, "it shows the units' lines as installed")
    fstab = re.findall(r"^#   (/srv/store .*)$", mount, re.M)
    ok(len(fstab) == 1 and fstab[0] in sec.splitlines(),
       "and the fstab line the unit's comment pairs it with: %s" % fstab)
    unit = dict(d.split("=", 1) for d in directives(mount))
    ok(fstab and fstab[0].split() == [unit["What"], unit["Where"], unit["Type"], unit["Options"],
                                       "0", "0"],
       "which says what the unit says")
    auto = re.findall(r"^#   (/srv/store .*)$", automount, re.M)
    ok(len(auto) == 1 and auto[0].split()[3] == unit["Options"] + ",x-systemd.automount",
       "the automount's fstab line adds x-systemd.automount")


main(test)
