"""Local checkpoints flushed to a remote store (`run -d DIR --remote s3://...`),
and a restart elsewhere (`restart -d s3://...`), against versitygw
(tests/s3server.py):

- machine loss: the job's own directories (its store DIR, working directory
  and $TMPDIR) stand for the machine's disk; once a flush completed, the
  whole job is SIGKILLed and that directory deleted; from another working
  directory and $TMPDIR, `restart -d s3://` first refuses (the journal of
  the latest interval was on the machine: one line, nothing changed, remote
  or local), then with --files-as-they-are resumes: the result is the
  uninterrupted run's, and the restarted job goes on flushing to the same
  remote store (a later checkpoint is published there);
- `list -d DIR` says local / local+remote per checkpoint, `list -d s3://`
  the published ones; --keep-remote N keeps N;
- a connection cut in the middle of a flush: nothing of that checkpoint is
  visible (no commit, no multipart upload left), the next one is published;
  `gc -d s3://` leaves what is younger than --older-than, then removes the
  cut flush's objects (`--json` says how many): what stays is exactly the
  commit and what it lists;
- a flipped byte in a remote pack: verify, diff and the restart name the
  object and exit 244 (damaged), and the restart changes nothing (no cache
  left, the remote as it was);
- a wrong secret, an unknown bucket or a certificate of an unknown CA:
  `run --remote` refuses to start, one line (with --ca-file it runs)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, plain_output
from s3server import SECRET, FaultProxy, s3server  # noqa: F401  (the fixture)

S3TOOL = BUILD / "bin" / "lazarus-s3"
ROUNDS = "400"


def remote_rows(runner, store):
    data = runner.list_json(store)
    return {int(e["index"]): e.get("remote") for e in data}


def wait_published(runner, store, index, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if remote_rows(runner, store).get(index):
            return
        assert proc.poll() is None, f"the job ended\n{proc.stderr}"
        time.sleep(0.1)
    raise AssertionError(f"checkpoint {index} not flushed in {timeout}s\n{proc.stderr}")


def remote_keys(runner, srv, url):
    r = runner.run([S3TOOL, "ls", url + "/"], timeout=60)
    assert r.rc == 0, str(r)
    return sorted(l.split()[2] for l in r.stdout.splitlines())


def setup_env(runner, srv, endpoint=None, **extra):
    runner.env.update(srv.env(endpoint))
    runner.env.update(extra)


def start_job(runner, programs, store, url, *extra):
    return runner.start_lz("run", "-d", store, "-i", "0", "--remote", url, *extra, "--",
                           programs.heap_mutator, "64", ROUNDS)


def test_machine_loss_restart_elsewhere(runner, programs, s3server):
    b = s3server.bucket()
    url = f"s3://{b}/jobs/one"
    setup_env(runner, s3server)
    machine = runner.mkdir("machine")
    for d in ("cwd", "tmp"):
        runner.mkdir(f"machine/{d}")
    store = machine / "store"
    runner.env["TMPDIR"] = str(machine / "tmp")
    job = start_job(runner, programs, store, url, "--keep-remote", "2")
    runner.checkpoint_when_up(store)
    time.sleep(0.3)
    runner.checkpoint(store)
    time.sleep(0.3)
    last = runner.checkpoint(store)
    wait_published(runner, store, last, job)
    rows = remote_rows(runner, store)
    assert rows[last] is True
    table = runner.lz("list", "-d", store).stdout
    assert "local+remote" in table and "WHERE" in table, table
    r = runner.lz("list", "-d", url, "--json")
    pub = [e["index"] for e in json.loads(r.stdout)]
    assert pub[-1] == last and len(pub) == 2, f"--keep-remote 2\n{r}"
    r = runner.lz("verify", "-d", url, timeout=120)
    assert r.rc == 0 and f"checkpoint {last}: memory intact" in r.stdout, str(r)
    assert list((machine / "tmp").iterdir()) == []  # the scratch store is gone
    # the machine is lost: every process of the job, then its disk
    job.kill()
    shutil.rmtree(machine)
    before = remote_keys(runner, s3server, url)
    other = runner.mkdir("elsewhere")
    runner.mkdir("elsewhere/tmp")
    runner.env["TMPDIR"] = str(other / "tmp")
    # the journal of the latest interval was on the lost machine: refused
    r = runner.lz("restart", "-d", url, timeout=120)
    assert r.rc == 1 and len(r.stderr_lines()) == 1 and "journal" in r.stderr and "nothing was changed" in r.stderr, str(r)
    assert os.listdir(other / "tmp") == [] and remote_keys(runner, s3server, url) == before
    r = runner.lz("restart", "-d", url, "--files-as-they-are", timeout=300)
    assert r.rc == 0, str(r)
    want = plain_output([programs.heap_mutator, "64", ROUNDS])
    assert r.stdout.splitlines()[-1] == want.splitlines()[-1], str(r)
    m = re.search(r"through the local store (\S+)", r.stderr)
    assert m and m.group(1).startswith(str(other / "tmp")), str(r)
    assert SECRET not in r.stderr
    # the job file of the cache records the remote, never a secret
    jobfile = (Path(m.group(1)) / "job").read_text()
    assert f"remote={url}" in jobfile and SECRET not in jobfile


def test_restarted_job_goes_on_flushing(runner, programs, s3server):
    b = s3server.bucket()
    url = f"s3://{b}/j"
    setup_env(runner, s3server)
    store = runner.base / "store"
    job = start_job(runner, programs, store, url)
    first = runner.checkpoint_when_up(store)
    wait_published(runner, store, first, job)
    job.kill()
    shutil.rmtree(store)
    cache = runner.base / "cache"
    proc = runner.start_lz("restart", "-d", url, "--files-as-they-are", "--cache", cache)
    nxt = runner.checkpoint_when_up(cache)
    assert nxt > first
    assert proc.wait(300) == 0, proc.stderr
    # the restarted program's file journal is in the store it came back from (not the lost one)
    assert "cannot reopen the file journal" not in proc.stderr, proc.stderr
    r = runner.lz("list", "-d", url, "--json")
    assert nxt in [e["index"] for e in json.loads(r.stdout)], str(r)


@pytest.fixture
def proxy(s3server):
    p = FaultProxy(s3server.port)
    yield p
    p.close()


def stalled_flush_report(runner, s3server, proxy, store, url, job, since: float) -> str:
    """What a flush that did not end in time was at: which requests the job
    sent through the proxy since `since` (and when), whether the server
    answers a listing on its own (a held-up server, or a client that stopped
    asking), the multipart uploads left open, the store's rows."""
    now = time.monotonic()
    with proxy._lock:
        events = [(t - since, m, h) for t, m, h in proxy.events if t >= since]
    reqs = "\n".join(f"  +{t:6.1f}s {m:4} {h}" for t, m, h in events[-12:]) or "  (none)"
    last = f"{now - since - events[-1][0]:.1f}s ago" if events else "never"
    direct = dict(runner.env, **s3server.env())
    try:
        cp = subprocess.run([str(S3TOOL), "ls", url + "/"], env=direct, capture_output=True, text=True, timeout=20)
        server = f"answers directly (exit {cp.returncode}, {len(cp.stdout.splitlines())} objects)"
        cp = subprocess.run([str(S3TOOL), "uploads", url + "/"], env=direct, capture_output=True, text=True, timeout=20)
        uploads = cp.stdout.strip() or "none"
    except subprocess.TimeoutExpired:
        server, uploads = "does not answer a listing within 20 s (the server stalled)", "?"
    rows = [{k: e.get(k) for k in ("index", "local", "remote")} for e in runner.list_json(store, check=False) or []]
    return (f"the cut flush did not end: {len(events)} requests through the proxy "
            f"({proxy.connections} connections in all), the last {last}:\n{reqs}\n"
            f"the server {server}; open multipart uploads: {uploads}\n"
            f"store rows: {rows}\njob stderr:\n{job.stderr}")


def test_connection_cut_mid_flush(runner, programs, s3server, proxy):
    b = s3server.bucket()
    url = f"s3://{b}/cut"
    # a stall (a server the machine's I/O holds up) ends an attempt after 10 s, not 30
    attempts, stall_s = 2, 10
    setup_env(runner, s3server, proxy.endpoint, LAZARUS_S3_PART_MIB="5", LAZARUS_S3_ATTEMPTS=str(attempts),
              LAZARUS_S3_STALL_S=str(stall_s))
    store = runner.base / "store"
    job = start_job(runner, programs, store, url)
    # the normal run: a flush through the passing proxy, timed on this machine as it is now
    t = time.monotonic()
    first = runner.checkpoint_when_up(store)
    wait_published(runner, store, first, job)
    normal = time.monotonic() - t
    proxy.set("cut", cut_after=3 * 1024 * 1024)
    since = time.monotonic()
    cut = runner.checkpoint(store)
    # each part is tried `attempts` times, every try ends within a stall (plus the backoff,
    # at most 4 s), the parts in flight together: the flush fails within that and a few normal
    # flushes; whatever it waits for past that deadline is named (stalled_flush_report)
    within = attempts * (stall_s + 4) + 4 * normal + 15
    deadline = since + within
    while f"checkpoint {cut} was not flushed" not in job.stderr and time.monotonic() < deadline:
        assert job.poll() is None, f"the job ended\n{job.stderr}"
        time.sleep(0.1)
    assert f"checkpoint {cut} was not flushed" in job.stderr, \
        (f"no failed flush within {within:.0f}s (a normal flush took {normal:.1f}s); "
         + stalled_flush_report(runner, s3server, proxy, store, url, job, since))
    proxy.set("pass")
    r = runner.lz("list", "-d", url, "--json")
    assert [e["index"] for e in json.loads(r.stdout)] == [first], str(r)  # nothing of the cut one
    r = runner.run([S3TOOL, "uploads", url + "/"])
    assert r.rc == 0 and r.stdout == "", str(r)
    nxt = runner.checkpoint(store)
    wait_published(runner, store, nxt, job)
    r = runner.lz("list", "-d", url, "--json")
    assert [e["index"] for e in json.loads(r.stdout)] == [first, nxt], str(r)
    job.kill()
    # gc: the cut flush's objects go (nothing newer than an hour by default), then what no commit lists
    keys = remote_keys(runner, s3server, url)
    r = runner.lz("gc", "-d", url)
    assert r.rc == 0 and "removed 0 objects" in r.stdout, str(r)
    assert remote_keys(runner, s3server, url) == keys
    r = runner.lz("gc", "-d", url, "--older-than", "0", "--json")  # what it removed, as JSON (docs/json.md)
    assert r.rc == 0, str(r)
    g = json.loads(r.stdout)
    assert set(g) == {"lazarus_version", "objects_removed", "bytes_removed", "uploads_aborted", "left_newer",
                      "older_than"}, g
    assert g["objects_removed"] > 0 and g["bytes_removed"] > 0 and g["left_newer"] == 0 and g["older_than"] == 0, g
    commits = [k for k in remote_keys(runner, s3server, url) if "/commit/" in k]
    assert len(commits) == 2, commits
    listed = {l.split()[4] for c in commits for l in s3server.objects(b)[c].read_text().splitlines()
              if l.startswith("object ")}
    assert set(remote_keys(runner, s3server, url)) == listed | set(commits)
    assert runner.run([S3TOOL, "uploads", url + "/"]).stdout == ""
    r = runner.lz("verify", "-d", url, timeout=120)
    assert r.rc == 0, str(r)


def test_flipped_byte_in_remote_pack(runner, programs, s3server):
    b = s3server.bucket()
    url = f"s3://{b}/flip"
    setup_env(runner, s3server)
    store, journals = runner.base / "store", runner.mkdir("journals")
    job = start_job(runner, programs, store, url, "--journal-dir", journals)  # so that diff -d s3:// reads
    idx = runner.checkpoint_when_up(store)
    wait_published(runner, store, idx, job)
    job.kill()
    assert runner.lz("diff", "-d", url, timeout=120).rc == 0
    packs = [p for k, p in s3server.objects(b).items() if "/pack." in k]
    assert packs
    data = bytearray(packs[0].read_bytes())
    data[len(data) // 2] ^= 0x40
    packs[0].write_bytes(data)
    before = remote_keys(runner, s3server, url)
    # damage: 244 (cli/exit_codes.h), one line naming the object
    for cmd in ("verify", "diff"):
        r = runner.lz(cmd, "-d", url, timeout=120)
        assert r.rc == 244 and len(r.stderr_lines()) == 1 and "fails its checksum" in r.stderr and "pack." in r.stderr, str(r)
    cache = runner.base / "cache"
    r = runner.lz("restart", "-d", url, "--files-as-they-are", "--cache", cache, timeout=120)
    lines = [l for l in r.stderr_lines() if "through the local store" not in l]
    assert r.rc == 244 and len(lines) == 1, str(r)
    assert "fails its checksum" in lines[0] and "pack." in lines[0] and "nothing was changed" in lines[0], str(r)
    assert not cache.exists() and remote_keys(runner, s3server, url) == before


def test_run_refuses_unreachable_remote(runner, programs, s3server):
    b = s3server.bucket()
    setup_env(runner, s3server, AWS_SECRET_ACCESS_KEY="wrong")
    store = runner.base / "store"
    r = runner.lz("run", "-d", store, "--remote", f"s3://{b}/x", "--", programs.heap_mutator, "1", "1")
    assert r.rc == 246 and len(r.stderr_lines()) == 1 and "403" in r.stderr, str(r)  # the remote refused
    setup_env(runner, s3server)
    r = runner.lz("run", "-d", store, "--remote", "s3://no-such-bucket-lz/x", "--", programs.heap_mutator, "1", "1")
    assert r.rc == 246 and len(r.stderr_lines()) == 1 and "NoSuchBucket" in r.stderr, str(r)
    r = runner.lz("run", "-d", store, "--remote", "http://x/y", "--", programs.heap_mutator, "1", "1")
    assert r.rc == 2 and len(r.stderr_lines()) == 1 and "s3://" in r.stderr, str(r)
    # a certificate of a CA the system does not know: refused; with --ca-file the job runs
    setup_env(runner, s3server, s3server.tls_endpoint)
    r = runner.lz("run", "-d", store, "--remote", f"s3://{b}/x", "--", programs.heap_mutator, "1", "1")
    assert r.rc == 246 and len(r.stderr_lines()) == 1 and "certificate" in r.stderr, str(r)
    r = runner.lz("run", "-d", store, "--remote", f"s3://{b}/x", "--ca-file", s3server.ca_file, "--",
                  programs.heap_mutator, "1", "1", timeout=60)
    assert r.rc == 0 and "checksum" in r.stdout, str(r)
    assert f"remote_ca={s3server.ca_file}" in (store / "job").read_text()


# an ordinary user only: several processes change nothing of identity (the other tests run both)
@pytest.mark.parametrize("mode", ["user"], indirect=True)
def test_job_of_several_processes(runner, programs, s3server):
    """A shell and two children: every part, and each process's packs
    (packs/pack.N.PID), travel and come back."""
    b = s3server.bucket()
    url = f"s3://{b}/tree"
    setup_env(runner, s3server)
    store = runner.base / "store"
    hm = programs.heap_mutator
    script = f"{hm} 16 {ROUNDS} 1 & {hm} 24 {ROUNDS} 2; wait"
    job = runner.start_lz("run", "-d", store, "-i", "0", "--remote", url, "--", "/bin/sh", "-c", script)
    time.sleep(0.5)
    idx = runner.checkpoint_when_up(store)
    wait_published(runner, store, idx, job)
    assert any(".000" in p.name and p.name.count(".") == 2 for p in (store / "packs").iterdir())
    job.kill()
    shutil.rmtree(store)
    r = runner.lz("restart", "-d", url, "--files-as-they-are", "--cache", runner.base / "cache", timeout=300)
    assert r.rc == 0, str(r)
    sums = sorted(l for l in r.stdout.splitlines() if l.startswith("checksum"))
    want = sorted([plain_output([hm, "16", ROUNDS, "1"]).splitlines()[-1], plain_output([hm, "24", ROUNDS, "2"]).splitlines()[-1]])
    assert sums == want, str(r)
