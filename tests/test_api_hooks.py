"""The fuller C API (lazarus.h): lazarus_is_enabled, lazarus_disable/enable
sections that a checkpoint waits for, lazarus_on hooks run before and after a
checkpoint and after a restart, the store directory and the counts of
checkpoints and restarts, lazarus_strerror, concurrent lazarus_checkpoint
calls; each a no-op without Lazarus, linked shared or static."""
import re
import subprocess
import time

import pytest

from conftest import INCLUDE, LIBDIR, PROGRAMS_SRC, _compile, kill_program


@pytest.fixture(scope="module")
def hooks_prog(programs):
    return _compile("api_hooks", programs.dir,
                    [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}", "-pthread"])


@pytest.fixture(scope="module")
def hooks_static(programs):
    """Linked with liblazarus.a: the runtime is found with dlsym all the same."""
    out = programs.dir / "api_hooks_static"
    cmd = ["gcc", "-O2", "-Wall", f"-I{INCLUDE}", "-o", str(out), str(PROGRAMS_SRC / "api_hooks.c"),
           str(LIBDIR / "liblazarus.a"), "-ldl", "-pthread"]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return out


def info(text):
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


@pytest.mark.parametrize("link", ["shared", "static"])
def test_no_op_without_lazarus(hooks_prog, hooks_static, link):
    prog = hooks_prog if link == "shared" else hooks_static
    cp = subprocess.run([str(prog), "info"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stderr
    got = info(cp.stdout)
    assert got == {"enabled": "0", "store": "(null)", "checkpoints": "0", "restarts": "0", "strerror": "[]",
                   "checkpoint": "inside a section 0 []", "disable": "0 0 enable 0 0 0 errno 0",
                   "on": "0", "version": got["version"]}, cp.stdout
    assert "on bad event 0 errno 0" in cp.stdout
    # hooks registered without Lazarus are never called
    assert not re.search(r"^(before|after|restart) ", cp.stdout, re.M)


@pytest.mark.parametrize("link", ["shared", "static"])
def test_answers_under_lazarus(runner, hooks_prog, hooks_static, link):
    prog = hooks_prog if link == "shared" else hooks_static
    store = runner.base / "store"
    r = runner.lz("run", "-d", store, "-i", "0", "--", prog, "info", timeout=120)
    assert r.rc == 0, str(r)
    got = info(r.stdout)
    assert got["enabled"] == "1" and got["store"] == str(store), r.stdout
    assert got["checkpoints"] == "0" and got["restarts"] == "0" and got["strerror"] == "[]", r.stdout
    # nested sections: depths 1, 2, then 1, 0; one more enable is EPERM
    assert got["disable"] == "1 2 enable 1 0 -1 errno 1", r.stdout
    # a checkpoint asked for inside a section would wait for itself: refused at once, with its reason
    assert got["checkpoint"] == "inside a section -1 [a checkpoint cannot be asked for inside a lazarus_disable() section]"
    assert "on bad event -1 errno 22" in r.stdout and got["on"] == "1", r.stdout
    assert runner.indexes(store) == []


def hook_lines(text):
    return [line for line in text.splitlines() if re.match(r"(before|after|restart) \d", line)]


def test_hooks_around_checkpoints_and_restart(runner, hooks_prog):
    """Two checkpoints from the CLI, SIGKILL, restart: before-hooks ran before
    each (the program still running), after-hooks after each, the restart
    hook once after the restart, each seeing the counts it should; the file
    the hooks append to says the same, rolled back with the program: the
    after-hook of the checkpoint restarted from ran after its snapshot."""
    store, log, stop = runner.base / "store", runner.base / "hooks.log", runner.base / "stop"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", hooks_prog, "hooks", log, stop)
    proc.wait_for_output(r"^ready$", timeout=120)
    assert "on 1 1 1" in proc.stdout
    assert runner.checkpoint(store) == 1
    proc.wait_for_output(r"^after 1 ", timeout=60)
    assert runner.checkpoint(store) == 2
    proc.wait_for_output(r"^after 2 ", timeout=60)
    assert hook_lines(proc.stdout) == [
        "before 1 before=1 after=0 restart=0 checkpoints=0 restarts=0",
        "after 1 before=1 after=1 restart=0 checkpoints=1 restarts=0",
        "before 2 before=2 after=1 restart=0 checkpoints=1 restarts=0",
        "after 2 before=2 after=2 restart=0 checkpoints=2 restarts=0"], proc.stdout
    # taken on the hooks thread, whose malloc heap the scratch memory of the
    # checkpoint must not join: only the program's memory is counted and stored
    entries = runner.list_json(store)
    assert all(e["memory_bytes"] < 512 << 20 and e["stored_bytes"] < 1 << 20 for e in entries), entries
    kill_program(proc, "api_hooks")

    again = runner.start_lz("restart", "-d", store)
    again.wait_for_output(r"^restart 1 ", timeout=120)
    runner.touch(stop)
    assert again.wait(timeout=60) == 0, again.stderr
    # restored as checkpoint 2 saw it (before its after-hook), then the restart hook
    assert hook_lines(again.stdout) == ["restart 1 before=2 after=1 restart=1 checkpoints=2 restarts=1"], again.stdout
    assert again.stdout.splitlines()[-1] == "done before=2 after=1 restart=1 checkpoints=2 restarts=1"
    assert log.read_text().splitlines() == [
        "before 1 before=1 after=0 restart=0 checkpoints=0 restarts=0",
        "after 1 before=1 after=1 restart=0 checkpoints=1 restarts=0",
        "before 2 before=2 after=1 restart=0 checkpoints=1 restarts=0",
        "restart 1 before=2 after=1 restart=1 checkpoints=2 restarts=1"]


def test_api_checkpoint_returns_after_its_hooks(runner, hooks_prog):
    """lazarus_checkpoint() returns CONTINUED once the checkpoint's hooks have
    run, and RESTARTED once the restart's have."""
    store, log, stop = runner.base / "store", runner.base / "hooks.log", runner.base / "stop"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", hooks_prog, "api", "2", log, stop)
    proc.wait_for_output(r"^ready$", timeout=120)
    api = [line for line in proc.stdout.splitlines() if line.startswith("api ")]
    assert api == ["api 1 result 1 index 1 before=1 after=1 restart=0",
                   "api 2 result 1 index 2 before=2 after=2 restart=0"], proc.stdout
    kill_program(proc, "api_hooks")
    again = runner.start_lz("restart", "-d", store)
    again.wait_for_output(r"^ready$", timeout=120)
    runner.touch(stop)
    assert again.wait(timeout=60) == 0, again.stderr
    lines = again.stdout.splitlines()
    assert lines[:2] == ["restart 1 before=2 after=1 restart=1 checkpoints=2 restarts=1",
                         "api 2 result 2 index 2 before=2 after=1 restart=1"], again.stdout


def _checkpoint_in_a_section(runner, hooks_prog, seconds, where):
    """The program opens a section of `seconds` (in the main thread, or with
    `thread` another thread running beside it) and `lazarus checkpoint` is
    asked inside it: (store, stop file, proc, the request's result, s it took)."""
    store, stop = runner.base / "store", runner.base / "stop"
    extra = ["thread"] if where == "thread" else []
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", hooks_prog, "disable", str(seconds), stop, *extra)
    proc.wait_for_output(r"^in 1$", timeout=120)
    t0 = time.monotonic()
    r = runner.lz("checkpoint", "-d", store, timeout=120)
    return store, stop, proc, r, time.monotonic() - t0


@pytest.mark.parametrize("where", ["main", "thread"])
def test_checkpoint_waits_for_a_section(runner, hooks_prog, where):
    """`lazarus checkpoint` asked during a 2 s section succeeds once the section
    has ended, and the checkpoint holds the program after it: restarted, it
    never ends that section again.  `main`: the request reaches the thread in
    the section (it waits there); `thread`: another thread takes it and
    waits before stopping any."""
    store, stop, proc, r, waited = _checkpoint_in_a_section(runner, hooks_prog, 2, where)
    assert r.rc == 0 and r.stdout.strip() == "1", str(r)
    assert "out 1" in proc.stdout and waited > 0.5, (waited, proc.stdout)
    entries = runner.list_json(store)
    assert entries[0]["pause_ms"] < 1000, entries   # the pause began once the section was over
    kill_program(proc, "api_hooks")
    again = runner.start_lz("restart", "-d", store)
    again.wait_for_output(r"^in 2$", timeout=120)
    runner.touch(stop)
    assert again.wait(timeout=60) == 0, again.stderr
    assert "out 1" not in again.stdout and again.stdout.startswith("in 2\n"), again.stdout


@pytest.mark.parametrize("where", ["main", "thread"])
def test_too_long_a_section_fails_the_checkpoint(runner, hooks_prog, where):
    """A section that sleeps on: the checkpoint fails after the stop timeout
    (10 s without progress) with one line naming the process and its
    section; nothing is stored, and the program goes on."""
    store, stop, proc, r, waited = _checkpoint_in_a_section(runner, hooks_prog, 40, where)
    assert r.rc != 0, str(r)
    lines = r.stderr_lines()
    assert len(lines) == 1 and "api_hooks" in lines[0] and "is in a lazarus_disable() section" in lines[0], str(r)
    assert re.search(r"process \d+ \(api_hooks\)", lines[0]), str(r)
    assert 9 < waited < 60, waited
    assert runner.indexes(store) == []
    assert proc.poll() is None, proc.stderr
    proc.kill()


def test_concurrent_checkpoints_from_two_threads(runner, hooks_prog):
    """Two threads call lazarus_checkpoint() three times each: every call
    gets a checkpoint of its own, taken after it was made."""
    store = runner.base / "store"
    r = runner.lz("run", "-d", store, "-i", "0", "-k", "10", "--", hooks_prog, "threads", "3", timeout=120)
    assert r.rc == 0, str(r)
    calls = re.findall(r"^thread (\d) call (\d) result (-?\d+) index (\d+)$", r.stdout, re.M)
    assert len(calls) == 6 and all(c[2] == "1" for c in calls), r.stdout
    idx = [int(c[3]) for c in calls]
    assert sorted(idx) == list(range(1, 7)), r.stdout
    for t in "12":
        mine = [int(c[3]) for c in calls if c[0] == t]
        assert mine == sorted(mine), r.stdout
    assert runner.indexes(store) == list(range(1, 7))


def test_strerror_names_the_reason(runner, hooks_prog):
    """The reason of a failed lazarus_checkpoint() is the line `lazarus`
    prints for it; a later success leaves it as it was."""
    store = runner.base / "store"
    r = runner.lz("run", "-d", store, "-i", "0", "--", hooks_prog, "error", timeout=120)
    assert r.rc == 0, str(r)
    m = re.search(r"^with socket -1 index (\d+) \[(.+)\]$", r.stdout, re.M)
    assert m and "socket" in m[2], r.stdout
    assert f"checkpoint {m[1]} failed: {m[2]}" in r.stderr, str(r)
    assert re.search(r"^without 1 index \d+ \[" + re.escape(m[2]) + r"\]$", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("before", [False, True], ids=["signal", "hooks-thread"])
def test_after_restart_hooks_run_before_the_threads_go_on(runner, hooks_prog, before):
    """An after-restart hook (0.3 s, then it sets a flag, as a program would
    reopen a connection) has run when the program's other threads take their
    first step after the restart: both the main thread and a worker see the
    flag set.  With a before-hook too, the checkpoint is taken on the hooks
    thread itself, which then runs the hook."""
    store, stop = runner.base / "store", runner.base / "stop"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", hooks_prog, "gate", stop, *(["before"] if before else []))
    proc.wait_for_output(r"^ready$", timeout=120)
    runner.checkpoint(store)
    kill_program(proc, "api_hooks")
    again = runner.start_lz("restart", "-d", store)
    again.wait_for_output(r"^step 0 restart 1 ", timeout=120)
    again.wait_for_output(r"^step 1 restart 1 ", timeout=60)
    runner.touch(stop)
    assert again.wait(timeout=60) == 0, again.stderr
    steps = sorted(line for line in again.stdout.splitlines() if line.startswith("step "))
    assert steps == ["step 0 restart 1 reopened 1", "step 1 restart 1 reopened 1"], again.stdout
    assert "did not finish" not in again.stderr, again.stderr


@pytest.mark.parametrize("mode", ["user"], indirect=True)  # the runtime's wait: the same for root
def test_after_restart_hook_that_waits_for_a_thread(runner, hooks_prog):
    """A hook that needs one of the program's threads to go on (as one needing
    a lock a thread held at the checkpoint): the threads go on after 10 s
    all the same, one warning says why, and the program finishes."""
    store, stop = runner.base / "store", runner.base / "stop"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", hooks_prog, "gate", stop, "stuck")
    proc.wait_for_output(r"^ready$", timeout=120)
    runner.checkpoint(store)
    kill_program(proc, "api_hooks")
    t0 = time.monotonic()
    again = runner.start_lz("restart", "-d", store)
    again.wait_for_output(r"^stuck hook done, worker seen 1$", timeout=60)
    assert 9 < time.monotonic() - t0 < 50
    runner.touch(stop)
    assert again.wait(timeout=60) == 0, again.stderr
    assert again.stderr.count("the after-restart hooks did not finish within 10 s") == 1, again.stderr
