#!/usr/bin/env python3
"""TCP relay that adds a fixed one-way delay, for the fan-out benchmark.

    delayproxy.py --delay-ms 20 LISTEN_PORT:TARGET_PORT [LISTEN_PORT:TARGET_PORT ...]

Every listener is on 127.0.0.1 and forwards to 127.0.0.1:TARGET_PORT.

Delay model (the benchmark's README repeats this):
  * each chunk read from either side is written to the other side DELAY ms
    after it was read -- the delay applies per direction, so one
    request/reply exchange costs at least 2 x DELAY (20 ms -> 40 ms RTT);
  * chunks keep their order and are not held back by one another: a chunk
    read 1 ms after another leaves 1 ms after it (a pipe with latency, no
    bandwidth limit);
  * the TCP handshake with the client is NOT delayed: the kernel completes it
    against this relay at once. The relay connects upstream when a client
    arrives; that connect is local and fast. A real remote node would charge
    one more round trip for each fresh connection.

Prints "ready" on stdout once every listener is bound, then runs until killed.
"""

import argparse
import asyncio
import socket
import sys
import time


async def pump(reader, writer, delay):
    """Copy reader -> writer, each chunk leaving `delay` seconds after it arrived."""
    queue = asyncio.Queue()

    async def read_side():
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((time.monotonic() + delay, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            queue.put_nowait((time.monotonic() + delay, b""))

    async def write_side():
        try:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            return

    await asyncio.gather(read_side(), write_side())


async def handle(client_reader, client_writer, target_port, delay):
    try:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
    except OSError:
        client_writer.close()
        return
    for w in (client_writer, up_writer):
        sock = w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        await asyncio.gather(
            pump(client_reader, up_writer, delay),
            pump(up_reader, client_writer, delay),
        )
    finally:
        for w in (client_writer, up_writer):
            try:
                w.close()
            except Exception:
                pass


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay-ms", type=float, default=20.0, help="one-way delay per direction")
    ap.add_argument("pairs", nargs="+", metavar="LISTEN:TARGET")
    args = ap.parse_args()
    delay = args.delay_ms / 1000.0
    servers = []
    for pair in args.pairs:
        listen, target = (int(x) for x in pair.split(":"))
        srv = await asyncio.start_server(
            lambda r, w, t=target: handle(r, w, t, delay),
            "127.0.0.1",
            listen,
            backlog=1024,
        )
        servers.append(srv)
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
