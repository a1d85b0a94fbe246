"""Phase 1 of a restart checks every frame it will map (issue 15): a pack of
the newest checkpoint with one byte flipped inside a frame its extents
reference, a truncated pack, a deleted pack: `lazarus restart` refuses with
one line naming the pack, before any file is rolled back, so that the user's
files and the store stay byte-identical; an intact store still restarts.
As root and as an ordinary user."""
import os
import time
from pathlib import Path

import pytest

import lzformat
from conftest import ckpt_path, stray_children, find_program, kill_program, reap_orphans, snapshot

# A program that keeps changing a file and its memory: what a rollback undoes.
PROGRAM = r'''
import os, sys, time
work = sys.argv[1]
heap = bytearray(os.urandom(8 << 20))  # random: stored as is, frames of its own
log = open(os.path.join(work, "log.txt"), "a")
print("start", flush=True)
n = 0
while True:
    n += 1
    for k in range(64):  # pages changed between checkpoints: each one stores new frames
        heap[(n * 64 + k) * 4096 % len(heap)] ^= 0xFF
    log.write(f"line {n}\n")
    log.flush()
    if n % 20 == 0:
        print(f"tick {n}", flush=True)
    time.sleep(0.005)
'''

def referenced_frames(manifest: Path):
    """(pack id, offset, stored) of every frame an extent of the manifest uses."""
    return lzformat.Manifest.load(manifest).referenced_frames()


def _job(runner):
    """A killed job with two checkpoints A < B whose program changed its file
    after B: (store, work directory, B)."""
    prog = runner.base / "changer.py"
    prog.write_text(PROGRAM)
    os.chmod(prog, 0o644)
    work = runner.mkdir("work")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", prog, work)
    proc.wait_for_output(r"^start", timeout=60)
    a = runner.checkpoint(store)
    b = runner.checkpoint(store)
    assert a < b
    size = (work / "log.txt").stat().st_size
    deadline = time.monotonic() + 30
    while (work / "log.txt").stat().st_size <= size + 100:  # changed after B: a rollback would undo it
        assert time.monotonic() < deadline, f"the program stopped writing\n{proc.stderr}"
        time.sleep(0.02)
    kill_program(proc, "python3")
    assert (store / "packs" / f"pack.{b:06d}").stat().st_size > 0
    return store, work, b


def _flip(store, b):
    mine = [f for f in referenced_frames(ckpt_path(store, b) / "manifest") if f[0] == b]
    assert mine, "checkpoint B references no frame of its own pack"
    _, offset, stored = max(mine, key=lambda f: f[2])
    _flip_in(store / "packs" / f"pack.{b:06d}", offset, stored)


def _flip_in(pack, offset, stored):
    """One bit flipped in the middle of the frame stored at pack[offset:offset+stored]."""
    with open(pack, "r+b") as f:
        f.seek(offset + stored // 2)
        c = f.read(1)
        f.seek(offset + stored // 2)
        f.write(bytes([c[0] ^ 0x01]))


def _truncate(store, b):
    pack = store / "packs" / f"pack.{b:06d}"
    os.truncate(pack, pack.stat().st_size // 2)


def _remove(store, b):
    os.unlink(store / "packs" / f"pack.{b:06d}")


CORRUPTIONS = {"bitflip": _flip, "truncated": _truncate, "missing": _remove}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_damaged_frame_refused_before_rollback(kind, runner):
    store, work, b = _job(runner)
    CORRUPTIONS[kind](store, b)
    files_before, store_before = snapshot(work), snapshot(store)

    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc != 0, f"{kind}: accepted\n{r}"
    assert r.stdout == "", f"{kind}: the program must not have run\n{r}"
    lines = r.stderr_lines()
    assert len(lines) == 1, f"{kind}: want exactly one line on stderr\n{r}"
    assert f"pack.{b:06d}" in lines[0], f"{kind}: the line must name the pack\n{r}"
    print(lines[0])
    deadline = time.monotonic() + 3
    while stray_children() and time.monotonic() < deadline:
        reap_orphans()
        time.sleep(0.05)
    assert stray_children() == [], f"{kind}: restart left processes behind"
    assert snapshot(work) == files_before, f"{kind}: the user's files were changed (rolled back)\n{r}"
    assert snapshot(store) == store_before, f"{kind}: `restart` changed DIR\n{r}"


def test_verify_checks_stored_bytes(runner):
    """`verify` checks a frame's stored bytes against their checksum, as the
    restart of several processes does before its rollback, not only the
    bytes they expand to: a frame whose recorded stored checksum no longer
    matches (the manifest resealed) is damage, naming the pack."""
    store, work, b = _job(runner)
    path = ckpt_path(store, b) / "manifest"
    m = lzformat.Manifest.load(path)
    ids = m.pack_ids()
    used = {x.frame for x in m.extents if x.frame != lzformat.FRAME_ZERO}
    mine = [i for i in used if ids[m.frames[i].pack] == b]
    assert mine, "checkpoint B references no frame of its own pack"
    f = m.frames[max(mine, key=lambda i: m.frames[i].stored)]
    m.set(f, "sxxh3", f.sxxh3 ^ 1)
    m.save(path)
    v = runner.lz("verify", "-d", store, "--at", b, timeout=120)
    assert v.rc == 244 and f"pack.{b:06d}" in v.stderr and "fails its checksum" in v.stderr, str(v)


def test_intact_store_restarts(runner):
    store, work, b = _job(runner)
    size = (work / "log.txt").stat().st_size
    proc = runner.start_lz("restart", "-d", store)
    proc.wait_for_output(r"^tick", timeout=60)
    # rolled back to B, then written on from there
    lines = (work / "log.txt").read_text().splitlines()
    assert lines == [f"line {n}" for n in range(1, len(lines) + 1)], "the file is not one run of lines"
    assert find_program(proc.pid, "python3") is not None
    kill_program(proc, "python3")
    assert size > 0


# A program whose memory maps files the job changes after the checkpoint: a
# private mapping with 3 MiB of its 4 MiB rewritten in memory (stored as
# extents of a file region; the rest reads as the file) and a shared one.
MAPPER = r'''
import hashlib, mmap, os, sys, time
os.chdir(sys.argv[1])
with open("data.bin", "wb") as f:
    f.write(bytes(range(256)) * (4 << 12))
with open("shared.bin", "wb") as f:
    f.write(b"S" * (1 << 20))
priv = mmap.mmap(os.open("data.bin", os.O_RDWR), 4 << 20, access=mmap.ACCESS_COPY)
priv[0:3 << 20] = os.urandom(3 << 20)
shm = mmap.mmap(os.open("shared.bin", os.O_RDWR), 1 << 20)
shm[0:5] = b"hello"
want = hashlib.sha256(priv[:]).digest(), hashlib.sha256(shm[:]).digest()
print("ready", flush=True)
while not os.path.exists("go"):
    time.sleep(0.01)
print("view", hashlib.sha256(priv[:]).digest() == want[0], hashlib.sha256(shm[:]).digest() == want[1], flush=True)
with open("data.new", "wb") as f:  # after the checkpoint: data.bin replaced, shared.bin rewritten
    f.write(b"N" * (4 << 20))
os.rename("data.new", "data.bin")
shm[:] = b"X" * (1 << 20)
shm.flush()
print("changed", flush=True)
while True:
    time.sleep(1)
'''


def _mapper_job(runner):
    """A killed job whose files under its mappings changed after its one
    checkpoint: (store, work, checkpoint index, original data.bin bytes)."""
    prog = runner.base / "mapper.py"
    prog.write_text(MAPPER)
    os.chmod(prog, 0o644)
    work = runner.mkdir("work")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", prog, work)
    proc.wait_for_output(r"^ready", timeout=60)
    original = (work / "data.bin").read_bytes()
    n = runner.checkpoint(store)
    (work / "go").write_text("")
    proc.wait_for_output(r"^changed", timeout=60)
    assert "view True True" in proc.stdout, f"the program's own check failed before any restart\n{proc.stdout}"
    kill_program(proc, "python3")
    assert (work / "data.bin").read_bytes() == b"N" * (4 << 20)
    return store, work, n, original


def test_file_mappings_mapped_after_the_rollback(runner):
    """The restorer fills the anonymous memory before the files are rolled
    back, and maps files only after: data.bin replaced by a new file and
    shared.bin rewritten after the checkpoint come back as they were, in the
    files and in the program's mappings."""
    store, work, n, original = _mapper_job(runner)
    proc = runner.start_lz("restart", "-d", store)
    proc.wait_for_output(r"^view", timeout=60)
    assert "view True True" in proc.stdout, f"the program's mappings are not the checkpoint's\n{proc.stdout}\n{proc.stderr}"
    proc.wait_for_output(r"^changed", timeout=60)  # and it replaced data.bin again
    kill_program(proc, "python3")
    # from outside: the rollback gave data.bin's old content back (before the program replaced it again)
    assert b"N" * 16 in (work / "data.bin").read_bytes()[:16]


def test_damaged_frame_of_a_file_mapping_refused_before_rollback(runner):
    """A frame only a file mapping's extents use (filled after the rollback)
    is proven before it: damaged, the restart refuses with one line and
    changes nothing."""
    store, work, n, _ = _mapper_job(runner)
    m = lzformat.Manifest.load(ckpt_path(store, n) / "manifest")
    ids, frames, extents = m.pack_ids(), m.frames, m.extents
    users = {}  # frame -> is every extent using it in data.bin's mapping
    for r in m.regions:
        in_file = m.string(r.path).endswith("/data.bin")
        for x in extents[r.first_extent:r.first_extent + r.nextents]:
            if x.frame != lzformat.FRAME_ZERO:
                users[x.frame] = users.get(x.frame, True) and in_file
    mine = [k for k, only in users.items() if only]
    assert mine, "no frame is used by data.bin's mapping alone"
    f = frames[mine[0]]
    pack = store / "packs" / f"pack.{ids[f.pack]:06d}"
    _flip_in(pack, f.offset, f.stored)
    files_before, store_before = snapshot(work), snapshot(store)
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc != 0, f"accepted\n{r}"
    lines = r.stderr_lines()
    assert len(lines) == 1 and pack.name in lines[0] and "nothing was changed" in lines[0], str(r)
    deadline = time.monotonic() + 3
    while stray_children() and time.monotonic() < deadline:
        reap_orphans()
        time.sleep(0.05)
    assert snapshot(work) == files_before, f"the user's files were changed (rolled back)\n{r}"
    assert snapshot(store) == store_before, f"`restart` changed DIR\n{r}"
