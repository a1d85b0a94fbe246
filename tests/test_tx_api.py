"""The transaction API (lazarus.h lazarus_tx_begin/commit/abort, cprfs.h) from
programs/tx_prog.c built dynamically (-llazarus) and statically (gcc -static
with liblazarus.a): a commit under the runtime is a checkpoint a restart comes
back to; a static program, which the runtime cannot enter, reaches the job's
supervisor on DIR/ctl.sock (LAZARUS_DIR) and gets the index back, or the
supervisor's refusal when it is the job's own program; abort is refused with
its reason; outside any job every call is a no-op that says so."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import INCLUDE, LIBDIR, PROGRAMS_SRC, kill_program

ABORT_REFUSED = "abort needs a files-only job with --fs"
NOT_IN_JOB = "not in a Lazarus job (no runtime, no LAZARUS_DIR)"


@pytest.fixture(scope="module")
def tx_progs(lazarus_bin):
    """tx_prog built both ways into a directory every user can read."""
    d = Path(tempfile.mkdtemp(prefix="lazarus-tx-", dir="/tmp"))
    os.chmod(d, 0o755)
    src = str(PROGRAMS_SRC / "tx_prog.c")
    builds = {
        "dynamic": ["gcc", "-O2", "-Wall", "-pthread", "-o", str(d / "tx_dynamic"), src, f"-I{INCLUDE}",
                    f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}"],
        "static": ["gcc", "-O2", "-Wall", "-static", "-pthread", "-o", str(d / "tx_static"), src, f"-I{INCLUDE}",
                   str(LIBDIR / "liblazarus.a")],
    }
    for cmd in builds.values():
        cp = subprocess.run(cmd, capture_output=True, text=True)
        assert cp.returncode == 0 and not cp.stderr.strip(), f"$ {' '.join(cmd)}\n{cp.stderr}"
    static = d / "tx_static"
    assert "INTERP" not in subprocess.run(["readelf", "-l", str(static)], capture_output=True, text=True).stdout
    yield {"dynamic": d / "tx_dynamic", "static": static}
    shutil.rmtree(d, ignore_errors=True)


def results(out: str) -> dict:
    """{"begin": (rc, index, err), "commit": ..., "abort": ...} of tx_prog's lines."""
    got = {}
    for m in re.finditer(r"^(begin|commit|abort) rc=(-?\d+)(?: index=(\d+))? err=(.*)$", out, re.M):
        got[m.group(1)] = (int(m.group(2)), int(m.group(3) or 0), m.group(4))
    return got


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_outside_any_job(runner, tx_progs, kind):
    """No runtime, no LAZARUS_DIR: every call does nothing, returns
    LAZARUS_INACTIVE (0; cprfs.h: 1) and lazarus_strerror says so; the file
    written between is the program's alone."""
    f = runner.base / "f.txt"
    r = runner.run([tx_progs[kind], f], check_rc=0)
    got = results(r.stdout)
    assert got["begin"] == (0, 0, f"{NOT_IN_JOB}: nothing was begun"), r
    assert got["commit"] == (0, 0, f"{NOT_IN_JOB}: nothing was committed"), r
    assert got["abort"] == (0, 0, f"{NOT_IN_JOB}: nothing was aborted"), r
    assert f.read_text() == "before commit\nafter commit\n"
    r = runner.run([tx_progs[kind], "cprfs"], check_rc=0)
    assert r.stdout == f"cprfs begin=0 commit=1 abort=1 err={NOT_IN_JOB}: nothing was aborted\n", r


def test_dynamic_commit_is_a_checkpoint(runner, tx_progs):
    """Under the runtime lazarus_tx_commit is a checkpoint (trigger api, its
    index returned); abort is refused with its reason; after a SIGKILL the
    restart rolls the file back to the commit and the program's commit
    returns LAZARUS_RESTARTED (2): the line written after it is there once."""
    store, f, trig = runner.base / "st", runner.base / "f.txt", runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", tx_progs["dynamic"], f, trig)
    proc.wait_for_output(r"^waiting$", timeout=60)
    got = results(proc.stdout)
    assert got["begin"] == (0, 0, ""), proc.stdout
    rc, index, err = got["commit"]
    assert (rc, err) == (1, "") and index >= 1, proc.stdout
    listed = runner.list_json(store)
    assert [(e["index"], e["trigger"]) for e in listed] == [(index, "api")], listed
    assert got["abort"][0] == -1 and got["abort"][2].startswith(ABORT_REFUSED), proc.stdout
    assert f.read_text() == "before commit\nafter commit\n"
    kill_program(proc, "tx_dynamic")
    proc = runner.start_lz("restart", "-d", store)
    proc.wait_for_output(r"^waiting$", timeout=60)
    again = results(proc.stdout)
    assert again["commit"] == (2, index, ""), proc.stdout
    assert f.read_text() == "before commit\nafter commit\n"
    runner.touch(trig)
    assert proc.wait(timeout=60) == 0, proc.stderr


def test_static_program_of_the_job_is_refused(runner, tx_progs):
    """A static program as the job's own program: its commit reaches the
    supervisor on ctl.sock, which cannot take a memory checkpoint of a
    program the runtime never entered and says so: LAZARUS_ERROR with that
    reason, no checkpoint listed, the program runs on to its end."""
    store, f = runner.base / "st", runner.base / "f.txt"
    r = runner.lz("run", "-d", store, "-i", "0", "--", tx_progs["static"], f, timeout=60, check_rc=0)
    got = results(r.stdout)
    assert got["begin"] == (0, 0, ""), r
    assert got["commit"][:2] == (-1, 0), r
    assert got["commit"][2].startswith("the program is not running under the Lazarus runtime"), r
    assert got["abort"][0] == -1 and got["abort"][2].startswith(ABORT_REFUSED), r
    assert runner.indexes(store) == []
    assert f.read_text() == "before commit\nafter commit\n"


def test_static_program_commits_the_job(runner, tx_progs):
    """A static program given the job's LAZARUS_DIR (as every program of a job
    is) commits it: lazarus_tx_commit returns LAZARUS_CONTINUED and the index
    the supervisor committed; from several threads at once, each gets a
    committed index."""
    store, go = runner.base / "st", runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "sh", "-c",
                           f"echo ready; while [ ! -e {go} ]; do sleep 0.05; done")
    proc.wait_for_output(r"^ready$", timeout=60)
    runner.checkpoint_when_up(store)
    env = dict(runner.env)
    runner.env["LAZARUS_DIR"] = str(store)
    try:
        r = runner.run([tx_progs["static"], runner.base / "f.txt"], check_rc=0, timeout=120)
        got = results(r.stdout)
        rc, index, err = got["commit"]
        assert (rc, err) == (1, "") and index >= 2, r
        assert got["abort"][0] == -1 and got["abort"][2].startswith(ABORT_REFUSED), r
        assert index in runner.indexes(store)
        r = runner.run([tx_progs["static"], "threads", "4"], check_rc=0, timeout=120)
        lines = re.findall(r"^thread \d commit rc=(-?\d+) index=(\d+) err=(.*)$", r.stdout, re.M)
        listed = runner.indexes(store)
        assert len(lines) == 4 and all(rc == "1" and index < int(i) <= max(listed) and not e for rc, i, e in lines), \
            (r, listed)
    finally:
        runner.env = env
    runner.touch(go)
    assert proc.wait(timeout=60) == 0, proc.stderr
