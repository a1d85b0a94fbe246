"""Calls a checkpoint must not interrupt (runtime/rt_calls.c), the program's
own signals beside them, pending signals across a restart, and a thread that
blocks the checkpoint signal.

Each program checks itself: `calls_wait` makes blocking calls with timeouts
(poll, select, epoll_wait, sleep, msgrcv, sem_timedwait...) and fails on any
EINTR or early return; it is checkpointed several times inside its calls, the
whole job SIGKILLed and restarted, twice.  `calls_signals own` must see its
own signals interrupt poll() natively and under Lazarus, before and after a
restart; `calls_signals pending` checks every siginfo of a pending SIGCHLD and
of queued real-time signals (process-wide and per thread) after each restart.
As root and as an ordinary user."""
import os
import re
import time
from pathlib import Path

import pytest

import lzformat
from conftest import _compile, ckpt_path, find_program, kill_tree, plain_output, wait_gone

DOWN = 1.5  # seconds the job stays killed


@pytest.fixture(scope="module")
def cprogs(programs):
    return {n: _compile(n, programs.dir, ["-pthread"]) for n in ("calls_wait", "calls_signals", "raw_sigblock")}


def kill_job(proc):
    """SIGKILL the whole job at once: the supervisor and every process below it."""
    pids = kill_tree(proc.pid)
    proc.wait(timeout=60)
    wait_gone(pids)


def checkpoints(runner, store, n, gap=0.25):
    for _ in range(n):
        runner.checkpoint(store)
        time.sleep(gap)


def cycles(runner, argv, first_line, per_cycle=3, restarts=2):
    """Run argv under Lazarus; once first_line is out, checkpoint it
    per_cycle times (inside its calls), SIGKILL the whole job, stay down
    DOWN s, restart; `restarts` times.  Returns all the output."""
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", *argv)
    proc.wait_for_output(first_line, timeout=60)
    out = ""
    for c in range(restarts):
        time.sleep(0.3)
        checkpoints(runner, store, per_cycle)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
        kill_job(proc)
        out += proc.stdout
        time.sleep(DOWN)
        proc = runner.start_lz("restart", "-d", store)
        if c + 1 < restarts:
            time.sleep(0.5)
            runner.checkpoint_when_up(store)
            time.sleep(0.3)
    assert proc.wait(timeout=180) == 0, out + proc.stdout + proc.stderr
    out += proc.stdout
    assert "FAIL" not in out, out + proc.stderr
    return out


# Every wrapped call: checkpoints inside its calls and two kill/restart
# cycles; no EINTR, no early return, every round done.
MODES = ["poll", "ppoll", "select", "pselect", "epoll", "epoll_pwait", "nanosleep", "clock_nanosleep", "clock_abs",
         "usleep", "thrd_sleep", "sigtimedwait", "sem_timedwait", "msgrcv", "semop", "pause"]
# The wrappers take the same path for every user; an ordinary user's restart
# differs (a PID namespace, no capabilities) but not per call: it runs one
# call of each family (poll-like, sleep, signal wait, System V), root all of
# them (CI time: each case is two kill/restart cycles, about 11 s).
USER_MODES = {"poll", "nanosleep", "sigtimedwait", "msgrcv"}


def only_some_as_user(runner, call=None):
    if runner.mode == "user" and call not in USER_MODES:
        pytest.skip("run as root; as an ordinary user one call of each family runs (USER_MODES)")


@pytest.mark.parametrize("call", MODES)
def test_call_goes_on(call, runner, cprogs):
    """The call, interrupted only by checkpoints and a restart, comes back
    as it would have without them (ppoll's mask blocks every signal, SIGURG
    too: the checkpoint still gets through)."""
    only_some_as_user(runner, call)
    rounds, ms = 6, 1200
    out = cycles(runner, [cprogs["calls_wait"], call, rounds, ms], r"^round 1 ok$")
    assert re.search(rf"^done {call} {rounds}$", out, re.M), out
    assert f"round {rounds} ok" in out, out


def test_sleep_counts_seconds(runner, cprogs):
    """sleep(5) in a loop: each returns 0 and lasts at least 5 s, through
    checkpoints and two kill/restart cycles."""
    only_some_as_user(runner)
    out = cycles(runner, [cprogs["calls_wait"], "sleep", 4, 5000], r"^start sleep$", per_cycle=4, restarts=2)
    assert re.search(r"^done sleep 4$", out, re.M), out


def test_remaining_timeout(runner, cprogs):
    """A 3 s poll interrupted by two checkpoints ends 3 s after it began
    (the pauses aside), not later; one cut by a kill and a restart goes on
    after the restart with what was left: neither the downtime counted (it
    would return at once) nor the whole timeout again."""
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", cprogs["calls_wait"], "poll", 3, 3000, "times")
    proc.wait_for_output(r"^start poll$", timeout=60)
    t0 = time.monotonic()
    time.sleep(1.0)
    runner.checkpoint(store)
    time.sleep(0.8)
    runner.checkpoint(store)
    m = proc.wait_for_output(r"^round 1 ok took_ms=(\d+)$", timeout=60)
    took = int(m.group(1))
    assert 3000 <= took <= 3700, proc.stdout
    # round 2: checkpoint 2 s in, kill, down, restart: 1 s left
    t_round2 = time.monotonic()
    time.sleep(2.0)
    runner.checkpoint(store)
    used = time.monotonic() - t_round2
    kill_job(proc)
    time.sleep(3.5)
    t_up = time.monotonic()
    proc = runner.start_lz("restart", "-d", store)
    proc.wait_for_output(r"^round 2 ok", timeout=60)
    after = time.monotonic() - t_up
    left = 3.0 - used
    assert left - 0.3 <= after <= left + 1.5, f"round 2 ended {after:.2f}s after the restart, {left:.2f}s were left"
    assert proc.wait(timeout=60) == 0
    assert "FAIL" not in proc.stdout and re.search(r"^done poll 3$", proc.stdout, re.M), proc.stdout + proc.stderr
    del t0


def test_own_signal_interrupts(runner, cprogs):
    """The program's own handlers (installed with sigaction, signal,
    sysv_signal and sigset; sigaction shows each its own) interrupt poll()
    with EINTR as natively, checkpoints do not: natively, under Lazarus with
    checkpoints before the signal, and after a kill/restart."""
    argv = [cprogs["calls_signals"], "own", 4]
    sigs = [10, 1, 12, 28]  # SIGUSR1 (SA_RESTART), SIGHUP (sysv_signal), SIGUSR2 (signal), SIGWINCH (sigset)
    want = "".join(f"waiting {c + 1} (pid P)\ninterrupted {c + 1} by SIG{s}\n" for c, s in enumerate(sigs)) + "done\n"

    def drive(proc, first, last, store=None, restarted=False):
        for c in range(first, last):
            if restarted and c == first:  # back in the poll it printed for
                runner.checkpoint_when_up(store)
            else:
                proc.wait_for_output(rf"^waiting {c + 1} ", timeout=60)
            if store is not None:
                checkpoints(runner, store, 2, gap=0.2)
                assert f"interrupted {c + 1}" not in proc.stdout, proc.stdout
            else:
                time.sleep(0.2)
            pid = find_program(proc.pid, "calls_signals") if store is not None else proc.pid
            os.kill(pid, sigs[c])
            proc.wait_for_output(rf"^interrupted {c + 1} by SIG{sigs[c]}$|^FAIL", timeout=30)
            assert "FAIL" not in proc.stdout, proc.stdout

    native = runner.start(argv)
    drive(native, 0, 4)
    assert native.wait(timeout=30) == 0
    assert re.sub(r"\(pid \d+\)", "(pid P)", native.stdout) == want, native.stdout
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", *argv)
    drive(proc, 0, 2, store)
    proc.wait_for_output(r"^waiting 3 ", timeout=60)
    checkpoints(runner, store, 1)
    kill_job(proc)
    time.sleep(DOWN)
    proc = runner.start_lz("restart", "-d", store)
    drive(proc, 2, 4, store, restarted=True)
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("done\n"), proc.stdout


def test_pending_signals_kept(runner, cprogs):
    """A pending SIGCHLD (code, PID, status), a hundred queued SIGRTMIN+2
    with their values and order (process-wide; more than the 64 the process
    record holds: the rest in the manifest's SIGQUEUE section), three
    SIGRTMIN+3 and a SIGUSR1 pending for the second thread only: all there
    after each of two checkpoint/kill/restart cycles, with nothing more."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", cprogs["calls_signals"], "pending", 2, trig, 100)
    out = ""
    for c in (1, 2):
        proc.wait_for_output(rf"^ready {c}$", timeout=60)
        time.sleep(0.3)
        checkpoints(runner, store, 2, gap=0.2)
        # 105 pending: 64 in the process record, 41 in the SIGQUEUE section
        m = lzformat.Manifest.load(ckpt_path(store, max(runner.indexes(store))) / "manifest")
        sq = [s for s in m.sections if s.type == lzformat.SEC_SIGQUEUE]
        assert len(sq) == 1 and sq[0].length == 41 * 136, m.sections
        kill_job(proc)
        out += proc.stdout
        time.sleep(DOWN)
        proc = runner.start_lz("restart", "-d", store)
        time.sleep(0.5)
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    out += proc.stdout
    assert "check 2 ok\ndone\n" in out, out


def test_sigurg_blocker_named_at_once(runner, cprogs):
    """A thread that blocks SIGURG with a raw rt_sigprocmask: the checkpoint
    fails within 2 s (not after 10 s) with one line naming the process, the
    thread's TID and name, and that it blocks SIGURG; the program runs on."""
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", cprogs["raw_sigblock"], 40, 2000000)
    tid = int(proc.wait_for_output(r"^blocked tid=(\d+)$", 30).group(1))
    t0 = time.monotonic()
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    dt = time.monotonic() - t0
    assert r.rc != 0, str(r)
    lines = r.stderr_lines()
    assert len(lines) == 1, str(r)
    assert re.search(rf"thread {tid} \(urg-blocker\) of process \d+ \(urg-main\) blocks SIGURG", lines[0]), lines[0]
    assert dt < 2.0, f"the failed checkpoint took {dt:.1f}s\n{r}"
    assert proc.poll() is None, proc.stderr
    runner.touch(runner.base / "unblock")
    assert proc.wait(timeout=120) == 0, proc.stdout + proc.stderr


BLOCK_ALL = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
mask = ctypes.c_uint64(1 << 22)  # SIGURG, with a raw rt_sigprocmask (SIG_BLOCK)
assert libc.syscall(14, 0, ctypes.byref(mask), None, 8) == 0
print("blocked", flush=True)
time.sleep(float(sys.argv[1]))
"""


def test_process_blocking_sigurg_named_at_once(runner):
    """A process whose only thread blocks SIGURG: the checkpoint fails within
    2 s naming the process and that it blocks SIGURG."""
    script = runner.base / "block_all.py"
    script.write_text(BLOCK_ALL)
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", script, "6")
    proc.wait_for_output(r"^blocked$", 30)
    t0 = time.monotonic()
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    dt = time.monotonic() - t0
    assert r.rc != 0 and len(r.stderr_lines()) == 1, str(r)
    assert re.search(r"process \d+ \(python3\): every thread of it blocks SIGURG", r.stderr), str(r)
    assert dt < 2.0, f"the failed checkpoint took {dt:.1f}s\n{r}"
    assert proc.wait(timeout=60) == 0, proc.stderr


def test_plain_run_unchanged(cprogs):
    """Without Lazarus the programs do what their header says (the reference)."""
    out = plain_output([cprogs["calls_wait"], "poll", 2, 100])
    assert out == "start poll\nround 1 ok\nround 2 ok\ndone poll 2\n", out


def test_malformed_sigqueue_refused(runner, cprogs):
    """A sealed manifest whose SIGQUEUE record names signal 99: the restart
    is refused as malformed, nothing runs."""
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", cprogs["calls_signals"], "pending", 1,
                           runner.base / "trig", 100)
    proc.wait_for_output(r"^ready 1$", timeout=60)
    idx = runner.checkpoint(store)
    kill_job(proc)
    path = ckpt_path(store, idx) / "manifest"
    m = lzformat.Manifest.load(path)
    sq = next(s for s in m.sections if s.type == lzformat.SEC_SIGQUEUE)
    m.data[sq.off:sq.off + 4] = (99).to_bytes(4, "little")
    m.save(path)
    r = runner.lz("restart", "-d", store, timeout=60)
    assert r.rc != 0 and "pending signal list is malformed" in r.stderr and len(r.stderr_lines()) == 1, str(r)


def test_process_signal_stays_the_process(runner, cprogs):
    """A SIGUSR1 (kill) and a SIGRTMIN+4 (sigqueue) pending for the process,
    every thread blocking them: after a checkpoint on the same run the second
    thread still takes them with sigtimedwait (they were put back for the
    process, not into the checkpointing thread's own queue)."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", cprogs["calls_signals"], "shared", trig)
    proc.wait_for_output(r"^ready$", timeout=60)
    checkpoints(runner, store, 2, gap=0.2)
    runner.touch(trig)
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    assert proc.stdout == "ready\nshared ok\ndone\n", proc.stdout


TREE = """#!/bin/bash
"$1" epoll 6 1200 > a.out &
"$1" sleep 4 2000 > b.out
wait
echo treedone
"""


def test_calls_go_on_in_a_tree(runner, cprogs):
    """bash with two children in epoll_wait and sleep: checkpointed twice
    inside their calls, the whole job SIGKILLed and restarted, twice; each
    child's file (rolled back with the job) holds every round and no FAIL."""
    script = runner.base / "tree.sh"
    script.write_text(TREE)
    os.chmod(script, 0o755)
    out = cycles(runner, ["/bin/bash", script, cprogs["calls_wait"]], r"^$", per_cycle=2, restarts=2)
    assert out.strip().endswith("treedone"), out
    a, b = (runner.base / "a.out").read_text(), (runner.base / "b.out").read_text()
    assert a.endswith("round 6 ok\ndone epoll 6\n") and "FAIL" not in a, a
    assert b.endswith("round 4 ok\ndone sleep 4\n") and "FAIL" not in b, b
