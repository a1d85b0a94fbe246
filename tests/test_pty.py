"""Pseudo-terminals the job made, checkpointed with their state: a program
holding both ends of a pty (canonical mode with echo, packet mode, a
window size, odd special characters and speeds) leaves a complete and a
partial line queued for the terminal end and a line of output queued for
the master, is checkpointed, SIGKILLed and restarted twice, and checks from
inside that termios, window size and packet mode are as it set them and
that each side reads exactly what was queued (nothing echoed twice, the
partial line still partial); the manifest holds the queued bytes; a
terminal end whose master another process holds still fails the
checkpoint with one line naming the descriptor.  As root and as an
ordinary user."""
import fcntl
import struct
import os
import re
import subprocess
import termios
import threading
import time
from pathlib import Path

import pytest

import lzformat
from conftest import LAZARUS, _compile, ckpt_path, kill_job, kill_program, ns_pid, refuse_edited_manifest


@pytest.fixture(scope="module")
def pty_prog(programs):
    return _compile("pty_script", programs.dir)


def _stat_ids(pid):
    """(pid as the job sees it, ppid, pgrp, session, tty_nr) from /proc/PID/stat, outside the job."""
    st = open(f"/proc/{pid}/stat").read()
    f = st[st.rindex(")") + 2:].split()
    return int(f[1]), int(f[2]), int(f[3]), int(f[4])


def _cycles(runner, argv, comm, cycles=2, whole=False, each=None):
    """Run argv (which prints `ready C` and waits for TRIG.C) and for each
    cycle: checkpoint, SIGKILL, restart, touch the trigger, wait for
    `check C ok`.  Returns (all stdout, all stderr, the store)."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", *argv, trig)
    out = err = ""
    for c in range(1, cycles + 1):
        proc.wait_for_output(rf"^ready {c}$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, proc.stdout + proc.stderr
        time.sleep(0.3)
        runner.checkpoint(store)
        if each:
            each(proc, c)
        if whole:
            kill_job(proc)
        else:
            kill_program(proc, comm)
        out += proc.stdout
        err += proc.stderr
        proc = runner.start_lz("restart", "-d", store)
        time.sleep(0.3)
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, out + proc.stdout + proc.stderr
    out += proc.stdout
    err += proc.stderr
    assert re.search(r"^done$", out, re.M), out
    return out, err, store


def test_pty_in_one_process(runner, pty_prog):
    """Both ends in one process: two checkpoint/kill/restart cycles, every
    check passes; the manifest records the pty with the bytes queued."""
    out, err, store = _cycles(runner, [pty_prog, "one", "2"], "pty_script")
    assert out.count("check 1 ok") == 1 and out.count("check 2 ok") == 1, out
    m = lzformat.Manifest.load(ckpt_path(store, max(runner.indexes(store))) / "manifest")
    ptys = m.ptys()
    assert len(ptys) == 1, ptys
    p = ptys[0]
    # at the second checkpoint: "in 2\n" + "part 2" for the terminal end, "out 2\r\n" for the master
    assert p["to_slave"] == len("in 2\npart 2") and p["to_master"] == len("out 2\r\n"), p
    assert p["data"] == b"in 2\npart 2out 2\r\n", p
    assert p["flags"] & 1 and (p["rows"], p["cols"]) == (33, 77), p


def _job(proc):
    """[(pid, comm)] of the supervisor's live descendants that are the program."""
    from conftest import comm_of, descendants
    return [p for p, _ in descendants(proc.pid) if comm_of(p) == "pty_script"]


def test_pty_script_like_tree(runner, pty_prog):
    """A script(1)-like pair: the parent holds the master, its child leads a
    session of its own with the terminal end as controlling terminal and
    stdio.  A line goes through before each checkpoint and one is on its
    way through it; the whole job is SIGKILLed and restarted twice; after
    each restart the child still has the pty as controlling terminal and is
    its foreground group (it answers `ctty-ok`), the parent reads exactly
    the answer, termios and window size are as set.  From outside: the
    child's session and group are its own and its tty_nr is a pty."""
    seen = []

    def each(proc, c):
        ids = {}
        for p in _job(proc):
            ppid, pgrp, sid, tty = _stat_ids(p)
            ids[ns_pid(p)] = (pgrp, sid, tty, p)
        seen.append(ids)

    out, err, store = _cycles(runner, [pty_prog, "tree", "2"], "pty_script", whole=True, each=each)
    assert out.count("check 2 ok") == 1, out
    for ids in seen:
        assert len(ids) == 2, ids
        parent, child = sorted(ids)
        pg, sid, tty, host = ids[child]
        assert (pg, sid) == (host, host) and (tty >> 8) & 0xfff == 136, ids  # major 136: /dev/pts/N
    # the restarts' terminals are new ones: the cycle prints name them
    assert re.findall(r"cycle \d+: terminal /dev/pts/\d+", err), err


def test_pty_never_opened(runner, pty_prog):
    """A master whose terminal end was never opened at the checkpoint (a
    script-like parent before its child opened it): after the restart its
    master reads no hang-up (EAGAIN, not EIO: the checkpoint and the
    restart opened no terminal end of it), its settings are kept, and a
    child opening the new terminal end answers through it."""
    out, err, store = _cycles(runner, [pty_prog, "late", "1"], "pty_script", cycles=1)
    m = lzformat.Manifest.load(ckpt_path(store, max(runner.indexes(store))) / "manifest")
    assert [p["flags"] & 8 for p in m.ptys() if not p["flags"] & 4] == [8], m.ptys()


@pytest.mark.parametrize("how", ["outside", "twice"])
def test_pty_refused_at_checkpoint(runner, pty_prog, how):
    """A terminal end of a pty made outside the job (opened by name), or a
    master two processes hold: the checkpoint fails with one line naming the
    descriptor, and the job goes on to its end."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    m, s = os.openpty()
    try:
        name = os.ttyname(s)
        os.chmod(name, 0o666)
        proc = runner.start_lz("run", "-d", store, "-i", "0", "--", pty_prog, how, name, trig)
        proc.wait_for_output(r"^ready 1$", timeout=60)
        time.sleep(0.3)
        r = runner.lz("checkpoint", "-d", store)
        assert r.rc != 0, r
        want = "whose master no process of the job holds" if how == "outside" else "which process"
        assert want in r.stderr and "descriptor" in r.stderr, r
        assert len(r.stderr.strip().splitlines()) == 1, r
        runner.touch(Path(f"{trig}.1"))
        assert proc.wait(timeout=60) == 0, proc.stderr
        assert "done" in proc.stdout
    finally:
        os.close(m)
        os.close(s)


class OnTerminal:
    """`lazarus ARGS` run on a new pseudo-terminal made by the test (python's
    os.openpty), as from an interactive shell: a session of its own whose
    controlling terminal it is; what appears on the terminal is read from
    its master."""

    def __init__(self, runner, *args):
        self.m, s = os.openpty()
        os.chmod(os.ttyname(s), 0o666)

        def ctty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.p = subprocess.Popen(runner.argv([LAZARUS, *args]), cwd=runner.base, env=runner.env, stdin=s, stdout=s,
                                  stderr=s, start_new_session=True, preexec_fn=ctty)
        os.close(s)
        self.pid = self.p.pid
        self.buf = bytearray()
        self.t = threading.Thread(target=self._drain, daemon=True)
        self.t.start()

    def _drain(self):
        while True:
            try:
                b = os.read(self.m, 4096)
            except OSError:
                break
            if not b:
                break
            self.buf.extend(b)

    @property
    def stdout(self) -> str:
        return self.buf.decode(errors="replace").replace("\r\n", "\n")

    def wait_for(self, pattern, timeout=60):
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.stdout, re.M):
            assert time.monotonic() < deadline and self.p.poll() is None, f"no /{pattern}/:\n{self.stdout}"
            time.sleep(0.02)

    def wait(self, timeout):
        rc = self.p.wait(timeout=timeout)
        self.t.join(timeout=5)
        os.close(self.m)
        return rc if rc >= 0 else 128 - rc


def test_job_on_the_restarters_terminal(runner, pty_prog):
    """`lazarus run` on a terminal (a pty the test made), a program and its
    child on it, the child in a group of its own made the foreground (as a
    job control shell's foreground job): after each of two SIGKILLs of the
    whole job, `lazarus restart` runs on another new terminal, both
    processes have that one as controlling terminal, the child's group is
    its foreground, and ^C typed on it reaches the child (SIGINT)."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    t = OnTerminal(runner, "run", "-d", store, "-i", "0", "--", pty_prog, "ctty", "2", trig)
    out = ""
    for c in (1, 2):
        t.wait_for(rf"^ready {c}$")
        time.sleep(0.3)
        runner.checkpoint(store)
        kill_job(t)
        out += t.stdout
        t = OnTerminal(runner, "restart", "-d", store)
        time.sleep(0.5)
        runner.touch(Path(f"{trig}.{c}"))
        for who in ("parent", "child"):
            t.wait_for(rf"^{who} ctty {c} ok$|^FAIL")
            assert "FAIL" not in t.stdout, out + t.stdout
        time.sleep(0.2)
        os.write(t.m, b"\x03")  # ^C on the restarter's terminal
        t.wait_for(rf"child sigint {c}$|^FAIL")
        assert "FAIL" not in t.stdout, out + t.stdout
    assert t.wait(timeout=60) == 0, out + t.stdout
    out += t.stdout
    assert "done" in out, out


def test_restart_without_a_terminal(runner, pty_prog):
    """The same job started on a terminal and restarted without one (stdio
    /dev/null and pipes, no controlling terminal): the restart works and the
    job goes on; only its terminal checks fail, as they would natively."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    t = OnTerminal(runner, "run", "-d", store, "-i", "0", "--", pty_prog, "one", "1", trig)
    t.wait_for(r"^ready 1$")
    time.sleep(0.3)
    runner.checkpoint(store)
    kill_job(t)
    proc = runner.start_lz("restart", "-d", store)
    time.sleep(0.3)
    runner.touch(Path(f"{trig}.1"))
    proc.wait_for_output(r"^check 1 ok$|^FAIL", timeout=60)
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    assert "done" in proc.stdout


@pytest.mark.parametrize("how", ["bytes", "index", "nomaster"])
def test_malformed_pty_record_refused(how, runner, pty_prog):
    """A sealed manifest whose pty record claims more queued bytes than the
    section holds, names an index no master descriptor has, or a master
    descriptor without its record: the restart is refused with one line,
    the store is left as it was, and nothing runs."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", pty_prog, "one", "1", trig)
    proc.wait_for_output(r"^ready 1$", timeout=60)
    idx = runner.checkpoint(store)
    kill_program(proc, "pty_script")

    def edit(m):
        rec = m.section(lzformat.SEC_PTYS).off + 8  # the first record
        if how == "bytes":
            struct.pack_into("<I", m.data, rec + lzformat.PTY.offset("to_master"), 1 << 19)
        elif how == "index":
            struct.pack_into("<I", m.data, rec + lzformat.PTY.offset("index"), 4000)
        else:
            master = next(f for f in m.fds if f.kind == lzformat.FD_PTY and f.size == 1)
            m.set(master, "ino", 4000)

    refuse_edited_manifest(runner, store, idx, edit)
