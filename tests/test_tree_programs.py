"""Process trees with real programs (the acceptance tests of the tree
restart): each job is first run without Lazarus to get the reference
result, then under `lazarus run -i 1`, and the WHOLE job -- the supervisor
and every process below it (the programs, the writers), stopped top-down
and SIGKILLed together, as if the machine died -- is killed at random
instants (at least 5 times, each within `KILL_DELAY` s after a new
checkpoint appeared), `lazarus restart` after each kill, until it
finishes.  The files it made must equal the reference run's byte for byte.

- `programs/tree_pipeline.sh`: bash looping over pipelines (awk | sort |
  uniq -c > out.N in the background, awk | sort -n | md5sum > sum.N in a
  subshell, `wait`, a line appended to `log` with `>>`) [root, user];
- `make -j2` of a generated C project (10 modules of generated -O2 code, a
  header, a binary linked from them, run to make result.txt) with the real
  gcc: every object, the binary and result.txt identical to an
  uninterrupted build in the same directory [root, user];
- `programs/tree_mp_pool.py`: Python multiprocessing, a Pool of 2 forked
  workers each writing task files, the parent a log and a summary [root].
"""
import hashlib
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (IS_ROOT, PROGRAMS_SRC, comm_of, descendants, wait_gone,
                      wait_new_checkpoint)

KILLS = 5
KILL_DELAY = 1.0  # a kill lands uniformly within this many seconds after a new checkpoint
PLAIN_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
PIPE_ARGS = ["120", "150000"]  # iterations, rows per iteration: ~10 s uninterrupted
MAKE_MODULES, MAKE_FUNCS = 10, 100  # ~10 s of gcc -O2 on 2 cores
POOL_ARGS = ["48", "25000"]    # tasks, rounds per task: ~10 s on 2 workers


def need(mode):
    if mode == "root" and not IS_ROOT:
        pytest.skip("the root variant needs the test session to run as root")


# --------------------------------------------------------------------------
# Killing the whole job, as a machine dying would
# --------------------------------------------------------------------------
def kill_job(proc) -> list:
    """SIGSTOP the supervisor proc and every process below it, parents
    before children, listing again until no new process appears (a stopped
    process starts none, and /proc/PID/task/*/children is reliable only for
    stopped children), then SIGKILL them all: no process of the job sees
    another die.  Waits for the supervisor and until every one is gone.
    Returns [(pid, comm)] of the processes killed."""
    seen: dict = {}
    for _ in range(100):
        now = [proc.pid] + [p for p, _ in descendants(proc.pid)]
        new = [p for p in now if p not in seen]
        if not new:
            break
        for p in new:
            seen[p] = comm_of(p)
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    wait_gone([p for p in seen if p != proc.pid])
    return list(seen.items())


class JobRun:
    def __init__(self):
        self.segments = []  # (kind, rc, stdout, stderr, delay, killed [(pid, comm)])

    @property
    def kills(self) -> int:
        return sum(1 for s in self.segments if s[5])

    @property
    def all_stdout(self) -> str:
        return "".join(s[2] for s in self.segments)

    def describe(self) -> str:
        out = []
        for i, (kind, rc, so, se, delay, killed) in enumerate(self.segments):
            d = f"{delay:.3f}s" if delay is not None else "-"
            names = ",".join(f"{c}:{p}" for p, c in killed) if killed else "-"
            out.append(f"== segment {i} ({kind}) exit {rc}, whole job killed after {d}: {names}")
            out.append("-- stdout: " + so[-600:].replace("\n", " | "))
            out.append("-- stderr: " + se[-2000:])
        return "\n".join(out)


def run_job_until_done(runner, store: Path, argv, rng: random.Random, *, kills: int = KILLS,
                       max_delay: float = KILL_DELAY, timeout: float = 180) -> JobRun:
    """`lazarus run -i 1 -- argv`; after each new checkpoint appears in
    `list`, wait a uniform random delay in [0, max_delay] and kill the whole
    job (kill_job); `lazarus restart` after each kill, until `kills` kills
    are done, then let it finish.  Every killed supervisor exits 137, the
    last one 0."""
    start = time.monotonic()
    jr = JobRun()
    proc = runner.start_lz("run", "-d", store, "-i", "1", "--", *argv)
    kind, last_idx = "run", -1
    while True:
        killed, delay = [], None
        if jr.kills < kills:
            if not wait_new_checkpoint(runner, store, last_idx, proc, timeout=120):
                jr.segments.append((kind, proc.wait(timeout=30), proc.stdout, proc.stderr, None, []))
                raise AssertionError(f"{kind}: the job ended before a new checkpoint above {last_idx} "
                                     f"(after {jr.kills} kills)\n{jr.describe()}")
            delay = rng.uniform(0.0, max_delay)
            end = time.monotonic() + delay
            while time.monotonic() < end and proc.poll() is None:
                time.sleep(0.005)
            if proc.poll() is None:
                killed = kill_job(proc)
        rc = proc.wait(timeout=max(timeout - (time.monotonic() - start), 30))
        jr.segments.append((kind, rc, proc.stdout, proc.stderr, delay, killed))
        if not killed:
            break
        assert rc == 137, f"{kind}: supervisor exited {rc} after SIGKILL, want 137\n{jr.describe()}"
        idx = runner.indexes(store)
        assert idx, f"no checkpoint to restart from\n{jr.describe()}"
        last_idx = max(idx)
        proc = runner.start_lz("restart", "-d", store)
        kind = "restart"
    info = jr.describe()
    assert jr.kills == kills, f"the job finished after only {jr.kills} kills\n{info}"
    assert [s[1] for s in jr.segments] == [137] * kills + [0], info
    print(f"run_job_until_done: {jr.kills} kills, {len(jr.segments)} segments, "
          f"{time.monotonic() - start:.1f}s")
    for i, s in enumerate(jr.segments):
        last = (s[2].strip().splitlines() or ["-"])[-1]
        d = f"{s[4]:.3f}s" if s[4] is not None else "-"
        print(f"  segment {i} {s[0]}: exit {s[1]}, kill delay {d}, {len(s[5])} processes killed, "
              f"last line {last!r}")
    return jr


# --------------------------------------------------------------------------
# References and comparisons
# --------------------------------------------------------------------------
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
    lines = []
    for k in sorted(set(got) | set(want)):
        g, w = got.get(k), want.get(k)
        if g != w:
            lines.append(f"  {k}: got {g}, want {w}")
    raise AssertionError("the job's files are not the uninterrupted run's:\n"
                         + "\n".join(lines[:60]) + "\n" + info)


def check_output(jr: JobRun, ref_out: str, start_re: str = r"^start ") -> None:
    """Every line a segment printed is a line of the uninterrupted run (lines
    after the checkpoint come again after a restart), no restart started
    over, the last line is the uninterrupted run's."""
    info = jr.describe()
    ref = set(ref_out.splitlines())
    for i, s in enumerate(jr.segments):
        for line in s[2].splitlines():
            assert line in ref, f"segment {i} printed {line!r}, not in the uninterrupted run\n{info}"
        if i > 0:
            assert not re.search(start_re, s[2], re.M), f"segment {i} started the job over\n{info}"
    assert jr.segments[-1][2].splitlines()[-1:] == ref_out.splitlines()[-1:], info


def own(runner, path: Path) -> None:
    if IS_ROOT:
        for dirpath, dirs, files in os.walk(path):
            for n in [dirpath] + [os.path.join(dirpath, f) for f in dirs + files]:
                os.lchown(n, runner.uid, runner.uid)


# --------------------------------------------------------------------------
# 1. bash running pipelines
# --------------------------------------------------------------------------
def script_against_plain_run(runner, rng, name: str, interpreter: str, args) -> None:
    """programs/NAME run by INTERPRETER with DIR and ARGS: once without Lazarus
    in ref/, then in work/ killed whole and restarted until done; every file of
    work/ and the output as in ref/."""
    script = runner.base / name
    shutil.copy(PROGRAMS_SRC / name, script)
    os.chmod(script, 0o644)
    ref, work = runner.mkdir("ref"), runner.mkdir("work")
    ref_out = plain_run([interpreter, script, ref, *args], runner.base)
    assert re.search(r"^done \w+$", ref_out, re.M), ref_out[-500:]
    store = runner.base / "store"
    jr = run_job_until_done(runner, store, [interpreter, script, work, *args], rng)
    assert_same_files(files_of(work), files_of(ref), jr.describe())
    check_output(jr, ref_out)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_bash_pipelines_whole_job_killed(mode, runner, rng):
    """bash: 120 iterations of awk | sort | uniq -c > out.N (background) and
    awk | sort -n | md5sum > sum.N (subshell), wait, a line >> log; the
    whole job SIGKILLed 5 times at random instants and restarted until done:
    out.*, sum.*, log byte-identical to an uninterrupted run."""
    need(mode)
    script_against_plain_run(runner, rng, "tree_pipeline.sh", "bash", PIPE_ARGS)


# --------------------------------------------------------------------------
# 2. make -j2 with gcc
# --------------------------------------------------------------------------
def gen_project(d: Path, modules: int, funcs: int, seed: int = 7) -> None:
    """A C project: mini.h, main.c and `modules` files of `funcs` generated
    functions each (loops, shifts, switches: real work for gcc -O2), a
    Makefile linking `mini` and running it into result.txt."""
    rng = random.Random(seed)
    hdr = ["#ifndef MINI_H", "#define MINI_H", "#include <stdint.h>",
           "typedef struct { uint64_t a, b; uint32_t v[16]; } state_t;"]
    hdr += [f"uint64_t mod{m}_run(state_t *s, uint64_t seed);" for m in range(modules)]
    hdr.append("#endif")
    (d / "mini.h").write_text("\n".join(hdr) + "\n")
    ops = ["+", "^", "-", "|"]
    for m in range(modules):
        src = ['#include "mini.h"']
        for f in range(funcs):
            src += [f"static uint64_t m{m}_f{f}(state_t *s, uint64_t x)", "{",
                    "    uint64_t acc = x;", "    for (int i = 0; i < 16; i++) {"]
            for _ in range(rng.randrange(6, 12)):
                c, j, op = rng.getrandbits(32) | 1, rng.randrange(16), rng.choice(ops)
                src.append(f"        acc = (acc * {c}u) {op} ((uint64_t)s->v[(i + {j}) & 15] << {rng.randrange(1, 31)});")
                src.append(f"        s->v[(i * {rng.randrange(1, 16)} + {j}) & 15] {op}= (uint32_t)(acc >> {rng.randrange(1, 40)});")
            src += ["        if (acc & 1) s->a += acc; else s->b ^= acc;", "    }", "    switch (acc % 7) {"]
            src += [f"    case {k}: acc += {rng.getrandbits(40)}ull * (s->a | {k + 1}); break;" for k in range(7)]
            src += ["    }", "    return acc;", "}"]
        src += [f"uint64_t mod{m}_run(state_t *s, uint64_t seed)", "{", "    uint64_t x = seed;",
                "    for (int r = 0; r < 200; r++) {"]
        src += [f"        x = m{m}_f{f}(s, x + {f});" for f in range(funcs)]
        src += ["    }", "    return x;", "}"]
        (d / f"mod{m}.c").write_text("\n".join(src) + "\n")
    main = ['#include "mini.h"', "#include <stdio.h>", "#include <string.h>", "int main(void)", "{",
            "    state_t s;", "    memset(&s, 0, sizeof s);",
            "    for (int i = 0; i < 16; i++) s.v[i] = 2654435761u * (i + 1);", "    uint64_t x = 1;"]
    main += [f"    x = mod{m}_run(&s, x);\n    printf(\"mod{m} %016llx\\n\", (unsigned long long)x);"
             for m in range(modules)]
    main += ["    printf(\"total %016llx %016llx\\n\", (unsigned long long)s.a, (unsigned long long)s.b);",
             "    return 0;", "}"]
    (d / "main.c").write_text("\n".join(main) + "\n")
    objs = " ".join([f"mod{m}.o" for m in range(modules)] + ["main.o"])
    (d / "Makefile").write_text(
        "CC = gcc\nCFLAGS = -O2 -Wall\n"
        f"OBJS = {objs}\n\n"
        "all: result.txt\n\n"
        "mini: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n"
        "%.o: %.c mini.h\n\t$(CC) $(CFLAGS) -c -o $@ $<\n\n"
        "result.txt: mini\n\t./mini > $@.tmp && mv $@.tmp $@\n")


@pytest.mark.parametrize("mode", ["root", "user"])
def test_make_j2_whole_job_killed(mode, runner, rng):
    """make -j2 of a generated C project with gcc -O2 (11 objects, a binary,
    its output), the whole job SIGKILLed 5 times at random instants and
    restarted until done: every file of the project directory (sources,
    objects, binary, result.txt) byte-identical to an uninterrupted build in
    the same directory, no temporary file left."""
    need(mode)
    proj = runner.mkdir("proj")
    gen_project(proj, MAKE_MODULES, MAKE_FUNCS)
    own(runner, proj)
    sources = {p.name for p in proj.iterdir()}
    plain_run(["make", "-j2", "-C", proj], runner.base)
    ref = files_of(proj)
    assert {"mini", "result.txt", "main.o"} <= set(ref), sorted(ref)
    # the same absolute directory for the run under Lazarus: only sources
    for p in proj.iterdir():
        if p.name not in sources:
            p.unlink()
    store = runner.base / "store"
    jr = run_job_until_done(runner, store, ["make", "-j2", "-C", proj], rng)
    assert_same_files(files_of(proj), ref, jr.describe())


# --------------------------------------------------------------------------
# 3. Python multiprocessing Pool
# --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["root"])
def test_multiprocessing_pool_whole_job_killed(mode, runner, rng):
    """Python multiprocessing.Pool(2) (forked workers, POSIX semaphores)
    mapping 48 tasks that each write a task file, the parent a log and a
    summary; the whole job SIGKILLed 5 times at random instants and
    restarted until done: every file and the output as uninterrupted."""
    need(mode)
    script_against_plain_run(runner, rng, "tree_mp_pool.py", "/usr/bin/python3", POOL_ARGS)
