"""Damaged images: `restart` and `verify` print one clear line on stderr,
exit non-zero and change nothing in DIR; an intact store verifies."""
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import lzformat
from conftest import (IS_ROOT, Runner, _user_base, stray_children, ckpt_path, copy_store, kill_program,
                      reap_orphans, snapshot)


def _truncate_half(p):
    os.truncate(p, os.path.getsize(p) // 2)


def _empty(p):
    os.truncate(p, 0)


def _flip(p):
    size = os.path.getsize(p)
    assert size > 0
    with open(p, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0x10]))


FORMAT_VERSION = lzformat.VERSION  # common/format.h LZ_VERSION


def _foreign_version(p):
    m = lzformat.Manifest.load(p)  # checks magic and version
    m.set(m.header, "version", FORMAT_VERSION + 1)
    m.save(p, seal=False)  # only the version changes: the trailer no longer matches either


def _remove(p):
    os.unlink(p)


def frames_of(manifest):
    """(pack id, offset, stored bytes) of every frame a manifest lists."""
    return lzformat.Manifest.load(manifest).frame_places()


def _flip_frame(pack):
    """Flip one bit in the middle of the last frame of pack.B (found through
    B's manifest): the manifest stays intact, the frame's bytes do not."""
    index = int(pack.name.split(".")[1])
    mine = [f for f in frames_of(pack.parent.parent / f"ckpt.{index:06d}" / "manifest") if f[0] == index]
    assert mine, "checkpoint B has no frame in its own pack"
    _, offset, stored = max(mine)
    assert stored > 0 and offset + stored <= os.path.getsize(pack)
    with open(pack, "r+b") as f:
        f.seek(offset + stored // 2)
        b = f.read(1)
        f.seek(offset + stored // 2)
        f.write(bytes([b[0] ^ 0x10]))


# Where a corruption goes: the manifest of the newest checkpoint B, or the
# pack B wrote (DIR/packs/pack.B: frames only B references, B being the
# newest, and every byte of it inside some frame).
def _target(store, index, where):
    if where == "manifest":
        return ckpt_path(store, index) / "manifest"
    return store / "packs" / f"pack.{index:06d}"


CORRUPTIONS = {
    "truncated-manifest": ("manifest", _truncate_half),
    "empty-manifest": ("manifest", _empty),
    "bitflip-manifest": ("manifest", _flip),
    "foreign-version": ("manifest", _foreign_version),
    "truncated-pack": ("pack", _truncate_half),
    "bitflip-pack": ("pack", _flip),
    "bitflip-frame": ("pack", _flip_frame),
    "missing-pack": ("pack", _remove),
}


@pytest.fixture(scope="module")
def pristine(programs, lazarus_bin):
    """Per identity: a store of a killed job with two checkpoints A < B."""
    made = {}
    bases = []

    def get(mode):
        if mode not in made:
            if mode == "user" and IS_ROOT:
                base = _user_base()
            else:
                base = Path(tempfile.mkdtemp(prefix="lazarus-store-"))
            bases.append(base)
            r = Runner(mode, base)
            store = base / "store"
            proc = r.start_lz("run", "-d", store, "-i", "0", "--", programs.heap_mutator, "16", "100000")
            proc.wait_for_output(r"^start ", timeout=60)
            a = r.checkpoint(store)
            b = r.checkpoint(store)
            assert a < b
            kill_program(proc, "heap_mutator")
            assert r.indexes(store) == [a, b]
            # B stored pages of its own (the mutator rewrites all of them)
            assert (store / "packs" / f"pack.{b:06d}").stat().st_size > 0
            made[mode] = (store, a, b)
        return made[mode]

    yield get
    for b in bases:
        shutil.rmtree(b, ignore_errors=True)


def test_intact_store_verifies(runner, pristine):
    src, a, b = pristine(runner.mode)
    store = runner.base / "store"
    copy_store(src, store)
    before = snapshot(store)
    for args in ([], ["--at", str(a)], ["--at", str(b)]):
        r = runner.lz("verify", "-d", store, *args, timeout=120)
        assert r.rc == 0, str(r)
    assert snapshot(store) == before


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupt_image_refused(kind, runner, pristine):
    src, a, b = pristine(runner.mode)
    store = runner.base / "store"
    copy_store(src, store)
    where, corrupt = CORRUPTIONS[kind]
    corrupt(_target(store, b, where))
    before = snapshot(store)

    for cmd, extra in (("verify", []), ("verify", ["--at", str(b)]),
                       ("restart", []), ("restart", ["--at", str(b)])):
        r = runner.lz(cmd, "-d", store, *extra, timeout=120)
        assert r.rc != 0, f"{kind}: accepted\n{r}"
        lines = r.stderr_lines()
        assert len(lines) == 1, f"{kind}: want exactly one line on stderr\n{r}"
        if kind == "foreign-version":
            assert "version" in lines[0].lower(), f"the line should say it is the version\n{r}"
            assert re.search(rf"\b{FORMAT_VERSION + 1}\b", lines[0]) and re.search(rf"\b{FORMAT_VERSION}\b", lines[0]), (
                f"the line should name the image's version ({FORMAT_VERSION + 1}) and the one this build reads ({FORMAT_VERSION})\n{r}")
        if cmd == "restart":
            assert r.stdout == "", f"{kind}: the program must not have run\n{r}"
            deadline = time.monotonic() + 3
            while stray_children() and time.monotonic() < deadline:
                reap_orphans()
                time.sleep(0.05)
            assert stray_children() == [], f"{kind}: restart left processes behind"
        assert snapshot(store) == before, f"{kind}: `{cmd}` changed DIR"

    # the older checkpoint is still intact on its own
    r = runner.lz("verify", "-d", store, "--at", str(a), timeout=120)
    assert r.rc == 0, f"intact checkpoint {a} next to a damaged one\n{r}"
    assert snapshot(store) == before
