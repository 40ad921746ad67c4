#!/usr/bin/env python3
"""hsmfsctl stats --prometheus and --textfile; hsmfsctl hooks --json.

The text is read by a strict parser of Prometheus' text format 0.0.4,
written here from the format's rules (not from hsmfs's code): every
line a HELP, a TYPE or a sample; one HELP and one TYPE a family, the
TYPE before its samples; a family's lines together; names and label
names of their alphabets; label values with only \\\\, \\" and \\n
escaped; no sample twice.  The mount's directory has a double quote, a
backslash and a space in its name, so the label's escaping is live.
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFSCTL, Hook, Mount, diag, eq, main, mirror_files, ok, run,  # noqa: E402
                     tmpdir, wait_for)

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LNAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
LVALUE = r'"((?:[^"\\\n]|\\[\\"n])*)"'
VALUE = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?Inf|NaN"
HELP = re.compile(r"# HELP (%s) ((?:[^\\\n]|\\[\\n])*)\Z" % NAME)
TYPE = re.compile(r"# TYPE (%s) (counter|gauge|histogram|summary|untyped)\Z" % NAME)
SAMPLE = re.compile(r"(%s)(?:\{((?:%s=%s)(?:,%s=%s)*)?,?\})? (%s)(?: -?[0-9]+)?\Z" %
                    (NAME, LNAME, LVALUE, LNAME, LVALUE, VALUE))
LABEL = re.compile(r"(%s)=%s,?" % (LNAME, LVALUE))


def unescape(s):
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), s)


class FormatError(Exception):
    pass


def parse(text):
    """{name: {"help": str, "type": str, "samples": [(labels, value)]}}
    in the text's order, or FormatError naming the line it refuses."""
    if not text.endswith("\n"):
        raise FormatError("no line feed at the end")
    fams, closed, cur = {}, set(), None
    for no, line in enumerate(text[:-1].split("\n"), 1):
        m = HELP.match(line) or TYPE.match(line) or SAMPLE.match(line)
        if not m:
            raise FormatError("line %d is not HELP, TYPE or a sample: %r" % (no, line))
        name = m.group(1)
        if name != cur:
            if name in closed or (cur is None and name in fams):
                raise FormatError("line %d: family %s again after another" % (no, name))
            if cur is not None:
                closed.add(cur)
            cur = name
        f = fams.setdefault(name, {"help": None, "type": None, "samples": []})
        if m.re is HELP:
            if f["help"] is not None:
                raise FormatError("line %d: a second HELP of %s" % (no, name))
            f["help"] = unescape(m.group(2))
        elif m.re is TYPE:
            if f["type"] is not None or f["samples"]:
                raise FormatError("line %d: TYPE of %s twice or after a sample" % (no, name))
            f["type"] = m.group(2)
        else:
            labels = {}
            for lm in LABEL.finditer(m.group(2) or ""):
                if lm.group(1) in labels or lm.group(1).startswith("__"):
                    raise FormatError("line %d: label %s twice or reserved" % (no, lm.group(1)))
                labels[lm.group(1)] = unescape(lm.group(2))
            if any(s[0] == labels for s in f["samples"]):
                raise FormatError("line %d: a sample of %s twice" % (no, name))
            f["samples"].append((labels, float(m.group(m.lastindex))))
    return fams


def scrape(mnt, *extra):
    rc, out = run([HSMFSCTL, "stats", "--prometheus", mnt] + list(extra))
    if rc != 0:
        raise RuntimeError("hsmfsctl stats --prometheus: %d %s" % (rc, out))
    return out


def value(fams, name):
    return fams[name]["samples"][0][1]


def test_parser():
    """The parser refuses what the format does not allow."""
    good = '# HELP a_total x \\\\ y\n# TYPE a_total counter\na_total{l="q\\"\\n"} 1\n'
    ok(parse(good)["a_total"]["samples"] == [({"l": 'q"\n'}, 1.0)], "the parser reads the format")
    for bad in ["a 1", "a{l=\"x\\t\"} 1\n", "# TYPE a counter\na 1\n# TYPE a counter\n",
                "a 1\nb 1\na 2\n", "a{l=\"x\",l=\"y\"} 1\n", "a 1\na 2\n", "# HELP a x\\q\n",
                "a{0l=\"x\"} 1\n", "a x\n", "# TYPE a counter\n# TYPE b gauge\na 1\n"]:
        try:
            parse(bad)
            ok(False, "the parser refuses %r" % bad)
        except FormatError:
            ok(True, "the parser refuses %r" % bad)


def test():
    test_parser()
    mirror = tmpdir("hsmfs-mirror-")
    data = os.urandom(200000)
    m = Mount(opts="prefetch=0")
    # a mountpoint whose label needs escaping
    os.rmdir(m.mnt)
    m.mnt = os.path.join(m.dir, 'mnt "q\\x')
    os.mkdir(m.mnt)
    with m:
        real = os.path.realpath(m.mnt)
        mirror_files(m, mirror, {"f": data})
        with Hook(m.mnt, "--mirror", mirror, "--name", 'py"hook') as h:
            text = scrape(m.mnt)
            try:
                fams = parse(text)
            except FormatError as e:
                ok(False, "the text parses: %s" % e)
                diag(text)
                return
            ok(True, "every line of the text parses (%d families)" % len(fams))
            keys = json.loads(os.getxattr(m.mnt, "user.hsmfs.stats"))
            eq(len(fams), len(keys) + 7, "a family per key of user.hsmfs.stats, and seven of hooks")
            ok(all(f["help"] and f["type"] for f in fams.values()), "each with HELP and TYPE")
            ok(all(f["type"] in ("counter", "gauge") and
                   (f["type"] == "counter") == n.endswith("_total") for n, f in fams.items()),
               "counters end in _total, and only they")
            ok(all(s[0].get("mountpoint") == real for f in fams.values() for s in f["samples"]),
               "every sample labelled with the mountpoint, escaped and read back")
            eq(value(fams, "hsmfs_hooks"), 1.0, "one hook connected")
            eq(fams["hsmfs_hook_pending"]["samples"],
               [({"mountpoint": real, "hook": 'py"hook', "pid": str(h.proc.pid)}, 0.0)],
               "its pending events by name and pid")
            eq(value(fams, "hsmfs_cache_max_bytes"), float(keys["cache_max"]),
               "a gauge of bytes is the JSON's value")

            before = fams
            with open(m.path("f"), "rb") as f:
                eq(f.read(), data, "a read of the placeholder")
            after = wait_for(lambda: (lambda a: a if value(a, "hsmfs_filled_bytes_total") >=
                                      len(data) else None)(parse(scrape(m.mnt))),
                             "filled_bytes to count the read")
            ok(value(after, "hsmfs_misses_total") > value(before, "hsmfs_misses_total") and
               value(after, "hsmfs_pre_access_total") > value(before, "hsmfs_pre_access_total"),
               "the read moved the misses and PRE_ACCESS counters")
            hook = {"mountpoint": real, "hook": 'py"hook', "pid": str(h.proc.pid)}
            ok([l for l, v in after["hsmfs_hook_answers_total"]["samples"] if v >= 1] == [hook]
               and after["hsmfs_hook_latency_p50_seconds"]["samples"][0][0] == hook,
               "the hook's answers counted, and its latency given")
            ok(value(after, "hsmfs_fill_p50_seconds") > 0 and
               value(after, "hsmfs_fill_p50_seconds") < 60,
               "fill latency in seconds (%s)" % value(after, "hsmfs_fill_p50_seconds"))

            # --textfile: the same text, atomically, under the unit's name
            d = tmpdir("hsmfs-textfile-")
            rc, out = run([HSMFSCTL, "stats", "--textfile", d, m.mnt])
            eq((rc, out), (0, ""), "--textfile DIR writes quietly")
            names = os.listdir(d)
            ok(len(names) == 1 and re.fullmatch(r"hsmfs-.*\.prom", names[0]),
               "one file hsmfs-*.prom, no temporary left: %s" % names)
            if shutil.which("systemd-escape"):
                esc = subprocess.run(["systemd-escape", "--path", real], check=True,
                                     stdout=subprocess.PIPE).stdout.decode().strip()
                eq(names[0], "hsmfs-%s.prom" % esc, "named as systemd-escape --path names it")
            p = os.path.join(d, names[0])
            ok(stat.S_IMODE(os.stat(p).st_mode) == 0o644, "readable by node_exporter's user")
            with open(p) as f:
                ok(parse(f.read()).keys() == after.keys(), "it parses, with the same families")
            rc, _ = run([HSMFSCTL, "stats", "--textfile", d, m.mnt])
            ok(rc == 0 and os.listdir(d) == names, "written again: replaced, nothing beside it")
            shutil.rmtree(d)

            rc, out = run([HSMFSCTL, "hooks", "--json", m.mnt])
            hooks = json.loads(out) if rc == 0 else None
            ok(hooks and hooks[0]["answered"] >= 1 and hooks[0]["latency_p50_us"] > 0,
               "hooks --json: its answers and latency")
            for k in ("answered", "denied", "timeouts", "latency_p50_us", "latency_p99_us"):
                for x in hooks or []:
                    x.pop(k, None)
            eq(hooks, [{"name": 'py"hook', "pid": h.proc.pid, "kind": "fill",
                        "events": ["PRE_ACCESS"], "pending": 0, "subtree": "/"}],
               "hooks --json: an array of objects")

        rc, out = run([HSMFSCTL, "hooks", "--json", m.mnt])
        eq((rc, out), (0, "[\n]\n"), "no hooks: an empty array")
        fams = parse(scrape(m.mnt))
        ok(value(fams, "hsmfs_hooks") == 0 and fams["hsmfs_hook_pending"]["samples"] == [],
           "no hooks: 0, and hook_pending without samples")
        rc, out = run([HSMFSCTL, "stats", "--prometheus", "--json", m.mnt])
        eq(rc, 1, "--prometheus with --json: a usage error")
        rc, out = run([HSMFSCTL, "stats", "--textfile", os.path.join(m.dir, "none"), m.mnt])
        ok(rc == 4 and "cannot write" in out, "a textfile DIR that is not there: exit 4")
        rc, out = run([HSMFSCTL, "stats", m.mnt, "--textfile"])
        eq(rc, 1, "--textfile without DIR: a usage error")
    rc, out = run([HSMFSCTL, "stats", "--prometheus", mirror])
    ok(rc == 3 and "not an hsmfs mount" in out, "not a mount: exit 3, one line")
    shutil.rmtree(mirror, ignore_errors=True)


main(test)
