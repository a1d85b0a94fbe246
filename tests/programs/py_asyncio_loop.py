"""An asyncio program (epoll, its self-pipe socket pair) running across
restarts: an echo server and a client over a socket pair, a repeating
call_later timer, a call_soon chain and an eventfd watched with add_reader,
all in one loop.  argv: CYCLES FILE_PREFIX; before check N it prints
"ready N" and waits (in the loop) for FILE_PREFIX.N; each check proves every
part still works.  Prints FAIL and exits 1 on a mismatch, "done" at the end."""
import asyncio
import os
import socket
import sys

state = {"ticks": 0, "soon": 0, "efd": 0}


def fail(msg):
    print("FAIL", msg, flush=True)
    os._exit(1)


def tick(loop):
    state["ticks"] += 1
    loop.call_later(0.05, tick, loop)


def soon(loop):
    state["soon"] += 1
    loop.call_later(0.01, lambda: loop.call_soon(soon, loop))


async def echo_server(reader, writer):
    while True:
        line = await reader.readline()
        if not line:
            return
        writer.write(b"echo " + line)
        await writer.drain()


async def until(cond, what, timeout=10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            fail(f"{what} did not happen within {timeout} s")
        await asyncio.sleep(0.01)


async def main(cycles, prefix):
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    sr, sw = await asyncio.open_connection(sock=a)
    server = asyncio.ensure_future(echo_server(sr, sw))
    cr, cw = await asyncio.open_connection(sock=b)
    efd = os.eventfd(0, os.EFD_NONBLOCK)

    def on_efd():
        state["efd"] += os.eventfd_read(efd)
    loop.add_reader(efd, on_efd)
    tick(loop)
    soon(loop)
    sent = 0
    for c in range(1, cycles + 1):
        print(f"ready {c}", flush=True)
        await until(lambda: os.path.exists(f"{prefix}.{c}"), "the trigger file", timeout=600)
        for what in ("ticks", "soon"):
            n = state[what]
            await until(lambda: state[what] >= n + 5, f"{what} going on")
        for _ in range(50):
            sent += 1
            cw.write(f"msg {sent}\n".encode())
            await cw.drain()
            got = await asyncio.wait_for(cr.readline(), 10)
            if got != f"echo msg {sent}\n".encode():
                fail(f"echo {got!r} for msg {sent}")
        before = state["efd"]
        os.eventfd_write(efd, 3)
        await until(lambda: state["efd"] == before + 3, "the eventfd reader")
        print(f"check {c} ok", flush=True)
    cw.close()
    await server
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
