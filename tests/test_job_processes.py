"""Every process of the job is in its checkpoints, and none is ever left out
silently: a child process (forked, or exec'd with a cleaned environment, which
gets the runtime back) has its part in the checkpoint; a statically linked
program (no LD_PRELOAD reaches it) is named on stderr when it starts, and
while the job's main program has become one, or while a child is one,
checkpoints are refused naming it.  A program whose main thread has exited
while another runs is refused by name.  The job runs on and finishes
correctly in every case.  A child still joining the job when its supervisor
dies ends there, never runs on outside the job."""
import json
import os
import shutil
import time
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import PROGRAMS_SRC, _compile, without_run_lines


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


def processes_of(runner, store, index):
    entry = [e for e in json.loads(runner.lz("list", "-d", store, "--json").stdout) if e["index"] == index]
    assert entry, f"checkpoint {index} not listed"
    return entry[0]["processes"]


def test_child_process_in_checkpoint(runner, progs):
    spawner, _, _ = progs
    store, go = runner.base / "store", runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", spawner, "child", go)
    child = int(proc.wait_for_output(r"^ready (\d+)$", timeout=60).group(1))
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    assert r.rc == 0 and r.stdout.strip().isdigit(), str(r)
    first = int(r.stdout)
    assert "2 processes" in r.stderr, str(r)
    assert processes_of(runner, store, first) == 2
    assert runner.lz("verify", "-d", store).rc == 0
    runner.touch(go)
    proc.wait_for_output(r"^child exit 7$", timeout=60)
    # the child is gone (waited for): one process again
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    assert r.rc == 0 and processes_of(runner, store, int(r.stdout)) == 1, str(r)
    runner.touch(Path(f"{go}.2"))
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert proc.stdout.endswith("done\n"), proc.stdout
    # from the checkpoint with both processes, both come back and finish again
    # (the job finished: --force, or the restart refuses to undo its results)
    r = runner.lz("restart", "-d", store, "--at", str(first), "--force", timeout=60)
    assert r.rc == 0 and "child exit 7" in r.stdout and r.stdout.endswith("done\n"), str(r)


def test_child_made_by_raw_clone_in_checkpoint(runner, progs):
    """A child made by the clone system call itself (no fork(): the runtime's
    atfork handler does not run, its idea of its PID is its parent's) is not
    taken for a vfork child, which shares its parent's memory and must stay
    out: it shares its parent's descriptors' descriptions (stdin), not its
    memory, and takes part."""
    spawner, _, _ = progs
    store, go = runner.base / "store", runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", spawner, "rawclone", go)
    proc.wait_for_output(r"^ready (\d+)$", timeout=60)
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    assert r.rc == 0 and r.stdout.strip().isdigit(), str(r)
    assert processes_of(runner, store, int(r.stdout)) == 2
    runner.touch(go)
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert "child exit 7" in proc.stdout and proc.stdout.endswith("done\n"), proc.stdout


def test_child_execs_with_cleaned_environment(runner, progs):
    """A child that execs a dynamic program with an empty environment keeps the runtime."""
    spawner, _, _ = progs
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", spawner, "forkexec", "/bin/sleep", "2")
    proc.wait_for_output(r"^ready (\d+)$", timeout=60)
    time.sleep(0.3)  # the exec has happened
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    assert r.rc == 0 and processes_of(runner, store, int(r.stdout)) == 2, str(r)
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert "child exit 0" in proc.stdout and "LD_PRELOAD" not in proc.stderr, proc.stdout + proc.stderr


def test_static_child_refuses_checkpoint(runner, progs):
    spawner, static, _ = progs
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", spawner, "forkexec", static, "x")
    child = int(proc.wait_for_output(r"^ready (\d+)$", timeout=60).group(1))
    for _ in range(100):
        if f"starts {static}, which is statically linked" in proc.stderr:
            break
        time.sleep(0.02)
        proc.poll()
    assert f"starts {static}, which is statically linked" in proc.stderr, proc.stderr
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    if proc.poll() is None:  # the static program sleeps 1.5 s: normally still running
        assert r.rc != 0 and f"process {child} (static_sleeper)" in r.stderr and "without the Lazarus runtime" in r.stderr, str(r)
        assert len(r.stderr_lines()) == 1, str(r)
        assert runner.indexes(store) == [], "nothing may be committed"
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert "static done" in proc.stdout and "child exit 0" in proc.stdout, proc.stdout


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


def test_spawn_with_cleaned_environment_keeps_runtime(runner, progs):
    spawner, _, _ = progs
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", spawner, "noenv", "/bin/true")
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert "LD_PRELOAD" not in proc.stderr and "lazarus:" not in without_run_lines(proc.stderr), proc.stderr
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


def test_python_subprocess_child_in_checkpoint(runner):
    """Python's subprocess closes every descriptor above 2 before its exec
    (close_range): the child still belongs to the job, and a checkpoint
    taken while it runs includes it without waiting for it to end."""
    store = runner.base / "store"
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen(['/bin/sleep', '4'])\n"
            "print('ready', flush=True)\n"
            "sys.exit(p.wait())\n")
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", "-c", code)
    proc.wait_for_output(r"^ready$", timeout=60)
    time.sleep(0.5)  # the child has exec'd
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    assert r.rc == 0 and processes_of(runner, store, int(r.stdout)) == 2, str(r)
    pause = [e for e in runner.list_json(store) if e["index"] == int(r.stdout)][0]["pause_ms"]
    assert pause < 2000, f"the checkpoint waited for the child: pause {pause} ms"
    assert proc.wait(timeout=60) == 0, proc.stderr



SPAWNER = """import os, sys, time
print("ready", flush=True)
time.sleep(1.0)
pid = os.posix_spawn(sys.executable, [sys.executable, "-B", sys.argv[1], sys.argv[2]], os.environ)
os.waitpid(pid, 0)
"""
TICKER = "import sys, time\nwhile True:\n    open(sys.argv[1], 'a').write('t\\n')\n    time.sleep(0.05)\n"


def test_start_overtaken_by_the_supervisors_death(runner):
    """A child made by posix_spawn (no fork handler runs: it joins the job
    at the start of the program it execs, over its parent's channel) whose
    supervisor is SIGKILLed before it joins: the join fails, and it must end
    there, not run on outside the job changing files.
    LAZARUS_TEST_JOIN_DELAY_MS holds every start of the runtime before it
    joins, to make that window wide."""
    ticks = runner.base / "ticks"
    spawner, ticker = runner.base / "spawner.py", runner.base / "ticker.py"
    spawner.write_text(SPAWNER)
    ticker.write_text(TICKER)
    runner.env["LAZARUS_TEST_JOIN_DELAY_MS"] = "1500"
    proc = runner.start_lz("run", "-d", runner.base / "store", "-i", "0", "--", "/usr/bin/python3", "-B", spawner,
                           ticker, ticks)
    proc.wait_for_output(r"^ready", timeout=60)
    time.sleep(1.6)  # the child is spawned 1 s after "ready", then held 1.5 s
    assert not ticks.exists(), "the child was not held at its start"
    os.kill(proc.pid, 9)
    proc.wait(timeout=30)
    time.sleep(2.5)  # its hold ends ~0.9 s after the kill: then it would tick every 50 ms
    assert not ticks.exists(), f"a process of the job ran on after its supervisor died: {ticks.read_text().count('t')} ticks"
