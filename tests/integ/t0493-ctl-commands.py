#!/usr/bin/env python3
"""hsmfsctl's commands, named alike wherever a person meets them.

hsmfsctl's table of commands (cmd/hsmfsctl.c) is read through its
--help, which is made from it: the synopsis lines name every command
("pin|prefetch" two), the paragraphs some of them.  The same commands,
no more and no fewer, must be in hsmfsctl(1)'s SYNOPSIS, in the words
the bash completion offers after hsmfsctl (cmd/hsmfs-completion.bash),
and in its case of each command's options; each one must be taken by
hsmfsctl (with no words after it: a usage message, exit 1, never
"unknown command"), and a paragraph must name a command.  A command
added to the table only, or dropped from one of the three, fails here.
No mount.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFSCTL, eq, main, ok, run  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def from_help(text):
    """(the commands of the synopsis lines in order, the paragraphs' names)."""
    synopsis, _, rest = text.partition("\n\n")
    names = []
    for group in re.findall(r"^(?:usage:)? +hsmfsctl ([a-z][a-z|-]*)", synopsis, re.M):
        names += group.split("|")
    paragraphs = re.findall(r"^([a-z][a-z-]*) ", rest, re.M)
    return names, paragraphs


def from_man(text):
    """The commands hsmfsctl(1)'s SYNOPSIS names, in order."""
    synopsis = text.split("\n.SH SYNOPSIS\n", 1)[1].split("\n.SH ", 1)[0]
    names = []
    for line in synopsis.splitlines():
        if not re.match(r"\.BR? ", line) or "hsmfsctl" not in line:
            continue
        words = line.split(None, 1)[1].replace("\\-", "-").replace('"', " ").split()
        for w in words[words.index("hsmfsctl") + 1:]:
            if w.startswith("-"):
                break
            if w != "|":
                names.append(w)
    return names


def from_completion(text):
    """(the words offered after hsmfsctl, the commands of its case of options)."""
    body = text.split("\n_hsmfsctl()\n", 1)[1].split("\n}\n", 1)[0]
    first = re.search(r"COMP_CWORD == 1\)\); then\n\s*_hsmfs_words((?:[^\n]*\\\n)*[^\n]*)",
                      body)
    words = first.group(1).replace("\\\n", " ").split()
    offered = [w for w in words if not w.startswith("-")]
    cases = body.split("case ${COMP_WORDS[1]} in", 1)[1].split("esac", 1)[0]
    labels = []
    for group in re.findall(r"^\t([a-z][a-z| -]*)\)", cases, re.M):
        labels += [w.strip() for w in group.split("|")]
    return offered, labels


def test():
    rc, help_text = run([HSMFSCTL, "--help"])
    eq(rc, 0, "hsmfsctl --help exits 0")
    names, paragraphs = from_help(help_text)
    ok(len(names) >= 10 and len(set(names)) == len(names),
       "--help names each command once: %s" % " ".join(names))
    eq(sorted(set(paragraphs) - set(names)), [], "every paragraph of --help is a command's")

    with open(os.path.join(SRC, "man", "hsmfsctl.1")) as f:
        man = from_man(f.read())
    eq(sorted(man), sorted(names), "hsmfsctl(1)'s SYNOPSIS names the commands of --help")
    eq(man, names, "and in the same order")

    with open(os.path.join(SRC, "cmd", "hsmfs-completion.bash")) as f:
        offered, labels = from_completion(f.read())
    eq(sorted(offered), sorted(names), "the completion offers the commands of --help")
    eq(sorted(labels), sorted(names), "and has the options of each one, of no other")

    taken = []
    for name in names:
        rc, out = run([HSMFSCTL, name], stdin=open(os.devnull))
        if rc != 1 or "unknown command" in out or not out.startswith("hsmfsctl: "):
            taken.append("%s: exit %d, %r" % (name, rc, out[:200]))
    eq(taken, [], "hsmfsctl takes each command: alone, a usage message and exit 1")
    rc, out = run([HSMFSCTL, "no-such-command"])
    eq((rc, out), (1, "hsmfsctl: unknown command 'no-such-command' (see hsmfsctl --help)\n"),
       "and refuses one it has not")


main(test)
