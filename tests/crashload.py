"""Crash tests on a busy machine (issue 16), reusable by any test.

`CpuLoad`: as many CPU-bound processes as the machine has cores, beside the
job, started and ended by this helper by PID (a context manager).

`kill_job(proc, order, rng)`: kills a job -- the supervisor `proc` (a
conftest.Proc) and every process below it -- in one of three orders:
  "all"         all at once: every process stopped (SIGSTOP, parents before
                children, listing again until none appears), then all
                SIGKILLed; none sees another die (a machine dying);
  "sup-first"   the supervisor SIGKILLed first, the job's processes 5-500 ms
                later (random): they run on meanwhile, as when a node or the
                OOM killer takes the supervisor first;
  "procs-first" the job's processes stopped and SIGKILLed, then the
                supervisor 5-500 ms later (it may notice the program's death
                and end on its own meanwhile).
The job's processes are found from outside, never by name: the supervisor's
descendants through /proc/PID/task/*/children.  Once the supervisor is
dead they are the descendants of the processes it had (now orphans of this
test session, which is a subreaper) and any other orphan this session did
not start itself.

`run_until_done(...)`: `lazarus run`, then after each new checkpoint a kill
at a random instant in the next order of a list, `lazarus restart` until the
job finishes; every restart must succeed (no refusal).

`against_plain_run(...)`: a job run once without Lazarus for the reference
(`plain_run`), then killed in a list of orders (beside a `CpuLoad`) and
restarted until done: its files (`files_of`, `assert_same_files`) and
output (`check_output`) as the reference's."""
from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import conftest
from conftest import children, reap_orphans, stray_children, wait_gone, wait_new_checkpoint

ORDERS = ("all", "sup-first", "procs-first")
LATER = (0.005, 0.5)  # the second half of a split kill comes this many seconds later


class CpuLoad:
    """`n` (default: the number of cores) busy-looping processes, each in
    its own session, ended by PID on exit."""

    def __init__(self, n: int | None = None):
        self.n = n or os.cpu_count() or 1
        self.procs: list[subprocess.Popen] = []

    def __enter__(self):
        for _ in range(self.n):
            p = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            conftest._tracked.add(p.pid)  # waited for here, never reaped behind our back
            self.procs.append(p)
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def running(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait(timeout=20)
            conftest._tracked.discard(p.pid)
        self.procs = []
        return False


_stop_and_kill = conftest.stop_and_kill  # the "all" order, and what each other order stops


def _orphans(exclude: set[int]) -> list[int]:
    """Children of this session it did not start (the job's processes
    reparented here after their supervisor and parents died)."""
    return [c for c in stray_children()
            if c not in conftest._tracked and c not in exclude and conftest.is_alive(c)]


def kill_job(proc, order: str, rng: random.Random, exclude=(), later=LATER) -> dict:
    """Kill the job under supervisor `proc` in `order` (ORDERS), the second
    half of a split kill a uniform random time in `later` (s) after the
    first.  `exclude`: pids of this session's own helpers (a CpuLoad's).  Waits until the
    supervisor has exited and every process of the job is gone.  Returns
    {"order", "later" (s), "pids" (all killed), "alive_at_later" (the
    processes of the job alive `later` s after the supervisor died),
    "alive_after_sup" (those still alive 5 s after that, when the second
    half came)}."""
    assert order in ORDERS, order
    exclude = set(exclude) | {proc.pid}
    later = rng.uniform(*later)
    info = {"order": order, "later": later, "pids": [], "alive_after_sup": []}
    if order == "all":
        info["pids"] = _stop_and_kill([proc.pid])
    elif order == "sup-first":
        before = children(proc.pid)  # its children, known before it dies
        os.kill(proc.pid, signal.SIGKILL)
        # reaped, not waited for: its output pipes stay open in the job
        while proc.p.poll() is None:
            time.sleep(0.001)
        time.sleep(later)
        roots = sorted(set(before) | set(_orphans(exclude)))
        alive = [p for p in roots if conftest.is_alive(p)]
        info["alive_at_later"] = alive
        # one that has not ended yet may be inside a system call the disk holds
        # up (a write, the dating of DIR/lock) on a machine busy with I/O: it
        # gets 5 s more to end itself before the second half of the kill
        grace = time.monotonic() + 5
        while alive and time.monotonic() < grace:
            time.sleep(0.01)
            alive = [p for p in alive if conftest.is_alive(p)]
        info["alive_after_sup"] = list(alive)
        found = _stop_and_kill(alive)
        info["pids"] = [proc.pid] + found
    else:
        info["pids"] = _stop_and_kill([proc.pid], include_roots=False)
        time.sleep(later)
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        info["pids"].insert(0, proc.pid)
    proc.wait(timeout=60)
    # a process whose parent died meanwhile came here: it is the job's too
    deadline = time.monotonic() + 20
    while (rest := [p for p in _orphans(exclude) if p not in info["pids"]]) and time.monotonic() < deadline:
        info["pids"] += _stop_and_kill(rest)
        time.sleep(0.01)
    wait_gone([p for p in info["pids"] if p != proc.pid])
    reap_orphans()
    return info


class CrashRun:
    def __init__(self):
        self.segments = []  # (kind, rc, stdout, stderr, delay, kill info or None)

    @property
    def kills(self) -> int:
        return sum(1 for s in self.segments if s[5])

    @property
    def all_stdout(self) -> str:
        return "".join(s[2] for s in self.segments)

    def describe(self) -> str:
        out = []
        for i, (kind, rc, so, se, delay, k) in enumerate(self.segments):
            d = f"{delay:.3f}s" if delay is not None else "-"
            how = (f"killed {k['order']} (second half {k['later'] * 1000:.0f} ms later, "
                   f"{len(k['pids'])} processes)") if k else "not killed"
            out.append(f"== segment {i} ({kind}) exit {rc}, {how} after {d}")
            out.append("-- stdout: " + so[-400:].replace("\n", " | "))
            out.append("-- stderr: " + se[-2000:])
        return "\n".join(out)


def run_until_done(runner, store: Path, argv, rng: random.Random, orders, *, interval: int = 1,
                   max_delay: float = 1.0, load: CpuLoad | None = None, timeout: float = 300,
                   later=LATER, run_opts=()) -> CrashRun:
    """`lazarus run -i INTERVAL -- argv`; after each new checkpoint appears
    in `list`, wait a uniform random delay in [0, max_delay] and kill the job
    in the next order of `orders` (kill_job); `lazarus restart` after each
    kill; once every order is used, let it finish.  A restart that refuses
    (exit 1 with "cannot restart") fails at once, with its message.  If the
    job finishes before all kills are done, that is said in the result
    (fewer kills): callers decide."""
    start = time.monotonic()
    cr = CrashRun()
    exclude = set(load.pids) if load else set()
    proc = runner.start_lz("run", "-d", store, "-i", interval, *run_opts, "--", *argv)
    kind, last_idx, todo = "run", -1, list(orders)
    t_seg = start
    while True:
        k, delay = None, None
        if todo and wait_new_checkpoint(runner, store, last_idx, proc, timeout=120):
            delay = rng.uniform(0.0, max_delay)
            end = time.monotonic() + delay
            while time.monotonic() < end and proc.poll() is None:
                time.sleep(0.005)
            if proc.poll() is None:
                k = kill_job(proc, todo.pop(0), rng, exclude, later)
        rc = proc.wait(timeout=max(timeout - (time.monotonic() - start), 30))
        cr.segments.append((kind, rc, proc.stdout, proc.stderr, delay, k))
        assert "cannot restart" not in proc.stderr, f"{kind} refused\n{cr.describe()}"
        if not k:
            break
        assert rc == 137, f"{kind}: supervisor exited {rc} after the kill, want 137\n{cr.describe()}"
        if load:
            assert load.running(), "the CPU load ended early"
        idx = runner.indexes(store)
        assert idx, f"no checkpoint to restart from\n{cr.describe()}"
        last_idx = max(idx)
        proc = runner.start_lz("restart", "-d", store)
        t_seg = time.monotonic()
        kind = "restart"
    assert cr.segments[-1][1] == 0, f"the last segment ended with {cr.segments[-1][1]}\n{cr.describe()}"
    print(f"crashload.run_until_done: {cr.kills} kills ({', '.join(s[5]['order'] for s in cr.segments if s[5])}), "
          f"{len(cr.segments)} segments, {time.monotonic() - start:.1f}s, the last {time.monotonic() - t_seg:.1f}s")
    return cr


# --------------------------------------------------------------------------
# Against an uninterrupted run without Lazarus
# --------------------------------------------------------------------------
PLAIN_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def plain_run(argv, cwd: Path, timeout: float = 300) -> str:
    """An uninterrupted run without Lazarus; returns its stdout."""
    t = time.monotonic()
    env = {"PATH": PLAIN_PATH, "HOME": str(cwd), "LANG": "C.UTF-8", "TMPDIR": str(cwd)}
    cp = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                        stdin=subprocess.DEVNULL, timeout=timeout)
    assert cp.returncode == 0, (f"plain run failed ({cp.returncode}): {argv}\n"
                                f"{cp.stdout[-2000:]}\n{cp.stderr[-2000:]}")
    print(f"plain run {Path(str(argv[0])).name}: {time.monotonic() - t:.1f}s")
    return cp.stdout.decode(errors="replace")


def files_of(root: Path) -> dict:
    """relative path -> (kind, permission bits, sha256 and size | target)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                out[rel] = ("file", oct(stat.S_IMODE(st.st_mode)), st.st_size,
                            hashlib.sha256(p.read_bytes()).hexdigest())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", oct(stat.S_IMODE(st.st_mode)))
            else:
                out[rel] = ("other", oct(st.st_mode))
    return out


def assert_same_files(got: dict, want: dict, info: str) -> None:
    if got == want:
        return
    lines = [f"  {k}: got {got.get(k)}, want {want.get(k)}"
             for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k)]
    raise AssertionError("the job's files are not the uninterrupted run's:\n"
                         + "\n".join(lines[:60]) + "\n" + info)


def check_output(cr: CrashRun, ref_out: str, start_re: str = r"^start ") -> None:
    """Every line a segment printed is a line of the uninterrupted run (lines
    after the checkpoint come again after a restart), no restart started
    over, the last line is the uninterrupted run's."""
    info = cr.describe()
    ref = set(ref_out.splitlines())
    for i, s in enumerate(cr.segments):
        for line in s[2].splitlines():
            assert line in ref, f"segment {i} printed {line!r}, not in the uninterrupted run\n{info}"
        if i > 0:
            assert not re.search(start_re, s[2], re.M), f"segment {i} started the job over\n{info}"
    assert cr.segments[-1][2].splitlines()[-1:] == ref_out.splitlines()[-1:], info


def against_plain_run(runner, rng: random.Random, argv_for, orders, *, load: bool = True, **kw) -> CrashRun:
    """argv_for(DIR): the job's command line for its work directory DIR.
    Once without Lazarus in ref/, then in work/ under `lazarus run -i 1`
    (beside a CpuLoad if load), killed in each of `orders` and restarted
    until done: every file of work/ as in ref/, the output as the
    uninterrupted run's (it ends with a line `done ...`)."""
    ref, work = runner.mkdir("ref"), runner.mkdir("work")
    ref_out = plain_run(argv_for(ref), runner.base)
    assert re.search(r"^done \w+$", ref_out, re.M), ref_out[-500:]
    if load:
        with CpuLoad() as cpu:
            cr = run_until_done(runner, runner.base / "store", argv_for(work), rng, orders, load=cpu, **kw)
    else:
        cr = run_until_done(runner, runner.base / "store", argv_for(work), rng, orders, **kw)
    info = cr.describe()
    assert cr.kills == len(orders), f"the job finished after only {cr.kills} kills (make it longer)\n{info}"
    assert_same_files(files_of(work), files_of(ref), info)
    check_output(cr, ref_out)
    return cr
