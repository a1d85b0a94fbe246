"""The C API: lazarus_checkpoint() is a no-op without Lazarus, reports
CONTINUED with the index after a checkpoint, RESTARTED (same index, same
getpid(), same memory) after a restart, and ERROR when the checkpoint cannot
be taken (the program goes on)."""
import subprocess

from conftest import kill_program, tmp_entries
from test_restart_at import parse_steps


def test_inactive_without_lazarus(programs):
    cp = subprocess.run([str(programs.api_prog), "3", "1", "-"], capture_output=True, text=True,
                        timeout=60, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stderr
    steps = parse_steps(cp.stdout)
    assert [s[1] for s in steps] == ["inactive"] * 3, cp.stdout
    assert cp.stdout.endswith("waiting\n" + cp.stdout.splitlines()[-1] + "\n")


def test_continued_then_restarted(runner, programs):
    store = runner.base / "store"
    gofile = runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", programs.api_prog, "3", "8", gofile)
    proc.wait_for_output(r"^waiting$", timeout=120)
    first = parse_steps(proc.stdout)
    assert [s[1] for s in first] == ["continued"] * 3, f"{proc.stdout}\n{proc.stderr}"
    idx = [s[2] for s in first]
    assert idx == sorted(set(idx)) and idx[0] > 0, idx
    entries = runner.list_json(store)
    assert [int(e["index"]) for e in entries] == idx
    assert all(e["trigger"] == "api" for e in entries), entries
    pid = kill_program(proc, "api_prog")
    assert pid == first[-1][3]

    runner.touch(gofile)
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0, str(r)
    again = parse_steps(r.stdout)
    # resumes inside the last call, which now returns RESTARTED with the
    # index it was restored from, in a process with the same PID and memory
    assert again == [(3, "restarted", idx[-1], first[-1][3], first[-1][4])], str(r)
    assert r.stdout.splitlines()[-2:] == ["waiting", f"done digest {first[-1][4]}"], str(r)


def test_error_when_checkpoint_impossible(runner, programs):
    """With a socket open, the API call returns LAZARUS_ERROR and the program
    continues; the next call (socket closed) succeeds."""
    store = runner.base / "store"
    gofile = runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--",
                           programs.api_prog, "2", "1", gofile, "sock")
    proc.wait_for_output(r"^waiting$", timeout=120)
    steps = parse_steps(proc.stdout)
    assert [s[1] for s in steps] == ["error", "continued"], f"{proc.stdout}\n{proc.stderr}"
    assert runner.indexes(store) == [steps[1][2]]
    assert tmp_entries(store) == []
    runner.touch(gofile)
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("done digest "), proc.stdout
