"""File rollback covers every process of the job, not only its program.

programs/fs_children.c checkpoints itself (C API) between actions that change
files from other processes: forked children, children that exec /bin/sh
(dash, coreutils: dynamic programs that the runtime reaches through
LD_PRELOAD and that take the journal over, LAZARUS_FJ), vfork + exec,
posix_spawn, grandchildren.  Every child is waited for before the next
checkpoint (a checkpoint with a live child is refused).  The test snapshots
the work tree at each checkpoint, SIGKILLs the job, and `lazarus restart --at
N` for each N, newest first: the tree (types, modes, sizes, contents, mtimes)
must equal the snapshot of N byte for byte.  Also: two children writing the
same block one after the other (the first record by stamp wins, across
journals), a block saved by a child after another appended (only bytes that
existed at N come back), `lazarus diff` and `lazarus list` counting the
children's journals, and the proc.<pid>/ journals being emptied by a restart.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from conftest import INCLUDE, LIBDIR, _compile, kill_program


@pytest.fixture(scope="module")
def prog(programs, lazarus_bin):
    return _compile("fs_children", programs.dir,
                    [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}"])


def tree(work: Path) -> dict:
    """Every path below work: type, permission bits, size, sha256, mtime."""
    out = {}
    for root, dirs, files in os.walk(work):
        for name in dirs + files:
            p = Path(root) / name
            st = p.lstat()
            rel = str(p.relative_to(work))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p), st.st_mtime_ns)
            elif p.is_dir():
                out[rel] = ("dir", oct(st.st_mode & 0o7777), st.st_mtime_ns)
            else:
                out[rel] = ("file", oct(st.st_mode & 0o7777), st.st_size,
                            hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns)
    st = work.stat()
    out["."] = ("dir", oct(st.st_mode & 0o7777), st.st_mtime_ns)
    return out


def differences(want: dict, got: dict) -> list[str]:
    out = []
    for k in sorted(set(want) | set(got)):
        if want.get(k) != got.get(k):
            out.append(f"{k}: want {want.get(k)} got {got.get(k)}")
    return out


class Job:
    """fs_children under `lazarus run -i 0`: snaps[index] = the tree at that checkpoint."""

    def __init__(self, runner, prog, actions, opts=()):
        self.runner = runner
        self.store = runner.base / "store"
        self.work = runner.mkdir("work")
        self.go = runner.mkdir("go")
        self.actions = actions
        self.snaps: dict[int, dict] = {}
        self.order: list[int] = []
        self.proc = runner.start_lz("run", "-d", self.store, "-i", "0", *opts, "--", prog, self.work, self.go, *actions)

    def run(self, stop_before_end: int | None = None):
        """Steps through the checkpoints (all, or the first stop_before_end)."""
        n = sum(1 for a in self.actions if a == "ckpt")
        for k in range(n if stop_before_end is None else stop_before_end):
            m = self.proc.wait_for_output(rf"^ckpt {k} (\d+)$|^FAIL.*$", timeout=120)
            assert not m.group(0).startswith("FAIL"), f"{m.group(0)}\n{self.proc.stderr}"
            idx = int(m.group(1))
            self.snaps[idx] = tree(self.work)
            self.order.append(idx)
            (self.go / f"go.{k}").touch()
        if stop_before_end is None:
            m = self.proc.wait_for_output(r"^(end|FAIL.*)$", timeout=120)
            assert m.group(1) == "end", f"{m.group(1)}\n{self.proc.stdout}\n{self.proc.stderr}"

    def kill(self):
        kill_program(self.proc)

    def restart_check(self, idx: int):
        """restart --at idx: the tree must be the one of checkpoint idx."""
        for f in self.go.iterdir():
            f.unlink()
        p = self.runner.start_lz("restart", "-d", self.store, "--at", idx)
        m = p.wait_for_output(rf"^(restored \d+ {idx}|FAIL.*)$", timeout=120)
        assert m.group(1).startswith("restored"), f"{m.group(1)}\n{p.stderr}"
        diffs = differences(self.snaps[idx], tree(self.work))
        assert not diffs, (f"after `restart --at {idx}` the files differ from checkpoint {idx}:\n  "
                           + "\n  ".join(diffs[:40]) + f"\n--- restart stderr\n{p.stderr[-2000:]}")
        # the journals of N's interval were emptied, the other processes' removed
        ck = self.store / f"ckpt.{idx:06d}"
        assert not [q for q in ck.rglob("proc.*")], f"proc.* journals left in {ck}: {list(ck.rglob('*'))}"
        # (the restart's own line says how many files it rolled back: not a complaint)
        said = "\n".join(l for l in p.stderr.splitlines() if not l.startswith("lazarus: restarted from checkpoint"))
        assert "rolled back" not in said and "cannot record" not in said, p.stderr
        kill_program(p)

    def check_all(self):
        """Kill, then restart at every checkpoint, newest first."""
        self.kill()
        for idx in reversed(self.order):
            self.restart_check(idx)


SETUP = ("own:c a A*9000;c b B*100;c c C*9000;c d D*50;c e E*50;d sub;c sub/f F*10;"
         "c big Q*20000;c s S*10;c keep K*10")


def test_forked_children(runner, prog):
    """Forked children overwrite, append, truncate, rename, unlink, create,
    move a directory and write below it; later checkpoints too."""
    job = Job(runner, prog, [
        SETUP, "ckpt",
        "fork:w a 100 X*5000;a b Y*300;t c 10;r d d2;u e;c new N*20;r sub sub2;c sub2/g G*5;w sub2/f 0 Z",
        "ckpt",
        "fork:w a 0 Z*10;u d2;a new M*5;w big 8000 W*9000;t big 100",
        "own:w s 0 T",
        "fork:w big 0 V*3;c e E2*7;d sub3",
        "ckpt",
        "fork:w a 4000 U*200;u new;r sub2 sub4;t c 0",
    ])
    job.run()
    job.check_all()


def test_exec_shell_and_vfork(runner, prog):
    """Children that fork and exec /bin/sh -c (dash; its own children mv,
    rm, dd, sort exec'd in turn), and vfork + exec."""
    job = Job(runner, prog, [
        SETUP, "ckpt",
        "sh:echo hello > a; echo more >> b; mv c c2; rm d; printf XY | dd of=big bs=1 seek=5000 conv=notrunc 2>/dev/null;"
        " sort s > s.sorted; mkdir m; echo in > m/x; mv sub m/sub",
        "vsh:echo v >> e; rm -f c2; cat keep >> a",
        "ckpt",
        "sh:exec sh -c 'echo deep > keep; : > big'",
        "vsh:mv e e2 && echo z > e",
        "ckpt",
        "sh:rm -rf m; echo w > s",
    ])
    job.run()
    job.check_all()


def test_posix_spawn(runner, prog):
    """posix_spawn of dynamic programs (cp over a file, dd conv=notrunc, a
    shell that spawns more): each gets a journal of its own."""
    job = Job(runner, prog, [
        SETUP, "ckpt",
        "spawn:cp s a",
        "spawn:dd if=keep of=big bs=1 seek=12345 conv=notrunc status=none",
        "spawn:sh -c echo",
        "spawn:mv b b2",
        "ckpt",
        "spawn:cp big c",
        "spawn:rm b2",
    ])
    job.run()
    job.check_all()


PY_SUBPROCESS = ("sh:/usr/bin/python3 -c 'import subprocess; subprocess.run([\"cp\", \"s\", \"a\"], check=True); "
                 "subprocess.run(\"echo q >> big; rm d\", shell=True, check=True)'")


def test_system_popen_python(runner, prog):
    """system() and popen() (libc spawns /bin/sh out of the runtime's reach:
    the journal goes through environ), and Python's subprocess, which closes
    every descriptor above 2 before it execs (the journal's directory is
    reopened through the parent's descriptor)."""
    job = Job(runner, prog, [
        SETUP, "ckpt",
        "system:echo sys >> b; mv e e.sys",
        "popen:cat keep; echo p > keep",
        PY_SUBPROCESS,
        "ckpt",
        "system:rm e.sys; echo x > c",
    ])
    job.run()
    assert "rolled back" not in job.proc.stderr, job.proc.stderr
    job.check_all()


def test_same_block_first_stamp_wins(runner, prog):
    """Children one after another over the same blocks: only the first one
    holds the state at N (its record has the smallest stamp); the others hold
    what an earlier child wrote.  Then a child appends and another overwrites
    the start: the block it saves holds appended bytes, which must not come
    back (the file's size at N is the first record's)."""
    acts = [SETUP, "ckpt"]
    for i in range(6):
        acts.append(f"fork:w a 0 {chr(ord('0') + i)}*5000;w big 12000 {chr(ord('a') + i)}*100")
    acts += ["fork:a s APPENDED*100", "fork:w s 2 O*3", "fork:a s MORE*10",
             "grand:w a 10 G*10", "sh:printf P | dd of=a conv=notrunc status=none", "ckpt",
             "fork:w a 0 L*4096", "fork:w a 0 M*4096", "own:w a 0 N*4096"]
    job = Job(runner, prog, acts)
    job.run()
    job.check_all()


@pytest.mark.parametrize("durability", ["process", "machine"])
def test_grandchildren(runner, prog, durability):
    """Grandchildren (fork in a fork, and a grandchild that execs sh): their
    journals are nested, proc.<child>/proc.<grandchild>/ (with either
    durability: machine writes the records with pwritev and syncs)."""
    job = Job(runner, prog, [
        SETUP, "ckpt",
        "grand:w a 0 G*100;u e;r d d3;c gnew X*3",
        "grandsh:echo g >> b; rm d3; mkdir gd; echo 1 > gd/1; mv c gd/c",
        "ckpt",
        "grand:t big 5;u gnew",
    ], opts=("--durability", durability))
    job.run()
    store = job.store
    nested = [p for p in store.rglob("proc.*/proc.*") if p.is_dir()]
    assert nested, f"no nested proc.*/proc.* journal in {store}: {sorted(map(str, store.rglob('*')))}"
    job.check_all()


def _diff_lines(r) -> list[str]:
    return sorted(" ".join(line.split()) for line in r.stdout.splitlines())


def test_diff_and_list_see_children(runner, prog):
    """`lazarus diff` and `lazarus list` count the children's journals (the
    program itself changes nothing in these intervals)."""
    job = Job(runner, prog, [
        SETUP, "ckpt",
        "fork:w a 0 X*10;u b;c n N*5;r d d2",
        "ckpt",
        "sh:echo x > keep",
        "spawn:rm e",
        "ckpt",
    ])
    job.run()
    first, second, third = job.order
    w = job.work
    r = runner.lz("diff", "-d", job.store, "--at", first, check_rc=0)
    assert _diff_lines(r) == sorted([f"modified {w}/a", f"restored {w}/b", f"removed {w}/n", f"restored {w}/d",
                                     f"removed {w}/d2", f"modified {w}/keep", f"restored {w}/e"]), str(r)
    r = runner.lz("diff", "-d", job.store, "--at", second, check_rc=0)
    assert _diff_lines(r) == sorted([f"modified {w}/keep", f"restored {w}/e"]), str(r)
    listed = {int(e["index"]): e for e in runner.list_json(job.store)}
    assert listed[second]["files"] == 2, listed
    assert listed[first]["files"] == 7, listed
    assert listed[first]["undo_bytes"] > listed[second]["undo_bytes"] > 0, listed
    assert listed[third]["files"] == 0, listed
    job.check_all()
