"""The command line: help, errors, refusing a busy DIR, exit status
pass-through, signal forwarding, `list --json`, store permissions, and a
checkpoint refused because of a socket/pidfd."""
import calendar
import os
import re
import signal
import stat
import time

import pytest

import lzformat
from conftest import (ckpt_dirs, ckpt_path, kill_program, refused_until_let_go, snapshot, tmp_entries,
                      wait_new_checkpoint)

COMMANDS = ["run", "checkpoint", "restart", "diff", "list", "verify", "gc"]


def start_sleeper(runner, store, *opts, gofile=None):
    """A job whose program prints `ready` and then waits (forever, or for gofile)."""
    args = ["term", gofile] if gofile else ["sleep"]
    proc = runner.start_lz("run", "-d", store, "-i", "0", *opts, "--", runner.programs.exit_code, *args)
    proc.wait_for_output(r"^ready$", timeout=60)
    return proc


@pytest.fixture
def r(runner, programs):
    runner.programs = programs
    return runner


# ---------------------------------------------------------------- help/usage
@pytest.mark.parametrize("cmd", [None] + COMMANDS)
def test_help(cmd, r):
    args = ([cmd] if cmd else []) + ["--help"]
    res = r.lz(*args)
    assert res.rc == 0, str(res)
    text = res.stdout + res.stderr
    assert text.strip(), str(res)
    for word in ([cmd] if cmd else COMMANDS):
        assert word in text, f"help should mention {word}\n{res}"


@pytest.mark.parametrize("cmd", COMMANDS)
def test_unknown_option(cmd, r):
    res = r.lz(cmd, "--no-such-option", "-d", r.base / "store")
    assert res.rc != 0, str(res)
    assert len(res.stderr_lines()) == 1, f"want a one-line error\n{res}"
    assert not (r.base / "store").exists(), "a rejected command created DIR"


def test_unknown_command(r):
    res = r.lz("frobnicate")
    assert res.rc != 0, str(res)
    assert len(res.stderr_lines()) == 1, str(res)


# ---------------------------------------------------------------- busy DIR
def test_run_refuses_dir_of_running_or_unfinished_job(r):
    store = r.base / "store"
    proc = start_sleeper(r, store)
    r.checkpoint(store)

    def refused(why, words):
        res = r.lz("run", "-d", store, "--", r.programs.exit_code, "0")
        assert res.rc != 0, f"{why}: second run accepted\n{res}"
        assert len(res.stderr_lines()) == 1, f"{why}: want one clear line\n{res}"
        for w in words:
            assert w in res.stderr, f"{why}: message must name {w}\n{res}"
        assert "ready" not in res.stdout, f"{why}: the program ran\n{res}"

    refused("job running", ["-d"])
    assert proc.poll() is None, "the running job was disturbed"
    kill_program(proc, "exit_code")
    before = snapshot(store)
    refused("job killed, not finished", ["restart", "-d"])
    assert snapshot(store) == before, "a refused run changed DIR"


def test_run_accepts_dir_of_finished_job(r):
    store = r.base / "store"
    for _ in range(2):
        res = r.lz("run", "-d", store, "--", r.programs.exit_code, "0")
        assert res.rc == 0, str(res)
        assert res.stdout == "ready\n", str(res)


def test_restart_without_checkpoint(r):
    res = r.lz("restart", "-d", r.base / "nothing-here")
    assert res.rc != 0, str(res)
    assert len(res.stderr_lines()) == 1, str(res)

    store = r.base / "store"
    proc = start_sleeper(r, store)  # -i 0: no checkpoint is ever taken
    kill_program(proc, "exit_code")
    res = r.lz("restart", "-d", store)
    assert res.rc != 0, str(res)
    assert len(res.stderr_lines()) == 1, str(res)
    assert "checkpoint" in res.stderr.lower(), f"should say there is no checkpoint\n{res}"
    assert "ready" not in res.stdout


def test_checkpoint_without_job(r):
    res = r.lz("checkpoint", "-d", r.base / "nothing-here")
    assert res.rc != 0, str(res)
    assert len(res.stderr_lines()) == 1 and res.stdout == "", str(res)

    store = r.base / "store"
    proc = start_sleeper(r, store)
    r.checkpoint(store)
    kill_program(proc, "exit_code")
    res = r.lz("checkpoint", "-d", store)
    assert res.rc != 0, f"checkpoint of a dead job\n{res}"
    assert res.stderr.strip() and res.stdout == "", str(res)


# ---------------------------------------------------------------- exit status
@pytest.mark.parametrize("what,status", [("7", 7), ("0", 0), ("term", 143)])
def test_exit_status_through_run(what, status, r):
    res = r.lz("run", "-d", r.base / "store", "--", r.programs.exit_code, what)
    assert res.rc == status, str(res)
    assert res.stdout == "ready\n"


@pytest.mark.parametrize("what,status", [("7", 7), ("term", 143)])
def test_exit_status_through_restart(what, status, r):
    store = r.base / "store"
    gofile = r.base / "go"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", r.programs.exit_code, what, gofile)
    proc.wait_for_output(r"^ready$", timeout=60)
    r.checkpoint(store)
    kill_program(proc, "exit_code")
    r.touch(gofile)
    res = r.lz("restart", "-d", store, timeout=120)
    assert res.rc == status, str(res)
    assert "ready" not in res.stdout, "restart started the program over"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_program_status_through_run_and_restart(sig, r):
    """A program killed by a signal: run and restart exit 128+signal."""
    store = r.base / "store"
    proc = start_sleeper(r, store)
    r.checkpoint(store)
    kill_program(proc, "exit_code", sig=sig, expect=128 + sig)
    for _ in range(2):
        proc = r.start_lz("restart", "-d", store)
        r.checkpoint_when_up(store)  # answered by the restored program
        kill_program(proc, "exit_code", sig=sig, expect=128 + sig)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_forwarded_to_program(sig, r):
    store = r.base / "store"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", r.programs.exit_code, "trap")
    proc.wait_for_output(r"^ready$", timeout=60)
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=30) == 40 + sig, f"{proc.stdout}{proc.stderr}"
    assert proc.stdout == f"ready\ngot signal {int(sig)}\n", proc.stdout


def test_options_before_and_after_double_dash(r):
    # arguments after -- belong to the program, even when they look like options
    res = r.lz("run", "-d", r.base / "store", "-i", "0", "-k", "2", "--",
               "/bin/sh", "-c", 'echo "$@"', "sh", "-d", "-i", "--at")
    assert res.rc == 0, str(res)
    assert res.stdout == "-d -i --at\n", str(res)


# ---------------------------------------------------------------- list/store
ISO_UTC = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|\+00:00)$")
FIELDS = {"index", "time", "created_ns", "trigger", "memory_bytes", "stored_bytes", "pause_ms", "parent"}


def test_list_json_and_triggers(r):
    store = r.base / "store"
    proc = r.start_lz("run", "-d", store, "-i", "1", "--", r.programs.exit_code, "sleep")
    proc.wait_for_output(r"^ready$", timeout=60)
    assert wait_new_checkpoint(r, store, -1, proc)
    req = r.checkpoint(store)
    t0 = time.time()
    entries = r.list_json(store)
    assert entries, "no checkpoints listed"
    idx = [int(e["index"]) for e in entries]
    assert idx == sorted(set(idx)), f"list must be ordered by index: {idx}"
    assert req in idx
    for e in entries:
        assert FIELDS <= set(e), f"missing fields {FIELDS - set(e)} in {e}"
        m = ISO_UTC.match(e["time"])
        assert m, f"time is not ISO-8601 UTC: {e['time']!r}"
        secs = calendar.timegm(tuple(int(x) for x in m.groups()[:6]))
        assert isinstance(e["created_ns"], int)
        assert abs(secs - e["created_ns"] / 1e9) < 1.5, e
        assert abs(t0 - e["created_ns"] / 1e9) < 120, e
        assert e["trigger"] in ("interval", "request", "api"), e
        assert isinstance(e["memory_bytes"], int) and e["memory_bytes"] > 0, e
        assert isinstance(e["stored_bytes"], int) and e["stored_bytes"] >= 0, e
        assert isinstance(e["pause_ms"], (int, float)) and e["pause_ms"] >= 0, e
        assert e["parent"] in (0, None), f"no restart happened, yet a parent: {e}"
    by = {int(e["index"]): e for e in entries}
    assert by[req]["trigger"] == "request", by[req]
    assert any(e["trigger"] == "interval" for e in entries), entries
    # the plain listing: one row per checkpoint
    res = r.lz("list", "-d", store)
    assert res.rc == 0, str(res)
    for i in idx:
        assert re.search(rf"(^|\s){i}(\s|$)", res.stdout, re.M), f"index {i} not listed\n{res}"
    kill_program(proc, "exit_code")


def test_store_layout_and_permissions(r):
    store = r.base / "store"
    proc = start_sleeper(r, store)
    a = r.checkpoint(store)
    b = r.checkpoint(store)
    assert ckpt_dirs(store) == [a, b]
    assert tmp_entries(store) == []
    assert (store / "job").is_file() and (store / "lock").exists()
    st = store.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700, oct(st.st_mode)
    for root, dirs, files in os.walk(store):
        for n in dirs + files:
            p = os.path.join(root, n)
            s = os.lstat(p)
            assert s.st_uid == r.uid, f"{p} owned by {s.st_uid}"
            if stat.S_ISDIR(s.st_mode):
                assert stat.S_IMODE(s.st_mode) == 0o700, f"{p}: {oct(s.st_mode)}"
            elif stat.S_ISREG(s.st_mode):
                assert stat.S_IMODE(s.st_mode) == 0o600, f"{p}: {oct(s.st_mode)}"
    for i in (a, b):
        d = ckpt_path(store, i)
        assert (d / "manifest").is_file(), sorted(os.listdir(d))
        assert not (d / "pages").exists(), "since version 2 page data is in DIR/packs, not in ckpt.N"
        head = lzformat.HEADER.unpack((d / "manifest").read_bytes())
        assert head.magic == lzformat.MAGIC and head.version == 6 and head.machine == 62 and head.page_size == 4096, head
    # page data: DIR/packs/pack.N, written by checkpoint N (the first holds
    # the whole memory, so it is never empty)
    packs = store / "packs"
    assert packs.is_dir() and stat.S_IMODE(packs.stat().st_mode) == 0o700
    names = sorted(os.listdir(packs))
    assert names and all(re.fullmatch(r"pack\.\d{6}", n) for n in names), names
    assert f"pack.{a:06d}" in names and (packs / f"pack.{a:06d}").stat().st_size > 0, names
    kill_program(proc, "exit_code")


# ---------------------------------------------------------------- descriptors
@pytest.mark.parametrize("kind", ["socket", "pidfd"])
def test_checkpoint_refused_for_socket_keeps_program_running(kind, r):
    store = r.base / "store"
    f1, f2 = r.base / "f1", r.base / "f2"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", r.programs.holds_fd, kind, "7", f1, f2)
    proc.wait_for_output(r"^ready$", timeout=60)

    # the message names descriptor 7; once it is closed, checkpoints work again
    refused_until_let_go(r, store, proc, r"\b7\b", f1, f2, lines=2)
    assert proc.stdout == "ready\nclosed\ndone\n", proc.stdout


# ---------------------------------------------------------------- finished job
FINISHING = r'''
import os, sys, time
with open("app.log", "a") as f:
    f.write("before\n")
print("ready", flush=True)
while not os.path.exists("go"):
    time.sleep(0.01)
with open("app.log", "a") as f:
    for i in range(24):
        f.write(f"after {i}\n")
print("done", flush=True)
'''


def test_restart_of_finished_job_refused_then_forced(r):
    """A job that exited on its own: `restart` says it finished and changes
    nothing (its results stay); `--force` rolls its files back to the newest
    checkpoint and runs it again from there."""
    store, work = r.base / "store", r.base
    prog = r.base / "finishing.py"
    prog.write_text(FINISHING)
    os.chmod(prog, 0o644)
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", "python3", prog)
    proc.wait_for_output(r"^ready$", timeout=60)
    r.checkpoint(store)
    (work / "go").write_text("")
    assert proc.wait(timeout=60) == 0, proc.stderr
    log = (work / "app.log").read_text()
    assert log.count("after") == 24, log
    before = snapshot(store)
    res = r.lz("restart", "-d", store)
    assert res.rc == 1, str(res)
    assert len(res.stderr_lines()) == 1 and "finished" in res.stderr and "--force" in res.stderr, str(res)
    assert (work / "app.log").read_text() == log, "a refused restart changed the job's results"
    assert snapshot(store) == before, "a refused restart changed DIR"
    res = r.lz("restart", "-d", store, "--force", timeout=120)
    assert res.rc == 0, str(res)
    assert res.stdout == "done\n", str(res)  # resumed after `ready`, not from the start
    assert (work / "app.log").read_text() == log, "the rerun from the checkpoint gives the same file"
