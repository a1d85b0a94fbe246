"""Local (AF_UNIX) sockets of every kind and named pipes, checkpointed and
restored with their state (issue 17): `usock_service` (a stream listener on
a relative path with its mode, backlog, SO_PASSCRED and O_NONBLOCK, a
seqpacket listener on an abstract name, a datagram server with datagrams
queued, SO_RCVBUF and SO_RCVTIMEO, a datagram client bound to its own path
and connected to the server, an unnamed socket, a connection whose peer is
gone with bytes left, connections by connect/accept with data in flight
both ways) in one process and with its clients in a forked child, each
checkpointed, SIGKILLed (the whole job) and restarted twice, checking itself
after each restart; from outside, `ss -xl` lists the listeners of the
restarted program and `ls -l` the socket file with its mode.  A listening
socket with a connection not accepted yet, a datagram client with its
server's reply unread, and a connection to a process outside the job fail
the checkpoint with one line naming descriptor 7.  As root and as an
ordinary user.  `fifo_pair`: a producer and a consumer process over named
pipes with records in flight, two restarts, a FIFO removed while the job is
down made again."""
import os
import re
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

import lzformat
from conftest import (PROGRAMS_SRC, _compile, assert_refused, ckpt_path, find_program, kill_program,
                      refuse_edited_manifest, refused_until_let_go, trigger_cycles)


@pytest.fixture(scope="module")
def progs(programs):
    py = programs.dir / "usock_refuse.py"
    shutil.copy(PROGRAMS_SRC / "usock_refuse.py", py)
    os.chmod(py, 0o644)
    return {"usock_service": _compile("usock_service", programs.dir), "usock_refuse": py,
            "fifo_pair": _compile("fifo_pair", programs.dir)}


def _outside_checks(runner, proc):
    """The restarted program's listeners, seen from outside the job."""
    pid = find_program(proc.pid, "usock_service")
    assert pid, proc.stderr
    ss = subprocess.run(["ss", "-xlnp"], capture_output=True, text=True).stdout
    mine = [l for l in ss.splitlines() if f"pid={pid}," in l]
    svc = [l for l in mine if " svc.sock " in l and l.startswith("u_str")]
    assert svc, ss
    # in `tree` the child holds the same listener (one socket, two processes)
    for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        assert f"pid={k}," in svc[0], ss
    assert any("@lz-usock-" in l and l.startswith("u_seq") for l in mine), ss
    st = os.lstat(runner.base / "svc.sock")
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640, oct(st.st_mode)
    assert st.st_uid == runner.uid


def _cycles(runner, argv, comm, outside=None, while_down=None):
    """Two cycles (conftest.trigger_cycles): a checkpoint at `ready N`,
    SIGKILL, while_down(runner, N), restart, outside(runner, proc) half a
    second later, the trigger."""
    def after_restart(cy):
        time.sleep(0.5)
        if outside:
            outside(runner, cy.proc)

    return trigger_cycles(runner, argv, comm=comm, after_restart=after_restart,
                          while_down=(lambda cy: while_down(runner, cy.n)) if while_down else None)


@pytest.mark.parametrize("shape", ["one", "tree"])
def test_local_service_restarts(shape, runner, progs):
    """Every kind of local socket, in one process or with the clients in a
    child, goes on across two SIGKILLs and restarts; the listeners are back
    on their names (seen by ss) and the socket file has its mode."""
    out = _cycles(runner, [progs["usock_service"], shape, "2"], "usock_service", outside=_outside_checks)
    assert out.count("check 1 ok") == 1 and out.count("check 2 ok") == 1, out


def test_stale_socket_file_not_a_socket_refused(runner, progs):
    """A file that is not a socket where the listener's path was: the restart
    fails with one line naming the path, and goes once it is moved away."""
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["usock_service"], "one", "2", runner.base / "trig")
    proc.wait_for_output(r"^ready 1$", timeout=60)
    runner.checkpoint(store)
    kill_program(proc, "usock_service")
    sock = runner.base / "svc.sock"
    sock.unlink()
    runner.touch(sock)  # a regular file now
    res = runner.lz("restart", "-d", store, timeout=60)
    assert res.rc != 0 and "svc.sock" in res.stderr and "not a socket" in res.stderr, str(res)
    assert "nothing was changed" in res.stderr and len(res.stderr_lines()) == 1, str(res)
    sock.unlink()
    proc = runner.start_lz("restart", "-d", store)
    time.sleep(0.5)
    runner.touch(runner.base / "trig.1")
    proc.wait_for_output(r"^check 1 ok$|^FAIL", timeout=60)
    assert "FAIL" not in proc.stdout, proc.stdout + proc.stderr
    kill_program(proc, "usock_service")


REFUSED = {
    "backlog": r"listening socket with connections it has not accepted",
    "dgreply": r"datagrams from it not read yet",
    "embryo": r"listening socket that has not accepted the connection yet",
    "outside": r"descriptor 7 is one end of a local socket pair whose other end no process of the job holds",
}


@pytest.mark.parametrize("kind", list(REFUSED))
def test_refused_with_a_line(kind, runner, progs):
    """What cannot be restored fails the checkpoint with one line naming
    descriptor 7 and why; nothing is listed or left; the program runs on and
    is checkpointed once it closed the socket."""
    store = runner.base / "store"
    f1, f2 = runner.base / "f1", runner.base / "f2"
    extra = []
    srv = None
    if kind in ("outside", "embryo"):
        path = runner.base / "outside.sock"
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(path))
        os.chmod(path, 0o777)
        srv.listen(4)
        extra = [path]
    try:
        proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", progs["usock_refuse"], kind, f1, f2,
                               *extra)
        proc.wait_for_output(r"^ready$", timeout=60)
        if kind == "outside":
            conn, _ = srv.accept()  # held outside the job
        # the client's line (+ the supervisor's)
        refused_until_let_go(runner, store, proc, rf"(?s)(?=.*descriptor 7\b)(?=.*{REFUSED[kind]})", f1, f2, lines=2)
    finally:
        if srv:
            srv.close()


def _fifo_outside(runner, proc):
    """The named pipe from outside: its node and mode, and the processes of
    the restarted job holding it by that name."""
    st = os.lstat(runner.base / "chan.fifo")
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o620, oct(st.st_mode)
    main = find_program(proc.pid, "fifo_pair")
    held = []
    for pid in [main] + [int(p) for p in Path(f"/proc/{main}/task/{main}/children").read_text().split()]:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                held.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    assert held.count(str(runner.base / "chan.fifo")) == 2, held  # the producer's end and the consumer's


def test_fifo_pair_restarts(runner, progs):
    """A producer and a consumer process over named pipes, with records in
    flight, a consumer's own read-write FIFO with a note in it, and an ack
    FIFO the other way: two SIGKILLs and restarts, every record once and in
    order, the flags kept, and end of file for the consumer once the
    producer closes its end; chan.fifo removed while the job is down is made
    again with its mode."""
    def remove(runner, c):
        if c == 2:
            (runner.base / "chan.fifo").unlink()
    out = _cycles(runner, [progs["fifo_pair"], "2"], "fifo_pair", outside=_fifo_outside, while_down=remove)
    assert out.count("check 1 ok") == 1 and out.count("check 2 ok") == 1, out


def _usock(m, pred):
    for u in m.usocks:
        if pred(u):
            return u
    raise AssertionError(f"no such local socket record: {m.usocks}")


def _bad_addr_len(m):
    m.set(_usock(m, lambda u: u.addr_len), "addr_len", 200)  # past sun_path


def _no_record(m):
    m.set(_usock(m, lambda u: True), "fd", 999)  # its descriptor has no record now


def _listener_with_data(m):
    m.set(_usock(m, lambda u: u.q[16:20] != b"\0\0\0\0" and u.flags == 0x10), "flags", 0x11)  # the datagram server


def _fifo_kind(m):
    for f in m.fds:
        if f.kind == lzformat.FD_FIFO:
            m.set(f, "ino", 4242)  # a named pipe no record describes
            return
    raise AssertionError("no named pipe in the manifest")


MALFORMED = {"usock-addr-len": ("usock_service", _bad_addr_len), "usock-no-record": ("usock_service", _no_record),
             "usock-listener-with-data": ("usock_service", _listener_with_data), "fifo-no-record": ("fifo_pair", _fifo_kind)}


def _checkpointed(runner, progs, prog):
    """prog (usock_service alone, or fifo_pair) checkpointed at `ready 1`
    and killed: the store and the checkpoint's index."""
    store = runner.base / "store"
    argv = [progs[prog], "one", "1"] if prog == "usock_service" else [progs[prog], "1"]
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", *argv, runner.base / "trig")
    proc.wait_for_output(r"^ready 1$", timeout=60)
    idx = runner.checkpoint(store)
    kill_program(proc, prog)
    return store, idx


@pytest.mark.parametrize("how", list(MALFORMED))
def test_malformed_records_refused(how, runner, progs):
    """A manifest whose checksum is right but whose local socket or named
    pipe records are not: `verify` and `restart` refuse it as malformed with
    one line, change nothing, run nothing."""
    prog, damage = MALFORMED[how]
    store, idx = _checkpointed(runner, progs, prog)
    refuse_edited_manifest(runner, store, idx, damage, cmds=("verify", "restart"))


@pytest.mark.parametrize("pattern", ["usock.*[0-9]", "usock.*.from", "fifo.*"])
def test_damaged_data_file_refused(pattern, runner, progs):
    """A datagram server's queue, its senders' file or a named pipe's data
    with a flipped byte: `verify` and `restart` refuse with one line naming
    the file, change nothing, run nothing."""
    prog = "fifo_pair" if pattern.startswith("fifo") else "usock_service"
    store, idx = _checkpointed(runner, progs, prog)
    files = sorted(ckpt_path(store, idx).rglob(pattern))
    assert files, list(ckpt_path(store, idx).rglob("*"))
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0x40
    files[0].write_bytes(bytes(data))
    assert_refused(runner, store, re.escape(files[0].name))
