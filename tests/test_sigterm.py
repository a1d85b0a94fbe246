"""Slurm's SIGTERM reaches every process of the job: inside a Slurm job
(SLURM_JOB_ID set) a program that leaves SIGTERM at its default must not die
of it before Lazarus has checkpointed it.  Here without a real Slurm: a fake
SLURM_JOB_ID and stub `squeue`/`scontrol` on PATH (the job is CANCELLED,
KillWait 30 s), and the test sends SIGTERM to the program and the supervisor
from outside the job, as slurmstepd does (test_slurm.py has the real one).

- a default-disposition program is held: a checkpoint (`sigterm`) is taken,
  then it ends killed by SIGTERM (lazarus exits 143); restarted outside
  Slurm it goes on from that checkpoint, and a SIGTERM then ends it at once;
- sigaction() shows it SIG_DFL all along; a program with its own handler
  sees its handler run, as without Lazarus;
- a SIGTERM a process of the job sends another is not held;
- with its supervisor stopped the program and its child hold their SIGTERM;
  once the supervisor is SIGKILLed both end killed by SIGTERM."""
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from conftest import _compile, find_program, is_alive, wait_gone


@pytest.fixture(scope="module")
def term_probe():
    d = Path(tempfile.mkdtemp(prefix="lazarus-term-", dir="/tmp"))  # the user variants run it as nobody
    os.chmod(d, 0o755)
    yield _compile("term_probe", d)
    shutil.rmtree(d, ignore_errors=True)


def fake_slurm(runner):
    """SLURM_JOB_ID and stub squeue/scontrol on PATH for this runner."""
    bindir = runner.mkdir("fakeslurm")
    (bindir / "squeue").write_text('#!/bin/sh\ncase "$*" in *%T*) echo CANCELLED;; *%L*) echo UNLIMITED;; esac\n')
    (bindir / "scontrol").write_text('#!/bin/sh\ncase "$*" in *"show config"*) echo "KillWait                = 30 sec";;'
                                     ' *requeue*) exit 0;; *) exit 1;; esac\n')
    for f in ("squeue", "scontrol"):
        os.chmod(bindir / f, 0o755)
    runner.env = dict(runner.env, SLURM_JOB_ID="4242", SLURM_NNODES="1", SLURM_NTASKS="1",
                      PATH=f"{bindir}:{runner.env['PATH']}")


def last_step(text: str, who: str = "") -> int:
    return max(int(n) for n in re.findall(rf"^{who}step (\d+)$", text, re.M))


def test_default_sigterm_is_held_and_checkpointed(runner, term_probe):
    fake_slurm(runner)
    store = runner.base / "st"
    p = runner.start_lz("run", "-d", store, "-i", "1000", "--", term_probe, "dfl")
    p.wait_for_output(r"^step 10$", 30)
    assert p.stdout.startswith("disposition default\n"), p.stdout[:200]
    prog = find_program(p.pid, "term_probe")
    os.kill(prog, signal.SIGTERM)  # the program first, then its supervisor, as Slurm may
    os.kill(p.pid, signal.SIGTERM)
    rc = p.wait(60)
    err = p.stderr
    assert rc == 128 + signal.SIGTERM, f"{rc}\n{err}"  # killed by SIGTERM, as without Lazarus
    assert "SIGTERM (job CANCELLED: cancelled or ending)" in err and re.search(r"checkpoint \d+ is durable", err), err
    entries = runner.list_json(store)
    assert [e["trigger"] for e in entries] == ["sigterm"], entries
    before = last_step(p.stdout)
    # restarted outside Slurm: it goes on where SIGTERM found it, and a SIGTERM now ends it at once
    runner.env = {k: v for k, v in runner.env.items() if not k.startswith("SLURM_")}
    r = runner.start_lz("restart", "-d", store)
    r.wait_for_output(rf"^step {before + 5}$", 30)
    assert last_step(r.stdout.split("\n", 1)[1]) >= before and "disposition" not in r.stdout, r.stdout[:300]
    assert int(re.search(r"^step (\d+)$", r.stdout, re.M).group(1)) <= before + 1, r.stdout[:300]
    os.kill(find_program(r.pid, "term_probe"), signal.SIGTERM)
    assert r.wait(10) == 128 + signal.SIGTERM, r.stderr


def test_own_handler_runs(runner, term_probe):
    fake_slurm(runner)
    p = runner.start_lz("run", "-d", runner.base / "st", "-i", "1000", "--", term_probe, "own")
    p.wait_for_output(r"^step 3$", 30)
    assert p.stdout.startswith("disposition default\n"), p.stdout[:200]
    os.kill(find_program(p.pid, "term_probe"), signal.SIGTERM)
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait(60) == 3, p.stderr
    assert "handler ran" in p.stdout, p.stdout[-300:]


def test_sigterm_inside_the_job_is_not_held(runner, term_probe):
    fake_slurm(runner)
    p = runner.start_lz("run", "-d", runner.base / "st", "-i", "1000", "--", term_probe, "reap")
    assert p.wait(60) == 0, p.stderr
    m = re.search(r"^child signal (\d+) in (\d+) ms$", p.stdout, re.M)
    assert m and int(m.group(1)) == signal.SIGTERM and int(m.group(2)) < 2000, p.stdout


def test_supervisor_killed_held_sigterm_still_ends(runner, term_probe):
    fake_slurm(runner)
    p = runner.start_lz("run", "-d", runner.base / "st", "-i", "1000", "--", term_probe, "fork")
    child = int(p.wait_for_output(r"^child (\d+) ready$", 30).group(1))
    p.wait_for_output(r"^child step 5$", 30)
    prog = find_program(p.pid, "term_probe")
    prog = prog if prog != child else next(x for x in (int(s) for s in os.listdir("/proc") if s.isdigit())
                                           if x != child and is_alive(x) and _ppid(x) == p.pid)
    os.kill(p.pid, signal.SIGSTOP)  # a supervisor that cannot act
    try:
        for x in (prog, child):
            os.kill(x, signal.SIGTERM)
        time.sleep(1)
        assert is_alive(prog) and is_alive(child), "a SIGTERM was not held while the supervisor could not act"
    finally:
        os.kill(p.pid, signal.SIGKILL)
    p.wait(30)
    # both are this session's now (it is a subreaper): how they ended
    for x in (prog, child):
        _, status = os.waitpid(x, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, (x, status)
    wait_gone([prog, child])


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
