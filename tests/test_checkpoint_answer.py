"""Processes that could not answer a checkpoint request: a thread made in a
pthread_atfork child handler that a library registered in its constructor
(before the preloaded runtime's: tclsh's way) inherited the blocked
checkpoint signal of the runtime's fork; the job is checkpointed, SIGKILLed
whole and restarted twice, and the child finds the handler's thread still
counting.  A process between vfork and exec for long: the checkpoint fails
at once with a line naming it, its child and vfork, the program runs on and
is checkpointed once the child exec'd.  As root and as an ordinary user."""
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PROGRAMS_SRC, _compile, kill_tree, wait_gone


@pytest.fixture(scope="module")
def atfork_prog(programs):
    d = programs.dir
    src = str(PROGRAMS_SRC / "atfork_thread.c")
    lib = d / "libatfork_thread.so"
    out = d / "atfork_thread"
    for cmd in (["gcc", "-O2", "-Wall", "-DLIB", "-shared", "-fPIC", "-pthread", "-o", str(lib), src],
                ["gcc", "-O2", "-Wall", "-o", str(out), src, f"-L{d}", "-latfork_thread", f"-Wl,-rpath,{d}", "-pthread"]):
        cp = subprocess.run(cmd, capture_output=True, text=True)
        assert cp.returncode == 0, cp.stdout + cp.stderr
    os.chmod(lib, 0o755)
    os.chmod(out, 0o755)
    return out


def test_thread_made_in_atfork_child_handler(runner, atfork_prog):
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", atfork_prog, "2", trig)
    proc.wait_for_output(r"^ready$", timeout=60)
    out = ""
    for c in (1, 2):
        time.sleep(0.3)
        t0 = time.monotonic()
        res = runner.lz("checkpoint", "-d", store, timeout=60)
        assert res.rc == 0 and "2 processes, 3 threads" in res.stderr, str(res)
        assert time.monotonic() - t0 < 5, str(res)
        pids = kill_tree(proc.pid)
        proc.wait(timeout=30)
        wait_gone(pids)
        out += proc.stdout
        proc = runner.start_lz("restart", "-d", store)
        time.sleep(0.3)
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^child {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
    runner.touch(Path(f"{trig}.3"))
    assert proc.wait(timeout=60) == 0, out + proc.stdout + proc.stderr
    assert proc.stdout.endswith("done\n"), proc.stdout


def test_process_in_vfork_fails_at_once(runner, programs):
    """A process whose vfork child runs on its memory without exec: the
    checkpoint fails at once naming both and vfork (not after waiting); the
    program runs on, and once the child exec'd a checkpoint is taken."""
    prog = _compile("vfork_wait", programs.dir)
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", prog, trig)
    proc.wait_for_output(r"^ready$", timeout=60)
    time.sleep(0.3)
    t0 = time.monotonic()
    res = runner.lz("checkpoint", "-d", store, timeout=120)
    took = time.monotonic() - t0
    assert res.rc != 0 and res.stdout == "", str(res)
    assert re.search(r"process \d+ \(vfork_wait\): is waiting in vfork: its child \d+ \(vfork_wait\) has run on its "
                     r"memory without exec or exit", res.stderr), str(res)
    assert len(res.stderr_lines()) == 1 and took < 8, (took, str(res))
    assert runner.indexes(store) == [] and proc.poll() is None, proc.stderr
    runner.touch(Path(f"{trig}.1"))
    proc.wait_for_output(r"^reaped$", timeout=60)
    runner.checkpoint(store)
    runner.touch(Path(f"{trig}.2"))
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
