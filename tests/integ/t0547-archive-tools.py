#!/usr/bin/env python3
"""The tools users run on a write-back mount, the origin as the reference.

nginx with WebDAV is the origin (hsmfs-http).  On a mount that archives
each change at once (archive_after=0, uploads racing the tools' next
steps), then on one that archives only at sync (archive_after=3600), the
tools do what they do every day, on this repository's own sources:
  - git: init, add, commit, a branch with changes, a directory moved
    (git mv), gc (packs made, loose objects removed), a copy of the
    repository moved into another;
  - rsync -a into a directory, then again with changed sources and
    --delete (each file written under a temporary name, then renamed
    over the old one);
  - tar: a tree unpacked, a directory renamed, one moved into another,
    one removed.
Then hsmfsctl sync exits 0 and the origin holds the mount's tree, name
for name and byte for byte.  Before, rsync's temporary names were left
at the origin (a move of a file whose first upload was in flight was
dropped), a file saved over another lost its object (the removal of
what a failed upload left took it), and 1% of new files were never
uploaded (sync paged by an offset): 2 runs in 3 differed, sync exiting 0.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HSMFSCTL, Mount, Nginx, eq, main, run, tmpdir  # noqa: E402

from archiving import DAV, HTTP, differences, tree  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
           GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_NOSYSTEM="1", HOME="/nonexistent")


def sh(what, cmd, cwd):
    r = subprocess.run(cmd, shell=True, cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    eq(r.returncode, 0, "%s (%s)" % (what, r.stdout.decode(errors="replace").strip()[-300:]))


def work(after):
    what = "archive_after=%s" % after
    root = tmpdir("hsmfs-origin-")
    os.chmod(root, 0o777)
    data = os.path.join(root, "data")
    os.mkdir(data)
    os.chmod(data, 0o777)
    store, scratch = tmpdir("hsmfs-store-"), tmpdir("hsmfs-src-")
    try:
        with Nginx(root, extra=DAV) as ng:
            with Mount(store=store, opts="hook=%s,origin=%s,archive_after=%s" %
                       (HTTP, ng.url("data/"), after)) as m:
                mnt = m.mnt
                sh(what + ": git init, add, commit",
                   "git init -q repo && cd repo && cp -r '%s/fs' '%s/cmd' '%s/lib' . && "
                   "git add -A && git commit -qm one" % (SRC, SRC, SRC), mnt)
                sh(what + ": git branch, mv, gc",
                   "git checkout -q -b two && sed -i 's/a/A/' fs/*.c && git commit -qam two && "
                   "git checkout -q master && git mv fs fs2 && git commit -qm three && "
                   "git gc -q", os.path.join(mnt, "repo"))
                shutil.copytree(os.path.join(SRC, "tests", "unit"), os.path.join(scratch, "u"))
                sh(what + ": rsync -a", "rsync -a '%s/u/' rs/" % scratch, mnt)
                sh(what + ": sources changed",
                   "touch u/*.c && sed -i 's/e/E/' u/*.c && rm u/test-opts.c && "
                   "echo new > u/new.c", scratch)
                sh(what + ": rsync -a --delete over it", "rsync -a --delete '%s/u/' rs/" % scratch,
                   mnt)
                sh(what + ": tar, mv, rm -rf",
                   "tar -C '%s' -cf - man include python | tar -xf - && mv man man2 && "
                   "mv python include/ && rm -rf include/hsmfs" % SRC, mnt)
                sh(what + ": a repository copied and moved into another",
                   "cp -a repo repo-copy && rm -rf repo/.git/objects/pack && "
                   "mv repo-copy repo/inner", mnt)
                rc, out = run([HSMFSCTL, "sync", mnt])
                eq(rc, 0, what + ": hsmfsctl sync exits 0 (%s)" % out.strip())
                eq(differences(tree(data), tree(mnt)), [],
                   what + ": then the origin holds the mount's tree, names and bytes")
    finally:
        for d in (root, store, scratch):
            shutil.rmtree(d, ignore_errors=True)


def test():
    for after in (0, 3600):
        work(after)


if __name__ == "__main__":
    main(test)
