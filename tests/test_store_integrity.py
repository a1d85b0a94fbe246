"""A damaged store never restarts into anything but the exact state (issue 15).

The store of `programs/integrity_job.c` (two checkpoints A < B of a job that
writes, appends, overwrites in the middle, truncates, renames, deletes, makes
and removes directories, from the program and from forked children, with an
open file without a name and a pipe with bytes in flight) has every one of
its files damaged in turn, each in every way:

  flip-start, flip-middle, flip-end   one bit flipped in the first, middle, last byte
  truncate-half                       cut to half its size
  zero-length                         emptied
  delete                              removed (kept directories too)
  swap-other-ckpt                     contents exchanged with the same file of the
                                      other checkpoint (when both exist and differ)
  foreign-job                         replaced by the same file of another job's
                                      store (same program, other token: other bytes)

(a keep link that is also a file of the user's tree is replaced by a damaged
copy, never written through; every other file is damaged in place),

and then, checked from outside the job:
  - `lazarus verify -d DIR` exits non-zero and names the damaged file (its
    path in DIR or its name) or its checkpoint, and changes nothing;
  - `lazarus restart -d DIR` and `lazarus restart -d DIR --at A` each either
    refuse (non-zero exit, exactly one line on stderr, the program never ran,
    store and work tree exactly as before -- contents, modes, inodes, times --
    and no process left), or restart the program in the checkpoint's step,
    with its memory (a digest of its heap, of its nameless file and of its
    pipe's bytes), and the work tree exactly the checkpoint's (paths, types,
    modes, sizes, contents, symlink targets, modification times); the
    restarted program is then SIGKILLed and its `restart` must exit 137;
  - neither may change the other job's work tree.
A damage that both restarts get through to the exact state (bytes nothing
reads, such as the zeros after the last record of a killed interval's log)
may also pass `verify`.  Anything else fails, naming the file, the damage and
the command; every damage test prints a table of its cases (one row per
file, labelled stably: proc.P for a child's journal, files.keep/{PATH} for the
keep link of what was PATH at the checkpoint; V: verify failed, R: restart,
A: restart --at A, ok, '-': the damage does not apply).

The undamaged store verifies and restarts to B's and (`--at A`) to A's exact
state (the control).  The journals name the user's files by inode, so a
scenario cannot be copied: it is made afresh (about half a second) after any
case that changed something, and reused when the damage was undone in place
and store and work tree are exactly as built (store_damage.py).

Environment:
  LAZARUS_INTEGRITY_RANDOM=N   also run N random damages (random file, random
                               bit or range or length, seeded from
                               LAZARUS_TEST_SEED); without it that test is skipped
  LAZARUS_INTEGRITY_MODE       root | user (default: both when the session is root,
                               else user)
  LAZARUS_INTEGRITY_REPORT     a file to append every case's outcome to (one
                               line each, tab-separated)
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import IS_ROOT, SEED, Runner, _compile, _user_base
from store_damage import (DAMAGES, Scenario, apply_damage, build_scenario, names_it,
                          restart_outcome, tree_state, undo, verify_outcome)

# kinds of file the scenario's store must have (the suite would prove little
# without them); new kinds the C code adds are damaged as well
REQUIRED_KINDS = {
    "job",
    "ckpt.N/manifest",
    "ckpt.N/files.log",
    "ckpt.N/files.data",
    "ckpt.N/files.keep/live",
    "ckpt.N/files.keep/gone",
    "ckpt.N/files.keep/dir",
    "ckpt.N/proc.P/files.log",
    "ckpt.N/proc.P/files.data",
    "ckpt.N/proc.P/files.keep/gone",
    "ckpt.N/pipe.I",
    "ckpt.N/ghost.FD",
    "packs/pack.N",
}

@dataclass
class CaseResult:
    label: str
    kind: str
    damage: str
    what: str = ""
    verify: str = ""
    restart: str = ""
    restart_at: str = ""
    problems: dict = field(default_factory=dict)  # command -> problem

    def line(self) -> str:
        return "\t".join([self.label, self.kind, self.damage, self.what,
                          "FAIL " + ", ".join(sorted(self.problems)) if self.problems else "ok",
                          self.verify, self.restart, self.restart_at])


class Lab:
    """The scenarios of this module: one reused while clean, the other job's
    store (for foreign-job) made once."""

    def __init__(self, runner: Runner, prog: Path, root: Path):
        self.runner = runner
        self.prog = prog
        self.root = root
        self.n = 0
        self.cur: Scenario | None = None
        self._foreign: Scenario | None = None
        self.builds = 0
        self.build_time = 0.0
        self.report = os.environ.get("LAZARUS_INTEGRITY_REPORT")
        self.control: str | None = None  # "" once the control passed

    def _build(self, token: str) -> Scenario:
        self.n += 1
        t0 = time.monotonic()
        scn = build_scenario(self.runner, self.prog, self.root / f"s{self.n}", token)
        self.build_time += time.monotonic() - t0
        self.builds += 1
        return scn

    def scenario(self) -> Scenario:
        if self.cur is None or self.cur.dirty:
            if self.cur is not None:
                shutil.rmtree(self.cur.dir, ignore_errors=True)
            self.cur = self._build("golden")
        return self.cur

    def fresh(self) -> Scenario:
        if self.cur is not None:
            self.cur.dirty = True
        return self.scenario()

    @property
    def foreign(self) -> Scenario:
        if self._foreign is None:
            self._foreign = self._build("foreign")
            # a restart that resumes the other job's program gets an answer
            (self._foreign.ctl / "ping").touch()
        return self._foreign

    def labels(self) -> list[str]:
        return sorted(self.scenario().targets)

    def case(self, label: str, damage: str, param=None) -> CaseResult | None:
        """One damage of one file, the three commands; None if the damage
        does not apply to that file."""
        foreign = self.foreign if damage == "foreign-job" else None
        scn = self.scenario()
        t = scn.targets.get(label)
        res = CaseResult(label, t.kind if t else "?", damage)
        if t is None:
            res.problems["setup"] = f"no {label} in this scenario's store: {sorted(scn.targets)}"
            return res
        ap = apply_damage(scn, t, damage, foreign, param)
        if ap is None:
            return None
        res.what = ap.what
        paths = list(ap.paths)
        # the other job's files: a journal of it must not roll them back
        others = [self._foreign.work] if self._foreign else []

        vrc, vout, vproblem = verify_outcome(self.runner, scn, others)
        res.verify = f"exit {vrc}: {' | '.join(l for l in vout.splitlines() if l.strip())[:300]}"

        o1 = restart_outcome(self.runner, scn, None, others)
        res.restart = str(o1)
        if o1.kind != "refused":
            # the store and the work tree moved on: the same damage on a new scenario
            scn = self.fresh()
            t = scn.targets.get(label)
            ap = apply_damage(scn, t, damage, foreign, param) if t else None
            if ap is None:
                res.problems["setup"] = f"{label}: {damage} does not apply to the new scenario"
                return self._done(res)
        o2 = restart_outcome(self.runner, scn, scn.a, others)
        res.restart_at = str(o2)
        if o2.kind == "refused" and ap.reusable:
            undo(ap)
            if scn.changes():
                scn.dirty = True
        else:
            scn.dirty = True
        if self._foreign and self._foreign.changes():
            # a restart rolled the other job's files back: make it again
            shutil.rmtree(self._foreign.dir, ignore_errors=True)
            self._foreign = None

        for cmd, o in (("restart", o1), ("restart --at A", o2)):
            if o.kind == "bad":
                res.problems[cmd] = o.detail
        if vproblem:
            res.problems["verify"] = vproblem
        elif not (o1.kind == "restored" and o2.kind == "restored"):
            if vrc == 0:
                res.problems["verify"] = "exit 0 (accepted a damaged store)"
            elif not names_it(vout, scn, paths):
                res.problems["verify"] = f"exit {vrc} without naming {' or '.join(paths)} or its checkpoint"
        return self._done(res)

    def _done(self, res: CaseResult) -> CaseResult:
        if self.report:
            with open(self.report, "a") as f:
                f.write(res.line() + "\n")
        return res

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def _modes() -> list[str]:
    """root and user when the session is root (the issue asks for both), else
    user; LAZARUS_INTEGRITY_MODE picks one."""
    m = os.environ.get("LAZARUS_INTEGRITY_MODE")
    if m and m not in ("root", "user"):
        raise ValueError(f"LAZARUS_INTEGRITY_MODE={m}: root or user")
    return [m] if m else (["root", "user"] if IS_ROOT else ["user"])


@pytest.fixture(scope="module", params=_modes())
def lab(request, programs, lazarus_bin):
    mode = request.param
    if mode == "root" and not IS_ROOT:
        pytest.skip("LAZARUS_INTEGRITY_MODE=root needs the session to run as root")
    if mode == "user" and IS_ROOT:
        base = _user_base()
    else:
        base = Path(tempfile.mkdtemp(prefix="lazarus-integrity-"))
        os.chmod(base, 0o755)
    prog = _compile("integrity_job", programs.dir)
    lb = Lab(Runner(mode, base), prog, base)
    yield lb
    print(f"\nintegrity: {lb.builds} scenarios made, {lb.build_time:.1f} s")
    lb.close()


def _table(results: list[CaseResult]) -> str:
    """One row per file, one column per damage: ok, '-' (does not apply) or
    the commands that failed (V verify, R restart, A restart --at A)."""
    damages = [d for d in DAMAGES if any(r.damage == d for r in results)] or \
        sorted({r.damage for r in results})
    cell = {}
    for r in results:
        letters = "".join(c for c, k in (("V", "verify"), ("R", "restart"),
                                         ("A", "restart --at A"), ("S", "setup"))
                          if k in r.problems)
        cell[(r.label, r.damage)] = letters or "ok"
    labels = sorted({r.label for r in results})
    w = max(len(l) for l in labels) if labels else 10
    out = [f"{'file':<{w}}  " + "  ".join(f"{d:>15}" for d in damages)]
    for l in labels:
        out.append(f"{l:<{w}}  " + "  ".join(f"{cell.get((l, d), '-'):>15}" for d in damages))
    return "\n".join(out)


def _failures(results: list[CaseResult]) -> str:
    out = []
    for r in results:
        for cmd, p in sorted(r.problems.items()):
            out.append(f"{r.label} [{r.damage}: {r.what}] `{cmd}`: {p}")
    return "\n".join(out)


# --------------------------------------------------------------------------
def control(lab: Lab) -> str | None:
    """None if the undamaged store has every kind of file, verifies, and
    restarts to checkpoint B's exact state, and with --at A to A's; else
    what went wrong.  Run once per module."""
    if lab.control is not None:
        return lab.control or None
    scn = lab.fresh()
    kinds = {t.kind for t in scn.targets.values()}
    print("store files:\n  " + "\n  ".join(f"{t.label}  ({t.kind}, {t.rel})"
                                            for t in sorted(scn.targets.values(), key=lambda t: t.label)))
    problem = None
    missing = REQUIRED_KINDS - kinds
    if missing:
        problem = f"the scenario's store lacks {sorted(missing)}; it has {sorted(kinds)}"
    elif scn.expected[scn.a] == scn.expected[scn.b]:
        problem = "the two checkpoints' trees do not differ"
    elif tree_state(scn.work) == scn.expected[scn.b]:
        problem = "the job changed no file after B"
    if not problem:
        vrc, vout, vproblem = verify_outcome(lab.runner, scn)
        if vrc != 0 or vproblem:
            problem = f"the intact store does not verify: exit {vrc}\n{vout}\n{vproblem or ''}"
    if not problem:
        o = restart_outcome(lab.runner, scn, None)
        if o.kind != "restored":
            problem = f"restart of the intact store: {o}"
    if not problem:
        scn = lab.fresh()
        o = restart_outcome(lab.runner, scn, scn.a)
        if o.kind != "restored":
            problem = f"restart --at {scn.a} of the intact store: {o}"
    lab.fresh()
    lab.control = problem or ""
    return problem


def test_control_undamaged_store_restarts_exactly(lab):
    """The golden store has every kind of file, verifies, and restarts to
    checkpoint B's exact state, and with --at A to A's."""
    problem = control(lab)
    assert problem is None, problem


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_store(damage, lab):
    """Every file of the store damaged this way, in turn (see the module's
    docstring for what each command must do)."""
    if control(lab):
        pytest.fail(f"cannot judge damages, the undamaged store fails: {control(lab)}", pytrace=False)
    t0 = time.monotonic()
    builds0 = lab.builds
    results = []
    for label in lab.labels():
        r = lab.case(label, damage)
        if r is not None:
            results.append(r)
    assert results, f"{damage} applied to no file of the store"
    bad = [r for r in results if r.problems]
    summary = (f"{damage}: {len(results)} cases, {len(bad)} failing, "
               f"{lab.builds - builds0} scenarios made, {time.monotonic() - t0:.1f} s\n"
               + _table(results))
    print(summary)
    if bad:
        pytest.fail(summary + "\n\n" + _failures(bad), pytrace=False)


def test_random_damages(lab):
    """LAZARUS_INTEGRITY_RANDOM=N damages, each one file of the store with a
    random bit flipped, random bytes written, a random length, junk appended,
    or any of the fixed damages; seeded from LAZARUS_TEST_SEED."""
    n = int(os.environ.get("LAZARUS_INTEGRITY_RANDOM", "0") or 0)
    if n <= 0:
        pytest.skip("set LAZARUS_INTEGRITY_RANDOM=N for N random damages")
    if control(lab):
        pytest.fail(f"cannot judge damages, the undamaged store fails: {control(lab)}", pytrace=False)
    rng = random.Random(f"{SEED}:store-integrity")
    print(f"random seed: LAZARUS_TEST_SEED={SEED}, {n} damages")
    labels = lab.labels()
    results = []
    tries = 0
    while len(results) < n and tries < 20 * n:
        tries += 1
        label = rng.choice(labels)
        how = rng.choice(["flip-at", "flip-at", "flip-at", "overwrite-at", "truncate-at",
                          "append-junk"] + DAMAGES)
        param = None
        if how == "flip-at":
            param = (rng.randrange(1 << 30), 1 << rng.randrange(8))
        elif how == "overwrite-at":
            param = (rng.randrange(1 << 30), bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))
        elif how == "truncate-at":
            param = rng.randrange(1 << 30)
        elif how == "append-junk":
            param = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096)))
        r = lab.case(label, how, param)
        if r is not None:
            results.append(r)
    bad = [r for r in results if r.problems]
    summary = f"{len(results)} random damages, {len(bad)} failing\n" + _table(results)
    print(summary)
    if bad:
        pytest.fail(summary + "\n\n" + _failures(bad), pytrace=False)
