"""The files come back too: a job run with --remote and --journal-dir on the
file system of its files (a directory standing for a shared file system)
loses its machine (the whole job SIGKILLed while it changes its files, its
store, working directory and $TMPDIR deleted); `restart -d s3://...` on
another "machine" (another working directory and $TMPDIR) fetches the
newest published checkpoint, finds the journals in the journal directory and
rolls the files back to it: the program's result and every file are
byte-identical to an uninterrupted run.  Without the journal directory the
restart refuses with one line and changes nothing: neither the files, nor
the remote store, nor the journals (programs/shared_files.py)."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from conftest import BUILD, PROGRAMS_SRC
from s3server import s3server  # noqa: F401  (the fixture)

S3TOOL = BUILD / "bin" / "lazarus-s3"
STEPS = "400"
PY = "/usr/bin/python3"  # every user can run it


def tree(d: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def wait_step(proc, at_least: int, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = [int(l.split()[1]) for l in proc.stdout.splitlines() if l.startswith("step ")]
        if steps and steps[-1] >= at_least:
            return steps[-1]
        assert proc.poll() is None, proc.stderr
        time.sleep(0.02)
    raise AssertionError(f"no step {at_least}\n{proc.stderr}")


def test_files_roll_back_after_machine_loss(runner, s3server, tmp_path):
    b = s3server.bucket()
    url = f"s3://{b}/jobs"
    runner.env.update(s3server.env())
    prog = runner.base / "shared_files.py"
    shutil.copy(PROGRAMS_SRC / "shared_files.py", prog)
    # the uninterrupted run, without Lazarus
    plain = tmp_path / "plain"
    plain.mkdir()
    cp = subprocess.run([PY, "-B", str(prog), str(plain), STEPS], capture_output=True, text=True, timeout=120)
    want_digest = cp.stdout.splitlines()[-1]
    want = tree(plain)
    shared = runner.mkdir("shared")
    work = runner.mkdir("shared/work")
    journals = runner.mkdir("shared/journals")
    machine = runner.mkdir("machine")
    runner.mkdir("machine/tmp")
    runner.env["TMPDIR"] = str(machine / "tmp")
    store = machine / "store"
    job = runner.start_lz("run", "-d", store, "-i", "0", "--remote", url, "--journal-dir", journals, "--",
                          PY, "-B", prog, work, STEPS)
    wait_step(job, 50)
    idx = runner.checkpoint_when_up(store)
    deadline = time.monotonic() + 60
    while not {e["index"]: e["remote"] for e in runner.list_json(store)}.get(idx):
        assert time.monotonic() < deadline, job.stderr
        time.sleep(0.05)
    at = wait_step(job, 0)
    wait_step(job, at + 60)  # changes after the published checkpoint: the journal has them
    job.kill()
    shutil.rmtree(machine)
    files_then = tree(work)
    journals_then = sorted(str(p.relative_to(shared)) for p in journals.rglob("*"))
    keys_then = runner.run([S3TOOL, "ls", url + "/"]).stdout
    elsewhere = runner.mkdir("elsewhere")
    runner.mkdir("elsewhere/tmp")
    runner.env["TMPDIR"] = str(elsewhere / "tmp")
    # the journal directory is not here: refused, nothing changed
    moved = shared / "journals.away"
    journals.rename(moved)
    r = runner.lz("restart", "-d", url, timeout=120)
    assert r.rc == 1 and len(r.stderr_lines()) == 1 and "journal directory" in r.stderr and "nothing was changed" in r.stderr, str(r)
    assert tree(work) == files_then and runner.run([S3TOOL, "ls", url + "/"]).stdout == keys_then
    moved.rename(journals)
    assert sorted(str(p.relative_to(shared)) for p in journals.rglob("*")) == journals_then
    # `diff -d s3://` says what the restart will undo, from the journals, changing nothing
    r = runner.lz("diff", "-d", url, timeout=300)
    assert r.rc == 0 and re.search(r"^modified +\S*work/", r.stdout, re.M), str(r)
    assert tree(work) == files_then and runner.run([S3TOOL, "ls", url + "/"]).stdout == keys_then
    assert sorted(str(p.relative_to(shared)) for p in journals.rglob("*")) == journals_then
    assert not [p for p in (elsewhere / "tmp").iterdir() if p.name.startswith("lazarus-diff-")]
    # with it: the files back to the checkpoint, then the run goes on to the same end
    r = runner.lz("restart", "-d", url, timeout=300)
    assert r.rc == 0, str(r)
    assert r.stdout.splitlines()[-1] == want_digest, str(r)
    assert tree(work) == want
    assert int(r.stdout.splitlines()[0].split()[1]) > 0  # resumed, not started over
