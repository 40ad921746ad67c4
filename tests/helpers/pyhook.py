#!/usr/bin/env python3
"""A fill/watch hook in Python, on the hsmfs_hook module (python/).

    pyhook.py MOUNTPOINT --log FILE [--mode mirror|deny|deny-whole|allow-uid|silent|allow|crash]
              [--allow-uid UID]
              [--mirror DIR] [--errno N] [--delay S] [--delay-min BYTES]
              [--progress S]
              [--kind fill|watch] [--mask access,modify,dir] [--quiet]
              [--listing TEXT]  (--mode list: what every PRE_DIR gets)
              [--name NAME] [--fill required|hint] [--linger S]
              [--filled S [--then allow|deny]]  (mirror: FILLED, S s, answer)

Every frame it receives is appended to --log as one JSON line (flushed at
once), so a test can wait on the log instead of sleeping.
"""
import argparse
import array
import errno
import json
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
from hsmfs_hook import (ALLOW, CANCEL, DENY, ERROR, EV, EVENT, EVNAME, KIND,  # noqa: E402,F401
                        FILLED, MAX_FRAME, QUIET, VERSION, WELCOME, HELLO, PROGRESS, ANSWER,
                        Reader, answer, filled, frame, parse_event, progress, recv_frame,
                        string)
from hsmfs_hook import connect_socket  # noqa: E402


def connect(mnt, kind="fill", mask=("access",), name="pyhook", subtree=""):
    return connect_socket(mnt, kind, mask, name, subtree)


def list_dir(d):
    """A PRE_DIR listing of the local directory d: JSON Lines."""
    out = []
    for de in sorted(os.scandir(d), key=lambda e: e.name):
        st = de.stat(follow_symlinks=False)
        e = {"path": de.name, "mtime": int(st.st_mtime), "mode": st.st_mode & 0o7777}
        if de.is_dir(follow_symlinks=False):
            e["type"] = "dir"
        else:
            e["size"] = st.st_size
        out.append(json.dumps(e) + "\n")
    return "".join(out).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mnt")
    ap.add_argument("--log", required=True)
    ap.add_argument("--mode", default="mirror")
    ap.add_argument("--mirror")
    ap.add_argument("--errno", type=int, default=errno.EIO)
    ap.add_argument("--allow-uid", type=int, default=None,
                    help="--mode allow-uid: allow this uid's events, deny the others'")
    ap.add_argument("--delay", type=float, default=0)
    ap.add_argument("--delay-min", type=int, default=0,
                    help="delay only events whose required range is this long or longer")
    ap.add_argument("--delay-from", type=int, default=0,
                    help="delay only events whose hint starts here or later")
    ap.add_argument("--progress", type=float, default=0)
    ap.add_argument("--kind", default="fill")
    ap.add_argument("--mask", default="access")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--name", default="pyhook")
    ap.add_argument("--fill", default="hint")
    ap.add_argument("--listing", default=None,
                    help="--mode list: the listing PRE_DIR events get, as it is")
    ap.add_argument("--linger", type=float, default=0,
                    help="after the connection closes, let fills in flight finish")
    ap.add_argument("--late-bad", type=float, default=None,
                    help="mirror: S s after its answer, write 4 KiB of 0xEE into "
                         "the staging file at the fill's start (a hook that writes late)")
    ap.add_argument("--filled", type=float, default=None,
                    help="mirror: say FILLED for what it wrote, wait this long, then answer")
    ap.add_argument("--then", default="allow",
                    help="--filled: then allow, or deny with --errno")
    a = ap.parse_args()
    log = open(a.log, "a", buffering=1)
    s, welcome = connect(a.mnt, a.kind, a.mask.split(","), a.name)
    log.write(json.dumps({"welcome": welcome}) + "\n")
    lock = threading.Lock()

    def handle(ev, fd):
        try:
            if (a.delay or a.progress) and (not a.delay_min or
                                            ev["end"] - ev["start"] >= a.delay_min) and \
                    ev.get("hint_start", 0) >= a.delay_from:
                t0 = time.monotonic()
                end = t0 + a.delay
                span = max(ev.get("hint_end", 0) - ev.get("hint_start", 0), 1)
                done = 0
                while time.monotonic() < end:
                    time.sleep(min(a.progress or a.delay, max(0, end - time.monotonic())))
                    if a.progress:
                        # progress is bytes advancing: the range's bytes
                        # arrive evenly over the delay
                        done = max(done + 1, int(span * (time.monotonic() - t0) / a.delay))
                        with lock:
                            progress(s, ev["id"], done)
            if a.mode == "deny" or (a.mode == "deny-whole" and ev["end"] == 2 ** 64 - 1) or \
                    (a.mode == "allow-uid" and ev["uid"] != a.allow_uid):
                # deny-whole: the events of a whole file (at open), the rest allowed
                with lock:
                    answer(s, ev["id"], DENY, a.errno)
                return
            if ev["type"] in ("PRE_DIR", "PRE_LOOKUP") and a.mode in ("mirror", "list"):
                if ev["type"] == "PRE_DIR":
                    data = (a.listing.encode() if a.mode == "list"
                            else list_dir(os.path.join(a.mirror, ev["path"])))
                else:
                    # the one name's line of what a listing would say, or none
                    d, name = os.path.split(ev["path"])
                    text = (a.listing.encode() if a.mode == "list"
                            else list_dir(os.path.join(a.mirror, d)))
                    data = b"".join(line + b"\n" for line in text.splitlines()
                                    if line.strip() and json.loads(line)["path"] == name)
                done = 0
                while done < len(data):
                    done += os.pwrite(fd, data[done:], done)
                with lock:
                    answer(s, ev["id"], ALLOW, 0, 0, 0)
            elif ev["type"] == "PRE_ACCESS" and a.mode == "mirror":
                lo, hi = ((ev["hint_start"], ev["hint_end"]) if a.fill == "hint"
                          else (ev["start"], ev["end"]))
                with open(os.path.join(a.mirror, ev["path"]), "rb") as src:
                    src.seek(lo)
                    data = src.read(hi - lo)
                done = 0
                while done < len(data):  # a short write is not a fill
                    done += os.pwrite(fd, data[done:], lo + done)
                if a.filled is not None:
                    with lock:
                        filled(s, ev["id"], lo, lo + len(data))
                    log.write(json.dumps({"filled": ev["id"]}) + "\n")
                    time.sleep(a.filled)
                    if a.then == "deny":
                        with lock:
                            answer(s, ev["id"], DENY, a.errno)
                        return
                with lock:
                    answer(s, ev["id"], ALLOW, 0, lo, lo + len(data))
                if a.late_bad is not None:
                    time.sleep(a.late_bad)
                    os.pwrite(fd, b"\xee" * 4096, lo)
                    log.write(json.dumps({"latebad": ev["id"]}) + "\n")
            else:
                with lock:
                    answer(s, ev["id"], ALLOW, 0, 0, 0, QUIET if a.quiet else 0)
        except OSError as e:
            with lock:
                answer(s, ev["id"], DENY, e.errno)
        finally:
            if fd is not None:
                os.close(fd)

    while True:
        try:
            data, fds = recv_frame(s)
        except OSError:
            break
        if not data:
            break
        length, mtype, flags = struct.unpack_from("<IHH", data)
        if mtype == EVENT:
            ev = parse_event(data[8:], flags)
            log.write(json.dumps(ev) + "\n")
            fd = fds[0] if fds else None
            for extra in fds[1:]:
                os.close(extra)
            if a.mode == "crash":
                os._exit(3)  # a hook that dies on every event it is handed
            if a.mode == "silent":
                if fd is not None:
                    os.close(fd)
                continue
            threading.Thread(target=handle, args=(ev, fd), daemon=True).start()
        elif mtype == CANCEL:
            eid, reason = struct.unpack_from("<QI", data, 8)
            log.write(json.dumps({"cancel": eid, "reason": reason}) + "\n")
        elif mtype == ERROR:
            log.write(json.dumps({"error": struct.unpack_from("<I", data, 8)[0]}) + "\n")
            break
    log.write(json.dumps({"closed": True}) + "\n")
    if a.linger:
        time.sleep(a.linger)  # an orphan still writing through its descriptors


if __name__ == "__main__":
    main()
