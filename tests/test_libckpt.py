"""libckpt's interface (include/libckpt.h, -lckpt): a program written for
libckpt, main renamed ckpt_target and linked with -lckpt only (shared or
static), brings itself under Lazarus when started plainly, reads .ckptrc,
and `prog =recover` resumes it; killed at random instants and resumed each
time it ends with the result of an uninterrupted run."""
import os
import re
import signal
import time

import pytest

from conftest import INCLUDE, LIBDIR, PROGRAMS_SRC, find_program, wait_gone

ITERS = "2500"
KILLS = 3
RC = "maxtime 1\nmintime 0.3\n# libckpt's settings\nincremental on\nfork on\n"


@pytest.fixture(scope="module", params=["shared", "static"])
def ckpt_prog(request, programs):
    import subprocess
    out = programs.dir / f"ckpt_prog_{request.param}"
    lib = ([f"-L{LIBDIR}", "-lckpt", f"-Wl,-rpath,{LIBDIR}"] if request.param == "shared"
           else [f"-L{LIBDIR}", "-Wl,-Bstatic", "-lckpt", "-Wl,-Bdynamic"])
    cmd = ["gcc", "-O2", "-Wall", f"-I{INCLUDE}", "-o", str(out), str(PROGRAMS_SRC / "ckpt_prog.c"), *lib]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    os.chmod(out, 0o755)
    return out


def result(out):
    m = re.findall(r"^result (\w+)$", out, re.M)
    return m[-1] if m else None


def test_checkpointing_off_runs_plainly(runner, ckpt_prog):
    (runner.base / ".ckptrc").write_text("checkpointing off\n")
    r = runner.run([ckpt_prog, "50"], timeout=120)
    assert r.rc == 0 and result(r.stdout), str(r)
    assert not (runner.base / f"{ckpt_prog.name}.lazarus").exists()


def test_unknown_keyword(runner, ckpt_prog):
    (runner.base / ".ckptrc").write_text("maxtime 5\nbackup yes\n")
    r = runner.run([ckpt_prog, "5"], timeout=60)
    assert r.rc == 2 and r.stderr.count("\n") == 1 and "unknown keyword 'backup'" in r.stderr, str(r)
    r = runner.lz("run", "-d", runner.base / "s", "--", ckpt_prog, "5")
    assert r.rc == 2 and r.stderr.count("\n") == 1 and "unknown keyword 'backup'" in r.stderr, str(r)


def test_killed_at_random_instants(runner, ckpt_prog, rng):
    (runner.base / ".ckptrc").write_text("checkpointing off\n")
    plain = runner.run([ckpt_prog, ITERS], timeout=300)
    want = result(plain.stdout)
    assert plain.rc == 0 and want, str(plain)
    (runner.base / ".ckptrc").write_text(RC)
    store = runner.base / f"{ckpt_prog.name}.lazarus"
    argv = [ckpt_prog, ITERS]
    kills, log, last = 0, [], 0
    proc = runner.start(argv)
    while True:
        killed = None
        if kills < KILLS:
            # after a new checkpoint (each segment makes progress), a random instant
            deadline = time.monotonic() + 60
            while proc.poll() is None and max(runner.indexes(store, check=False) or [0]) <= last \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            end = time.monotonic() + rng.uniform(0.0, 0.6)
            while time.monotonic() < end and proc.poll() is None:
                time.sleep(0.005)
            if proc.poll() is None:
                killed = find_program(proc.pid, ckpt_prog.name[:15])
                if killed:
                    os.kill(killed, signal.SIGKILL)
        rc = proc.wait(timeout=300)
        log.append((rc, proc.stdout[-200:], proc.stderr[-1500:]))
        if killed and rc == 137:
            kills += 1
            wait_gone([killed])
            last = max(runner.indexes(store))
            proc = runner.start([ckpt_prog, "=recover"])
            continue
        assert rc == 0, log
        break
    assert kills == KILLS, log
    assert result(proc.stdout) == want, log
    # the synchronous checkpoints left the dead matrix out (8 MiB)
    api = [e for e in runner.list_json(store) if e["trigger"] == "api"]
    assert all(e["data_bytes"] < 6 << 20 and e["excluded_dead_bytes"] >= 8 << 20 for e in api), api


def test_lazarus_run_reads_ckptrc(runner, ckpt_prog):
    """`lazarus run` takes dir, maxtime and mintime from .ckptrc; fork off and
    maxfiles are accepted and said once each."""
    (runner.base / "sub").mkdir()
    st = runner.base.stat()
    os.chown(runner.base / "sub", st.st_uid, st.st_gid)  # the user variant's
    (runner.base / ".ckptrc").write_text("dir sub\nmaxtime 1\nmintime 0.3\nfork off\nmaxfiles 4\n")
    r = runner.lz("run", "--", ckpt_prog, "600", timeout=300)
    assert r.rc == 0 and result(r.stdout), str(r)
    assert r.stderr.count("fork off accepted") == 1 and r.stderr.count("maxfiles accepted") == 1, str(r)
    entries = runner.list_json(runner.base / "sub" / "lazarus.ckpt")
    api = [e for e in entries if e["trigger"] == "api"]
    assert api, entries
    begun = [e["created_ns"] - e["durable_ms"] * 1e6 for e in api]
    assert all(b - a >= 0.3e9 - 5e6 for a, b in zip(begun, begun[1:])), begun
