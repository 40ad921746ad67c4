#!/usr/bin/env python3
"""Bash completion (cmd/hsmfs-completion.bash) in a real interactive bash.

An interactive bash on a pseudo-terminal, where readline splits the
line into words itself (at =, : and so on), is typed each line and a
TAB; a key bound with bind -x then prints what the line became, and
readline's listing (one match a line) says what was offered.  Checked:
hsmfsctl's subcommands and options (every one its --help names),
hsmfs's -o names read from hsmfs --help (also after a comma, and values
after =), hsmfs-http's options (every one its --help names), directory
names; the install puts the file and its two links where bash-completion
looks, under the commands' names; and, where bash-completion is
installed, that it finds the file by itself on a command's first TAB.
No mount.
"""
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFS, HSMFSCTL, DEADLINE, diag, eq, main, ok, run, skip, tmpdir  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FILE = os.path.join(SRC, "cmd", "hsmfs-completion.bash")
BUILD = os.path.dirname(os.path.abspath(HSMFS))
HTTP = os.path.join(BUILD, "hsmfs-http")
SYSTEM_BC = "/usr/share/bash-completion/bash_completion"
PROMPT = "PS1>"


class Bash:
    """An interactive bash on a pty, its PATH starting at the build."""

    def __init__(self, setup):
        import fcntl
        import struct
        import termios
        self.home = tmpdir("hsmfs-bash-")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 1000, 0, 0))
        env = {"PATH": "%s:/usr/bin:/bin" % BUILD, "HOME": self.home, "TERM": "dumb",
               "INPUTRC": "/dev/null", "PS1": PROMPT, "LC_ALL": "C.UTF-8"}
        self.proc = subprocess.Popen(["bash", "--norc", "--noprofile", "-i"], stdin=slave,
                                     stdout=slave, stderr=slave, env=env, cwd=self.home,
                                     start_new_session=True)
        os.close(slave)
        self.fd = master
        self.buf = b""
        for line in setup + [
                "bind 'set completion-display-width 0'",  # one match a line
                "bind 'set completion-query-items 10000'",
                "bind 'set page-completions off'",
                "bind 'set enable-bracketed-paste off'",
                "bind 'set show-all-if-ambiguous on'",
                "bind -x '\"\\C-x\\C-p\": printf \"\\n<<%s>>\\n\" \"$READLINE_LINE\"'",
                "bind -x '\"\\C-x\\C-a\": printf \"\\n[[start]]\\n\"'",
                "echo setup'-'done"]:
            os.write(self.fd, line.encode() + b"\n")
        self.read_until(b"setup-done\r\n")

    def read_until(self, pattern):
        end = time.monotonic() + DEADLINE
        while True:
            m = re.search(pattern, self.buf, re.S)
            if m:
                self.buf = self.buf[m.end():]
                return m
            left = end - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise TimeoutError("bash: no %r in %r" % (pattern, self.buf[-500:]))
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    self.buf += os.read(self.fd, 65536)
                except OSError:
                    pass

    def complete(self, line):
        """(the line after a TAB at its end, the matches readline listed)."""
        os.write(self.fd, b"\x18\x01")  # [[start]]
        self.read_until(rb"\[\[start\]\]\r?\n")
        os.write(self.fd, line.encode() + b"\t")
        os.write(self.fd, b"\x18\x10")  # <<the line>>
        m = self.read_until(rb"(.*?)\r?\n<<(.*?)>>\r?\n")
        os.write(self.fd, b"\x15")  # empty the line
        shown = m.group(1).decode(errors="replace").replace("\r", "")
        listed = [s.strip() for s in shown.split("\n")
                  if s.strip() and not s.startswith(PROMPT) and not s.startswith(line)]
        return m.group(2).decode(), listed

    def offered(self, line):
        """Every match a TAB at the end of line offers: the ones listed, or
        the one it completed to (the word at the end)."""
        after, listed = self.complete(line)
        if listed:
            return listed
        return [after.rstrip(" ").split(" ")[-1]] if after != line else []

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self.fd)
        shutil.rmtree(self.home, ignore_errors=True)


def help_options(text):
    return sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text)))


def checks(sh, label):
    """The completions of sh, sourced by hand or loaded by bash-completion."""
    got = sh.offered("hsmfsctl st")
    eq(sorted(got), ["stats", "status"], label + ": hsmfsctl st<TAB> offers status and stats")
    eq(sh.complete("hsmfs s m -o hoo")[0], "hsmfs s m -o hook=",
       label + ": hsmfs s m -o hoo<TAB> completes to hook=")
    eq(sh.complete("hsmfs s m -o timeout=3,hoo")[0], "hsmfs s m -o timeout=3,hook=",
       label + ": and after a comma and an =, the last option of the list")
    # readline shows them as "=cached": bash's word there is the "="
    eq(sorted(s.lstrip("=") for s in sh.offered("hsmfs s m -o cold_reads=")),
       ["cached", "direct"], label + ": the values of cold_reads= (from --help's a|b)")
    eq(sh.complete("hsmfs s m -o ro,cold_reads=d")[0], "hsmfs s m -o ro,cold_reads=direct",
       label + ": and one completed")
    eq(sorted(sh.offered("hsmfs s m -o allow_")), ["allow_other", "allow_root"],
       label + ": the kernel's options too")
    os.makedirs(os.path.join(sh.home, "mnt-a", "sub"), exist_ok=True)
    open(os.path.join(sh.home, "mnt-file"), "w").close()
    eq(sh.complete("hsmfsctl stats mnt")[0], "hsmfsctl stats mnt-a/",
       label + ": a MOUNTPOINT: directories only")
    ok("mnt-file" in " ".join(sh.offered("hsmfsctl status mnt")),
       label + ": a PATH: files too")
    eq(sh.complete("hsmfs-http --aws-k")[0], "hsmfs-http --aws-keys-file ",
       label + ": hsmfs-http's options")


def test():
    if not shutil.which("bash"):
        skip("bash completion", "no bash")
        return
    rc, ctl_help = run([HSMFSCTL, "--help"])
    rc2, http_help = run([HTTP, "--help"])
    rc3, hsmfs_help = run([HSMFS, "--help"])
    sh = Bash(["source %s" % FILE])
    try:
        checks(sh, "sourced")
        # every subcommand and option hsmfsctl --help names
        subs = re.findall(r"^(?:usage:)? +hsmfsctl ([a-z][a-z|-]*)", ctl_help, re.M)
        subs = sorted({s for group in subs for s in group.split("|")})
        eq(sorted(s for s in sh.offered("hsmfsctl ") if not s.startswith("-")), subs,
           "hsmfsctl <TAB>: the subcommands of --help")
        missing = []
        for line in re.findall(r"^(?:usage:)? +hsmfsctl ([a-z][a-z|-]*)(.*(?:\n {20,}.*)*)",
                               ctl_help, re.M):
            for sub in line[0].split("|"):
                want = set(help_options(line[1])) | set(re.findall(r" (-[sm]) ", line[1]))
                have = set(sh.offered("hsmfsctl %s -" % sub))
                missing += ["%s %s" % (sub, o) for o in sorted(want - have)]
        eq(missing, [], "hsmfsctl SUB -<TAB>: every option of --help")
        eq(sorted(set(help_options(http_help)) - set(sh.offered("hsmfs-http --"))), [],
           "hsmfs-http --<TAB>: every option of --help")
        names = sh.offered("hsmfs s m -o ")
        ours = re.findall(r"^  ([a-z_]+)", hsmfs_help.split("hsmfs options (-o):")[1]
                          .split("\n\n")[0], re.M)
        eq(sorted(set(ours) - {n.rstrip("=") for n in names}), [],
           "hsmfs -o <TAB>: every option of hsmfs --help (%d offered)" % len(names))
    finally:
        sh.close()

    # the install: the file and its links under the commands' names
    try:
        with open(os.path.join(BUILD, "meson-info", "intro-installed.json")) as f:
            installed = json.load(f)
    except OSError:
        installed = None
    if installed is None:
        skip("installed where bash-completion looks", "no meson-info in %s" % BUILD)
    else:
        dest = {os.path.basename(v): os.path.dirname(v) for v in installed.values()
                if "bash-completion" in v}
        ok(sorted(dest) == ["hsmfs", "hsmfs-http", "hsmfsctl"] and len(set(dest.values())) == 1 and
           list(dest.values())[0].endswith("/bash-completion/completions"),
           "installed as completions/hsmfs, hsmfsctl and hsmfs-http: %s" % dest)

    # bash-completion itself: it finds the file by the command's name
    if not os.path.exists(SYSTEM_BC):
        skip("bash-completion loads it on first use",
             "bash-completion is not installed (Debian package bash-completion)")
        return
    d = tmpdir("hsmfs-bc-")
    os.makedirs(os.path.join(d, "completions"))
    shutil.copy(FILE, os.path.join(d, "completions", "hsmfs"))
    for name in ("hsmfsctl", "hsmfs-http"):
        os.symlink("hsmfs", os.path.join(d, "completions", name))
    sh = Bash(["export BASH_COMPLETION_USER_DIR=%s" % d, "source %s" % SYSTEM_BC])
    try:
        checks(sh, "bash-completion")
    finally:
        sh.close()
        shutil.rmtree(d, ignore_errors=True)


main(test)
