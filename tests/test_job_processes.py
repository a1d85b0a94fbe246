"""Processes (and a thread layout) of a job that Lazarus cannot checkpoint
(yet) are never left out silently: a child process makes a checkpoint fail with a message naming it; a
statically linked program (no LD_PRELOAD reaches it), or one started with an
environment without the runtime, is named on stderr when it starts, and while
the job's program has become one, checkpoints are refused with that reason.
A program whose main thread has exited while another runs is refused by name.
The job runs on and finishes correctly in every case."""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import PROGRAMS_SRC, _compile


@pytest.fixture(scope="module")
def progs():
    d = Path(tempfile.mkdtemp(prefix="lazarus-jobprocs-", dir="/tmp"))
    os.chmod(d, 0o755)
    spawner = _compile("spawner", d)
    static = d / "static_sleeper"
    cp = subprocess.run(["gcc", "-O2", "-static", "-o", str(static), str(PROGRAMS_SRC / "static_sleeper.c")],
                        capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.fail(f"cannot link a static test program (libc6-dev provides libc.a):\n{cp.stderr}")
    os.chmod(static, 0o755)
    yield spawner, static, _compile("main_exits", d, ["-pthread"])
    shutil.rmtree(d, ignore_errors=True)


def test_child_process_refuses_checkpoint(runner, progs):
    spawner, _, _ = progs
    store, go = runner.base / "store", runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", spawner, "child", go)
    child = int(proc.wait_for_output(r"^ready (\d+)$", timeout=60).group(1))
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    assert r.rc != 0, f"a checkpoint of a program with a child must fail\n{r}"
    assert f"{child} spawner" in r.stderr and "child process" in r.stderr, str(r)
    assert len(r.stderr_lines()) == 1, str(r)
    assert runner.indexes(store) == [], "nothing may be committed"
    runner.touch(go)
    proc.wait_for_output(r"^child exit 7$", timeout=60)
    # the child is gone: checkpoints work again
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    assert r.rc == 0 and r.stdout.strip().isdigit(), str(r)
    runner.touch(Path(f"{go}.2"))
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert proc.stdout.endswith("done\n"), proc.stdout


def test_static_program_named_and_refused(runner, progs):
    spawner, static, _ = progs
    store, go = runner.base / "store", runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", spawner, "exec", static, go)
    proc.wait_for_output(r"^ready$", timeout=60)
    assert runner.lz("checkpoint", "-d", store, timeout=60).rc == 0  # still the dynamic spawner
    runner.touch(go)
    deadline_msg = f"starts {static}, which is statically linked"
    # named when it starts, before it runs
    for _ in range(200):
        if deadline_msg in proc.stderr:
            break
        proc.poll()
        if proc.returncode is not None:
            break
        __import__("time").sleep(0.02)
    assert deadline_msg in proc.stderr, proc.stderr
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    if proc.poll() is None:  # the static program sleeps 1.5 s: normally still running
        assert r.rc != 0 and "statically linked" in r.stderr and "cannot be checkpointed" in r.stderr, str(r)
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert proc.stdout.endswith("static done\n"), proc.stdout
    assert len(runner.indexes(store)) == 1


def test_program_without_runtime_environment_named(runner, progs):
    spawner, _, _ = progs
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", spawner, "noenv", "/bin/true")
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert "starts /bin/true, which is started without LD_PRELOAD" in proc.stderr, proc.stderr
    assert proc.stdout.endswith("done\n"), proc.stdout


def test_main_thread_exited_refused(runner, progs):
    _, _, main_exits = progs
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", main_exits)
    proc.wait_for_output(r"^ready$", timeout=60)
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    assert r.rc != 0 and "(the main thread) has exited" in r.stderr, str(r)
    assert len(r.stderr_lines()) == 1, str(r)
    assert runner.indexes(store) == [], "nothing may be committed"
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert proc.stdout == "ready\nworker done\n", proc.stdout
