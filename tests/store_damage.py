"""Helpers of tests/test_store_integrity.py: the integrity_job scenario (a
store of two checkpoints and the work directory they roll back), snapshots of
both taken from outside, damages applied to one file of the store (and undone
when they can be), and the checks of `verify`, `restart` and `restart --at`
on a damaged store.

A scenario cannot be copied: the journals name the user's files by device and
inode and keep hard links to them, so a copy of the work directory is another
set of files.  A scenario is therefore made afresh (integrity_job takes about
half a second) whenever a case changed something, and reused while every case
on it left the store and the work directory exactly as they were (inodes and
ctimes included) and its damage was undone in place.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import IS_ROOT, Proc, Runner, stray_children, find_program, reap_orphans, wait_gone

READY_RE = r"^ready {step} pid (\d+) token (\S+) digest ([0-9a-f]{{16}})$"
PONG_RE = re.compile(r"^pong (\d+) pid (\d+) token (\S+) digest ([0-9a-f]{16})$", re.M)
COMM = "integrity_job"
NOT_TARGETS = {"lock", "gc.lock", "ctl.sock"}  # no data: flock()ed, or a socket


# --------------------------------------------------------------------------
# Snapshots
# --------------------------------------------------------------------------
def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _walk(top: Path):
    """Every entry below top (and top itself as '.'), sorted."""
    out = [(".", top)]
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for n in sorted(dirs + files):
            p = Path(root) / n
            out.append((str(p.relative_to(top)), p))
    return out


def _entry(p: Path, st) -> tuple:
    """Type, permission bits, size, content hash or symlink target."""
    if stat.S_ISREG(st.st_mode):
        return ("file", oct(stat.S_IMODE(st.st_mode)), st.st_size, _sha(p))
    if stat.S_ISLNK(st.st_mode):
        return ("symlink", os.readlink(p))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", oct(stat.S_IMODE(st.st_mode)))
    return ("other", oct(st.st_mode))


def tree_state(top: Path, times: bool = False) -> dict:
    """The user-visible state of a work tree: path -> (type, mode, size,
    sha256 | symlink target), with modification times if asked."""
    out = {}
    for rel, p in _walk(top):
        st = p.lstat()
        e = _entry(p, st)
        if times and e[0] != "symlink":
            e = e + (st.st_mtime_ns,)
        out[rel] = e
    return out


def full_state(top: Path) -> dict:
    """Everything about a tree a command could change: the tree state plus
    owner, inode, link count, modification and change times."""
    out = {}
    for rel, p in _walk(top):
        st = p.lstat()
        out[rel] = _entry(p, st) + (st.st_uid, st.st_gid, st.st_ino, st.st_nlink,
                                    st.st_mtime_ns, st.st_ctime_ns)
    return out


def store_state(store: Path, ids: bool = False) -> dict:
    """The store's content: path -> (type, mode, size, sha256); with inode
    and link count if ids (what a reuse of the scenario needs)."""
    out = {}
    for rel, p in _walk(store):
        st = p.lstat()
        e = _entry(p, st) + (st.st_uid,)
        if ids:
            e = e + (st.st_ino, st.st_nlink)
        out[rel] = e
    return out


def inode_map(top: Path) -> dict:
    return {p.lstat().st_ino: rel for rel, p in _walk(top)}


def state_diff(before: dict, after: dict, limit: int = 6) -> str:
    """A short description of how two snapshots differ."""
    out = []
    for k in sorted(set(before) | set(after)):
        if before.get(k) != after.get(k):
            if k not in after:
                out.append(f"{k}: gone")
            elif k not in before:
                out.append(f"{k}: new {after[k][:3]}")
            else:
                out.append(f"{k}: {before[k]} -> {after[k]}")
    more = f" (+{len(out) - limit} more)" if len(out) > limit else ""
    return "; ".join(out[:limit]) + more


# --------------------------------------------------------------------------
# The scenario
# --------------------------------------------------------------------------
@dataclass
class Target:
    label: str       # stable across scenarios: ckpt.000002/proc.P/files.keep/{h.txt}
    rel: str         # the path in this scenario's store
    kind: str        # the file's kind, for the tables: ckpt.N/files.keep/gone
    ckpt: int | None  # the checkpoint it belongs to (a pack: the one that wrote it)
    is_dir: bool
    shared: bool     # a regular file whose inode has other links (keep links)


@dataclass
class Scenario:
    dir: Path
    store: Path
    work: Path
    ctl: Path
    aside: Path
    token: str
    a: int
    b: int
    ready: dict                      # step -> (pid, digest)
    expected: dict                   # checkpoint index -> tree_state
    expected_times: dict             # checkpoint index -> tree_state with mtimes
    steps: dict                      # checkpoint index -> the program's step
    golden_store: dict = field(default_factory=dict)
    golden_work: dict = field(default_factory=dict)
    targets: dict = field(default_factory=dict)  # label -> Target
    dirty: bool = False

    def path(self, t: Target) -> Path:
        return self.store / t.rel

    def changes(self) -> str | None:
        """None if store and work tree are exactly as built, else how not."""
        s = store_state(self.store, ids=True)
        if s != self.golden_store:
            return "store: " + state_diff(self.golden_store, s)
        w = full_state(self.work)
        if w != self.golden_work:
            return "work tree: " + state_diff(self.golden_work, w)
        return None


def _canon(rel: str, ino_maps: dict, st, work_inodes: set) -> tuple[str, str, int | None]:
    """(label, kind, checkpoint) of a store entry."""
    parts = rel.split("/")
    ckpt = None
    label, kind = [], []
    i = 0
    while i < len(parts):
        p = parts[i]
        m = re.fullmatch(r"(ckpt|jrnl)\.(\d{6})", p)
        if m:
            ckpt = int(m.group(2))
            label.append(p)
            kind.append(f"{m.group(1)}.N")
        elif re.fullmatch(r"proc\.\d+", p):
            label.append("proc.P")
            kind.append("proc.P")
        elif p == "files.keep" and i + 1 < len(parts):
            # a keep link or kept directory: named by the path its inode had
            # at the checkpoint (the journal's interval starts there)
            role = None
            for idx in ([ckpt] if ckpt in ino_maps else []) + sorted(ino_maps):
                role = ino_maps[idx].get(st.st_ino)
                if role:
                    break
            label.append("files.keep/{" + (role or "?") + "}")
            if stat.S_ISDIR(st.st_mode):
                kind.append("files.keep/dir")
            elif st.st_ino in work_inodes:
                kind.append("files.keep/live")   # also a file of the user's tree
            else:
                kind.append("files.keep/gone")   # only in the store
            break
        elif re.fullmatch(r"pack\.\d{6}(\.\d+)?", p):
            ckpt = int(p[5:11])
            label.append(p if "." not in p[5:] else p[:11] + ".P")
            kind.append("pack.N" if "." not in p[5:] else "pack.N.P")
        elif re.fullmatch(r"(pipe|sock)\.\d+", p):
            label.append(p.split(".")[0] + ".I")
            kind.append(p.split(".")[0] + ".I")
        elif re.fullmatch(r"ghost\.\d+", p):
            label.append(p)
            kind.append("ghost.FD")
        else:
            label.append(p)
            kind.append(p)
        i += 1
    return "/".join(label), "/".join(kind), ckpt


def collect_targets(scn: Scenario, ino_maps: dict) -> dict:
    work_inodes = {p.lstat().st_ino for _, p in _walk(scn.work)}
    out = {}
    for rel, p in _walk(scn.store):
        if rel == ".":
            continue
        st = p.lstat()
        in_keep = "/files.keep/" in "/" + rel and re.search(r"files\.keep/[^/]+$", rel)
        if stat.S_ISREG(st.st_mode):
            if rel in NOT_TARGETS:
                continue
        elif not (stat.S_ISDIR(st.st_mode) and in_keep):
            continue
        label, kind, ckpt = _canon(rel, ino_maps, st, work_inodes)
        n, base = 2, label
        while label in out:  # two entries with one name (should not happen)
            label = f"{base}#{n}"
            n += 1
        out[label] = Target(label, rel, kind, ckpt, stat.S_ISDIR(st.st_mode),
                            stat.S_ISREG(st.st_mode) and st.st_nlink > 1)
    return out


def build_scenario(runner: Runner, prog: Path, where: Path, token: str) -> Scenario:
    """Run integrity_job under `lazarus run -i 0`: checkpoint A after step 1,
    B after step 2, SIGKILL after step 3.  The expected trees are snapshots
    of the work directory taken while the program waits at A and at B."""
    where.mkdir(mode=0o755)
    store, work, ctl, aside = where / "store", where / "work", where / "ctl", where / "aside"
    if IS_ROOT:
        os.chown(where, runner.uid, runner.uid)
    for d in (work, ctl, aside):
        d.mkdir(mode=0o755)
        if IS_ROOT:
            os.chown(d, runner.uid, runner.uid)
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", prog, work, ctl, token)
    ready, expected, expected_t, steps, ino_maps = {}, {}, {}, {}, {}
    idx = {}
    try:
        for step in (1, 2, 3):
            m = proc.wait_for_output(READY_RE.format(step=step), timeout=60)
            assert m.group(2) == token, proc.stdout
            ready[step] = (int(m.group(1)), m.group(3))
            if step == 3:
                break
            i = runner.checkpoint(store)
            idx[step] = i
            steps[i] = step
            expected[i] = tree_state(work)
            expected_t[i] = tree_state(work, times=True)
            ino_maps[i] = inode_map(work)
            (ctl / f"go.{step}").touch()
        pid = find_program(proc.pid, COMM)
        assert pid is not None, f"no integrity_job under the supervisor\n{proc.stderr}"
        os.kill(pid, signal.SIGKILL)
        rc = proc.wait(timeout=60)
        assert rc == 137, f"supervisor exited {rc} after SIGKILL of the program, want 137\n{proc.stderr}"
        wait_gone([pid])
    except BaseException:
        proc.kill()
        raise
    assert "FAIL" not in proc.stdout, proc.stdout
    for step in (1, 2):  # a restarted program waits again
        (ctl / f"go.{step}").unlink()
    a, b = idx[1], idx[2]
    assert a < b, idx
    scn = Scenario(where, store, work, ctl, aside, token, a, b, ready, expected, expected_t, steps)
    scn.targets = collect_targets(scn, ino_maps)
    scn.golden_store = store_state(store, ids=True)
    scn.golden_work = full_state(work)
    return scn


# --------------------------------------------------------------------------
# Damages
# --------------------------------------------------------------------------
FLIP = 0x10


@dataclass
class Applied:
    """What a damage did, so that it can be undone in place."""
    what: str                          # human-readable
    paths: list                        # store paths damaged (for `verify`'s naming)
    undo: list = field(default_factory=list)  # (path, original bytes | None, aside path | None)
    reusable: bool = True              # the scenario can be used again after undo


def _put(path: Path, data: bytes, applied: Applied, uid=None, gid=None):
    """Make path hold data.  A file with other hard links (a keep link to a
    file of the user's tree) is replaced by a new file, never written through
    (that would change the user's file); any other is rewritten in place, as
    a disk would damage it."""
    st = path.lstat()
    if st.st_nlink > 1:
        tmp = path.parent / (".damage." + path.name)
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        if IS_ROOT:
            os.chown(tmp, st.st_uid, st.st_gid)
        os.rename(tmp, path)
        applied.reusable = False
        return
    applied.undo.append((path, path.read_bytes(), None))
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate(len(data))


def _flip_at(path: Path, off: int, bit: int, applied: Applied):
    data = bytearray(path.read_bytes())
    data[off] ^= bit
    _put(path, bytes(data), applied)


def _delete(path: Path, scn: Scenario, applied: Applied):
    st = path.lstat()
    if stat.S_ISDIR(st.st_mode) or st.st_nlink > 1:
        # a kept directory or a keep link: gone for good (its inode's ctime
        # changes with its link count)
        shutil.rmtree(path) if stat.S_ISDIR(st.st_mode) else path.unlink()
        applied.reusable = False
        return
    aside = scn.aside / f"{len(os.listdir(scn.aside))}.{path.name}"
    os.rename(path, aside)
    applied.undo.append((path, None, aside))


def undo(applied: Applied):
    for path, data, aside in reversed(applied.undo):
        if aside is not None:
            os.rename(aside, path)
        else:
            with open(path, "r+b") as f:
                f.write(data)
                f.truncate(len(data))


# the fixed damages, each applied to every file of the store (apply_damage
# also knows flip-at, truncate-at, overwrite-at and append-junk, with
# parameters, for the random run)
DAMAGES = ["flip-start", "flip-middle", "flip-end", "truncate-half", "zero-length",
           "delete", "swap-other-ckpt", "foreign-job"]


def counterpart(scn: Scenario, t: Target) -> Target | None:
    """The same file of the other checkpoint (same label with the other
    index; else the first of the same kind there)."""
    if t.ckpt is None or t.is_dir:
        return None
    other = scn.b if t.ckpt == scn.a else scn.a
    lab = t.label.replace(f"{t.ckpt:06d}", f"{other:06d}")
    c = scn.targets.get(lab)
    if c is None:
        same = sorted(x.label for x in scn.targets.values()
                      if x.kind == t.kind and x.ckpt == other and not x.is_dir)
        c = scn.targets[same[0]] if same else None
    return c


def foreign_of(foreign: Scenario, t: Target) -> Target | None:
    """The same file of the other job's store (same label; else the first of
    the same kind and checkpoint)."""
    if t.is_dir:
        return None
    c = foreign.targets.get(t.label)
    if c is None:
        same = sorted(x.label for x in foreign.targets.values()
                      if x.kind == t.kind and x.ckpt == t.ckpt and not x.is_dir)
        c = foreign.targets[same[0]] if same else None
    return c


def apply_damage(scn: Scenario, t: Target, damage: str, foreign: Scenario | None,
                 param=None) -> Applied | None:
    p = scn.path(t)
    keep = "files.keep/" in t.rel
    size = None if t.is_dir else p.lstat().st_size
    ap = Applied(damage, [t.rel])
    if keep:
        # ctime of the kept inode changes, and a refusal may name it
        ap.reusable = False
    if damage.startswith("flip-"):
        if t.is_dir or size == 0:
            return None
        off = {"flip-start": 0, "flip-middle": size // 2, "flip-end": size - 1}.get(damage)
        bit = FLIP
        if damage == "flip-at":
            off, bit = param
            off %= size
        ap.what = f"bit 0x{bit:02x} of byte {off} of {size} flipped"
        _flip_at(p, off, bit, ap)
    elif damage == "truncate-half":
        if t.is_dir or size == 0:
            return None
        ap.what = f"truncated from {size} to {size // 2} bytes"
        _put(p, p.read_bytes()[:size // 2], ap)
    elif damage == "truncate-at":
        if t.is_dir or size == 0:
            return None
        n = param % size
        ap.what = f"truncated from {size} to {n} bytes"
        _put(p, p.read_bytes()[:n], ap)
    elif damage == "zero-length":
        if t.is_dir or size == 0:
            return None
        ap.what = f"emptied ({size} bytes)"
        _put(p, b"", ap)
    elif damage == "overwrite-at":
        if t.is_dir or size == 0:
            return None
        off, junk = param
        off %= size
        data = bytearray(p.read_bytes())
        data[off:off + len(junk)] = junk
        ap.what = f"{len(junk)} random bytes written at {off} of {size}"
        _put(p, bytes(data), ap)
    elif damage == "append-junk":
        if t.is_dir:
            return None
        ap.what = f"{len(param)} random bytes appended to its {size}"
        _put(p, p.read_bytes() + param, ap)
    elif damage == "delete":
        ap.what = "deleted" + (" (a kept directory)" if t.is_dir else "")
        _delete(p, scn, ap)
    elif damage == "swap-other-ckpt":
        c = counterpart(scn, t)
        if c is None:
            return None
        q = scn.path(c)
        mine, theirs = p.read_bytes(), q.read_bytes()
        if mine == theirs:
            return None
        ap.what = f"swapped with {c.label}"
        ap.paths.append(c.rel)
        if "files.keep/" in c.rel:
            ap.reusable = False
        _put(p, theirs, ap)
        _put(q, mine, ap)
    elif damage == "foreign-job":
        c = foreign_of(foreign, t) if foreign else None
        if c is None:
            return None
        theirs = foreign.path(c).read_bytes()
        if theirs == p.read_bytes():
            return None
        ap.what = f"replaced by the other job's {c.label}"
        _put(p, theirs, ap)
    else:
        raise ValueError(damage)
    return ap


# --------------------------------------------------------------------------
# Commands and their outcomes
# --------------------------------------------------------------------------
def names_it(text: str, scn: Scenario, paths: list) -> bool:
    """The output names a damaged file (path relative to DIR or base name)
    or the checkpoint it belongs to."""
    for rel in paths:
        base = rel.rsplit("/", 1)[-1]
        if rel in text or re.search(rf"(?<![\w.]){re.escape(base)}(?![\w])", text):
            return True
        m = re.search(r"(?:ckpt|jrnl|pack)\.(\d{6})", rel)
        if m:
            i = int(m.group(1))
            if re.search(rf"(?:ckpt|jrnl|pack)\.{i:06d}|checkpoint\s+0*{i}\b", text, re.I):
                return True
    return False


def _no_children(timeout: float = 5) -> list:
    deadline = time.monotonic() + timeout
    while True:
        reap_orphans()
        left = stray_children()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@dataclass
class Outcome:
    kind: str        # "refused", "restored", "bad"
    detail: str      # the refusal line, or what went wrong

    def __str__(self):
        return f"{self.kind}: {self.detail}"


def _others_state(others) -> dict:
    return {str(d): full_state(d) for d in others}


def restart_outcome(runner: Runner, scn: Scenario, at: int | None, others=(),
                    timeout: float = 30) -> Outcome:
    """`lazarus restart -d DIR [--at N]` on a damaged store: either it
    refuses (non-zero, one line on stderr, nothing printed by the program,
    store and work tree exactly as before, no process left) or the program
    answers from the checkpoint's step, with its memory digest and token, and
    the work tree is exactly the checkpoint's (modification times included:
    the rollback restores them).  `others` are other users' trees (the other
    job's work directory) that nothing may change either way.  The restarted
    program is killed afterwards."""
    want = scn.b if at is None else at
    before_store = store_state(scn.store)
    before_work = full_state(scn.work)
    before_others = _others_state(others)
    ping = scn.ctl / "ping"
    ping.touch()
    args = ["restart", "-d", scn.store] + ([] if at is None else ["--at", str(at)])
    proc = runner.start_lz(*args)
    try:
        deadline = time.monotonic() + timeout
        pong = None
        while time.monotonic() < deadline:
            pong = PONG_RE.search(proc.stdout)
            if pong or proc.poll() is not None:
                break
            time.sleep(0.01)
        if pong is None and proc.poll() is None:
            proc.kill()
            return Outcome("bad", f"neither refused nor resumed within {timeout:.0f} s; "
                                  f"stderr: {proc.stderr.strip()[-300:]!r}")
        if pong is not None:
            o = _resumed(scn, proc, pong, want)
            after_others = _others_state(others)
            if after_others != before_others:
                o = Outcome("bad", (o.detail + "; " if o.kind == "bad" else "")
                            + _others_diff(before_others, after_others))
            return o
        rc = proc.wait(timeout=5)
        problems = []
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        if rc == 0:
            problems.append("exit 0")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr")
        if proc.stdout:
            problems.append(f"the program printed {proc.stdout.strip()[-200:]!r}")
        after_store = store_state(scn.store)
        if after_store != before_store:
            problems.append("store changed: " + state_diff(before_store, after_store))
        after_work = full_state(scn.work)
        if after_work != before_work:
            problems.append("work tree changed: " + state_diff(before_work, after_work))
        after_others = _others_state(others)
        if after_others != before_others:
            problems.append(_others_diff(before_others, after_others))
        left = _no_children()
        if left:
            problems.append(f"processes left: {left}")
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if problems:
            err = " | ".join(lines[:3])
            return Outcome("bad", f"exit {rc}: " + "; ".join(problems) + f"; stderr: {err[:300]!r}")
        return Outcome("refused", lines[0])
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            ping.unlink()
        except FileNotFoundError:
            pass


def _others_diff(before: dict, after: dict) -> str:
    return "; ".join(f"{d} changed: " + state_diff(before[d], after[d])
                     for d in before if before[d] != after[d])


def _resumed(scn: Scenario, proc: Proc, pong, want: int) -> Outcome:
    step, pid, token, digest = int(pong.group(1)), int(pong.group(2)), pong.group(3), pong.group(4)
    problems = []
    wstep = scn.steps[want]
    if token != scn.token:
        problems.append(f"the other job's program resumed (token {token})")
    if step != wstep:
        problems.append(f"resumed at step {step}, checkpoint {want} was taken at step {wstep}")
    elif digest != scn.ready[step][1]:
        problems.append(f"memory digest {digest}, want {scn.ready[step][1]}")
    got = tree_state(scn.work, times=True)
    if got != scn.expected_times[want]:
        problems.append(f"work tree is not checkpoint {want}'s: "
                        + state_diff(scn.expected_times[want], got))
    # stop it: SIGKILL the program; the supervisor exits 137
    prog = find_program(proc.pid, COMM)
    if prog is None:
        problems.append("no program under the restart")
        proc.kill()
    else:
        os.kill(prog, signal.SIGKILL)
        try:
            rc = proc.wait(timeout=30)
            if rc != 137:
                problems.append(f"restart exited {rc} after SIGKILL of the program, want 137")
        except AssertionError as e:
            problems.append(str(e).splitlines()[0])
        wait_gone([prog])
    if problems:
        return Outcome("bad", "; ".join(problems))
    return Outcome("restored", f"checkpoint {want} (step {step})")


def verify_outcome(runner: Runner, scn: Scenario, others=()) -> tuple[int, str, str | None]:
    """(exit status, output, problem) of `lazarus verify -d DIR`; a verify
    that changes the store, the work tree or `others` is a problem in itself."""
    before_store = store_state(scn.store)
    before_work = full_state(scn.work)
    before_others = _others_state(others)
    r = runner.lz("verify", "-d", scn.store, timeout=120)
    problem = None
    after_store = store_state(scn.store)
    if after_store != before_store:
        problem = "verify changed the store: " + state_diff(before_store, after_store)
    after_work = full_state(scn.work)
    if after_work != before_work:
        problem = "verify changed the work tree: " + state_diff(before_work, after_work)
    after_others = _others_state(others)
    if after_others != before_others:
        problem = "verify: " + _others_diff(before_others, after_others)
    return r.rc, (r.stdout + r.stderr), problem
