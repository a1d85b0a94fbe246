#!/usr/bin/env python3
"""inet_tree.py TRIG CYCLES
Two processes: the parent listens on 127.0.0.1 (port printed as `port P`),
its forked child (which closed its copy of the listener) connects to it and
sends numbered lines the parent echoes.  A connection between two processes
is not restored connected: after a restart each side finds it reset
(ECONNRESET, or end of stream), says `reset parent C` / `reset child C`,
the child connects again to the listener (restored in the parent), the
parent accepts, and the numbering goes on without a gap.  Per cycle: `ready C`
once 20 lines went through, waits for TRIG.C, `check C ok` once 20 more did.
`done` at the end; `FAIL ...` and exit 3 on a wrong line."""
import os
import socket
import sys
import time

TRIG, CYCLES = sys.argv[1], int(sys.argv[2])


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    os._exit(3)


def child(port):
    n = 0
    for c in range(1, CYCLES + 1):
        s = socket.create_connection(("127.0.0.1", port))
        f = s.makefile("rb")
        while True:
            try:
                s.sendall(b"%d\n" % n)
                line = f.readline()
                if not line:
                    raise ConnectionResetError("end of stream")
            except (ConnectionResetError, BrokenPipeError):
                print(f"reset child {c}", flush=True)
                break
            if line != b"%d\n" % n:
                fail(f"child: {line!r} is not {n}")
            n += 1
            time.sleep(0.01)
        s.close()
    # the last connection: until the parent says done
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    while True:
        try:
            s.sendall(b"%d\n" % n)
            line = f.readline()
        except OSError:
            line = b""
        if not line:
            os._exit(0)
        n += 1
        time.sleep(0.01)


def main():
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(4)
    port = lsn.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        lsn.close()
        child(port)
    print(f"port {port}", flush=True)
    expect = 0
    for c in range(1, CYCLES + 2):
        conn, _ = lsn.accept()
        f = conn.makefile("rb")
        seen = 0
        while True:
            try:
                line = f.readline()
                if not line:
                    raise ConnectionResetError("end of stream")
                conn.sendall(line)
            except (ConnectionResetError, BrokenPipeError):
                print(f"reset parent {c}", flush=True)
                break
            got = int(line)
            if got != expect:
                fail(f"parent: line {got}, expected {expect}")
            expect += 1
            seen += 1
            if seen != 20:
                continue
            if c > 1:
                print(f"check {c - 1} ok", flush=True)
            if c <= CYCLES:
                print(f"ready {c}", flush=True)
                while not os.path.exists(f"{TRIG}.{c}"):
                    time.sleep(0.02)
            else:
                f.close()  # (the file object keeps the socket open too)
                conn.close()
                os.waitpid(pid, 0)
                print("done", flush=True)
                return
        conn.close()


main()
