"""File rollback with real programs (issue 3): gzip, sort, sqlite3, a Python
and a C program writing files are SIGKILLed at random instants, resumed with
`lazarus restart` until they finish, and must leave exactly the files (names,
bytes, permission bits, which names are hard links) of an uninterrupted run without Lazarus
in another directory.  Also: a SIGKILL while a checkpoint is being written,
and SIGKILLs of `lazarus restart` while it rolls files back.

The big inputs (200 MB for gzip, 300 MB for sort, a 100 000-statement SQL
script) are generated once per session from a fixed seed into a cache
directory; the kill instants come from LAZARUS_TEST_SEED."""
import copy
import hashlib
import os
import random
import re
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (PROGRAMS_SRC, _compile, find_program, kill_program, kill_tree,
                      run_until_done, tmp_entries, wait_gone)

KILLS = 4
INPUT_SEED = 3141  # fixed: the inputs never change with LAZARUS_TEST_SEED
GZIP_BYTES = 200 << 20
SORT_BYTES = 300 << 20
SQL_STATEMENTS = 100_000
SQL_TX = 12  # statements per transaction: ~8300 commits, each with a journal and fsyncs
PYOPS_STEPS = "16000"  # ~9 s uninterrupted (4 kills need ~5 s of it); a segment runs ~3000-4000 steps
CSTDIO_ROUNDS = "5600"  # ~8 s uninterrupted (4 kills need ~5 s of it)
FIXED_MTIME = 1_600_000_000
ROOT_ONLY = pytest.mark.parametrize("mode", ["root"], indirect=True)
PLAIN_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


# --------------------------------------------------------------------------
# Inputs, generated once per session
# --------------------------------------------------------------------------
def gen_text(path: Path, size: int, seed: int, newlines: int) -> None:
    """size bytes of lowercase words, spaces and newlines (newlines/256 of
    the characters), a third of the MiB blocks repeating earlier ones: text
    that compresses to about 60%."""
    rng = random.Random(seed)
    tab = bytearray(256)
    alpha = b"etaoinshrdlucmfwypvbgkqjxz"
    for i in range(256):
        if i < newlines:
            tab[i] = 10
        elif i < newlines + 24:
            tab[i] = 32
        else:
            tab[i] = alpha[(i * 7) % 26 if i % 3 else i % 6]
    tab = bytes(tab)
    blocks = []
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(1 << 20, left)
            if blocks and rng.random() < 0.3:
                b = rng.choice(blocks)[:n]
            else:
                b = rng.randbytes(n).translate(tab)
                if len(blocks) < 16:
                    blocks.append(b)
            f.write(b)
            left -= n


def gen_sql(path: Path, seed: int) -> None:
    """SQL_STATEMENTS inserts/updates/deletes in transactions of SQL_TX, on a
    table with an index; progress SELECTs; a final summary line."""
    rng = random.Random(seed)
    out = ["SELECT 'start';",
           "PRAGMA journal_mode=DELETE;",
           "PRAGMA synchronous=FULL;",
           "CREATE TABLE kv(id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB, n INTEGER);",
           "CREATE INDEX kv_k ON kv(k);"]
    nid = stmts = tx = 0
    while stmts < SQL_STATEMENTS:
        out.append("BEGIN;")
        for _ in range(SQL_TX):
            r = rng.random()
            if nid < 10 or r < 0.55:
                nid += 1
                out.append(f"INSERT INTO kv(id,k,v,n) VALUES({nid},'k{rng.randrange(1 << 30):x}',"
                           f"x'{rng.randbytes(rng.randrange(20, 200)).hex()}',{rng.randrange(1000)});")
            elif r < 0.95:
                out.append(f"UPDATE kv SET n=n+{rng.randrange(100)}, "
                           f"v=x'{rng.randbytes(rng.randrange(20, 300)).hex()}' "
                           f"WHERE id={rng.randrange(1, nid + 1)};")
            else:
                out.append(f"DELETE FROM kv WHERE id={rng.randrange(1, nid + 1)};")
            stmts += 1
        out.append("COMMIT;")
        tx += 1
        if tx % 500 == 0:
            out.append(f"SELECT 'progress {tx}', count(*), total(n) FROM kv;")
    out.append("SELECT 'done', count(*), total(n), total(length(v)), max(id) FROM kv;")
    path.write_text("\n".join(out) + "\n")


class Inputs:
    def __init__(self, d: Path):
        self.dir = d
        self.gzip_src = d / "gzip-input.txt"
        self.sort_src = d / "sort-input.txt"
        self.sql = d / "script.sql"
        self.existing = d / "existing.dat"  # fs_cstdio's r+ file
        self.ro = d / "ro.dat"              # fs_cstdio's read-only input


@pytest.fixture(scope="session")
def fs_inputs():
    d = Path(tempfile.mkdtemp(prefix="lazarus-fsinputs-", dir="/tmp"))
    os.chmod(d, 0o755)
    t = time.monotonic()
    inp = Inputs(d)
    gen_text(inp.gzip_src, GZIP_BYTES, INPUT_SEED, newlines=8)
    gen_text(inp.sort_src, SORT_BYTES, INPUT_SEED + 1, newlines=24)
    gen_sql(inp.sql, INPUT_SEED + 2)
    rng = random.Random(INPUT_SEED + 3)
    inp.existing.write_bytes(rng.randbytes(4 << 20))
    inp.ro.write_bytes(rng.randbytes(1 << 20))
    for p in d.iterdir():
        os.chmod(p, 0o644)
    print(f"inputs generated in {time.monotonic() - t:.1f}s")
    yield inp
    shutil.rmtree(d, ignore_errors=True)


class FsProgs:
    def __init__(self, d: Path):
        self.fs_cstdio = _compile("fs_cstdio", d)
        self.fs_pyops = d / "fs_pyops.py"
        shutil.copy(PROGRAMS_SRC / "fs_pyops.py", self.fs_pyops)
        os.chmod(self.fs_pyops, 0o644)


@pytest.fixture(scope="session")
def fs_progs(programs):
    return FsProgs(programs.dir)


# --------------------------------------------------------------------------
# Trees and references
# --------------------------------------------------------------------------
def sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def tree(root: Path) -> dict:
    """Every entry below root: kind, permission bits, the other names below
    root that are hard links to it, size and content hash (files), target
    (symlinks).  (st_nlink itself would count links outside root.)"""
    out = {}
    inodes: dict = {}
    for dirpath, dirs, files in os.walk(root):
        for n in files:
            p = Path(dirpath) / n
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                inodes.setdefault((st.st_dev, st.st_ino), []).append(str(p.relative_to(root)))
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            st = p.lstat()
            rel = str(p.relative_to(root))
            perm = oct(stat.S_IMODE(st.st_mode))
            if stat.S_ISREG(st.st_mode):
                links = tuple(sorted(x for x in inodes[(st.st_dev, st.st_ino)] if x != rel))
                out[rel] = ("file", perm, links, st.st_size, sha256_file(p))
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", perm)
            else:
                out[rel] = ("other", oct(st.st_mode))
    return out


def first_difference(a: Path, b: Path):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        off = 0
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                for i in range(min(len(x), len(y))):
                    if x[i] != y[i]:
                        return off + i
                return off + min(len(x), len(y))
            if not x:
                return None
            off += len(x)


def assert_same_tree(got_root: Path, want_root: Path, info: str = "") -> None:
    got, want = tree(got_root), tree(want_root)
    if got == want:
        return
    lines = []
    for k in sorted(set(got) | set(want)):
        g, w = got.get(k), want.get(k)
        if g == w:
            continue
        if g is None:
            lines.append(f"  missing {k}: want {w}")
        elif w is None:
            lines.append(f"  extra   {k}: {g}")
        else:
            extra = ""
            if g[0] == w[0] == "file" and g[4] != w[4]:
                extra = f" (first differing byte at {first_difference(got_root / k, want_root / k)})"
            lines.append(f"  differs {k}: got {g[:4]} want {w[:4]}{extra}")
    raise AssertionError(f"{got_root} is not what the uninterrupted run left in {want_root}:\n"
                         + "\n".join(lines[:60]) + ("\n" + info if info else ""))


def stat_id(p: Path):
    st = p.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, stat.S_IMODE(st.st_mode))


def plain_env(home: Path) -> dict:
    return {"PATH": PLAIN_PATH, "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": str(home)}


def plain_run(argv, cwd: Path, timeout: float = 300) -> str:
    """An uninterrupted run without Lazarus; returns its stdout."""
    t = time.monotonic()
    cp = subprocess.run([str(a) for a in argv], cwd=cwd, env=plain_env(cwd), capture_output=True,
                        stdin=subprocess.DEVNULL, timeout=timeout)
    assert cp.returncode == 0, f"plain run failed ({cp.returncode}): {argv}\n{cp.stdout[-2000:]}" \
                               f"\n{cp.stderr[-2000:]}"
    print(f"plain run {Path(str(argv[0])).name}: {time.monotonic() - t:.1f}s")
    return cp.stdout.decode(errors="replace")


def prepare_cstdio(work: Path, inp: Inputs, uid=None) -> None:
    for src in (inp.existing, inp.ro):
        dst = work / src.name
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)
        if uid is not None:
            os.chown(dst, uid, uid)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, fs_progs, fs_inputs):
    """(directory, stdout) of an uninterrupted run without Lazarus of
    fs_pyops or fs_cstdio, once per module."""
    _refs = {}

    def get(name):
        if name not in _refs:
            base = tmp_path_factory.mktemp(f"ref-{name}")
            work = base / "work"
            work.mkdir()
            if name == "pyops":
                argv = ["/usr/bin/python3", fs_progs.fs_pyops, work, PYOPS_STEPS]
            else:
                prepare_cstdio(work, fs_inputs)
                argv = [fs_progs.fs_cstdio, work, CSTDIO_ROUNDS]
            out = plain_run(argv, base)
            assert re.search(r"^done \w+$", out, re.M) and "MISMATCH" not in out, out[-2000:]
            _refs[name] = (work, out)
        return _refs[name]

    return get


def last_line(text: str, prefix: str):
    found = None
    for line in text.splitlines():
        if line.startswith(prefix):
            found = line
    return found


def check_killed_run(kr, start_re: str, done_prefix: str) -> str:
    """The run took KILLS kills, every restart resumed (never printed the
    start line again), nothing printed MISMATCH, a result line came.  Returns
    the segments' description."""
    info = kr.describe()
    assert kr.kills == KILLS, f"program finished after only {kr.kills} kills\n{info}"
    assert [s.rc for s in kr.segments] == [137] * KILLS + [0], info
    starts = [i for i, s in enumerate(kr.segments)
              if s.kind == "restart" and re.search(start_re, s.stdout, re.M)]
    assert not starts, f"restart segments {starts} started the program over\n{info}"
    assert "MISMATCH" not in kr.all_stdout, f"the program saw files unlike its memory\n{info}"
    assert kr.last_line(done_prefix), info
    return info


# --------------------------------------------------------------------------
# gzip, sort, sqlite3 (root)
# --------------------------------------------------------------------------
@ROOT_ONLY
def test_gzip_200mb(runner, fs_inputs, rng):
    """gzip of a 200 MB file (it writes data.txt.gz, then deletes data.txt),
    killed KILLS (4) times: the tree is the uninterrupted one's, .gz byte for byte."""
    dirs = {}
    for name in ("ref", "work"):
        d = runner.mkdir(name)
        shutil.copyfile(fs_inputs.gzip_src, d / "data.txt")
        os.chmod(d / "data.txt", 0o644)
        os.utime(d / "data.txt", (FIXED_MTIME, FIXED_MTIME))
        dirs[name] = d
    plain_run(["gzip", dirs["ref"] / "data.txt"], runner.base)
    assert sorted(os.listdir(dirs["ref"])) == ["data.txt.gz"]

    store = runner.base / "store"
    kr = run_until_done(runner, store, ["gzip", dirs["work"] / "data.txt"], rng,
                        kills=KILLS, comm="gzip", timeout=400)
    info = kr.describe()
    assert kr.kills == KILLS, f"gzip finished after only {kr.kills} kills\n{info}"
    assert [s.rc for s in kr.segments] == [137] * KILLS + [0], info
    assert_same_tree(dirs["work"], dirs["ref"], info)
    got, want = (os.stat(dirs[n] / "data.txt.gz").st_mtime_ns for n in ("work", "ref"))
    assert got == want == FIXED_MTIME * 10**9, "gzip gives the .gz its input's mtime"


@ROOT_ONLY
def test_sort_300mb(runner, fs_inputs, rng):
    """sort --parallel=1 -S 16M -T WORK/tmp -o WORK/out of a 300 MB file
    (many temporary files, created, merged and deleted), killed KILLS (4) times: out
    is the uninterrupted one's, WORK/tmp ends empty, the input is untouched."""
    dirs = {}
    for name in ("ref", "work"):
        d = runner.mkdir(name)
        (d / "tmp").mkdir()
        dirs[name] = d

    def argv(d, memory="16M", parallel="1"):
        return ["sort", f"--parallel={parallel}", "-S", memory, "-T", d / "tmp", "-o", d / "out",
                fs_inputs.sort_src]

    # the reference in memory on both cores: the same output, in a third of the time
    plain_run(argv(dirs["ref"], "1G", "2"), runner.base)
    before = stat_id(fs_inputs.sort_src)
    store = runner.base / "store"
    # sort spends ~2/3 of its time writing sorted runs, then merges (and
    # deletes) them: kills up to 2.5 s after each checkpoint reach the merges
    kr = run_until_done(runner, store, argv(dirs["work"]), rng, kills=KILLS, comm="sort",
                        max_delay=2.5, timeout=500)
    info = kr.describe()
    assert kr.kills == KILLS, f"sort finished after only {kr.kills} kills\n{info}"
    assert [s.rc for s in kr.segments] == [137] * KILLS + [0], info
    assert_same_tree(dirs["work"], dirs["ref"], info)
    assert os.listdir(dirs["work"] / "tmp") == []
    assert stat_id(fs_inputs.sort_src) == before, "the input (only read) was touched"


def sqlite_dump(db: Path) -> str:
    cp = subprocess.run(["sqlite3", "-batch", "-readonly", str(db), ".dump"],
                        capture_output=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.decode(errors="replace")


@ROOT_ONLY
def test_sqlite_100k_statements(runner, fs_inputs, rng):
    """sqlite3 runs 100 000 inserts/updates/deletes in ~8300 transactions
    (rollback journal created and deleted per commit, pages overwritten in
    place, fsync), killed KILLS (4) times: the db file is byte-identical to the
    uninterrupted one's, its .dump equal, no journal left, integrity ok."""
    dirs = {n: runner.mkdir(n) for n in ("ref", "work")}

    def argv(d):
        return ["sqlite3", "-batch", "-bail", d / "db.sqlite", f".read {fs_inputs.sql}"]

    ref_out = plain_run(argv(dirs["ref"]), runner.base)
    want_done = last_line(ref_out, "done|")
    assert want_done, ref_out[-1000:]
    store = runner.base / "store"
    kr = run_until_done(runner, store, argv(dirs["work"]), rng, kills=KILLS, comm="sqlite3",
                        timeout=400, done_re=r"^done\|")
    info = check_killed_run(kr, r"^start$", "done|")
    assert_same_tree(dirs["work"], dirs["ref"], info)
    assert kr.last_line("done|") == want_done, info
    assert sqlite_dump(dirs["work"] / "db.sqlite") == sqlite_dump(dirs["ref"] / "db.sqlite")
    cp = subprocess.run(["sqlite3", "-batch", "-readonly", str(dirs["work"] / "db.sqlite"),
                         "PRAGMA integrity_check;"], capture_output=True, text=True, timeout=120)
    assert cp.stdout.strip() == "ok", cp.stdout + cp.stderr


# --------------------------------------------------------------------------
# fs_pyops.py and fs_cstdio (root and user)
# --------------------------------------------------------------------------
def test_fs_pyops_killed(runner, fs_progs, reference, rng):
    """fs_pyops.py (appends, in-place pwrite, truncate, O_TRUNC, rename over,
    unlink, link, symlink, chmod, copy_file_range, sendfile, mkdir/rmdir;
    long-lived buffered files), killed KILLS (4) times: it resumes from memory, never
    sees a file unlike its model, and leaves the uninterrupted tree."""
    ref_dir, ref_out = reference("pyops")
    work = runner.mkdir("work")
    store = runner.base / "store"
    kr = run_until_done(runner, store, ["/usr/bin/python3", fs_progs.fs_pyops, work, PYOPS_STEPS],
                        rng, kills=KILLS, comm="python3", timeout=400, done_re=r"^done ")
    info = check_killed_run(kr, r"^start ", "done ")
    assert_same_tree(work, ref_dir, info)
    assert kr.last_line("done ") == last_line(ref_out, "done "), info


def test_fs_cstdio_killed(runner, fs_progs, fs_inputs, reference, rng):
    """fs_cstdio (r+ stream over existing data: fseek/fwrite/fprintf/fread,
    growth with holes, ftruncate; an "a" stream; w/r+ chunk files renamed over
    others and removed), killed KILLS (4) times: same tree as uninterrupted, and
    ro.dat (only read) keeps its inode, mtime and ctime."""
    ref_dir, ref_out = reference("cstdio")
    work = runner.mkdir("work")
    prepare_cstdio(work, fs_inputs, runner.uid)
    ro_before = stat_id(work / "ro.dat")
    store = runner.base / "store"
    kr = run_until_done(runner, store, [fs_progs.fs_cstdio, work, CSTDIO_ROUNDS], rng,
                        kills=KILLS, comm="fs_cstdio", timeout=400, done_re=r"^done ")
    info = check_killed_run(kr, r"^start ", "done ")
    assert_same_tree(work, ref_dir, info)
    assert kr.last_line("done ") == last_line(ref_out, "done "), info
    assert stat_id(work / "ro.dat") == ro_before, "ro.dat was only read, yet it was touched"


# --------------------------------------------------------------------------
# SIGKILL while a checkpoint is written; SIGKILL of `restart` mid-rollback
# --------------------------------------------------------------------------
TORN_WANTED = 3
TORN_CYCLES = 8


def test_kill_during_checkpoint(runner, fs_progs, fs_inputs, reference, rng):
    """fs_cstdio with 128 MiB of ballast (slow checkpoints), -i 0: take a
    checkpoint A, let it change files, request another and SIGKILL it while
    tmp.* exists in the store; restart (back to A, undoing what followed);
    repeat.  The end result is the uninterrupted one."""
    ref_dir, ref_out = reference("cstdio")
    work = runner.mkdir("work")
    prepare_cstdio(work, fs_inputs, runner.uid)
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--",
                           fs_progs.fs_cstdio, work, CSTDIO_ROUNDS, "128")
    proc.wait_for_output(r"^start ", timeout=60)
    log, torn = [], 0
    for cycle in range(TORN_CYCLES):
        if torn >= TORN_WANTED:
            break
        time.sleep(rng.uniform(0.2, 0.8))
        if proc.poll() is not None:
            break
        a = runner.checkpoint_when_up(store)
        time.sleep(rng.uniform(0.2, 0.6))
        req = runner.start_lz("checkpoint", "-d", store)
        seen = []
        deadline = time.monotonic() + 60
        while not seen and req.poll() is None and time.monotonic() < deadline:
            seen = tmp_entries(store)
        prog = find_program(proc.pid, "fs_cstdio")
        assert prog is not None, f"program gone\n{proc.stderr}"
        pids = kill_tree(prog)
        rc = proc.wait(timeout=60)
        assert rc == 137, f"supervisor exited {rc} after SIGKILL of the program\n{proc.stderr}"
        wait_gone(pids)
        req_rc = req.wait(timeout=60)
        if seen and req_rc != 0:
            torn += 1
            idx = runner.indexes(store)
            assert idx and max(idx) == a, f"torn checkpoint listed: {idx}, A={a}"
        log.append(f"cycle {cycle}: A={a} tmp seen {seen} checkpoint rc {req_rc} "
                   f"-> {'torn' if seen and req_rc != 0 else 'not torn'}")
        proc = runner.start_lz("restart", "-d", store)
    print("\n".join(log))
    rc = proc.wait(timeout=300)
    info = "\n".join(log) + f"\n--- last stdout\n{proc.stdout[-1500:]}\n--- stderr\n{proc.stderr[-1500:]}"
    assert torn >= 1, f"no checkpoint was killed while being written\n{info}"
    assert rc == 0, info
    assert "MISMATCH" not in proc.stdout, info
    assert not re.search(r"^start ", proc.stdout, re.M), f"restart started over\n{info}"
    assert_same_tree(work, ref_dir, info)
    assert last_line(proc.stdout, "done ") == last_line(ref_out, "done "), info
    assert tmp_entries(store) == []


ROLLBACK_DELAY_MS = "150"
ROLLBACK_KILLS = 3


def test_kill_restart_during_rollback(runner, fs_progs, reference, rng):
    """fs_pyops under -i 0: checkpoint N, ~2.5 s more of file changes, SIGKILL.
    Then `lazarus restart` with LAZARUS_TEST_ROLLBACK_DELAY_MS (a sleep after
    each rollback step), SIGKILLed (whole tree) at random instants ROLLBACK_KILLS (3) times;
    at least one kill must land while files were half rolled back.  A plain
    `restart` then finishes with the uninterrupted tree."""
    ref_dir, ref_out = reference("pyops")
    work = runner.mkdir("work")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--",
                           "/usr/bin/python3", fs_progs.fs_pyops, work, PYOPS_STEPS)
    proc.wait_for_output(r"^start ", timeout=60)
    time.sleep(rng.uniform(0.5, 1.5))
    n = runner.checkpoint(store)
    time.sleep(2.5)
    assert proc.poll() is None, f"fs_pyops ended too early\n{proc.stdout[-500:]}"
    kill_program(proc, "python3")
    slow = copy.copy(runner)
    slow.env = {**runner.env, "LAZARUS_TEST_ROLLBACK_DELAY_MS": ROLLBACK_DELAY_MS}
    prev = tree(work)
    log, inside = [], 0
    window = 2.0  # kills land in [0.05, window]; shrinks if the program was seen resumed
    for i in range(ROLLBACK_KILLS):
        r = slow.start_lz("restart", "-d", store)
        t0 = time.monotonic()
        delay = rng.uniform(0.05, window)
        resumed = False
        while time.monotonic() - t0 < delay and r.poll() is None:
            if re.search(r"^(step|done) ", r.stdout, re.M):
                resumed = True
                window = max(0.3, 0.8 * (time.monotonic() - t0))
                break
            time.sleep(0.01)
        delay = time.monotonic() - t0
        ended = r.poll()
        resumed = resumed or bool(re.search(r"^(step|done) ", r.stdout, re.M))
        r.kill()
        now = tree(work)
        changed = now != prev
        prev = now
        if changed and not resumed and ended is None:
            inside += 1
        log.append(f"restart {i}: SIGKILL after {delay:.3f}s (ended: {ended}, program resumed: "
                   f"{resumed}, files changed: {changed}); stderr {r.stderr.strip()[-300:]!r}")
        assert ended is None, "a restart with a rollback delay ended on its own\n" + "\n".join(log)
        idx = runner.indexes(store)
        assert idx and max(idx) == n, f"checkpoints after a killed restart: {idx}, want newest {n}"
    info = "\n".join(log)
    print(info)
    assert inside >= 1, f"no SIGKILL landed inside the rollback\n{info}"
    v = runner.lz("verify", "-d", store)
    assert v.rc == 0, f"{v}\n{info}"
    final = runner.lz("restart", "-d", store, timeout=300)
    assert final.rc == 0, f"{final}\n{info}"
    assert "MISMATCH" not in final.stdout, f"{final}\n{info}"
    assert not re.search(r"^start ", final.stdout, re.M), f"restart started over\n{final}"
    assert_same_tree(work, ref_dir, info)
    assert last_line(final.stdout, "done ") == last_line(ref_out, "done "), f"{final}\n{info}"
