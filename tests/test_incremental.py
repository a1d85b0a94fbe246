"""Incremental, deduplicated, compressed, forked checkpoints (format v2).

Driven by programs/incr_heap.c (commands on a pipe, one `state ROUND DIGEST
CHANGED_PAGES` line back per command): what each checkpoint stores (`list
--json`), that every retained checkpoint restarts to exactly its state, and
what happens when the program, the forked `lazarus-writer` or the disk fails
while checkpoints are written.  Sizes are in bytes; PAGE = 4096."""
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import lzformat
from conftest import (IS_ROOT, LAZARUS, Proc, _compile, ckpt_dirs, ckpt_path, comm_of, descendants,
                      kill_program, plain_output, run_until_done, tmp_entries)

PAGE = 4096
MiB = 1 << 20
STATE_RE = re.compile(r"^state (\d+) ([0-9a-f]{16}) (\d+)$")


@pytest.fixture(scope="module")
def incr_heap(programs):
    return _compile("incr_heap", programs.dir)


# --------------------------------------------------------------------------
# A job driven line by line
# --------------------------------------------------------------------------
class Job:
    """`lazarus run ... -- incr_heap ...` or `lazarus restart ...` with the
    program's stdin on a pipe: cmd() sends one command and returns the line
    the program answers."""

    def __init__(self, runner, args, env=None):
        e = dict(runner.env)
        e.update(env or {})
        self.runner = runner
        self.proc = Proc(runner.argv(args), cwd=runner.base, env=e, stdin=subprocess.PIPE)
        self.nlines = 0

    def line(self, timeout=180) -> str:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.proc.stdout.split("\n")
            if len(lines) - 1 > self.nlines:
                self.nlines += 1
                return lines[self.nlines - 1]
            if self.proc.poll() is not None and len(self.proc.stdout.split("\n")) - 1 <= self.nlines:
                raise AssertionError(f"the job ended (status {self.proc.wait(1)}) instead of answering\n"
                                     f"--- stdout\n{self.proc.stdout[-2000:]}\n--- stderr\n{self.proc.stderr[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer within {timeout}s\n--- stdout\n{self.proc.stdout[-2000:]}"
                                     f"\n--- stderr\n{self.proc.stderr[-3000:]}")
            time.sleep(0.005)

    def cmd(self, command: str, timeout=180) -> str:
        self.proc.p.stdin.write((command + "\n").encode())
        self.proc.p.stdin.flush()
        got = self.line(timeout)
        assert STATE_RE.match(got), f"{command!r} answered {got!r}\n--- stderr\n{self.proc.stderr[-2000:]}"
        return got

    def kill(self):
        """SIGKILL the program; the supervisor must exit 137."""
        kill_program(self.proc, "incr_heap")


def start(runner, store, prog_args, *opts, env=None) -> Job:
    job = Job(runner, [LAZARUS, "run", "-d", store, *opts, "--", *prog_args], env)
    first = job.line()
    assert STATE_RE.match(first) and first.startswith("state 0 "), first
    return job


def restart(runner, store, *opts, env=None) -> Job:
    return Job(runner, [LAZARUS, "restart", "-d", store, *opts], env)


def changed_pages(state_line: str) -> int:
    return int(STATE_RE.match(state_line).group(3))


def entry(runner, store, idx) -> dict:
    for e in runner.list_json(store):
        if int(e["index"]) == idx:
            return e
    raise AssertionError(f"checkpoint {idx} is not listed")


def check_restarts(runner, store, states: dict, files: dict | None = None, path: Path | None = None,
                   env=None):
    """`restart --at N` for every retained N, newest first (a restart drops
    the checkpoints after N): `digest` answers exactly the line recorded when
    N was taken; the directory `path` (if any) holds exactly the files, with
    their bytes, it held at N (files[N], see work_files)."""
    retained = runner.indexes(store)
    assert retained, "no checkpoint retained"
    for n in reversed(retained):
        job = restart(runner, store, "--at", n, env=env)
        got = job.cmd("digest")
        assert got == states[n], f"restart --at {n}: {got!r}, checkpoint {n} was {states[n]!r}\n{job.proc.stderr}"
        if files is not None:
            got = work_files(path)
            assert got == files[n], f"restart --at {n}: the files are not as at {n}\ngot {got!r}\nwant {files[n]!r}"
        job.kill()
    return retained


# --------------------------------------------------------------------------
# The store: which packs the manifests reference
# --------------------------------------------------------------------------
def checkpoint_packs(runner, store: Path, index: int) -> set[int]:
    """Ids N of the packs/pack.N checkpoint `index` reads (`show --json packs`:
    the packs its manifest lists, where gc goes by the frames of every retained
    checkpoint)."""
    r = runner.lz("show", "-d", store, "--at", index, "--json", "packs", timeout=60)
    assert r.rc == 0, str(r)
    return {p["index"] for p in json.loads(r.stdout)["packs"] if p["used"] and p["pid"] is None}


def packs_on_disk(store: Path) -> set[int]:
    d = store / "packs"
    return {int(n.split(".")[1]) for n in os.listdir(d) if re.fullmatch(r"pack\.\d{6}", n)} if d.is_dir() else set()


def referenced_packs(runner, store: Path) -> set[int]:
    used = set()
    for i in runner.indexes(store):
        used |= checkpoint_packs(runner, store, i)
    return used


def gc_and_check(runner, store: Path):
    """`lazarus gc`: afterwards exactly the packs a retained checkpoint uses
    are left, and every retained checkpoint verifies."""
    r = runner.lz("gc", "-d", store, timeout=120)
    assert r.rc == 0 and re.match(r"gc: removed \d+ packs?", r.stdout), str(r)
    used = referenced_packs(runner, store)
    assert packs_on_disk(store) == used, (f"after gc: packs on disk {sorted(packs_on_disk(store))}, "
                                          f"used by retained checkpoints {sorted(used)}")
    for i in runner.indexes(store):
        v = runner.lz("verify", "-d", store, "--at", i, timeout=300)
        assert v.rc == 0, f"checkpoint {i} does not verify after gc\n{v}"
    return used


def assert_stores_about(e: dict, pages: int, what: str, slack: int = MiB):
    """An incremental checkpoint stores about `pages` new (incompressible)
    pages: not much more, and not less."""
    want = pages * PAGE
    assert e["stored_bytes"] <= 1.2 * want + slack, (
        f"{what}: checkpoint {e['index']} stored {e['stored_bytes']} bytes for {pages} changed pages "
        f"({want} bytes)\n{e}")
    assert e["stored_bytes"] >= 0.9 * want, (
        f"{what}: checkpoint {e['index']} stored {e['stored_bytes']} bytes, less than the {pages} "
        f"new random pages ({want} bytes)\n{e}")


# --------------------------------------------------------------------------
# 1. The acceptance test
# --------------------------------------------------------------------------
def test_acceptance_512mib_few_percent(runner, incr_heap):
    """3 % of a 512 MiB random heap changes between checkpoints: the first
    stores the heap, each later one about the changed pages; every retained
    checkpoint restarts to its exact state; gc keeps what they use."""
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 512, 3], "-i", "0", "-k", "3")
    states, entries = {}, {}
    state = job.cmd("digest")
    for rnd in range(5):
        if rnd:
            state = job.cmd("next")
        idx = runner.checkpoint(store)
        states[idx] = state
        entries[idx] = entry(runner, store, idx)
    first, *later = sorted(entries)

    e = entries[first]
    heap = 512 * MiB
    assert e["memory_bytes"] >= heap and e["changed_bytes"] >= heap, e
    assert heap * 0.99 <= e["stored_bytes"] <= heap * 1.02 + 4 * MiB, f"first checkpoint: {e}"
    assert e["codec"] == "lz4", e
    for i in later:
        e = entries[i]
        pages = changed_pages(states[i])
        assert pages == 3932, states[i]  # 3 % of 131072
        assert e["memory_bytes"] >= heap, e
        assert pages * PAGE <= e["changed_bytes"] <= 1.2 * pages * PAGE + MiB, (
            f"checkpoint {i}: changed_bytes {e['changed_bytes']} for {pages} pages written\n{e}")
        assert_stores_about(e, pages, "3 % of 512 MiB")
        assert e["data_bytes"] >= heap, e

    job.kill()
    retained = runner.indexes(store)
    assert retained == sorted(entries)[-3:], retained
    assert ckpt_dirs(store) == retained
    gc_and_check(runner, store)
    check_restarts(runner, store, states)  # newest first, ends resumed at the oldest...

    # ...from which the program goes on: the same round again, then the first
    # checkpoint after the restart stores about the pages changed, not the heap
    oldest, newer = retained[0], retained[1:]
    job = restart(runner, store, "--at", oldest)
    assert job.cmd("digest") == states[oldest]
    again = job.cmd("next")
    assert again == states[newer[0]], "the same round from the same state must give the same heap"
    idx = runner.checkpoint(store)
    assert idx > max(entries), f"checkpoint index {idx} reused"
    e = entry(runner, store, idx)
    assert e["parent"] == oldest, e
    assert e["stored_bytes"] <= 1.2 * changed_pages(again) * PAGE + MiB, (
        f"first checkpoint after a restart stored {e['stored_bytes']} bytes for {changed_pages(again)} pages\n{e}")
    job.kill()

    # the abandoned branch is gone, and so are its packs, which nothing uses
    assert runner.indexes(store) == [oldest, idx]
    used = gc_and_check(runner, store)
    for i in newer:
        assert i not in used and not (store / "packs" / f"pack.{i:06d}").exists(), (
            f"pack.{i} of dropped checkpoint {i} is still there: {sorted(packs_on_disk(store))}")
    assert first in used, "the oldest kept checkpoint no longer uses the first (full) pack"
    states[idx] = again
    check_restarts(runner, store, states)


# --------------------------------------------------------------------------
# 2. SIGKILL of the program while checkpoints are taken
# --------------------------------------------------------------------------
class StoreWatch:
    """Polls `lazarus list` while a job runs: a listed checkpoint must always
    be whole (its ckpt.N with a manifest that loads; `list` exits 0, so no
    `damaged` row) and `list` never shows a tmp.* entry."""

    def __init__(self, runner, store):
        self.runner, self.store = runner, store
        self.problems, self.listings = [], 0
        self.seen = set()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self):
        while not self._stop.is_set():
            if (self.store / "job").exists():
                r = self.runner.lz("list", "-d", self.store, timeout=60)
                self.listings += 1
                if r.rc != 0 or "damaged" in r.stdout or "tmp." in r.stdout:
                    self.problems.append(str(r))
                for m in re.finditer(r"^\s*(\d+)\s+\d{4}-", r.stdout, re.M):
                    self.seen.add(int(m.group(1)))
            self._stop.wait(0.15)

    def stop(self):
        self._stop.set()
        self._t.join(timeout=120)
        assert not self.problems, "a listing showed a half or damaged checkpoint:\n" + "\n".join(self.problems[:3])
        assert self.listings >= 5, f"only {self.listings} listings taken"


def test_program_killed_while_checkpointing(runner, programs, rng):
    """heap_mutator (256 MiB, every page rewritten each round) checkpointed
    every second and SIGKILLed 4 times at random instants (within a second
    after each new checkpoint, often while the writer is at work), restarted
    until done: the result is the uninterrupted run's, each segment printed
    a piece of what the program prints without Lazarus (the first its
    beginning, the last its end), no restart started the program over,
    getpid() never changed; `list` never showed a half checkpoint; the store
    verifies and holds no tmp.*; after gc only used packs remain.  (This run
    is also test_memory_restart.py's heap_mutator case: one run for both.)"""
    argv = [programs.heap_mutator, "256", "400"]
    plain = plain_output(argv)
    kills = 4
    store = runner.base / "store"
    watch = StoreWatch(runner, store)
    try:
        kr = run_until_done(runner, store, argv, rng, kills=kills, interval=1, comm="heap_mutator",
                            max_delay=1.0, done_re=r"^checksum [0-9a-f]{16}$")
    finally:
        watch.stop()
    info = kr.describe()
    assert kr.kills == kills, info
    assert [s.rc for s in kr.segments] == [137] * kills + [0], info
    assert kr.last_line("checksum ") == plain.splitlines()[-1], info
    segs = kr.segments
    assert plain.startswith(segs[0].stdout) and plain.endswith(segs[-1].stdout), info
    for i, sg in enumerate(segs):
        assert sg.stdout in plain, f"segment {i} printed what the program without Lazarus does not\n{info}"
    starts = [i for i, sg in enumerate(segs) if sg.kind == "restart" and re.search(r"^start ", sg.stdout, re.M)]
    assert not starts, f"restart segments {starts} started the program over\n{info}"
    pids = {sg.killed_nspid for sg in segs if sg.killed_nspid is not None}
    assert len(pids) == 1, f"getpid() changed across restarts: {pids}\n{info}"
    assert tmp_entries(store) == [], sorted(os.listdir(store))
    v = runner.lz("verify", "-d", store, timeout=300)
    assert v.rc == 0, str(v)
    listed = runner.indexes(store)
    assert listed and ckpt_dirs(store) == listed
    assert packs_on_disk(store) >= referenced_packs(runner, store)
    gc_and_check(runner, store)  # torn checkpoints' packs go too
    print(f"{watch.listings} listings, checkpoints seen: {sorted(watch.seen)}")


def test_gc_after_the_job_removes_a_torn_last_pack(runner, programs):
    """A checkpoint torn by the job's last kill leaves a pack newer than the
    newest checkpoint.  While the job runs gc must keep such a pack (a writer
    may be filling it); once the job is over nothing will, and gc removes it
    (found when test_program_killed_while_checkpointing's last kill tore one)."""
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", programs.api_prog, "2", "1", "-")
    assert proc.wait(timeout=120) == 0, proc.stderr
    newest = max(runner.indexes(store))
    job = (store / "job").read_text()
    m = re.search(r"^next_index=(\d+)$", job, re.M)
    assert m, job
    torn = max(int(m.group(1)), newest + 1)  # an index given out whose checkpoint never committed
    torn_pack = store / "packs" / f"pack.{torn:06d}"

    def set_job(state):
        text = re.sub(r"^next_index=\d+$", f"next_index={torn + 1}", job, flags=re.M)
        (store / "job").write_text(re.sub(r"^state=\w+$", f"state={state}", text, flags=re.M))
        lzformat.reseal_job(store / "job")  # its checksum line, for the edited settings
    set_job("running")
    torn_pack.write_bytes(b"\0" * 8192)
    r = runner.lz("gc", "-d", store, timeout=120)
    assert r.rc == 0 and torn_pack.exists(), f"gc removed a pack a running job may be writing\n{r}"
    set_job("stopped")
    gc_and_check(runner, store)
    assert not torn_pack.exists()


# --------------------------------------------------------------------------
# 3. SIGKILL of the forked writer
# --------------------------------------------------------------------------
def find_writer(sup_pid: int):
    """The `lazarus-writer` below the supervisor (its child, or the PID
    namespace init's), or None."""
    for p, _ in descendants(sup_pid):
        if comm_of(p) == "lazarus-writer":
            return p
    return None


FAILED_RE = r"^checkpoint {n} failed at \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ: \S.*$"


def work_files(work: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(work.iterdir())}


def test_writer_killed(runner, incr_heap, rng):
    """The writer of a checkpoint is SIGKILLed at a random instant (twice):
    the program keeps running with its state, that checkpoint never appears,
    the failure is reported (`checkpoint`, the supervisor's stderr, `list`),
    the next checkpoint succeeds, and every retained checkpoint restarts to
    its memory and its files, also after gc.  Right after each failed pause
    the program overwrites the first line of its log (old bytes no earlier
    interval saved) and creates a file: only jrnl.N can undo those, and the
    rollbacks to the checkpoints before N must."""
    store = runner.base / "store"
    work = runner.mkdir("work")
    job = start(runner, store, [incr_heap, 64, 3, "random", work / "log"], "-i", "0", "-k", "20")
    states, files, failed = {}, {}, []

    def good_checkpoint():
        state = job.cmd("digest")
        idx = runner.checkpoint(store)
        states[idx], files[idx] = state, work_files(work)
        return idx

    job.cmd("append")
    good_checkpoint()
    job.cmd("next")
    job.cmd("append")
    good_checkpoint()
    # how long a writer of 64 MiB of new pages takes: kills land anywhere in it
    job.cmd("fill 0 0 16384")
    job.cmd("append")
    span = entry(runner, store, good_checkpoint())["durable_ms"] / 1000
    print(f"a 64 MiB checkpoint was durable after {span:.3f}s")
    for attempt in range(12):
        if len(failed) == 2:
            break
        job.cmd("fill 0 0 16384")  # all 64 MiB new: the writer has work
        job.cmd("append")
        state, content = job.cmd("digest"), work_files(work)
        req = runner.start_lz("checkpoint", "-d", store)
        writer = None
        deadline = time.monotonic() + 60
        while writer is None and req.poll() is None and time.monotonic() < deadline:
            writer = find_writer(job.proc.pid)
        if writer is not None:
            time.sleep(rng.uniform(0, span))
            try:
                os.kill(writer, signal.SIGKILL)
            except ProcessLookupError:
                pass
        rc = req.wait(timeout=120)
        if rc == 0:  # done before the kill landed: an ordinary checkpoint
            idx = int(req.stdout)
            states[idx], files[idx] = state, content
            continue
        m = re.search(r"checkpoint (\d+) failed", req.stderr)
        assert m and req.stdout == "" and len(req.stderr.strip().splitlines()) == 1, (
            f"a failed checkpoint: one line naming it on stderr, nothing on stdout\n"
            f"stdout {req.stdout!r}\nstderr {req.stderr!r}")
        n = int(m.group(1))
        failed.append(n)
        print(f"writer of checkpoint {n} killed; lazarus checkpoint said: {req.stderr.strip()}")
        # the program goes on, unharmed
        assert job.cmd("digest") == state
        assert work_files(work) == content
        # nothing of checkpoint n is visible
        assert n not in runner.indexes(store) and not ckpt_path(store, n).exists()
        assert tmp_entries(store) == [], sorted(os.listdir(store))
        assert (store / f"jrnl.{n:06d}").is_dir(), f"the journal of failed checkpoint {n} is gone"
        # reported by the supervisor and by list
        deadline = time.monotonic() + 10
        while f"checkpoint {n} failed" not in job.proc.stderr and time.monotonic() < deadline:
            time.sleep(0.05)
        assert re.search(rf"checkpoint {n} failed: .*; the program keeps running", job.proc.stderr), job.proc.stderr
        listing = runner.lz("list", "-d", store).stdout
        assert re.fullmatch(FAILED_RE.format(n=n), listing.rstrip("\n").splitlines()[-1]), listing
        # file changes only jrnl.n records, then the next checkpoint works,
        # and list no longer names the failure
        job.cmd("overwrite")
        job.cmd(f"append .after-{n}")
        job.cmd("next")
        job.cmd("append")
        idx = good_checkpoint()
        assert idx > n
        listing = runner.lz("list", "-d", store).stdout
        assert "failed" not in listing, listing
    assert len(failed) == 2, f"the writer finished before every kill ({attempt + 1} attempts)"

    job.cmd("next")
    job.cmd("append")  # after the last checkpoint: rolled back by every restart
    job.cmd("overwrite .after-%d" % failed[-1])
    # gc while the job runs: the journals of the failed checkpoints stay
    # (rollbacks to older checkpoints need them), unused packs go
    gc_and_check(runner, store)
    for n in failed:
        assert (store / f"jrnl.{n:06d}").is_dir(), f"gc removed jrnl.{n}, which rollbacks need"
    job.kill()
    assert sorted(states) == runner.indexes(store)
    assert len({tuple(f.items()) for f in files.values()}) == len(files), "the files must differ per checkpoint"
    check_restarts(runner, store, states, files, work)


# --------------------------------------------------------------------------
# 4. A full disk
# --------------------------------------------------------------------------
@pytest.fixture
def small_fs(request, tmp_path):
    """A 40 MiB tmpfs (root only), unmounted afterwards."""
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m,mode=0755", "tmpfs", str(mnt)], check=True)
    request.addfinalizer(lambda: subprocess.run(["umount", "-l", str(mnt)], check=False))
    return mnt


def test_full_disk(small_fs, incr_heap, lazarus_bin):
    """Checkpoint 1 (24 MiB, random) fits on a 40 MiB file system, checkpoint
    2 after every page changed does not: `lazarus checkpoint` fails with one
    line naming the cause, the program keeps running, checkpoint 1 still
    verifies and restarts exactly, `list` names the failure."""
    from conftest import Runner
    runner = Runner("root", small_fs)
    store = small_fs / "store"
    job = start(runner, store, [incr_heap, 24, 3], "-i", "0")
    state1 = job.cmd("digest")
    assert runner.checkpoint(store) == 1
    state = job.cmd("fill 0 0 6144")
    r = runner.lz("checkpoint", "-d", store, timeout=120)
    print(f"lazarus checkpoint said: {r.stderr.strip()}")
    assert r.rc != 0 and r.stdout == "", str(r)
    lines = r.stderr_lines()
    assert len(lines) == 1 and re.search(r"checkpoint 2 failed: .*no space left on device", lines[0]), str(r)
    assert job.cmd("digest") == state, "the program does not answer as before"
    assert job.cmd("next") != state
    assert runner.indexes(store) == [1] and not ckpt_path(store, 2).exists()
    listing = runner.lz("list", "-d", store).stdout
    assert re.fullmatch(FAILED_RE.format(n=2), listing.rstrip("\n").splitlines()[-1]), listing
    assert "no space left on device" in listing.splitlines()[-1], listing
    v = runner.lz("verify", "-d", store, "--at", "1", timeout=120)
    assert v.rc == 0, str(v)
    job.kill()
    job = restart(runner, store)
    assert job.cmd("digest") == state1
    job.kill()


# --------------------------------------------------------------------------
# 5. Compression
# --------------------------------------------------------------------------
def take(job, runner, store, states, command=None):
    """Optionally send a command, then checkpoint; remembers the state line."""
    state = job.cmd(command or "digest")
    idx = runner.checkpoint(store)
    states[idx] = state
    return idx


def test_compression(runner, incr_heap):
    """halfzero pages (half random doubles, half zeros) under every codec:
    each restart is exact, lz4 and zstd store at least 1.8x less than none,
    list names the codec; `restart --compress zstd` of an lz4 job makes its
    later checkpoints zstd."""
    stored = {}
    for spec, name in (("none", "none"), ("lz4", "lz4"), ("zstd", "zstd"), ("zstd:5", "zstd")):
        store = runner.base / f"store-{spec.replace(':', '-')}"
        job = start(runner, store, [incr_heap, 32, 3, "halfzero"], "-i", "0", "--compress", spec)
        states = {}
        take(job, runner, store, states)
        take(job, runner, store, states, "next")
        job.kill()
        entries = runner.list_json(store)
        assert [e["codec"] for e in entries] == [name] * len(entries), (spec, entries)
        stored[spec] = entries[0]["stored_bytes"]
        assert entries[0]["data_bytes"] >= 32 * MiB, entries[0]
        check_restarts(runner, store, states)
    print("stored by the first checkpoint:", stored)
    assert stored["none"] >= 32 * MiB, stored
    for spec in ("lz4", "zstd", "zstd:5"):
        assert stored["none"] >= 1.8 * stored[spec], f"{spec} does not compress halfzero pages: {stored}"

    # switching codecs on restart
    store = runner.base / "store-switch"
    job = start(runner, store, [incr_heap, 16, 3, "halfzero"], "-i", "0")
    states = {}
    take(job, runner, store, states, "next")
    job.kill()
    job = restart(runner, store, "--compress", "zstd")
    assert job.cmd("digest") == states[1]
    take(job, runner, store, states, "next")
    take(job, runner, store, states, "next")
    job.kill()
    assert [e["codec"] for e in runner.list_json(store)] == ["lz4", "zstd", "zstd"]
    check_restarts(runner, store, states)


@pytest.mark.parametrize("args", [["run", "--compress", "lz5", "--", "true"],
                                  ["run", "--compress", "zstd:99", "--", "true"],
                                  ["run", "--compress=", "--", "true"],
                                  ["restart", "--compress", "gzip"]])
def test_bad_compress_value(runner, args):
    store = runner.base / "store"
    r = runner.lz(args[0], "-d", store, *args[1:])
    assert r.rc == 2, str(r)
    lines = r.stderr_lines()
    spec = args[args.index("--compress") + 1] if "--compress" in args else ""
    assert len(lines) == 1 and lines[0].startswith("lazarus: ") and f'"{spec}"' in lines[0], str(r)
    assert r.stdout == "" and not store.exists(), str(r)


# --------------------------------------------------------------------------
# 6. Zero pages and duplicate pages
# --------------------------------------------------------------------------
def test_zero_and_duplicate_pages(runner, incr_heap):
    """A sparse heap (1 page in 16 written) stores about its written pages; a
    heap of 8 distinct pages repeated stores almost nothing; both restart
    exactly."""
    store = runner.base / "sparse"
    job = start(runner, store, [incr_heap, 64, 1, "sparse"], "-i", "0", "-k", "5")
    states = {}
    take(job, runner, store, states)
    take(job, runner, store, states, "next")
    job.kill()
    e1, e2 = runner.list_json(store)
    assert e1["memory_bytes"] >= 64 * MiB
    assert_stores_about(e1, 64 * MiB // PAGE // 16, "sparse heap, first checkpoint")
    assert_stores_about(e2, changed_pages(states[2]), "sparse heap, 1 % of the pages written")
    check_restarts(runner, store, states)

    store = runner.base / "dup"
    job = start(runner, store, [incr_heap, 64, 25, "dup"], "-i", "0", "-k", "5", "--compress", "none")
    states = {}
    take(job, runner, store, states)
    take(job, runner, store, states, "next")  # a quarter of the pages: 16 MiB
    take(job, runner, store, states, "newmap 16")
    job.kill()
    entries = runner.list_json(store)
    assert changed_pages(states[2]) == 4096 and changed_pages(states[3]) == 4096
    for e in entries:
        assert e["data_bytes"] >= 64 * MiB, e
        assert e["stored_bytes"] <= 4 * MiB, f"duplicate pages stored again (16 MiB of them, or 64)\n{e}"
    check_restarts(runner, store, states)


# --------------------------------------------------------------------------
# 7. Address-space changes between checkpoints
# --------------------------------------------------------------------------
# (command, pages of new random data it writes)
STEPS = [
    ("next", 122),                   # 3 % of region 0 (4096 pages)
    ("dontneed 0 100 700", 0),       # pages dropped: zeros now
    ("newmap 8", 2048),              # region 1, new data
    ("mremap 1", 0),                 # moved, same bytes
    ("fill 1 10 20", 20),            # written after the move
    ("mremap 0", 0),                 # the main heap moved
    ("mremap 1 3000", 0),            # moved and grown: zeros at the end
    ("fill 1 2990 10", 10),          # written in the grown part
    ("unmap 1", 0),
    ("newmap 4", 1024),              # region 2, perhaps where region 1 was
    ("dontneed 2 0 1024", 0),        # all of region 2 dropped
    ("fill 0 0 30", 30),
]


@pytest.mark.parametrize("tracking", ["dirty", "digest"])
def test_address_space_changes(runner, incr_heap, tracking):
    """dontneed / newmap / mremap (moved, grown) / unmap between checkpoints,
    each step checkpointed: every checkpoint stores about the new data only
    (moved or dropped memory is not stored again) and restarts exactly.
    `digest`: LAZARUS_TEST_NO_DIRTY=1, every page compared by digest."""
    env = {"LAZARUS_TEST_NO_DIRTY": "1"} if tracking == "digest" else None
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 16, 3], "-i", "0", "-k", str(len(STEPS) + 1), env=env)
    states, fresh = {}, {}
    take(job, runner, store, states)
    for command, pages in STEPS:
        idx = take(job, runner, store, states, command)
        fresh[idx] = (command, pages)
    job.kill()
    entries = {int(e["index"]): e for e in runner.list_json(store)}
    assert sorted(entries) == sorted(states)
    assert len(set(states.values())) > len(STEPS) // 2
    for idx, (command, pages) in fresh.items():
        assert_stores_about(entries[idx], pages, f"after `{command}` ({tracking})")
    check_restarts(runner, store, states, env=env)


# --------------------------------------------------------------------------
# 8. After a restart
# --------------------------------------------------------------------------
@pytest.mark.parametrize("fork", ["fork", "nofork"])
def test_incremental_after_restart(runner, incr_heap, fork):
    """The first checkpoint a restarted program takes stores about the pages
    changed since, not its whole memory; so do the next ones (also when
    written in the pause, LAZARUS_NO_FORK=1); all restart exactly."""
    env = {"LAZARUS_NO_FORK": "1"} if fork == "nofork" else None
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 64, 3], "-i", "0", "-k", "10", env=env)
    states = {}
    take(job, runner, store, states)
    take(job, runner, store, states, "next")
    job.kill()
    for rnd in range(2):
        job = restart(runner, store, env=env)
        assert job.cmd("digest") == states[max(states)]
        for k in range(2):
            idx = take(job, runner, store, states, "fill 0 %d 300" % (1000 * (2 * rnd + k)))
            e = entry(runner, store, idx)
            assert e["parent"] == (2 if rnd == 0 else 4), e
            assert_stores_about(e, 300, f"checkpoint {k + 1} after restart {rnd + 1}")
            if k:
                assert 300 * PAGE <= e["changed_bytes"] <= 1.2 * 300 * PAGE + MiB, e
        job.kill()
    check_restarts(runner, store, states, env=env)


# --------------------------------------------------------------------------
# Unchanged memory is not stored again; restart --at drops the later branch
# --------------------------------------------------------------------------
@pytest.mark.parametrize("writer,mib", [("fork", 8), ("copy", 256), ("nofork", 8)])
def test_idle_checkpoints_store_little(runner, incr_heap, writer, mib):
    """Checkpoints of a program that changed nothing since the previous one
    (it only answered `digest`) store almost nothing — uncompressed, so what
    they store shows — also the first ones after a restart, whichever way
    the pages are written: by a forked writer (8 MiB: fork mode), copied in
    the pause (256 MiB: copy mode, little changed), or in the pause
    (LAZARUS_NO_FORK=1).  Libraries' code and read-only data (private file
    mappings never written) are not page data."""
    env = {"LAZARUS_NO_FORK": "1"} if writer == "nofork" else None
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, mib, 3], "-i", "0", "-k", "10", "--compress", "none", env=env)
    states = {}
    for _ in range(3):
        take(job, runner, store, states)
    job.kill()
    job = restart(runner, store, env=env)
    for _ in range(2):
        take(job, runner, store, states)
    job.kill()
    entries = runner.list_json(store)
    assert [int(e["index"]) for e in entries] == [1, 2, 3, 4, 5]
    assert entries[0]["stored_bytes"] >= mib * MiB
    bad = [(e["index"], e["stored_bytes"], e["changed_bytes"]) for e in entries[1:]
           if e["stored_bytes"] > 512 * 1024 or e["changed_bytes"] > 2 * MiB]
    assert not bad, (f"checkpoints of an idle program storing (or counting as changed) more than "
                     f"512 KiB (2 MiB): (index, stored, changed) {bad}")
    # the memory holding data is the heap and a little more, always the same
    bad = [(e["index"], e["data_bytes"]) for e in entries if e["data_bytes"] > (mib + 1) * MiB]
    assert not bad, f"checkpoints counting more than {mib + 1} MiB as data: (index, data_bytes) {bad}"
    check_restarts(runner, store, states, env=env)


def test_restart_at_drops_later_checkpoints(runner, incr_heap):
    """`restart --at N` leaves no checkpoint after N behind (`restart --help`:
    "checkpoints after N are then gone"), also when no file changed: a plain
    `restart` after it resumes N's state, not an abandoned later one."""
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 8, 3], "-i", "0", "-k", "5")
    states = {}
    for k in range(3):
        take(job, runner, store, states, "next" if k else None)
    job.kill()
    job = restart(runner, store, "--at", 1)
    assert job.cmd("digest") == states[1]
    job.kill()
    assert runner.indexes(store) == [1] and ckpt_dirs(store) == [1]
    job = restart(runner, store)
    assert job.cmd("digest") == states[1], "a plain restart after `restart --at 1` went elsewhere"
    job.kill()


@pytest.mark.parametrize("compress", ["none", "lz4"])
def test_chain_of_overlapping_rewrites(runner, incr_heap, compress):
    """The restorer places a frame whole where its extents still sit and then
    fills what later frames replaced (restorer/restore_fill.c): contiguous
    rewrites straddling the frames of earlier checkpoints, rewrites of
    rewrites, scattered pages, dropped pages and a rewrite of everything,
    restarted from every checkpoint of the chain, exactly."""
    store = runner.base / "store"
    job = start(runner, store, [incr_heap, 16, 1], "-i", "0", "-k", "10", "--compress", compress)
    states = {}
    take(job, runner, store, states)
    for command in ("fill 0 100 700", "fill 0 37 1000 7", "fill 0 50 300", "dontneed 0 400 64",
                    "fill 0 0 4096", "fill 0 383 3", "fill 0 1 1023 5"):
        take(job, runner, store, states, command)
    job.kill()
    assert len(check_restarts(runner, store, states)) == 8
