"""Random sequences of file operations (create, write, append, pwrite,
truncate, O_TRUNC, buffered overwrite, unlink, rename of files and
directories, mkdir/rmdir, symlink, hard link, chmod, utime) with a checkpoint
every few steps: a restart to each checkpoint, newest to oldest, finds the
work tree exactly as the program saw it at that checkpoint."""
import json

import pytest

from conftest import LAZARUS, LIBDIR, REPO

PROG = REPO / "tests" / "programs" / "fs_fuzz.py"


def parse(out, tag):
    snaps = {}
    for line in out.splitlines():
        if line.startswith(tag + " "):
            _, idx, js = line.split(" ", 2)
            snaps[int(idx)] = json.loads(js)
    return snaps


def differences(want, got):
    lines = []
    for p in sorted(set(want) | set(got)):
        if want.get(p) != got.get(p):
            lines.append(f"{p}: at checkpoint {want.get(p)} now {got.get(p)}")
    return "\n".join(lines[:20])


@pytest.mark.parametrize("seed", list(range(1, 21)))
def test_random_operations_roll_back_to_every_checkpoint(runner, seed):
    store = runner.base / "st"
    r = runner.run([LAZARUS, "run", "-d", store, "-i", "0", "-k", "10", "--",
                    "/usr/bin/python3", PROG, LIBDIR / "liblazarus.so", str(seed), "240", "40"], timeout=120)
    assert r.rc == 137, str(r)
    snaps = parse(r.stdout, "SNAP")
    assert len(snaps) == 6, str(r)
    for idx in sorted(snaps, reverse=True):
        b = runner.lz("restart", "-d", store, "--at", str(idx), timeout=120)
        assert b.rc == 0, str(b)
        back = parse(b.stdout, "BACK")
        assert list(back) == [idx], str(b)
        assert back[idx] == snaps[idx], f"seed {seed}, checkpoint {idx}:\n" + differences(snaps[idx], back[idx])
        assert runner.indexes(store) == sorted(i for i in snaps if i <= idx)

