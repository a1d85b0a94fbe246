"""Holds on descriptor 7 a local socket a checkpoint must refuse, then lets go
(tests/test_unix_sockets.py).

    usock_refuse.py KIND FILE1 FILE2 [PATH]

KIND: backlog (a listening socket with a connection it has not accepted),
dgreply (a datagram socket connected to a named server, with the server's
reply not read yet), outside (a stream connection to PATH, a listening socket
of a process outside the job, which accepted it), embryo (the same, not
accepted yet).  Prints `ready`, waits for FILE1, closes
everything, prints `closed`, waits for FILE2, prints `done`."""
import os
import socket
import sys
import time

kind, f1, f2 = sys.argv[1:4]
keep = []
name = f"\0lz-refuse-{os.getpid()}"
if kind == "backlog":
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(4)
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cli.connect(name)
    os.dup2(cli.fileno(), 9)  # after descriptor 7, which is looked at first
    cli.close()
    keep = [srv, socket.socket(fileno=9)]
    fd = srv.fileno()
elif kind == "dgreply":
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(name)
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    cli.bind(name + "-c")
    cli.connect(name)
    cli.send(b"ask")
    _, addr = srv.recvfrom(16)
    srv.sendto(b"reply", addr)
    keep = [srv, cli]
    fd = cli.fileno()
elif kind in ("outside", "embryo"):
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cli.connect(sys.argv[4])
    keep = [cli]
    fd = cli.fileno()
else:
    sys.exit(f"unknown kind {kind}")
os.dup2(fd, 7)
for s in keep:  # descriptor 7 alone holds it
    if s.fileno() == fd:
        s.close()
print("ready", flush=True)
while not os.path.exists(f1):
    time.sleep(0.02)
os.close(7)
for s in keep:
    s.close()
print("closed", flush=True)
while not os.path.exists(f2):
    time.sleep(0.02)
print("done", flush=True)
