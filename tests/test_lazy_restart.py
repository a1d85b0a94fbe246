"""`lazarus restart --lazy` (issue 20): the program runs again before its
memory is read; a fault server (cli/lazy_server.c) places each page when
first touched, checked frame by frame, and the rest behind it.  End to end:
the same results as an eager restart and an uninterrupted run; a pack
damaged after the restart began stops the job with one line (never zeros);
a SIGKILL of the server or of the supervisor during the fill kills the job
and a second restart works; a checkpoint asked for during the fill waits
for it; what is not supported yet is refused with one line."""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (_compile, children, descendants, kill_job, kill_program, plain_output, run_until_done,
                      snapshot, tmp_entries, wait_gone)
from test_restart_at import parse_steps, run_api_job

PAUSE = "LAZARUS_TEST_LAZY_PAUSE_MS"  # the server serves faults only, for this long
MIB = "96"


def need_root(runner):
    if runner.mode != "root":
        pytest.skip("lazy restart needs a full userfaultfd (root here); the user variant is test_user_refused")


def server_of(proc, timeout=20.0):
    """The fault server under the `lazarus restart` proc (its pid)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, _ in descendants(proc.pid):
            try:
                if b"__lazy-serve" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
            except OSError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    raise AssertionError(f"no fault server under the restart\n{proc.stderr[-2000:]}")


def stopped_job(runner, programs, mib=MIB, rounds="200"):
    """heap_mutator run to a checkpoint and killed: (store, argv, expected last line)."""
    argv = [programs.heap_mutator, mib, rounds]
    expected = plain_output(argv).splitlines()[-1]
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", *argv)
    proc.wait_for_output(r"^start ", timeout=120)
    runner.checkpoint(store)
    kill_program(proc, "heap_mutator")
    return store, argv, expected


@pytest.mark.parametrize("how", ["eager", "lazy"])
def test_heap_restarts_same(how, runner, programs):
    """A restart, eager or lazy, of a 96 MiB heap ends with the checksum of an
    uninterrupted run; a lazy one leaves the program nothing of Lazarus: no
    userfaultfd open, no server left."""
    need_root(runner)
    store, _, expected = stopped_job(runner, programs)
    opts = ["--lazy"] if how == "lazy" else []
    proc = runner.start_lz("restart", "-d", store, *opts)
    if how == "lazy":
        server = server_of(proc)
        deadline = time.monotonic() + 60
        while Path(f"/proc/{server}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        time.sleep(1)
    prog = [p for p, _ in descendants(proc.pid) if b"heap_mutator" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert prog, proc.stderr
    for p in prog:  # the program holds no userfaultfd of the fill: only the runtime's own (dirty tracking)
        fds = [os.readlink(f) for f in Path(f"/proc/{p}/fd").iterdir() if Path(f).exists()]
        assert len([f for f in fds if "userfaultfd" in f]) <= 1, fds
    assert proc.wait(timeout=300) == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == expected, proc.stdout


@pytest.mark.parametrize("how", ["eager", "lazy"])
def test_restart_at_every_checkpoint(how, runner, programs):
    """api_prog's chain of checkpoints (incremental), each restarted with
    `--at N`, eager or lazy: the step's memory and the rest of the run."""
    need_root(runner)
    store = runner.base / "store"
    parsed, gofile = run_api_job(runner, programs, store, 4, mib=32)
    runner.touch(gofile)
    by_index = {s[2]: s for s in parsed}
    opts = ["--lazy"] if how == "lazy" else []
    for n in runner.indexes(store):
        step, _, _, pid, digest = by_index[n]
        copy = runner.base / f"store-at-{n}"
        os.system(f"cp -a {store} {copy}")
        r = runner.lz("restart", "-d", copy, "--at", str(n), *opts, timeout=120)
        assert r.rc == 0, str(r)
        got = parse_steps(r.stdout)
        assert got and got[0] == (step, "restarted", n, pid, digest), f"--at {n}\n{r}"
        assert [(s, d) for s, _, _, _, d in got[1:]] == [(s[0], s[4]) for s in parsed[step:]], str(r)


def test_threads_killed_at_random_instants_lazy(runner, rng):
    """OpenMP phases over 32 MiB on 4 threads, killed at 3 random instants,
    every restart lazy: the uninterrupted run's output."""
    need_root(runner)
    omp = _compile("omp_phases", runner.base, ["-fopenmp"])
    argv = [omp, "32", "12", "52", "result.txt"]
    runner.env["OMP_NUM_THREADS"] = "4"
    expected = plain_output(["env", "OMP_NUM_THREADS=4", *argv[:-1], "/dev/null"]).splitlines()[-1]
    store = runner.base / "store"
    kr = run_until_done(runner, store, argv, rng, kills=3, comm="omp_phases", done_re="^done ", max_delay=0.5,
                        timeout=240, restart_opts=("--lazy",))
    assert [s.rc for s in kr.segments] == [137] * 3 + [0], kr.describe()
    assert kr.segments[-1].stdout.splitlines()[-1] == expected, kr.describe()


def test_heap_killed_at_random_instants_lazy(runner, programs, rng):
    """The 256 MiB heap program SIGKILLed at 5 random instants (kills land
    inside the fill too), each restart lazy: the same final checksum."""
    need_root(runner)
    argv = [programs.heap_mutator, "256", "200"]
    expected = plain_output(argv).splitlines()[-1]
    store = runner.base / "store"
    kr = run_until_done(runner, store, argv, rng, kills=5, comm="heap_mutator", done_re="^checksum ",
                        max_delay=0.6, timeout=400, restart_opts=("--lazy",))
    assert kr.segments[-1].stdout.splitlines()[-1] == expected, kr.describe()
    assert tmp_entries(store) == []


def blocked_in_fault(proc, timeout=30.0):
    """Wait until a thread of the restarted program waits on a missing page."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, _ in descendants(proc.pid):
            for t in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    if "userfault" in (t / "wchan").read_text():
                        return
                except OSError:
                    pass
        time.sleep(0.01)
    raise AssertionError(f"the program never waited for a page\n{proc.stderr[-2000:]}")


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_pack_damaged_after_restart_began(damage, runner, programs):
    """The packs cut in half (or a byte of each frame flipped) once the lazy
    restart began, while a page is awaited: the job is stopped with one line
    naming the checkpoint and the frame; the program never ran on with what
    it could not have (no zeros: no checksum printed)."""
    need_root(runner)
    store, _, _ = stopped_job(runner, programs)
    idx = max(runner.indexes(store))
    go = runner.base / "go"
    runner.env["LAZARUS_TEST_LAZY_HOLD"] = str(go)
    proc = runner.start_lz("restart", "-d", store, "--lazy")
    server_of(proc)
    blocked_in_fault(proc)
    for p in (store / "packs").iterdir():
        size = p.stat().st_size
        if damage == "truncated":
            os.truncate(p, size // 2)
        else:
            with open(p, "r+b") as f:
                for off in range(4096, size, 1 << 20):  # every frame's first page (1 MiB frames, raw)
                    f.seek(off)
                    b = f.read(1)
                    f.seek(off)
                    f.write(bytes([b[0] ^ 0xFF]))
    go.touch()
    rc = proc.wait(timeout=60)
    assert rc != 0, proc.stderr
    # the program ran again (restart says so in one line), then a page read in failed
    lines = [l for l in proc.stderr.splitlines() if l.strip() and "restarted from checkpoint" not in l]
    assert len(lines) == 1, proc.stderr
    what = "cannot be read" if damage == "truncated" else "(fails its checksum|does not decompress)"
    assert re.search(rf"checkpoint {idx} is damaged: frame \d+ \(.*pack\.\d+, offset \d+\) {what}", lines[0]), lines
    assert "checksum" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("victim", ["server", "supervisor"])
def test_killed_during_fill_then_restart(victim, runner, programs, rng):
    """SIGKILL of the fault server (or of `lazarus restart`, the supervisor)
    at a random instant of the fill: the job dies with it, never runs on
    zeros; the store is intact and a second restart finishes the run."""
    need_root(runner)
    store, _, expected = stopped_job(runner, programs)
    data = lambda: {k: v for k, v in snapshot(store).items() if k.startswith(("ckpt.", "packs"))}
    before = data()
    go = runner.base / "go"
    runner.env["LAZARUS_TEST_LAZY_HOLD"] = str(go)  # nothing served until go exists
    proc = runner.start_lz("restart", "-d", store, "--lazy")
    server = server_of(proc)
    blocked_in_fault(proc)
    if rng.random() < 0.5:  # or while it serves the first faults
        go.touch()
    time.sleep(rng.uniform(0.0, 0.2))
    progs = [p for p, _ in descendants(proc.pid) if p != server]
    os.kill(server if victim == "server" else proc.pid, signal.SIGKILL)
    rc = proc.wait(timeout=60)
    assert rc != 0 and "checksum" not in proc.stdout, proc.stdout + proc.stderr
    if victim == "server":
        assert "fault server was killed" in proc.stderr, proc.stderr
    wait_gone(progs + [server])
    assert data() == before, "the checkpoints changed"
    del runner.env["LAZARUS_TEST_LAZY_HOLD"]
    r = runner.lz("restart", "-d", store, "--lazy", timeout=300)
    assert r.rc == 0, str(r)
    assert r.stdout.splitlines()[-1] == expected, str(r)


def test_checkpoint_during_fill(runner, programs):
    """`lazarus checkpoint` while the lazy fill runs waits for it (here the
    server is held: the program waits for a page), then checkpoints; that
    checkpoint restarts to the uninterrupted result."""
    need_root(runner)
    store, _, expected = stopped_job(runner, programs)
    go = runner.base / "go"
    runner.env["LAZARUS_TEST_LAZY_HOLD"] = str(go)
    proc = runner.start_lz("restart", "-d", store, "--lazy")
    server_of(proc)
    blocked_in_fault(proc)
    ck = runner.start_lz("checkpoint", "-d", store)
    time.sleep(1.0)
    assert ck.poll() is None, f"the checkpoint did not wait for the fill\n{ck.stdout}{ck.stderr}"
    go.touch()
    assert ck.wait(timeout=120) == 0, ck.stderr
    n = int(ck.stdout)
    kill_program(proc, "heap_mutator")
    del runner.env["LAZARUS_TEST_LAZY_HOLD"]
    r = runner.lz("restart", "-d", store, "--at", str(n), timeout=300)
    assert r.rc == 0 and r.stdout.splitlines()[-1] == expected, str(r)


def test_moved_and_discarded_during_fill(runner):
    """A program that moves its memory (mremap: REMAP, and the source's
    UNMAP) and discards a piece of it (MADV_DONTNEED: REMOVE) every round,
    restarted lazily with the prefetch held back (its faults served only):
    every digest after the restart is the uninterrupted run's."""
    need_root(runner)
    prog = _compile("lazy_moves", runner.base)
    p = subprocess.Popen([prog, "64"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        plain = p.stdout.readline().split()[1]
    finally:
        p.kill()
        p.wait()
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", prog, "64")
    proc.wait_for_output(r"^3 ", timeout=60)
    runner.checkpoint(store)
    kill_program(proc, "lazy_moves")
    runner.env[PAUSE] = "1500"
    proc = runner.start_lz("restart", "-d", store, "--lazy")
    proc.wait_for_output(r"^\d+ [0-9a-f]+\n(.*\n){3}", timeout=60)
    kill_program(proc, "lazy_moves")
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    assert lines and all(l.split()[1] == plain for l in lines), (plain, proc.stdout, proc.stderr)


def test_user_refused(runner, programs):
    """An ordinary user (only a user-mode-only userfaultfd here): --lazy is
    refused with one line, nothing changed; the eager restart works."""
    if runner.mode != "user" or not Path("/proc/sys/vm/unprivileged_userfaultfd").exists() or \
            Path("/proc/sys/vm/unprivileged_userfaultfd").read_text().strip() != "0":
        pytest.skip("the user variant, where ordinary users get only user-mode-only userfaultfds")
    store, _, expected = stopped_job(runner, programs, mib="16")
    before, had = snapshot(store), set(children(os.getpid()))
    r = runner.lz("restart", "-d", store, "--lazy", timeout=60)
    assert r.rc != 0 and r.stdout == "", str(r)
    assert len(r.stderr_lines()) == 1 and "--lazy" in r.stderr and "nothing was changed" in r.stderr, str(r)
    assert snapshot(store) == before and not set(children(os.getpid())) - had
    r = runner.lz("restart", "-d", store, timeout=300)
    assert r.rc == 0 and r.stdout.splitlines()[-1] == expected, str(r)


def test_tree_refused(runner):
    """A checkpoint of several processes: --lazy refused with one line (part 2)."""
    need_root(runner)
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "sh", "-c", "sleep 1000 & sleep 1000; wait")
    time.sleep(0.5)
    runner.checkpoint_when_up(store)
    kill_job(proc)
    before = snapshot(store)
    r = runner.lz("restart", "-d", store, "--lazy", timeout=60)
    assert r.rc != 0 and len(r.stderr_lines()) == 1 and "several processes" in r.stderr, str(r)
    assert snapshot(store) == before
