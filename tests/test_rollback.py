"""`lazarus rollback`: the files of a stopped job back to checkpoint N with
nothing started (programs/rollback_steps.py appends, overwrites in place,
truncates, renames and deletes between checkpoints), checked from outside by
hashing the files against what they were when N was taken; refused while the
job runs, after an outside change (245, nothing changed; --force), and on
bad input (one line, nothing changed); the store left so that a second
rollback is a no-op that says so and `restart --at N` resumes the program,
which ends with the files of an uninterrupted run."""
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PROGRAMS_SRC, kill_program, snapshot

RUNNING, NOT_FOUND, DAMAGED, OUTSIDE = 242, 240, 244, 245


def files_of(d: Path) -> dict:
    """Every file below d: its name (relative), mode and content hash."""
    out = {}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(d))] = (oct(st.st_mode), hashlib.sha256(p.read_bytes()).hexdigest()
                                      if p.is_file() else None)
    return out


def one_line(res, rc, *words):
    assert res.rc == rc, f"want exit {rc}\n{res}"
    lines = res.stderr_lines()
    assert len(lines) == 1 and lines[0].startswith("lazarus: "), f"want one line on stderr\n{res}"
    for w in words:
        assert w in lines[0], f"{w!r} not said\n{res}"


@pytest.fixture
def job(runner):
    """rollback_steps.py under `lazarus run -i 0` in runner.base/work, copied
    where the user variant can read it."""
    prog = runner.base / "rollback_steps.py"
    shutil.copy(PROGRAMS_SRC / "rollback_steps.py", prog)
    os.chmod(prog, 0o644)
    work = runner.mkdir("work")
    return prog, work


def start(runner, prog, work, steps=4):
    store, trig = runner.base / "st", runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "python3", prog, work, trig, str(steps))
    return proc, store, trig


def uninterrupted(runner, prog, steps=4) -> dict:
    """The files of a run without Lazarus (its triggers made beforehand)."""
    d = runner.mkdir("plain")
    trig = runner.base / "ptrig"
    for i in range(1, steps + 1):
        runner.touch(Path(f"{trig}.{i}"))
    runner.run(["python3", prog, d, trig, str(steps)], check_rc=0)
    return files_of(d)


def test_rollback_then_restart(runner, job):
    prog, work = job
    proc, store, trig = start(runner, prog, work)
    at = {}
    for i in (1, 2):
        proc.wait_for_output(rf"^step {i}$", timeout=60)
        n = runner.checkpoint(store)
        at[n] = files_of(work)
        runner.touch(Path(f"{trig}.{i}"))
    n1, n2 = sorted(at)
    proc.wait_for_output(r"^step 3$", timeout=60)
    # refused while the job runs: nothing changed
    now, before = files_of(work), snapshot(store)
    one_line(runner.lz("rollback", "-d", store), RUNNING, "a job is running", "nothing was changed")
    assert files_of(work) == now and snapshot(store) == before
    kill_program(proc, "python3")
    assert files_of(work) == now

    # to the newest: exactly the files at n2, told in one line
    r = runner.lz("rollback", "-d", store, check_rc=0)
    m = re.fullmatch(rf"rolled back (\d+) files to checkpoint {n2} taken at \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", r.stdout)
    assert m and int(m.group(1)) >= 4 and not r.stderr, r
    assert files_of(work) == at[n2]
    # a second rollback: a no-op that says so, the store unchanged
    before = snapshot(store)
    r = runner.lz("rollback", "-d", store, check_rc=0)
    assert "rolled back 0 files" in r.stdout and "nothing was changed" in r.stdout, r
    assert files_of(work) == at[n2] and snapshot(store) == before
    # --at the older one, --json
    r = runner.lz("rollback", "-d", store, "--at", str(n1), "--json", check_rc=0)
    doc = json.loads(r.stdout)
    assert doc["lazarus_version"] and doc["index"] == n1 and doc["changed"] is True and doc["files_rolled_back"] >= 4, r
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["taken"]), r
    assert files_of(work) == at[n1]
    assert runner.indexes(store) == [n1]
    assert runner.lz("verify", "-d", store).rc == 0
    r = runner.lz("diff", "-d", store, "--json", check_rc=0)
    assert json.loads(r.stdout)["changes"] == [], r

    # the store is as a restart needs it: the program resumes after step 1
    # and ends with the uninterrupted run's files
    for i in (1, 2):
        os.unlink(f"{trig}.{i}")
    proc = runner.start_lz("restart", "-d", store, "--at", str(n1))
    for i in range(1, 5):
        runner.touch(Path(f"{trig}.{i}"))
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert "0 files rolled back" in proc.stderr, proc.stderr
    assert proc.stdout.splitlines() == ["step 2", "step 3", "step 4", "done"], proc.stdout
    assert files_of(work) == uninterrupted(runner, prog)


def test_outside_change_refused(runner, job):
    """A file the job wrote, changed by someone else after it stopped: 245,
    one line, neither files nor store changed; --force rolls it back."""
    prog, work = job
    proc, store, trig = start(runner, prog, work)
    proc.wait_for_output(r"^step 1$", timeout=60)
    n = runner.checkpoint(store)
    at_n = files_of(work)
    runner.touch(Path(f"{trig}.1"))
    proc.wait_for_output(r"^step 2$", timeout=60)
    kill_program(proc, "python3")
    with open(work / "log", "a") as f:
        f.write("outside\n")
    now, before = files_of(work), snapshot(store)
    one_line(runner.lz("rollback", "-d", store), OUTSIDE, "changed outside the job", "log",
             "nothing was changed", "lazarus rollback --force")
    assert files_of(work) == now and snapshot(store) == before
    r = runner.lz("rollback", "-d", store, "--force", check_rc=0)
    assert f"to checkpoint {n} taken at" in r.stdout, r
    assert files_of(work) == at_n


def test_bad_input(runner, job):
    """One line, non-zero, nothing changed: no store, no such checkpoint, a
    damaged job file, a bad argument, a remote store."""
    prog, work = job
    one_line(runner.lz("rollback", "-d", runner.base / "nowhere"), NOT_FOUND, "no checkpoint store")
    proc, store, trig = start(runner, prog, work, steps=2)
    proc.wait_for_output(r"^step 1$", timeout=60)
    n = runner.checkpoint(store)
    runner.touch(Path(f"{trig}.1"))
    runner.touch(Path(f"{trig}.2"))
    assert proc.wait(timeout=60) == 0, proc.stderr
    now, before = files_of(work), snapshot(store)
    one_line(runner.lz("rollback", "-d", store, "--at", str(n + 100)), NOT_FOUND, f"no checkpoint {n + 100}")
    one_line(runner.lz("rollback", "-d", store, "extra"), 2, "unexpected argument")
    one_line(runner.lz("rollback", "-d", store, "--interval", "3"), 2, "does not apply")
    one_line(runner.lz("rollback", "-d", "s3://bucket/prefix"), 2, "s3://")
    # a finished job's files are its results: --force only
    one_line(runner.lz("rollback", "-d", store), 1, "finished", "--force", "nothing was changed")
    assert files_of(work) == now and snapshot(store) == before
    job_file = store / "job"
    text = job_file.read_text()
    job_file.write_text(text.replace("interval=0", "interval=9"))
    before = snapshot(store)
    one_line(runner.lz("rollback", "-d", store), DAMAGED, "damaged", "nothing was changed")
    assert files_of(work) == now and snapshot(store) == before


def test_rollback_killed_and_finished(runner, job):
    """A rollback SIGKILLed as soon as DIR/job says it is under way (a sleep
    after each of its steps): another rollback to a later checkpoint is
    refused (one line, nothing changed), `rollback --at N` finishes it with
    N's files exactly, and `restart --at N` then ends as an uninterrupted run."""
    import copy
    prog, work = job
    proc, store, trig = start(runner, prog, work)
    at = {}
    for i in (1, 2):
        proc.wait_for_output(rf"^step {i}$", timeout=60)
        n = runner.checkpoint(store)
        at[n] = files_of(work)
        runner.touch(Path(f"{trig}.{i}"))
    n1, n2 = sorted(at)
    proc.wait_for_output(r"^step 3$", timeout=60)
    kill_program(proc, "python3")
    slow = copy.copy(runner)
    slow.env = {**runner.env, "LAZARUS_TEST_ROLLBACK_DELAY_MS": "150"}
    p = slow.start_lz("rollback", "-d", store, "--at", str(n1))
    while f"rolling_to={n1}\n" not in (store / "job").read_text() and p.poll() is None:
        pass
    p.kill()
    assert f"rolling_to={n1}\n" in (store / "job").read_text() and files_of(work) != at[n1], p.stderr
    now, before = files_of(work), snapshot(store)
    one_line(runner.lz("rollback", "-d", store, "--at", str(n2)), 1, "interrupted",
             f"lazarus rollback --at {n1}")
    assert files_of(work) == now and snapshot(store) == before
    r = runner.lz("rollback", "-d", store, "--at", str(n1), check_rc=0)
    assert f"to checkpoint {n1} taken at" in r.stdout, r
    assert files_of(work) == at[n1] and runner.indexes(store) == [n1]
    for i in (1, 2):
        os.unlink(f"{trig}.{i}")
    proc = runner.start_lz("restart", "-d", store, "--at", str(n1))
    for i in range(1, 5):
        runner.touch(Path(f"{trig}.{i}"))
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert files_of(work) == uninterrupted(runner, prog)
