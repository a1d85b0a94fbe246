"""Mapping flags and huge pages in forked checkpoints.

The pause reads only /proc/self/maps: the flags of mappings with new bounds
come from the forked writer's snapshot, and the program's (libc) madvise
calls are logged, so that the pause knows which memory a fork would not copy
(MADV_DONTFORK) or would zero (MADV_WIPEONFORK) and lets the writer have it.
A raw madvise system call is not seen: the writer then finds the memory
missing from its snapshot and fails that checkpoint ("excluded from fork");
the next one includes it.  Regions backed by transparent huge pages are
compared by digest in the writer instead of write-protected (which would
split them); a new mapping of 16 MiB or more is registered for tracking by
the writer after the fork and compared by digest once at the next
checkpoint.  Driven by programs/incr_heap.c like test_incremental.py, whose
helpers these tests use; sizes in bytes, PAGE = 4096."""
import os
import re
import time
from pathlib import Path

import pytest

from conftest import IS_ROOT, comm_of, descendants, find_program, is_alive
from test_incremental import (FAILED_RE, MiB, PAGE, STATE_RE, assert_stores_about, changed_pages,
                              check_restarts, restart, start, take)
from test_incremental import incr_heap  # noqa: F401  (the fixture)

NOFORK = {"LAZARUS_NO_FORK": "1"}
FLAG = {"dontfork": "dc", "wipeonfork": "wf"}
MADV = {"dontfork": "MADV_DONTFORK", "wipeonfork": "MADV_WIPEONFORK"}
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------
def send(job, *commands):
    """Commands on the program's stdin, in one write, answers not read."""
    job.proc.p.stdin.write("".join(c + "\n" for c in commands).encode())
    job.proc.p.stdin.flush()


def state_line(job) -> str:
    got = job.line()
    assert STATE_RE.match(got), f"expected a state line, got {got!r}\n--- stderr\n{job.proc.stderr[-2000:]}"
    return got


def ask(job, command: str) -> str:
    """hugekb / vmflags / vma / overlaps: the line they print (their state
    line follows)."""
    send(job, command)
    got = job.line()
    word = command.split()[0]
    assert got.startswith(word + " "), f"{command!r} answered {got!r}\n--- stderr\n{job.proc.stderr[-2000:]}"
    state_line(job)
    return got


def vmflags(job, i: int) -> set:
    return set(ask(job, f"vmflags {i}").split()[2:]) - {"-"}


def hugekb(job, i: int) -> int:
    return int(ask(job, f"hugekb {i}").split()[2])


def writers(job) -> list:
    return [p for p, _ in descendants(job.proc.pid) if comm_of(p) == "lazarus-writer" and is_alive(p)]


def wait_no_writer(job, timeout: float = 60):
    """Until no lazarus-writer is left (a checkpoint is reported durable a
    little before its writer has exited)."""
    deadline = time.monotonic() + timeout
    while writers(job):
        assert time.monotonic() < deadline, f"a lazarus-writer still runs after {timeout}s"
        time.sleep(0.01)


def failed_checkpoint(runner, store, job, advice: str) -> int:
    """`lazarus checkpoint` must fail naming memory excluded from fork by
    `advice`; the supervisor and `list` report it too.  Returns its index."""
    r = runner.lz("checkpoint", "-d", store, timeout=120)
    print(f"lazarus checkpoint said: {r.stderr.strip()}")
    lines = r.stderr_lines()
    assert r.rc != 0 and r.stdout == "" and len(lines) == 1, (
        f"the checkpoint after a raw madvise({MADV[advice]}) must fail with one line\n{r}")
    m = re.search(rf"checkpoint (\d+) failed: .*excluded from fork \({MADV[advice]}\)", lines[0])
    assert m, f"the failure must say the memory was excluded from fork by {MADV[advice]}\n{r}"
    n = int(m.group(1))
    deadline = time.monotonic() + 10
    while f"checkpoint {n} failed" not in job.proc.stderr and time.monotonic() < deadline:
        time.sleep(0.05)
    assert re.search(rf"checkpoint {n} failed: .*excluded from fork.*; the program keeps running",
                     job.proc.stderr), job.proc.stderr[-2000:]
    last = runner.lz("list", "-d", store).stdout.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(FAILED_RE.format(n=n), last) and "excluded from fork" in last, last
    assert n not in runner.indexes(store)
    return n


def assert_changed_about(e: dict, pages: int, what: str):
    """changed_bytes: the pages written (or found new by digest), not more."""
    want = pages * PAGE
    assert want <= e["changed_bytes"] <= 1.2 * want + MiB, (
        f"{what}: checkpoint {e['index']} counts {e['changed_bytes']} bytes as changed for {pages} "
        f"pages written ({want} bytes)\n{e}")


# --------------------------------------------------------------------------
# 1. MADV_DONTFORK / MADV_WIPEONFORK through libc: known to the pause
# --------------------------------------------------------------------------
@pytest.mark.parametrize("fork", ["fork", "nofork"])
@pytest.mark.parametrize("advice", ["dontfork", "wipeonfork"])
def test_libc_madvise(runner, incr_heap, advice, fork):
    """madvise(advice) through libc on a whole region checkpointed before
    (its bounds stay) and on a region made after the last checkpoint: the
    `lazarus checkpoint` requests after it succeed, store about the pages
    changed (the memory is not lost from the snapshot nor stored twice), the
    program keeps the flag, and every checkpoint restarts exactly, with the
    flag.  `nofork`: LAZARUS_NO_FORK=1, written in the pause."""
    env = NOFORK if fork == "nofork" else None
    flag = FLAG[advice]
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 16, 3], "-i", "0", "-k", "10", env=env)
    states = {}
    take(job, runner, store, states)
    assert ask(job, "vma 0") == "vma 0 exact"
    job.cmd(f"advise 0 {advice}")
    assert ask(job, "vma 0") == "vma 0 exact", "region 0's bounds changed: the test needs them unchanged"
    assert vmflags(job, 0) == {flag}
    i2 = take(job, runner, store, states, "next")  # 122 pages of region 0
    job.cmd("newmap 4")  # region 1: 1024 pages, after the last checkpoint
    job.cmd(f"advise 1 {advice}")
    i3 = take(job, runner, store, states)
    i4 = take(job, runner, store, states, "fill 1 100 50")
    job.cmd("fill 0 7 40")
    i5 = take(job, runner, store, states, "fill 1 500 60")
    assert vmflags(job, 0) == {flag} and vmflags(job, 1) == {flag}, "the program's flags changed"
    job.kill()
    entries = {int(e["index"]): e for e in runner.list_json(store)}
    assert sorted(entries) == sorted(states) == [1, 2, 3, 4, 5]
    assert_stores_about(entries[i2], changed_pages(states[i2]), f"after advise 0 {advice}")
    assert_stores_about(entries[i3], 1024, f"a new region with {advice}")
    assert_stores_about(entries[i4], 50, f"50 pages of the new {advice} region")
    assert_stores_about(entries[i5], 100, f"40 + 60 pages of both {advice} regions")
    job = restart(runner, store, env=env)
    assert job.cmd("digest") == states[i5]
    assert vmflags(job, 0) == {flag} and vmflags(job, 1) == {flag}, "restored without the flags"
    job.kill()
    check_restarts(runner, store, states, env=env)


def advised_new_region(runner, incr_heap, advice: str, fork: str):
    """A job (fork or nofork) whose new region 1 (4 MiB) got libc madvise
    ADVICE and was checkpointed: (job, store, env, states)."""
    env = NOFORK if fork == "nofork" else None
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 16, 3], "-i", "0", "-k", "10", env=env)
    states = {}
    job.cmd("newmap 4")
    job.cmd(f"advise 1 {advice}")
    take(job, runner, store, states)
    return job, store, env, states


@pytest.mark.parametrize("fork", ["fork", "nofork"])
@pytest.mark.parametrize("advice", ["dontfork", "wipeonfork"])
def test_libc_madvise_after_restart(runner, incr_heap, advice, fork):
    """A program restarted with a MADV_DONTFORK / MADV_WIPEONFORK region (the
    restorer sets the flag again): its checkpoints succeed, the first one
    too, and restart exactly."""
    job, store, env, states = advised_new_region(runner, incr_heap, advice, fork)
    job.kill()
    job = restart(runner, store, env=env)
    assert job.cmd("digest") == states[1]
    assert vmflags(job, 1) == {FLAG[advice]}
    job.cmd("fill 1 10 20")
    state = job.cmd("next")
    r = runner.lz("checkpoint", "-d", store, timeout=120)
    assert r.rc == 0, f"the first checkpoint after the restart failed\n{r}"
    states[int(r.stdout)] = state
    take(job, runner, store, states, "fill 1 30 20")
    job.kill()
    check_restarts(runner, store, states, env=env)


def test_libc_madvise_periodic(runner, incr_heap):
    """Periodic checkpoints (-i 1) of a program that madvises a new region
    MADV_DONTFORK, another MADV_WIPEONFORK and its first region
    MADV_DONTFORK: none fails, and the last restarts exactly."""
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 16, 3], "-i", "1", "-k", "5")
    for command in ("newmap 4", "advise 1 dontfork", "next", "newmap 4", "advise 2 wipeonfork",
                    "fill 1 0 30", "advise 0 dontfork", "fill 2 5 30"):
        job.cmd(command)
        time.sleep(0.3)
    state = job.cmd("digest")
    idx = runner.indexes(store) or [0]
    above = max(idx) + 1  # one may have begun before `digest`
    deadline = time.monotonic() + 30
    while max(runner.indexes(store) or [0]) <= above:
        assert time.monotonic() < deadline, f"no periodic checkpoint after {above}\n{job.proc.stderr}"
        assert "failed" not in job.proc.stderr, job.proc.stderr
        time.sleep(0.1)
    listing = runner.lz("list", "-d", store).stdout
    job.kill()
    assert "failed" not in job.proc.stderr, job.proc.stderr
    assert "failed" not in listing, listing
    job = restart(runner, store)
    assert job.cmd("digest") == state
    assert [vmflags(job, i) for i in range(3)] == [{"dc"}, {"dc"}, {"wf"}]
    job.kill()

@pytest.mark.parametrize("fork", ["fork", "nofork"])
@pytest.mark.parametrize("advice", ["dontfork", "wipeonfork"])
def test_libc_madvise_moved(runner, incr_heap, advice, fork):
    """A region madvised (libc) MADV_DONTFORK / MADV_WIPEONFORK and
    checkpointed, then moved with mremap (it keeps the flag): the next
    checkpoint succeeds, and both restart exactly."""
    job, store, env, states = advised_new_region(runner, incr_heap, advice, fork)
    job.cmd("mremap 1")
    assert vmflags(job, 1) == {FLAG[advice]}
    state = job.cmd("fill 1 3 30")
    r = runner.lz("checkpoint", "-d", store, timeout=120)
    assert r.rc == 0, f"the checkpoint after the region moved failed\n{r}"
    states[int(r.stdout)] = state
    job.kill()
    check_restarts(runner, store, states, env=env)


@pytest.mark.parametrize("fork", ["fork", "nofork"])
@pytest.mark.parametrize("advice", ["dontfork", "wipeonfork"])
def test_advice_to_unmapped_region(runner, incr_heap, advice, fork):
    """A region madvised (libc) MADV_DONTFORK / MADV_WIPEONFORK, unmapped, and
    a new region mapped where it was, all between two checkpoints: the new
    region has no such flag, neither after the checkpoint nor after a
    restart, and the checkpoint restarts exactly."""
    env = NOFORK if fork == "nofork" else None
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 16, 3], "-i", "0", "-k", "10", env=env)
    states = {}
    job.cmd("newmap 4")
    take(job, runner, store, states)
    job.cmd(f"advise 1 {advice}")
    job.cmd("unmap 1")
    job.cmd("newmap 4")
    if ask(job, "overlaps 1 2") != "overlaps 1 2 yes":
        job.kill()
        pytest.skip("the kernel placed the new region elsewhere: nothing to test")
    assert vmflags(job, 2) == set()
    take(job, runner, store, states, "fill 2 0 10")
    assert vmflags(job, 2) == set(), f"the checkpoint gave region 2, never advised, MADV_{advice.upper()}"
    job.kill()
    job = restart(runner, store, env=env)
    assert job.cmd("digest") == states[2]
    assert vmflags(job, 2) == set(), f"region 2, never advised, was restored with MADV_{advice.upper()}"
    job.kill()
    check_restarts(runner, store, states, env=env)


# --------------------------------------------------------------------------
# 2. The same through the raw system call: unseen by the pause
# --------------------------------------------------------------------------


def raw_params():
    out = []
    for where in ("existing", "new"):
        for advice in ("dontfork", "wipeonfork"):
            for fork in ("fork", "nofork"):
                out.append(pytest.param(where, advice, fork, id=f"{where}-{advice}-{fork}"))
    return out


@pytest.mark.parametrize("where,advice,fork", raw_params())
def test_raw_madvise(runner, incr_heap, where, advice, fork):
    """syscall(SYS_madvise, advice) bypasses the interposed madvise, on a
    whole region checkpointed before whose bounds stay (`existing`) or on a
    region made since (`new`): in fork mode the next checkpoint fails with
    "excluded from fork" (one line from `checkpoint`, on the supervisor's
    stderr, `list`'s last line), the program keeps running with its state,
    the checkpoint after includes the memory and later ones are
    incremental; every checkpoint restarts exactly and the program keeps
    the flag.  `nofork`: written in the pause, nothing fails."""
    env = NOFORK if fork == "nofork" else None
    flag = FLAG[advice]
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 16, 3], "-i", "0", "-k", "20", env=env)
    states, failed, incremental = {}, [], {}
    take(job, runner, store, states)
    if where == "existing":
        i = 0
        assert ask(job, "vma 0") == "vma 0 exact"
    else:
        i = 1
        job.cmd("newmap 4")
    job.cmd(f"rawadvise {i} {advice}")
    if where == "existing":
        assert ask(job, "vma 0") == "vma 0 exact", "region 0's bounds changed: the test needs them unchanged"
    assert vmflags(job, i) == {flag}
    if fork == "fork":
        state = job.cmd("digest")
        failed.append(failed_checkpoint(runner, store, job, advice))
        assert job.cmd("digest") == state, "the program does not answer as before"
    take(job, runner, store, states)  # includes the memory
    incremental[take(job, runner, store, states, f"fill {i} 200 40")] = 40
    job.cmd("next")
    incremental[take(job, runner, store, states, f"fill {i} 700 25")] = 25 + 122
    assert vmflags(job, i) == {flag}, "the program's flags changed"
    job.kill()
    assert len(failed) == (1 if fork == "fork" else 0), failed
    entries = {int(e["index"]): e for e in runner.list_json(store)}
    assert sorted(entries) == sorted(states)
    for n, pages in incremental.items():
        assert_stores_about(entries[n], pages, f"after rawadvise {i} {advice}")
    check_restarts(runner, store, states, env=env)


# --------------------------------------------------------------------------
# 3. Transparent huge pages
# --------------------------------------------------------------------------
def test_huge_pages_stay_huge(runner, incr_heap):
    """A 256 MiB region madvised MADV_HUGEPAGE and filled (huge pages):
    after each of 4 checkpoints with 2000 pages spread over all of it
    changed in between (one in 33, written once the writer is gone), its
    AnonHugePages stays about the whole region (no write-protect tracking
    splitting it), each later checkpoint stores and counts as changed about
    those pages (compared by digest: unchanged pages are found again in the
    4-way dedup table), and every checkpoint restarts exactly."""
    mode = THP.read_text() if THP.exists() else ""
    if not mode or "[never]" in mode:
        pytest.skip(f"transparent huge pages are off ({THP}: {mode.strip() or 'missing'})")
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 4, 3], "-i", "0", "-k", "10")
    job.cmd("newmap 256 huge")
    full = 256 * 1024
    kb0 = hugekb(job, 1)
    if kb0 < 0.9 * full:
        job.kill()
        pytest.skip(f"the MADV_HUGEPAGE region got {kb0} kB of {full} in huge pages (THP: {mode.strip()})")
    assert vmflags(job, 1) == {"hg"}
    states, written = {}, {}
    take(job, runner, store, states)
    for k in range(3):
        wait_no_writer(job)
        kb = hugekb(job, 1)
        assert kb >= 0.95 * kb0, f"checkpoint {max(states)} left {kb} kB of {kb0} in huge pages"
        fill = job.cmd(f"fill 1 {k * 101} 2000 33")  # one page in 33 (gcd(33, 65536) = 1)
        idx = take(job, runner, store, states, "next")  # and 30 pages of region 0
        written[idx] = changed_pages(fill) + changed_pages(states[idx])
        kb = hugekb(job, 1)
        assert kb >= 0.95 * kb0, f"writing 2000 pages split huge pages: {kb} kB of {kb0} left"
    wait_no_writer(job)
    kb = hugekb(job, 1)
    assert kb >= 0.95 * kb0, f"checkpoint {max(states)} left {kb} kB of {kb0} in huge pages"
    job.kill()
    entries = {int(e["index"]): e for e in runner.list_json(store)}
    assert sorted(entries) == sorted(states) == [1, 2, 3, 4]
    assert entries[1]["stored_bytes"] >= 256 * MiB, entries[1]
    for i, pages in written.items():
        assert pages == 2030, written
        assert entries[i]["memory_bytes"] >= 260 * MiB, entries[i]
        assert_stores_about(entries[i], pages, "2000 pages of a huge-page region and 30 of the heap")
        assert_changed_about(entries[i], pages, "2000 pages of a huge-page region and 30 of the heap")
    check_restarts(runner, store, states)


# --------------------------------------------------------------------------
# 4. Large new mappings: registered for tracking by the writer
# --------------------------------------------------------------------------
def wait_paused(job, timeout: float = 30) -> int:
    """Until the program sleeps in pause() (`waitsig`); returns its pid."""
    pid = find_program(job.proc.pid, "incr_heap")
    assert pid is not None, f"no program under the supervisor\n{job.proc.stderr}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            wchan = ""
        if "pause" in wchan:
            return pid
        assert time.monotonic() < deadline, f"the program is not in pause() (wchan {wchan!r})"
        time.sleep(0.005)


@pytest.mark.parametrize("when", ["after", "during"])
def test_late_registration(runner, incr_heap, when):
    """`newmap 64` (16384 pages, at least 16 MiB: registered for tracking by
    the writer of the next checkpoint N, after the fork), then pages of it
    written `after` `lazarus checkpoint` returned, or `during` checkpoint N:
    all of it, from the instant the pause ends (`waitsig`), before the writer
    registers the region (when the session is root, the program is made
    SCHED_FIFO on one CPU for that: its writer, which inherits both, runs
    only once the program waits for input again, after the whole fill).
    Checkpoint N+1 compares the region by digest once (writes before the
    registration are not lost), N+2 and N+3 store and count only the pages
    written since; N, N+1, N+2, N+3 restart exactly."""
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 8, 3], "-i", "0", "-k", "10")
    states = {}
    take(job, runner, store, states)
    new = job.cmd("newmap 64")
    if when == "after":
        n = take(job, runner, store, states)
        job.cmd("fill 1 9000 300")
        job.cmd("fill 1 20 10")
        first = 310
    else:
        send(job, "waitsig", "fill 1 0 16384")
        pid = wait_paused(job)
        cpus = os.sched_getaffinity(pid)
        if IS_ROOT:
            os.sched_setaffinity(pid, {min(cpus)})
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(1))
        else:
            print("not root: the writer may register the region before the program writes it")
        n = runner.checkpoint(store)
        states[n] = new
        assert state_line(job) == new  # waitsig's
        state_line(job)  # the fill's
        if IS_ROOT:
            os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
            os.sched_setaffinity(pid, cpus)
        first = 16384
    n1 = take(job, runner, store, states)
    n2 = take(job, runner, store, states, "fill 1 3000 200")
    job.cmd("fill 1 100 20")
    n3 = take(job, runner, store, states, "fill 0 0 30")
    job.kill()
    entries = {int(e["index"]): e for e in runner.list_json(store)}
    assert sorted(entries) == sorted(states) == [1, n, n1, n2, n3]
    assert_stores_about(entries[n], 16384, "a new 64 MiB region")
    assert_stores_about(entries[n1], first, f"pages of the new region written {when} its first checkpoint")
    assert_changed_about(entries[n1], first, f"pages of the new region written {when} its first checkpoint")
    assert_stores_about(entries[n2], 200, "200 pages written in the registered region")
    assert_changed_about(entries[n2], 200, "200 pages written in the registered region")
    assert_stores_about(entries[n3], 50, "20 + 30 pages")
    assert_changed_about(entries[n3], 50, "20 + 30 pages")
    check_restarts(runner, store, states)
