"""Copy-on-write sharing between a parent and the workers it forked, kept
through a restart (restorer/restore_inherit.c).  tests/programs/cow_workers.c:
a parent fills private anonymous memory, forks workers that share it, each
process writes a small part of its own copy and checks its whole copy against
a formula.  The whole job is checkpointed, SIGKILLed and restarted, twice (the
second checkpoint taken after the first restart); from outside, the sum of
the processes' Pss (/proc/PID/smaps_rollup) after each restart stays within
1.3x of what it was before the kill (one copy per process would be ~5x), and
every process finds its copy right, also after writing its part again.  A
worker that rewrote most of its copy (nothing to share) and workers forked
before their parent's region changed size (they cannot keep it) come back
right too.  And with every child going on from its parent's restorer
(LAZARUS_INHERIT_MIN_KIB=0, whatever it shares), the tree and session tests'
jobs come back exactly (zombies, groups, sessions made through helpers,
objects the processes share).  As root and as an ordinary user."""
import time
from pathlib import Path

import pytest

from conftest import _compile, comm_of, descendants, kill_tree, wait_gone
from test_sessions import test_sessions_and_groups_exactly as sessions_and_groups_exactly
from test_tree_restart import test_tree_comes_back as tree_comes_back, tree_job  # noqa: F401 (a fixture)

NAME = "cow_workers"


@pytest.fixture(scope="module")
def prog(programs):
    return _compile(NAME, programs.dir)


def _job(sup: int, n: int, timeout: float = 60) -> list[int]:
    """The job's n processes (host PIDs), once all are there."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p, _ in descendants(sup) if comm_of(p) == NAME]
        if len(pids) == n or time.monotonic() > deadline:
            assert len(pids) == n, f"{len(pids)} of the job's {n} processes are there"
            return pids


def _pss_kib(pids: list[int]) -> int:
    total = 0
    for p in pids:
        for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return total


def _rounds(proc, c: int, n: int) -> None:
    for i in range(n):
        proc.wait_for_output(rf"^round {c} {i} ok$|^FAIL", timeout=120)
    assert "FAIL" not in proc.stdout, proc.stdout + proc.stderr


def _cycles(runner, prog, case: str, mib: int, nw: int, cycles: int = 2) -> list[tuple[int, int]]:
    """(Pss before the kill, Pss after the restart) in KiB, per cycle."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    n = nw + 1
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", prog, mib, nw, trig, case)
    for i in range(n):
        proc.wait_for_output(rf"^ready {i} \d+$|^FAIL", timeout=120)
    assert "FAIL" not in proc.stdout, proc.stdout + proc.stderr
    out, pss = "", []
    for c in range(1, cycles + 1):
        runner.checkpoint(store)
        before = _pss_kib(_job(proc.pid, n))
        pids = kill_tree(proc.pid)
        proc.wait(timeout=30)
        wait_gone(pids)
        out += proc.stdout
        proc = runner.start_lz("restart", "-d", store)
        runner.touch(Path(f"{trig}.{c}"))
        _rounds(proc, c, n)  # every process checked its whole copy, then wrote its part again
        after = _pss_kib(_job(proc.pid, n))
        pss.append((before, after))
        print(f"{case} cycle {c}: Pss {before} KiB before the kill, {after} KiB after the restart "
              f"({after / before:.2f}x)")
    runner.touch(Path(f"{trig}.end"))
    assert proc.wait(timeout=60) == 0, out + proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("done"), proc.stdout
    return pss


def test_workers_share_after_restart(runner, prog):
    for before, after in _cycles(runner, prog, "share", 256, 4):
        assert before < 400 * 1024, f"the job did not share its memory before the kill: {before} KiB"
        assert after <= 1.3 * before, f"Pss {after} KiB after the restart, {before} KiB before the kill"


def test_worker_that_rewrote_its_copy(runner, prog):
    for before, after in _cycles(runner, prog, "rewrite", 64, 2, cycles=1):
        assert after <= 1.3 * before, f"Pss {after} KiB after the restart, {before} KiB before the kill"


def test_parent_region_resized_after_fork(runner, prog):
    # workers 1 and 2 have the old region: each a copy of its own; 3 and 4 share with the parent
    for before, after in _cycles(runner, prog, "resize", 64, 4, cycles=1):
        assert after <= 3.6 * before, f"Pss {after} KiB after the restart, {before} KiB before the kill"


def _every_child_goes_on(runner) -> list:
    """Every child of the restarted job goes on from its parent's restorer;
    the restarts are recorded to count, from their trace, those that did."""
    runner.env["LAZARUS_INHERIT_MIN_KIB"] = "0"
    runner.env["LAZARUS_TRACE"] = "1"
    restarts = []
    start_lz = runner.start_lz

    def recording(*args):
        p = start_lz(*args)
        if args[0] == "restart":
            restarts.append(p)
        return p
    runner.start_lz = recording
    return restarts


def _went_on(restarts) -> list[int]:
    return [p.stderr.count("continues from its parent's restorer") for p in restarts]


def test_tree_job_every_child_goes_on(runner, tree_job):
    restarts = _every_child_goes_on(runner)
    tree_comes_back(runner, tree_job)
    assert _went_on(restarts) == [4], [p.stderr for p in restarts]  # A, A1, B, C (Z, K: zombies)


def test_sessions_every_child_goes_on(runner, programs):
    restarts = _every_child_goes_on(runner)
    sessions_and_groups_exactly(runner, programs)
    assert _went_on(restarts) == [7, 7], [p.stderr for p in restarts]
