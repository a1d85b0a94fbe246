#!/usr/bin/env python3
"""inet_echo.py echo TRIG CYCLES
An asyncio TCP echo server and its clients in one process (127.0.0.1, and
::1 where the host has IPv6), plus a UDP echo server and a connected UDP
client on the same loop.  Each TCP client keeps up to 20 messages of
0..1500 bytes in flight (within the receive windows: no send queue stays
full while the program is paused); the server reads 4 KiB every 2 ms, and checks every echoed line against the one it
sent.  Prints `port P`, `udp U`, then per cycle C: `ready C` (the
checkpoint may come), waits for the file TRIG.C, then checks that the
listeners, connections and UDP sockets are the ones it had (addresses,
ports, options, O_NONBLOCK), that 300 more messages came back right and
UDP answers again, and prints `check C ok`.  `done` at the end.  A wrong
reply or state prints `FAIL ...` and exits 3.

inet_echo.py client TRIG CYCLES PORT
A TCP client of the line echo server at 127.0.0.1:PORT outside the job: a
message and its reply every 20 ms.  Per cycle: `ready C`, waits for TRIG.C,
then goes on: an ECONNRESET (a restart with --tcp=reset) prints `reset C`
and it connects again; `check C ok` once 20 more replies came back right.
With TRIG.close.C present instead it closes the connection, prints
`closed C`, waits for TRIG.C and connects again.

inet_echo.py bulk TRIG CYCLES
A TCP connection inside the process whose receiving end does not read: the
sending end writes (from cycle 2 on once TRIG.fill.C exists) a known byte
pattern until the kernel takes no more (the receive queue and the send queue
both full), prints `ready C W` (W bytes
written in all), waits for TRIG.C, then reads and checks every byte written
so far, prints `check C ok`.  `done` at the end."""
import asyncio
import fcntl
import os
import socket
import struct
import sys
import time

TRIG = ""


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    os._exit(3)


def msg(i):
    return f"{i}:{chr(97 + i % 26) * (i * 37 % 1500)}\n".encode()


def opts(sock, rcvbuf=False):
    """What the program set on a socket, as the kernel shows it (not the
    receive buffer's size, which TCP tunes by itself)."""
    g = sock.getsockopt
    d = {"nonblock": bool(fcntl.fcntl(sock.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK),
         "reuseaddr": g(socket.SOL_SOCKET, socket.SO_REUSEADDR),
         "sndbuf": g(socket.SOL_SOCKET, socket.SO_SNDBUF), "reuseport": g(socket.SOL_SOCKET, socket.SO_REUSEPORT),
         "name": sock.getsockname()}
    if rcvbuf:
        d["rcvbuf"] = g(socket.SOL_SOCKET, socket.SO_RCVBUF)
    if sock.type == socket.SOCK_STREAM:
        d.update(nodelay=g(socket.IPPROTO_TCP, socket.TCP_NODELAY), keepalive=g(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                 keepidle=g(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE), keepintvl=g(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                 keepcnt=g(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                 linger=struct.unpack("ii", g(socket.SOL_SOCKET, socket.SO_LINGER, 8)),
                 rcvtimeo=g(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16),
                 sndtimeo=g(socket.SOL_SOCKET, socket.SO_SNDTIMEO, 16))
    else:
        d["broadcast"] = g(socket.SOL_SOCKET, socket.SO_BROADCAST)
    try:
        d["peer"] = sock.getpeername()
    except OSError:
        d["peer"] = None
    # (the kernel sets IPV6_V6ONLY when a socket is bound to a specific IPv6
    # address, as the restart binds a connection's end: not the program's)
    if sock.family == socket.AF_INET6 and d["peer"] is None:
        d["v6only"] = g(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
    return d


async def wait_trigger(path):
    while not os.path.exists(path):
        await asyncio.sleep(0.05)


async def echo_handler(reader, writer):
    while True:
        data = await reader.read(4096)
        if not data:
            break
        writer.write(data)
        await writer.drain()
        await asyncio.sleep(0.002)  # so that bytes wait in the kernel's receive queue
    writer.close()


class Client:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.sent = self.got = 0
        self.more = asyncio.Event()

    async def start(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        s = self.writer.get_extra_info("socket")
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 77)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 11)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 96 * 1024)
        if self.host == "127.0.0.1":  # (set on one: the other's is tuned by TCP)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 80 * 1024)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 3))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 7, 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 2, 500000))
        self.sock = s
        asyncio.ensure_future(self.write_loop())
        asyncio.ensure_future(self.read_loop())

    async def write_loop(self):
        while True:
            while self.sent - self.got >= 20:
                self.more.clear()
                await self.more.wait()
            self.writer.write(msg(self.sent))
            self.sent += 1
            if self.sent % 4 == 0:
                await self.writer.drain()

    async def read_loop(self):
        while True:
            line = await self.reader.readline()
            if line != msg(self.got):
                fail(f"client {self.host}: reply {self.got} is {line[:40]!r}..., not {msg(self.got)[:40]!r}...")
            self.got += 1
            self.more.set()

    async def until(self, n):
        while self.got < n:
            await asyncio.sleep(0.01)


class Udp(asyncio.DatagramProtocol):
    def __init__(self, server):
        self.server, self.replies = server, 0

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        if self.server:
            self.transport.sendto(data, addr)
        elif data.startswith(b"u"):
            self.replies += 1


async def echo_main(cycles):
    loop = asyncio.get_running_loop()
    # limit: the transport stops reading past 2 KiB buffered, so that bytes wait in the kernel
    servers = [await asyncio.start_server(echo_handler, "127.0.0.1", 0, limit=1024)]
    try:
        servers.append(await asyncio.start_server(echo_handler, "::1", 0, limit=1024))
    except OSError:
        pass
    for s in servers:
        print(f"port {s.sockets[0].getsockname()[1]}", flush=True)
    clients = [Client(s.sockets[0].getsockname()[0], s.sockets[0].getsockname()[1]) for s in servers]
    for c in clients:
        await c.start()
    ut, up = await loop.create_datagram_endpoint(lambda: Udp(True), local_addr=("127.0.0.1", 0), reuse_port=True)
    ut.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    uport = ut.get_extra_info("socket").getsockname()[1]
    print(f"udp {uport}", flush=True)
    ct, cp = await loop.create_datagram_endpoint(lambda: Udp(False), remote_addr=("127.0.0.1", uport))

    async def udp_loop():
        j = 0
        while True:
            ct.sendto(b"u%d" % j)
            j += 1
            await asyncio.sleep(0.02)
    asyncio.ensure_future(udp_loop())

    def state():
        socks = [s.sockets[0] for s in servers] + [c.sock for c in clients]
        socks += [ut.get_extra_info("socket"), ct.get_extra_info("socket")]
        return [opts(s, s is clients[0].sock) for s in socks]

    for c in range(1, cycles + 1):
        for cl in clients:
            await cl.until(cl.got + 500)
        before = state()
        print(f"ready {c}", flush=True)
        await wait_trigger(f"{TRIG}.{c}")
        after = state()
        for b, a in zip(before, after):
            # a client's own port is kept where the kernel lets it (TIME_WAIT)
            if b != a and {k: v for k, v in b.items() if k != "name"} != {k: v for k, v in a.items() if k != "name"}:
                fail(f"socket state changed: {b} -> {a}")
        for cl in clients:
            await cl.until(cl.got + 300)
        replies = cp.replies
        for _ in range(500):
            if cp.replies >= replies + 5:
                break
            await asyncio.sleep(0.01)
        else:
            fail("no UDP replies after the trigger")
        print(f"check {c} ok", flush=True)
    print("done", flush=True)
    os._exit(0)  # not asyncio.run's cancellation of the endless loops


async def client_main(cycles, port):
    async def connect():
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return r, w
    r, w = await connect()
    n = 0

    async def one():
        nonlocal n
        line = b"ping %d\n" % n
        w.write(line)
        await w.drain()
        got = await r.readline()
        if got == b"":
            raise ConnectionResetError("end of stream")
        if got != line:
            fail(f"reply {got!r}, not {line!r}")
        n += 1

    async def safe_one(c):
        """one(), and after a reset (the restart's): say so, connect again"""
        nonlocal r, w
        try:
            await one()
            return True
        except (ConnectionResetError, BrokenPipeError) as e:
            print(f"reset {c} {type(e).__name__}", flush=True)
            w.close()
            r, w = await connect()
            return False

    for c in range(1, cycles + 1):
        for _ in range(10):
            await one()
            await asyncio.sleep(0.02)
        print(f"ready {c}", flush=True)
        closed = False
        while not os.path.exists(f"{TRIG}.{c}"):
            if not closed and os.path.exists(f"{TRIG}.close.{c}"):
                w.close()
                closed = True
                print(f"closed {c}", flush=True)
            if not closed:
                await safe_one(c)
            await asyncio.sleep(0.02)
        if closed:
            r, w = await connect()
        good = 0
        while good < 20:
            good += await safe_one(c)
            await asyncio.sleep(0.02)
        print(f"check {c} ok", flush=True)
    print("done", flush=True)


def bulk_main(cycles):
    lsn = socket.socket()
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(1)
    snd = socket.create_connection(lsn.getsockname())
    rcv, _ = lsn.accept()
    snd.setblocking(False)
    pat = bytes(range(251)) * 1100
    written = got = 0
    for c in range(1, cycles + 1):
        while c > 1 and not os.path.exists(f"{TRIG}.fill.{c}"):
            time.sleep(0.05)
        while True:
            try:
                written += snd.send(pat[written % 251:written % 251 + 262144])
            except BlockingIOError:
                break
        print(f"ready {c} {written}", flush=True)
        while not os.path.exists(f"{TRIG}.{c}"):
            time.sleep(0.05)
        while got < written:
            d = rcv.recv(262144)
            if not d or d != pat[got % 251:got % 251 + len(d)]:
                fail(f"byte {got}: {d[:16]!r} is not the pattern")
            got += len(d)
        print(f"check {c} ok", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    TRIG = sys.argv[2]
    if sys.argv[1] == "echo":
        asyncio.run(echo_main(int(sys.argv[3])))
    elif sys.argv[1] == "bulk":
        bulk_main(int(sys.argv[3]))
    else:
        asyncio.run(client_main(int(sys.argv[3]), int(sys.argv[4])))
