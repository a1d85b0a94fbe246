"""Checkpoints encrypted on the client (`run --remote s3://... --encrypt-key
FILE`, AES-256-GCM; ARCHITECTURE.md "Remote store") against versitygw
(tests/s3server.py):

- an encrypted flush: no object in versitygw's data directory holds any of
  the marker the program keeps in its memory and writes into its files (so
  into its file journal) — a plain flush of the same program does, which
  shows the search finds it; the key (its hex) is nowhere in the bucket, the
  store or any message; the job file and the commit name only its
  fingerprint; `verify -d s3:// --encrypt-key` finds it intact; after the machine is lost, `restart -d s3://... --encrypt-key`
  elsewhere rolls the files back and ends byte-identical to an uninterrupted
  run (programs/secret_files.py);
- refusals, each one line, non-zero, nothing changed (no cache, the bucket
  as it was): restart from s3 without the key, with another key, a key
  given for a plain remote, key files that are no key (31 bytes, 64
  non-hex characters), a flipped byte of an encrypted pack ("fails its
  authentication", verify and restart); `restart -d DIR` of the encrypted
  job without its key, and with it the job goes on (a later checkpoint
  published, encrypted) to its result;
- the format through `lazarus-s3 --encrypt-key` (chunks of 5 MiB): a file
  of three chunks comes back whole; chunks swapped, the last chunk dropped,
  the middle one dropped, the header's chunk size changed, a plain object,
  another key: each refused, naming the object;
- the stream (`run -d s3://`) sealed too, restarted elsewhere with the key."""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, IS_ROOT, PROGRAMS_SRC, plain_output
from s3server import s3server  # noqa: F401  (the fixture)

S3TOOL = BUILD / "bin" / "lazarus-s3"
PY = "/usr/bin/python3"  # every user can run it
STEPS = "300"
ROUNDS = "150"


def key_file(runner, name: str, data: bytes) -> Path:
    p = runner.base / name
    p.write_bytes(data)
    os.chmod(p, 0o600)
    if IS_ROOT:
        os.chown(p, runner.uid, runner.uid)
    return p


def tree(d: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def bucket_bytes(srv, bucket: str) -> bytes:
    """Everything versitygw keeps of a bucket (objects and their metadata)."""
    out = b""
    for dirpath, _, files in os.walk(srv.data / bucket):
        for f in files:
            out += (Path(dirpath) / f).read_bytes()
    return out


def bucket_state(srv, bucket: str) -> dict:
    return {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in srv.objects(bucket).items()}


def wait_published(runner, store, index, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if {e["index"]: e.get("remote") for e in runner.list_json(store)}.get(index):
            return
        assert proc.poll() is None, f"the job ended\n{proc.stderr}"
        time.sleep(0.05)
    raise AssertionError(f"checkpoint {index} not flushed in {timeout}s\n{proc.stderr}")


def wait_step(proc, at_least: int, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = [int(l.split()[1]) for l in proc.stdout.splitlines() if l.startswith("step ")]
        if steps and steps[-1] >= at_least:
            return steps[-1]
        assert proc.poll() is None, proc.stderr
        time.sleep(0.02)
    raise AssertionError(f"no step {at_least}\n{proc.stderr}")


def test_encrypted_flush_and_restart_elsewhere(runner, s3server, tmp_path):
    b = s3server.bucket()
    url, plain_url = f"s3://{b}/enc", f"s3://{b}/plain"
    runner.env.update(s3server.env())
    marker = "LZMARK" + secrets.token_hex(12)
    key = secrets.token_bytes(32)
    kf = key_file(runner, "job.key", key.hex().encode() + b"\n")
    prog = runner.base / "secret_files.py"
    shutil.copy(PROGRAMS_SRC / "secret_files.py", prog)
    # the uninterrupted run, without Lazarus
    plain = tmp_path / "plain"
    plain.mkdir()
    cp = subprocess.run([PY, "-B", str(prog), str(plain), STEPS, marker], capture_output=True, text=True, timeout=120)
    want_digest, want = cp.stdout.splitlines()[-1], tree(plain)

    # a plain flush of the same program: the marker is in the bucket (the search finds it)
    pw = runner.mkdir("plainwork")
    job = runner.start_lz("run", "-d", runner.base / "plainstore", "-i", "0", "--compress", "none", "--remote", plain_url,
                          "--", PY, "-B", prog, pw, STEPS, marker)
    wait_step(job, 20)
    wait_published(runner, runner.base / "plainstore", runner.checkpoint_when_up(runner.base / "plainstore"), job)
    job.kill()
    assert marker.encode() in bucket_bytes(s3server, b)
    shutil.rmtree(s3server.data / b / "plain")

    shared = runner.mkdir("shared")
    work = runner.mkdir("shared/work")
    journals = runner.mkdir("shared/journals")
    machine = runner.mkdir("machine")
    runner.mkdir("machine/tmp")
    runner.env["TMPDIR"] = str(machine / "tmp")
    store = machine / "store"
    job = runner.start_lz("run", "-d", store, "-i", "0", "--compress", "none", "--remote", url, "--journal-dir", journals,
                          "--encrypt-key", kf, "--", PY, "-B", prog, work, STEPS, marker)
    wait_step(job, 40)
    idx = runner.checkpoint_when_up(store)
    wait_published(runner, store, idx, job)
    at = wait_step(job, 0)
    wait_step(job, at + 40)  # blocks holding the marker overwritten since: in the journal
    job.kill()
    # nothing of the marker, nor of the key, left the machine in the clear
    held = bucket_bytes(s3server, b)
    assert held and marker.encode() not in held and key.hex().encode() not in held and key not in held
    assert any(marker.encode() in p.read_bytes() for p in journals.rglob("*") if p.is_file())  # it was there to leak
    fp = (store / "job").read_text()
    m = re.search(r"^encrypt_key=([0-9a-f]{16})$", fp, re.M)
    assert m and key.hex() not in fp and str(kf) not in fp, fp
    commits = [p for k, p in s3server.objects(b).items() if "/commit/" in k]
    assert commits and all(f"key {m.group(1)}" in p.read_text() for p in commits)
    assert key.hex() not in job.stderr
    r = runner.lz("list", "-d", url, "--json")
    assert r.rc == 0 and json.loads(r.stdout)[-1]["key"] == m.group(1), str(r)
    r = runner.lz("verify", "-d", url, "--encrypt-key", kf, timeout=120)
    assert r.rc == 0 and f"checkpoint {idx}: memory intact" in r.stdout, str(r)

    # the machine is lost; elsewhere, with the key
    shutil.rmtree(machine)
    elsewhere = runner.mkdir("elsewhere")
    runner.mkdir("elsewhere/tmp")
    runner.env["TMPDIR"] = str(elsewhere / "tmp")
    r = runner.lz("restart", "-d", url, "--encrypt-key", kf, timeout=300)
    assert r.rc == 0, str(r)
    assert r.stdout.splitlines()[-1] == want_digest, str(r)
    assert tree(work) == want
    assert key.hex() not in r.stderr


def test_refusals(runner, programs, s3server):
    b = s3server.bucket()
    url, plain_url = f"s3://{b}/enc", f"s3://{b}/plain"
    runner.env.update(s3server.env())
    key = secrets.token_bytes(32)
    kf = key_file(runner, "job.key", key)  # 32 raw bytes
    other = key_file(runner, "other.key", secrets.token_hex(32).encode())  # 64 hex digits, no newline
    store, pstore = runner.base / "store", runner.base / "pstore"
    hm = programs.heap_mutator
    job = runner.start_lz("run", "-d", store, "-i", "0", "--remote", url, "--encrypt-key", kf, "--", hm, "64", ROUNDS)
    pjob = runner.start_lz("run", "-d", pstore, "-i", "0", "--remote", plain_url, "--", hm, "16", ROUNDS)
    wait_published(runner, store, runner.checkpoint_when_up(store), job)
    wait_published(runner, pstore, runner.checkpoint_when_up(pstore), pjob)
    job.kill()
    pjob.kill()
    before = bucket_state(s3server, b)
    cache = runner.base / "cache"

    def refused(args, rc, *words):
        r = runner.lz(*args, timeout=120)
        lines = [l for l in r.stderr_lines() if "through the local store" not in l]  # said before fetching
        assert r.rc == rc and len(lines) == 1, str(r)
        for w in words:
            assert w in r.stderr, f"{w!r} not said\n{r}"
        assert key.hex() not in r.stderr and not cache.exists() and bucket_state(s3server, b) == before, str(r)
        return r

    refused(["restart", "-d", url, "--files-as-they-are", "--cache", cache], 1, "encrypted", "--encrypt-key", "nothing was changed")
    refused(["restart", "-d", url, "--files-as-they-are", "--cache", cache, "--encrypt-key", other], 1, "another key",
            "nothing was changed")
    refused(["verify", "-d", url, "--encrypt-key", other], 1, "another key")
    refused(["list", "-d", url, "--encrypt-key", other], 1, "another key")
    refused(["restart", "-d", plain_url, "--files-as-they-are", "--cache", cache, "--encrypt-key", kf], 1, "not encrypted")
    for bad in (key[:31], b"z" * 64 + b"\n", key + b"\n" + key):
        refused(["restart", "-d", url, "--files-as-they-are", "--cache", cache, "--encrypt-key", key_file(runner, "bad.key", bad)],
                2, "is not a key")
    refused(["run", "-d", runner.base / "s2", "--encrypt-key", kf, "--", hm, "1", "1"], 2, "--remote")
    # a flipped byte of an encrypted pack: its authentication fails, named
    packs = [p for k, p in s3server.objects(b).items() if k.startswith("enc/") and "/pack." in k]
    data = bytearray(packs[0].read_bytes())
    data[len(data) // 2] ^= 0x40
    packs[0].write_bytes(data)
    before = bucket_state(s3server, b)
    r = refused(["verify", "-d", url, "--encrypt-key", kf], 1, "fails its authentication", "pack.")
    assert re.search(r"remote object s3://\S+/pack\.\S+ fails its authentication", r.stderr), str(r)
    refused(["restart", "-d", url, "--files-as-they-are", "--cache", cache, "--encrypt-key", kf], 1,
            "fails its authentication", "nothing was changed")
    # the local store of the encrypted job: only with its key
    local = {p.name: p.stat().st_mtime_ns for p in store.iterdir()}
    refused(["restart", "-d", store], 1, "encrypted", "--encrypt-key", "nothing was changed")
    refused(["restart", "-d", store, "--encrypt-key", other], 1, "another key", "nothing was changed")
    assert {p.name: p.stat().st_mtime_ns for p in store.iterdir()} == local
    # with it the job goes on, and flushes encrypted again
    proc = runner.start_lz("restart", "-d", store, "--encrypt-key", kf)
    nxt = runner.checkpoint_when_up(store)
    wait_published(runner, store, nxt, proc)
    assert proc.wait(300) == 0 and proc.stdout.splitlines()[-1] == plain_output([hm, "64", ROUNDS]).splitlines()[-1], proc.stderr
    fp = re.search(r"^encrypt_key=(\w+)$", (store / "job").read_text(), re.M).group(1)
    commit = [p for k, p in s3server.objects(b).items() if k.startswith("enc/") and f"/commit/{nxt:012d}." in k]
    assert commit and f"key {fp}" in commit[0].read_text()


def test_chunks_cannot_be_moved(runner, s3server):
    """The format (s3_crypt.c) through lazarus-s3, in chunks of 5 MiB."""
    b = s3server.bucket()
    runner.env.update(s3server.env(), LAZARUS_S3_PART_MIB="5")
    kf = key_file(runner, "k", secrets.token_bytes(32))
    other = key_file(runner, "o", secrets.token_bytes(32))
    src = runner.base / "src"
    data = secrets.token_bytes(12 << 20)  # three chunks: 5, 5, 2 MiB
    src.write_bytes(data)
    os.chmod(src, 0o644)
    out = runner.base / "out"
    r = runner.run([S3TOOL, "--encrypt-key", kf, "put", f"s3://{b}/obj", src])
    assert r.rc == 0, str(r)
    obj = s3server.objects(b)["obj"]
    sealed = obj.read_bytes()
    chunk, sc = 5 << 20, (5 << 20) + 16
    assert len(sealed) == 40 + 3 * 16 + len(data) and data[:4096] not in sealed
    r = runner.run([S3TOOL, "--encrypt-key", kf, "get", f"s3://{b}/obj", out])
    assert r.rc == 0 and out.read_bytes() == data, str(r)
    head, c0, c1, c2 = sealed[:40], sealed[40:40 + sc], sealed[40 + sc:40 + 2 * sc], sealed[40 + 2 * sc:]
    bad_chunk = bytearray(head)
    bad_chunk[12:16] = (chunk // 2).to_bytes(4, "little")
    cases = {
        "swapped": head + c1 + c0 + c2,
        "last dropped": head + c0 + c1,
        "middle dropped": head + c0 + c2,
        "chunk size": bytes(bad_chunk) + c0 + c1 + c2,
        "cut in a tag": head + c0 + c1 + c2[:8],
    }
    for what, body in cases.items():
        obj.write_bytes(body)
        r = runner.run([S3TOOL, "--encrypt-key", kf, "get", f"s3://{b}/obj", out])
        assert r.rc == 1 and len(r.stderr_lines()) == 1 and f"s3://{b}/obj fails its authentication" in r.stderr, f"{what}\n{r}"
    obj.write_bytes(sealed)
    r = runner.run([S3TOOL, "--encrypt-key", other, "get", f"s3://{b}/obj", out])
    assert r.rc == 1 and "another key" in r.stderr, str(r)
    r = runner.run([S3TOOL, "put", f"s3://{b}/plainobj", src])
    assert r.rc == 0, str(r)
    r = runner.run([S3TOOL, "--encrypt-key", kf, "get", f"s3://{b}/plainobj", out])
    assert r.rc == 1 and "is not encrypted" in r.stderr, str(r)


def test_streamed_and_encrypted(runner, s3server, tmp_path):
    """`run -d s3://... --encrypt-key`: what the stream publishes is sealed too (none of the marker in
    the bucket), and after the machine is lost a restart elsewhere with the key ends as an
    uninterrupted run."""
    b = s3server.bucket()
    url = f"s3://{b}/stream"
    runner.env.update(s3server.env())
    marker = "LZMARK" + secrets.token_hex(12)
    key = secrets.token_bytes(32)
    kf = key_file(runner, "job.key", key.hex().encode() + b"\n")
    prog = runner.base / "secret_files.py"
    shutil.copy(PROGRAMS_SRC / "secret_files.py", prog)
    plain = tmp_path / "plain"
    plain.mkdir()
    cp = subprocess.run([PY, "-B", str(prog), str(plain), STEPS, marker], capture_output=True, text=True, timeout=120)
    want_digest, want = cp.stdout.splitlines()[-1], tree(plain)

    runner.mkdir("shared")
    work = runner.mkdir("shared/work")
    journals = runner.mkdir("shared/journals")
    machine = runner.mkdir("machine")
    runner.mkdir("machine/tmp")
    runner.env["TMPDIR"] = str(machine / "tmp")
    spool = machine / "spool"
    job = runner.start_lz("run", "-d", url, "--fallback", spool, "-i", "0", "--compress", "none", "--journal-dir", journals,
                          "--encrypt-key", kf, "--", PY, "-B", prog, work, STEPS, marker)
    wait_step(job, 40)
    idx = runner.checkpoint_when_up(spool)
    wait_published(runner, spool, idx, job)
    at = wait_step(job, 0)
    wait_step(job, at + 40)
    job.kill()
    held = bucket_bytes(s3server, b)
    assert held and marker.encode() not in held and key.hex().encode() not in held and key not in held
    commits = [p for k, p in s3server.objects(b).items() if "/commit/" in k]
    fp = re.search(r"^encrypt_key=([0-9a-f]{16})$", (spool / "job").read_text(), re.M)
    assert fp and commits and all(f"key {fp.group(1)}" in p.read_text() for p in commits)

    shutil.rmtree(machine)
    elsewhere = runner.mkdir("elsewhere")
    runner.mkdir("elsewhere/tmp")
    runner.env["TMPDIR"] = str(elsewhere / "tmp")
    killed = tree(work)
    r = runner.lz("restart", "-d", url, timeout=300)
    assert r.rc == 1 and len(r.stderr_lines()) == 1 and "--encrypt-key" in r.stderr and tree(work) == killed, str(r)
    r = runner.lz("restart", "-d", url, "--encrypt-key", kf, timeout=300)
    assert r.rc == 0, str(r)
    assert r.stdout.splitlines()[-1] == want_digest, str(r)
    assert tree(work) == want
