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
import re
import time
from pathlib import Path

import pytest

import lzformat
from conftest import _compile, ckpt_path, kill_program


@pytest.fixture(scope="module")
def pty_prog(programs):
    return _compile("pty_script", programs.dir)


def _cycles(runner, argv, comm, cycles=2):
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
