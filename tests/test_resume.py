"""`lazarus run --resume`, outside any batch system: the same command line is
the first run and every rerun.  A new DIR starts the program; a job killed
whole (supervisor and program, SIGKILL) comes back from its newest checkpoint
with its files rolled back, and finishes byte-identical to an uninterrupted
run; a finished job gives its recorded status and starts nothing; a DIR whose
job runs (lock held here, or heartbeat advancing from elsewhere) or that holds
another program's job is refused with one line."""
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import LAZARUS, _compile, kill_tree, snapshot, wait_gone, without_run_lines

STEPS, STEP_MS = "150", "40"


@pytest.fixture(scope="module")
def step_sim():
    d = Path(tempfile.mkdtemp(prefix="lazarus-resume-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield _compile("step_sim", d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(step_sim, tmp_path_factory):
    """The uninterrupted run, once per module (its output depends only on the
    arguments): its output file and its stdout."""
    out = tmp_path_factory.mktemp("resume-plain") / "plain.txt"
    import subprocess
    cp = subprocess.run([str(step_sim), STEPS, STEP_MS, str(out)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return out.read_bytes(), cp.stdout


def resume(runner, store, step_sim, out, **kw):
    return runner.lz("run", "--resume", "-d", store, "-i", "1", "--", step_sim, STEPS, STEP_MS, out, **kw)


def test_first_run_then_rerun_after_completion(runner, step_sim, reference):
    want_file, want_out = reference
    store, out = runner.base / "st", runner.base / "out.txt"
    r = resume(runner, store, step_sim, out, timeout=120)
    assert r.rc == 0, str(r)
    assert r.stdout == want_out and out.read_bytes() == want_file
    assert without_run_lines(r.stderr).splitlines() == [
        f"lazarus: resume: no job in {store} yet: starting {step_sim} {STEPS} {STEP_MS} {out}"], str(r)
    assert r.stderr_lines()[-1].startswith("lazarus: program exited with status 0 after "), str(r)
    before = snapshot(store), out.stat().st_mtime_ns
    again = resume(runner, store, step_sim, out)
    # finished: its status, nothing started, nothing changed, one line
    assert again.rc == 0 and again.stdout == "", str(again)
    assert again.stderr_lines() == [f"lazarus: resume: the job in {store} finished (exit status 0): nothing to do"], str(again)
    assert (snapshot(store), out.stat().st_mtime_ns) == before


def test_rerun_after_finished_nonzero_gives_its_status(runner, programs):
    store = runner.base / "st"
    assert runner.lz("run", "--resume", "-d", store, "--", programs.exit_code, "7").rc == 7
    r = runner.lz("run", "--resume", "-d", store, "--", programs.exit_code, "7")
    assert r.rc == 7 and "ready" not in r.stdout, str(r)
    assert "finished (exit status 7)" in r.stderr, str(r)


def test_rerun_after_sigkill_of_the_whole_job(runner, step_sim, reference):
    want_file, want_out = reference
    store, out = runner.base / "st", runner.base / "out.txt"
    argv = ["run", "--resume", "-d", store, "-i", "1", "--", step_sim, STEPS, STEP_MS, out]
    segments = []
    for seg in range(2):
        p = runner.start_lz(*argv)
        above = max(runner.indexes(store), default=0) if seg else 0
        deadline = time.monotonic() + 60
        # a checkpoint of this segment, then a little more work lost to the kill
        while time.monotonic() < deadline and max(runner.indexes(store, check=False) or [0]) <= above:
            assert p.poll() is None, f"ended early\n{p.stderr}"
            time.sleep(0.05)
        time.sleep(0.3)
        assert p.poll() is None, f"ended early\n{p.stderr}"
        pids = kill_tree(p.pid)  # supervisor and program together: a node lost, `kill -9` of the job
        p.wait(timeout=30)
        wait_gone([x for x in pids if x != p.pid])
        segments.append(p.stderr)
    assert "restarting the job" in segments[1], segments
    final = runner.lz(*argv, timeout=120)
    assert final.rc == 0, str(final) + "\n" + "\n".join(segments)
    assert final.stderr_lines()[0].startswith(f"lazarus: resume: restarting the job in {store} from checkpoint "), str(final)
    assert out.read_bytes() == want_file, "the output file differs from an uninterrupted run's"
    assert final.stdout.splitlines()[-1] == want_out.splitlines()[-1]
    assert not final.stdout.startswith("start "), "the program started over"


def test_dir_busy_is_refused(runner, programs, step_sim):
    store = runner.base / "st"
    go = runner.base / "go"
    p = runner.start_lz("run", "--resume", "-d", store, "--", programs.exit_code, "0", go)
    deadline = time.monotonic() + 30
    while "ready" not in p.stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    before = snapshot(store)
    r = runner.lz("run", "--resume", "-d", store, "--", programs.exit_code, "0", go)
    assert r.rc == 242 and r.stdout == "", str(r)  # a job is running with DIR
    assert r.stderr_lines() == [f"lazarus: run --resume: the job in {store} is running (its supervisor holds "
                                f"{store}/lock); nothing was started"], str(r)
    assert snapshot(store) == before
    runner.touch(go)
    assert p.wait(timeout=30) == 0


def test_heartbeat_from_elsewhere_is_refused(runner, step_sim):
    """A supervisor on another machine: the lock is free here (its file system
    does not share locks), the job file says running, and DIR/lock's time
    keeps advancing."""
    store, out = runner.base / "st", runner.base / "out.txt"
    p = runner.start_lz("run", "--resume", "-d", store, "-i", "1", "--", step_sim, STEPS, STEP_MS, out)
    deadline = time.monotonic() + 30
    while not list(store.glob("ckpt.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)  # the supervisor only: its program ends itself (rt_watch.c)
    p.wait(timeout=30)
    time.sleep(0.5)
    stop = threading.Event()

    def beat():
        while not stop.is_set():
            os.utime(store / "lock")
            stop.wait(0.25)
    t = threading.Thread(target=beat)
    t.start()
    try:
        before = snapshot(store)
        r = resume(runner, store, step_sim, out)
        after = snapshot(store)
    finally:
        stop.set()
        t.join()
    assert r.rc == 242, str(r)  # a job is running with DIR
    assert len(r.stderr_lines()) == 1 and "is still running elsewhere" in r.stderr, str(r)
    before.pop("lock", None), after.pop("lock", None)
    assert after == before


def test_another_program_is_refused(runner, programs, step_sim):
    store, out = runner.base / "st", runner.base / "out.txt"
    assert runner.lz("run", "--resume", "-d", store, "--", programs.exit_code, "0").rc == 0
    before = snapshot(store)
    r = runner.lz("run", "--resume", "-d", store, "--", programs.exit_code, "1")
    assert r.rc == 1, str(r)
    assert r.stderr_lines() == [
        f"lazarus: run --resume: {store} holds the job of another program ({programs.exit_code} 0), not of "
        f"{programs.exit_code} 1: nothing was started; give this program another directory (-d DIR), or resume "
        f"that job with `lazarus restart -d {store}`"], str(r)
    assert snapshot(store) == before
    # words are words: "a b" is not "a" "b"
    store2 = runner.base / "st2"
    assert runner.lz("run", "--resume", "-d", store2, "--", "sh", "-c", "exit 0", "x y").rc == 0
    r = runner.lz("run", "--resume", "-d", store2, "--", "sh", "-c", "exit 0", "x", "y")
    assert r.rc == 1 and "sh -c exit\\x200 x\\x20y" in r.stderr, str(r)


def test_checkpoint_signal_outside_slurm(runner, step_sim, reference):
    """--checkpoint-signal USR2 without any batch system: checkpoint, stop the
    program (the job stays restartable, no requeue), `list` names the trigger;
    the same line then resumes it to an identical end."""
    want_file, want_out = reference
    store, out = runner.base / "st", runner.base / "out.txt"
    argv = ["run", "--resume", "--checkpoint-signal", "USR2", "-d", store, "-i", "0", "--", step_sim, STEPS, STEP_MS, out]
    p = runner.start_lz(*argv)
    deadline = time.monotonic() + 30
    while p.stdout.count("\nstep ") < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGUSR2)
    assert p.wait(timeout=60) == 137, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.startswith("lazarus: checkpoint-signal: ")]
    assert lines[0] == "lazarus: checkpoint-signal: SIGUSR2 (the warning signal): checkpoint now, then stop the program", p.stderr
    assert re.fullmatch(r"lazarus: checkpoint-signal: checkpoint 1 is durable \(.* s after it was asked\): stopping the program",
                        lines[1]), p.stderr
    assert [e["trigger"] for e in runner.list_json(store)] == ["signal"]
    final = runner.lz(*argv, timeout=120)
    assert final.rc == 0 and out.read_bytes() == want_file, str(final)
    assert final.stdout.splitlines()[-1] == want_out.splitlines()[-1]


@pytest.mark.parametrize("bad", ["KILL", "SIGSTOP", "URG", "nosuch", "0", "99"])
def test_checkpoint_signal_bad_value(runner, bad):
    r = runner.lz("run", "--checkpoint-signal", bad, "-d", runner.base / "st", "--", "true")
    assert r.rc == 2 and len(r.stderr_lines()) == 1 and "--checkpoint-signal" in r.stderr, str(r)
    assert not (runner.base / "st").exists()


def test_multi_node_slurm_job_refused(runner, programs):
    """A job of several nodes or tasks: one line, nothing made."""
    for extra in ({"SLURM_NNODES": "2"}, {"SLURM_NTASKS": "4"}):
        env = dict(runner.env, SLURM_JOB_ID="77", **extra)
        import subprocess
        cp = subprocess.run(runner.argv([LAZARUS, "run", "--resume", "-d", runner.base / "st", "--", programs.exit_code, "0"]),
                            cwd=runner.base, env=env, capture_output=True, text=True, timeout=30)
        assert cp.returncode == 1 and cp.stdout == "", cp
        err = [l for l in cp.stderr.splitlines() if l.strip()]
        assert len(err) == 1 and "multi-node and MPI jobs are out of scope" in err[0] and "job 77" in err[0], cp.stderr
        assert not (runner.base / "st").exists()
