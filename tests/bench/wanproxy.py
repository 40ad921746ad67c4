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

What it does not model: loss, jitter, a TCP window smaller than the
bandwidth-delay product (both ends here keep theirs), and the kernel's
loopback buffers hold what is in flight in the box as on a real link.
For benchmarks only: it listens on 127.0.0.1 and connects nowhere else.
"""
import argparse
import asyncio
import sys

CHUNK = 65536
QUEUE = 256  # chunks in flight per direction of a connection (16 MiB)


class Link:
    """One direction of the shared link: when its wire is free next."""

    def __init__(self, rate):
        self.rate = rate  # bytes per second, 0: unlimited
        self.free_at = 0.0

    def send(self, n, now):
        """Serialise n bytes that reached the link at now: when they leave."""
        if not self.rate:
            return now
        start = max(now, self.free_at)
        self.free_at = start + n / self.rate
        return self.free_at


async def pump(reader, writer, link, delay):
    """Relay one direction: each chunk leaves the wire, then arrives delay later."""
    q = asyncio.Queue(QUEUE)
    loop = asyncio.get_running_loop()

    async def receive():
        try:
            while True:
                data = await reader.read(CHUNK)
                # the wire serialises as chunks come; the delay runs from there
                sent = link.send(len(data), loop.time()) if data else loop.time()
                await q.put((sent + delay, data))
                if not data:
                    return
        except Exception:  # reset, or anything else: the end of this direction
            await q.put((loop.time(), b""))

    async def deliver():
        try:
            while True:
                at, data = await q.get()
                wait = at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except Exception:
            return

    await asyncio.gather(receive(), deliver())


async def serve(args):
    up, down = Link(args.rate_mbs * 1e6), Link(args.rate_mbs * 1e6)
    delay = args.delay_ms / 1000.0

    # asyncio holds a connection's task only weakly (through its
    # transport's protocol): once a client resets, the task and its two
    # pumps were collected while pending ("Task was destroyed but it is
    # pending!"), leaving the origin's side of the connection open
    live = set()

    async def handle(creader, cwriter):
        task = asyncio.current_task()
        live.add(task)
        try:
            await relay(creader, cwriter)
        finally:
            live.discard(task)

    async def relay(creader, cwriter):
        # the handshake: SYN there, SYN-ACK back
        await asyncio.sleep(2 * delay)
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", args.to)
        except OSError:
            cwriter.close()
            return
        try:
            await asyncio.gather(pump(creader, swriter, up, delay),
                                 pump(sreader, cwriter, down, delay))
        except Exception as e:  # one connection's end is not the proxy's
            sys.stderr.write("wanproxy: connection ended: %r\n" % (e,))
        finally:
            for w in (swriter, cwriter):
                try:
                    w.close()
                except OSError:
                    pass

    server = await asyncio.start_server(handle, "127.0.0.1", args.listen,
                                        limit=CHUNK)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write("%d\n" % port)
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--to", type=int, required=True, help="the origin's port on 127.0.0.1")
    ap.add_argument("--listen", type=int, default=0)
    ap.add_argument("--delay-ms", type=float, default=10.0, help="one way")
    ap.add_argument("--rate-mbs", type=float, default=120.0,
                    help="MB/s each way, shared; 0: unlimited")
    args = ap.parse_args()
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
