"""Processes that could not answer a checkpoint request: a thread made in a
pthread_atfork child handler that a library registered in its constructor
(before the preloaded runtime's: tclsh's way) inherited the blocked
checkpoint signal of the runtime's fork; the job is checkpointed, SIGKILLed
whole and restarted twice, and the child finds the handler's thread still
counting.  As root and as an ordinary user."""
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PROGRAMS_SRC, kill_tree, wait_gone


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
