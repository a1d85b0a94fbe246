"""TCP and UDP sockets (issue 17): an asyncio echo server and its clients in
one process (IPv4 and IPv6, messages always in flight both ways) plus a UDP
echo server and a connected UDP client, checkpointed, SIGKILLed and
restarted twice: every echoed line right, the listeners on their ports, the
connections between the same ports, options and flags as set, checked by
the program and from outside (`ss`, the manifest); a TCP client of a server
outside the job under `--tcp=reset` (the program sees ECONNRESET once,
`restart` names the connection) and `--tcp=refuse` (the checkpoint fails
naming it, and works once it is closed); a port another program took makes
the restart fail in phase 1 naming it, changing nothing; a malformed record
is refused.  As root and as an ordinary user."""
import json
import os
import re
import shutil
import socket
import socketserver
import subprocess
import threading
import time
from pathlib import Path

import pytest

import lzformat
from conftest import (PROGRAMS_SRC, assert_refused, ckpt_path, descendants, find_program, is_alive, kill_program,
                      refused_until_let_go, snapshot)

DOWN = 1.0


@pytest.fixture(scope="module")
def prog(programs):
    for name in ("inet_echo.py", "inet_tree.py"):
        shutil.copy(PROGRAMS_SRC / name, programs.dir / name)
        os.chmod(programs.dir / name, 0o644)
    return programs.dir / "inet_echo.py"


def cmdline_of(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def _ss(*args) -> str:
    return subprocess.run(["ss", "-Hn", *args], capture_output=True, text=True, timeout=30).stdout


def _tcp_lines(ports) -> list[str]:
    """`ss -tan` lines with one of the ports on either side."""
    want = {str(p) for p in ports}
    out = []
    for line in _ss("-ta").splitlines():
        f = line.split()
        if len(f) >= 5 and (f[3].rsplit(":", 1)[-1] in want or f[4].rsplit(":", 1)[-1] in want):
            out.append(line)
    return out


def _outside_state(ports):
    """From outside: the listeners on the ports, and the established
    connections between them (as sets of (local, peer) port pairs)."""
    listen, estab = set(), set()
    for line in _tcp_lines(ports):
        f = line.split()
        lp, pp = int(f[3].rsplit(":", 1)[-1]), f[4].rsplit(":", 1)[-1]
        if f[0] == "LISTEN":
            listen.add(lp)
        elif f[0] == "ESTAB":
            estab.add((lp, int(pp)))
    return listen, estab


def _fd_flags(pid, fds):
    """From outside: each descriptor's `flags:` line in /proc/PID/fdinfo (O_NONBLOCK, O_CLOEXEC...)."""
    out = {}
    for fd in fds:
        text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        out[fd] = re.search(r"^flags:\s*(\d+)", text, re.M).group(1)
    return out


def _start_echo(runner, prog, *extra):
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", *extra, "--", "python3", prog, "echo", trig, "2")
    m = proc.wait_for_output(r"^udp (\d+)$", timeout=60)
    ports = [int(p) for p in re.findall(r"^port (\d+)$", proc.stdout, re.M)]
    return store, trig, proc, ports, int(m.group(1))


def shown_inets(runner, store, idx) -> list:
    """The TCP and UDP sockets of the main program in checkpoint idx, as
    `lazarus show --json chans` reads them from its manifest."""
    r = runner.lz("show", "-d", store, "--at", idx, "--json", "chans", timeout=60)
    assert r.rc == 0, f"lazarus show failed\n{r}"
    d = json.loads(r.stdout)
    return [c for c in d["chans"] if c["object"] == "inet" and c["pid"] == d["pid"]]


def test_asyncio_echo_restarts(runner, prog):
    """Two checkpoint/SIGKILL/restart cycles: the program checks every reply
    and its sockets; from outside the same listeners and connections; the
    manifest holds asyncio's epoll watches of the sockets."""
    store, trig, proc, ports, uport = _start_echo(runner, prog)
    out = ""
    in_flight = 0
    for c in (1, 2):
        proc.wait_for_output(rf"^ready {c}$", timeout=120)
        listen0, estab0 = _outside_state(ports)
        assert set(ports) <= listen0, _tcp_lines(ports)
        idx = runner.checkpoint(store)
        # the sockets as `lazarus show` reads them: each an inet descriptor and its record
        recs = shown_inets(runner, store, idx)
        for rec in recs:
            rec["fd"], = rec["fds"]
        fds = json.loads(runner.lz("show", "-d", store, "--at", idx, "--json", "fds", timeout=60).stdout)["fds"]
        kinds = {f["fd"]: f["kind"] for f in fds}
        assert recs and all(kinds[r["fd"]] == "inet" for r in recs), (recs, fds)
        flags0 = _fd_flags(find_program(proc.pid, "python3"), [r["fd"] for r in recs])
        listeners = [r for r in recs if r["state"] == "listen"]
        assert sorted(r["local_port"] for r in listeners) == sorted(ports), recs
        conns = [r for r in recs if r["state"] == "connected" and r["kind"] == "tcp"]
        assert len(conns) == 2 * len(ports), recs
        by_fd = {r["fd"]: r for r in recs}
        assert all(by_fd[r["peer_fd"]]["peer_fd"] == r["fd"] and by_fd[r["peer_fd"]]["local_port"] == r["remote_port"]
                   for r in conns), recs
        in_flight += sum(r["queued_bytes"] for r in conns)
        # asyncio's epoll watches the sockets (a stream paused past its limit is not): kept with them
        # (`show` does not list event objects yet: read from the manifest)
        m = lzformat.Manifest.load(ckpt_path(store, idx) / "manifest")
        watched = {e.target for e in m.events if e.kind == lzformat.EV_WATCH}
        assert {r["fd"] for r in listeners} <= watched and {r["fd"] for r in conns} & watched, (watched, recs)
        udp = sorted((r["state"], r["local_port"]) for r in recs if r["kind"] == "udp")
        assert udp[0] == ("bound", uport) and udp[1][0] == "connected", udp
        kill_program(proc, "python3")
        out += proc.stdout
        time.sleep(DOWN)
        proc = runner.start_lz("restart", "-d", store)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not set(ports) <= _outside_state(ports)[0]:
            time.sleep(0.1)
        listen1, estab1 = _outside_state(ports)
        assert set(ports) <= listen1, _tcp_lines(ports)
        # each connection again between its server port and a client port
        assert {p for p, _ in estab1 if p in ports} == set(ports), _tcp_lines(ports)
        assert {(a, b) for a, b in estab0 if a in ports} & {(a, b) for a, b in estab1 if a in ports}, \
            ("no connection kept its ports", estab0, estab1)
        assert "restored reset" not in proc.stderr
        pid = None
        while time.monotonic() < deadline and pid is None:
            pid = find_program(proc.pid, "python3")
        assert _fd_flags(pid, list(flags0)) == flags0  # O_NONBLOCK and O_CLOEXEC as they were
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=120)
        assert "FAIL" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    out += proc.stdout
    assert re.search(r"^done$", out, re.M), out
    assert in_flight, "no data in flight at either checkpoint"


def test_full_send_queue(runner, prog):
    """A connection inside the process whose reader does not read: both its
    receive queue and the writer's send queue are full.  As root the send
    queue is read in TCP repair mode: two cycles, every byte back in order
    (the manifest's record holds more than the receive queue could).  As an
    ordinary user the checkpoint fails with one line naming the connection and
    CAP_NET_ADMIN; once the reader has read, it works."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "python3", prog, "bulk", trig, "2")
    before = 0
    for c in (1, 2):
        if c > 1:
            runner.touch(Path(f"{trig}.fill.{c}"))
        written = int(proc.wait_for_output(rf"^ready {c} (\d+)$", timeout=60).group(1))
        if runner.mode == "user":
            res = runner.lz("checkpoint", "-d", store, timeout=120)
            assert res.rc != 0 and len(res.stderr.strip().splitlines()) == 1, str(res)
            assert re.search(r"descriptor \d+ \(TCP 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+\) is one end of a TCP "
                             r"connection with \d+ byte\(s\) it sent that its peer, descriptor \d+, has not received.*"
                             r"CAP_NET_ADMIN", res.stderr), str(res)
            runner.touch(Path(f"{trig}.{c}"))
            proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
            if c < 2:  # (after the last cycle the program ends)
                runner.checkpoint(store)  # nothing in flight now
            before = written
            continue
        idx = runner.checkpoint(store)
        recs = shown_inets(runner, store, idx)
        conn = [r for r in recs if r["state"] == "connected"]
        assert len(conn) == 2 and sum(r["queued_bytes"] for r in conn) == written - before, (written, before, recs)
        assert max(r["queued_bytes"] for r in conn) > max(r["capacity"] for r in conn), recs  # the send queue's bytes too
        kill_program(proc, "python3")
        time.sleep(DOWN)
        proc = runner.start_lz("restart", "-d", store)
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, proc.stdout + proc.stderr
        before = written
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr


class _LineEcho(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line)


@pytest.fixture
def outside_server():
    """A line echo server of the test's own (outside every job)."""
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _LineEcho)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_outside_connection_reset(runner, prog, outside_server):
    """--tcp=reset (the default): the connection to the outside server comes
    back reset: `restart` says so in one line naming it, the program's next
    call fails with ECONNRESET, it connects again and goes on."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "python3", prog, "client", trig, "2", outside_server)
    for c in (1, 2):
        proc.wait_for_output(rf"^ready {c}$", timeout=60)
        assert "tcp=reset" in (store / "job").read_text()
        runner.checkpoint(store)
        kill_program(proc, "python3")
        time.sleep(DOWN)
        proc = runner.start_lz("restart", "-d", store)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "restored reset" not in proc.stderr:
            time.sleep(0.05)
        lines = [ln for ln in proc.stderr.splitlines() if "restored reset" in ln]
        assert len(lines) == 1 and f"-> 127.0.0.1:{outside_server}" in lines[0], proc.stderr
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert re.search(rf"^reset {c} ConnectionResetError$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr


def test_outside_connection_refused(runner, prog, outside_server):
    """--tcp=refuse: a checkpoint while the connection is open fails with one
    line naming the descriptor and the connection, the program runs on;
    once it closed the connection the checkpoint works, and the restarted
    program connects again."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--tcp=refuse", "--", "python3", prog, "client", trig, "2",
                           outside_server)
    for c in (1, 2):
        proc.wait_for_output(rf"^ready {c}$", timeout=60)
        assert "tcp=refuse" in (store / "job").read_text()
        res = runner.lz("checkpoint", "-d", store, timeout=120)
        assert res.rc != 0, str(res)
        assert re.search(rf"descriptor \d+ (of process \d+ )?\(TCP 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:{outside_server}\)"
                         r".*--tcp=refuse",
                         res.stderr), str(res)
        assert len(res.stderr.strip().splitlines()) == 1, str(res)
        runner.touch(Path(f"{trig}.close.{c}"))
        proc.wait_for_output(rf"^closed {c}$", timeout=60)
        runner.checkpoint(store)
        kill_program(proc, "python3")
        time.sleep(DOWN)
        proc = runner.start_lz("restart", "-d", store)
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert "reset" not in proc.stdout and "restored reset" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr


def test_taken_port_refuses_restart(runner, prog):
    """Another program listening on the job's port after the kill: `restart`
    fails in phase 1 with one line naming the port, the store is unchanged
    and no process is left; once the port is free the restart completes."""
    store, trig, proc, ports, uport = _start_echo(runner, prog)
    proc.wait_for_output(r"^ready 1$", timeout=120)
    runner.checkpoint(store)
    kill_program(proc, "python3")
    thief = socket.socket()
    thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    thief.bind(("127.0.0.1", ports[0]))
    thief.listen(1)
    try:
        before = snapshot(store)
        res = runner.lz("restart", "-d", store, timeout=60)
        assert res.rc != 0, str(res)
        assert len(res.stderr.strip().splitlines()) == 1, str(res)
        assert f"TCP port {ports[0]} " in res.stderr and "nothing was changed" in res.stderr, str(res)
        after = snapshot(store)
        assert {k: v for k, v in before.items() if k != "lock"} == {k: v for k, v in after.items() if k != "lock"}
    finally:
        thief.close()
    proc = runner.start_lz("restart", "-d", store)
    time.sleep(0.5)
    runner.touch(Path(f"{trig}.1"))
    proc.wait_for_output(r"^check 1 ok$|^FAIL", timeout=120)
    assert "FAIL" not in proc.stdout, proc.stdout + proc.stderr
    proc.kill()


@pytest.mark.parametrize("how", ["state", "peer", "nodata"])
def test_malformed_inet_record_refused(how, runner, prog):
    """A sealed manifest whose socket record has an unknown state, a
    connection end naming no other end, or a data file that is gone:
    `verify` and `restart` refuse it with one line, and nothing runs."""
    store, trig, proc, ports, uport = _start_echo(runner, prog)
    proc.wait_for_output(r"^ready 1$", timeout=120)
    for _ in range(20):  # one with bytes in flight, for "nodata"
        idx = runner.checkpoint(store)
        path = ckpt_path(store, idx) / "manifest"
        if any(r.bytes for r in lzformat.Manifest.load(path).inets):
            break
    kill_program(proc, "python3")
    m = lzformat.Manifest.load(path)
    recs = m.inets
    if how == "state":
        m.set(recs[0], "state", 9)
        m.save(path)
    elif how == "peer":
        m.set(next(r for r in recs if r.state == lzformat.IN_CONNECTED and r.type == socket.SOCK_STREAM), "peer_fd", 999)
        m.save(path)
    else:
        r = next(r for r in recs if r.bytes)
        os.unlink(ckpt_path(store, idx) / m.string(r.path))
    assert_refused(runner, store, "malformed" if how != "nodata" else "missing or damaged")
    # nothing of the job runs again (this session's other children, e.g. an S3 server, are not the job's)
    running = [p for p, _ in descendants(os.getpid()) if is_alive(p) and prog.name.encode() in cmdline_of(p)]
    assert not running, running


def test_bad_tcp_option(runner):
    res = runner.lz("run", "-d", runner.base / "s", "--tcp=maybe", "--", "true")
    assert res.rc == 2 and "--tcp is 'reset' or 'refuse'" in res.stderr, str(res)


SHARED = """
import os, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(4)
pid = os.fork()
if pid == 0:
    time.sleep(600)
    os._exit(0)
print("ready", s.fileno(), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
os.kill(pid, 9)
os.waitpid(pid, 0)
print("closed", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
"""


def test_socket_shared_with_a_child_refused(runner):
    """A listening socket a forked child inherited: the checkpoint fails with
    one line naming both processes and the descriptor, the program runs on,
    and checkpoints work (the listener restored) once the child is gone."""
    store = runner.base / "store"
    script = runner.base / "shared.py"
    script.write_text(SHARED)
    f1, f2 = runner.base / "f1", runner.base / "f2"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "python3", script, f1, f2)
    fd = proc.wait_for_output(r"^ready (\d+)$", timeout=60).group(1)
    want = rf"descriptor {fd} of process \d+ \(a TCP or UDP socket\) is shared with process \d+"
    idx = refused_until_let_go(runner, store, proc, want, f1, f2)
    recs = shown_inets(runner, store, idx)
    assert [r["state"] for r in recs] == ["listen"], recs


def test_connection_between_processes(runner, prog):
    """A job of two processes: the parent's listener and the connection from
    the child to it (between two processes, a line in flight at each
    checkpoint) come back connected (from outside: an established connection
    on the listener's port again): no reset on either side, no `restored
    reset` line, the count goes on, twice."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "python3", prog.parent / "inet_tree.py", trig, "2")
    port = int(proc.wait_for_output(r"^port (\d+)$", timeout=60).group(1))
    for c in (1, 2):
        proc.wait_for_output(rf"^ready {c}$", timeout=60)
        estab0 = _outside_state([port])[1]
        res = runner.lz("checkpoint", "-d", store, timeout=120)
        assert res.rc == 0 and "2 processes" in res.stderr, str(res)
        proc.kill()
        time.sleep(DOWN)
        proc = runner.start_lz("restart", "-d", store)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and port not in {a for a, _ in _outside_state([port])[1]}:
            time.sleep(0.1)
        # the listener's end on its port; the child's end on its old port where the
        # kernel lets it (TIME_WAIT leftovers of the killed job may hold it)
        estab1 = _outside_state([port])[1]
        assert port in {a for a, _ in estab1} and len(estab1) == len(estab0), (estab0, _tcp_lines([port]))
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout and "reset" not in proc.stdout, proc.stdout + proc.stderr
        assert "restored reset" not in proc.stderr, proc.stderr
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr


DUALSTACK = """
import os, socket, sys, time
lsn = socket.socket(socket.AF_INET6)
lsn.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lsn.bind(("::", 0))
lsn.listen(1)
cli = socket.create_connection(("127.0.0.1", lsn.getsockname()[1]))  # IPv4, to the dual-stack listener
srv, peer = lsn.accept()
assert peer[0] == "::ffff:127.0.0.1", peer
cli.sendall(b"in flight")
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
assert srv.recv(100) == b"in flight"
for i in range(100):
    cli.sendall(b"%d" % i)
    srv.sendall(srv.recv(100))
    assert cli.recv(100) == b"%d" % i
assert srv.getpeername()[0] == "::ffff:127.0.0.1" and cli.getpeername()[1] == lsn.getsockname()[1]
print("ok", flush=True)
"""


def test_ipv4_client_of_dual_stack_listener(runner):
    """An IPv4 client and the IPv6 socket a dual-stack listener accepted for
    it (v4-mapped addresses) in one process: the connection comes back with
    the bytes in flight and works."""
    store = runner.base / "store"
    script = runner.base / "dual.py"
    script.write_text(DUALSTACK)
    trig = runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "python3", script, trig)
    proc.wait_for_output(r"^ready$", timeout=60)
    idx = runner.checkpoint(store)
    recs = shown_inets(runner, store, idx)
    assert sorted(r["state"] for r in recs) == ["connected", "connected", "listen"], recs
    kill_program(proc, "python3")
    proc = runner.start_lz("restart", "-d", store)
    time.sleep(0.5)
    runner.touch(trig)
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    assert proc.stdout == "ok\n", proc.stdout + proc.stderr
