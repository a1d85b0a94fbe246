"""Shared fixtures and helpers for the Lazarus acceptance suite.

Everything here drives real processes: the `lazarus` CLI from the build, test
programs compiled from tests/programs/ at session start, SIGKILLs at random
instants.  See tests/README.md.

Environment:
  LAZARUS_BUILD      the build directory (holding bin/ and lib/) or a repo root
                     holding build/; default: <repo>/build next to tests/
  LAZARUS_TEST_SEED  seed of the random kill instants (default 20240611);
                     every test prints the seed it derived from it
  ASAN_OPTIONS, UBSAN_OPTIONS, LSAN_OPTIONS
                     passed on to the commands the tests run (a sanitizer
                     build: scripts/sanitize.sh)
  LAZARUS_INHERIT_MIN_KIB
                     passed on too: 0 makes every child of a restarted job go
                     on from its parent's restorer (restorer/restore_inherit.c)
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# --------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------
TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROGRAMS_SRC = TESTS / "programs"


def _build_dir() -> Path:
    env = os.environ.get("LAZARUS_BUILD")
    if env:
        p = Path(env).resolve()
        if (p / "bin" / "lazarus").exists() or not (p / "build").is_dir():
            return p
        return p / "build"
    return REPO / "build"


BUILD = _build_dir()
LAZARUS = BUILD / "bin" / "lazarus"
LIBDIR = BUILD / "lib"
INCLUDE = REPO / "include"

SEED = int(os.environ.get("LAZARUS_TEST_SEED", "20240611"))
NOBODY = 65534
IS_ROOT = os.geteuid() == 0

# --------------------------------------------------------------------------
# Process bookkeeping: this session is a subreaper (this VM's PID 1 does not
# reap orphans); orphans are reaped here, processes started through Proc are
# waited for by their Popen object and never reaped behind its back.
# --------------------------------------------------------------------------
PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

_tracked: set[int] = set()
# servers a session fixture keeps for every test (tests/s3server.py): not
# leftovers; the fixture stops them by PID at the session's end
persistent: set[int] = set()


def _stat_fields(pid: int):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rindex(")") + 2:].split()
    return rest  # rest[0] = state, rest[1] = ppid


def reap_orphans() -> None:
    """Reap zombie children of this process that no Popen is waiting for."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in _tracked:
            continue
        st = _stat_fields(pid)
        if st and st[0] == "Z" and int(st[1]) == me:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


def stray_children() -> list[int]:
    """This session's children other than the servers it keeps for the whole
    session (`persistent`: the S3 servers): what a test may not leave."""
    return [c for c in children(os.getpid()) if c not in persistent]


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, depth) for every descendant of pid, depth 1 = child."""
    out: list[tuple[int, int]] = []
    todo = [(c, 1) for c in children(pid)]
    while todo:
        p, d = todo.pop()
        out.append((p, d))
        todo.extend((c, d + 1) for c in children(p))
    return out


def comm_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def ns_pid(pid: int) -> int | None:
    """The pid as the process itself sees it (innermost PID namespace)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except OSError:
        pass
    return None


def is_alive(pid: int) -> bool:
    st = _stat_fields(pid)
    return st is not None and st[0] not in ("Z", "X")


def find_program(sup_pid: int, comm: str | None = None) -> int | None:
    """The program run by the supervisor sup_pid: the deepest leaf of its
    descendants.  If comm is given, the topmost live descendant with that comm
    wins (a helper the runtime forks, e.g. a writer, would sit below it)."""
    desc = [(p, d) for p, d in descendants(sup_pid) if is_alive(p)]
    if not desc:
        return None
    if comm:
        named = [(d, p) for p, d in desc if comm_of(p) == comm[:15]]
        if named:
            return min(named)[1]
    leaves = [(d, p) for p, d in desc if not children(p)]
    return max(leaves)[1] if leaves else max((d, p) for p, d in desc)[1]


def kill_tree(pid: int, include_root: bool = True) -> list[int]:
    """SIGKILL pid (optionally) and all its descendants; returns the pids."""
    pids = [p for p, _ in descendants(pid)]
    if include_root:
        pids.insert(0, pid)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def wait_gone(pids, timeout: float = 20.0) -> None:
    """Wait until none of pids exists (not even as a zombie), reaping orphans."""
    deadline = time.monotonic() + timeout
    while True:
        reap_orphans()
        left = [p for p in pids if os.path.exists(f"/proc/{p}") and p not in _tracked]
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"processes still there after SIGKILL: {left}")
        time.sleep(0.02)


class Proc:
    """A background process in its own session, with stdout/stderr drained
    by threads into buffers."""

    def __init__(self, argv, *, cwd=None, env=None, stdin=subprocess.DEVNULL):
        self.argv = [str(a) for a in argv]
        self.p = subprocess.Popen(
            self.argv, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)
        self.pid = self.p.pid
        _tracked.add(self.pid)
        self.started = time.monotonic()
        self._out = bytearray()
        self._err = bytearray()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._drain, args=(self.p.stdout, self._out), daemon=True),
            threading.Thread(target=self._drain, args=(self.p.stderr, self._err), daemon=True),
        ]
        for t in self._threads:
            t.start()
        self.returncode = None

    def _drain(self, f, buf):
        while True:
            chunk = f.read1(65536) if hasattr(f, "read1") else f.read(65536)
            if not chunk:
                break
            with self._lock:
                buf.extend(chunk)

    @property
    def stdout(self) -> str:
        with self._lock:
            return self._out.decode(errors="replace")

    @property
    def stderr(self) -> str:
        with self._lock:
            return self._err.decode(errors="replace")

    def poll(self):
        if self.returncode is None:
            rc = self.p.poll()
            if rc is not None:
                self._finish(rc)
        return self.returncode

    def _finish(self, rc):
        self.returncode = rc
        _tracked.discard(self.pid)
        for t in self._threads:
            t.join(timeout=5)
        sanitizer_check(self.argv, self.stderr)

    def wait(self, timeout: float):
        """Exit status as the shell reports it (128+signal if killed)."""
        if self.returncode is None:
            try:
                rc = self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"timed out after {timeout}s: {' '.join(self.argv)}\n"
                    f"--- stdout (tail)\n{self.stdout[-2000:]}\n--- stderr (tail)\n{self.stderr[-2000:]}")
            self._finish(rc)
        return self.returncode if self.returncode >= 0 else 128 - self.returncode

    def wait_for_output(self, pattern: str, timeout: float) -> re.Match:
        """Wait until stdout matches the regex; fails if the process ends first."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern, re.M)
        while True:
            m = rx.search(self.stdout)
            if m:
                return m
            if self.poll() is not None:
                m = rx.search(self.stdout)
                if m:
                    return m
                raise AssertionError(
                    f"process ended (status {self.wait(1)}) before printing /{pattern}/\n"
                    f"--- stdout\n{self.stdout[-2000:]}\n--- stderr\n{self.stderr[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no /{pattern}/ after {timeout}s\n--- stdout\n{self.stdout[-2000:]}\n"
                    f"--- stderr\n{self.stderr[-2000:]}")
            time.sleep(0.02)

    def kill(self):
        """SIGKILL the whole session: the process group and every descendant."""
        pids = kill_tree(self.pid)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            rc = self.p.wait(timeout=20)
            if self.returncode is None:
                self._finish(rc)
        except subprocess.TimeoutExpired:
            pass
        wait_gone([p for p in pids if p != self.pid])


# `lazarus run` says on a plain stderr (unless --quiet) where the job went and
# how the program ended, one line each (docs/json.md); tests that look at the
# rest of a run's stderr drop exactly these two.
RUN_LINE_RE = re.compile(r"^lazarus: (job started \(pid \d+\), checkpoints (every \d+ s|on request) in .*|"
                         r"program (exited with status \d+|killed by signal \d+ \(exit status \d+\)) "
                         r"after \d+ checkpoints?)$")


def without_run_lines(stderr: str) -> str:
    return "".join(l for l in stderr.splitlines(keepends=True) if not RUN_LINE_RE.match(l.rstrip("\n")))


# --------------------------------------------------------------------------
# Sanitizer reports (a build of scripts/sanitize.sh): AddressSanitizer writes
# its reports to ASAN_OPTIONS' log_path, but UBSan linked with it writes to
# stderr whatever its options say; every stderr a test captures is searched,
# and a test during which a report appeared fails (the _no_leftovers fixture).
# With LAZARUS_SANITIZER_LOG (a directory) each report is also written there.
# --------------------------------------------------------------------------
SANITIZER_RE = re.compile(r"runtime error: |ERROR: AddressSanitizer|ERROR: LeakSanitizer|"
                          r"SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer")
sanitizer_reports: list[str] = []


def sanitizer_check(argv, stderr: str) -> None:
    if not SANITIZER_RE.search(stderr):
        return
    report = f"$ {' '.join(str(a) for a in argv)}\n{stderr}"
    sanitizer_reports.append(report)
    d = os.environ.get("LAZARUS_SANITIZER_LOG")
    if d:
        with open(os.path.join(d, f"stderr.{os.getpid()}.{len(sanitizer_reports)}"), "w") as f:
            f.write(report)


# --------------------------------------------------------------------------
# Running lazarus as root or as an ordinary user
# --------------------------------------------------------------------------
@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    argv: list = field(default_factory=list)

    def stderr_lines(self) -> list[str]:
        return [l for l in self.stderr.splitlines() if l.strip()]

    def __str__(self):
        return (f"$ {' '.join(self.argv)}\n-> exit {self.rc}\n--- stdout\n{self.stdout[-3000:]}"
                f"\n--- stderr\n{self.stderr[-3000:]}")


class Runner:
    """Runs commands as one identity: `root`, or `user` (nobody, through
    setpriv, when the session is root; the session's own user otherwise).
    `base` is a directory that identity owns and can write; stores go there."""

    def __init__(self, mode: str, base: Path):
        self.mode = mode
        self.base = base
        if mode == "user" and IS_ROOT:
            self.prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
            self.uid = NOBODY
        else:
            self.prefix = []
            self.uid = os.geteuid()
        self.env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": str(base),
            "LANG": "C.UTF-8",
            "TMPDIR": str(base),
        }
        # a sanitizer build (scripts/sanitize.sh) gets its settings through
        # (LAZARUS_TEST_FSD_WRITEBACK=1: the --fs tests with the kernel's writeback cache)
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "LAZARUS_INHERIT_MIN_KIB", "LAZARUS_TEST_FSD_WRITEBACK"):
            if k in os.environ:
                self.env[k] = os.environ[k]

    def mkdir(self, name: str, mode: int = 0o755) -> Path:
        p = self.base / name
        p.mkdir(mode=mode)
        os.chmod(p, mode)
        if IS_ROOT:
            os.chown(p, self.uid, self.uid)
        return p

    def touch(self, path: Path) -> None:
        path.touch()
        if IS_ROOT:
            os.chown(path, self.uid, self.uid)

    def argv(self, args) -> list[str]:
        return self.prefix + [str(a) for a in args]

    def run(self, args, timeout: float = 60, check_rc: int | None = None) -> Result:
        argv = self.argv(args)
        try:
            cp = subprocess.run(argv, cwd=self.base, env=self.env, stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"timed out after {timeout}s: {' '.join(argv)}\n"
                                 f"stdout: {e.stdout!r}\nstderr: {e.stderr!r}")
        rc = cp.returncode if cp.returncode >= 0 else 128 - cp.returncode
        res = Result(rc, cp.stdout.decode(errors="replace"), cp.stderr.decode(errors="replace"), argv)
        sanitizer_check(argv, res.stderr)
        if check_rc is not None:
            assert res.rc == check_rc, str(res)
        return res

    def lz(self, *args, timeout: float = 60, check_rc: int | None = None) -> Result:
        return self.run([LAZARUS, *args], timeout=timeout, check_rc=check_rc)

    def start(self, args) -> Proc:
        return Proc(self.argv(args), cwd=self.base, env=self.env)

    def start_lz(self, *args) -> Proc:
        return self.start([LAZARUS, *args])

    # -- store helpers ------------------------------------------------------
    def list_json(self, store: Path, check: bool = True):
        r = self.lz("list", "-d", store, "--json", timeout=30)
        if r.rc != 0:
            if check:
                raise AssertionError(f"lazarus list failed\n{r}")
            return None
        try:
            data = json.loads(r.stdout)
        except ValueError:
            raise AssertionError(f"lazarus list --json printed no JSON\n{r}")
        assert isinstance(data, list), f"list --json is not an array\n{r}"
        return data

    def indexes(self, store: Path, check: bool = True):
        data = self.list_json(store, check=check)
        if data is None:
            return None
        return [int(e["index"]) for e in data]

    def checkpoint_when_up(self, store: Path, within: float = 30) -> int:
        """`lazarus checkpoint` right after starting a job or a restart: retried
        while the job is not up yet (no supervisor yet, still restoring)."""
        deadline = time.monotonic() + within
        while True:
            r = self.lz("checkpoint", "-d", store, timeout=120)
            if r.rc == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert r.rc == 0, f"lazarus checkpoint failed for {within}s\n{r}"
        assert re.fullmatch(r"\d+\n?", r.stdout), f"checkpoint must print a bare integer\n{r}"
        return int(r.stdout)

    def checkpoint(self, store: Path, timeout: float = 120) -> int:
        r = self.lz("checkpoint", "-d", store, timeout=timeout)
        assert r.rc == 0, f"lazarus checkpoint failed\n{r}"
        assert re.fullmatch(r"\d+\n?", r.stdout), f"checkpoint must print a bare integer\n{r}"
        return int(r.stdout)


def _user_base() -> Path:
    d = Path(tempfile.mkdtemp(prefix="lazarus-user-", dir="/tmp"))
    os.chmod(d, 0o755)
    if IS_ROOT:
        os.chown(d, NOBODY, NOBODY)
    return d


@pytest.fixture(params=["root", "user"])
def mode(request):
    if request.param == "root" and not IS_ROOT:
        pytest.skip("the root variant needs the test session to run as root")
    return request.param


@pytest.fixture
def runner(mode, tmp_path, lazarus_bin):
    """A Runner for the parametrized identity, with a fresh base directory."""
    if mode == "user" and IS_ROOT:
        base = _user_base()
    else:
        base = tmp_path / "base"
        base.mkdir()
    r = Runner(mode, base)
    yield r
    if base != tmp_path / "base":
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_leftovers():
    """Every test starts and ends without stray processes; zombies are reaped;
    no command it ran printed a sanitizer report."""
    reports = len(sanitizer_reports)
    yield
    pids = []
    for c in stray_children():
        pids.extend(kill_tree(c))
    for p in list(_tracked):
        try:
            os.waitpid(p, 0)
        except ChildProcessError:
            pass
        _tracked.discard(p)
    wait_gone(pids)
    reap_orphans()
    if len(sanitizer_reports) > reports:
        pytest.fail("sanitizer report:\n" + "\n".join(sanitizer_reports[reports:])[-6000:], pytrace=False)


# --------------------------------------------------------------------------
# Tiers (tests/README.md has their times).  `-m quick` (`make check`): the
# CLI, the codec, damaged images and frames, the format's unit tests: seconds
# to a minute.  `-m "not slow"`: everything but the long end-to-end and soak
# tests.  `-m "quick or integrity"`: what scripts/sanitize.sh runs with the
# sanitizer build (the quick tier and the damaged-store suite).  No marker
# option (scripts/test.sh, CI): every test.  The tiers are given here by
# node-id prefix (the file, or file::test), in one place.
# --------------------------------------------------------------------------
TIERS = {
    "quick": ["test_cli.py", "test_codec.py", "test_corrupt_image.py", "test_frame_check.py",
              "test_format_unit.py"],
    # each at least ten seconds, or a soak: SIGKILLs at random instants of
    # real programs, the corruption suite (minutes together; tests/README.md)
    "slow": ["test_memory_restart.py::test_killed_at_random_instants",
             "test_files_programs.py", "test_tree_programs.py",
             "test_fs.py::test_static_files_only_killed_at_random_instants", "test_fs.py::test_daemon_killed",
             "test_fs_buffer.py::test_static_killed_at_random_instants_buffer", "test_fs_buffer.py::test_daemon_killed_in_commit", "test_kill_restart.py", "test_torn_checkpoint.py",
             "test_undo_shared.py::test_dd_loop_whole_job_killed",
             "test_threads.py::test_openmp_killed_at_random_instants",
             "test_threads.py::test_producer_consumer_killed_at_random_instants",
             "test_threads.py::test_raw_sigurg_block_fails_checkpoint",
             "test_api_hooks.py::test_too_long_a_section_fails_the_checkpoint",
             "test_api_hooks.py::test_after_restart_hook_that_waits_for_a_thread",
             "test_pipes.py::test_killed_with_data_in_flight",
             "test_event_fds.py::test_event_loop_restarts", "test_event_fds.py::test_asyncio_loop_restarts",
             "test_timers.py::test_posix_timers_restart",
             "test_timers.py::test_inotify_loop_restarts",
             "test_incremental.py::test_program_killed_while_checkpointing",
             "test_shared_maps.py::test_killed_at_random_instants",
             "test_store_integrity.py::test_damaged_store",
             "test_busy_machine.py",
             "test_calls.py::test_every_call_goes_on", "test_calls.py::test_remaining_timeout",
             "test_slurm.py", "test_s3_flush.py", "test_s3_journals.py", "test_s3_fetch.py",
             "test_s3_crypt.py::test_encrypted_flush_and_restart_elsewhere", "test_s3_crypt.py::test_refusals",
             "test_libckpt.py::test_killed_at_random_instants",
             "test_lazy_restart.py::test_heap_killed_at_random_instants_lazy",
             "test_lazy_restart.py::test_threads_killed_at_random_instants_lazy",
             "test_format_versions.py::test_version5_store_lists_verifies_restarts"],
    "integrity": ["test_store_integrity.py", "test_corrupt_image.py", "test_frame_check.py"],
}


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: the quick tier (make check): CLI, codec, damaged images, format unit tests")
    config.addinivalue_line("markers", "slow: long end-to-end and soak tests (-m 'not slow' leaves them out)")
    config.addinivalue_line("markers", "integrity: damaged stores (scripts/sanitize.sh runs them with the sanitizer build)")


def _in_tier(nodeid: str, entry: str) -> bool:
    """nodeid (file::test[params]) is the file or the test (any params) entry names."""
    if "::" not in entry:
        return nodeid.startswith(entry + "::")
    return nodeid == entry or nodeid.startswith(entry + "[")


def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.path.name + item.nodeid[len(item.nodeid.split("::")[0]):]  # file::test[params]
        for marker, entries in TIERS.items():
            if any(_in_tier(nodeid, e) for e in entries):
                item.add_marker(marker)


def pytest_report_header(config):
    return [f"lazarus: {LAZARUS}", f"LAZARUS_TEST_SEED={SEED}",
            f"running as uid {os.geteuid()} ({'root and user variants' if IS_ROOT else 'user variants only'})"]


@pytest.fixture
def rng(request):
    """A random generator seeded from LAZARUS_TEST_SEED and the test's id."""
    s = f"{SEED}:{request.node.nodeid}"
    print(f"random seed: LAZARUS_TEST_SEED={SEED} (test stream '{s}')")
    return random.Random(s)


# --------------------------------------------------------------------------
# Build products and test programs
# --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def lazarus_bin():
    missing = [str(p) for p in (LAZARUS, BUILD / "bin" / "lazarus-restore",
                                LIBDIR / "liblazarus-rt.so", LIBDIR / "liblazarus.so")
               if not p.exists()]
    if missing:
        pytest.fail(f"build products missing (run `make` in {REPO}): {', '.join(missing)}")
    return LAZARUS


@dataclass
class Programs:
    dir: Path
    heap_mutator: Path
    signals_timers: Path
    exit_code: Path
    holds_fd: Path
    py_compute: Path
    _api: Path | None = None

    @property
    def api_prog(self) -> Path:
        if self._api is None:
            if not (INCLUDE / "lazarus.h").exists():
                pytest.fail(f"{INCLUDE / 'lazarus.h'} is missing")
            self._api = _compile("api_prog", self.dir,
                                 [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}"])
        return self._api


def _compile(name: str, outdir: Path, extra=()) -> Path:
    out = outdir / name
    cmd = ["gcc", "-O2", "-Wall", "-o", str(out), str(PROGRAMS_SRC / f"{name}.c"), *extra]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.fail(f"compiling {name} failed:\n$ {' '.join(cmd)}\n{cp.stdout}{cp.stderr}")
    os.chmod(out, 0o755)
    return out


@pytest.fixture(scope="session")
def programs():
    """Test programs compiled with gcc -O2 -Wall into a directory every user
    can read (the user variants run them as nobody)."""
    d = Path(tempfile.mkdtemp(prefix="lazarus-progs-", dir="/tmp"))
    os.chmod(d, 0o755)
    progs = Programs(
        dir=d,
        heap_mutator=_compile("heap_mutator", d),
        signals_timers=_compile("signals_timers", d),
        exit_code=_compile("exit_code", d),
        holds_fd=_compile("holds_fd", d),
        py_compute=d / "py_compute.py",
    )
    shutil.copy(PROGRAMS_SRC / "py_compute.py", progs.py_compute)
    os.chmod(progs.py_compute, 0o644)
    yield progs
    shutil.rmtree(d, ignore_errors=True)


_plain_cache: dict = {}


def plain_output(argv, timeout: float = 300) -> str:
    """stdout of an uninterrupted run without Lazarus (cached per argv)."""
    key = tuple(str(a) for a in argv)
    if key not in _plain_cache:
        cp = subprocess.run(list(key), capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
        assert cp.returncode == 0, f"plain run failed: {key}\n{cp.stderr}"
        _plain_cache[key] = cp.stdout
    return _plain_cache[key]


# --------------------------------------------------------------------------
# Store inspection
# --------------------------------------------------------------------------
CKPT_RE = re.compile(r"ckpt\.(\d{6})$")


def ckpt_dirs(store: Path) -> list[int]:
    return sorted(int(m.group(1)) for n in os.listdir(store) if (m := CKPT_RE.match(n)))


def tmp_entries(store: Path) -> list[str]:
    return sorted(n for n in os.listdir(store) if n.startswith("tmp."))


def ckpt_path(store: Path, index: int) -> Path:
    return store / f"ckpt.{index:06d}"


def snapshot(store: Path) -> dict:
    """Names, kinds, modes, owners and content hashes of everything in DIR."""
    out = {}
    for root, dirs, files in os.walk(store):
        for n in dirs + files:
            p = Path(root) / n
            st = p.lstat()
            rel = str(p.relative_to(store))
            if stat.S_ISREG(st.st_mode):
                out[rel] = ("file", oct(st.st_mode), st.st_uid, st.st_size,
                            hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("other", oct(st.st_mode), st.st_uid)
    return out


def copy_store(src: Path, dst: Path) -> None:
    """cp -a: a store copied elsewhere (as to another machine) keeps working."""
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


def kill_program(proc: Proc, comm: str | None = None, expect: int = 137,
                 sig: int = signal.SIGKILL) -> int:
    """Send sig (SIGKILL) to the program under the supervisor proc; the
    supervisor must then exit with `expect` (128+9).  Returns the program's
    getpid()."""
    pid = find_program(proc.pid, comm)
    assert pid is not None, f"no program under the supervisor\n{proc.stderr}"
    nspid = ns_pid(pid)
    os.kill(pid, sig)
    rc = proc.wait(timeout=60)
    assert rc == expect, (f"{proc.argv[-3:]}: supervisor exited {rc} after signal {int(sig)} to the "
                          f"program, want {expect}\n--- stderr\n{proc.stderr[-2000:]}")
    wait_gone([pid])
    return nspid


# --------------------------------------------------------------------------
# Kill-and-restart driver
# --------------------------------------------------------------------------
@dataclass
class Segment:
    kind: str  # "run" or "restart"
    rc: int
    stdout: str
    stderr: str
    killed_pid: int | None = None
    killed_nspid: int | None = None  # getpid() of the killed program
    delay: float | None = None


@dataclass
class KilledRun:
    segments: list
    kills: int

    @property
    def all_stdout(self) -> str:
        return "".join(s.stdout for s in self.segments)

    def last_line(self, prefix: str) -> str | None:
        """The last line starting with prefix, over all segments in order."""
        found = None
        for s in self.segments:
            for line in s.stdout.splitlines():
                if line.startswith(prefix):
                    found = line
        return found

    def describe(self) -> str:
        out = []
        for i, s in enumerate(self.segments):
            delay = f"{s.delay:.3f}s" if s.delay is not None else "-"
            out.append(f"== segment {i} ({s.kind}) exit {s.rc} killed pid={s.killed_pid} "
                       f"(getpid {s.killed_nspid}) after {delay}")
            out.append("-- stdout: " + s.stdout[-600:].replace("\n", " | "))
            out.append("-- stderr: " + s.stderr[-1500:])
        return "\n".join(out)


def wait_new_checkpoint(runner: Runner, store: Path, above: int, proc: Proc,
                        timeout: float = 90) -> bool:
    """Wait until `list` shows a checkpoint with index > above; False if the
    job ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        idx = runner.indexes(store, check=False)
        if idx and max(idx) > above:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    raise AssertionError(f"no new checkpoint above {above} within {timeout}s\n"
                         f"--- stderr\n{proc.stderr[-2000:]}")


def run_until_done(runner: Runner, store: Path, program_argv, rng: random.Random, *,
                   kills: int = 10, interval: int = 1, comm: str | None = None,
                   max_delay: float | None = None, timeout: float = 600,
                   done_re: str | None = None, run_opts=(), restart_opts=()) -> KilledRun:
    """`lazarus run -i INTERVAL PROGRAM`, then SIGKILL the program at random
    instants (each time at a uniform random delay in [0, max_delay] after a
    new checkpoint appeared in `list`, so every segment makes progress and
    kills also land while the next checkpoint is written), `lazarus restart`
    after each kill, until the program completes.  Every killed segment must
    end with status 137 and the final one with 0; done_re (a regex for the
    program's last line) tells a program that finished just before a kill
    from a supervisor that reports a kill as success; restart_opts go to
    every `restart` (`--lazy`)."""
    if max_delay is None:
        max_delay = float(interval)
    start = time.monotonic()
    segs: list[Segment] = []
    proc = runner.start_lz("run", "-d", store, "-i", interval, *run_opts, "--", *program_argv)
    kind = "run"
    done_kills = 0
    last_idx = -1
    while True:
        killed = None
        killed_ns = None
        delay = None
        if done_kills < kills and wait_new_checkpoint(runner, store, last_idx, proc):
            delay = rng.uniform(0.0, max_delay)
            end = time.monotonic() + delay
            while time.monotonic() < end and proc.poll() is None:
                time.sleep(0.005)
            if proc.poll() is None:
                killed = find_program(proc.pid, comm)
                assert killed is not None, "no program process under the supervisor"
                killed_ns = ns_pid(killed)
                os.kill(killed, signal.SIGKILL)
        remaining = timeout - (time.monotonic() - start)
        rc = proc.wait(timeout=max(remaining, 30))
        segs.append(Segment(kind, rc, proc.stdout, proc.stderr, killed, killed_ns, delay))
        if killed is not None and rc == 137:
            done_kills += 1
            wait_gone([killed])
            idx = runner.indexes(store)
            assert idx, f"no checkpoint to restart from\n{KilledRun(segs, done_kills).describe()}"
            last_idx = max(idx)
            proc = runner.start_lz("restart", "-d", store, *restart_opts)
            kind = "restart"
            continue
        kr = KilledRun(segs, done_kills)
        if killed is not None and not (rc == 0 and done_re and re.search(done_re, proc.stdout, re.M)):
            # the program had not finished on its own just before the kill
            raise AssertionError(f"{kind}: supervisor exited {rc} after SIGKILL of the program "
                                 f"(pid {killed}), want 137\n{kr.describe()}")
        assert rc == 0, f"{kind} ended with status {rc} (expected 0)\n{kr.describe()}"
        if done_re:
            assert re.search(done_re, kr.all_stdout, re.M), f"no /{done_re}/ in the output\n{kr.describe()}"
        print(f"run_until_done: {done_kills} kills, {len(segs)} segments, "
              f"{time.monotonic() - start:.1f}s")
        for i, sg in enumerate(segs):
            last = (sg.stdout.strip().splitlines() or ["-"])[-1]
            delay = f"{sg.delay:.3f}s" if sg.delay is not None else "-"
            print(f"  segment {i} {sg.kind}: exit {sg.rc}, kill delay {delay}, last line {last!r}")
        return kr


# --------------------------------------------------------------------------
# Suite helpers: what several end-to-end files do alike (one block, to ease
# merging: other files append their own below)
# --------------------------------------------------------------------------
def stop_and_kill(roots, include_roots: bool = True) -> list[int]:
    """SIGSTOP roots and everything below them, parents first, listing again
    until no new process appears (a stopped process starts none, and
    /proc/PID/task/*/children is reliable only for stopped children), then
    SIGKILL all of them: none sees another die.  Returns the pids."""
    seen: list[int] = []
    for _ in range(200):
        now = (list(roots) if include_roots else []) + [p for r in roots for p, _ in descendants(r)]
        new = [p for p in now if p not in seen]
        if not new:
            break
        for p in new:
            seen.append(p)
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return seen


def kill_job(proc: Proc, timeout: float = 60) -> list[int]:
    """Kill the whole job at once, as a machine dying: the supervisor and
    every process below it stopped top-down, then SIGKILLed.  Waits for the
    supervisor and until every one is gone; returns their pids."""
    pids = stop_and_kill([proc.pid])
    proc.wait(timeout=timeout)
    wait_gone([p for p in pids if p != proc.pid])
    return pids


def checkpoint_kill_restart(runner: Runner, store: Path, proc: Proc, *, comm: str | None = None,
                            expect: str | None = None) -> tuple[Proc, Result]:
    """`lazarus checkpoint` (it must succeed, and its stderr say `expect`,
    e.g. "2 processes"), then SIGKILL of the program `comm` alone or, with
    comm None, of the whole job (kill_job), then `lazarus restart`: returns
    the restart's Proc and the checkpoint's Result."""
    res = runner.lz("checkpoint", "-d", store, timeout=120)
    assert res.rc == 0 and (expect is None or expect in res.stderr), str(res)
    if comm:
        kill_program(proc, comm)
    else:
        kill_job(proc)
    return runner.start_lz("restart", "-d", store), res


@dataclass
class Cycle:
    """What a trigger_cycles hook is given: cycle n (from 1), the job's Proc
    now, the output of the runs before, when `ready n` came, when the job
    was killed and restarted (time.monotonic()), the checkpoint's Result."""
    n: int
    proc: Proc
    out: str
    t_ready: float = 0.0
    t_down: float = 0.0
    t_up: float = 0.0
    ckpt: Result | None = None


def trigger_cycles(runner: Runner, argv, *, comm: str | None = None, cycles: int = 2, settle: float = 0.0,
                   down: float = 0.0, expect: str | None = None, before_kill=None, while_down=None,
                   after_restart=None, after_trigger=None, trig: Path | None = None, started=None) -> str:
    """The restart cycles of a program that checks itself: `argv TRIG`
    (TRIG = base/trig unless given; or argv(TRIG), argv a function, for TRIG
    elsewhere in the command line) under `lazarus run -i 0` prints `ready N`, waits for
    the file TRIG.N, checks what it restored and prints `check N ok` (or
    `FAIL ...`); `done` at the end.  Per cycle N: `settle` s after `ready N`
    a checkpoint (its stderr saying `expect`), before_kill(cy), SIGKILL of
    the program `comm` or, with comm None, of the whole job, `down` s down
    and while_down(cy), `lazarus restart`, after_restart(cy), TRIG.N made,
    after_trigger(cy), `check N ok` awaited; started(proc) is told of every
    run and restart.  No FAIL anywhere; returns all the output."""
    store = runner.base / "store"
    trig = trig or runner.base / "trig"
    argv = argv(trig) if callable(argv) else [*argv, trig]
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", *argv)
    if started:
        started(proc)
    out = ""
    for n in range(1, cycles + 1):
        proc.wait_for_output(rf"^ready {n}$", timeout=60)
        cy = Cycle(n, proc, out, t_ready=time.monotonic())
        time.sleep(settle)
        cy.ckpt = runner.lz("checkpoint", "-d", store, timeout=120)
        assert cy.ckpt.rc == 0 and (expect is None or expect in cy.ckpt.stderr), str(cy.ckpt)
        if before_kill:
            before_kill(cy)
        if comm:
            kill_program(proc, comm)
        else:
            kill_job(proc)
        out += proc.stdout
        assert "FAIL" not in proc.stdout, out + proc.stderr
        cy.out, cy.t_down = out, time.monotonic()
        time.sleep(down)
        if while_down:
            while_down(cy)
        proc = cy.proc = runner.start_lz("restart", "-d", store)
        cy.t_up = time.monotonic()
        if started:
            started(proc)
        if after_restart:
            after_restart(cy)
        runner.touch(Path(f"{trig}.{n}"))
        if after_trigger:
            after_trigger(cy)
        proc.wait_for_output(rf"^check {n} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, out + proc.stdout + proc.stderr
    out += proc.stdout
    assert re.search(r"^done$", out, re.M), out
    return out


def assert_refused(runner: Runner, store: Path, expect: str | None = None, *, cmds=("verify", "restart"),
                   at: int | None = None, what: str = "") -> None:
    """Each of cmds (`verify`, `restart`) on store, and given at, each again
    with `--at AT`, is refused: exit non-zero, exactly one line on stderr
    (matching the regex expect), nothing run (a restart prints nothing and
    leaves no process), the store byte for byte as it was."""
    before, had = snapshot(store), set(stray_children())
    runs = [(c, []) for c in cmds] + ([(c, ["--at", str(at)]) for c in cmds] if at is not None else [])
    for cmd, extra in runs:
        r = runner.lz(cmd, "-d", store, *extra, timeout=120)
        assert r.rc != 0, f"{what}: accepted\n{r}"
        lines = r.stderr_lines()
        assert len(lines) == 1, f"{what}: want exactly one line on stderr\n{r}"
        if expect:
            assert re.search(expect, lines[0]), f"{what}: the line should match /{expect}/\n{r}"
        if cmd == "restart":
            assert r.stdout == "", f"{what}: the program must not have run\n{r}"
            deadline = time.monotonic() + 3
            while set(stray_children()) - had and time.monotonic() < deadline:
                reap_orphans()
                time.sleep(0.05)
            assert not set(stray_children()) - had, f"{what}: restart left processes behind"
        assert snapshot(store) == before, f"{what}: `{cmd}` changed DIR"


def refuse_edited_manifest(runner: Runner, store: Path, idx: int, edit, expect: str = "malformed",
                           cmds=("restart",)) -> None:
    """Checkpoint idx's manifest changed by edit(lzformat.Manifest) and saved
    (sealed again, so only its records are wrong): refused (assert_refused)."""
    import lzformat
    path = ckpt_path(store, idx) / "manifest"
    m = lzformat.Manifest.load(path)
    edit(m)
    m.save(path)
    assert_refused(runner, store, expect, cmds=cmds, what="a manifest edited")


def refused_until_let_go(runner: Runner, store: Path, proc: Proc, want: str, f1: Path, f2: Path, *,
                         lines: int = 1) -> int:
    """A checkpoint of the running job (its program waiting for f1) is
    refused: exit non-zero, nothing on stdout, at most `lines` lines on
    stderr, matching the regex want; nothing listed nor left (tmp.*); the
    program runs on.  Once f1 exists the program lets go (prints `closed`)
    and a checkpoint works (its index returned, the only one listed); once
    f2 exists the program ends with 0."""
    res = runner.lz("checkpoint", "-d", store, timeout=120)
    assert res.rc != 0 and res.stdout == "", f"the checkpoint was not refused\n{res}"
    assert 1 <= len(res.stderr_lines()) <= lines, str(res)
    assert re.search(want, res.stderr), f"the message should say why (/{want}/)\n{res}"
    assert runner.indexes(store) == [], "a failed checkpoint is listed"
    assert tmp_entries(store) == [], "a failed checkpoint left tmp.* behind"
    time.sleep(0.2)
    assert proc.poll() is None, f"the program died\n{proc.stderr}"
    runner.touch(f1)
    proc.wait_for_output(r"^closed$", timeout=30)
    idx = runner.checkpoint(store)
    assert runner.indexes(store) == [idx]
    runner.touch(f2)
    assert proc.wait(timeout=60) == 0, proc.stderr
    return idx


def parent_child_restart(runner: Runner, src: str, *args) -> None:
    """A Python program (its source src) of a parent and a forked child, run
    as `python3 PROG ARGS TRIG` under `lazarus run -i 0`: at its `ready` the
    job is checkpointed (2 processes), killed whole and restarted; once TRIG
    exists each checks what it restored: `ok parent` and `ok child`, exit 0."""
    script = runner.base / "prog.py"
    script.write_text(src)
    os.chmod(script, 0o644)
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", script, *args, trig)
    proc.wait_for_output(r"^ready$", timeout=60)
    proc, _ = checkpoint_kill_restart(runner, store, proc, expect="2 processes")
    time.sleep(0.3)
    runner.touch(trig)
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.split("\n")[:-1]) == ["ok child", "ok parent"], proc.stdout
