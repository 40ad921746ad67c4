"""Integration test harness: real mounts, TAP output, no sleeping.

Each test script imports this module, mounts with Mount(...) as a context
manager and reports with ok()/skip().  A Mount:
  - makes STORE and MNT in a fresh directory under $HSMFS_TMPDIR (or /tmp),
  - starts `hsmfs -f --ready-fd N STORE MNT` and waits on the readiness pipe
    against a deadline, giving up at once if the daemon exits,
  - on leaving: unmounts with fusermount3 -u, waits for the daemon, and fails
    the test if it exited non-zero (sanitizer reports, leaks, crashes) or
    left the mount behind; on any error it still kills and lazily unmounts.
Failures print the daemon's stderr and how to reproduce.
"""
import errno
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HSMFS = os.environ.get("HSMFS", "hsmfs")
HSMFSCTL = os.environ.get("HSMFSCTL", "hsmfsctl")
PYHOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers",
                      "pyhook.py")
DEADLINE = float(os.environ.get("HSMFS_TEST_DEADLINE", "30"))
_n = 0
_failed = 0


def ok(cond, desc):
    global _n, _failed
    _n += 1
    desc = " / ".join(str(desc).splitlines())  # one TAP line, whatever it quotes
    print(("ok %d - %s" if cond else "not ok %d - %s") % (_n, desc), flush=True)
    if not cond:
        _failed += 1
    return cond


def eq(got, want, desc):
    if not ok(got == want, desc):
        diag("got:  %.300r" % (got,))
        diag("want: %.300r" % (want,))
        return False
    return True


def skip(desc, why):
    global _n
    _n += 1
    print("ok %d - %s # SKIP %s" % (_n, desc, why), flush=True)


def diag(msg):
    for line in str(msg).splitlines():
        print("# " + line, flush=True)


def done():
    print("1..%d" % _n, flush=True)
    if _failed:
        diag("reproduce: HSMFS=%s %s %s" % (HSMFS, sys.executable, sys.argv[0]))
    sys.exit(1 if _failed else 0)


def main(fn):
    """Run fn(); an exception is one failed test, never a silent pass."""
    try:
        fn()
    except Exception:
        ok(False, "test raised an exception")
        diag(traceback.format_exc())
    done()


def is_root():
    return os.geteuid() == 0


def sanitized():
    """Is the daemon under test built with a sanitizer (ASan, TSan)?"""
    exe = shutil.which(HSMFS) or HSMFS
    try:
        out = subprocess.run(["ldd", exe], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=30).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(s in out for s in ("libasan", "libtsan", "libubsan"))


def tmpdir(prefix="hsmfs-test-"):
    base = os.environ.get("HSMFS_TMPDIR") or tempfile.gettempdir()
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def tmpfs(size):
    """A fresh tmpfs of size (mount(8)'s words: 24M) on a new directory."""
    d = tmpdir("hsmfs-tmpfs-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", d], check=True)
    return d


def tmpfs_drop(d):
    """Unmount a tmpfs() (lazily: a daemon may still hold it) and remove it."""
    subprocess.run(["umount", "-l", d])
    shutil.rmtree(d, ignore_errors=True)


def fs_image(size, mkfs=("mkfs.ext4", "-q", "-F", "-I", "256")):
    """A filesystem made by mkfs (a command, the image's path last; ext4
    with 256-byte inodes, as mkfs makes them, unless told) in a loop file
    of size bytes, mounted (root): (dir, mountpoint)."""
    d = tmpdir("hsmfs-img-")
    img, mnt = os.path.join(d, "img"), os.path.join(d, "mnt")
    os.mkdir(mnt)
    with open(img, "wb") as f:
        f.truncate(size)
    subprocess.run(list(mkfs) + [img], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    return d, mnt


def fs_image_drop(d, mnt):
    """Unmount an fs_image() (lazily) and remove it."""
    subprocess.run(["umount", "-l", mnt])
    shutil.rmtree(d, ignore_errors=True)


def steps(log, name):
    """How many steps NAME a daemon's HSMFS_CRASH_LOG shows passed (a
    fault_delay() point's line is "- NAME")."""
    try:
        with open(log) as f:
            return f.read().split().count(name)
    except OSError:
        return 0


def hog(path, leave=0):
    """Write to path until ENOSPC, or until only `leave` bytes are free."""
    buf = b"\xa5" * (64 << 10)
    with open(path, "ab") as f:
        while True:
            sv = os.statvfs(os.path.dirname(path))
            free = sv.f_bavail * sv.f_frsize
            if free <= leave:
                break
            try:
                f.write(buf[:max(4096, min(len(buf), free - leave))])
                f.flush()
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break


def write_tree(root, files, age=0):
    """Write files ({relative path: bytes}) below root; returns root.
    age: their mtimes that many seconds back (an hour makes a strong
    Last-Modified, which a cache may answer If-Range with)."""
    for p, data in files.items():
        full = os.path.join(root, p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
        if age:
            old = time.time() - age
            os.utime(full, (old, old))
    return root


def errno_of(fn):
    """The errno fn() fails with, or 0."""
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


def errnos_in_threads(fn, n):
    """Run fn(k) for k in range(n), each in a thread of its own, all at
    once; returns the errno each failed with (0: it did not), in order."""
    import threading
    out = [None] * n

    def one(k):
        out[k] = errno_of(lambda: fn(k))
    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def in_child(fn, uid=None, gid=None, umask=None):
    """Run fn() in a child (as uid/gid if given); returns what it returns
    (a repr-able value) or ('errno', n)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            if umask is not None:
                os.umask(umask)
            if gid is not None:
                os.setgroups([])
                os.setgid(gid)
            if uid is not None:
                os.setuid(uid)
            res = fn()
        except OSError as e:
            res = ("errno", e.errno)
        except BaseException as e:  # noqa: B902
            res = ("error", repr(e))
        os.write(w, repr(res).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    import ast
    return ast.literal_eval(data.decode())


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].encode().decode("unicode_escape") == path:
                return True
    return False


def mount_fstype(path):
    """The type of the filesystem mounted at path (the last mount there:
    "fuse.hsmfs", "ext4" for a fanotify mount's bind), or None."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].encode().decode("unicode_escape") == path:
                found = fields[fields.index("-") + 1]
    return found


def holders(path):
    """What holds path's mount busy: each process with a descriptor, a
    working or root directory or a mapping below path, one line each."""
    top = os.path.realpath(path)
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        base = "/proc/" + pid
        try:
            comm = open(base + "/comm").read().strip()
            links = [("cwd", base + "/cwd"), ("root", base + "/root")]
            links += [("fd " + n, base + "/fd/" + n) for n in os.listdir(base + "/fd")]
            seen = []
            for what, link in links:
                try:
                    t = os.readlink(link)
                except OSError:
                    continue
                if t == top or t.startswith(top + "/"):
                    seen.append("%s %s" % (what, t))
            for line in open(base + "/maps"):
                f = line.split(None, 5)
                if len(f) == 6 and f[5].strip().startswith(top + "/"):
                    seen.append("map " + f[5].strip())
        except OSError:
            continue
        if seen:
            out.append("%s (%s): %s" % (pid, comm, ", ".join(sorted(set(seen)))))
    return "\n".join(out) or "no process holds anything below " + top


def unmount(path, lazy=False):
    fstype = mount_fstype(path)
    if fstype and not fstype.startswith("fuse"):
        # a fanotify mount is a bind mount: umount(8), root's
        args = ["umount"] + (["-l"] if lazy else []) + [path]
    else:
        args = ["fusermount3", "-u"] + (["-z"] if lazy else []) + [path]
    return subprocess.run(args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT).returncode


class DaemonError(Exception):
    pass


class Mount:
    """One hsmfs daemon serving STORE at MNT for the duration of a with."""

    def __init__(self, opts="", store=None, args=(), rlimit_nofile=None,
                 expect_exit=0, env=None, exe=None, restart=None):
        self.exe = exe or HSMFS  # the daemon binary
        self.dir = tmpdir()
        self.store = store or os.path.join(self.dir, "store")
        self.mnt = os.path.join(self.dir, "mnt")
        os.makedirs(self.store, exist_ok=True)
        os.mkdir(self.mnt)
        self.opts = opts
        self.args = list(args)
        self.rlimit_nofile = rlimit_nofile
        self.expect_exit = expect_exit
        self.env = env  # added to the daemon's environment
        # A test of a crash point checks how the mount ends: no keeper
        # restarts the daemon there, unless the test asks for one.
        if restart is None:
            restart = not (env and "HSMFS_CRASH_AT" in env)
        if not restart and "norestart" not in opts:
            self.opts = opts + ("," if opts else "") + "norestart"
        # a daemon the keeper had to start again fails the test, unless
        # the test kills daemons on purpose (it says so)
        self.restarts_expected = bool(restart)
        self.proc = None
        self.log = os.path.join(self.dir, "hsmfs.log")

    def cmdline(self):
        cmd = [self.exe, "-f", "--ready-fd", str(self.ready_fd), self.store,
               self.mnt]
        if self.opts:
            cmd += ["-o", self.opts]
        return cmd + self.args

    def start(self):
        rfd, wfd = os.pipe()
        self.ready_fd = wfd
        logf = open(self.log, "wb")

        def child_setup():
            if self.rlimit_nofile:
                import resource
                # a number: soft and hard; (soft, hard): each
                lim = self.rlimit_nofile
                resource.setrlimit(resource.RLIMIT_NOFILE,
                                   lim if isinstance(lim, tuple) else (lim, lim))

        env = dict(os.environ, **self.env) if self.env else None
        self.proc = subprocess.Popen(self.cmdline(), stdout=logf,
                                     stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=child_setup, pass_fds=(wfd,))
        os.close(wfd)
        logf.close()
        data = b""
        end = time.monotonic() + DEADLINE
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    raise DaemonError("no readiness within %ss" % DEADLINE)
                r, _, _ = select.select([rfd], [], [], left)
                if not r:
                    continue
                chunk = os.read(rfd, 64)
                if not chunk:
                    break
                data += chunk
                if data.endswith(b"\n"):
                    break
        finally:
            os.close(rfd)
        if data != b"ready\n":
            rc = self.proc.wait(timeout=DEADLINE)
            raise DaemonError("daemon exited %s before ready:\n%s" %
                              (rc, self.output()))
        return self

    def stats(self):
        """The daemon's counters (user.hsmfs.stats, the JSON of hsmfsctl stats)."""
        import json
        return json.loads(os.getxattr(self.mnt, "user.hsmfs.stats"))

    def daemon_pid(self):
        """The serving daemon's pid: the keeper's child, or the process
        started when there is no keeper (-o norestart)."""
        pid = self.proc.pid
        try:
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                kids = f.read().split()
        except OSError:
            kids = []
        return int(kids[0]) if kids else pid

    def kill(self):
        """kill -9 of the mount's holder (the keeper, or the daemon with
        no keeper): the mount ends, as a crash ended it before keepers;
        returns once the daemon is gone too."""
        worker = self.daemon_pid()
        self.proc.kill()
        self.proc.wait()
        if worker != self.proc.pid:
            wait_for(lambda: not os.path.exists("/proc/%d" % worker) or
                     open("/proc/%d/stat" % worker).read().split()[2] == "Z",
                     "the daemon's end")

    def output(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def daemon_failures(self):
        """What the log says went wrong with a daemon the keeper then
        replaced, or a sanitizer's report ('' if nothing): a serving
        daemon's death is hidden from the exit status by its restart."""
        out = self.output()
        for sign in ("runtime error:", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "WARNING: ThreadSanitizer"):
            if sign in out:
                return "a sanitizer's report (%s)" % sign
        if not self.restarts_expected:
            died = [ln for ln in out.splitlines() if "starting another" in ln]
            if died:
                return died[0]
        return ""

    def logged(self, text):
        """Whether text reaches the daemon's log within the deadline.  Lines
        of a supervised hook come through a pipe the daemon relays, so they
        can land a moment after the failure they explain."""
        try:
            return bool(wait_for(lambda: text in self.output(), "'%s' in the log" % text))
        except TimeoutError:
            return False

    def exited(self, deadline):
        """The daemon's exit status if it exits within deadline seconds
        (a crash the test set up), else None: it still runs."""
        try:
            wait_for(lambda: self.proc.poll() is not None, "the daemon's exit",
                     deadline=deadline)
        except TimeoutError:
            pass
        return self.proc.poll()

    def stop(self):
        """Unmount, reap, and check the exit status; returns it."""
        rc = unmount(self.mnt)
        if rc and is_mounted(self.mnt):
            diag("unmount of %s: status %d; what holds it:\n%s" % (self.mnt, rc, holders(self.mnt)))
        try:
            status = self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = self.proc.wait()
            unmount(self.mnt, lazy=True)
            raise DaemonError("daemon did not exit after unmount (rc %d)" % rc)
        if is_mounted(self.mnt):
            unmount(self.mnt, lazy=True)
            raise DaemonError("mount left behind")
        return status

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, et, ev, tb):
        try:
            if self.proc and self.proc.poll() is None or is_mounted(self.mnt):
                status = self.stop()
                ok(status == self.expect_exit,
                   "daemon exited %s after unmount" % status)
                bad = self.daemon_failures()
                ok(not bad, "no daemon failed while mounted" + (": " + bad if bad else ""))
                # an exception in the test: the daemon's side of it
                if status != self.expect_exit or et is not None or bad:
                    diag(self.output())
            elif self.proc:
                ok(False, "daemon died while mounted (status %s)" %
                   self.proc.returncode)
                diag(self.output())
        finally:
            self.cleanup()
        return False

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if is_mounted(self.mnt):
            unmount(self.mnt, lazy=True)
        if os.environ.get("HSMFS_KEEP"):
            diag("kept %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def spath(self, *parts):
        return os.path.join(self.store, *parts)


def run_on_tty(cmd, **kw):
    """Run cmd with its standard error on a pseudo-terminal: (exit status,
    standard output, what the terminal got), both as text."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, **kw)
    os.close(slave)
    tty = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        tty += chunk
    out = p.stdout.read().decode(errors="replace")
    rc = p.wait()
    os.close(master)
    return rc, out, tty.decode(errors="replace")


def process_report(pid):
    """What a process that did not exit is doing: its command line, and
    each thread's state and where it waits in the kernel."""
    out = []
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            out.append("pid %d: %s" % (pid, f.read().replace(b"\0", b" ").decode()))
        for tid in sorted(os.listdir("/proc/%d/task" % pid), key=int):
            t = "/proc/%d/task/%s/" % (pid, tid)
            with open(t + "stat") as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
            with open(t + "wchan") as f:
                wchan = f.read()
            with open(t + "comm") as f:
                comm = f.read().strip()
            out.append("  thread %s %s: %s %s" % (tid, comm, st, wchan))
    except OSError as e:
        out.append("pid %d: %s" % (pid, e))
    return "\n".join(out)


def unmount_all(mounts, stores, what):
    """Unmount each of mounts (ok per mount), then wait until the daemon
    of each store (its .hsmfs/lock names it) is gone: ok if every one
    exits within 20 s."""
    for m in mounts:
        eq(unmount(m), 0, "%s: unmount %s" % (what, m))
    end = time.monotonic() + 20
    left = None
    for s in stores:
        while time.monotonic() < end:
            try:
                pid = int(open(os.path.join(s, ".hsmfs", "lock")).read() or 0)
                os.kill(pid, 0)
            except (OSError, ValueError):
                break
            left = pid
            time.sleep(0.02)
    if not ok(time.monotonic() < end, "%s: every daemon exited" % what) and left:
        diag(process_report(left))
    for m in mounts:
        if is_mounted(m):
            unmount(m, lazy=True)


def run(cmd, **kw):
    """Run a command, return (exit status, stdout+stderr as text)."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       **kw)
    return p.returncode, p.stdout.decode(errors="replace")


def digest(path):
    """sha256 of a file's bytes, reading only its data segments (sparse-aware)."""
    import hashlib
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            h.update(b"@%d:" % data)
            while data < hole:
                chunk = os.pread(fd, min(1 << 20, hole - data), data)
                if not chunk:
                    break
                h.update(chunk)
                data += len(chunk)
            pos = hole
        h.update(b"size %d" % size)
    finally:
        os.close(fd)
    return h.hexdigest()


def tree_snapshot(root):
    """Names, types, modes, sizes and contents of a tree: to prove it untouched."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            content = None
            if os.path.isfile(p) and not os.path.islink(p):
                content = digest(p)
            snap[os.path.relpath(p, root)] = (st.st_mode, st.st_size,
                                              st.st_mtime_ns, content)
    return snap


def store_bytes(store, detail=None):
    """Allocated bytes of the regular files of a store (not .hsmfs)."""
    total = 0
    for d, dirs, files in os.walk(store):
        if d == store and ".hsmfs" in dirs:
            dirs.remove(".hsmfs")
        for f in files:
            try:
                b = os.lstat(os.path.join(d, f)).st_blocks * 512
            except FileNotFoundError:
                continue
            total += b
            if detail is not None and b:
                detail.append((os.path.relpath(os.path.join(d, f), store), b))
    return total


def nginx_lists_index(lines, what):
    """An nginx block of the docs (lines; /srv/www its root), served: a
    directory that holds index.html is listed as JSON, not served the page."""
    import json
    import urllib.request
    root = tmpdir("hsmfs-www-")
    os.chmod(root, 0o755)
    write_tree(root, {"tree/docs/index.html": b"<html>a page</html>",
                      "tree/docs/guide.txt": b"guide\n"})
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)
    with Nginx(root, extra="\n".join(lines).replace("/srv/www", root)) as ng:
        with urllib.request.urlopen(ng.url("tree/docs/")) as r:
            body = r.read()
        try:
            names = sorted(e["name"] for e in json.loads(body))
        except ValueError:
            names = body[:200]
        eq(names, ["guide.txt", "index.html"],
           "%s: nginx lists a directory holding index.html (JSON)" % what)
    shutil.rmtree(root, ignore_errors=True)


def wait_for(pred, what, deadline=None):
    """Poll pred() until true or the deadline; raise with what on timeout."""
    end = time.monotonic() + (deadline or DEADLINE)
    while True:
        r = pred()
        if r:
            return r
        if time.monotonic() > end:
            raise TimeoutError("waited %ss for %s" % (deadline or DEADLINE, what))
        time.sleep(0.005)


def evict_closed(path, deadline=10):
    """Evict path once it is closed to the daemon too: the kernel sends a
    close's RELEASE after close(2) returns, and until it arrives an
    eviction is EBUSY.  Returns 0, or the errno of any other failure (a
    crashed daemon's), or EBUSY still after the deadline."""
    end = time.monotonic() + deadline
    while True:
        try:
            os.setxattr(path, "user.hsmfs.evict", b"")
            return 0
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > end:
                return e.errno
        time.sleep(0.005)


class Hook:
    """A pyhook.py process; its log (one JSON object a line) is the signal."""

    def __init__(self, mnt, *args):
        import json
        self.json = json
        self.mnt = mnt
        d = tmpdir("hsmfs-hook-")
        self.dir = d
        self.logpath = os.path.join(d, "log")
        open(self.logpath, "w").close()
        self.proc = subprocess.Popen([sys.executable, PYHOOK, mnt, "--log", self.logpath] +
                                     list(args), stderr=subprocess.PIPE)
        wait_for(lambda: any("welcome" in l for l in self.lines()) or
                 self.proc.poll() is not None, "hook welcome")
        if self.proc.poll() is not None:
            raise DaemonError("hook exited: %s" % self.proc.stderr.read().decode())

    def lines(self):
        with open(self.logpath) as f:
            return [self.json.loads(l) for l in f if l.endswith("\n")]

    def events(self, etype=None):
        return [l for l in self.lines() if "id" in l and (etype is None or l["type"] == etype)]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __enter__(self):
        return self

    def gone(self):
        """Whether the daemon no longer lists this hook (or cannot be asked)."""
        try:
            v = os.getxattr(self.mnt, "user.hsmfs.hooks").decode()
        except OSError:
            return True
        return not any(l.split("\t")[1:2] == [str(self.proc.pid)] for l in v.splitlines())

    def close(self, failing=False):
        """Kill the hook, wait until the daemon has seen it go, and remove
        its log.  Until the daemon has seen it go, an event of the hook's
        mask still goes to it and waits for a hook of its name, and the
        test's next step failed at the timeout (CI, under ThreadSanitizer).
        A daemon that never lets a dead hook go is a fault of its own
        (TimeoutError), unless the test is failing already (failing: its
        error is the one to report)."""
        self.kill()
        try:
            if os.path.ismount(self.mnt):
                wait_for(self.gone, "the daemon to see hook %d go" % self.proc.pid)
        except TimeoutError:
            if not failing:
                raise
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __exit__(self, etype, *a):
        self.close(failing=etype is not None)
        return False


def import_manifest(mnt, entries):
    """hsmfsctl import -m MNT of entries (dicts); returns (status, output)."""
    import json
    d = tmpdir("hsmfs-man-")
    p = os.path.join(d, "m.jsonl")
    with open(p, "w") as f:
        for e in entries:
            f.write(json.dumps(e) + "\n")
    r = run([HSMFSCTL, "import", "-m", mnt, p])
    shutil.rmtree(d, ignore_errors=True)
    return r


def mirror_files(m, mirror, files):
    """files: {name: bytes}.  Written below mirror and imported into the
    mount m as placeholders whose url is their file:// in mirror."""
    write_tree(mirror, files)
    entries = [{"path": name, "size": len(data), "url": "file://" + os.path.join(mirror, name)}
               for name, data in files.items()]
    rc, out = import_manifest(m.mnt, entries)
    if rc != 0:
        raise RuntimeError("import failed: " + out)


def dread(path, off, n):
    """Up to n bytes at off, read with O_DIRECT into a page-aligned buffer:
    past the page cache, each page asked of the daemon."""
    import mmap
    buf = mmap.mmap(-1, max(4096, (n + 4095) // 4096 * 4096))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.preadv(fd, [buf], off)
    finally:
        os.close(fd)
    return bytes(buf[:min(got, n)])


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class PrintedPort:
    """Port 8000 for an example that starts its own origin, as printed.

    The README's and the man pages' examples run in parallel test
    processes (t0491, t0492), as root and as users: the first to take the
    lock runs its example on 8000 as printed; one that finds the lock held
    or the port taken runs on a free port and says so.  A check of the
    port alone raced: both saw it free, one server failed to bind, and its
    example then read the other test's origin.
    """

    LOCK = "/tmp/hsmfs-port-8000.lock"

    def __init__(self, what):
        self.what = what
        self.fd = None

    def __enter__(self):
        import fcntl
        import socket
        old = os.umask(0)
        try:
            self.fd = os.open(self.LOCK, os.O_RDONLY | os.O_CREAT, 0o666)
        finally:
            os.umask(old)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket() as s:
                s.bind(("127.0.0.1", 8000))
            return lambda text: text
        except OSError:
            os.close(self.fd)
            self.fd = None
            port = str(free_port())
            diag("port 8000 is taken here: %s runs on %s" % (self.what, port))
            return lambda text: text.replace("8000", port)

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
        return False


class Nginx:
    """A real nginx on 127.0.0.1 serving root; its access log is the record.

    Runs in the foreground as the calling user (master_process off), with
    every path under its own directory.  extra goes into the server block.
    """

    def __init__(self, root, extra="", tls=None, http2=False, main="", http=""):
        import shutil as _sh
        self.exe = _sh.which("nginx") or "/usr/sbin/nginx"
        self.dir = tmpdir("hsmfs-nginx-")
        self.root = root
        self.extra = extra
        self.tls = tls  # (cert, key) paths: serve https
        self.http2 = http2  # and offer HTTP/2 by ALPN
        self.main = main  # directives of the main context (load_module)
        self.http = http  # directives and servers of the http context
        self.port = None
        self.proc = None

    def start(self, port=None):
        for attempt in range(3):  # a port picked free may be taken meanwhile
            try:
                return self._start(port)
            except DaemonError:
                if port or attempt == 2:
                    raise
        return self

    def _start(self, port=None):
        self.port = port or free_port()
        d = self.dir
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(self.main + """
daemon off;
master_process off;
worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
events { worker_connections 256; }
http {
    log_format hsmfs '$request_method $request_uri $status $body_bytes_sent "$http_range" "$http_if_range" $connection $server_protocol';
    access_log %(d)s/access.log hsmfs;
    client_body_temp_path %(d)s/body;
    proxy_temp_path %(d)s/proxy;
    fastcgi_temp_path %(d)s/fastcgi;
    uwsgi_temp_path %(d)s/uwsgi;
    scgi_temp_path %(d)s/scgi;
    types { application/octet-stream bin; }
    default_type application/octet-stream;
    %(http)s
    server {
        listen 127.0.0.1:%(port)d%(ssl)s;
        %(certs)s
        root %(root)s;
        autoindex on;
        autoindex_format json;
        %(extra)s
    }
    server {
        listen unix:%(d)s/barrier.sock;
        access_log off;
        location / { return 204; }
    }
}
""" % {"d": d, "port": self.port, "root": self.root, "extra": self.extra, "http": self.http,
       "ssl": (" ssl http2" if self.http2 else " ssl") if self.tls else "",
       "certs": ("ssl_certificate %s; ssl_certificate_key %s;" % self.tls) if self.tls else ""})
        open(os.path.join(d, "access.log"), "w").close()
        try:  # an nginx killed before leaves its socket, which a bind refuses
            os.unlink(os.path.join(d, "barrier.sock"))
        except FileNotFoundError:
            pass
        self.proc = subprocess.Popen([self.exe, "-e", os.path.join(d, "error.log"),
                                      "-c", conf, "-p", d],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        import socket
        def up():
            if self.proc.poll() is not None:
                raise DaemonError("nginx exited: %s" % self.proc.stderr.read().decode())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(up, "nginx listening")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()

    def url(self, path=""):
        return "%s://127.0.0.1:%d/%s" % ("https" if self.tls else "http", self.port, path)

    def settle(self):
        """Return once every response read in full so far is in the access
        log.  nginx writes a request's line after the last byte of its
        response, so a client can read a whole response before its line is
        there.  One worker handles one event at a time, and it writes the
        line in the same turn as the last byte; so once it has answered a
        request made now (on a socket of its own, not logged), every
        response read in full before is logged."""
        import socket
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(DEADLINE)
            s.connect(os.path.join(self.dir, "barrier.sock"))
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            while s.recv(4096):
                pass

    def _records(self, probes=False):
        """The access log's lines, split, once settled.  Without probes,
        less the HEAD of a directory's URL (ending in '/') with which a new
        zero-setup mount checks its origin (hsmfs-http's probe): a lookup's
        HEAD never ends in '/', and the tests count the requests of what
        they do."""
        import shlex
        self.settle()
        with open(os.path.join(self.dir, "access.log")) as f:
            recs = [shlex.split(line) for line in f]
        return [r for r in recs if probes or not (r[0] == "HEAD" and r[1].endswith("/"))]

    def probes(self):
        """The URIs of the mount-time probes so far (see _records)."""
        return [r[1] for r in self._records(probes=True)
                if r[0] == "HEAD" and r[1].endswith("/")]

    def log(self):
        """[(method, uri, status, bytes, range, if_range)] so far."""
        return [(p[0], p[1], int(p[2]), int(p[3]), p[4], p[5]) for p in self._records()]

    def protocols(self):
        """The protocol of each request so far, in order ("HTTP/1.1", "HTTP/2.0")."""
        return [p[7] for p in self._records()]

    def connections(self):
        """The connection serial numbers of the requests so far, in order."""
        return [int(p[6]) for p in self._records()]

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


class Squid:
    """A real squid on 127.0.0.1 with the settings doc/examples/hsmfs-squid.conf
    explains (ranges fetched whole and shared, collapsed forwarding), in
    memory only, every path under its own directory; its access log is
    the record.  kill() stops it at once, as a crash does."""

    EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "doc",
                           "examples", "hsmfs-squid.conf")

    def conf(self):
        """doc/examples/hsmfs-squid.conf with this instance's port and
        paths, in memory only."""
        out = []
        for line in open(self.EXAMPLE).read().splitlines():
            key = line.split(" ", 1)[0]
            if key == "http_port":
                line = "http_port 127.0.0.1:%d" % self.port
            elif key == "cache_mem":
                line = "cache_mem 256 MB"
            elif key == "cache_dir":
                continue
            elif key == "pid_filename":
                line = "pid_filename %s/squid.pid" % self.dir
            elif key == "access_log":
                line = "access_log stdio:%s/access.log" % self.dir
            elif key == "cache_log":
                line = "cache_log %s/cache.log" % self.dir
            elif key == "coredump_dir":
                line = "coredump_dir %s" % self.dir
            out.append(line)
        out += ["cache_store_log none", "shutdown_lifetime 0 seconds", "netdb_filename none"]
        if is_root():
            out.append("cache_effective_user nobody")
        return "\n".join(out) + "\n"

    def __init__(self):
        self.exe = shutil.which("squid") or "/usr/sbin/squid"
        self.dir = None
        self.proc = None
        self.port = None

    @staticmethod
    def available():
        return os.access(shutil.which("squid") or "/usr/sbin/squid", os.X_OK)

    def start(self):
        self.dir = tmpdir("hsmfs-squid-")
        os.chmod(self.dir, 0o777)  # squid started as root works as 'nobody'
        for attempt in range(3):  # a port picked free may be taken meanwhile
            self.port = free_port()
            conf = os.path.join(self.dir, "squid.conf")
            with open(conf, "w") as f:
                f.write(self.conf())
            # its own service name: squid instances must not share IPC names
            self.proc = subprocess.Popen([self.exe, "-N", "-n", "hsmfs%d" % self.port, "-f", conf],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            def up():
                if self.proc.poll() is not None:
                    return "exited"
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return "up"
                except OSError:
                    return None
            if wait_for(up, "squid listening") == "up":
                return self
        raise DaemonError("squid did not start")

    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def log(self):
        """The access log's lines so far."""
        try:
            with open(os.path.join(self.dir, "access.log")) as f:
                return f.read().splitlines()
        except OSError:
            return []

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


class WanProxy:
    """tests/bench/wanproxy.py in front of 127.0.0.1:port: a link of
    delay_ms each way and rate_mbs MB/s, on loopback; started once it
    prints its port (its readiness signal)."""

    def __init__(self, port, delay_ms=10, rate_mbs=120):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench",
                            "wanproxy.py")
        self.proc = subprocess.Popen([sys.executable, path, "--to", str(port),
                                      "--delay-ms", str(delay_ms), "--rate-mbs", str(rate_mbs)],
                                     stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("wanproxy did not start")
        self.port = int(line)

    def url(self, path=""):
        return "http://127.0.0.1:%d/%s" % (self.port, path)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Origin:
    """An origin of our own on 127.0.0.1 that answers as a broken server or
    proxy does: a test sets `mode` (per file with `modes`) to one of the
    behaviours below, and can change it between reads.

    files: {path: bytes}; each has a Last-Modified (`dates`, settable) and an
    ETag derived from its bytes.  Behaviours of a GET with a Range:
      good          206, Content-Range and Content-Length as asked
      range-case    206 with "Content-Range: Bytes a-b/n" (valid: units are
                    case-insensitive)
      no-range      206 with the bytes asked and no Content-Range
      wrong-range   206 of a range 4 KiB before the one asked (after, at 0), its
                    Content-Range saying so
      ignore-range  200 with the whole file
      gzip          200 with the whole file gzip-coded (Content-Encoding)
      gzip-range    206 of the range asked, gzip-coded
      short         206 whose body is half the range (Content-Length too)
      trickle       206 as asked, sent `trickle_rate` bytes a second
      other-size    206 whose Content-Range's complete length is the size of
                    `other[path]` and whose bytes are other[path]'s (a
                    same-second rewrite: the Last-Modified is kept)
    Every request is recorded in `requests` as (method, path, range header,
    status, headers sent by the client).

    PUT (an archive) is answered as a conforming server does: If-Match
    that is not the file's ETag, or If-None-Match: * of a file that
    exists, is 412; else the bytes are kept and 201 says their ETag.
    `put_script[path]` is a list of what the next PUTs of path do instead,
    one each, in order:
      500          read the body, answer 500
      reset        read half the body, then close the connection
      stall        read the body, then answer nothing for `stall_s` seconds
      race-412     another writer's bytes (`other[path]`) land first, then
                   the conditions are judged (a change between the
                   client's check and its PUT)
    `puts` records (path, status, bytes kept or None).

    S3's multipart uploads, as S3 judges them: POST ?uploads begins one
    (`mp[id]`: its key and parts), PUT ?partNumber=N&uploadId=ID adds a
    part (`part_script`: what the next part PUTs do, "stall" as above),
    POST ?uploadId=ID completes it under its If-Match / If-None-Match
    (`complete_script[key]`: "race-412" as above), DELETE ?uploadId=ID
    aborts it (404 if there is none).  `mp_log` records (what, key, id,
    status): create, part-begun, part, complete, abort.  DELETE of a key removes it.  Signatures are not checked.
    """

    def __init__(self):
        self.files = {}
        self.dates = {}
        self.other = {}
        self.mode = "good"
        self.modes = {}
        self.trickle_rate = 2
        self.put_script = {}
        self.puts = []
        self.stall_s = 30
        self.requests = []
        self.mp = {}
        self.mp_log = []
        self.part_script = []
        self.complete_script = {}
        self.bodies = []  # (path, status, sent whole?) of every GET's body
        self.server = None
        self.thread = None

    def add(self, path, data, date="Wed, 02 Dec 2026 10:00:00 GMT"):
        self.files[path] = data
        self.dates[path] = date

    def etag(self, path):
        return self.etag_of_bytes(self.files[path])

    @staticmethod
    def etag_of_bytes(data):
        import hashlib
        return '"%s"' % hashlib.sha256(data).hexdigest()[:16]

    def url(self, path=""):
        return "http://127.0.0.1:%d/%s" % (self.server.server_address[1], path)

    def start(self):
        import http.server
        import threading
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.answer(head=True)

            def do_GET(self):
                self.answer(head=False)

            def split(self):
                import urllib.parse
                u = urllib.parse.urlsplit(self.path)
                return (urllib.parse.unquote(u.path.lstrip("/")),
                        dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True)))

            def conditions_fail(self, path):
                have = origin.files.get(path)
                im, inm = self.headers.get("If-Match"), self.headers.get("If-None-Match")
                return (im and (have is None or im != origin.etag(path))) or \
                    (inm == "*" and have is not None)

            def do_POST(self):
                import uuid
                key, q = self.split()
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                origin.requests.append(("POST", key, "", "", dict(self.headers)))
                if "uploads" in q:
                    uid = uuid.uuid4().hex
                    origin.mp[uid] = (key, {})
                    origin.mp_log.append(("create", key, uid, 200))
                    return self.send(200, [], (
                        "<InitiateMultipartUploadResult><Key>%s</Key><UploadId>%s</UploadId>"
                        "</InitiateMultipartUploadResult>" % (key, uid)).encode(), False)
                uid = q.get("uploadId")
                if uid not in origin.mp:
                    origin.mp_log.append(("complete", key, uid, 404))
                    return self.send(404, [], b"<Error><Code>NoSuchUpload</Code></Error>", False)
                script = origin.complete_script.get(key) or []
                if script and script.pop(0) == "race-412":
                    origin.files[key] = origin.other[key]
                    origin.dates.setdefault(key, "Wed, 02 Dec 2026 10:00:00 GMT")
                if self.conditions_fail(key):
                    origin.mp_log.append(("complete", key, uid, 412))
                    return self.send(412, [], b"<Error><Code>PreconditionFailed</Code></Error>",
                                     False)
                _, parts = origin.mp.pop(uid)
                data = b"".join(parts[n] for n in sorted(parts))
                origin.files[key] = data
                origin.dates.setdefault(key, "Wed, 02 Dec 2026 10:00:00 GMT")
                origin.puts.append((key, 200, data))
                origin.mp_log.append(("complete", key, uid, 200))
                return self.send(200, [], (
                    "<CompleteMultipartUploadResult><Key>%s</Key><ETag>%s</ETag>"
                    "</CompleteMultipartUploadResult>" % (key, origin.etag(key))).encode(),
                    False)

            def do_DELETE(self):
                key, q = self.split()
                origin.requests.append(("DELETE", key, "", "", dict(self.headers)))
                if "uploadId" in q:
                    found = origin.mp.pop(q["uploadId"], None) is not None
                    origin.mp_log.append(("abort", key, q["uploadId"], 204 if found else 404))
                    return self.send(204 if found else 404, [], b"", False)
                if origin.files.pop(key, None) is None:
                    return self.send(404, [], b"", False)
                return self.send(204, [], b"", False)

            def put_part(self, key, q, n):
                step = origin.part_script.pop(0) if origin.part_script else None
                origin.mp_log.append(("part-begun", key, q.get("uploadId"), 0))
                body = self.rfile.read(n)
                if step == "stall":
                    time.sleep(origin.stall_s)
                    self.close_connection = True
                    return
                up = origin.mp.get(q.get("uploadId"))
                if up is None:
                    return self.send(404, [], b"<Error><Code>NoSuchUpload</Code></Error>", False)
                up[1][int(q["partNumber"])] = body
                origin.mp_log.append(("part", key, q.get("uploadId"), 200))
                return self.send(200, [("ETag", origin.etag_of_bytes(body))], b"", False)

            def do_PUT(self):
                key, q = self.split()
                if "partNumber" in q:
                    return self.put_part(key, q, int(self.headers.get("Content-Length", "0")))
                path = self.path.lstrip("/")
                n = int(self.headers.get("Content-Length", "0"))
                script = origin.put_script.get(path) or []
                step = script.pop(0) if script else None
                origin.requests.append(("PUT", path, "", step or "put", dict(self.headers)))
                if step == "reset":
                    self.rfile.read(n // 2)
                    origin.puts.append((path, None, None))
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                body = self.rfile.read(n)
                if step == "500":
                    origin.puts.append((path, 500, None))
                    return self.send(500, [], b"try later", False)
                if step == "stall":
                    origin.puts.append((path, None, None))
                    time.sleep(origin.stall_s)
                    self.close_connection = True
                    return
                if step == "race-412":
                    origin.files[path] = origin.other[path]
                have = origin.files.get(path)
                im, inm = self.headers.get("If-Match"), self.headers.get("If-None-Match")
                if (im and (have is None or im != origin.etag(path))) or \
                        (inm == "*" and have is not None):
                    origin.puts.append((path, 412, None))
                    return self.send(412, [], b"precondition failed", False)
                origin.files[path] = body
                origin.dates[path] = self.headers.get("Date", origin.dates.get(path, ""))
                origin.puts.append((path, 201, body))
                return self.send(201, [("ETag", origin.etag(path))], b"", False)

            def send(self, status, headers, body, head, rate=None):
                self.send_response_only(status)
                for k, v in headers:
                    self.send_header(k, v)
                if not any(k.lower() == "content-length" for k, _ in headers):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if head:
                    return
                try:
                    if rate:
                        for i in range(0, len(body), rate):
                            self.wfile.write(body[i:i + rate])
                            self.wfile.flush()
                            time.sleep(1.0)
                    else:
                        for i in range(0, len(body), 1 << 16):
                            self.wfile.write(body[i:i + (1 << 16)])
                    origin.bodies.append((self.path.lstrip("/"), status, True))
                except (BrokenPipeError, ConnectionResetError):
                    origin.bodies.append((self.path.lstrip("/"), status, False))
                    self.close_connection = True

            def answer(self, head):
                import gzip
                path = self.path.lstrip("/")
                rng = self.headers.get("Range", "")
                mode = origin.modes.get(path, origin.mode)
                data = origin.files.get(path)
                origin.requests.append((self.command, path, rng, mode, dict(self.headers)))
                if data is None:
                    return self.send(404, [], b"not here", head)
                base = [("Last-Modified", origin.dates[path]), ("ETag", origin.etag(path)),
                        ("Accept-Ranges", "bytes")]
                if not rng.startswith("bytes=") or head:
                    return self.send(200, base, data, head)
                a, b = rng[6:].split("-")
                a, b = int(a), int(b) + 1
                size = len(data)
                b = min(b, size)
                part = data[a:b]
                cr = "bytes %d-%d/%d" % (a, b - 1, size)
                if mode == "good":
                    return self.send(206, base + [("Content-Range", cr)], part, head)
                if mode == "range-case":
                    return self.send(206, base + [("Content-Range", "B" + cr[1:])], part, head)
                if mode == "no-range":
                    return self.send(206, base, part, head)
                if mode == "wrong-range":
                    a2 = a - 4096 if a >= 4096 else a + 4096
                    return self.send(206, base + [("Content-Range", "bytes %d-%d/%d"
                                                   % (a2, b - 1, size))], data[a2:b], head)
                if mode == "ignore-range":
                    return self.send(200, base, data, head)
                if mode == "gzip":
                    return self.send(200, base + [("Content-Encoding", "gzip")],
                                     gzip.compress(data), head)
                if mode == "gzip-range":
                    return self.send(206, base + [("Content-Range", cr),
                                                  ("Content-Encoding", "gzip")],
                                     gzip.compress(part), head)
                if mode == "short":
                    return self.send(206, base + [("Content-Range", cr)],
                                     part[:len(part) // 2], head)
                if mode == "trickle":
                    return self.send(206, base + [("Content-Range", cr)], part, head,
                                     rate=origin.trickle_rate)
                if mode == "other-size":
                    new = origin.other[path]
                    b2 = min(int(rng[6:].split("-")[1]) + 1, len(new))
                    return self.send(206, [("Last-Modified", origin.dates[path]),
                                           ("ETag", '"new"'),
                                           ("Content-Range", "bytes %d-%d/%d"
                                            % (a, b2 - 1, len(new)))], new[a:b2], head)
                raise ValueError("unknown mode %r" % mode)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def gets(self, path=None):
        """The GETs so far (of path, if given): [(path, range, mode, headers)]."""
        return [(p, r, m, h) for c, p, r, m, h in self.requests
                if c == "GET" and (path is None or p == path)]

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()
        return False
