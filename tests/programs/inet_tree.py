#!/usr/bin/env python3
"""inet_tree.py TRIG CYCLES
Two processes: the parent listens on 127.0.0.1 (port printed as `port P`),
its forked child (which closed its copy of the listener) connects to it and
sends numbered lines the parent echoes.  A connection found reset (a
restart that could not reconnect it, `--tcp=reset`) is said (`reset parent
C` / `reset child`), the child connects again, the parent accepts, and the
numbering goes on without a gap.  Per cycle: `ready C` once 20 more lines went
through, waits for TRIG.C, `check C ok` once 20 more did.
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
    while True:
        s = socket.create_connection(("127.0.0.1", port))
        f = s.makefile("rb")
        while True:
            try:
                s.sendall(b"%d\n" % n)
                line = f.readline()
                if not line:
                    os._exit(0)  # the parent is done
            except (ConnectionResetError, BrokenPipeError):
                print("reset child", flush=True)
                break
            if line != b"%d\n" % n:
                fail(f"child: {line!r} is not {n}")
            n += 1
            time.sleep(0.01)
        f.close()
        s.close()


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
    c, mark = 1, 20  # cycle c: `ready c` at line `mark`, `check c ok` 20 lines after
    while True:
        conn, _ = lsn.accept()
        f = conn.makefile("rb")
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
            if expect == mark:
                print(f"ready {c}", flush=True)
                while not os.path.exists(f"{TRIG}.{c}"):
                    time.sleep(0.02)
            if expect == mark + 20:
                print(f"check {c} ok", flush=True)
                c, mark = c + 1, mark + 40
                if c > CYCLES:
                    f.close()  # (the file object keeps the socket open too)
                    conn.close()
                    os.waitpid(pid, 0)
                    print("done", flush=True)
                    return
        f.close()
        conn.close()


main()
