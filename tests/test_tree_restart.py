"""Restart of a job of several processes (tests/programs/tree_job.c): killed
whole after a checkpoint, the job comes back with every process's PID, parent,
process group and session; the exited-but-unwaited children are still there
with their status; the pipe between two processes still holds the records in
flight; a file description shared by two processes still has one offset (no
line overwritten); the job then finishes as an uninterrupted run does.  A
restart in which one process cannot be restored runs none of them, says why
in one line, and works once the cause is gone.  As root and as an ordinary
user (inside a PID namespace)."""
import re
import time

import pytest

from conftest import _compile, kill_tree, wait_gone

STEPS = 60
NAMES = ("M", "A", "A1", "B", "C")


@pytest.fixture(scope="module")
def tree_job(programs):
    return _compile("tree_job", programs.dir)


def ids(out: str, what: str) -> dict:
    """{name: (pid, ppid, pgid, sid)} from the program's "id"/"end" lines."""
    found = {}
    for m in re.finditer(rf"^{what} (\w+) (\d+) (\d+) (\d+) (\d+)$", out, re.M):
        found[m.group(1)] = tuple(int(x) for x in m.groups()[1:])
    return found


def start_and_checkpoint(runner, tree_job):
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", tree_job, STEPS)
    proc.wait_for_output(r"^ready \d+ \d+$", timeout=60)
    proc.wait_for_output(r"^step M 5$", timeout=60)
    index = runner.checkpoint(store)
    r = runner.lz("list", "-d", store)
    assert re.search(r"\b5/5\b", r.stdout), f"the checkpoint holds the 5 live processes, one thread each\n{r}"
    time.sleep(0.3)
    # the whole job dies at once, supervisor included, as with a node
    pids = kill_tree(proc.pid)
    proc.wait(timeout=30)
    wait_gone(pids)
    return store, proc.stdout, index


def test_tree_comes_back(runner, tree_job):
    store, first, index = start_and_checkpoint(runner, tree_job)
    before = ids(first, "id")
    assert set(before) == set(NAMES), first
    r = runner.start_lz("restart", "-d", store)
    assert r.wait(timeout=120) == 0, r.stderr
    out = r.stdout
    assert "FAIL" not in out and "done" in out.splitlines(), out + r.stderr
    assert not re.search(r"^id ", out, re.M), f"a process started over\n{out}"
    after = ids(out, "end")
    assert set(after) == set(NAMES), out
    for name in NAMES[1:]:
        # the session of all but B is the launcher's (another after a restart)
        got, want = after[name], before[name]
        if name != "B":
            got, want = got[:3] + (got[3] == after["M"][3],), want[:3] + (True,)
        assert got == want, f"{name}: pid/ppid/pgid/sid {after[name]} after, {before[name]} before"
    assert after["M"][0] == before["M"][0]
    # the groups as made: A leads one that C joined, B its own session
    a, c, b = before["A"], before["C"], before["B"]
    assert a[2] == a[0] and c[2] == a[0] and b[3] == b[0] and before["A1"][2] == a[0]
    # zombies: waited for after the restart, with the status they died with
    assert "zombie Z exit 7" in out and "zombie K signal 15" in out, out
    # one offset for M and B: every line once, none overwritten
    lines = (runner.base / "shared.txt").read_text().splitlines()
    want = sorted([f"M {i:06d}" for i in range(STEPS)] + [f"B {i:06d}" for i in range(STEPS)])
    assert sorted(lines) == want, f"{len(lines)} lines in shared.txt"
    # the restarted job checkpoints as one again
    assert runner.lz("verify", "-d", store).rc == 0


def test_one_process_fails_none_runs(runner, tree_job):
    store, first, index = start_and_checkpoint(runner, tree_job)
    bdir = runner.base / "bdir"
    for p in bdir.iterdir():
        p.unlink()
    bdir.rmdir()
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc != 0, str(r)
    lines = r.stderr_lines()
    assert any(re.search(r"working directory .*bdir", l) for l in lines), str(r)
    assert len(lines) <= 2, f"one line expected\n{r}"
    assert not re.search(r"^step ", r.stdout, re.M), f"a process ran\n{r}"
    assert runner.indexes(store) == [index]
    # nothing of the job is left
    time.sleep(0.5)
    stray = [p for p in (runner.base / ".").iterdir() if p.name.startswith("core")]
    assert not stray
    runner.mkdir("bdir")
    r2 = runner.start_lz("restart", "-d", store)
    assert r2.wait(timeout=120) == 0, r2.stderr
    assert "done" in r2.stdout.splitlines() and "FAIL" not in r2.stdout, r2.stdout
