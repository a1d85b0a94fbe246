"""Batch jobs on a real Slurm (tests/slurm.py: munged, slurmctld and slurmd
started here, one node of two CPUs): the one line

    exec lazarus run --resume -d DIR -i N -- step_sim STEPS MS OUT

in a job script brings the job through its time limit (with
`--signal=B:USR1@20` and without any --signal), a preemption by a job of a
higher partition, and its node set DOWN: each job ends COMPLETED after
requeues (`scontrol show job` counts them), its output file byte-identical to
an uninterrupted run's and its last stdout line the same result.

Slurm's floor is a time limit of one minute, and a requeued job starts again
only after AuthInfo cred_expire (30 s here, as issue 19 asks) and the next
scheduling pass (5 s): the time-limit jobs use --time=1 and need about three
minutes of work (3x their limit, as issue 19 asks: at least two requeues),
and run side by side (a CPU each); scripts/test.sh runs this file beside the
rest of the suite, as it mostly waits for Slurm; the
preemption and node-failure jobs take under a minute of work each.  Slurm may
send the warning signal up to a minute early (its event resolution, `man
sbatch`), so the USR1 job is signalled anywhere in its minute."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

import slurm as slurm_mod
from conftest import LAZARUS, _compile, reap_orphans

PACE_MS = 200
DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


@pytest.fixture(autouse=True)
def _no_leftovers():
    """conftest's kills every child of the session after each test: here the
    Slurm daemons are such children and must outlive each test (the cluster
    fixture stops them by PID, and `scancel` ends the jobs)."""
    yield
    reap_orphans()


@pytest.fixture(scope="module")
def cluster():
    c, why = slurm_mod.start_cluster()
    if c is None:
        pytest.skip(why)
    yield c
    c.stop()
    if not os.environ.get("LAZARUS_SLURM_KEEP"):  # keep the logs, stores and job outputs to look at
        c.cleanup()


@pytest.fixture(scope="module")
def work(cluster):
    d = cluster.dir / "work"
    d.mkdir(mode=0o755)
    _compile("step_sim", d)
    return d


def expected(work: Path, steps: int):
    """The uninterrupted run (pacing does not change the output): the file and the result line."""
    out = work / f"plain-{steps}.txt"
    cp = subprocess.run([str(work / "step_sim"), str(steps), "0", str(out)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return out.read_bytes(), cp.stdout.splitlines()[-1]


def submit(cluster, work: Path, name: str, steps: int, interval: int, *opts) -> int:
    script = work / f"{name}.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH --requeue --open-mode=append --output={work}/{name}.log --job-name={name} --ntasks=1 --cpus-per-task=1
exec {LAZARUS} run --resume -d {work}/{name}.ckpt -i {interval} -k 100 -- {work}/step_sim {steps} {PACE_MS} {work}/{name}.txt
""")
    return cluster.sbatch(script, *opts)


def wait_state(cluster, jobid: int, states, timeout: float) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        j = cluster.job(jobid)
        if j.get("JobState") in states:
            return j
        time.sleep(0.5)
    raise AssertionError(f"job {jobid} never {states} in {timeout}s: {cluster.job(jobid)}\n{cluster.logs()}")


def wait_done(cluster, jobid: int, timeout: float) -> dict:
    return wait_state(cluster, jobid, DONE_STATES, timeout)


def wait_checkpoints(work: Path, name: str, count: int, timeout: float) -> None:
    store = work / f"{name}.ckpt"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if store.is_dir() and len([n for n in os.listdir(store) if n.startswith("ckpt.")]) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{name}: fewer than {count} checkpoints after {timeout}s")


def check_identical(work: Path, name: str, steps: int, job: dict, min_restarts: int = 1) -> str:
    log = (work / f"{name}.log").read_text(errors="replace")
    want_file, want_result = expected(work, steps)
    assert job.get("JobState") == "COMPLETED" and job.get("ExitCode") == "0:0", f"{job}\n{log[-4000:]}"
    assert int(job.get("Restarts", "0")) >= min_restarts, f"no restart counted by Slurm: {job}\n{log[-4000:]}"
    assert (work / f"{name}.txt").read_bytes() == want_file, f"{name}.txt differs from an uninterrupted run's\n{log[-4000:]}"
    results = [l for l in log.splitlines() if l.startswith("result ")]
    assert results == [want_result], f"{results} != [{want_result}]\n{log[-4000:]}"
    return log


def lazarus_lines(log: str):
    return [l for l in log.splitlines() if l.startswith("lazarus: ")]


@pytest.fixture(scope="module")
def time_limit_jobs(cluster, work):
    """Both time-limit jobs at once (a CPU each): 900 steps of 0.2 s = 3 min of work, --time=1."""
    return {
        "usr1": submit(cluster, work, "usr1", 900, 10, "--time=1", "--signal=B:USR1@20"),
        "nosignal": submit(cluster, work, "nosignal", 900, 10, "--time=1"),
    }


def test_time_limit_with_warning_signal(cluster, work, time_limit_jobs):
    job = wait_done(cluster, time_limit_jobs["usr1"], 1200)
    log = check_identical(work, "usr1", 900, job, min_restarts=2)
    lines = lazarus_lines(log)
    assert any("SIGUSR1 (the warning signal): checkpoint now" in l for l in lines), "\n".join(lines)
    assert any(re.search(r"job \d+ requeued .* it resumes from checkpoint \d+", l) for l in lines), "\n".join(lines)
    assert any("restarting the job in" in l for l in lines), "\n".join(lines)
    assert not any("TIME LIMIT" in l for l in log.splitlines()), log[-3000:]
    assert "signal" in triggers(work, "usr1")


def test_time_limit_without_any_signal(cluster, work, time_limit_jobs):
    job = wait_done(cluster, time_limit_jobs["nosignal"], 1200)
    log = check_identical(work, "nosignal", 900, job, min_restarts=2)
    lines = lazarus_lines(log)
    # one stop per requeue, each by the walltime trigger (its checkpoint is labelled
    # "interval" when an interval checkpoint was under way and served as the stop's)
    fired = [l for l in lines if "the time limit is" in l and "no warning signal came" in l]
    assert len(fired) >= 2, "\n".join(lines)
    assert not any("TIME LIMIT" in l for l in log.splitlines()), "Slurm killed it at its limit:\n" + log[-3000:]
    assert "walltime" in triggers(work, "nosignal")


def triggers(work: Path, name: str) -> list:
    """The trigger of every checkpoint kept (-k 100: all of them), as `lazarus list` shows them."""
    out = subprocess.run([str(LAZARUS), "list", "-d", str(work / f"{name}.ckpt"), "--json"], capture_output=True,
                         text=True, timeout=60).stdout
    return [e["trigger"] for e in json.loads(out)]


def test_preemption_low_by_high(cluster, work):
    low = submit(cluster, work, "low", 200, 3, "--partition=low", "--time=10", "--signal=B:USR1@5")
    wait_state(cluster, low, ("RUNNING",), 120)
    wait_checkpoints(work, "low", 2, 60)
    hi = work / "high.sh"
    hi.write_text(f"#!/bin/bash\n#SBATCH --partition=high --ntasks=1 --cpus-per-task=2 --output={work}/high.log\nsleep 10\n")
    high = cluster.sbatch(hi)
    h = wait_done(cluster, high, 300)
    assert h["JobState"] == "COMPLETED", h
    job = wait_done(cluster, low, 400)
    log = check_identical(work, "low", 200, job)
    # the low job ran again only after the high one
    assert job["StartTime"] >= h["EndTime"], (job, h)


def test_node_down_then_resumed(cluster, work):
    job_id = submit(cluster, work, "nodefail", 200, 3, "--time=10")
    wait_state(cluster, job_id, ("RUNNING",), 120)
    wait_checkpoints(work, "nodefail", 2, 60)
    time.sleep(2)
    r = cluster.run("scontrol", "update", f"nodename={cluster.node}", "state=down", "reason=lazarus-test")
    assert r.returncode == 0, r.stderr
    try:
        down = wait_state(cluster, job_id, ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"), 120)
        assert down.get("Restarts") == "1", down
    finally:
        # resumed by hand; slurmd answering may have done it already (ReturnToService=2: the
        # resume is then refused as an invalid transition from IDLE)
        cluster.run("scontrol", "update", f"nodename={cluster.node}", "state=resume")
        end = time.monotonic() + 60
        while not cluster.node_state().startswith(("idle", "mixed", "allocated")) and time.monotonic() < end:
            time.sleep(0.5)
    job = wait_done(cluster, job_id, 400)
    log = check_identical(work, "nodefail", 200, job)
    lines = lazarus_lines(log)
    # it came back from a periodic checkpoint: the one SIGTERM asked for could not be taken (the
    # program got Slurm's SIGTERM too), or was, and either way the result is the same
    m = [l for l in lines if "restarting the job in" in l]
    assert m, "\n".join(lines)
    assert any("SIGTERM (job " in l for l in lines), "\n".join(lines)


def test_scancel_checkpoints_a_program_with_default_sigterm(cluster, work):
    """scancel: Slurm sends SIGTERM to every process of the job, step_sim too,
    which leaves SIGTERM at its default.  The runtime holds it for the
    supervisor, which checkpoints within KillWait (`sigterm`), then the program
    ends killed by SIGTERM.  No periodic checkpoint (-i 1000): the same script
    submitted again resumes from that one, losing no step."""
    job_id = submit(cluster, work, "scancel", 100, 1000, "--time=10")
    wait_state(cluster, job_id, ("RUNNING",), 120)
    out = work / "scancel.txt"
    end = time.monotonic() + 60
    while (not out.exists() or out.read_text().count("\n") < 15) and time.monotonic() < end:
        time.sleep(0.2)
    r = cluster.run("scancel", str(job_id))
    assert r.returncode == 0, r.stderr
    first = wait_done(cluster, job_id, 120)
    log = (work / "scancel.log").read_text(errors="replace")
    assert first["JobState"] == "CANCELLED", first
    assert triggers(work, "scancel") == ["sigterm"], log[-3000:]
    cut = len(re.findall(r"^step \d+ ", log, re.M))  # steps done before the cancel
    again = submit(cluster, work, "scancel", 100, 1000, "--time=10")
    job = wait_done(cluster, again, 300)
    log = check_identical(work, "scancel", 100, job, min_restarts=0)
    lines = lazarus_lines(log)
    assert any("restarting the job in" in l for l in lines), "\n".join(lines)
    # the rerun went on from the step SIGTERM found: at most the step under way is done again
    rerun = re.findall(r"^step (\d+) ", log, re.M)[cut:]
    assert rerun and int(rerun[0]) >= cut - 1, (cut, rerun[:3], "\n".join(lines))
