"""File rollback (issue 3): the scenarios of the seed documents, run for real.

Each scenario is a list of file-system steps run by programs/fs_steps.py
under `lazarus run -i 0` (it checkpoints itself through the C API and prints
a snapshot of its work tree after each checkpoint: every path's type, mode,
owner, size, link count, mtime, content hash, symlink target, hard-link
identity, plus its open descriptors, Python file objects and shared
mappings).  The driver SIGKILLs itself after the last step; then
`lazarus restart --at N` for each checkpoint N, newest first: the snapshot the
restarted program takes before doing anything must equal the one taken at N
exactly.  The restarted program then runs the rest of its steps again (as a
real program would) and must end up with the same files as the first run
(mtimes aside): a rolled-back append is not appended twice, a rolled-back
overwrite reads back the old data.  Files the job never changed keep their
inode, mtime and ctime through everything.

Scenarios: Metamori's RARE/RARW/RAD (§3.6) and incremental walk-through
(§4.3.7), CprFS Figures 1 and 2, every row of its Table 2 (rename
transitions) and Table 3 (renamed twice), non-active files, every ftIO
operation in every ftIO state, O_TRUNC, fallocate, copy_file_range, sendfile,
MAP_SHARED, mkdir/rmdir, link/symlink, chmod/mtime, renameat2, dup'ed
descriptors, stdout redirected by the shell, Python buffered io, C stdio
(programs/fs_stdio.c), --exclude, outside changes (refusal, --force),
`lazarus diff`, `lazarus list --json` files/undo_bytes.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import INCLUDE, IS_ROOT, LAZARUS, LIBDIR, PROGRAMS_SRC, _compile

PY = "/usr/bin/python3"
KEEP = "50"
ENOENT, EEXIST = 2, 17

# --------------------------------------------------------------------------
# Scenario vocabulary
# --------------------------------------------------------------------------
CK = {"op": "checkpoint"}


def S(op: str, **kw) -> dict:
    """One driver step; `as_` stands for the reserved word `as`."""
    d = {"op": op}
    for k, v in kw.items():
        d["as" if k == "as_" else k] = v
    return d


def R(seed: int, n: int) -> dict:
    return {"rand": seed, "n": n}


def rbytes(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


@dataclass
class F:
    data: bytes
    mode: int = 0o644
    mtime_ns: int | None = None


@dataclass
class D:
    mode: int = 0o755


@dataclass
class L:
    target: str


@dataclass
class H:
    of: str  # another name (hard link) of an earlier file


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# --------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------
@dataclass
class FsProgs:
    driver: Path
    stdio: Path


@pytest.fixture(scope="module")
def fsprogs(programs, lazarus_bin):
    drv = programs.dir / "fs_steps.py"
    shutil.copy(PROGRAMS_SRC / "fs_steps.py", drv)
    os.chmod(drv, 0o644)
    stdio = _compile("fs_stdio", programs.dir,
                     [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}"])
    return FsProgs(drv, stdio)


# --------------------------------------------------------------------------
# Reports of the driver
# --------------------------------------------------------------------------
LINE_RE = re.compile(r"^(SNAP|RESTORED|OUT|END|CKPTERR|FAIL)\b ?(.*)$")


@dataclass
class Report:
    snaps: dict = field(default_factory=dict)      # k -> (index, snapshot)
    restored: list = field(default_factory=list)   # (k, index, snapshot)
    outs: list = field(default_factory=list)       # (step, obj)
    end: dict | None = None
    errors: list = field(default_factory=list)     # CKPTERR / FAIL lines


def parse_report(text: str) -> Report:
    rep = Report()
    for line in text.splitlines():
        m = LINE_RE.match(line)
        if not m:
            continue
        kind, rest = m.groups()
        if kind == "SNAP":
            k, idx, js = rest.split(" ", 2)
            assert int(k) not in rep.snaps, f"two SNAP lines for checkpoint {k}"
            rep.snaps[int(k)] = (int(idx), json.loads(js))
        elif kind == "RESTORED":
            k, idx, js = rest.split(" ", 2)
            rep.restored.append((int(k), int(idx), json.loads(js)))
        elif kind == "OUT":
            st, js = rest.split(" ", 1)
            rep.outs.append((int(st), json.loads(js)))
        elif kind == "END":
            rep.end = json.loads(rest)
        else:
            rep.errors.append(line)
    return rep


def _brief(e) -> str:
    if not isinstance(e, dict):
        return repr(e)
    keys = ("type", "size", "mode", "target")
    return "{" + ", ".join(f"{k}={e[k]}" for k in keys if k in e) + "}"


def diff_snap(want: dict, got: dict, *, ignore_times: bool = False, skip=None) -> list[str]:
    """Differences between two snapshots, one readable line each.  `skip`
    (a predicate on tree paths) leaves paths out."""
    out = []
    tw, tg = want.get("tree", {}), got.get("tree", {})
    for p in sorted(set(tw) | set(tg)):
        if skip and skip(p):
            continue
        if p not in tg:
            out.append(f"tree {p}: missing (want {_brief(tw[p])})")
        elif p not in tw:
            out.append(f"tree {p}: should not exist (got {_brief(tg[p])})")
        else:
            for key in sorted(set(tw[p]) | set(tg[p])):
                if ignore_times and key == "mtime_ns":
                    continue
                if tw[p].get(key) != tg[p].get(key):
                    out.append(f"tree {p}: {key} want {tw[p].get(key)!r} got {tg[p].get(key)!r}")
    for sect in sorted((set(want) | set(got)) - {"tree"}):
        a, b = want.get(sect, {}), got.get(sect, {})
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for name in sorted(set(a) | set(b)):
                if a.get(name) != b.get(name):
                    out.append(f"{sect} {name}: want {a.get(name)!r} got {b.get(name)!r}")
        else:
            out.append(f"{sect}: want {a!r} got {b!r}")
    return out


# --------------------------------------------------------------------------
# Work trees, bystanders
# --------------------------------------------------------------------------
def populate(runner, root: Path, spec: dict) -> None:
    """Create the files of spec (path relative to root -> F/D/L/H) owned by
    the runner's identity."""
    for rel in sorted(spec, key=lambda r: (r.count("/"), r)):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        e = spec[rel]
        if isinstance(e, D):
            p.mkdir(mode=e.mode)
            os.chmod(p, e.mode)
        elif isinstance(e, L):
            os.symlink(e.target, p)
        elif isinstance(e, H):
            os.link(root / e.of, p)
        else:
            p.write_bytes(e.data)
            os.chmod(p, e.mode)
        if IS_ROOT:
            os.lchown(p, runner.uid, runner.uid)
            for parent in p.relative_to(root).parents:
                if str(parent) != ".":
                    os.lchown(root / parent, runner.uid, runner.uid)
    for rel in spec:
        e = spec[rel]
        if isinstance(e, F) and e.mtime_ns is not None:
            os.utime(root / rel, ns=(e.mtime_ns, e.mtime_ns))


def stat_sig(p: Path):
    st = os.lstat(p)
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_mode, st.st_nlink)


BYSTANDERS = {
    "bystander.txt": F(rbytes(1, 3000)),
    "bystander_dir": D(),
    "bystander_dir/inner.txt": F(rbytes(2, 2000)),
    "bystander_rw.txt": F(rbytes(3, 5000)),   # opened O_RDWR and read, never written
}

# every scenario starts by opening bystander_rw.txt read-write and reading
# from it; the descriptor stays open through every checkpoint
PRELUDE = [S("open", path="bystander_rw.txt", flags=["O_RDWR"], as_="_by"),
           S("read", fd="_by", n=100)]


def outside_tree(root: Path) -> dict:
    """(ino, mtime, ctime, size, mode, nlink) and content hash of every path
    under root, seen from outside the job."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in sorted(dirs + files) + ([] if dirpath != str(root) else ["."]):
            p = Path(dirpath) / n if n != "." else root
            rel = str(p.relative_to(root))
            sig = stat_sig(p)
            h = sha(p.read_bytes()) if stat.S_ISREG(sig[4]) else None
            out[rel] = (sig, h)
    return out


# --------------------------------------------------------------------------
# A job: run a scenario, restart it at its checkpoints
# --------------------------------------------------------------------------
class Job:
    def __init__(self, runner, fsprogs, setup: dict, steps: list, *, on_restore="continue",
                 report_fd=1, run_opts=(), prelude=True, name="work", program=None, watch=(),
                 store=None):
        self.runner = runner
        self.fsprogs = fsprogs
        self.work = runner.mkdir(name)
        self.store = store or runner.base / f"store-{name}"
        self.setup = dict(BYSTANDERS)
        self.setup.update(setup)
        populate(runner, self.work, self.setup)
        self.outside = runner.base / f"outside-{name}.txt"
        self.outside.write_bytes(b"outside the work tree\n")
        self.steps = (PRELUDE if prelude else []) + steps
        self.ck_steps = [i for i, s in enumerate(self.steps) if s["op"] == "checkpoint"]
        self.on_restore = on_restore
        self.report_fd = report_fd
        self.run_opts = list(run_opts)
        self.scen = runner.base / f"scenario-{name}.json"
        self.scen.write_text(json.dumps({"work": str(self.work), "lib": str(LIBDIR / "liblazarus.so"),
                                         "steps": self.steps, "on_restore": on_restore,
                                         "report_fd": report_fd}))
        os.chmod(self.scen, 0o644)
        self.program = program or [PY, "-B", fsprogs.driver, self.scen]
        self.watch = [self.work / "bystander.txt", self.work / "bystander_dir",
                      self.work / "bystander_dir" / "inner.txt", self.work / "bystander_rw.txt",
                      self.outside] + [self.work / w for w in watch]
        self.watch_before = {p: stat_sig(p) for p in self.watch}
        self.orig: Report | None = None
        self.all_indexes: set[int] = set()
        self.deferred: list[str] = []

    # -- running ---------------------------------------------------------
    def report_text(self, stdout: str, stderr: str) -> str:
        return stdout if self.report_fd == 1 else stderr

    def run(self) -> Report:
        proc = self.runner.start_lz("run", "-d", self.store, "-i", "0", "-k", KEEP, *self.run_opts,
                                    "--", *self.program)
        rc = proc.wait(timeout=240)
        rep = parse_report(self.report_text(proc.stdout, proc.stderr))
        ctx = f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        assert rc == 137, f"`lazarus run` exited {rc}; the program should have SIGKILLed itself\n{ctx}"
        assert not rep.errors, f"checkpoint failures: {rep.errors}\n{ctx}"
        assert rep.end is not None, f"no END line\n{ctx}"
        assert sorted(rep.snaps) == list(range(len(self.ck_steps))), f"SNAP lines: {sorted(rep.snaps)}\n{ctx}"
        idx = [rep.snaps[k][0] for k in sorted(rep.snaps)]
        assert idx == sorted(set(idx)) and idx[0] > 0, f"checkpoint indexes {idx}"
        self.all_indexes.update(idx)
        self.orig = rep
        listed = self.runner.indexes(self.store)
        assert listed == idx, f"list shows {listed}, the program took {idx}"
        return rep

    def index(self, k: int) -> int:
        return self.orig.snaps[k][0]

    def restart(self, k: int, *extra, expect_rc=137):
        """`restart --at <index of checkpoint k>`; returns (Result, Report)."""
        r = self.runner.lz("restart", "-d", self.store, "--at", str(self.index(k)), *extra, timeout=240)
        rep = parse_report(self.report_text(r.stdout, r.stderr))
        if expect_rc is not None:
            assert r.rc == expect_rc, (f"restart --at {self.index(k)} (checkpoint {k}): exit {r.rc}, "
                                       f"want {expect_rc}\n{r}")
        return r, rep

    def check_restored(self, k: int, r, rep: Report, *, skip=None) -> dict:
        """The RESTORED snapshot of checkpoint k equals its SNAP exactly."""
        idx = self.index(k)
        assert len(rep.restored) == 1, f"want one RESTORED line for checkpoint {k}\n{r}"
        rk, ridx, snap = rep.restored[0]
        assert (rk, ridx) == (k, idx), f"restored checkpoint {rk} index {ridx}, want {k} index {idx}\n{r}"
        diffs = diff_snap(self.orig.snaps[k][1], snap, skip=skip)
        assert not diffs, (f"after `restart --at {idx}` the files differ from checkpoint {k}:\n  "
                           + "\n  ".join(diffs[:60]) + f"\n--- restart stderr\n{r.stderr[-2000:]}")
        return snap

    def check_rerun(self, k: int, r, rep: Report) -> None:
        """After restoring checkpoint k the program ran the remaining steps
        again: same results, same files (mtimes aside) as the first run, and
        `list` shows the checkpoints up to k plus the new ones."""
        orig = self.orig
        assert not rep.errors, f"checkpoint failures after the restart: {rep.errors}\n{r}"
        later = sorted(k2 for k2 in orig.snaps if k2 > k)
        assert sorted(rep.snaps) == later, f"re-run SNAPs {sorted(rep.snaps)}, want {later}\n{r}"
        new_idx = [rep.snaps[k2][0] for k2 in later]
        assert new_idx == sorted(set(new_idx)), f"new checkpoint indexes {new_idx}"
        # (that new indexes are never reused ones is test_indexes_never_reused's)
        for k2 in later:
            diffs = diff_snap(orig.snaps[k2][1], rep.snaps[k2][1], ignore_times=True)
            assert not diffs, (f"restarted at checkpoint {k}, the re-run's checkpoint {k2} differs from "
                               f"the first run's:\n  " + "\n  ".join(diffs[:60]))
        first_step = self.ck_steps[k]
        want_outs = [o for o in orig.outs if o[0] > first_step]
        assert rep.outs == want_outs, (f"restarted at checkpoint {k}: the steps' results differ from "
                                       f"the first run's\nwant {want_outs}\ngot  {rep.outs}")
        assert rep.end is not None, f"no END after the restart at checkpoint {k}\n{r}"
        diffs = diff_snap(orig.end, rep.end, ignore_times=True)
        assert not diffs, (f"restarted at checkpoint {k}, the re-run ends with other files than the "
                           f"first run:\n  " + "\n  ".join(diffs[:60]))
        self.all_indexes.update(new_idx)
        listed = self.runner.indexes(self.store)
        want = sorted([self.index(j) for j in orig.snaps if j <= k] + new_idx)
        if listed != want:
            # asserted at the end (finish), so that the file checks go on
            self.deferred.append(f"after restart --at {self.index(k)} and the re-run, list shows "
                                 f"{listed}, want {want}")

    def check_list_after_kill_restore(self, k: int) -> None:
        listed = self.runner.indexes(self.store)
        want = sorted(self.index(j) for j in self.orig.snaps if j <= k)
        if listed != want:
            self.deferred.append(f"after restart --at {self.index(k)}, list shows {listed}, want {want}")

    def finish(self) -> None:
        """Bystanders untouched, and no deferred failure (`list`)."""
        self.check_bystanders()
        assert not self.deferred, "\n".join(self.deferred)

    def check_bystanders(self) -> None:
        for p in self.watch:
            assert stat_sig(p) == self.watch_before[p], (
                f"{p} was never changed by the job but its (ino, mtime, ctime, size, mode, nlink) "
                f"changed: {self.watch_before[p]} -> {stat_sig(p)}")

    def restart_all(self, order=None, checks=None) -> None:
        """Restart at every checkpoint, newest first (or `order`), checking
        each restored snapshot, the re-run (continue) and `list`."""
        order = order if order is not None else sorted(self.orig.snaps, reverse=True)
        for k in order:
            r, rep = self.restart(k)
            snap = self.check_restored(k, r, rep)
            if checks and k in checks:
                checks[k](snap)
            if self.on_restore == "continue":
                self.check_rerun(k, r, rep)
                if checks:
                    for k2, (_, s2) in rep.snaps.items():
                        if k2 in checks:
                            checks[k2](s2)
            else:
                assert rep.end is None and not rep.snaps, f"the program went on after RESTORED\n{r}"
                self.check_list_after_kill_restore(k)
        self.finish()


def scenario(runner, fsprogs, setup, steps, checks=None, **kw) -> Job:
    """Run a scenario and restart it at each checkpoint, newest first.
    checks: {k: function(snapshot)} applied to every snapshot of checkpoint k
    (first run, restored, re-run)."""
    job = Job(runner, fsprogs, setup, steps, **kw)
    rep = job.run()
    if checks:
        for k, fn in checks.items():
            fn(rep.snaps[k][1])
    job.restart_all(checks=checks)
    return job


def tree(snap):
    return snap["tree"]


def names(t: dict, path: str) -> list[str]:
    """The paths of the tree naming the same file as path (hard links)."""
    return sorted(p for p, e in t.items() if e.get("same") == t[path]["same"])


def expect_file(snap, path, content: bytes | None):
    t = tree(snap)
    if content is None:
        assert path not in t, f"{path} should not exist: {t.get(path)}"
    else:
        assert path in t, f"{path} missing"
        assert (t[path]["size"], t[path]["sha256"]) == (len(content), sha(content)), (
            f"{path}: size {t[path]['size']}, want {len(content)} (or other contents)")


# ==========================================================================
# Metamori §3.6 (MOB): RARE, RARW, RAD
# ==========================================================================
def test_rare(runner, fsprogs):
    """Rollback After Real-time Event: a file opened (O_APPEND) after
    checkpoint i is appended, the process fails before i+1; after the restart
    from i the append must not appear twice."""
    base = rbytes(10, 1000)
    block = rbytes(11, 4096)
    steps = [CK,
             S("open", path="example", flags=["O_WRONLY", "O_APPEND"], as_="fd"),
             S("write", fd="fd", data=R(11, 4096))]
    job = Job(runner, fsprogs, {"example": F(base)}, steps)
    rep = job.run()
    expect_file(rep.snaps[0][1], "example", base)
    expect_file(rep.end, "example", base + block)
    for _ in range(2):   # the re-run fails the same way: roll back again
        r, rr = job.restart(0)
        job.check_restored(0, r, rr)
        job.check_rerun(0, r, rr)
        expect_file(rr.end, "example", base + block)   # once, not twice
    job.finish()


def test_rarw(runner, fsprogs):
    """Rollback After Reading and Writing the same area: the block read after
    checkpoint i is overwritten, the process fails; after the restart the read
    returns the pre-failure value again."""
    old = rbytes(20, 8192)
    steps = [S("open", path="example", flags=["O_RDWR"], as_="fd"),
             CK,
             S("read", fd="fd", n=4096),
             S("lseek", fd="fd", off=0),
             S("write", fd="fd", data=R(21, 4096)),
             CK,
             S("read", fd="fd", n=4096),
             S("lseek", fd="fd", off=0),
             S("write", fd="fd", data=R(22, 4096))]
    job = Job(runner, fsprogs, {"example": F(old)}, steps)
    rep = job.run()
    first_read = [o for s, o in rep.outs if s == job.ck_steps[0] + 1][0]
    assert first_read["read"] == sha(old[:4096])
    job.restart_all()
    # the re-run's read (compared by restart_all) saw the original block again
    # and the file at the end is the same as after the failure-free run
    expect_file(job.orig.end, "example", rbytes(22, 4096) + old[4096:])


def test_rad(runner, fsprogs):
    """Rollback After Deletion: RARW, and the file is unlinked before the
    failure (its descriptor still open); after the restart it exists again
    with its content, the descriptor at its offset reads the old data."""
    old = rbytes(30, 8192)
    steps = [S("open", path="example", flags=["O_RDWR"], as_="fd"),
             S("lseek", fd="fd", off=1000),
             CK,
             S("read", fd="fd", n=4096),
             S("lseek", fd="fd", off=0),
             S("write", fd="fd", data=R(31, 4096)),
             S("unlink", path="example")]
    job = Job(runner, fsprogs, {"example": F(old)}, steps)
    rep = job.run()
    assert "example" not in tree(rep.end)
    snap0 = rep.snaps[0][1]
    expect_file(snap0, "example", old)
    assert snap0["fds"]["fd"]["pos"] == 1000
    job.restart_all()


def test_non_active_files(runner, fsprogs):
    """Files opened and closed between two checkpoints (CprFS §1 'non-active
    files'): overwritten, appended, O_TRUNC'ed, created, only read."""
    setup = {"a": F(rbytes(40, 10000)), "b": F(rbytes(41, 3000)), "c": F(rbytes(42, 7000)),
             "e": F(rbytes(43, 2000))}
    steps = [CK,
             S("patch", path="a", off=5000, data=R(44, 2000)),
             S("append", path="b", data=R(45, 1500)),
             S("put", path="c", data="short"),
             S("put", path="d", data=R(46, 4000)),
             S("open", path="e", flags=["O_RDWR"], as_="e"), S("read", fd="e", n=2000),
             S("close", fd="e"),
             CK,
             S("open", path="a", flags=["O_RDWR"], as_="a"), S("ftruncate", fd="a", len=100),
             S("close", fd="a"),
             S("patch", path="b", off=0, data=R(47, 4500)),
             S("unlink", path="d")]
    # e is opened read-write and read, never written: never touched
    scenario(runner, fsprogs, setup, steps, watch=["e"])


def test_non_active_e_untouched(runner, fsprogs):
    """A file opened O_RDWR and read between checkpoints (never written) and a
    file only stat'ed keep inode, mtime and ctime through run and restarts."""
    setup = {"e": F(rbytes(48, 2000)), "s": F(rbytes(49, 100)), "w": F(b"w")}
    steps = [CK,
             S("open", path="e", flags=["O_RDWR"], as_="e"), S("read", fd="e", n=2000),
             S("close", fd="e"),
             S("append", path="w", data="x"),
             CK,
             S("open", path="e", flags=["O_RDWR", "O_APPEND"], as_="e2"),
             S("append", path="w", data="y")]
    scenario(runner, fsprogs, setup, steps, watch=["e", "s"])


# ==========================================================================
# CprFS Figures 1 and 2
# ==========================================================================
def test_cprfs_figure1(runner, fsprogs):
    """Figure 1: fd = open(example, O_RDWR); checkpoint i; read; lseek 0;
    write the new value; fsync; error -> restart from i reads the old value."""
    old = rbytes(50, 6000)
    steps = [S("open", path="example", flags=["O_RDWR"], as_="fd"),
             CK,
             S("read", fd="fd", n=2048),
             S("lseek", fd="fd", off=0),
             S("write", fd="fd", data=R(51, 2048)),
             S("fsync", fd="fd")]
    job = Job(runner, fsprogs, {"example": F(old)}, steps)
    rep = job.run()
    reads = [o for _, o in rep.outs if "read" in o]
    assert reads[-1]["read"] == sha(old[:2048])
    expect_file(rep.end, "example", rbytes(51, 2048) + old[2048:])
    job.restart_all()


def test_cprfs_figure2(runner, fsprogs):
    """Figure 2: checkpoint i; open(example, O_WRONLY|O_APPEND); write;
    close; error -> restart from i: buf is appended once, not again."""
    old = rbytes(52, 3000)
    steps = [CK,
             S("open", path="example", flags=["O_WRONLY", "O_APPEND"], as_="fd"),
             S("write", fd="fd", data=R(53, 1234)),
             S("close", fd="fd"),
             CK]
    checks = {0: lambda s: expect_file(s, "example", old),
              1: lambda s: expect_file(s, "example", old + rbytes(53, 1234))}
    scenario(runner, fsprogs, {"example": F(old)}, steps, checks=checks)


# ==========================================================================
# CprFS Table 2 (rename transitions, every row) and Table 3
# ==========================================================================
ALL_STATES = ["normal", "truncated", "deleted", "reborn", "dead", "dead,reborn", "renamed",
              "dead,renamed", "dead,renamed,truncated", "renamed,truncated"]
L1 = ["normal", "truncated", "deleted", "reborn"]
L2 = ["renamed", "renamed,truncated"]
L3 = ["dead", "dead,reborn"]
L4 = ["dead,renamed", "dead,renamed,truncated"]
G1 = ["normal", "truncated", "dead,renamed", "dead,renamed,truncated", "renamed"]
G2 = ["reborn", "dead,reborn"]
G3 = ["renamed,truncated"]
G4 = ["dead", "deleted"]
TABLE2_ROWS = {
    "G1L1": (G1, L1), "G1L2": (G1, L2), "G1L3": (G1, L3), "G1L4": (G1, L4),
    "G2L1": (G2, L1), "G2L2": (G2, L3), "G2L3": (G2, L2 + L4),
    "G3L1": (G3, L1), "G3L2": (G3, L3), "G3L3": (G3, L2), "G3L4": (G3, L4),
    "G4L1": (G4, ALL_STATES),
}


def cprfs_state(x: str, state: str, tag: str) -> list:
    """Steps that bring the (pre-existing) file x into a CprFS file state;
    x.from is the rename source used for the `renamed` states."""
    st = state.split(",")
    if state == "normal":
        return [S("patch", path=x, off=10, data=f"normal write {tag}")]
    if state == "truncated":
        return [S("truncate", path=x, len=100)]
    if state == "deleted":
        return [S("unlink", path=x)]
    if state == "reborn":
        return [S("unlink", path=x), S("put", path=x, data=f"reborn {tag}")]
    steps = []
    if st[0] == "dead":
        steps.append(S("rename", src=x, dst=x + ".away"))
        st = st[1:]
    if st[:1] == ["reborn"]:
        steps.append(S("put", path=x, data=f"reborn after dead {tag}"))
    if st[:1] == ["renamed"]:
        steps.append(S("rename", src=x + ".from", dst=x))
        if st[1:] == ["truncated"]:
            steps.append(S("truncate", path=x, len=50))
    return steps


@pytest.mark.parametrize("row", list(TABLE2_ROWS))
def test_cprfs_table2_rename(row, runner, fsprogs):
    """One row of CprFS Table 2: every source state of the row's group renamed
    onto every destination state of the row, each pair in its own
    directory; everything between the checkpoints is rolled back."""
    srcs, dsts = TABLE2_ROWS[row]
    setup, mid, post, rename_steps = {}, [], [], []
    n = 0
    for s_state in srcs:
        for d_state in dsts:
            c = f"c{n}_{s_state.replace(',', '-')}__{d_state.replace(',', '-')}"
            seed = 1000 + 10 * n
            setup[f"{c}/s"] = F(rbytes(seed, 3000 + n))
            setup[f"{c}/s.from"] = F(rbytes(seed + 1, 2000 + n))
            setup[f"{c}/d"] = F(rbytes(seed + 2, 4000 + n))
            setup[f"{c}/d.from"] = F(rbytes(seed + 3, 1000 + n))
            mid += cprfs_state(f"{c}/s", s_state, f"s{n}")
            mid += cprfs_state(f"{c}/d", d_state, f"d{n}")
            rename_steps.append((len(PRELUDE) + 1 + len(mid), s_state))
            mid.append(S("rename", src=f"{c}/s", dst=f"{c}/d", may_fail=True))
            post += [S("append", path=f"{c}/d", data=f"post {n}\n"),
                     S("put", path=f"{c}/s", data=f"post s {n}\n")]
            n += 1
    steps = [CK] + mid + [CK] + post
    job = Job(runner, fsprogs, setup, steps)
    rep = job.run()
    errs = {st: o for st, o in rep.outs}
    for step, s_state in rename_steps:
        assert job.steps[step]["op"] == "rename"
        if s_state in G4:
            assert errs.get(step) == {"errno": ENOENT}, f"rename of a {s_state} source must fail"
        else:
            assert step not in errs, f"rename of a {s_state} source failed: {errs[step]}"
    job.restart_all()


def test_cprfs_table3_renamed_twice(runner, fsprogs):
    """Table 3: a, b, c normal; rename(a, b); rename(c, b).  Restart at the
    checkpoint before, between and after the renames."""
    a, b, c = rbytes(60, 3000), rbytes(61, 4000), rbytes(62, 5000)
    steps = [CK,
             S("patch", path="a", off=0, data="A-normal"),
             S("patch", path="b", off=0, data="B-normal"),
             S("patch", path="c", off=0, data="C-normal"),
             S("rename", src="a", dst="b"),
             CK,
             S("rename", src="c", dst="b"),
             CK,
             S("append", path="b", data="after")]
    a1, c1 = b"A-normal" + a[8:], b"C-normal" + c[8:]

    def at0(s):
        expect_file(s, "a", a), expect_file(s, "b", b), expect_file(s, "c", c)

    def at1(s):
        expect_file(s, "a", None), expect_file(s, "b", a1), expect_file(s, "c", c1)

    def at2(s):
        expect_file(s, "a", None), expect_file(s, "b", c1), expect_file(s, "c", None)

    scenario(runner, fsprogs, {"a": F(a), "b": F(b), "c": F(c)}, steps,
             checks={0: at0, 1: at1, 2: at2})


def test_cprfs_table3_one_interval(runner, fsprogs):
    """Table 3 with both renames (and the writes) in one checkpoint interval:
    the restart brings a, b and c back as they were."""
    a, b, c = rbytes(63, 3000), rbytes(64, 4000), rbytes(65, 5000)
    steps = [CK,
             S("patch", path="a", off=0, data="A-normal"),
             S("patch", path="c", off=0, data="C-normal"),
             S("rename", src="a", dst="b"),
             S("rename", src="c", dst="b"),
             S("append", path="b", data="more")]
    scenario(runner, fsprogs, {"a": F(a), "b": F(b), "c": F(c)}, steps,
             checks={0: lambda s: (expect_file(s, "a", a), expect_file(s, "b", b),
                                   expect_file(s, "c", c))})


# ==========================================================================
# Metamori §4.3.7: the incremental walk-through, restored to each checkpoint
# ==========================================================================
def test_metamori_incremental_walkthrough(runner, fsprogs):
    """1 create a.txt; 2 write 5 MB in 1 KB blocks; 3 checkpoint; 4 create
    b.txt; 5 write 3 MB in 1 KB blocks; 6 checkpoint; 7 close b; 8 unlink b;
    9 checkpoint; then more changes (a.txt overwritten and shrunk, b.txt
    created again) and the failure.  Restored to 9, 6 and 3 in turn."""
    MB = 1 << 20
    steps = [S("open", path="a.txt", flags=["O_RDWR", "O_CREAT", "O_TRUNC"], as_="a"),
             S("write", fd="a", data=R(70, 5 * MB), bs=1024),
             CK,
             S("open", path="b.txt", flags=["O_RDWR", "O_CREAT", "O_TRUNC"], as_="b"),
             S("write", fd="b", data=R(71, 3 * MB), bs=1024),
             CK,
             S("close", fd="b"),
             S("unlink", path="b.txt"),
             CK,
             S("lseek", fd="a", off=0),
             S("write", fd="a", data=R(72, 100 * 1024), bs=1024),
             S("ftruncate", fd="a", len=4 * MB),
             S("put", path="b.txt", data=R(73, 10000))]
    a5 = rbytes(70, 5 * MB)

    def at0(s):
        expect_file(s, "a.txt", a5), expect_file(s, "b.txt", None)
        assert s["fds"]["a"]["pos"] == 5 * MB

    def at1(s):
        expect_file(s, "a.txt", a5), expect_file(s, "b.txt", rbytes(71, 3 * MB))
        assert s["fds"]["b"]["pos"] == 3 * MB

    def at2(s):
        expect_file(s, "a.txt", a5), expect_file(s, "b.txt", None)
        assert "b" not in s["fds"]

    scenario(runner, fsprogs, {}, steps, checks={0: at0, 1: at1, 2: at2})


def test_metamori_single_checkpoint_walkthrough(runner, fsprogs):
    """§4.3.7, single checkpoint case: 1 create a.txt and b.txt, open both;
    2 write 5 MB to a.txt in 1 KB blocks; 3 checkpoint; 4 write 3 MB to b.txt;
    5 checkpoint; 6 close b; 7 unlink b; 8 checkpoint; then the failure after
    more writes.  Restored to 8, 5 and 3 in turn."""
    MB = 1 << 20
    steps = [S("open", path="a.txt", flags=["O_RDWR", "O_CREAT", "O_TRUNC"], as_="a"),
             S("open", path="b.txt", flags=["O_RDWR", "O_CREAT", "O_TRUNC"], as_="b"),
             S("write", fd="a", data=R(75, 5 * MB), bs=1024),
             CK,
             S("write", fd="b", data=R(76, 3 * MB), bs=1024),
             CK,
             S("close", fd="b"),
             S("unlink", path="b.txt"),
             CK,
             S("pwrite", fd="a", off=MB, data=R(77, 4096)),
             S("open", path="b.txt", flags=["O_RDWR", "O_CREAT", "O_EXCL"], as_="b2"),
             S("write", fd="b2", data=R(78, 5000))]

    def at0(s):
        expect_file(s, "a.txt", rbytes(75, 5 * MB)), expect_file(s, "b.txt", b"")

    def at1(s):
        expect_file(s, "b.txt", rbytes(76, 3 * MB))

    scenario(runner, fsprogs, {}, steps, checks={0: at0, 1: at1,
                                                  2: lambda s: expect_file(s, "b.txt", None)})


def test_metamori_write_patterns(runner, fsprogs):
    """Metamori §5.2's write tests, a checkpoint after each, then restored to
    every earlier checkpoint: sequential writes, non-overlapping interleaved
    writes, later writes overlapping an earlier one at its front, at its
    back, and encompassing it; a hole and writev at the end; reads (hole
    included) after the last checkpoint."""
    steps = [S("open", path="w.dat", flags=["O_RDWR", "O_CREAT"], as_="w"),
             CK,
             S("write", fd="w", data=R(500, 40960), bs=4096),
             CK,
             S("pwrite", fd="w", off=0, data=R(501, 1000)),
             S("pwrite", fd="w", off=5000, data=R(502, 1000)),
             S("pwrite", fd="w", off=2000, data=R(503, 1000)),
             CK,
             S("pwrite", fd="w", off=10000, data=R(504, 4000)),
             S("pwrite", fd="w", off=9000, data=R(505, 2000)),
             CK,
             S("pwrite", fd="w", off=20000, data=R(506, 4000)),
             S("pwrite", fd="w", off=23000, data=R(507, 3000)),
             CK,
             S("pwrite", fd="w", off=30000, data=R(508, 1000)),
             S("pwrite", fd="w", off=29000, data=R(509, 4000)),
             CK,
             S("pwrite", fd="w", off=100000, data=R(510, 3000)),
             S("lseek", fd="w", off=0, whence=2),
             S("writev", fd="w", datas=["first buffer,", R(511, 5000), "last"]),
             CK,
             S("pread", fd="w", off=60000, n=100),
             S("pread", fd="w", off=9500, n=3000),
             S("pwrite", fd="w", off=0, data=R(512, 110000))]

    def at(k):
        def check(s):
            want = bytearray()
            parts = [[(0, rbytes(500, 40960))],
                     [(0, rbytes(501, 1000)), (5000, rbytes(502, 1000)), (2000, rbytes(503, 1000))],
                     [(10000, rbytes(504, 4000)), (9000, rbytes(505, 2000))],
                     [(20000, rbytes(506, 4000)), (23000, rbytes(507, 3000))],
                     [(30000, rbytes(508, 1000)), (29000, rbytes(509, 4000))],
                     [(100000, rbytes(510, 3000)),
                      (103000, b"first buffer," + rbytes(511, 5000) + b"last")]]
            for group in parts[:k]:
                for off, data in group:
                    if len(want) < off:
                        want += bytes(off - len(want))
                    want[off:off + len(data)] = data
            expect_file(s, "w.dat", bytes(want))
        return check

    scenario(runner, fsprogs, {}, steps, checks={k: at(k) for k in range(7)})


# ==========================================================================
# ftIO (ch. 4): every operation in every state
# ==========================================================================
FTIO_STATES = ["clean_closed_live", "dirty_closed_live", "clean_open_live", "dirty_open_live",
               "clean_open_dead", "dirty_open_dead", "clean_closed_dead", "dirty_closed_dead"]
FTIO_OPS = ["create", "createTmp", "open", "write", "close", "remove", "renameSrc", "renameDst"]


def ftio_steps(opname: str):
    setup, pre, mid, post = {}, [], [], []
    for i, st in enumerate(FTIO_STATES):
        t, g, o, n = f"f_{st}", f"g_{st}", f"o_{st}", f"n_{st}"
        setup[t] = F(rbytes(100 + i, 6000))
        setup[g] = F(rbytes(200 + i, 4000))
        is_open, dirty, dead = "_open_" in st, st.startswith("dirty"), st.endswith("_dead")
        if is_open:
            pre += [S("open", path=t, flags=["O_RDWR"], as_=o), S("lseek", fd=o, off=1000)]
        # bring t into the state (relative to the last checkpoint)
        if dirty:
            mid.append(S("pwrite", fd=o, off=100, data=f"dirty {st}") if is_open
                       else S("patch", path=t, off=100, data=f"dirty {st}"))
        if dead:
            mid.append(S("unlink", path=t))
        # the operation
        if opname == "create":
            mid.append(S("put", path=t, data=f"created over {st}\n"))
        elif opname == "createTmp":
            mid += [S("tmpfile", as_=f"tmp_{st}"), S("write", fd=f"tmp_{st}", data=R(300 + i, 5000)),
                    S("linktmp", fd=f"tmp_{st}", path=t, may_fail=True), S("close", fd=f"tmp_{st}"),
                    S("tmpfile", as_=f"tmp2_{st}"), S("write", fd=f"tmp2_{st}", data="vanishes"),
                    S("close", fd=f"tmp2_{st}")]
        elif opname == "open":
            mid.append(S("open", path=t, flags=["O_RDWR", "O_CREAT"], as_=n))
        elif opname == "write":
            mid.append(S("write", fd=o, data=R(400 + i, 3000)) if is_open
                       else S("append", path=t, data=R(400 + i, 3000)))
        elif opname == "close":
            mid.append(S("close", fd=o) if is_open
                       else S("openclose", path=t, flags=["O_RDWR"], may_fail=True))
        elif opname == "remove":
            mid.append(S("unlink", path=t, may_fail=True))
        elif opname == "renameSrc":
            mid.append(S("rename", src=t, dst=f"moved_{st}", may_fail=True))
        elif opname == "renameDst":
            mid.append(S("rename", src=g, dst=t))
        # a descriptor of a file without a name cannot be checkpointed
        if is_open:
            mid.append(S("close_if_unlinked", fd=o, if_open=True))
        post += [S("append", path=t, data=f"post {st}\n"),
                 S("pwrite", fd=o, off=0, data=f"post-o {st}", if_open=True),
                 S("write", fd=n, data=f"post-n {st}", if_open=True)]
    return setup, pre + [CK] + mid + [CK] + post


@pytest.mark.parametrize("opname", FTIO_OPS)
def test_ftio_operation_in_every_state(opname, runner, fsprogs):
    """ftIO's automaton: the operation applied to one file in each of the
    states clean/dirty x open/closed x live/dead (dead = unlinked; open+dead =
    unlinked with a descriptor still open); rolled back to the checkpoint
    before (restart at 0) and after (restart at 1) it."""
    setup, steps = ftio_steps(opname)
    scenario(runner, fsprogs, setup, steps)


def test_ftio_append_then_reopened(runner, fsprogs):
    """ftIO §4.2 (append optimization's hard case): a file appended through
    an O_APPEND descriptor kept open across checkpoints, and one appended,
    closed and reopened in another mode that overwrites both old and
    appended bytes; rolled back at every checkpoint."""
    old1, old2 = rbytes(450, 5000), rbytes(451, 4000)
    steps = [S("open", path="app1", flags=["O_WRONLY", "O_APPEND"], as_="a1"),
             S("write", fd="a1", data="before checkpoint 0\n"),
             CK,
             S("write", fd="a1", data=R(452, 3000)),
             S("open", path="app2", flags=["O_WRONLY", "O_APPEND"], as_="a2"),
             S("write", fd="a2", data=R(453, 3000)),
             S("close", fd="a2"),
             S("open", path="app2", flags=["O_RDWR"], as_="r2"),
             S("pwrite", fd="r2", off=1000, data="over old bytes"),
             S("pwrite", fd="r2", off=6000, data="over appended bytes"),
             S("close", fd="r2"),
             CK,
             S("write", fd="a1", data=R(454, 2000)),
             S("ftruncate", fd="a1", len=100),
             S("open", path="app2", flags=["O_WRONLY", "O_APPEND"], as_="a2"),
             S("write", fd="a2", data="appended after 1")]

    def at1(s):
        want = bytearray(old2 + rbytes(453, 3000))
        want[1000:1014] = b"over old bytes"
        want[6000:6019] = b"over appended bytes"
        expect_file(s, "app2", bytes(want))
        expect_file(s, "app1", old1 + b"before checkpoint 0\n" + rbytes(452, 3000))

    scenario(runner, fsprogs, {"app1": F(old1), "app2": F(old2)}, steps,
             checks={0: lambda s: (expect_file(s, "app1", old1 + b"before checkpoint 0\n"),
                                   expect_file(s, "app2", old2)), 1: at1})


# ==========================================================================
# System calls that change files
# ==========================================================================
def test_o_trunc_recreation(runner, fsprogs):
    """open(O_TRUNC) over existing data (another descriptor open at offset
    8000 on it), re-created twice, created; then truncated to 0 and left open."""
    t1, t2 = rbytes(80, 10000), rbytes(81, 5000)
    steps = [S("open", path="t1", flags=["O_RDWR"], as_="keep"), S("lseek", fd="keep", off=8000),
             CK,
             S("put", path="t1", data="short"),
             S("put", path="t2", data="first"), S("put", path="t2", data="second, longer"),
             S("open", path="t3", flags=["O_WRONLY", "O_CREAT", "O_TRUNC"], as_="t3"),
             S("write", fd="t3", data=R(82, 3000)),
             CK,
             S("open", path="t1", flags=["O_WRONLY", "O_TRUNC"], as_="t1z"),
             S("write", fd="keep", data="past the end"),
             S("open", path="t3", flags=["O_WRONLY", "O_TRUNC"], as_="t3z")]
    scenario(runner, fsprogs, {"t1": F(t1), "t2": F(t2)}, steps,
             checks={0: lambda s: (expect_file(s, "t1", t1), expect_file(s, "t3", None)),
                     1: lambda s: expect_file(s, "t1", b"short")})


def test_fallocate(runner, fsprogs):
    """fallocate: punch hole, zero range, posix_fallocate growth, KEEP_SIZE
    beyond the end; collapse and insert range."""
    old = rbytes(90, 64 * 1024)
    steps = [S("open", path="fa", flags=["O_RDWR"], as_="fa"),
             CK,
             S("fallocate", fd="fa", mode=["PUNCH_HOLE", "KEEP_SIZE"], off=4096, len=8192),
             S("fallocate", fd="fa", mode=["ZERO_RANGE"], off=20000, len=5000),
             S("posix_fallocate", fd="fa", off=60000, len=70000),
             S("fallocate", fd="fa", mode=["KEEP_SIZE"], off=200000, len=65536),
             CK,
             S("fallocate", fd="fa", mode=["COLLAPSE_RANGE"], off=8192, len=4096),
             S("fallocate", fd="fa", mode=["INSERT_RANGE"], off=0, len=4096),
             S("pwrite", fd="fa", off=0, data="inserted")]

    def at1(s):
        want = bytearray(old) + bytes(130000 - len(old))
        want[4096:4096 + 8192] = bytes(8192)
        want[20000:25000] = bytes(5000)
        expect_file(s, "fa", bytes(want))

    scenario(runner, fsprogs, {"fa": F(old)}, steps,
             checks={0: lambda s: expect_file(s, "fa", old), 1: at1})


def test_copy_file_range(runner, fsprogs):
    """copy_file_range over the middle of a file, past its end, into a new
    file, and with the descriptors' own offsets."""
    src, dst = rbytes(100, 100000), rbytes(101, 50000)
    steps = [S("open", path="src", flags=["O_RDONLY"], as_="s"),
             S("open", path="dst", flags=["O_RDWR"], as_="d"),
             CK,
             S("copy_file_range", src="s", dst="d", n=20000, src_off=1000, dst_off=10000),
             S("copy_file_range", src="s", dst="d", n=30000, src_off=50000, dst_off=45000),
             S("open", path="new", flags=["O_RDWR", "O_CREAT"], as_="n"),
             S("copy_file_range", src="s", dst="n", n=100000, src_off=0, dst_off=0),
             CK,
             S("lseek", fd="s", off=70000), S("lseek", fd="d", off=100),
             S("copy_file_range", src="s", dst="d", n=12345),
             S("copy_file_range", src="s", dst="n", n=5000, src_off=0, dst_off=99000)]

    def at1(s):
        want = bytearray(dst)
        want[10000:30000] = src[1000:21000]
        want[45000:75000] = src[50000:80000]
        expect_file(s, "dst", bytes(want))
        expect_file(s, "new", src)

    scenario(runner, fsprogs, {"src": F(src), "dst": F(dst)}, steps,
             checks={0: lambda s: expect_file(s, "dst", dst), 1: at1})


def test_sendfile(runner, fsprogs):
    """sendfile into a regular file: over existing data at the output
    descriptor's offset, appending, with and without an input offset."""
    src, out = rbytes(110, 80000), rbytes(111, 30000)
    steps = [S("open", path="src", flags=["O_RDONLY"], as_="i"),
             S("open", path="out", flags=["O_WRONLY"], as_="o"),
             S("lseek", fd="o", off=5000),
             CK,
             S("sendfile", out="o", **{"in": "i"}, off=100, n=10000),
             S("open", path="app", flags=["O_WRONLY", "O_CREAT"], as_="a"),
             S("sendfile", out="a", **{"in": "i"}, off=0, n=40000),
             CK,
             S("lseek", fd="i", off=20000),
             S("sendfile", out="o", **{"in": "i"}, off=None, n=25000),
             S("sendfile", out="a", **{"in": "i"}, off=None, n=1000)]

    def at1(s):
        want = bytearray(out)
        want[5000:15000] = src[100:10100]
        expect_file(s, "out", bytes(want))
        expect_file(s, "app", src[:40000])
        assert s["fds"]["o"]["pos"] == 15000

    scenario(runner, fsprogs, {"src": F(src), "out": F(out)}, steps,
             checks={0: lambda s: expect_file(s, "out", out), 1: at1})


def test_mmap_shared_writes(runner, fsprogs):
    """Stores through a writable MAP_SHARED mapping (no system call) are rolled
    back like writes; the restored mapping shows the file's restored bytes.
    A file created, sized and mapped after a checkpoint vanishes."""
    old = rbytes(120, 65536)
    steps = [S("open", path="m", flags=["O_RDWR"], as_="m"),
             S("mmap", fd="m", len=65536, as_="M"),
             S("mwrite", map="M", off=0, data="before checkpoint 0"),
             CK,
             S("mwrite", map="M", off=4096, data=R(121, 3000)),
             S("mwrite", map="M", off=40000, data=R(122, 9000)),
             S("msync", map="M"),
             S("open", path="n", flags=["O_RDWR", "O_CREAT"], as_="n"),
             S("ftruncate", fd="n", len=8192),
             S("mmap", fd="n", len=8192, as_="N"),
             S("mwrite", map="N", off=10, data="new mapping"),
             CK,
             S("mwrite", map="M", off=100, data=R(123, 500)),
             S("mwrite", map="M", off=60000, data=R(124, 5000)),
             S("mwrite", map="N", off=0, data=R(125, 8192))]

    def at0(s):
        want = b"before checkpoint 0" + old[19:]
        expect_file(s, "m", want)
        assert s["maps"]["M"] == sha(want)
        expect_file(s, "n", None)

    scenario(runner, fsprogs, {"m": F(old)}, steps, checks={0: at0})


def test_mkdir_rmdir(runner, fsprogs):
    """Directories made (with files inside) and removed (empty, and a whole
    tree emptied first), renamed, re-made with another mode."""
    setup = {"e": D(), "t": D(0o750), "t/x": F(rbytes(130, 1000)), "t/sub": D(0o700),
             "t/sub/y": F(rbytes(131, 2000))}
    steps = [CK,
             S("mkdir", path="d1"), S("mkdir", path="d1/sub", mode=0o711),
             S("put", path="d1/sub/f", data=R(132, 3000)),
             S("rmdir", path="e"),
             S("unlink", path="t/sub/y"), S("rmdir", path="t/sub"), S("unlink", path="t/x"),
             S("rmdir", path="t"),
             CK,
             S("rename", src="d1", dst="d2"),
             S("mkdir", path="e", mode=0o700),
             S("mkdir", path="t"), S("put", path="t/x", data="new x")]

    def at0(s):
        t = tree(s)
        assert "d1" not in t and t["t"]["mode"] == "0o750" and t["t/sub"]["mode"] == "0o700"
        expect_file(s, "t/sub/y", rbytes(131, 2000))

    scenario(runner, fsprogs, setup, steps, checks={0: at0})


def test_link_symlink(runner, fsprogs):
    """Hard links (writes through a new link change the original; unlinking one
    name of a pre-existing pair), symlinks (new, dangling, removed, replaced by
    rename, written through)."""
    setup = {"h": F(rbytes(140, 4000)), "h2": F(rbytes(141, 3000)), "h2b": H("h2"),
             "s_old": L("h")}
    steps = [CK,
             S("link", src="h", dst="hl"),
             S("patch", path="hl", off=100, data="through the new link"),
             S("symlink", target="h", path="sl"),
             S("symlink", target="nowhere", path="dangling"),
             S("unlink", path="s_old"),
             S("unlink", path="h2b"),
             S("append", path="sl", data="through the symlink"),
             CK,
             S("rename", src="hl", dst="hl2"),
             S("unlink", path="h"),
             S("symlink", target="h2", path="s_tmp"),
             S("rename", src="s_tmp", dst="sl"),
             S("patch", path="h2", off=0, data="h2 changed")]

    def at0(s):
        t = tree(s)
        assert names(t, "h2") == ["h2", "h2b"] and t["s_old"]["target"] == "h"
        assert "hl" not in t and "sl" not in t

    def at1(s):
        t = tree(s)
        assert names(t, "h") == ["h", "hl"] and names(t, "h2") == ["h2"]
        assert t["sl"]["target"] == "h" and t["dangling"]["target"] == "nowhere"

    scenario(runner, fsprogs, setup, steps, checks={0: at0, 1: at1})


def test_chmod_and_mtime(runner, fsprogs):
    """Permission bits (chmod, fchmod) and mtimes (utime, writes) of files and
    a directory come back."""
    T = 1_500_000_000_123_456_789
    setup = {"p1": F(rbytes(150, 1000), 0o644, T), "p2": F(rbytes(151, 1000), 0o600, T + 1),
             "p3": F(rbytes(152, 1000), 0o755, T + 2), "dd": D(0o755), "dd/q": F(b"q", 0o640, T + 3)}
    steps = [S("open", path="p3", flags=["O_RDONLY"], as_="p3"),
             CK,
             S("chmod", path="p1", mode=0o600),
             S("chmod", path="p2", mode=0o640),
             S("utime", path="p3", ns=[2_000_000_000_000_000_000, 2_000_000_000_000_000_000]),
             S("fchmod", fd="p3", mode=0o700),
             S("patch", path="p1", off=0, data="x"),
             S("chmod", path="dd", mode=0o700),
             S("utime", path="dd/q", ns=[1, 1]),
             CK,
             S("chmod", path="p1", mode=0o444),
             S("utime", path="p2", ns=[0, 0]),
             S("chmod", path="dd", mode=0o755),
             S("utime", path="dd", ns=[5, 5])]

    def at0(s):
        t = tree(s)
        assert [t[p]["mode"] for p in ("p1", "p2", "p3")] == ["0o644", "0o600", "0o755"]
        assert [t[p]["mtime_ns"] for p in ("p1", "p2", "p3", "dd/q")] == [T, T + 1, T + 2, T + 3]

    scenario(runner, fsprogs, setup, steps, checks={0: at0})


def test_renameat2_exchange_noreplace(runner, fsprogs):
    """renameat2 RENAME_EXCHANGE (files, file and directory) and
    RENAME_NOREPLACE (refused over an existing file, then to a new name)."""
    setup = {"x": F(rbytes(160, 1000)), "y": F(rbytes(161, 2000)), "z": F(rbytes(162, 300)),
             "w": F(b"w"), "dir": D(), "dir/in": F(b"in")}
    steps = [CK,
             S("rename2", src="x", dst="y", flags=["exchange"]),
             S("rename2", src="z", dst="w", flags=["noreplace"], may_fail=True),
             S("rename2", src="z", dst="z2", flags=["noreplace"]),
             CK,
             S("rename2", src="x", dst="dir", flags=["exchange"]),
             S("append", path="y", data="more")]
    scenario(runner, fsprogs, setup, steps)


def test_dup_descriptors(runner, fsprogs):
    """Metamori §5.2: descriptors dup'ed before a checkpoint and closed after
    it come back at their numbers, sharing one offset; O_APPEND kept."""
    setup = {"f": F(rbytes(170, 5000)), "g": F(rbytes(171, 100))}
    steps = [S("open", path="f", flags=["O_RDWR"], as_="f"),
             S("dup", fd="f", as_="f_dup"),
             S("dup2", fd="f", to=20, as_="f_20"),
             S("open", path="g", flags=["O_WRONLY", "O_APPEND"], as_="g"),
             S("lseek", fd="f", off=1234),
             CK,
             S("write", fd="f_dup", data="via dup"),
             S("lseek", fd="f", off=0, whence=1),     # the shared offset moved: 1241
             S("close", fd="f_dup"), S("close", fd="f_20"),
             S("write", fd="f", data="moved"),
             S("write", fd="g", data="appended"),
             CK,
             S("lseek", fd="f", off=0),
             S("write", fd="f", data="again")]

    def at0(s):
        fd = s["fds"]
        assert fd["f_20"]["fd"] == 20 and fd["f"]["pos"] == fd["f_dup"]["pos"] == fd["f_20"]["pos"] == 1234

    job = scenario(runner, fsprogs, setup, steps, checks={0: at0})
    # the re-runs compared this result too: restored dups still share the offset
    assert {"lseek": 1241} in [o for _, o in job.orig.outs]


# ==========================================================================
# Standard output redirected by the shell
# ==========================================================================
def test_stdout_redirected_to_file(runner, fsprogs):
    """`lazarus run --job-stdio ... > out`: fd 1 is a file the job writes;
    restarts roll it back to the checkpoint's length, so after each restart and
    re-run every line is in it exactly once (without --job-stdio it is the
    launcher's: test_launcher_stdio.py)."""
    lines = lambda a, b: "".join(f"line {i}\n" for i in range(a, b))  # noqa: E731
    steps = [S("print", data=lines(1, 6)), CK, S("print", data=lines(6, 11)), CK,
             S("print", data=lines(11, 16))]
    job = Job(runner, fsprogs, {}, steps, report_fd=2)
    out = job.work / "out"
    # the shell opens `out` (O_TRUNC) as the runner's identity and execs lazarus
    cmd = (f"exec {LAZARUS} run -d {job.store} -i 0 -k {KEEP} --job-stdio -- {PY} -B "
           f"{fsprogs.driver} {job.scen} > {out}")
    proc = runner.start(["sh", "-c", cmd])
    rc = proc.wait(timeout=240)
    assert rc == 137, f"exit {rc}\n{proc.stderr}"
    rep = parse_report(proc.stderr)
    assert not rep.errors and rep.end, proc.stderr
    job.orig = rep
    job.all_indexes.update(i for i, _ in rep.snaps.values())
    assert out.read_text() == lines(1, 16)
    expect_file(rep.snaps[0][1], "out", lines(1, 6).encode())
    expect_file(rep.snaps[1][1], "out", lines(1, 11).encode())
    for k in (1, 0):
        r, rr = job.restart(k)
        job.check_restored(k, r, rr)
        job.check_rerun(k, r, rr)
        assert out.read_text() == lines(1, 16), f"after restart at {k}: {out.read_text()!r}"
        assert "line" not in r.stdout, f"the restarted program's fd 1 must be the file again\n{r}"
    job.finish()


# ==========================================================================
# Python buffered io, C stdio
# ==========================================================================
def test_python_buffered_io(runner, fsprogs):
    """Python's io (no C stdio): open("r+b") over existing data, seek, write,
    flush; data still in Python's buffer at a checkpoint reaches the file only
    after it (and again, once, after a restart); a text file appended."""
    old = rbytes(180, 20000)
    steps = [S("pyopen", path="pyf", mode="r+b", as_="p"),
             S("pyseek", f="p", off=100), S("pywrite", f="p", data=R(181, 50)), S("pyflush", f="p"),
             S("pyseek", f="p", off=2000), S("pywrite", f="p", data="buffered at checkpoint 0"),
             CK,
             S("pyflush", f="p"),
             S("pyopen", path="log.txt", mode="a", as_="log"),
             S("pywrite", f="log", data="appended line 1\nline 2\n"), S("pyclose", f="log"),
             S("pyseek", f="p", off=0, whence=2), S("pywrite", f="p", data="tail (buffered)"),
             CK,
             S("pyseek", f="p", off=0), S("pywrite", f="p", data="HEAD"), S("pyclose", f="p")]

    def at0(s):
        want = bytearray(old)
        want[100:150] = rbytes(181, 50)
        expect_file(s, "pyf", bytes(want))   # the buffered bytes are not in the file yet
        assert s["files"]["p"]["tell"] == 2000 + len("buffered at checkpoint 0")

    scenario(runner, fsprogs, {"pyf": F(old), "log.txt": F(b"log start\n")}, steps,
             checks={0: at0})


def test_c_stdio(runner, fsprogs, tmp_path):
    """programs/fs_stdio.c: fopen("r+") over existing data, fseek, fwrite,
    fprintf (buffered across checkpoints), fputs/fputc/putc, fopen("a"),
    fopen("w"), fread, remove, rename, ftruncate.  Each restart restores the
    files exactly; the re-run ends with the same files as the first run and as
    a run without Lazarus."""
    data = "".join(f"line {i:04d} " + "x" * 40 + "\n" for i in range(100)).encode()
    setup = {"data.txt": F(data), "log.txt": F(b"log start\n")}
    job = Job(runner, fsprogs, setup, [CK, CK, CK], prelude=False)
    job.program = [fsprogs.stdio, job.work]
    rep = job.run()
    # the same program without Lazarus
    plain = tmp_path / "plain"
    plain.mkdir()
    populate(runner, plain, {**BYSTANDERS, **setup})
    cp = subprocess.run([str(fsprogs.stdio), str(plain)], capture_output=True, text=True, timeout=60)
    prep = parse_report(cp.stdout)
    assert prep.end and sorted(prep.snaps) == [0, 1, 2], cp.stdout + cp.stderr
    for k in range(3):
        diffs = diff_snap(prep.snaps[k][1], rep.snaps[k][1], ignore_times=True)
        assert not diffs, f"checkpoint {k} under Lazarus differs from the plain run:\n" + "\n".join(diffs)
    diffs = diff_snap(prep.end, rep.end, ignore_times=True)
    assert not diffs, "the end under Lazarus differs from the plain run:\n" + "\n".join(diffs)
    # data at checkpoint 0 does not hold the bytes still buffered in the FILE
    d0 = rep.snaps[0][1]
    assert d0["stream"]["ftell"] > d0["stream"]["fdpos"], d0["stream"]
    job.restart_all()


# ==========================================================================
# --exclude, outside changes, diff, list --json
# ==========================================================================
def test_exclude_dir(runner, fsprogs):
    """Changes under an --exclude'd directory are not rolled back (nor
    touched); everything else is."""
    setup = {"excl": D(), "excl/keep.txt": F(rbytes(190, 2000)), "main.txt": F(rbytes(191, 3000))}
    steps = [CK,
             S("append", path="excl/keep.txt", data="excluded change 1\n"),
             S("put", path="excl/new.txt", data="excluded new file"),
             S("append", path="main.txt", data="rolled back 1\n"),
             S("put", path="new_main.txt", data="rolled back new file"),
             CK,
             S("append", path="excl/keep.txt", data="excluded change 2\n"),
             S("unlink", path="main.txt"),
             S("mkdir", path="excl/subdir")]
    job = Job(runner, fsprogs, setup, steps, on_restore="kill")
    job.run_opts = ["--exclude", str(job.work / "excl")]
    rep = job.run()
    inside = lambda p: p == "excl" or p.startswith("excl/")  # noqa: E731
    for k in (1, 0):
        before = {p: v for p, v in outside_tree(job.work).items() if inside(p)}
        r, rr = job.restart(k)
        snap = job.check_restored(k, r, rr, skip=inside)
        after = {p: v for p, v in outside_tree(job.work).items() if inside(p)}
        assert after == before, f"restart --at checkpoint {k} touched the excluded directory"
        diffs = diff_snap({"tree": rep.end["tree"]}, {"tree": snap["tree"]}, skip=lambda p: not inside(p))
        assert not diffs, "the excluded directory must stay as the job left it:\n" + "\n".join(diffs)
        job.check_list_after_kill_restore(k)
    job.finish()


def _one_line_refusal(r, names):
    lines = r.stderr_lines()
    assert r.rc != 0, f"restart must refuse\n{r}"
    assert len(lines) == 1 and lines[0].startswith("lazarus: "), f"want one 'lazarus: ' line\n{r}"
    assert "--force" in lines[0], f"the refusal must mention --force\n{r}"
    for n in names:
        assert n in lines[0], f"the refusal must name {n}\n{r}"


def test_outside_change_refused_then_forced(runner, fsprogs):
    """After the job stopped, something else changes files a restart would
    roll back: `restart` changes nothing, names them, mentions --force, exits
    non-zero; `--force` rolls back anyway.  Outside changes to files the
    restart would not roll back neither block it nor get undone."""
    setup = {"a.txt": F(rbytes(200, 1000)), "b.txt": F(rbytes(201, 1000)),
             "d.txt": F(rbytes(202, 1000)), "bys.txt": F(b"bystander\n")}
    steps = [S("append", path="b.txt", data="job, before checkpoint 0\n"),
             CK,
             S("append", path="a.txt", data="job, after 0\n"),
             S("put", path="c.txt", data="created by the job after 0\n"),
             S("unlink", path="d.txt"),
             CK]
    job = Job(runner, fsprogs, setup, steps, on_restore="kill")
    job.run()
    w = job.work

    def outside_append(p, text=b"outside change\n"):
        with open(p, "ab") as f:
            f.write(text)

    # 1. changes only to files a restart to 1 does not roll back: no refusal
    outside_append(w / "b.txt")
    outside_append(w / "bys.txt")
    keep = {p: stat_sig(w / p) for p in ("b.txt", "bys.txt")}
    r, rr = job.restart(1)
    changed = lambda p: p in ("b.txt", "bys.txt")  # noqa: E731
    job.check_restored(1, r, rr, skip=changed)
    assert {p: stat_sig(w / p) for p in keep} == keep, "outside changes to unrolled files were touched"

    # 2. outside changes to what a restart to 0 would roll back: refused
    # (a change within a clock tick of the stop is test_outside_change_right_after_stop's)
    time.sleep(0.1)
    names = []
    for what, path in (("append", "a.txt"), ("write", "c.txt"), ("create", "d.txt")):
        if what == "create":
            (w / path).write_bytes(b"an outsider's d.txt\n")
            if IS_ROOT:
                os.chown(w / path, runner.uid, runner.uid)
        else:
            outside_append(w / path)
        names.append(path)
        before = outside_tree(w)
        listed = runner.indexes(job.store)
        r = runner.lz("restart", "-d", job.store, "--at", str(job.index(0)), timeout=120)
        _one_line_refusal(r, names)
        assert outside_tree(w) == before, f"a refused restart changed files\n{r}"
        assert runner.indexes(job.store) == listed
    # 3. --force rolls back anyway
    r, rr = job.restart(0, "--force")
    job.check_restored(0, r, rr, skip=changed)
    assert {p: stat_sig(w / p) for p in keep} == keep, "outside changes to unrolled files were touched"
    job.check_list_after_kill_restore(0)
    job.finish()


DIFF_RE = re.compile(r"^(modified|removed|restored) +(/.*)$")


def _append_when_stopped(store: Path, path: Path, data: bytes, timeout: float = 60):
    """A thread that appends data to path the instant the job's state file
    (DIR/job, replaced by rename) says "stopped"."""
    import ctypes
    import select
    import struct
    import threading
    libc = ctypes.CDLL(None, use_errno=True)
    IN_MOVED_TO, IN_CLOSE_WRITE, IN_NONBLOCK = 0x80, 0x8, 0o4000
    ifd = libc.inotify_init1(IN_NONBLOCK)
    assert ifd >= 0
    assert libc.inotify_add_watch(ifd, str(store).encode(), IN_MOVED_TO | IN_CLOSE_WRITE) >= 0
    done = threading.Event()

    def watch():
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                select.select([ifd], [], [], 0.2)
                try:
                    buf = os.read(ifd, 65536)
                except BlockingIOError:
                    continue
                names = []
                while buf:
                    _, _, _, ln = struct.unpack("iIII", buf[:16])
                    names.append(buf[16:16 + ln].rstrip(b"\0"))
                    buf = buf[16 + ln:]
                if b"job" in names and "state=stopped" in (store / "job").read_text():
                    with open(path, "ab") as f:
                        f.write(data)
                    return
        finally:
            os.close(ifd)
            done.set()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return done


def test_outside_change_right_after_stop(runner, fsprogs):
    """An outside change made right after the job stopped (here: the instant
    DIR/job says "stopped", while `lazarus restart` is still exiting) is
    detected too.  File time stamps are coarser than the clock, so comparing
    a ctime with the time of the stop misses such changes.  Ten tries, each: a
    restart at the newest checkpoint (nothing to roll back), the program stops
    at once, the log is appended to at once, a restart at the older checkpoint
    must refuse."""
    steps = [CK, S("append", path="log", data="job line\n"), CK]
    job = Job(runner, fsprogs, {"log": F(b"start\n")}, steps, on_restore="kill")
    job.run()
    missed = []
    for i in range(10):
        line = b"outside line %d\n" % i
        done = _append_when_stopped(job.store, job.work / "log", line)
        r, rr = job.restart(1)     # the program SIGKILLs itself at once
        assert done.wait(30) and line in (job.work / "log").read_bytes(), "the append did not happen"
        r = runner.lz("restart", "-d", job.store, "--at", str(job.index(0)), timeout=120)
        if r.rc in (0, 137):
            missed.append(f"try {i}: restart --at {job.index(0)} exit {r.rc}, log now "
                          f"{(job.work / 'log').read_bytes()!r}")
            break
    assert not missed, ("an outside append right after the job stopped was not detected (and was "
                        "rolled back):\n" + "\n".join(missed))


def _diff_lines(r) -> list[str]:
    """diff's lines as "KIND PATH" (the kinds are padded to one width)."""
    out = []
    for line in r.stdout.splitlines():
        if not line.strip():
            continue
        m = DIFF_RE.match(line)
        out.append(f"{m.group(1)} {m.group(2)}" if m else line)
    return sorted(out)


def test_diff_before_restart(runner, fsprogs):
    """`lazarus diff --at N` lists what a restart to N would change (modified,
    removed, restored), changes nothing itself, and the restart then does
    exactly that."""
    setup = {"m.txt": F(rbytes(210, 1000)), "r.txt": F(rbytes(211, 1000)),
             "n.txt": F(rbytes(212, 1000)), "keep.txt": F(rbytes(213, 1000)),
             "untouched.txt": F(b"never changed\n"), "o.txt": F(b"o"), "p.txt": F(b"p")}
    steps = [CK,
             S("rename", src="p.txt", dst="o.txt"),
             S("append", path="m.txt", data="more"),
             S("unlink", path="r.txt"),
             S("rename", src="n.txt", dst="n2.txt"),
             S("put", path="new.txt", data="new"),
             S("mkdir", path="nd"),
             S("chmod", path="keep.txt", mode=0o600),
             CK,
             S("put", path="x.txt", data="x"),
             S("patch", path="m.txt", off=0, data="M"),
             CK]
    job = Job(runner, fsprogs, setup, steps, on_restore="kill")
    job.run()
    w = os.path.realpath(job.work)
    store = job.store
    before = outside_tree(job.work)
    listed = runner.list_json(store)

    def check(at, required):
        args = ["diff", "-d", store] + (["--at", str(job.index(at))] if at is not None else [])
        r = runner.lz(*args, timeout=120)
        assert r.rc == 0, str(r)
        got = _diff_lines(r)
        if not required:
            idx = job.index(2)
            assert got == [f"no file changes since checkpoint {idx}"], str(r)
            return
        want = sorted(f"{kind} {w}/{p}" for kind, p in required)
        # the work directory itself (its entries changed) may be listed too
        extra = [l for l in got if l not in want and l != f"modified {w}"]
        missing = [l for l in want if l not in got]
        assert not missing and not extra, f"diff --at checkpoint {at}:\nmissing {missing}\nextra {extra}\n{r}"

    check(None, [])
    check(2, [])
    check(1, [("modified", "m.txt"), ("removed", "x.txt")])
    check(0, [("modified", "m.txt"), ("removed", "x.txt"), ("restored", "r.txt"),
              ("restored", "n.txt"), ("removed", "n2.txt"), ("removed", "new.txt"),
              ("removed", "nd"), ("modified", "keep.txt"), ("restored", "o.txt"),
              ("restored", "p.txt")])
    assert outside_tree(job.work) == before, "diff changed files"
    assert runner.list_json(store) == listed, "diff changed the store"
    r, rr = job.restart(0)
    job.check_restored(0, r, rr)
    job.check_list_after_kill_restore(0)
    r = runner.lz("diff", "-d", store, timeout=120)
    assert _diff_lines(r) == [f"no file changes since checkpoint {job.index(0)}"], str(r)
    job.finish()
    assert stat_sig(job.work / "untouched.txt") == before["untouched.txt"][0]


def test_list_json_files_and_undo_bytes(runner, fsprogs):
    """`list --json` rows carry "files" (paths changed since the checkpoint)
    and "undo_bytes" (bytes kept to roll back to it)."""
    KB = 1024
    setup = {f"f{i}": F(rbytes(220 + i, 256 * KB)) for i in (1, 2, 3)}
    steps = [CK,
             S("patch", path="f1", off=50000, data=R(230, 10000)),
             CK,
             S("patch", path="f2", off=0, data=R(231, 20000)),
             S("patch", path="f3", off=100000, data=R(232, 30000)),
             CK]
    job = Job(runner, fsprogs, setup, steps, on_restore="kill")
    job.run()
    rows = {int(e["index"]): e for e in runner.list_json(job.store)}
    a, b, c = (rows[job.index(k)] for k in range(3))
    for e in (a, b, c):
        assert isinstance(e.get("files"), int) and isinstance(e.get("undo_bytes"), int), e
    bad = []

    def want(cond, what):
        if not cond:
            bad.append(what)

    # since A: f1 (A..B), f2 and f3 (B..C); since B: f2, f3; since C: nothing
    want((a["files"], b["files"], c["files"]) == (3, 2, 0),
         f"files of A, B, C: {(a['files'], b['files'], c['files'])}, want (3, 2, 0)")
    want(c["undo_bytes"] == 0, f"undo_bytes of C (nothing changed since): {c['undo_bytes']}")
    want(b["undo_bytes"] >= 50000, f"undo_bytes of B: {b['undo_bytes']} < the 50000 bytes overwritten since")
    want(a["undo_bytes"] >= 10000, f"undo_bytes of A: {a['undo_bytes']} < the 10000 bytes overwritten A..B")
    limit = 2 * 3 * 256 * KB + 64 * KB
    want(a["undo_bytes"] <= limit and b["undo_bytes"] <= limit, f"undo_bytes beyond {limit}: {a}, {b}")
    r, rr = job.restart(1)
    job.check_restored(1, r, rr)
    rows = {int(e["index"]): e for e in runner.list_json(job.store)}
    assert sorted(rows) == [job.index(0), job.index(1)], rows
    a, b = rows[job.index(0)], rows[job.index(1)]
    want((a["files"], b["files"]) == (1, 0),
         f"after restart --at B: files of A, B {(a['files'], b['files'])}, want (1, 0)")
    want(b["undo_bytes"] == 0 and a["undo_bytes"] >= 10000,
         f"after restart --at B: undo_bytes of A {a['undo_bytes']}, of B {b['undo_bytes']}")
    assert not bad, "\n".join(bad)
    job.finish()


def test_store_on_another_file_system(runner, fsprogs):
    """The store on tmpfs (/dev/shm), the work tree on the disk: unlinked,
    renamed-over, overwritten, hard-linked files still come back.  No hard
    link can reach the store there, so a removed file is kept as a copy and
    comes back as a copy: names, contents, modes and times are checked, the
    hard-link grouping with its other names is not (a documented limit)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.statvfs(shm).f_fsid == os.statvfs(runner.base).f_fsid:
        pytest.skip("no /dev/shm on another file system")
    store = Path(tempfile.mkdtemp(prefix="lz-store-", dir=shm))
    os.rmdir(store)
    setup = {"f": F(rbytes(240, 20000)), "g": F(rbytes(241, 3000)), "h": F(rbytes(242, 1000)),
             "h2": H("h")}
    steps = [S("open", path="f", flags=["O_RDWR"], as_="f"),
             CK,
             S("pwrite", fd="f", off=100, data=R(243, 5000)),
             S("rename", src="g", dst="h"),
             S("link", src="f", dst="f_link"),
             CK,
             S("close", fd="f"),
             S("unlink", path="f"),
             S("patch", path="h2", off=0, data="h2")]
    try:
        if IS_ROOT and runner.uid != 0:
            # the user creates it (in the sticky /dev/shm)
            runner.run(["mkdir", "-m", "700", store], check_rc=0)
        job = Job(runner, fsprogs, setup, steps, store=store)
        job.run()
        for k in sorted(job.orig.snaps, reverse=True):
            r, rep = job.restart(k)
            assert len(rep.restored) == 1, str(r)
            diffs = [d for d in diff_snap(job.orig.snaps[k][1], rep.restored[0][2]) if ": same want" not in d]
            assert not diffs, f"checkpoint {k}:\n  " + "\n  ".join(diffs[:40]) + f"\n{r.stderr[-2000:]}"
    finally:
        shutil.rmtree(store, ignore_errors=True)


def test_indexes_never_reused(runner, fsprogs):
    """After `restart --at` an older checkpoint, the checkpoints the program
    takes get indexes never used before, and `list` keeps every one of them
    (with the same index twice, the new one could be taken for the dropped
    one)."""
    steps = [CK, S("append", path="f", data="1"), CK, S("append", path="f", data="2"), CK,
             S("append", path="f", data="3")]
    job = Job(runner, fsprogs, {"f": F(b"0")}, steps)
    rep = job.run()
    first = [rep.snaps[k][0] for k in range(3)]
    r, rr = job.restart(0)
    job.check_restored(0, r, rr)
    new = [rr.snaps[k][0] for k in (1, 2)]
    listed = runner.indexes(job.store)
    assert min(new) > max(first), (f"first run took {first}; after restart --at {first[0]} the "
                                   f"program took {new}")
    assert listed == [first[0]] + new, f"list shows {listed}; want {[first[0]] + new}"




RECYCLE_PROG = r'''
import ctypes, hashlib, os, random, signal, sys
lib = ctypes.CDLL(sys.argv[1])
lib.lazarus_checkpoint.argtypes = [ctypes.POINTER(ctypes.c_ulonglong)]
fd = os.open(sys.argv[2], os.O_RDWR)
rnd = random.Random(7)
def digest():
    os.lseek(fd, 0, 0)
    return hashlib.sha256(os.read(fd, 1 << 24)).hexdigest()
for k in range(7):
    idx = ctypes.c_ulonglong(0)
    r = lib.lazarus_checkpoint(ctypes.byref(idx))
    print(("RESTORED" if r == 2 else "SNAP"), idx.value, digest(), flush=True)
    if r == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    for _ in range(900 - 80 * k):   # scattered 4 KiB overwrites, fewer each interval
        os.pwrite(fd, rnd.randbytes(4096), rnd.randrange(1024) * 4096)
os.kill(os.getpid(), signal.SIGKILL)
'''


def test_undo_space_recycled(runner):
    """With -k 2 the retention drops a checkpoint at each new one; the
    dropped journal's files.data is reused by a later interval (overwritten
    in place, longer than what it holds).  Every kept checkpoint still rolls
    back exactly, the stale bytes past the records are never used, and no
    spare is left behind once the job has stopped."""
    work = runner.mkdir("recycle")
    big = work / "big"
    big.write_bytes(rbytes(30, 4 << 20))
    os.chmod(big, 0o666)
    prog = work / "prog.py"
    prog.write_text(RECYCLE_PROG)
    store = runner.base / "store-recycle"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "-k", "2", "--", PY, "-B", prog,
                           str(LIBDIR / "liblazarus.so"), big)
    assert proc.wait(timeout=120) == 137, proc.stderr
    snaps = {int(m.group(1)): m.group(2) for m in re.finditer(r"^SNAP (\d+) (\w+)", proc.stdout, re.M)}
    assert len(snaps) == 7, proc.stdout
    kept = runner.indexes(store)
    assert kept == sorted(snaps)[-2:], f"list shows {kept}"
    assert not list(store.glob("spare.*")), "spares left after the job stopped"
    # the kept journals were written into recycled files: a dropped interval's,
    # which saved more, so longer than what their own records use
    # (undo_bytes is cumulative: a journal's own is the difference)
    cum = {row["index"]: row["undo_bytes"] for row in runner.list_json(store)}
    own = {i: cum[i] - cum.get(j, 0) for i, j in zip(kept, kept[1:] + [None])}
    sizes = {i: (store / f"ckpt.{i:06d}" / "files.data").stat().st_size for i in kept}
    assert all(sizes[i] > own[i] for i in kept), f"files.data not recycled: sizes {sizes}, used {own}"
    for i in reversed(kept):
        r = runner.lz("restart", "-d", store, "--at", str(i), timeout=120)
        m = re.search(r"^RESTORED (\d+) (\w+)", r.stdout, re.M)
        assert r.rc == 137 and m, str(r)
        assert (int(m.group(1)), m.group(2)) == (i, snaps[i]), f"restart --at {i}: other file contents"
        assert hashlib.sha256(big.read_bytes()).hexdigest() == snaps[i]
