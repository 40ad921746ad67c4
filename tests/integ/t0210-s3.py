#!/usr/bin/env python3
"""hsmfs-http against an S3-compatible server on loopback (s3rver), with
AWS SigV4: reads work with the right keys, and a wrong access key fails
with EACCES and a clear log line; archives go back with PutObject.  Skipped where s3rver is not installed
(HSMFS_S3RVER names its executable; tests/run-all.sh installs it with npm).
"""
import errno
import os
import shutil
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HSMFS, Mount, eq, errno_of, free_port, import_manifest, main, ok, run, skip,
                     tmpdir, wait_for)  # noqa: E402

HTTP = os.path.join(os.path.dirname(os.path.abspath(HSMFS)), "hsmfs-http")
S3RVER = os.environ.get("HSMFS_S3RVER", "")
SIG = "aws:amz:us-east-1:s3"
SHA_HDR = "x-amz-content-sha256: UNSIGNED-PAYLOAD"


def test():
    if not S3RVER or not os.access(S3RVER, os.X_OK) or not shutil.which("node"):
        skip("S3 SigV4 reads", "s3rver is not installed (set HSMFS_S3RVER)")
        return
    d = tmpdir("hsmfs-s3-")
    port = free_port()
    srv = subprocess.Popen([S3RVER, "-d", os.path.join(d, "data"), "-a", "127.0.0.1",
                            "-p", str(port), "--configure-bucket", "bkt", "--silent"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           # s3rver's continuation tokens use a cipher OpenSSL 3 retired
                           env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"))
    try:
        def up():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return srv.poll() is not None
        wait_for(up, "s3rver listening")
        objs = {"dir/a b.bin": os.urandom(3 * 1024 * 1024 + 5), "small": os.urandom(100)}
        base = "http://127.0.0.1:%d/bkt/" % port
        etags = {}
        for key, data in objs.items():
            p = os.path.join(d, "upload")
            with open(p, "wb") as f:
                f.write(data)
            url = base + key.replace(" ", "%20")
            rc, out = run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                           "S3RVER:S3RVER", "-T", p, url])
            eq(rc, 0, "upload %s to s3rver" % key)
            rc, out = run(["curl", "-s", "-I", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                           "S3RVER:S3RVER", url])
            etags[key] = [l.split(":", 1)[1].strip() for l in out.splitlines()
                          if l.lower().startswith("etag:")][0]
        keys = os.path.join(d, "keys")
        with open(keys, "w") as f:
            f.write("S3RVER\nS3RVER\n")
        os.chmod(keys, 0o600)
        manifest = [{"path": k, "size": len(v), "url": base + k.replace(" ", "%20"),
                     "version": etags[k]} for k, v in objs.items()]
        hook = "hook=%s --aws-sigv4 %s --aws-keys-file %s" % (HTTP, SIG, keys)
        with Mount(opts=hook) as m:
            eq(import_manifest(m.mnt, manifest)[0], 0, "import S3 objects")
            for k, v in objs.items():
                with open(m.path(k), "rb") as f:
                    eq(f.read() == v, True, "SigV4-signed reads of %s" % k)
        # the listing itself: ListObjectsV2, one key a page to follow tokens
        store = os.path.join(d, "store")
        os.mkdir(store)
        rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "import", "-s", store,
                       "--listing", base, "--s3", "--aws-sigv4", SIG, "--aws-keys-file", keys,
                       "--page-size", "1"])
        eq((rc, out.strip()), (0, "imported 2 files: 2 new, 0 changed, 0 unchanged"),
           "import from an S3 ListObjectsV2 listing, page by page")
        with Mount(store=store, opts=hook) as m:
            for k, v in objs.items():
                with open(m.path(k), "rb") as f:
                    eq(f.read() == v, True, "listed object %s reads back" % k)
            eq(os.getxattr(m.path("small"), "user.hsmfs.state"), b"resident",
               "and is resident once read")
        # zero setup: an empty store mounted with the bucket as origin lists
        # each prefix on first look (ListObjectsV2, delimiter "/")
        store = os.path.join(d, "lazy")
        os.mkdir(store)
        paged = {"paged/k%d" % i: os.urandom(10 + i) for i in range(3)}
        for key, data in paged.items():
            p = os.path.join(d, "upload")
            with open(p, "wb") as f:
                f.write(data)
            eq(run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                    "S3RVER:S3RVER", "-T", p, base + key])[0], 0, "upload %s" % key)
        # one key a page: every page of a prefix is listed
        with Mount(store=store, opts=hook + " --page-size 1,origin=" + base) as m:
            def listed():
                out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "stats", m.mnt])[1]
                return int(out.split("directories listed")[1].split()[0])
            eq(sorted(os.listdir(m.mnt)), ["dir", "paged", "small"],
               "zero setup: ls of the root shows the bucket's keys and prefixes")
            eq(listed(), 1, "the first ls listed the root only")
            with open(m.path("dir/a b.bin"), "rb") as f:
                ok(f.read() == objs["dir/a b.bin"], "a key below a prefix reads back")
            eq(listed(), 1, "its prefix was looked up, not listed (PRE_LOOKUP)")
            eq(sorted(os.listdir(m.path("paged"))), sorted(k[6:] for k in paged),
               "a prefix of three keys listed a key a page: all three")
            for key, data in paged.items():
                with open(m.path(key), "rb") as f:
                    eq(f.read(), data, "%s reads back" % key)
            eq(os.getxattr(m.path("small"), "user.hsmfs.state"), b"placeholder",
               "a listed object is a placeholder until read")
        # mixed versions: s3rver answers If-Range with 206 and the new
        # object's bytes (as some S3-compatible stores do); its ETag differs
        # from the recorded one, so not one byte of it may be used
        big = os.urandom(8 * 1024 * 1024)
        p = os.path.join(d, "upload")
        with open(p, "wb") as f:
            f.write(big)
        url = base + "ver.bin"
        eq(run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                "S3RVER:S3RVER", "-T", p, url])[0], 0, "upload ver.bin")
        rc, out = run(["curl", "-s", "-I", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                       "S3RVER:S3RVER", url])
        etag = [l.split(":", 1)[1].strip() for l in out.splitlines()
                if l.lower().startswith("etag:")][0]
        with Mount(opts=hook + ",chunk=1M") as m:
            eq(import_manifest(m.mnt, [{"path": "ver.bin", "size": len(big), "url": url,
                                        "version": etag}])[0], 0, "import ver.bin")
            fd = os.open(m.path("ver.bin"), os.O_RDONLY | os.O_DIRECT)
            import mmap
            buf = mmap.mmap(-1, 4096)
            os.preadv(fd, [buf], 0)
            eq(bytes(buf), big[:4096], "the first 4 KiB of the old version")
            new = os.urandom(len(big))
            with open(p, "wb") as f:
                f.write(new)
            eq(run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                    "S3RVER:S3RVER", "-T", p, url])[0], 0, "the object is overwritten")
            got = []
            for off in range(1 << 20, len(big), 1 << 20):
                try:
                    os.preadv(fd, [buf], off)
                    got.append(bytes(buf))
                except OSError as e:
                    got.append(e.errno)
            os.close(fd)
            ok(all(g == errno.EIO for g in got),
               "every read of a range not yet present fails: no byte of the new version")
            st = os.getxattr(m.path("ver.bin"), "user.hsmfs.state").decode()
            ok("stale" in st and not st.startswith("resident"),
               "the file is stale, not resident (%s)" % st)
            ok(m.logged("origin changed"), "and the log says the origin changed")
            with open(m.spath("ver.bin"), "rb") as f:
                stored = f.read()
            ok(new[1 << 20:(1 << 20) + 4096] not in stored, "the store holds none of it")

        bad = os.path.join(d, "badkeys")
        with open(bad, "w") as f:
            f.write("NOTAKEY\nS3RVER\n")
        with Mount(opts="hook=%s --aws-sigv4 %s --aws-keys-file %s" % (HTTP, SIG, bad)) as m:
            eq(import_manifest(m.mnt, manifest)[0], 0, "import again")
            eq(errno_of(lambda: open(m.path("small"), "rb").read()), errno.EACCES,
               "a wrong access key gives EACCES")
            ok(m.logged("origin refused access (HTTP 403)"), "and one clear log line")
            ok(m.logged("InvalidAccessKeyId"), "naming S3's error code and message: %s" %
               [l for l in m.output().splitlines() if "403" in l][:1])
            ok("NOTAKEY" not in m.output() and "S3RVER\n" not in m.output(),
               "keys never appear in the log")
        os.mkdir(os.path.join(d, "store2"))
        rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "import", "-s",
                       os.path.join(d, "store2"), "--listing", base, "--s3", "--aws-sigv4", SIG,
                       "--aws-keys-file", bad])
        ok(rc != 0 and "HTTP 403: InvalidAccessKeyId" in out,
           "a refused listing names S3's error too: %s" % out.strip())

        # archive: a changed object and a new one go back with PutObject
        abase = base + "arch/"
        p = os.path.join(d, "upload")
        with open(p, "wb") as f:
            f.write(b"archived object")
        eq(run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                "S3RVER:S3RVER", "-T", p, abase + "obj"])[0], 0, "upload arch/obj")
        rc, out = run(["curl", "-s", "-I", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                       "S3RVER:S3RVER", abase + "obj"])
        etag = [l.split(":", 1)[1].strip() for l in out.splitlines()
                if l.lower().startswith("etag:")][0]
        ahook = ("hook=%s --aws-sigv4 %s --aws-keys-file %s --origin %s --part-size 5 --verbose,"
                 "archive_after=3600" % (HTTP, SIG, keys, abase))
        with Mount(opts=ahook) as m:
            eq(import_manifest(m.mnt, [{"path": "obj", "size": 15, "url": abase + "obj",
                                        "version": etag}])[0], 0, "import arch/obj")
            with open(m.path("obj"), "r+b") as f:
                f.write(b"ARCHIVED")
            os.mkdir(m.path("sub"))
            with open(m.path("sub", "new.bin"), "wb") as f:
                f.write(b"made on the mount" * 1000)
            big = os.urandom(12 * 1024 * 1024 + 3)
            with open(m.path("sub", "big.bin"), "wb") as f:
                f.write(big)
            rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "archive", "-r", m.mnt])
            eq(rc, 0, "hsmfsctl archive -r to S3 (%s)" % out.strip())
            for key, want in (("obj", b"ARCHIVED object"),
                              ("sub/new.bin", b"made on the mount" * 1000),
                              ("sub/big.bin", big)):
                got = subprocess.run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG,
                                      "--user", "S3RVER:S3RVER", abase + key],
                                     stdout=subprocess.PIPE).stdout
                ok(got == want, "the bucket holds %s as changed, byte for byte" % key)
                eq(os.getxattr(m.path(key), "user.hsmfs.state").decode(), "resident",
                   "%s is clean" % key)
            rc, out = run(["curl", "-s", "-I", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                           "S3RVER:S3RVER", abase + "obj"])
            etag = [l.split(":", 1)[1].strip() for l in out.splitlines()
                    if l.lower().startswith("etag:")][0]
            eq(os.getxattr(m.path("obj"), "user.hsmfs.version").decode(), etag,
               "its recorded version is the bucket's new ETag")
            ok("x-amz-meta-mtime" in out.lower(), "and the object keeps its mtime as metadata")
            rc, out = run(["curl", "-s", "-I", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                           "S3RVER:S3RVER", abase + "sub/big.bin"])
            etag = [l.split(":", 1)[1].strip() for l in out.splitlines()
                    if l.lower().startswith("etag:")][0]
            ok(m.logged("sub/big.bin") and m.logged("a multipart upload of 3 parts"),
               "a file over --part-size went as a multipart upload of 3 parts")
            eq(os.getxattr(m.path("sub", "big.bin"), "user.hsmfs.version").decode(), etag,
               "its version is the object's ETag")
            ls = run(["curl", "-s", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user", "S3RVER:S3RVER",
                      base + "?uploads"])[1]
            ok("<UploadId>" not in ls, "and no upload is left unfinished")

            def head(key):
                out = run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-I",
                           "-H", SHA_HDR, "--aws-sigv4", SIG, "--user", "S3RVER:S3RVER",
                           abase + key])[1]
                return out.strip()
            os.mkdir(m.path("emptydir"))
            rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "sync", m.mnt])
            eq((rc, head("emptydir/")), (0, "200"),
               "an empty directory made on the mount is a \"emptydir/\" marker in the bucket")
            os.rmdir(m.path("emptydir"))
            rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "sync", m.mnt])
            eq((rc, head("emptydir/")), (0, "404"), "removed on the mount: its marker goes")

        # a prefix never listed, renamed on the mount: every key below it
        # moves (the tree is listed first); before, its keys stayed and the
        # files vanished from the mount too
        rkeys = {"ren/tools/bash/a": b"a" * 100, "ren/tools/bash/sub/b": b"b" * 200,
                 "ren/tools/bash/sub/deep/c": b"c" * 300, "ren/tools/other": b"o"}
        for key, data in rkeys.items():
            with open(p, "wb") as f:
                f.write(data)
            eq(run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                    "S3RVER:S3RVER", "-T", p, base + key])[0], 0, "upload %s" % key)
        with Mount(opts=hook + ",origin=%s,archive_after=3600" % base) as m:
            eq(sorted(os.listdir(m.path("ren", "tools"))), ["bash", "other"], "ren/tools listed")
            os.rename(m.path("ren", "tools", "bash"), m.path("ren", "tools", "bash2"))
            got = {}
            for dd, _, fs in os.walk(m.path("ren")):
                for n in fs:
                    with open(os.path.join(dd, n), "rb") as f:
                        got[os.path.relpath(os.path.join(dd, n), m.mnt)] = f.read()
            want = {k.replace("tools/bash/", "tools/bash2/"): v for k, v in rkeys.items()}
            eq(got, want, "the renamed prefix's files are on the mount, under the new name")
            rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "sync", m.mnt])
            eq(rc, 0, "sync (%s)" % out.strip())
            ls = run(["curl", "-s", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user", "S3RVER:S3RVER",
                      base + "?list-type=2&prefix=ren/"])[1]
            keys_now = sorted(k for k in (x.split("</Key>")[0] for x in ls.split("<Key>")[1:])
                              if not k.endswith("/"))
            eq(keys_now, sorted(want), "the bucket holds the mount's keys, none left behind")

        # an origin that is a prefix inside the bucket (it was refused: the
        # start-up check asked for the prefix as a key, 404)
        pkeys = {"pre fix/a.txt": b"a under the prefix", "pre fix/d/b.txt": b"b deeper",
                 "outside.txt": b"not below it"}
        for key, data in pkeys.items():
            with open(p, "wb") as f:
                f.write(data)
            eq(run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                    "S3RVER:S3RVER", "-T", p, base + key.replace(" ", "%20")])[0], 0,
               "upload %s" % key)
        pbase = base + "pre%20fix/"
        with Mount(opts=hook + ",origin=%s" % pbase) as m:
            with open(m.path("d", "b.txt"), "rb") as f:
                eq(f.read(), b"b deeper", "a prefix's origin: a key two levels down, looked "
                   "up and read")
            eq(sorted(os.listdir(m.mnt)), ["a.txt", "d"], "its root lists the keys below the "
               "prefix, nothing outside it")
            with open(m.path("a.txt"), "rb") as f:
                eq(f.read(), b"a under the prefix", "and reads them")
            with open(m.path("new.txt"), "wb") as f:
                f.write(b"made under the prefix")
            os.chmod(m.path("new.txt"), 0o750)
            os.utime(m.path("new.txt"), (1000000007, 1000000007))
            rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "sync", m.mnt])
            eq(rc, 0, "sync (%s)" % out.strip())
            got = subprocess.run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG,
                                  "--user", "S3RVER:S3RVER", pbase + "new.txt"],
                                 stdout=subprocess.PIPE).stdout
            eq(got, b"made under the prefix", "a new file lands below the prefix")
        # mtime and mode come back from the object's metadata (ours, and
        # rclone's: seconds with a fraction, the mode with its type bits)
        with open(p, "wb") as f:
            f.write(b"written by rclone")
        eq(run(["curl", "-s", "-f", "-H", SHA_HDR, "--aws-sigv4", SIG, "--user",
                "S3RVER:S3RVER", "-H", "x-amz-meta-mtime: 1600000000.123456789", "-H",
                "x-amz-meta-mode: 100700", "-T", p, pbase + "d/rclone.txt"])[0], 0,
           "upload d/rclone.txt with rclone's metadata")
        for how, extra in (("listed", ""), ("looked up", "")):
            with Mount(opts=hook + ",origin=%s" % pbase) as m:
                if how == "listed":
                    os.listdir(m.path("d"))
                got = {n: (oct(os.stat(m.path(*n)).st_mode & 0o7777),
                           int(os.stat(m.path(*n)).st_mtime))
                       for n in (("new.txt",), ("d", "rclone.txt"))}
                eq(got, {("new.txt",): ("0o750", 1000000007),
                         ("d", "rclone.txt"): ("0o700", 1600000000)},
                   "%s by a fresh mount: each file's mode and mtime, from its metadata" % how)
        with Mount(opts=hook + " --no-s3-metadata,origin=%s" % pbase) as m:
            os.listdir(m.path("d"))
            st = os.stat(m.path("d", "rclone.txt"))
            ok(st.st_mode & 0o7777 == 0o644 and st.st_mtime > 1700000000,
               "--no-s3-metadata: the listing's time and 0644 (%o, %d)"
               % (st.st_mode & 0o7777, st.st_mtime))
        os.mkdir(os.path.join(d, "pstore"))
        rc, out = run([os.environ.get("HSMFSCTL", "hsmfsctl"), "import", "-s",
                       os.path.join(d, "pstore"), "--listing", pbase, "--s3", "--aws-sigv4",
                       SIG, "--aws-keys-file", keys])
        eq((rc, out.strip()), (0, "imported 4 files: 4 new, 0 changed, 0 unchanged"),
           "hsmfsctl import --listing of the prefix: its four keys")
        with Mount(store=os.path.join(d, "pstore"), opts=hook) as m:
            eq(sorted(os.listdir(m.mnt)), ["a.txt", "d", "new.txt"], "imported: the names")
            with open(m.path("d", "b.txt"), "rb") as f:
                eq(f.read(), b"b deeper", "imported: the bytes")
    finally:
        srv.kill()
        srv.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main(test)
