"""files.data filled through a shared mapping (issue 16: the undo of random
overwrites; files/track_data.c).

With process durability the old bytes of a block are read straight into a
window of files.data mapped shared, whose blocks are allocated and whose
pages are made writable ahead of use; the DATA record pointing at them is
written after them.  What this must keep true:

- a program overwriting random 4 KiB blocks of a 64 MiB file, a forked child
  overwriting others in the same intervals (its own journal: the parent's
  window must not be written by it), under `-k 2` (dropped journals' files.data
  recycled, stale bytes past the records), the child going on in a new image
  after an exec (the same journal, after a window the image before allocated
  ahead), the whole job SIGKILLed at a
  random instant while it saves (a window half used, pages made writable
  ahead and not yet used): `restart --at` each kept checkpoint gives the
  file of that checkpoint back exactly, seen by the program and from outside
  [root, user];
- a process that ends normally (also after an exec) leaves its files.data no
  longer than the bytes its records use (the window allocated ahead is cut
  off), and a whole
  job that finished restarts from its first checkpoint with `--force`
  exactly [root, user].
"""
import hashlib
import random
import re
import time
from pathlib import Path

import pytest

import lzformat
from conftest import LIBDIR, SEED, kill_job

PY = "/usr/bin/python3"
BLOCKS = 16384  # 64 MiB

EXECED = ("import os, random, sys\n"
          "fd = os.open(sys.argv[1], os.O_RDWR)\n"
          "r = random.Random(int(sys.argv[3]) + 7)\n"
          "for _ in range(20):\n"
          "    os.pwrite(fd, r.randbytes(4096), r.randrange(int(sys.argv[2])) * 4096)\n")

PROG = r'''
import ctypes, hashlib, os, random, signal, sys
EXECED = %r
lib = ctypes.CDLL(sys.argv[1])
lib.lazarus_checkpoint.argtypes = [ctypes.POINTER(ctypes.c_ulonglong)]
path, nblocks, rounds, seed = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
fd = os.open(path, os.O_RDWR)
rnd = random.Random(seed)
def digest():
    return hashlib.sha256(os.pread(fd, nblocks * 4096, 0)).hexdigest()
def overwrite(n, r):
    for _ in range(n):
        os.pwrite(fd, r.randbytes(4096), r.randrange(nblocks) * 4096)
for k in range(rounds):
    idx = ctypes.c_ulonglong(0)
    r = lib.lazarus_checkpoint(ctypes.byref(idx))
    print(("RESTORED" if r == 2 else "SNAP"), idx.value, digest(), flush=True)
    if r == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    # a child saves into a journal of its own, in the same interval, while the
    # parent saves (which has saved a few blocks already: its window is mapped)
    overwrite(8, rnd)
    pid = os.fork()
    if pid == 0:
        overwrite(300 + 50 * k, random.Random(seed * 100 + k))
        # the same process goes on in a new image, with the same journal (after
        # the bytes its records use, a window allocated ahead past them)
        os.execv(sys.executable, [sys.executable, "-c", EXECED, path, str(nblocks), str(seed * 100 + k)])
    overwrite(nblocks // 3, rnd)
    os.waitpid(pid, 0)
    overwrite(100, rnd)
print("GO", flush=True)
while len(sys.argv) > 6:   # saving until killed
    overwrite(64, rnd)
'''


def start(runner, name, seed, rounds, *, until_killed):
    work = runner.mkdir(name)
    big = work / "big"
    big.write_bytes(random.Random(seed).randbytes(BLOCKS * 4096))
    runner.touch(big)  # (owned by the runner's identity)
    big.chmod(0o666)
    prog = work / "prog.py"
    prog.write_text(PROG % EXECED)
    store = runner.base / f"store-{name}"
    args = [PY, "-B", prog, LIBDIR / "liblazarus.so", big, BLOCKS, rounds, seed] + (["forever"] if until_killed else [])
    return big, store, runner.start_lz("run", "-d", store, "-i", "0", "-k", "2", "--", *args)


def snaps_of(out: str) -> dict:
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^SNAP (\d+) (\w+)", out, re.M)}


def restart_each(runner, store: Path, big: Path, snaps: dict, kept: list, force=()):
    """restart --at every kept checkpoint, newest first: the program sees the
    file of that checkpoint, and so does everyone else."""
    for i in reversed(kept):
        r = runner.lz("restart", "-d", store, "--at", str(i), *force, timeout=120)
        m = re.search(r"^RESTORED (\d+) (\w+)", r.stdout, re.M)
        assert r.rc == 137 and m, f"restart --at {i}\n{r}"
        assert (int(m.group(1)), m.group(2)) == (i, snaps[i]), f"restart --at {i}: other file contents"
        assert hashlib.sha256(big.read_bytes()).hexdigest() == snaps[i], f"restart --at {i}: the file differs"


def test_killed_while_saving(runner):
    """The whole job killed at a random instant of its saving (a window half
    used, recycled files.data, a child's journal beside): every kept
    checkpoint rolls back exactly."""
    rng = random.Random(SEED + 16)
    for attempt in range(2):
        big, store, proc = start(runner, f"kill{attempt}", 40 + attempt, 4, until_killed=True)
        deadline = time.monotonic() + 120
        while "GO" not in proc.stdout and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "GO" in proc.stdout, f"the program did not get going\n{proc.stdout}\n{proc.stderr}"
        delay = rng.uniform(0.05, 0.6)
        print(f"seed {SEED}: killed {delay:.3f} s into the last interval")
        time.sleep(delay)
        kill_job(proc)
        snaps = snaps_of(proc.stdout)
        kept = runner.indexes(store)
        assert kept == sorted(snaps)[-2:], f"list shows {kept}, the program took {sorted(snaps)}"
        restart_each(runner, store, big, snaps, kept)


def test_finished_job_files_data_cut(runner):
    """Processes that end normally cut their files.data to the bytes their
    records use (the window allocated ahead goes); the job restarts from
    every kept checkpoint exactly (--force: it finished)."""
    big, store, proc = start(runner, "done", 7, 3, until_killed=False)
    assert proc.wait(timeout=180) == 0, proc.stderr
    snaps = snaps_of(proc.stdout)
    kept = runner.indexes(store)
    assert kept == sorted(snaps)[-2:], f"list shows {kept}"
    for log in sorted(store.rglob("files.log")):
        if "files.keep" in log.parts:
            continue
        data = log.parent / "files.data"
        if not data.exists():
            continue
        used = max((r.fixed.data_off + ((r.fixed.length + 4095) & ~4095)
                    for r in lzformat.parse_log(log.read_bytes()).of_type(2)), default=0)
        size = data.stat().st_size
        # the program's own journal may sit in a recycled, longer spare
        if log.parent.name.startswith("proc."):
            assert size == used, f"{data.relative_to(store)}: {size} bytes, its records use {used}"
        assert size >= used, f"{data.relative_to(store)}: {size} bytes, its records use {used}"
    restart_each(runner, store, big, snaps, kept, force=("--force",))
