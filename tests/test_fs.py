"""The file system front end (issue 22 part 1): `lazarus run --fs PATH`
mounts lazarus-fsd (fs/, FUSE) in place over PATH, and every change made
under PATH -- by any program, static or not -- is recorded by the daemon
into the job's file journal, in undo mode.

- A statically linked program (programs/fs_static_job.c: no Lazarus library)
  writes its own restart file and commits with `lazarus checkpoint`;
  between commits it appends, overwrites in place, renames and deletes.  As
  a files-only job (`run --files-only`) it is SIGKILLed at random instants
  (LAZARUS_TEST_SEED) and `lazarus restart`ed each time: its files end
  byte-identical to an uninterrupted run's without Lazarus.
- The file scenarios of test_files_scenarios.py (RARE, RARW, RAD, files
  opened and closed between checkpoints, rename, truncate, directories)
  with memory checkpoints and their work tree under `--fs`.
- The daemon SIGKILLed while the job runs and while a commit is under way:
  the job ends with one line, no mount is left (/proc/self/mountinfo), and
  the next `restart` goes back to the last commit exactly.
- Bad input: one line, a non-zero exit, nothing mounted.

Root mounts with mount(2) through fusermount3; the `user` variants need
/dev/fuse usable by everyone, as a desktop's udev rule makes it (0666):
this VM's is 0600, so the fixture below opens it for the test's length and
puts its mode back (tests/README.md says so)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import time
from pathlib import Path

import pytest

from conftest import (INCLUDE, IS_ROOT, LAZARUS, LIBDIR, PROGRAMS_SRC, find_program, kill_program, run_until_done,
                      wait_gone)
from test_files_scenarios import CK, Job, R, S, expect_file, rbytes, F, D, tree, fsprogs  # noqa: F401

STEPS = "240"


# Several pytest sessions may use /dev/fuse at once (a developer's beside CI's,
# helpers'): each holds this lock shared while it needs the device open to
# everyone, and the last one out puts back the mode the first one found.
FUSE_LOCK = Path("/tmp/lazarus-test-fuse-dev.lock")


@pytest.fixture
def fuse_dev(mode):
    """/dev/fuse 0666 for an ordinary user's mount (a desktop's udev rule)."""
    dev = Path("/dev/fuse")
    if not dev.exists():
        pytest.skip("no /dev/fuse")
    if mode != "user" or not IS_ROOT:
        yield
        return
    import fcntl
    fd = os.open(FUSE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        old = stat.S_IMODE(dev.stat().st_mode)
        if old & 0o006 != 0o006:
            os.pwrite(fd, f"{old:o}\n".encode(), 0)  # the mode to put back, written by the first to change it
            os.chmod(dev, 0o666)
        yield
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other session uses it now
        except BlockingIOError:
            return
        saved = os.pread(fd, 16, 0).decode().strip()
        if saved:
            os.chmod(dev, int(saved, 8))
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def lazarus_mounts() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.startswith("fuse.lazarus "):
            out.append(pre.split()[4])
    return out


def assert_no_mount(path: Path) -> None:
    deadline = time.monotonic() + 5
    while str(path) in lazarus_mounts() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert str(path) not in lazarus_mounts(), f"{path} is still mounted: {lazarus_mounts()}"


def hashes(root: Path) -> dict:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def static_job(programs):
    """fs_static_job linked statically (no runtime can be preloaded into it)."""
    out = programs.dir / "fs_static_job"
    import subprocess
    cp = subprocess.run(["gcc", "-static", "-O2", "-Wall", "-o", str(out), str(PROGRAMS_SRC / "fs_static_job.c")],
                        capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.fail(f"compiling fs_static_job -static failed:\n{cp.stderr}")
    os.chmod(out, 0o755)
    return out


@pytest.fixture(scope="module")
def static_api_job(programs):
    """fs_static_job linked statically with liblazarus.a: it commits through
    lazarus_tx_commit(), which reaches the supervisor on DIR/ctl.sock."""
    out = programs.dir / "fs_static_api_job"
    import subprocess
    cp = subprocess.run(["gcc", "-static", "-O2", "-Wall", "-DWITH_API", f"-I{INCLUDE}", "-o", str(out),
                         str(PROGRAMS_SRC / "fs_static_job.c"), str(LIBDIR / "liblazarus.a"), "-pthread"],
                        capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.fail(f"compiling fs_static_job -static with liblazarus.a failed:\n{cp.stderr}")
    os.chmod(out, 0o755)
    return out


def reference(runner, prog: Path, steps: str) -> dict:
    """An uninterrupted run without Lazarus."""
    ref = runner.mkdir("ref")
    env = dict(runner.env)
    env.pop("LAZARUS_DIR", None)
    r = runner.run([prog, ref, steps, LAZARUS])
    assert r.rc == 0 and r.stdout.endswith("done\n"), str(r)
    return hashes(ref)


# --------------------------------------------------------------------------
# A static program, files only, killed at random instants
# --------------------------------------------------------------------------
def test_static_files_only_killed_at_random_instants(runner, fuse_dev, static_api_job, rng):
    """A static C program that commits through lazarus_tx_commit() after
    writing its own restart file, as a files-only job, SIGKILLed at random
    instants and restarted each time: its files end as an uninterrupted
    run's (the same program without a job, where each commit is a no-op)."""
    static_job = static_api_job
    want = reference(runner, static_job, STEPS)
    work = runner.mkdir("work")
    store = runner.base / "st"
    kr = run_until_done(runner, store, [static_job, work, STEPS, LAZARUS], rng, kills=5, interval=0,
                        comm="fs_static_job", max_delay=0.4, done_re=r"^done$",
                        run_opts=("--files-only", "--fs", work))
    assert_no_mount(work)
    got = hashes(work)
    assert got == want, (f"the files differ from an uninterrupted run's:\n"
                         f"  missing {sorted(set(want) - set(got))}\n  extra {sorted(set(got) - set(want))}\n"
                         f"  different {sorted(k for k in want if k in got and got[k] != want[k])}\n"
                         + kr.describe())
    # every segment after a kill started from the restart file of the last commit
    starts = [int(m) for s in kr.segments[1:] for m in re.findall(r"^start at step (\d+)$", s.stdout, re.M)]
    assert len(starts) == len(kr.segments) - 1, kr.describe()
    # a files-only store lists, verifies and collects like any other; show says it has no process
    r = runner.lz("verify", "-d", store)
    assert r.rc == 0, str(r)
    listed = runner.list_json(store)
    assert listed and all(e["trigger"] == "files" and e["processes"] == 0 for e in listed), listed
    r = runner.lz("gc", "-d", store)
    assert r.rc == 0, str(r)
    r = runner.lz("show", "-d", store)
    assert r.rc == 1 and "files-only" in r.stderr and len(r.stderr.strip().splitlines()) == 1, str(r)


# --------------------------------------------------------------------------
# The file scenarios through the mount, with memory checkpoints
# --------------------------------------------------------------------------
def fs_job(runner, fsprogs, setup, steps, **kw) -> Job:
    job = Job(runner, fsprogs, setup, steps, **kw)
    job.run_opts = ["--fs", str(job.work)]
    return job


def assert_daemon_journal(job: Job) -> None:
    """What changed under the mount was recorded by the daemon: a proc.<pid>/
    journal of its own in the checkpoints (the program's runtime leaves PATH
    to it)."""
    dirs = [d for d in job.store.glob("ckpt.*/proc.*") if (d / "files.log").exists()]
    assert dirs, f"no daemon journal in {sorted(p.name for p in job.store.iterdir())}"


def test_rare_through_fs(runner, fuse_dev, fsprogs):
    base = rbytes(10, 1000)
    block = rbytes(11, 4096)
    steps = [CK,
             S("open", path="example", flags=["O_WRONLY", "O_APPEND"], as_="fd"),
             S("write", fd="fd", data=R(11, 4096))]
    job = fs_job(runner, fsprogs, {"example": F(base)}, steps)
    rep = job.run()
    assert_daemon_journal(job)
    expect_file(rep.end, "example", base + block)
    for _ in range(2):
        r, rr = job.restart(0)
        job.check_restored(0, r, rr)
        job.check_rerun(0, r, rr)
        expect_file(rr.end, "example", base + block)
    job.finish()
    assert_no_mount(job.work)


def test_rarw_rad_through_fs(runner, fuse_dev, fsprogs):
    old = rbytes(20, 8192)
    steps = [S("open", path="example", flags=["O_RDWR"], as_="fd"),
             CK,
             S("read", fd="fd", n=4096),
             S("lseek", fd="fd", off=0),
             S("write", fd="fd", data=R(21, 4096)),
             CK,
             S("read", fd="fd", n=4096),
             S("lseek", fd="fd", off=0),
             S("write", fd="fd", data=R(22, 4096)),
             S("unlink", path="example")]
    job = fs_job(runner, fsprogs, {"example": F(old)}, steps)
    job.run()
    job.restart_all()
    assert_no_mount(job.work)


def test_names_truncate_dirs_through_fs(runner, fuse_dev, fsprogs):
    """Files opened and closed between checkpoints, rename over an existing
    file, truncation, mkdir/rmdir of a directory of N and of a new one."""
    a, b = rbytes(40, 6000), rbytes(41, 3000)
    steps = [CK,
             S("append", path="nonactive", data=R(42, 500)),
             S("rename", src="a", dst="b"),
             S("truncate", path="c", len=100),
             S("mkdir", path="newdir"),
             S("put", path="newdir/f", data=R(43, 700)),
             CK,
             S("rmdir", path="olddir"),
             S("unlink", path="newdir/f"),
             S("rename", src="b", dst="newdir/moved"),
             S("truncate", path="c", len=0),
             S("append", path="nonactive", data=R(45, 300))]
    job = fs_job(runner, fsprogs, {"a": F(a), "b": F(b), "c": F(rbytes(44, 9000)), "olddir": D()}, steps)
    job.run()
    job.restart_all()
    assert_no_mount(job.work)


# --------------------------------------------------------------------------
# The daemon killed
# --------------------------------------------------------------------------
def daemon_of(sup_pid: int) -> int:
    for _ in range(200):
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                st = Path(f"/proc/{p}/stat").read_text()
            except OSError:
                continue
            fields = st.rsplit(")", 1)[1].split()
            if int(fields[1]) == sup_pid and "(lazarus-fsd)" in st:
                return int(p)
        time.sleep(0.02)
    raise AssertionError("no lazarus-fsd under the supervisor")


@pytest.mark.parametrize("when", ["running", "committing"])
def test_daemon_killed(runner, fuse_dev, static_job, when):
    """SIGKILL of lazarus-fsd while the job runs, or while it holds a commit
    (LAZARUS_TEST_FSD_COMMIT_DELAY_MS keeps it there): one line, the job
    ends, no mount is left, and `restart` rolls the files back to the last
    commit (the program goes on from that commit's restart file) and they
    end as an uninterrupted run's."""
    want = reference(runner, static_job, STEPS)
    work = runner.mkdir("work")
    store = runner.base / "st"
    if when == "committing":
        runner.env["LAZARUS_TEST_FSD_COMMIT_DELAY_MS"] = "3000"
    proc = runner.start_lz("run", "-d", store, "--files-only", "--fs", work, "--",
                           static_job, work, STEPS, LAZARUS, "30")
    dpid = daemon_of(proc.pid)
    if when == "committing":
        # commit 1 before the program, then the program's first one: held for 3 s
        proc.wait_for_output(r"^start at step 0$", 30)
        time.sleep(1.5)
    else:
        proc.wait_for_output(r"^committed step 30$", 30)
        time.sleep(0.05)
    before = runner.indexes(store)
    os.kill(dpid, signal.SIGKILL)
    rc = proc.wait(timeout=60)
    # killed by the supervisor (137), or ended first by the error its file call got
    assert rc != 0, f"run exited {rc}\n{proc.stderr}"
    # one line from the supervisor (the program's own `lazarus checkpoint` may say its commit failed)
    lines = [l for l in proc.stderr.splitlines() if l.startswith("lazarus:") and "the job ends" in l]
    assert len(lines) == 1 and re.search(r"file system daemon of .* (was killed \(signal 9\)|died)", lines[0]), proc.stderr
    others = [l for l in proc.stderr.splitlines() if l.startswith("lazarus:") and l not in lines]
    assert all("file system" in l for l in others), proc.stderr
    assert "state=stopped" in (store / "job").read_text()
    assert_no_mount(work)
    wait_gone([dpid])
    after = runner.indexes(store)
    assert after == before, f"checkpoints {before} became {after}"
    committed = [int(m) for m in re.findall(r"^committed step (\d+)$", proc.stdout, re.M)]
    runner.env.pop("LAZARUS_TEST_FSD_COMMIT_DELAY_MS", None)
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0, str(r)
    first = re.search(r"^start at step (\d+)$", r.stdout, re.M)
    assert first and int(first.group(1)) == (committed[-1] if committed else 0), (r.stdout, proc.stdout)
    assert hashes(work) == want
    assert_no_mount(work)


def test_files_only_rollback_then_restart(runner, fuse_dev, static_api_job):
    """`lazarus rollback` of a files-only job after a SIGKILL of its program:
    the files under PATH are exactly those of its last commit (an
    uninterrupted run stopped at that step, without its final file), nothing
    is mounted or started; a second rollback is a no-op; `restart` then
    starts the program from that commit's restart file and it ends as an
    uninterrupted run."""
    want = reference(runner, static_api_job, STEPS)
    work = runner.mkdir("work")
    store = runner.base / "st"
    proc = runner.start_lz("run", "-d", store, "--files-only", "--fs", work, "--",
                           static_api_job, work, STEPS, LAZARUS, "30")
    proc.wait_for_output(r"^committed step 30$", 60)
    time.sleep(0.05)  # the steps after it under way, uncommitted
    kill_program(proc, "fs_static_api_j", expect=137)
    assert_no_mount(work)
    last = max(int(m) for m in re.findall(r"^committed step (\d+)$", proc.stdout, re.M))
    ref = runner.mkdir("ref_last")
    r = runner.run([static_api_job, ref, str(last), LAZARUS, "30"])
    assert r.rc == 0, str(r)
    (ref / "final.txt").unlink()
    at_last = hashes(ref)
    assert hashes(work) != at_last
    r = runner.lz("rollback", "-d", store, "--json")
    assert r.rc == 0, str(r)
    doc = json.loads(r.stdout)
    assert doc["changed"] is True and doc["files_rolled_back"] > 0, r
    assert hashes(work) == at_last, f"rolled back to {doc}, the last commit was of step {last}"
    assert str(work) not in lazarus_mounts(), lazarus_mounts()
    r = runner.lz("rollback", "-d", store)
    assert r.rc == 0 and "rolled back 0 files" in r.stdout, str(r)
    assert hashes(work) == at_last
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0 and re.search(rf"^start at step {last}$", r.stdout, re.M), str(r)
    assert hashes(work) == want
    assert_no_mount(work)


def test_abort_in_files_only_job_is_refused(runner, fuse_dev, static_api_job, tmp_path):
    """lazarus_tx_abort() from a files-only job's program: refused with its
    reason (not done yet), the files as they were."""
    tx = PROGRAMS_SRC / "tx_prog.c"
    out = runner.base / "tx_static"
    import subprocess
    cp = subprocess.run(["gcc", "-static", "-O2", "-pthread", f"-I{INCLUDE}", "-o", str(out), str(tx),
                         str(LIBDIR / "liblazarus.a")], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    os.chmod(out, 0o755)
    work = runner.mkdir("work")
    store = runner.base / "st"
    r = runner.lz("run", "-d", store, "--files-only", "--fs", work, "--", out, work / "f.txt", timeout=60)
    assert r.rc == 0, str(r)
    assert re.search(r"^commit rc=1 index=\d+ err=$", r.stdout, re.M), str(r)
    assert re.search(r"^abort rc=-1 err=abort of a files-only job is not done yet", r.stdout, re.M), str(r)
    assert (work / "f.txt").read_text() == "before commit\nafter commit\n"


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------
def test_bad_inputs(runner, fuse_dev):
    work = runner.mkdir("work")
    store = runner.base / "st"
    afile = runner.base / "afile"
    runner.touch(afile)
    inner = runner.mkdir("st2")
    (inner / "sub").mkdir()
    cases = [
        (["--fs", runner.base / "missing"], "No such file or directory"),
        (["--fs", afile], "not a directory"),
        (["--files-only"], "--files-only needs --fs"),
        (["--fs", work, "--fs-mode", "shadow"], "not implemented yet"),
        (["--fs", work, "--fs-mode", "nonsense"], "--fs-mode is"),
    ]
    for opts, want in cases:
        r = runner.lz("run", "-d", store, *opts, "--", "/bin/true")
        assert r.rc != 0 and want in r.stderr and len(r.stderr.strip().splitlines()) == 1, str(r)
        assert str(work) not in lazarus_mounts()
    r = runner.lz("run", "-d", inner, "--fs", inner / "sub", "--", "/bin/true")
    assert r.rc != 0 and "inside the store" in r.stderr and len(r.stderr.strip().splitlines()) == 1, str(r)
    r = runner.lz("run", "-d", work / "st", "--fs", work, "--", "/bin/true")
    assert r.rc != 0 and "holds the store" in r.stderr and len(r.stderr.strip().splitlines()) == 1, str(r)
    assert not lazarus_mounts() or str(work) not in lazarus_mounts()


def test_mount_refused_for_user(runner, mode):
    """An ordinary user without access to /dev/fuse: one line that says so."""
    if mode != "user" or not IS_ROOT:
        pytest.skip("needs root to run the user variant with /dev/fuse 0600")
    import fcntl
    fd = os.open(FUSE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # no other session opens /dev/fuse to everyone meanwhile
        if stat.S_IMODE(Path("/dev/fuse").stat().st_mode) & 0o006:
            pytest.skip("/dev/fuse is open to everyone here")
        work = runner.mkdir("work")
        r = runner.lz("run", "-d", runner.base / "st", "--fs", work, "--", "/bin/true")
    finally:
        os.close(fd)
    assert r.rc != 0 and "cannot mount" in r.stderr and "/dev/fuse" in r.stderr, str(r)
    assert len(r.stderr.strip().splitlines()) == 1, str(r)
    assert str(work) not in lazarus_mounts()


def test_supervisor_killed(runner, fuse_dev, static_job):
    """SIGKILL of the supervisor itself: its daemon sees the channel close,
    unmounts and exits (the program ends with its parent), and `restart`
    finds no mount, rolls back to the last commit and finishes identically."""
    want = reference(runner, static_job, STEPS)
    work = runner.mkdir("work")
    store = runner.base / "st"
    proc = runner.start_lz("run", "-d", store, "--files-only", "--fs", work, "--",
                           static_job, work, STEPS, LAZARUS, "30")
    dpid = daemon_of(proc.pid)
    proc.wait_for_output(r"^committed step 60$", 30)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == 137
    wait_gone([dpid])
    assert_no_mount(work)
    committed = [int(m) for m in re.findall(r"^committed step (\d+)$", proc.stdout, re.M)]
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0, str(r)
    first = re.search(r"^start at step (\d+)$", r.stdout, re.M)
    assert first and int(first.group(1)) >= committed[-1], (r.stdout, proc.stdout)
    assert hashes(work) == want
    assert_no_mount(work)


APPENDER = r'''
import os, sys, time
ballast = os.urandom(96 << 20)   # a writer that takes a while: the program runs on meanwhile
path, i = sys.argv[1], 0
while True:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"line %d\n" % i)
    os.close(fd)
    i += 1
    time.sleep(0.001)
'''


def test_program_runs_on_while_checkpoint_written(runner, fuse_dev):
    """Memory checkpoints of a program appending numbered lines under --fs:
    it runs on while its checkpoint is written, and what it appends then is
    in the next interval (the daemon closed it while the program was
    stopped), so after SIGKILL and restart no line is missing or twice."""
    work = runner.mkdir("work")
    prog = runner.base / "appender.py"
    prog.write_text(APPENDER)
    os.chmod(prog, 0o644)
    store = runner.base / "st"
    log = work / "log.txt"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--fs", work, "--", "/usr/bin/python3", prog, log)
    for _ in range(3):
        time.sleep(0.5)
        runner.checkpoint_when_up(store)
        time.sleep(0.3)
        pid = find_program(proc.pid, "python3")
        os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == 137, proc.stderr
        assert_no_mount(work)
        proc = runner.start_lz("restart", "-d", store)
        time.sleep(0.3)
    time.sleep(0.5)
    pid = find_program(proc.pid, "python3")
    os.kill(pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == 137, proc.stderr
    assert_no_mount(work)
    nums = [int(l.split()[1]) for l in log.read_text().splitlines()]
    assert nums == list(range(len(nums))), f"lines missing or twice: {[n for k, n in enumerate(nums) if n != k][:10]}"



WB_WRITER = r'''
import hashlib, json, os, sys, time
work, seen_path = sys.argv[1:3]
names = ["f%d" % i for i in range(40)]
fds = [os.open(os.path.join(work, n), os.O_RDWR) for n in names]
for fd in fds:
    for k in range(32):
        os.pwrite(fd, os.urandom(4096), k * 8192)
time.sleep(0.1)  # the pages reach the daemon at the sync, later than the mtime the program sees
os.sync()
seen = {n: [os.fstat(fd).st_mtime_ns, hashlib.sha256(os.pread(fd, 1 << 20, 0)).hexdigest()] for n, fd in zip(names, fds)}
with open(seen_path, "w") as f:
    json.dump(seen, f)
os._exit(0)
'''


def test_writeback_cache_keeps_mtime(runner, fuse_dev):
    """The kernel's writeback cache (on only through the test switch
    LAZARUS_TEST_FSD_WRITEBACK=1; bench/fs_io.py measures it) owns a file's
    mtime and sends it in a setattr at a close or a sync, which can reach
    the daemon before the pages written back with it: the daemon's writes
    keep the mtime, so the real file has the one the program saw (what a
    rollback brings back).  A files-only job overwrites 40 files, syncs, notes
    each one's mtime and bytes and exits (before the fix, nearly every mtime
    was the daemon's later write)."""
    work = runner.mkdir("work")
    for i in range(40):
        p = work / f"f{i}"
        p.write_bytes(rbytes(100 + i, 300_000))
        runner.touch(p)
    prog = runner.base / "wb_writer.py"
    prog.write_text(WB_WRITER)
    os.chmod(prog, 0o644)
    seen_path = runner.base / "seen.json"
    runner.env["LAZARUS_TEST_FSD_WRITEBACK"] = "1"
    r = runner.lz("run", "-d", runner.base / "st", "--files-only", "--fs", work, "--",
                  "/usr/bin/python3", prog, work, seen_path, timeout=120)
    runner.env.pop("LAZARUS_TEST_FSD_WRITEBACK")
    assert r.rc == 0, str(r)
    assert_no_mount(work)
    seen = json.loads(seen_path.read_text())
    got = {n: [(work / n).stat().st_mtime_ns, hashlib.sha256((work / n).read_bytes()).hexdigest()] for n in seen}
    assert [n for n in seen if got[n][1] != seen[n][1]] == [], "bytes differ from the program's"
    bad = [n for n in seen if got[n][0] != seen[n][0]]
    assert bad == [], f"{len(bad)} of {len(seen)} mtimes are not the program's: " \
                      f"{[(n, seen[n][0], got[n][0]) for n in bad[:3]]}"
