"""Stores into a writable MAP_SHARED file mapping (issue 16, item 6): the
undo of an interval holds the pages stored into, not the whole mapping, and
the file comes back exactly.

programs/shmap_job.c XORs a few pages per step into an 8 MiB file mapped
MAP_SHARED (the result depends on what was there), msyncs, pread()s straight
into the mapping (the kernel writes), lets forked children store through the
inherited mapping, grows the file (ftruncate, then mremap or munmap + mmap)
and shrinks it, and checkpoints itself every EVERY steps through the C API,
printing a digest of the file at each checkpoint.  A run without Lazarus
gives the digest of every step and of the end.

- killed at random instants (-i 0: the program's own checkpoints) and
  restarted until done: every restart's first digest is the uninterrupted
  run's at that step, the end is byte-identical, and no interval's undo (the
  DATA records of its journals, the program's and its children's: store
  sizes, not time) exceeds what the steps of an interval can store into
  (before: the whole mapping, 8 MiB and more, per interval);
- an uninterrupted run, then `restart --force --at N` of several checkpoints,
  newest first: the digest at N, then the same end;
- a store into the file through a mapping of another process, after the job
  was killed: `restart` refuses, naming the file, and changes nothing (and
  the intervals before the kill kept their bound).
"""
from __future__ import annotations

import hashlib
import math
import mmap
import os
import random
import re
from pathlib import Path

import pytest

import lzformat as F
from conftest import INCLUDE, IS_ROOT, LIBDIR, _compile, ckpt_dirs, ckpt_path, kill_program, run_until_done

STEPS, PAGES, EVERY = 1000, 3, 20
SIZE = 8 << 20


@pytest.fixture(scope="module")
def prog(programs, lazarus_bin):
    return _compile("shmap_job", programs.dir,
                    [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}"])


def make_files(runner, name: str) -> Path:
    work = runner.mkdir(name)
    r = random.Random(16)
    for fn, n in (("f", SIZE), ("src", 256 << 10)):
        p = work / fn
        p.write_bytes(r.randbytes(n))
        if IS_ROOT:
            os.chown(p, runner.uid, runner.uid)
    return work


def argv(prog, work: Path):
    return [prog, work / "f", work / "src", STEPS, PAGES, EVERY]


_plain: dict = {}


def plain_run(runner, prog) -> dict:
    """Digests per step and the end of a run without Lazarus."""
    if "out" not in _plain:
        work = make_files(runner, "plain")
        r = runner.run(argv(prog, work), timeout=120)
        assert r.rc == 0, str(r)
        _plain["out"] = r.stdout
        _plain["file"] = hashlib.sha256((work / "f").read_bytes()).hexdigest()
    return _plain


def digests(out: str) -> dict:
    return {int(s): h for s, h in re.findall(r"^ckpt (\d+) \S+ ([0-9a-f]{16})$", out, re.M)}


def undo_bytes(jdir: Path) -> int:
    """The bytes the DATA records of an interval's journals point at (the
    directory's and every proc.*/ one's)."""
    total = 0
    for root, dirs, files in os.walk(jdir):
        if "files.log" in files:
            log = F.load_log(Path(root) / "files.log")
            total += sum(r.fixed.length for r in log.of_type(F.FJ_DATA))
    return total


def undo_bound() -> int:
    """What the steps of one interval can store into, in pages: PAGES per
    step, 2 read into per 11 steps, 2 by a child per 13, 3 cut per 40."""
    pages = EVERY * PAGES + 2 * math.ceil(EVERY / 11) + 2 * math.ceil(EVERY / 13) + 3 * math.ceil(EVERY / 40)
    return pages * 4096


def check_undo(store: Path, least: int = STEPS // EVERY - 1) -> None:
    per = {n: undo_bytes(ckpt_path(store, n)) for n in ckpt_dirs(store)}
    print("undo bytes per interval:", per, "bound", undo_bound())
    assert len(per) >= least, per
    over = {n: b for n, b in per.items() if b > 1.2 * undo_bound()}
    assert not over, f"intervals with more undo than 1.2x what their steps can store into ({undo_bound()} B): {over}"
    assert sum(per.values()) >= 4096 * len(per) // 2, f"hardly any undo recorded: {per}"


def test_killed_at_random_instants(runner, prog, rng):
    want = plain_run(runner, prog)
    work = make_files(runner, "work")
    store = runner.base / "store"
    kr = run_until_done(runner, store, argv(prog, work), rng, kills=5, interval=0, max_delay=0.3, comm="shmap_job",
                        run_opts=("-k", "1000"), done_re=r"^done ")
    ref = digests(want["out"])
    restarts = 0
    for seg in kr.segments:
        for s, h in digests(seg.stdout).items():
            assert h == ref[s], f"step {s}: digest {h}, the uninterrupted run's {ref[s]}\n{kr.describe()}"
        restarts += len(re.findall(r"^ckpt \d+ R\d+ ", seg.stdout, re.M))
    assert restarts >= 1, kr.describe()
    assert kr.last_line("done ") == want["out"].strip().splitlines()[-1]
    assert hashlib.sha256((work / "f").read_bytes()).hexdigest() == want["file"]
    check_undo(store)


def test_restart_at_each(runner, prog):
    want = plain_run(runner, prog)
    ref = digests(want["out"])
    work = make_files(runner, "work")
    store = runner.base / "store"
    r = runner.lz("run", "-d", store, "-i", "0", "-k", "1000", "--", *argv(prog, work), timeout=180)
    assert r.rc == 0, str(r)
    assert r.stdout.strip().splitlines()[-1] == want["out"].strip().splitlines()[-1]
    check_undo(store)
    idx = ckpt_dirs(store)
    for n in sorted({idx[-1], idx[-4], idx[len(idx) // 2]}, reverse=True):
        step = EVERY * n - 1  # the n-th checkpoint comes after step EVERY*n-1
        r = runner.lz("restart", "-d", store, "--force", "--at", n, timeout=180)
        assert r.rc == 0, str(r)
        first = r.stdout.splitlines()[0]
        assert first == f"ckpt {step} R{n} {ref[step]}", f"restart at {n}: {first!r}, want digest {ref[step]}\n{r}"
        assert r.stdout.strip().splitlines()[-1] == want["out"].strip().splitlines()[-1], str(r)
        assert hashlib.sha256((work / "f").read_bytes()).hexdigest() == want["file"]


def test_outside_store_after_stop(runner, prog):
    work = make_files(runner, "work")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "-k", "100", "--", *argv(prog, work))
    proc.wait_for_output(r"ckpt 99 5 ", timeout=60)  # (interval 4 stored into the file: a rollback to 4 touches it)
    kill_program(proc, "shmap_job")
    check_undo(store, least=5)
    with open(work / "f", "r+b") as fh:  # another process stores into the file
        m = mmap.mmap(fh.fileno(), 0)
        m[5000:5004] = b"XXXX"
        m.flush()
        m.close()
    before = hashlib.sha256((work / "f").read_bytes()).hexdigest()
    r = runner.lz("restart", "-d", store, "--at", "4", timeout=60)
    assert r.rc != 0 and len(r.stderr_lines()) == 1, str(r)
    assert "changed outside the job" in r.stderr and str(work / "f") in r.stderr, str(r)
    assert hashlib.sha256((work / "f").read_bytes()).hexdigest() == before
