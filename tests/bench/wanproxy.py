#!/usr/bin/env python3
"""wanproxy - a wide-area link in a box, on loopback only.

    wanproxy.py --to PORT [--delay-ms D] [--rate-mbs R] [--listen PORT]

Accepts TCP connections on 127.0.0.1 (an ephemeral port unless --listen)
and relays each to 127.0.0.1:--to, through a model of one shared link:
every byte arrives D ms after it was sent, in each direction, and each
direction carries at most R MB/s (10^6 bytes) summed over all
connections, first come first served, as a serialising link does.  A
connection's setup pays the delay too (SYN and SYN-ACK: one round trip,
as on a real network).  Prints "PORT\\n" on stdout once it listens (the
readiness signal), then runs until killed.

Timing.  Each direction of a connection has a receiving and a
delivering thread; the delivering one sleeps until a chunk is due with
clock_nanosleep (time.sleep), which wakes within tens of microseconds.
An event loop's timers are rounded up to whole milliseconds by
epoll_wait, a millisecond or two on every round trip
(doc/benchmarks.md); here a round trip takes the delay plus ~0.1 ms.

What it does not model: loss, jitter, a TCP window smaller than the
bandwidth-delay product (both ends here keep theirs), and the kernel's
loopback buffers hold what is in flight in the box as on a real link.
For benchmarks only: it listens on 127.0.0.1 and connects nowhere else.
"""
import argparse
import collections
import socket
import sys
import threading
import time

CHUNK = 65536
QUEUE = 256  # chunks in flight per direction of a connection (16 MiB)


class Link:
    """One direction of the shared link: when its wire is free next."""

    def __init__(self, rate):
        self.rate = rate  # bytes per second, 0: unlimited
        self.free_at = 0.0
        self.lock = threading.Lock()

    def send(self, n, now):
        """Serialise n bytes that reached the link at now: when they leave."""
        if not self.rate:
            return now
        with self.lock:
            start = max(now, self.free_at)
            self.free_at = start + n / self.rate
            return self.free_at


def cut(*socks):
    """End a connection both ways: wakes whatever thread waits on it."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def pump(src, dst, link, delay):
    """Relay src to dst: each chunk leaves the wire, then arrives delay later.
    Returns when src ended (dst then sees the end) or either side failed."""
    q = collections.deque()
    cv = threading.Condition()
    lead = 0.0    # how early to wake (seconds), learnt
    dead = False  # dst failed: nothing more is delivered

    def deliver():
        nonlocal lead, dead
        while True:
            with cv:
                while not q:
                    cv.wait()
                at, data = q.popleft()
                cv.notify()
            wait = at - time.monotonic()
            if wait > lead:
                time.sleep(wait - lead)
                late = time.monotonic() - at
                # wake early by the sleep's usual lateness: its mean
                lead = max(0.0, min(0.002, lead + late / 8))
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                cut(src, dst)
                with cv:
                    dead = True  # a receiver waiting for room must not wait on
                    cv.notify()
                return

    t = threading.Thread(target=deliver, daemon=True)
    t.start()
    while True:
        try:
            data = src.recv(CHUNK)
        except OSError:  # reset, or cut: the end of this direction
            data = b""
        # the wire serialises as chunks come; the delay runs from there
        now = time.monotonic()
        at = (link.send(len(data), now) if data else now) + delay
        with cv:
            while len(q) >= QUEUE and not dead:
                cv.wait()
            if dead:
                break
            q.append((at, data))
            cv.notify()
        if not data:
            break
    t.join()


def relay(client, args, up, down, delay):
    try:
        time.sleep(2 * delay)  # the handshake: SYN there, SYN-ACK back
        try:
            server = socket.create_connection(("127.0.0.1", args.to))
        except OSError:
            return
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=pump, args=(server, client, down, delay), daemon=True)
        back.start()
        pump(client, server, up, delay)
        back.join()
        server.close()
    finally:
        client.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--to", type=int, required=True, help="the origin's port on 127.0.0.1")
    ap.add_argument("--listen", type=int, default=0)
    ap.add_argument("--delay-ms", type=float, default=10.0, help="one way")
    ap.add_argument("--rate-mbs", type=float, default=120.0,
                    help="MB/s each way, shared; 0: unlimited")
    args = ap.parse_args()
    # a thread woken on time should not wait 5 ms for the interpreter
    sys.setswitchinterval(0.0002)
    up, down = Link(args.rate_mbs * 1e6), Link(args.rate_mbs * 1e6)
    delay = args.delay_ms / 1000.0
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.listen))
    ls.listen(128)
    sys.stdout.write("%d\n" % ls.getsockname()[1])
    sys.stdout.flush()
    try:
        while True:
            client, _ = ls.accept()
            threading.Thread(target=relay, args=(client, args, up, down, delay),
                             daemon=True).start()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
