"""Exit codes (cli/exit_codes.h, lazarus(1) EXIT STATUS): each one produced
by the situation it documents, with one line on stderr saying why, as root
and as an ordinary user; and `run`/`restart` pass the program's own status
through unchanged once it ran."""
import os
import time

import pytest

from conftest import _compile, ckpt_path, kill_program, kill_tree, snapshot, wait_gone

USAGE, NOT_FOUND, NOT_RUNNING, RUNNING, CKPT_FAILED, DAMAGED, OUTSIDE, REMOTE = 2, 240, 241, 242, 243, 244, 245, 246


@pytest.fixture
def r(runner, programs):
    runner.programs = programs
    return runner


def one_line(res, rc, *words):
    assert res.rc == rc, f"want exit {rc}\n{res}"
    lines = res.stderr_lines()
    assert len(lines) == 1 and lines[0].startswith("lazarus: "), f"want one line on stderr\n{res}"
    for w in words:
        assert w in lines[0], f"{w!r} not said\n{res}"


def start_waiting(r, store, gofile):
    """A job whose program prints `ready`, then exits 0 once gofile exists."""
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", r.programs.exit_code, "0", gofile)
    proc.wait_for_output(r"^ready$", timeout=60)
    return proc


def finish(r, proc, gofile):
    r.touch(gofile)
    assert proc.wait(timeout=60) == 0, proc.stderr


def test_usage(r):
    one_line(r.lz("run", "--no-such-option", "--", "true"), USAGE, "unknown option")
    one_line(r.lz("checkpoint", "--at", "x"), USAGE)
    one_line(r.lz("run", "-d", r.base / "st", "--log", r.base / "no" / "such" / "dir" / "log", "--", "true"), USAGE, "--log")
    assert not (r.base / "st").exists()


def test_not_found(r):
    nowhere = r.base / "nowhere"
    for cmd in ("restart", "list", "verify", "diff", "gc", "show"):
        one_line(r.lz(cmd, "-d", nowhere), NOT_FOUND, "no checkpoint store")
    # a store, but no such checkpoint
    store, go = r.base / "st", r.base / "go"
    proc = start_waiting(r, store, go)
    n = r.checkpoint(store)
    finish(r, proc, go)
    for cmd in ("restart", "verify", "diff", "show"):
        one_line(r.lz(cmd, "-d", store, "--at", str(n + 100)), NOT_FOUND, f"no checkpoint {n + 100}")


def test_not_running_and_running(r):
    store, go = r.base / "st", r.base / "go"
    one_line(r.lz("checkpoint", "-d", store), NOT_RUNNING, "no job is running")
    proc = start_waiting(r, store, go)
    r.checkpoint(store)
    before = snapshot(store)
    one_line(r.lz("run", "-d", store, "--", "true"), RUNNING, "already running")
    one_line(r.lz("run", "--resume", "-d", store, "--", r.programs.exit_code, "0", go), RUNNING, "is running")
    one_line(r.lz("restart", "-d", store), RUNNING, "already running")
    after = snapshot(store)
    for s in (before, after):
        s.pop("lock", None)
    assert after == before, "a refused command changed the store"
    finish(r, proc, go)
    one_line(r.lz("checkpoint", "-d", store), NOT_RUNNING, "no job is running")


def test_checkpoint_failed(r):
    """The job is there but cannot be checkpointed (its main thread exited
    while a worker runs on, for about 3 s)."""
    main_exits = _compile("main_exits", r.base, ["-pthread"])
    store = r.base / "st"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", main_exits)
    proc.wait_for_output(r"^ready$", timeout=60)
    res = r.lz("checkpoint", "-d", store, timeout=60)
    if proc.poll() is None or res.rc == CKPT_FAILED:
        one_line(res, CKPT_FAILED, "has exited")
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert not any(n.startswith("ckpt.") for n in os.listdir(store)), "nothing may be committed"


def test_damaged(r):
    store, go = r.base / "st", r.base / "go"
    proc = start_waiting(r, store, go)
    n = r.checkpoint(store)
    kill_program(proc, "exit_code")
    assert r.lz("verify", "-d", store).rc == 0
    man = ckpt_path(store, n) / "manifest"
    data = bytearray(man.read_bytes())
    data[len(data) // 2] ^= 0x10
    man.write_bytes(data)
    res = r.lz("verify", "-d", store)
    assert res.rc == DAMAGED and "manifest" in res.stderr, str(res)
    before = snapshot(store)
    one_line(r.lz("restart", "-d", store), DAMAGED, f"checkpoint {n} is damaged", "nothing was changed")
    assert snapshot(store) == before


def test_damaged_page_data(r):
    """Damage the restorer finds (a page frame failing its checksum) is 244 too."""
    store, go = r.base / "st", r.base / "go"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", r.programs.heap_mutator, "8", "1000000")
    time.sleep(0.5)
    n = r.checkpoint_when_up(store)
    kill_program(proc, "heap_mutator")
    packs = sorted((store / "packs").iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(packs[-1].read_bytes())
    data[len(data) // 2] ^= 0x10
    packs[-1].write_bytes(data)
    res = r.lz("restart", "-d", store, timeout=120)
    assert res.rc == DAMAGED and f"checkpoint {n} is damaged" in res.stderr, str(res)


def test_damaged_journal(r):
    """A file journal that fails its checksum: `diff`, `show`, `restart` and
    `rollback` say so in one line and exit 244; restart and rollback change
    nothing."""
    store, go, f = r.base / "st", r.base / "go", r.base / "f.txt"
    script = f"echo one > {f}; echo ready; while [ ! -e {go} ]; do sleep 0.05; done; echo two >> {f}; echo done; while :; do sleep 1; done"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", "sh", "-c", script)
    proc.wait_for_output(r"^ready$", timeout=60)
    n = r.checkpoint(store)
    r.touch(go)
    proc.wait_for_output(r"^done$", timeout=60)
    kill_program(proc, "sh")
    assert r.lz("diff", "-d", store).rc == 0
    # a byte of the file's name in a record of the interval after n
    logs = [p for p in ckpt_path(store, n).rglob("files.log") if str(f).encode() in p.read_bytes()]
    assert logs, "no journal names the file"
    data = bytearray(logs[0].read_bytes())
    data[data.index(str(f).encode()) + len(str(f)) - 1] ^= 0x01
    logs[0].write_bytes(data)
    one_line(r.lz("diff", "-d", store), DAMAGED, "is damaged")
    one_line(r.lz("diff", "-d", store, "--json"), DAMAGED, "is damaged")
    one_line(r.lz("show", "-d", store, "journal"), DAMAGED, "is damaged")
    before, content = snapshot(store), f.read_text()
    one_line(r.lz("restart", "-d", store), DAMAGED, "is damaged", "nothing was changed")
    one_line(r.lz("rollback", "-d", store), DAMAGED, "is damaged", "nothing was changed")
    assert snapshot(store) == before and f.read_text() == content


def test_damaged_part_of_several_processes(r):
    """A job of two processes whose child's part is damaged: the restart
    refuses it in one line with 244 before anything runs."""
    store = r.base / "st"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", "sh", "-c", "sleep 600 & echo ready; wait")
    proc.wait_for_output(r"^ready$", timeout=60)
    time.sleep(0.3)
    n = r.checkpoint(store)
    pids = kill_tree(proc.pid)
    proc.wait(timeout=30)
    wait_gone(pids)
    parts = sorted(ckpt_path(store, n).rglob("proc.*/manifest"))
    assert parts, "no part of the child in the checkpoint"
    data = bytearray(parts[0].read_bytes())
    data[len(data) // 2] ^= 0x10
    parts[0].write_bytes(data)
    before = snapshot(store)
    one_line(r.lz("restart", "-d", store, timeout=120), DAMAGED, f"checkpoint {n} is damaged")
    assert snapshot(store) == before


def test_outside_changes(r):
    """A file the job wrote, changed by someone else after the job stopped:
    restart refuses (245) and changes nothing; --force rolls it back."""
    store, go, f = r.base / "st", r.base / "go", r.base / "f.txt"
    script = f"echo one > {f}; echo ready; while [ ! -e {go} ]; do sleep 0.05; done; echo two >> {f}; while :; do sleep 1; done"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", "sh", "-c", script)
    proc.wait_for_output(r"^ready$", timeout=60)
    r.checkpoint(store)
    r.touch(go)
    deadline = time.monotonic() + 30
    while f.read_text() != "one\ntwo\n" and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_program(proc, "sh")
    time.sleep(0.05)
    with open(f, "a") as fh:
        fh.write("outside\n")
    before = snapshot(store)
    one_line(r.lz("restart", "-d", store), OUTSIDE, "changed outside the job", "nothing was changed")
    assert f.read_text() == "one\ntwo\noutside\n" and snapshot(store) == before
    os.unlink(go)
    p = r.start_lz("restart", "-d", store, "--force")
    deadline = time.monotonic() + 30
    while "restarted from checkpoint" not in p.stderr and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "restarted from checkpoint" in p.stderr, p.stderr
    assert f.read_text() == "one\n"
    p.kill()


def test_remote_unreachable(r):
    """--remote to an endpoint nothing listens on: nothing started (246);
    a command reading a remote store there: 246 too."""
    store = r.base / "st"
    r.env.update({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1", "LAZARUS_S3_ATTEMPTS": "1"})
    res = r.lz("run", "-d", store, "--remote", "s3://bucket/x", "--endpoint", "http://127.0.0.1:9", "--",
               r.programs.exit_code, "0", timeout=120)
    assert res.rc == REMOTE and "remote store" in res.stderr and "ready" not in res.stdout, str(res)
    r.env["TMPDIR"] = str(r.base)
    for cmd in ("restart", "list", "verify", "diff", "show", "gc"):
        res = r.lz(cmd, "-d", "s3://bucket/x", "--endpoint", "http://127.0.0.1:9", timeout=120)
        assert res.rc == REMOTE and len(res.stderr_lines()) == 1, str(res)


@pytest.mark.parametrize("code", ["0", "1", "7", "240", "term"])
def test_program_status_passes_through(r, code):
    """Once the program ran, its status is the command's, whatever it is
    (lazarus(1): the one ambiguity is a program exiting 1, 2 or 240..247)."""
    want = 128 + 15 if code == "term" else int(code)
    store, go = r.base / "st", r.base / "go"
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", r.programs.exit_code, code, go)
    proc.wait_for_output(r"^ready$", timeout=60)
    r.checkpoint(store)
    kill_program(proc, "exit_code")
    p = r.start_lz("restart", "-d", store)
    deadline = time.monotonic() + 60
    while "restarted from checkpoint" not in p.stderr and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "restarted from checkpoint" in p.stderr, p.stderr
    r.touch(go)
    assert p.wait(timeout=60) == want, p.stderr
