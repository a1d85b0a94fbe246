"""Undo saved once per block per interval for the whole job (issue 16, item 5).

Every process of a job keeps its own journal, but the blocks they saved are
known to all of them through a map they share (DIR/files.saved.N,
files/track_shared.c): a block another process saved in the interval is not
saved again, an inode's INODE record is written once, and a child that
records nothing makes no journal.

- `programs/dd_patch_loop.sh` (bash running a `dd` per iteration on a 2 MiB
  image: patches, two processes writing the same block at once, whole
  rewrites that truncate first, cuts) under `lazarus run -i 1`, the whole job
  SIGKILLed at random instants and restarted until done: the image and the
  log byte-identical to an uninterrupted run; and at every kill, from the
  store, each interval kept saved at most the image's 2 MiB (before the map,
  every dd saved the whole image again: it opens the image on its stdout,
  which stdio could write anywhere) [root, user];
- the same loop driven between two `lazarus checkpoint`s: the interval's
  DATA records hold each block once at most, all of them in the journals
  together, an INODE record of the image once; `restart --at` gives the
  image of the checkpoint back exactly, and the maps are removed by the
  restart [root, user];
- reflinks: on a loop-mounted XFS (root, mkfs.xfs from xfsprogs), a job that
  truncates a 16 MiB file to 1 MiB saves the tail as a reflink (files.data
  shares the blocks a reflinked copy outside the job holds, `filefrag`), the rollback brings it back exactly, and a bit
  flipped in the reflinked bytes makes the restart refuse (the checksum is
  of the bytes in files.data) [root only; skipped without xfsprogs].
"""
import hashlib
import os
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import lzformat
import crashload
from conftest import IS_ROOT, PROGRAMS_SRC, kill_job
from crashload import assert_same_files, check_output, files_of, plain_run
from test_tree_programs import need, own

IMAGE = 2 << 20
LOOP_K = "3000"


def setup_dir(d: Path, seed: int = 5) -> None:
    r = random.Random(seed)
    (d / "base.img").write_bytes(r.randbytes(IMAGE))
    for i in range(4):
        (d / f"p{i}").write_bytes(r.randbytes(4096))


def journals(ckdir: Path) -> list:
    """Every files.log of one interval (its directory's and every proc.*/)."""
    return sorted(p for p in ckdir.rglob("files.log") if "files.keep" not in p.parts)


def interval_data(ckdir: Path) -> list:
    """(journal, offset, length, dev, ino) of every DATA record of the interval."""
    out = []
    for log in journals(ckdir):
        for r in lzformat.parse_log(log.read_bytes()).of_type(2):
            out.append((log, r.fixed.offset, r.fixed.length, r.fixed.dev, r.fixed.ino))
    return out


def interval_dirs(store: Path) -> list:
    return sorted(p for p in store.iterdir() if p.is_dir() and p.name.startswith(("ckpt.", "jrnl.")))


def check_undo_bounded(store: Path, img_ino: int, what: str) -> None:
    """Each interval kept saved at most the image's size of the image."""
    for ck in interval_dirs(store):
        data = [d for d in interval_data(ck) if d[4] == img_ino]
        saved = sum(d[2] for d in data)
        if saved <= IMAGE:
            continue
        by_block = {}
        for log, off, n, _, _ in data:
            for b in range(off // 4096, (off + n + 4095) // 4096):
                by_block.setdefault(b, []).append(str(log.relative_to(ck).parent))
        twice = {b: j for b, j in by_block.items() if len(j) > 1}
        raise AssertionError(f"{what}: interval {ck.name} saved {saved} bytes of a {IMAGE}-byte image; "
                             f"{len(twice)} blocks more than once, e.g. {sorted(twice.items())[:6]}; "
                             f"blocks past the image: {sorted(b for b in by_block if b >= IMAGE // 4096)[:10]}")


@pytest.mark.parametrize("mode", ["root", "user"])
def test_dd_loop_whole_job_killed(mode, runner, rng):
    """A bash loop of dd patching one image, killed whole at random instants
    and restarted until done: the files are the uninterrupted run's, and no
    interval saved more than the image."""
    need(mode)
    script = runner.base / "dd_patch_loop.sh"
    shutil.copy(PROGRAMS_SRC / "dd_patch_loop.sh", script)
    os.chmod(script, 0o644)
    ref, work = runner.mkdir("ref"), runner.mkdir("work")
    setup_dir(ref)
    setup_dir(work)
    own(runner, work)
    ref_out = plain_run(["bash", script, ref, LOOP_K], runner.base)
    store = runner.base / "store"
    bounded = []

    orig_indexes = runner.indexes

    def indexes(st, check=True):
        # after every kill (crashload.run_until_done reads the indexes then, with
        # check): the journals of the intervals kept, as the killed job left them
        if check and st == store and (work / "img").exists() and store.exists():
            check_undo_bounded(store, (work / "img").stat().st_ino, "after a kill")
            bounded.append(1)
        return orig_indexes(st, check)

    runner.indexes = indexes
    try:
        jr = crashload.run_until_done(runner, store, ["bash", script, work, LOOP_K], rng, ["all"] * 5, timeout=400)
    finally:
        runner.indexes = orig_indexes
    assert jr.kills == 5, f"the job finished after only {jr.kills} kills\n{jr.describe()}"
    assert bounded
    assert_same_files(files_of(work), files_of(ref), jr.describe())
    check_output(jr, ref_out)
    assert not list(store.glob("files.saved.*")), "the maps of saved blocks outlived the job"


def wait_file(p: Path, proc, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not p.exists():
        assert proc.poll() is None, f"the job ended\n{proc.stdout}\n{proc.stderr}"
        assert time.monotonic() < end, f"no {p}\n{proc.stderr}"
        time.sleep(0.02)


STEPPED = r"""
cd "$1"; ctl=$2
cp base.img img
touch "$ctl/ready"
while [ ! -e "$ctl/go1" ]; do sleep 0.02; done
for n in $(seq 1 60); do
    if [ $((n % 10)) -eq 0 ]; then dd if=base.img of=img bs=64k status=none
    elif [ $((n % 3)) -eq 0 ]; then
        dd if=p1 of=img bs=4096 seek=$((n * 5)) count=1 conv=notrunc status=none &
        dd if=p1 of=img bs=4096 seek=$((n * 5)) count=1 conv=notrunc status=none; wait
    else dd if=p$((n % 4)) of=img bs=4096 seek=$((n * 7 % 512)) count=1 conv=notrunc status=none; fi
done
dd of=img bs=4096 seek=100 count=0 status=none
touch "$ctl/phase2"
while [ ! -e "$ctl/go2" ]; do sleep 0.02; done
"""


def test_stepped_interval_saves_each_block_once(runner):
    """60 dd processes (whole rewrites, pairs writing one block) in one
    interval between two checkpoints: each block of the image is saved once,
    its INODE recorded once, and `restart --at` gives the image back."""
    work, ctl = runner.mkdir("work"), runner.mkdir("ctl")
    setup_dir(work)
    own(runner, work)
    script = runner.base / "stepped.sh"
    script.write_text(STEPPED)
    os.chmod(script, 0o644)
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "bash", script, work, ctl)
    wait_file(ctl / "ready", proc)
    a = runner.checkpoint_when_up(store)
    at_a = hashlib.sha256((work / "img").read_bytes()).hexdigest()
    (ctl / "go1").touch()
    wait_file(ctl / "phase2", proc)
    runner.checkpoint(store)
    ino = (work / "img").stat().st_ino
    ck = store / f"ckpt.{a:06d}"
    data = [d for d in interval_data(ck) if d[4] == ino]
    blocks = {}
    for log, off, n, _, _ in data:
        for b in range(off // 4096, (off + n + 4095) // 4096):
            blocks.setdefault(b, []).append(log)
    twice = {b: logs for b, logs in blocks.items() if len(logs) > 1}
    assert not twice, f"blocks saved more than once in the interval: {sorted(twice)[:10]}"
    assert sorted(blocks) == list(range(IMAGE // 4096)), f"saved blocks {len(blocks)} of {IMAGE // 4096}"
    inodes = [r for log in journals(ck) for r in lzformat.parse_log(log.read_bytes()).of_type(1)
              if r.fixed.ino == ino]
    assert len(inodes) == 1, f"{len(inodes)} INODE records of the image in one interval"
    assert list(store.glob("files.saved.*")), "no map of saved blocks while the job runs"
    # processes that recorded nothing made no journal: far fewer than the 80 dd
    assert len(journals(ck)) < 10, f"{len(journals(ck))} journals for one interval"
    kill_job(proc)
    (ctl / "go1").unlink()
    r = runner.start_lz("restart", "-d", store, "--at", str(a))
    runner.checkpoint_when_up(store)  # the job runs again (it waits for go1)
    assert hashlib.sha256((work / "img").read_bytes()).hexdigest() == at_a, "the image is not the checkpoint's"
    assert not (ctl / "phase2").exists(), "phase2, made after the checkpoint, is still there"
    (ctl / "go1").touch()
    wait_file(ctl / "phase2", r)
    (ctl / "go2").touch()
    assert r.wait(timeout=60) == 0, r.stderr


# --------------------------------------------------------------------------
# Reflinks on a loop-mounted XFS
# --------------------------------------------------------------------------
@pytest.fixture
def xfs(tmp_path):
    if not IS_ROOT:
        pytest.skip("loop-mounting a file system needs root")
    if not shutil.which("mkfs.xfs"):
        pytest.skip("no mkfs.xfs (Debian package xfsprogs)")
    img, mnt = tmp_path / "xfs.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(512 << 20)
    r = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", "-f", str(img)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mkfs.xfs failed: {r.stderr.strip()}")
    r = subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot loop-mount XFS here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def shared_bytes(path: Path) -> int:
    """Bytes of path in extents another file shares (`filefrag -v`: "shared")."""
    r = subprocess.run(["filefrag", "-v", "-b1", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = 0
    for line in r.stdout.splitlines():
        m = re.match(r"\s*\d+:\s*\d+\.\.\s*\d+:\s*\d+\.\.\s*\d+:\s*(\d+):", line)
        if m and "shared" in line:
            out += int(m.group(1))
    return out


TRUNCATE = r"""
cd "$1"; ctl=$2
touch "$ctl/ready"
while [ ! -e "$ctl/go1" ]; do sleep 0.02; done
truncate -s 1M big
dd if=/dev/zero of=big bs=4096 seek=3 count=1 conv=notrunc status=none
touch "$ctl/phase2"
while [ ! -e "$ctl/go2" ]; do sleep 0.02; done
"""


@pytest.mark.parametrize("mode", ["root"])
def test_reflinked_undo_on_xfs(mode, runner, xfs):
    """A 16 MiB file truncated to 1 MiB on XFS: the 15 MiB tail is saved as
    reflinks (files.data shares extents); restart --at gives it back exactly;
    a flipped bit in the reflinked bytes is refused (checksummed as saved)."""
    if not shutil.which("filefrag"):
        pytest.skip("no filefrag (e2fsprogs)")
    work, ctl = xfs / "work", xfs / "ctl"
    work.mkdir()
    ctl.mkdir()
    big = work / "big"
    big.write_bytes(random.Random(3).randbytes(16 << 20))
    os.sync()
    want = hashlib.sha256(big.read_bytes()).hexdigest()
    # a reflink of the file outside the job holds its blocks: a saved range
    # that is a reflink shares them, a copy has blocks of its own
    r = subprocess.run(["cp", "--reflink=always", str(big), str(xfs / "hold")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    script = xfs / "trunc.sh"
    script.write_text(TRUNCATE)
    store = xfs / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "bash", script, work, ctl)
    wait_file(ctl / "ready", proc)
    a = runner.checkpoint_when_up(store)
    (ctl / "go1").touch()
    wait_file(ctl / "phase2", proc)
    runner.checkpoint(store)
    kill_job(proc)
    datas = [p for p in (store / f"ckpt.{a:06d}").rglob("files.data") if p.stat().st_size]
    assert datas, "no saved bytes"
    shared = sum(shared_bytes(p) for p in datas)
    assert shared >= 15 << 20, f"only {shared} bytes of the saved 15 MiB tail are reflinks"
    (ctl / "go1").unlink()
    # damage first: a flipped bit in the reflinked bytes is refused, nothing changes
    d = max(datas, key=lambda p: p.stat().st_size)
    raw = bytearray(d.read_bytes())
    saved = bytes(raw)
    raw[len(raw) // 2] ^= 1
    d.write_bytes(raw)
    before = hashlib.sha256(big.read_bytes()).hexdigest()
    r = runner.lz("restart", "-d", store, "--at", str(a))
    assert r.rc != 0 and "checksum" in r.stderr, r
    assert hashlib.sha256(big.read_bytes()).hexdigest() == before
    d.write_bytes(saved)
    r = runner.start_lz("restart", "-d", store, "--at", str(a))
    runner.checkpoint_when_up(store)
    assert hashlib.sha256(big.read_bytes()).hexdigest() == want, "the file is not the checkpoint's"
    kill_job(r)
