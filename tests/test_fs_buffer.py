"""Buffer mode of the file system front end (issue 22 part 3):
`lazarus run --fs PATH --fs-mode buffer` holds what the job writes under
PATH in lazarus-fsd until the checkpoint that holds it is committed.

- Isolation: a plain process outside the job, reading PATH through the
  mount all along, never sees bytes the job has not committed (a marker the
  job writes, reads back itself and removes again before each commit), and
  does see each commit once it is made; the job sees its own data (content
  and size).
- The commit (ftIO's FIN rule): the daemon SIGKILLed before the redo log's
  FIN, after it but before the checkpoint is renamed, and after the rename
  but before it wrote the files: `lazarus rollback` leaves the files at the
  last committed checkpoint exactly (an uninterrupted run stopped at that
  step), never half, and `restart` ends as an uninterrupted run.
- The static program of test_fs.py, SIGKILLed at random instants, restarted
  each time: byte-identical to an uninterrupted run.
- Spill: a job that writes more than --fs-buffer-max moves it to the backing
  file in the store (seen in the daemon's descriptors) and stays correct.

The `user` variants need /dev/fuse open to everyone (test_fs.py's fixture,
which says why).  The outside reader runs as the runner's identity: a FUSE
mount of an ordinary user is not open to other users, root included."""
from __future__ import annotations

import hashlib
import os
import re
import signal
import time

import pytest

from conftest import LAZARUS, run_until_done, wait_gone
from test_fs import (STEPS, assert_no_mount, daemon_of, fuse_dev, hashes, reference, static_api_job,  # noqa: F401
                     static_job)

GENS = 5
PY = "/usr/bin/python3"  # the system one: an ordinary user may not reach the session's

# The job: each generation appends lines (one open+write each, as a log is
# written), writes a marker at the end and over the file's first bytes,
# checks it sees its own data and size, takes the marker away again, and
# commits.  The committed file never holds the marker.
JOB = r'''
import os, subprocess, sys, time
path, lazarus, flag = sys.argv[1], sys.argv[2], sys.argv[3]
GENS = int(sys.argv[4])
MARK = b"UNCOMMITTED"
want = b""
for g in range(1, GENS + 1):
    for i in range(40):
        line = b"gen %d line %02d\n" % (g, i)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, line)
        os.close(fd)
        want += line
    fd = os.open(path, os.O_RDWR)
    os.write(fd, MARK)                       # over the first bytes
    os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, MARK)                       # and at the end
    os.close(fd)
    seen = open(path, "rb").read()
    mine = MARK + want[len(MARK):] + MARK
    if seen != mine or os.stat(path).st_size != len(mine):
        print("self bad", g, len(seen), os.stat(path).st_size, len(mine), flush=True)
        sys.exit(4)
    time.sleep(0.3)                          # the reader polls the uncommitted state
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, want[:len(MARK)], 0)
    os.ftruncate(fd, len(want))
    os.close(fd)
    if open(path, "rb").read() != want:
        print("self bad after", g, flush=True)
        sys.exit(4)
    print("self ok", g, flush=True)
    subprocess.run([lazarus, "checkpoint", "-d", os.environ["LAZARUS_DIR"]], check=True, stdout=subprocess.DEVNULL)
    print("committed", g, flush=True)
    time.sleep(0.2)
# the reader says it saw the last commit (outside the job: it is the committed file)
end = time.monotonic() + 15
while not os.path.exists(flag) and time.monotonic() < end:
    time.sleep(0.02)
print("reader saw it" if os.path.exists(flag) else "reader did not see it", flush=True)
'''

# The reader: a plain process outside the job, polling the file through the mount.
READER = r'''
import os, sys, time
path, flag, stop, final = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
final = open(final, "rb").read()
reads = bad = 0
top = 0
while not os.path.exists(stop):
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        data = b""
    except OSError:  # the mount going away at the job's end (ENOTCONN)
        continue
    reads += 1
    if b"UNCOMMITTED" in data or not final.startswith(data):
        bad += 1
        if bad == 1:
            print("saw", data[:60], len(data), flush=True)
    if data.endswith(b"gen %d line 39\n" % int(sys.argv[5])):
        open(flag, "w").close()
    time.sleep(0.002)
print("reads", reads, "bad", bad, flush=True)
'''


def expected_final() -> bytes:
    return b"".join(b"gen %d line %02d\n" % (g, i) for g in range(1, GENS + 1) for i in range(40))


def test_outside_reader_sees_only_committed(runner, fuse_dev):
    work = runner.mkdir("work")
    store = runner.base / "st"
    job, reader, final = runner.base / "job.py", runner.base / "reader.py", runner.base / "final"
    job.write_text(JOB)
    reader.write_text(READER)
    final.write_bytes(expected_final())
    flag, stop = runner.base / "seen", runner.base / "stop"
    r = runner.start([PY, reader, work / "log", flag, stop, final, GENS])
    proc = runner.start_lz("run", "-d", store, "--files-only", "--fs", work, "--fs-mode", "buffer", "--",
                           PY, job, work / "log", LAZARUS, flag, GENS)
    rc = proc.wait(timeout=120)
    runner.touch(stop)
    r.wait(timeout=30)
    assert rc == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "reader saw it" in proc.stdout, proc.stdout
    for g in range(1, GENS + 1):
        assert f"self ok {g}\n" in proc.stdout, proc.stdout  # the job saw its own data and size
    m = re.search(r"^reads (\d+) bad (\d+)$", r.stdout, re.M)
    assert m, r.stdout + r.stderr
    assert int(m.group(2)) == 0, f"the outside reader saw uncommitted bytes: {r.stdout}"
    assert int(m.group(1)) > 100, r.stdout  # it did poll while the job wrote
    assert (work / "log").read_bytes() == expected_final()
    assert_no_mount(work)
    # every committed checkpoint but the first (before the program) holds a whole redo log
    v = runner.lz("verify", "-d", store)
    assert v.rc == 0 and "redo log" in v.stdout, str(v)
    # a damaged redo log: verify says so, a rollback to its checkpoint refuses and changes nothing
    logs = sorted(store.glob("ckpt.*/proc.*/fsbuf.*"))
    assert logs, sorted(p.name for p in store.iterdir())
    blob = bytearray(logs[-1].read_bytes())
    blob[len(blob) // 2] ^= 0x55
    logs[-1].write_bytes(bytes(blob))
    v = runner.lz("verify", "-d", store)
    assert v.rc == 244 and "redo log" in v.stdout + v.stderr, str(v)
    r = runner.lz("rollback", "-d", store, "--force")
    assert r.rc == 244 and "redo log" in r.stderr and len(r.stderr.strip().splitlines()) == 1, str(r)
    assert (work / "log").read_bytes() == expected_final()
    # but back to an older commit (checkpoint 4: generations 1 to 3; -k 3 keeps 4 to 6): the writes applied after it are
    # undone by its journal (the apply's undo was recorded before the data reached the file)
    older = b"".join(b"gen %d line %02d\n" % (g, i) for g in (1, 2, 3) for i in range(40))
    r = runner.lz("rollback", "-d", store, "--at", "4", "--force")
    assert r.rc == 0, str(r)
    assert (work / "log").read_bytes() == older


@pytest.mark.parametrize("when", ["before_fin", "before_rename", "before_apply"])
def test_daemon_killed_in_commit(runner, fuse_dev, static_job, when):
    """SIGKILL of lazarus-fsd at three points of the program's first commit
    (step 30): before the redo log's FIN and after it (the checkpoint not
    renamed yet): the commit never was, the files go back to commit 1
    (empty); after the rename, before the daemon wrote the files: the
    rollback writes them from the redo log, and they are those of an
    uninterrupted run stopped at step 30.  Never a mixture."""
    want = reference(runner, static_job, STEPS)
    work = runner.mkdir("work")
    store = runner.base / "st"
    hook = {"before_fin": "LAZARUS_TEST_FSD_FIN_DELAY_MS", "before_rename": "LAZARUS_TEST_FSD_COMMIT_DELAY_MS",
            "before_apply": "LAZARUS_TEST_FSD_APPLY_DELAY_MS"}[when]
    # commit 1 has nothing held (the hooks wait only with data); the program's first commit waits 4 s
    runner.env[hook] = "4000"
    proc = runner.start_lz("run", "-d", store, "--files-only", "--fs", work, "--fs-mode", "buffer", "--",
                           static_job, work, STEPS, LAZARUS, "30")
    dpid = daemon_of(proc.pid)
    proc.wait_for_output(r"^start at step 0$", 30)
    # inside the commit of step 30 (checkpoint 2), held there by the hook for 4 s
    sign = "ckpt.000002" if when == "before_apply" else "tmp.000002.*/fsbuf.redo"
    deadline = time.monotonic() + 30
    while not list(store.glob(sign)):
        assert time.monotonic() < deadline and proc.poll() is None, f"no {sign}\n{proc.stdout}\n{proc.stderr}"
        time.sleep(0.01)
    time.sleep(0.5)
    assert "committed step" not in proc.stdout
    os.kill(dpid, signal.SIGKILL)
    rc = proc.wait(timeout=60)
    assert rc != 0, f"run exited {rc}\n{proc.stderr}"
    assert_no_mount(work)
    wait_gone([dpid])
    runner.env.pop(hook)
    last = 30 if when == "before_apply" else 0
    d = runner.lz("diff", "-d", store)
    assert d.rc == 0 and ("not written to the files yet" in d.stdout) == bool(last), str(d)
    r = runner.lz("rollback", "-d", store, timeout=120)
    assert r.rc == 0, str(r)
    if last:
        ref = runner.mkdir("ref_last")
        rr = runner.run([static_job, ref, str(last), LAZARUS, "30"])
        assert rr.rc == 0, str(rr)
        (ref / "final.txt").unlink()
        at_last = hashes(ref)
    else:
        at_last = {}
    assert hashes(work) == at_last, f"{when}: the files are not those of commit at step {last}"
    v = runner.lz("verify", "-d", store)
    assert v.rc == 0, str(v)
    d = runner.lz("diff", "-d", store)
    assert d.rc == 0 and "not written to the files yet" not in d.stdout, str(d)
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0 and re.search(rf"^start at step {last}$", r.stdout, re.M), str(r)
    assert hashes(work) == want
    assert_no_mount(work)


def test_static_killed_at_random_instants_buffer(runner, fuse_dev, static_api_job, rng):
    """test_fs.py's static program (commits through lazarus_tx_commit) in
    buffer mode, SIGKILLed at random instants and restarted each time: its
    files end byte-identical to an uninterrupted run's."""
    want = reference(runner, static_api_job, STEPS)
    work = runner.mkdir("work")
    store = runner.base / "st"
    kr = run_until_done(runner, store, [static_api_job, work, STEPS, LAZARUS], rng, kills=4, interval=0,
                        comm="fs_static_job", max_delay=0.4, done_re=r"^done$",
                        run_opts=("--files-only", "--fs", work, "--fs-mode", "buffer"))
    assert_no_mount(work)
    got = hashes(work)
    assert got == want, (f"the files differ from an uninterrupted run's:\n"
                         f"  different {sorted(k for k in want if k in got and got[k] != want[k])}\n"
                         f"  missing {sorted(set(want) - set(got))}\n  extra {sorted(set(got) - set(want))}\n"
                         + kr.describe())
    r = runner.lz("verify", "-d", store)
    assert r.rc == 0, str(r)


# The spilling job: 6 MiB in 64 KiB pieces (then some overwritten in place,
# the file cut and grown again), read back by itself; it waits for the
# test's go before it commits, then writes a tail and ends (its end commits it).
SPILL_JOB = r'''
import os, subprocess, sys, time, hashlib
path, lazarus, go = sys.argv[1], sys.argv[2], sys.argv[3]
def piece(i):
    return hashlib.sha256(b"%d" % i).digest() * 2048   # 64 KiB
want = bytearray()
with open(path, "wb") as f:
    for i in range(96):
        f.write(piece(i)); want += piece(i)
fd = os.open(path, os.O_RDWR)
for i in range(0, 96, 7):
    os.pwrite(fd, piece(1000 + i), i * 65536 + 100); want[i * 65536 + 100:(i + 1) * 65536 + 100] = piece(1000 + i)
os.ftruncate(fd, 5 * 1048576); del want[5 * 1048576:]
os.ftruncate(fd, 5 * 1048576 + 4096); want += bytes(4096)
os.close(fd)
if open(path, "rb").read() != bytes(want):
    print("self bad", flush=True); sys.exit(4)
print("self ok", flush=True)
while not os.path.exists(go):
    time.sleep(0.02)
subprocess.run([lazarus, "checkpoint", "-d", os.environ["LAZARUS_DIR"]], check=True, stdout=subprocess.DEVNULL)
with open(path, "ab") as f:
    f.write(b"tail\n"); want += b"tail\n"
print("sha", hashlib.sha256(bytes(want)).hexdigest(), flush=True)
'''


def test_spill_beyond_buffer_max(runner, fuse_dev):
    work = runner.mkdir("work")
    store = runner.base / "st"
    job, go = runner.base / "spill.py", runner.base / "go"
    job.write_text(SPILL_JOB)
    proc = runner.start_lz("run", "-d", store, "--files-only", "--fs", work, "--fs-mode", "buffer",
                           "--fs-buffer-max", "2", "--fs-buffer-low", "1", "--",
                           PY, job, work / "data", LAZARUS, go)
    dpid = daemon_of(proc.pid)
    proc.wait_for_output(r"^self ok$", 60)
    # held beyond 2 MiB: in the backing file, an unnamed file in the store
    backing = []
    for fd in os.listdir(f"/proc/{dpid}/fd"):
        try:
            target = os.readlink(f"/proc/{dpid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(store) + "/") and target.endswith("(deleted)"):
            backing.append(os.stat(f"/proc/{dpid}/fd/{fd}").st_size)
    assert backing and max(backing) >= 3 * 1048576, f"no backing file of 3 MiB or more: {backing}"
    # a process outside the job (the runner's identity: a user's mount is not open to root) sees the committed size
    st = runner.run(["stat", "-c", "%s", work / "data"])
    assert st.rc == 0 and st.stdout.strip() == "0", f"held data reached the file before the commit: {st}"
    runner.touch(go)
    assert proc.wait(timeout=120) == 0, proc.stderr
    m = re.search(r"^sha (\w+)$", proc.stdout, re.M)
    assert m, proc.stdout
    assert hashlib.sha256((work / "data").read_bytes()).hexdigest() == m.group(1)
    assert_no_mount(work)


def test_buffer_options_refused(runner, fuse_dev):
    work = runner.mkdir("work")
    for args, msg in ((["--fs-buffer-max", "4"], "go with --fs-mode buffer"),
                      (["--fs-mode", "buffer", "--fs-buffer-max", "4", "--fs-buffer-low", "8"], "must not be above"),
                      (["--fs-mode", "buffer", "--fs-buffer-max", "x"], "whole number")):
        r = runner.lz("run", "-d", runner.base / "st", "--fs", work, *args, "--", "true")
        assert r.rc == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, str(r)


FAIL_JOB = r'''
import os, subprocess, sys, time
path, lazarus, go = sys.argv[1], sys.argv[2], sys.argv[3]
def commit():
    return subprocess.run([lazarus, "checkpoint", "-d", os.environ["LAZARUS_DIR"]], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode
with open(path, "ab") as f:
    f.write(b"first\n")
print("first commit", "failed" if commit() else "ok", flush=True)
while not os.path.exists(go):
    time.sleep(0.02)
with open(path, "ab") as f:
    f.write(b"second\n")
print("second commit", "failed" if commit() else "ok", open(path, "rb").read() == b"first\nsecond\n", flush=True)
'''


def test_failed_checkpoint_keeps_held_data(runner, fuse_dev):
    """A checkpoint whose commit fails in the daemon (LAZARUS_TEST_FSD_CLOSE_FAIL):
    its data never reaches the file (a reader outside sees nothing), stays
    held (the job reads it), and goes into the next commit with what follows."""
    work = runner.mkdir("work")
    store = runner.base / "st"
    job, go = runner.base / "fail.py", runner.base / "go"
    job.write_text(FAIL_JOB)
    runner.env["LAZARUS_TEST_FSD_CLOSE_FAIL"] = "2"  # commit 1 is taken before the program
    proc = runner.start_lz("run", "-d", store, "--files-only", "--fs", work, "--fs-mode", "buffer", "--",
                           PY, job, work / "f", LAZARUS, go)
    proc.wait_for_output(r"^first commit failed$", 60)
    seen = runner.run(["cat", work / "f"])
    assert seen.rc == 0 and seen.stdout == "", f"the failed commit's data reached the file: {seen}"
    runner.touch(go)
    assert proc.wait(timeout=60) == 0, proc.stderr
    runner.env.pop("LAZARUS_TEST_FSD_CLOSE_FAIL")
    assert "second commit ok True" in proc.stdout, proc.stdout
    assert (work / "f").read_bytes() == b"first\nsecond\n"
    assert 2 not in runner.indexes(store)
    # back to the commit after the failed one: both lines, from its redo log
    r = runner.lz("rollback", "-d", store, "--force")
    assert r.rc == 0, str(r)
    assert (work / "f").read_bytes() == b"first\nsecond\n"
