"""Streaming (`lazarus run -d s3://BUCKET/PREFIX`): every checkpoint commits
into a spool on the machine and is published to the object store at once;
what is published leaves the spool; what the store cannot take stays in the
spool (the fallback) and is published when it answers (ARCHITECTURE.md,
"Remote store", "Streaming").  Against versitygw (tests/s3server.py), faults
from its FaultProxy:

- machine loss: the job's files and journals on a "shared" directory, its
  working directory, $TMPDIR and spool on a "machine" directory; checkpoints
  streamed, the whole job SIGKILLed at a random instant after two publishes,
  the machine directory deleted; `restart -d s3://` from another working
  directory and $TMPDIR: the output and every file byte-identical to an
  uninterrupted run.  After a publish the spool holds no pack of a published
  checkpoint (looked at from outside);
- the store refuses connections when a checkpoint is taken: it stays in the
  fallback (one line says so), the program runs on, it is published once the
  store answers, and a restart on another machine resumes from it;
- the store down from the start: the job starts and says so; on the same
  machine `list -d s3://` shows what only the fallback holds, `restart -d
  s3://` is refused while the job runs or the store is down, then publishes
  the fallback's checkpoint first and resumes from it;
- a connection cut in the middle of every large upload: no partial
  checkpoint is listed, the next one is published once the cuts stop, and
  `gc --older-than 0` leaves no object no commit lists and no upload;
- an incremental checkpoint with sparse frames (copy mode's case) after the
  spool let their packs go: it is taken and published, and comes back;
- bad inputs (a malformed URL, an unknown bucket, a wrong secret): one line,
  non-zero, nothing started, nothing made here or remotely.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

from conftest import BUILD, PROGRAMS_SRC, Proc
from s3server import SECRET, FaultProxy, s3server  # noqa: F401  (the fixture)
from test_incremental import Job, incr_heap, start  # noqa: F401  (the fixture)

S3TOOL = BUILD / "bin" / "lazarus-s3"
PY = "/usr/bin/python3"  # every user can run it
STEPS = "550"


def tree(d: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def published(runner, url) -> list[int]:
    r = runner.lz("list", "-d", url, "--json", timeout=60)
    assert r.rc == 0, str(r)
    return [int(e["index"]) for e in json.loads(r.stdout)]


def wait_for(what, cond, proc=None, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        if proc is not None:
            assert proc.poll() is None, f"the job ended while waiting for {what}\n{proc.stderr}"
        time.sleep(0.1)
    raise AssertionError(f"no {what} in {timeout}s" + (f"\n{proc.stderr}" if proc is not None else ""))


def spool_of(tmp: Path) -> Path:
    spools = list(tmp.glob("lazarus-spool-*"))
    assert len(spools) == 1, spools
    return spools[0]


def steps_of(proc) -> int:
    s = [int(l.split()[1]) for l in proc.stdout.splitlines() if l.startswith("step ")]
    return s[-1] if s else -1


def no_published_pack(spool: Path, pub: list[int]) -> bool:
    packs = {p.name for p in (spool / "packs").iterdir()} if (spool / "packs").exists() else set()
    return not any(n == f"pack.{i:06d}" or n.startswith(f"pack.{i:06d}.") for i in pub for n in packs)


_plain: list = []


def test_machine_loss_streamed(runner, s3server, tmp_path):
    url = f"s3://{s3server.bucket()}/stream/job"
    runner.env.update(s3server.env())
    prog = runner.base / "shared_files.py"
    shutil.copy(PROGRAMS_SRC / "shared_files.py", prog)
    if not _plain:  # the uninterrupted run (it depends on STEPS alone: once for both identities)
        plain = tmp_path / "plain"
        plain.mkdir()
        cp = subprocess.run([PY, "-B", str(prog), str(plain), STEPS], capture_output=True, text=True, timeout=120)
        _plain.extend([cp.stdout.splitlines()[-1], tree(plain)])
    want_digest, want = _plain
    shared = runner.mkdir("shared")
    work = runner.mkdir("shared/work")
    journals = runner.mkdir("shared/journals")
    machine = runner.mkdir("machine")
    runner.mkdir("machine/cwd")
    runner.mkdir("machine/tmp")
    runner.env["TMPDIR"] = str(machine / "tmp")
    job = Proc(runner.argv([BUILD / "bin" / "lazarus", "run", "-d", url, "-i", "0", "--journal-dir", journals, "--",
                            PY, "-B", prog, work, STEPS]), cwd=machine / "cwd", env=runner.env)
    wait_for("step 20", lambda: steps_of(job) >= 20, job)
    assert re.search(r"pass through \S*/machine/tmp/lazarus-spool-[0-9a-f]{16} ", job.stderr), job.stderr
    first = runner.checkpoint_when_up(url)
    second = runner.checkpoint(url)

    def both():
        p = published(runner, url)
        return p if first in p and second in p else None
    pub = wait_for("two publishes", both, job)
    spool = spool_of(machine / "tmp")
    wait_for("the spool without the published packs", lambda: no_published_pack(spool, pub), job, timeout=20)
    table = runner.lz("list", "-d", spool).stdout
    assert re.search(rf"^\s*{second}\s.*\bremote$", table, re.M), table
    # the machine is lost at a random instant, perhaps in the middle of a checkpoint
    if random.random() < 0.5:
        runner.start_lz("checkpoint", "-d", url)
    time.sleep(random.uniform(0, 1.0))
    assert job.poll() is None and steps_of(job) < int(STEPS) - 50, "the job ended before the machine was lost"
    job.kill()
    shutil.rmtree(machine)
    elsewhere = runner.mkdir("elsewhere")
    runner.mkdir("elsewhere/tmp")
    runner.env["TMPDIR"] = str(elsewhere / "tmp")
    r = runner.lz("restart", "-d", url, timeout=300)
    assert r.rc == 0, str(r)
    assert r.stdout.splitlines()[-1] == want_digest, str(r)
    assert tree(work) == want
    assert int(r.stdout.splitlines()[0].split()[1]) > 0  # resumed, not started over
    assert SECRET not in r.stderr


def start_mutator(runner, programs, url, endpoint):
    runner.env["AWS_ENDPOINT_URL"] = endpoint
    return runner.start_lz("run", "-d", url, "-i", "0", "--", programs.heap_mutator, "16", "100000")


def test_server_down_fallback(runner, programs, s3server):
    url = f"s3://{s3server.bucket()}/down"
    proxy = FaultProxy(s3server.port)
    try:
        runner.env.update(s3server.env())
        job = start_mutator(runner, programs, url, proxy.endpoint)
        first = runner.checkpoint_when_up(url)
        wait_for("the first publish", lambda: first in published(runner, url), job)
        proxy.set("refuse")
        t0 = time.monotonic()
        kept = runner.checkpoint(url)  # committed in the spool: the program does not wait for the store
        assert time.monotonic() - t0 < 20
        line = f"checkpoint {kept} kept in the fallback "
        wait_for("the fallback line", lambda: line in job.stderr, job, timeout=60)
        assert re.search(rf"{line}\S+: s3://\S+ .*; flushed when it answers", job.stderr), job.stderr
        spool = spool_of(runner.base)
        rows = {e["index"]: e["remote"] for e in runner.list_json(spool)}
        assert rows.get(kept) is False, rows
        assert re.search(rf"^\s*{kept}\s.*\bfallback$", runner.lz("list", "-d", spool).stdout, re.M)
        assert job.poll() is None  # runs on
        proxy.set("pass")
        wait_for(f"checkpoint {kept} published", lambda: kept in published(runner, url), job, timeout=90)
        r = runner.lz("list", "-d", url)
        assert "only in the fallback" not in r.stdout, str(r)
        job.kill()
    finally:
        proxy.close()
    # another machine: a fresh working directory and $TMPDIR
    other = runner.mkdir("other")
    runner.env["TMPDIR"] = str(other)
    runner.env["AWS_ENDPOINT_URL"] = s3server.endpoint
    again = runner.start_lz("restart", "-d", url, "--files-as-they-are")
    nxt = runner.checkpoint_when_up(url)  # found through the spool the restart made
    assert nxt > kept
    assert f"restarting checkpoint {kept} of" in again.stderr, again.stderr
    assert str(other) in again.stderr
    wait_for(f"checkpoint {nxt} published", lambda: nxt in published(runner, url), again)
    again.kill()


def test_restart_here_publishes_the_fallback(runner, programs, s3server):
    url = f"s3://{s3server.bucket()}/here"
    proxy = FaultProxy(s3server.port)
    try:
        runner.env.update(s3server.env())
        proxy.set("refuse")  # down from the start: the job starts all the same, and says so
        job = start_mutator(runner, programs, url, proxy.endpoint)
        kept = runner.checkpoint_when_up(url)
        assert re.search(r"does not answer .*: checkpoints stay in the fallback", job.stderr), job.stderr
        wait_for("the fallback line", lambda: f"checkpoint {kept} kept in the fallback" in job.stderr, job, timeout=60)
        r = runner.lz("list", "-d", url, timeout=60)
        assert re.search(rf"^\s*{kept}\s+only in the fallback ", r.stdout, re.M), str(r)
        r = runner.lz("restart", "-d", url, timeout=60)
        assert r.rc == 242 and len(r.stderr_lines()) == 1 and "is running" in r.stderr, str(r)
        job.kill()
        spool = spool_of(runner.base)
        # the store still down: refused, nothing changed
        r = runner.lz("restart", "-d", url, timeout=120)
        assert r.rc == 246 and len(r.stderr_lines()) == 1 and "cannot be published" in r.stderr, str(r)
        assert kept in runner.indexes(spool)
        r = runner.lz("restart", "-d", spool, timeout=60)
        assert r.rc == 1 and len(r.stderr_lines()) == 1 and f"restart -d {url}" in r.stderr, str(r)
        r = runner.lz("verify", "-d", spool, timeout=60)
        assert r.rc == 1 and len(r.stderr_lines()) == 1 and f"verify -d {url}" in r.stderr, str(r)
        # it answers: what only the spool held is published first, then resumed
        proxy.set("pass")
        again = runner.start_lz("restart", "-d", url, "--files-as-they-are")
        nxt = runner.checkpoint_when_up(url)
        assert nxt > kept
        assert f"checkpoint {kept} of the fallback" in again.stderr and f"restarting checkpoint {kept} of" in again.stderr, again.stderr
        assert kept in published(runner, url)
        again.kill()
    finally:
        proxy.close()


def test_cut_upload(runner, programs, s3server):
    b = s3server.bucket()
    url = f"s3://{b}/cut"
    proxy = FaultProxy(s3server.port)
    try:
        runner.env.update(s3server.env())
        job = start_mutator(runner, programs, url, proxy.endpoint)
        first = runner.checkpoint_when_up(url)
        wait_for("the first publish", lambda: first in published(runner, url), job)
        proxy.set("cut", cut_after=512 * 1024)  # every request larger than that is cut in the middle
        cut = runner.checkpoint(url)
        wait_for("the fallback line", lambda: f"checkpoint {cut} kept in the fallback" in job.stderr, job, timeout=90)
        assert published(runner, url) == [first]  # nothing partial is visible
        proxy.set("pass")
        nxt = runner.checkpoint(url)
        wait_for(f"checkpoint {nxt} published", lambda: nxt in published(runner, url), job, timeout=90)
        assert published(runner, url) == [first, cut, nxt]
        job.kill()
    finally:
        proxy.close()
    runner.env["AWS_ENDPOINT_URL"] = s3server.endpoint
    r = runner.lz("gc", "-d", url, "--older-than", "0", timeout=120)
    assert r.rc == 0, str(r)
    listed = set()
    for key, path in s3server.objects(b).items():
        if "/commit/" in key:
            listed |= {l.split()[4] for l in path.read_text().splitlines() if l.startswith("object ")}
    orphans = [k for k in s3server.objects(b) if "/commit/" not in k and k not in listed]
    assert orphans == [], orphans
    r = runner.run([S3TOOL, "uploads", url + "/"])
    assert r.rc == 0 and r.stdout.strip() == "", str(r)
    r = runner.lz("verify", "-d", url, timeout=120)
    assert r.rc == 0, str(r)


def test_sparse_frames_after_publish(runner, incr_heap, s3server):
    """The spool has let the published packs go: an incremental checkpoint that
    stores again the live pages of frames mostly overwritten (sparse) must not
    read them from those packs.  The copy mode would (192 MiB: 2 MiB changed is
    little enough for it): `cannot read back an earlier checkpoint's pack`."""
    url = f"s3://{s3server.bucket()}/sparse"
    runner.env.update(s3server.env())
    job = start(runner, url, [incr_heap, 192, 0], "-i", "0", "--compress", "none")
    first = runner.checkpoint_when_up(url)
    job.cmd("fill 0 8000 10")
    second = runner.checkpoint(url)  # from here on the changed pages are tracked: the copy mode's case
    wait_for("two publishes", lambda: second in published(runner, url), job.proc)
    spool = spool_of(runner.base)
    wait_for("the spool without the published packs", lambda: no_published_pack(spool, [first, second]), job.proc, timeout=20)
    state = job.cmd("fill 0 0 200")  # most of the first frame written again: it is sparse now
    third = runner.checkpoint(url)
    wait_for("the third publish", lambda: third in published(runner, url), job.proc)
    assert "failed" not in job.proc.stderr, job.proc.stderr
    job.kill()
    other = runner.mkdir("other")
    runner.env["TMPDIR"] = str(other)
    back = Job(runner, [BUILD / "bin" / "lazarus", "restart", "-d", url, "--files-as-they-are"])
    assert back.cmd("digest") == state
    back.kill()


def test_bad_inputs(runner, programs, s3server):
    b = s3server.bucket()
    runner.env.update(s3server.env())
    tmp = runner.mkdir("tmp")
    runner.env["TMPDIR"] = str(tmp)
    marker = runner.base / "started"
    cases = [("s3://Bad_Bucket!/x", {}, 2, "valid bucket"),
             (f"s3://{b}-none/x", {}, 246, "NoSuchBucket"),  # the remote store refused
             (f"s3://{b}/x", {"AWS_SECRET_ACCESS_KEY": "wrong-" + SECRET}, 246, "HTTP 403")]
    for url, env, rc, says in cases:
        saved = dict(runner.env)
        runner.env.update(env)
        r = runner.lz("run", "-d", url, "--", "/bin/sh", "-c", f"touch {marker}", timeout=120)
        runner.env = saved
        assert r.rc == rc and len(r.stderr_lines()) == 1, str(r)
        assert says in r.stderr and "nothing was started" in r.stderr, str(r)
        assert "wrong-" not in r.stderr and SECRET not in r.stderr
        assert not marker.exists() and list(tmp.iterdir()) == [], str(r)
    assert s3server.objects(b) == {}
