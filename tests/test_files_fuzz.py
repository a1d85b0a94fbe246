"""Random sequences of file operations (create, write, append, pwrite,
truncate, O_TRUNC, buffered overwrite, unlink, rename of files and
directories, mkdir/rmdir, symlink, hard link, chmod, utime) with a checkpoint
every few steps: a restart to each checkpoint, newest to oldest, finds the
work tree exactly as it was at that checkpoint -- as the program saw it, and
as the test saw it from outside the job while the program waited right after
the checkpoint (paths, types, whole st_mode, owner, link count, which names
are one file, sizes, sha256, modification times of files, symlinks and
directories, the work directory itself included, symlink targets), so that an
attribute the program does not look at can fail it too."""
import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from conftest import LAZARUS, LIBDIR, REPO

PROG = REPO / "tests" / "programs" / "fs_fuzz.py"


def parse(out, tag):
    snaps = {}
    out = out[:out.rfind("\n") + 1]  # whole lines only: the program may be printing one
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


def outside_snapshot(top: Path) -> dict:
    """The tree below top (top itself as '.') seen by the test: lstat of
    every entry, contents hashed, symlinks read, hard links grouped."""
    out, by_inode = {}, {}
    entries = [(".", top)]
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            p = Path(root) / n
            entries.append((str(p.relative_to(top)), p))
    for rel, p in entries:
        st = p.lstat()
        e = {"mode": oct(st.st_mode), "uid": st.st_uid, "gid": st.st_gid, "nlink": st.st_nlink,
             "mtime": st.st_mtime_ns}
        if stat.S_ISREG(st.st_mode):
            e["size"] = st.st_size
            e["sha"] = hashlib.sha256(p.read_bytes()).hexdigest()
            by_inode.setdefault((st.st_dev, st.st_ino), []).append(rel)
        elif stat.S_ISLNK(st.st_mode):
            e["target"] = os.readlink(p)
        out[rel] = e
    for names in by_inode.values():  # which names are one file (inode numbers may differ)
        if len(names) > 1:
            for n in names:
                out[n]["links"] = sorted(names)
    return out


def run_with_outside_snapshots(runner, store, seed, timeout=120):
    """The fuzz job under `lazarus run`; at each checkpoint (the program
    waits for go.N) the outside snapshot of the work tree.  Returns (the
    supervisor's exit status, its stdout, {index: outside snapshot})."""
    proc = runner.start_lz("run", "-d", store, "-i", "0", "-k", "10", "--",
                           "/usr/bin/python3", PROG, LIBDIR / "liblazarus.so", str(seed), "240", "40", "wait")
    outside = {}
    deadline = time.monotonic() + timeout
    try:
        while True:
            done = proc.poll() is not None
            for idx in sorted(set(parse(proc.stdout, "SNAP")) - set(outside)):
                outside[idx] = outside_snapshot(runner.base / "w")
                runner.touch(runner.base / f"go.{idx}")
            if done:
                break
            assert time.monotonic() < deadline, f"fuzz job not done after {timeout}s\n{proc.stderr[-2000:]}"
            time.sleep(0.002)
        rc = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    return rc, proc.stdout, proc.stderr, outside


@pytest.mark.parametrize("seed", list(range(1, 21)))
def test_random_operations_roll_back_to_every_checkpoint(runner, seed):
    store = runner.base / "st"
    rc, out, err, outside = run_with_outside_snapshots(runner, store, seed)
    assert rc == 137, f"exit {rc}\n{out[-2000:]}\n{err[-2000:]}"
    snaps = parse(out, "SNAP")
    assert len(snaps) == 6, out
    assert sorted(outside) == sorted(snaps)
    for idx in snaps:  # the two views of one moment agree
        mine = {f"w/{p}": e for p, e in outside[idx].items() if p != "."}
        assert set(mine) == set(snaps[idx]), f"checkpoint {idx}: the program and the test see other paths"
        assert all(mine[p].get("sha") == snaps[idx][p].get("sha") for p in mine), f"checkpoint {idx}: contents differ"
    for idx in sorted(snaps, reverse=True):
        # --force: the program ends on its own, and a finished job's restart is refused otherwise
        b = runner.lz("restart", "-d", store, "--at", str(idx), "--force", timeout=120)
        assert b.rc == 0, str(b)
        back = parse(b.stdout, "BACK")
        assert list(back) == [idx], str(b)
        assert back[idx] == snaps[idx], f"seed {seed}, checkpoint {idx}:\n" + differences(snaps[idx], back[idx])
        now = outside_snapshot(runner.base / "w")
        assert now == outside[idx], (f"seed {seed}, checkpoint {idx}, seen from outside:\n"
                                     + differences(outside[idx], now))
        assert runner.indexes(store) == sorted(i for i in snaps if i <= idx)
