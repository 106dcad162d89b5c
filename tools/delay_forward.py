#!/usr/bin/env python3
"""A delaying TCP forwarder: latency for emulated hosts (the kernel here has no netem).

    python3 tools/delay_forward.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS

Accepts connections on LISTEN, opens one to TARGET for each, and forwards the bytes of
both directions, each chunk released DELAY_MS after it was read (so a round trip through
it takes 2 x DELAY_MS more; throughput is not capped: tc tbf does that). Prints
"listening on HOST:PORT" once ready (PORT 0: a free one). Runs until killed.
Not a proxy of any protocol: bytes only, no reordering, no loss.
"""
import asyncio
import sys


def split(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


async def pump(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def release():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            writer.write(data)
            await writer.drain()
        try:
            writer.write_eof()
        except OSError:
            pass

    task = asyncio.create_task(release())
    try:
        while True:
            data = await reader.read(1 << 16)
            await queue.put((loop.time() + delay, data or None))
            if not data:
                break
        await task
    except (ConnectionError, OSError):
        task.cancel()
        writer.close()


async def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    (lhost, lport), (thost, tport), delay = split(sys.argv[1]), split(sys.argv[2]), float(sys.argv[3]) / 1000

    async def handle(creader, cwriter):
        try:
            treader, twriter = await asyncio.open_connection(thost, tport)
        except OSError as e:
            print(f"delay_forward: cannot reach {thost}:{tport}: {e}", file=sys.stderr, flush=True)
            cwriter.close()
            return
        await asyncio.gather(pump(creader, twriter, delay), pump(treader, cwriter, delay))
        twriter.close()
        cwriter.close()

    server = await asyncio.start_server(handle, lhost, lport)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on {lhost}:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
