"""Multi-threaded programs under Lazarus (every thread stopped in the
checkpoint handler, recreated by the restorer with its TID).

- an OpenMP program (gcc -fopenmp, OMP_NUM_THREADS 2 and 4) and a pthread
  producer/consumer (mutex, condition variables, bounded queue in memory),
  each SIGKILLed at 5 random instants and restarted until done: output and
  result file byte-identical to an uninterrupted run without Lazarus;
- per-thread state across a checkpoint taken at a known point, SIGKILL and
  restart (programs/thread_probe.c): TIDs, names, signal masks, alternate
  signal stacks, TLS, threads blocked in pthread_cond_wait / pthread_join /
  sem_wait / FUTEX_WAIT, a running thread's registers, signals pending for
  one thread only (with their siginfo);
- 64 threads starting and exiting continually while a checkpoint is asked
  for every 0.2 s: none hangs or fails, every one restarts;
- a thread that blocks SIGURG with a raw system call: `lazarus checkpoint`
  fails within 15 s naming the thread, the program runs on, and once the
  thread unblocks it is checkpointed, restarted and finishes correctly.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import (IS_ROOT, Proc, _compile, ckpt_dirs, find_program, kill_program,
                      run_until_done, tmp_entries)

# --------------------------------------------------------------------------
# programs and their uninterrupted runs
# --------------------------------------------------------------------------
KILLS = 3
# Long enough for 4 kills (KILLS are made): a killed segment runs ~1.5 s (a checkpoint every
# second, the kill within 0.5 s after it appeared)
OMP_ARGS = ["32", "18", "52"]            # MiB, phases, rounds: ~7.5 s on 2 cores
PRODCONS_ARGS = ["4", "3", "2000", "42", "16", "5500"]  # ~7 s
KILL_DELAY = 0.5
CHURN_ARGS = ["64", "24", "512", "80000"]  # 64 slots, 24 waves of 512 threads: ~3 s
RAW_ARGS = ["400", "1000000"]            # chunks, work: ~2 s before and after the unblock


@pytest.fixture(scope="module")
def tprogs(programs):
    d = programs.dir
    return SimpleNamespace(
        omp=_compile("omp_phases", d, ["-fopenmp"]),
        prodcons=_compile("prodcons", d, ["-pthread"]),
        probe=_compile("thread_probe", d, ["-pthread"]),
        churn=_compile("thread_churn", d, ["-pthread"]),
        rawblock=_compile("raw_sigblock", d, ["-pthread"]),
    )


_plain: dict = {}


def plain_run(argv, env=None, files=(), before=None, timeout=300):
    """An uninterrupted run without Lazarus in a fresh directory: (stdout,
    {name: bytes} of `files` afterwards).  `before(dir)` prepares the
    directory.  Cached per argv and env."""
    key = (tuple(str(a) for a in argv), tuple(sorted((env or {}).items())), tuple(files))
    if key not in _plain:
        d = Path(tempfile.mkdtemp(prefix="lazarus-plain-"))
        try:
            if before:
                before(d)
            cp = subprocess.run(list(key[0]), cwd=d, env=dict(os.environ, **(env or {})), capture_output=True,
                                text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            assert cp.returncode == 0, f"plain run failed: {key}\n{cp.stdout[-2000:]}\n{cp.stderr[-2000:]}"
            _plain[key] = (cp.stdout, {f: (d / f).read_bytes() for f in files})
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return _plain[key]




# tests where the identity does not change what is checked run once: as root
# when the session is root (TIDs are restored there), else as the user
ONE_MODE = ["root"] if IS_ROOT else ["user"]


def manifest_threads(runner, store: Path, index: int) -> list:
    """(tid, name) of every thread of the main program in checkpoint index,
    as `lazarus show --json threads` reads them from its manifest."""
    r = runner.lz("show", "-d", store, "--at", index, "--json", "threads", timeout=60)
    assert r.rc == 0, f"lazarus show failed\n{r}"
    d = json.loads(r.stdout)
    return [(t["tid"], t["name"]) for t in d["threads"] if t["pid"] == d["pid"]]


def need(mode):
    if mode == "root" and not IS_ROOT:
        pytest.skip("the root variant needs the test session to run as root")


# --------------------------------------------------------------------------
# OpenMP and producer/consumer, killed at random instants
# --------------------------------------------------------------------------
def check_killed_run(kr, expected_out, kills):
    info = kr.describe()
    assert kr.kills == kills, f"program finished after only {kr.kills} kills\n{info}"
    assert [s.rc for s in kr.segments] == [137] * kills + [0], info
    ref = expected_out.splitlines()
    # every line any segment printed is the uninterrupted run's line (phases
    # repeated after a restart from an older checkpoint are the same lines),
    # the last segment ends like the uninterrupted run
    for i, s in enumerate(kr.segments):
        for line in s.stdout.splitlines():
            assert line in ref, f"segment {i} printed {line!r}, not in the uninterrupted run\n{info}"
        if i > 0:
            assert not re.search(r"^start ", s.stdout, re.M), f"segment {i} started the program over\n{info}"
    assert kr.segments[-1].stdout.splitlines()[-1] == ref[-1], info
    pids = {s.killed_nspid for s in kr.segments if s.killed_nspid is not None}
    assert len(pids) == 1, f"getpid() changed across restarts: {pids}\n{info}"


@pytest.mark.parametrize("mode,nthreads", [("root", 2), ("root", 4),
                                           ("user", 4)])
def test_openmp_killed_at_random_instants(mode, nthreads, runner, tprogs, rng):
    """OpenMP reduction in 18 phases over 32 MiB, a line appended to
    result.txt after each phase; SIGKILL at 3 random instants (`-i 1`),
    restart until done: stdout and result.txt byte-identical to a run
    without Lazarus, every parallel region ran with the whole team."""
    need(mode)
    argv = [tprogs.omp, *OMP_ARGS, "result.txt"]
    exp_out, exp_files = plain_run(argv, env={"OMP_NUM_THREADS": "2"}, files=["result.txt"])
    runner.env["OMP_NUM_THREADS"] = str(nthreads)
    store = runner.base / "store"
    kr = run_until_done(runner, store, argv, rng, kills=KILLS, comm="omp_phases", done_re="^done ",
                        max_delay=KILL_DELAY, timeout=240)
    check_killed_run(kr, exp_out, KILLS)
    assert (runner.base / "result.txt").read_bytes() == exp_files["result.txt"], kr.describe()
    err = "".join(s.stderr for s in kr.segments)
    assert f"threads {nthreads}" in kr.segments[0].stderr, kr.describe()
    assert "FEWER THREADS" not in err, kr.describe()
    assert "gets a new one" not in err, kr.describe()


@pytest.mark.parametrize("mode", ["root", "user"])
def test_producer_consumer_killed_at_random_instants(mode, runner, tprogs, rng):
    """4 producers, 3 consumers, a 16-slot queue (mutex + 2 condition
    variables) in 42 rounds; SIGKILL at 3 random instants, restart until
    done: every round's sum/xor and the digest as without Lazarus, no item
    lost or consumed twice.  (Both programs exit 3 with STALLED after 10 s
    without progress: a restart that lost a thread fails fast.)"""
    need(mode)
    argv = [tprogs.prodcons, *PRODCONS_ARGS]
    exp_out, _ = plain_run(argv)
    store = runner.base / "store"
    kr = run_until_done(runner, store, argv, rng, kills=KILLS, comm="prodcons", done_re="^done ",
                        max_delay=KILL_DELAY, timeout=240)
    check_killed_run(kr, exp_out, KILLS)
    assert "LOST" not in kr.all_stdout, kr.describe()
    assert "gets a new one" not in "".join(s.stderr for s in kr.segments), kr.describe()


# --------------------------------------------------------------------------
# per-thread state at a known point
# --------------------------------------------------------------------------
PROBE_THREADS = ["probe-main", "th-cond", "th-sem", "th-futex", "th-join", "th-spin", "th-sig"]
REPORT_RE = re.compile(r"^(before|after) (\S+) tid=(\d+) comm=(\S+) mask=([0-9a-f]{16}) alt=(\S+) "
                       r"tls=(\d+) tlsaddr=(\S+) pending=([0-9a-f]{16})$", re.M)
SIGUSR2_BIT = 1 << (12 - 1)


def reports(out: str, when: str) -> dict:
    got = {}
    for m in REPORT_RE.finditer(out):
        if m.group(1) == when:
            got[m.group(2)] = dict(zip(("tid", "comm", "mask", "alt", "tls", "tlsaddr", "pending"), m.groups()[2:]))
    return got


def tail_lines(out: str) -> list:
    """The probe's lines after its reports: kill0, joined, spin, sig..., done."""
    return [l for l in out.splitlines() if re.match(r"^(kill0|joined|spin|sig|done)\b", l)]


def probe_reference(tprogs):
    def run(d):
        p = Proc([tprogs.probe], cwd=d)
        try:
            p.wait_for_output(r"^ready$", 30)
            (Path(d) / "go").touch()
            assert p.wait(30) == 0, p.stderr
            return p.stdout
        finally:
            p.kill()
    if "probe" not in _plain:
        d = Path(tempfile.mkdtemp(prefix="lazarus-plain-"))
        try:
            _plain["probe"] = run(d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return _plain["probe"]


def check_before(before: dict):
    assert sorted(before) == sorted(PROBE_THREADS), before
    assert len({r["tid"] for r in before.values()}) == len(PROBE_THREADS), before
    assert len({r["mask"] for r in before.values()}) == len(PROBE_THREADS), "masks must differ per thread"
    assert len({r["alt"] for r in before.values()}) == len(PROBE_THREADS), "alternate stacks must differ"
    for name, r in before.items():
        assert r["comm"] == name
        pend = int(r["pending"], 16)
        if name == "th-sig":
            assert pend & SIGUSR2_BIT and pend != SIGUSR2_BIT, f"th-sig must hold SIGUSR2 and SIGRTMIN+3: {r}"
        else:
            assert pend == 0, f"{name}: nothing pending for it: {r}"


def start_probe(runner, probe):
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", probe)
    proc.wait_for_output(r"^ready$", 60)
    before = reports(proc.stdout, "before")
    check_before(before)
    return store, proc, before


def task_view(pid: int) -> dict:
    """{tid as the program sees it: comm} of every thread of pid, from /proc."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
            nst = Path(f"/proc/{pid}/task/{t}/status").read_text()
        except OSError:
            continue
        m = re.search(r"^NSpid:.*?(\d+)\s*$", nst, re.M)
        out[int(m.group(1)) if m else int(t)] = comm
    return out


_probe_runs: dict = {}


def probe_restart(mode, runner, tprogs):
    """The probe checkpointed at its known point, SIGKILLed and restarted
    (once per identity; the TID test and the state test share it)."""
    if mode in _probe_runs:
        return _probe_runs[mode]
    store, proc, before = start_probe(runner, tprogs.probe)
    index = runner.checkpoint(store)
    in_manifest = manifest_threads(runner, store, index)
    kill_program(proc, "probe-main")
    r = runner.start_lz("restart", "-d", store)
    # the restored threads, seen from outside before the program is let go
    # (TIDs as the program sees them: its PID namespace's)
    seen = wait_restored(r, "probe-main", PROBE_THREADS)
    runner.touch(runner.base / "go")
    rc = r.wait(60)
    assert rc == 0, f"restart exited {rc}\n{r.stdout}\n{r.stderr}"
    run = _probe_runs[mode] = SimpleNamespace(before=before, after=reports(r.stdout, "after"), seen=seen,
                                              out=r.stdout, err=r.stderr, manifest=in_manifest)
    return run


def without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize("mode", ["root", "user"])
def test_thread_state_after_restart(mode, runner, tprogs):
    """Checkpoint at a known point (every probe thread set up and blocked,
    th-spin running), SIGKILL, restart: each thread has the name, signal
    mask, alternate signal stack, TLS value and address, and pending signals
    it had; the blocked ones wake up normally (pthread_join returns the
    joined thread's value), the running one's registers agree with its TLS,
    th-sig's two signals are pending for it alone, with their siginfo.
    (TIDs: test_thread_ids_after_restart.)"""
    need(mode)
    ref_tail = [l for l in tail_lines(probe_reference(tprogs)) if not l.startswith("kill0")]
    run = probe_restart(mode, runner, tprogs)
    want = sorted((int(b["tid"]), name) for name, b in run.before.items())
    assert sorted(run.manifest) == want, f"the checkpoint's threads {run.manifest}, the program's {want}"
    assert sorted(run.seen.values()) == sorted(PROBE_THREADS), f"threads after the restart: {run.seen}\n{run.err}"
    for name in PROBE_THREADS:
        assert without(run.after.get(name, {}), "tid") == without(run.before[name], "tid"), (
            f"{name}: before the checkpoint {run.before[name]}\n"
            f"after the restart      {run.after.get(name)}\n{run.out}\n{run.err}")
    assert [l for l in tail_lines(run.out) if not l.startswith("kill0")] == ref_tail, (
        f"{run.out}\n--- without Lazarus\n" + "\n".join(ref_tail))
    assert not re.search(r"^(start|before|ready)", run.out, re.M), "the restart started over"


@pytest.mark.parametrize("mode", ["root", "user"])
def test_thread_ids_after_restart(mode, runner, tprogs):
    """The same restart: every thread has its TID again, as /proc shows it
    from outside and as gettid() tells the thread; glibc's own record of the
    TID still reaches the thread (pthread_kill(t, 0) succeeds); no warning."""
    need(mode)
    ref_kill0 = [l for l in tail_lines(probe_reference(tprogs)) if l.startswith("kill0")]
    run = probe_restart(mode, runner, tprogs)
    want = {int(b["tid"]): name for name, b in run.before.items()}
    assert run.seen == want, f"threads after the restart (tid: name) {run.seen}, at the checkpoint {want}\n{run.err}"
    for name in PROBE_THREADS:
        assert run.after[name]["tid"] == run.before[name]["tid"], f"{name}: gettid() changed\n{run.out}"
    assert [l for l in tail_lines(run.out) if l.startswith("kill0")] == ref_kill0, run.out
    assert "gets a new one" not in run.err, run.err


def wait_restored(r: Proc, comm: str, names) -> dict:
    """Wait until the restarted program (under `lazarus restart` r) has
    threads named `names` again; its task_view."""
    deadline = time.monotonic() + 30
    seen = {}
    while time.monotonic() < deadline:
        pid = find_program(r.pid, comm)
        if pid:
            seen = task_view(pid)
            if sorted(seen.values()) == sorted(names):
                return seen
        assert r.poll() is None, f"restart ended early ({r.returncode})\n{r.stderr}"
        time.sleep(0.05)
    raise AssertionError(f"threads after the restart: {seen}, want {sorted(names)}\n{r.stderr}")


@pytest.mark.parametrize("mode", ["root", "user"])
def test_checkpoint_after_restart_has_every_thread(mode, runner, tprogs):
    """A restarted program checkpointed again (still at the probe's known
    point): the new checkpoint holds every thread, by name (TIDs: see
    test_thread_ids_after_restart), and a restart from it gives every
    thread's state of the first run."""
    need(mode)
    ref_tail = [l for l in tail_lines(probe_reference(tprogs)) if not l.startswith("kill0")]
    store, proc, before = start_probe(runner, tprogs.probe)
    runner.checkpoint(store)
    kill_program(proc, "probe-main")
    r = runner.start_lz("restart", "-d", store)
    wait_restored(r, "probe-main", PROBE_THREADS)
    index = runner.checkpoint(store)
    names = sorted(n for _, n in manifest_threads(runner, store, index))
    assert names == sorted(PROBE_THREADS), f"checkpoint {index} of the restarted program holds threads {names}"
    kill_program(r, "probe-main")
    r = runner.start_lz("restart", "-d", store)
    wait_restored(r, "probe-main", PROBE_THREADS)
    runner.touch(runner.base / "go")
    assert r.wait(60) == 0, r.stderr
    after = reports(r.stdout, "after")
    for name in PROBE_THREADS:
        assert without(after.get(name, {}), "tid") == without(before[name], "tid"), f"{name}\n{r.stdout}"
    assert [l for l in tail_lines(r.stdout) if not l.startswith("kill0")] == ref_tail, r.stdout


def test_thread_state_after_checkpoint(runner, tprogs):
    """The same probe checkpointed and let go without a restart: nothing
    changed for any thread (a check of the probe and of the stop/release)."""
    ref_tail = tail_lines(probe_reference(tprogs))
    store, proc, before = start_probe(runner, tprogs.probe)
    runner.checkpoint(store)
    runner.checkpoint(store)
    runner.touch(runner.base / "go")
    assert proc.wait(60) == 0, proc.stderr
    after = reports(proc.stdout, "after")
    for name in PROBE_THREADS:
        assert after.get(name) == before[name], f"{name}: {before[name]} -> {after.get(name)}\n{proc.stdout}"
    assert tail_lines(proc.stdout) == ref_tail, proc.stdout


# --------------------------------------------------------------------------
# threads starting and exiting while checkpoints are taken every 0.2 s
# --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ONE_MODE)
def _ending(proc, r) -> bool:
    """The checkpoint failed because the program ended in it (its supervisor
    may still be finishing when the request returns): true once it exits."""
    # the job's end met the request: said as such, or (the supervisor removing
    # its socket as it ends) no job to ask any more
    if "ended before the checkpoint was complete" not in r.stderr and "no job is running" not in r.stderr:
        return False
    try:
        proc.wait(30)
    except Exception:
        return False
    return True


def test_thread_churn_checkpoints(mode, runner, tprogs):
    """64 threads at a time, each created for one job and exiting (12288 in
    all), `lazarus checkpoint` every 0.2 s: every request returns within
    15 s with a checkpoint, the output is the uninterrupted run's, and every
    checkpoint restarts (`restart --at`, newest first) and runs on to the
    next wave with the right digest; the oldest runs to the end."""
    need(mode)
    argv = [tprogs.churn, *CHURN_ARGS]
    exp_out, _ = plain_run(argv)
    ref = exp_out.splitlines()
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "-k", "1000", "--", *argv)
    proc.wait_for_output(r"^start ", 30)
    done, failed, slow, times = [], [], [], []
    while proc.poll() is None:
        t0 = time.monotonic()
        r = runner.lz("checkpoint", "-d", store, timeout=60)
        dt = time.monotonic() - t0
        times.append(dt)
        if dt > 15:
            slow.append((dt, str(r)))
        if r.rc == 0:
            done.append(int(r.stdout))
        elif proc.poll() is None and not _ending(proc, r):
            failed.append(str(r))
        time.sleep(max(0.0, 0.2 - dt))
    rc = proc.wait(30)
    print(f"{len(done)} checkpoints, {len(failed)} failed, slowest request {max(times):.2f}s")
    assert rc == 0, proc.stderr
    assert proc.stdout == exp_out, proc.stdout[-2000:]
    assert not slow, f"checkpoint requests took more than 15 s: {slow}"
    assert not failed, f"{len(failed)} checkpoints failed, the first:\n{failed[0]}"
    assert len(done) >= 8, f"only {len(done)} checkpoints in the run"
    assert runner.indexes(store) == done, f"list shows {runner.indexes(store)}, checkpoint returned {done}"
    assert tmp_entries(store) == []
    nthreads = {i: len(manifest_threads(runner, store, i)) for i in done}
    print("threads in each checkpoint:", " ".join(str(nthreads[i]) for i in done))
    assert max(nthreads.values()) > 16, f"checkpoints caught few threads: {nthreads}"
    for idx in sorted(done, reverse=True):
        last = idx == min(done)
        # --force: the job may have finished (the restarted program ran to its end)
        r = runner.start_lz("restart", "-d", store, "--at", idx, "--force")
        if last:
            assert r.wait(120) == 0, f"restart --at {idx}\n{r.stderr}"
        else:
            r.wait_for_output(r"^(wave|done) ", 30)
            pid = find_program(r.pid, "thread_churn")
            if pid:
                os.kill(pid, signal.SIGKILL)
            rc = r.wait(60)
            assert rc == 137 or (rc == 0 and "done" in r.stdout), f"restart --at {idx} exited {rc}\n{r.stderr}"
        out = r.stdout.splitlines()
        assert out and all(l in ref for l in out), f"restart --at {idx} printed {out}"
        assert ref[ref.index(out[0]):ref.index(out[0]) + len(out)] == out, f"restart --at {idx}: {out}"
        if mode == "root":  # as an ordinary user: test_thread_ids_after_restart[user]
            assert "gets a new one" not in r.stderr, r.stderr
        if last:
            assert out[-1] == ref[-1], f"restart --at {idx}: {out}"


# --------------------------------------------------------------------------
# a thread that blocks SIGURG behind the runtime's back
# --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["user"])
def test_raw_sigurg_block_fails_checkpoint(mode, runner, tprogs):
    """A thread blocks SIGURG with syscall(SYS_rt_sigprocmask): `lazarus
    checkpoint` fails within 15 s with one message naming the thread (TID and
    name), no checkpoint appears, the program runs on; once the thread
    unblocks SIGURG (raw again) a checkpoint works, and a restart from it
    finishes with the uninterrupted run's results."""
    argv = [tprogs.rawblock, *RAW_ARGS]
    exp_out, _ = plain_run(argv, before=lambda d: (d / "unblock").touch())
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", *argv)
    tid = int(proc.wait_for_output(r"^blocked tid=(\d+)$", 30).group(1))
    t0 = time.monotonic()
    r = runner.lz("checkpoint", "-d", store, timeout=60)
    dt = time.monotonic() - t0
    assert r.rc != 0, f"checkpoint of a program whose thread blocks SIGURG succeeded\n{r}"
    assert dt <= 15, f"the failed checkpoint took {dt:.1f}s\n{r}"
    lines = r.stderr_lines()
    assert len(lines) == 1, f"want one line\n{r}"
    assert str(tid) in lines[0] and "urg-blocker" in lines[0], f"the message must name thread {tid} (urg-blocker)\n{r}"
    print(f"failed checkpoint after {dt:.1f}s: {lines[0]}")
    assert proc.poll() is None, f"the program stopped\n{proc.stderr}"
    assert runner.indexes(store, check=False) in ([], None), "a failed checkpoint is listed"
    assert not ckpt_dirs(store)
    runner.touch(runner.base / "unblock")
    proc.wait_for_output(r"^unblocked$", 30)
    index = runner.checkpoint(store, timeout=60)
    assert proc.poll() is None, "the program ended before the checkpoint; make RAW_ARGS longer"
    kill_program(proc, "urg-main")
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0, str(r)
    ref = exp_out.splitlines()
    assert r.stdout.splitlines() == ref[ref.index("unblocked") + 1:], f"{r}\n--- want\n{exp_out}"
    assert index == max(runner.indexes(store))
