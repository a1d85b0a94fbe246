"""--json on the commands that report (docs/json.md): `checkpoint`, `diff`,
`gc`, and `run`/`restart` events as JSON lines on stderr or in `--log FILE`;
each parses and has the documented keys.  And the logs a batch user reads:
`restart` says in one line what it did without a terminal, `--quiet`
silences Lazarus' informational lines (not errors), `--log FILE` takes
Lazarus' own lines off the program's stderr."""
import json
import re
import time

import pytest

from conftest import kill_program

EVENT_KEYS = {"time", "event", "message"}
# docs/json.md: the members of each event besides time, event and message
EVENTS = {
    "started": {"pid", "command", "dir"},
    "checkpoint": {"index", "pause_ns", "bytes", "processes", "threads"},
    "checkpoint_failed": {"index", "reason"},
    "restarted": {"index", "taken", "files_rolled_back", "pid"},
    "exited": {"status"},
    "info": set(), "warning": set(), "error": set(),
}
TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
STAMPED_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z lazarus: ")


@pytest.fixture
def r(runner, programs):
    runner.programs = programs
    return runner


def events(text):
    """Every line a JSON event with the documented keys."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        e = json.loads(line)
        assert EVENT_KEYS <= e.keys() and TIME_RE.fullmatch(e["time"]), line
        assert e["event"] in EVENTS and EVENTS[e["event"]] <= e.keys(), line
        out.append(e)
    return out


def wait_for(what, cond, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.05)


def job_with_file(r, store, *opts):
    """A job that writes f.txt, prints `ready`, appends once `go` exists,
    then waits; returns (proc, file, go)."""
    f, go = r.base / "f.txt", r.base / "go"
    script = f"echo one > {f}; echo ready; while [ ! -e {go} ]; do sleep 0.05; done; echo two >> {f}; " \
             f"echo appended; while :; do sleep 1; done"
    proc = r.start_lz("run", "-d", store, "-i", "0", *opts, "--", "sh", "-c", script)
    proc.wait_for_output(r"^ready$", timeout=60)
    return proc, f, go


def test_checkpoint_diff_gc_json(r):
    store = r.base / "st"
    proc, f, go = job_with_file(r, store)
    res = r.lz("checkpoint", "-d", store, "--json", timeout=120)
    assert res.rc == 0, str(res)
    c = json.loads(res.stdout)
    assert set(c) == {"index", "time", "duration", "pause", "processes", "threads", "bytes"}, c
    assert c["index"] >= 1 and c["processes"] >= 1 and c["threads"] >= 1 and c["bytes"] > 0, c
    assert abs(c["time"] - time.time()) < 120 and 0 <= c["pause"] <= c["duration"] < 120, c
    assert [e["index"] for e in r.list_json(store)] == [c["index"]]
    r.touch(go)
    proc.wait_for_output(r"^appended$", timeout=60)
    kill_program(proc, "sh")
    res = r.lz("diff", "-d", store, "--json")
    assert res.rc == 0, str(res)
    d = json.loads(res.stdout)
    assert d == {"index": c["index"], "changes": [{"kind": "modified", "path": str(f)}]}, d
    plain = r.lz("diff", "-d", store)
    assert plain.stdout == f"modified {f}\n", str(plain)
    res = r.lz("gc", "-d", store, "--json")
    assert res.rc == 0, str(res)
    g = json.loads(res.stdout)
    assert set(g) == {"packs_removed", "bytes_removed", "bytes_punched", "journals_removed"}, g
    assert all(isinstance(v, int) and v >= 0 for v in g.values()), g


def test_run_restart_events(r):
    """run --json: started, checkpoint, exited as JSON lines on stderr;
    restart --json --log FILE: restarted (1 file rolled back), exited, in
    the file, and nothing of Lazarus' on stderr."""
    store = r.base / "st"
    proc, f, go = job_with_file(r, store, "--json")
    n = r.checkpoint(store)
    r.touch(go)
    proc.wait_for_output(r"^appended$", timeout=60)
    kill_program(proc, "sh")
    ev = events(proc.stderr)
    assert [e["event"] for e in ev] == ["started", "checkpoint", "exited"], proc.stderr
    assert ev[0]["command"].startswith("sh -c ") and ev[0]["dir"] == str(store), ev[0]
    assert ev[1]["index"] == n and ev[1]["processes"] >= 1, ev[1]
    assert ev[2]["status"] == 137 and ev[2]["signal"] == 9, ev[2]
    log = r.base / "restart.log"
    go.unlink()
    p = r.start_lz("restart", "-d", store, "--json", "--log", log)
    wait_for("restarted event", lambda: log.exists() and '"restarted"' in log.read_text())
    assert f.read_text() == "one\n"
    p.kill()
    ev = events(log.read_text())
    assert ev[0]["event"] == "restarted" and ev[0]["index"] == n and ev[0]["files_rolled_back"] == 1, ev
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", ev[0]["taken"]), ev[0]
    assert "lazarus" not in p.stderr, p.stderr


def test_restart_line_quiet_and_log(r):
    """Without a terminal restart says what it did in one line; --quiet
    silences it; --log FILE appends stamped lines, the program's stderr
    keeps none of Lazarus'; errors still print with --quiet."""
    store = r.base / "st"
    proc, f, go = job_with_file(r, store)
    n = r.checkpoint(store)
    kill_program(proc, "sh")
    assert proc.stderr.strip() == "", proc.stderr  # a plain run says nothing new
    p = r.start_lz("restart", "-d", store)
    wait_for("the restart line", lambda: "restarted" in p.stderr or p.poll() is not None)
    m = re.search(r"^lazarus: restarted from checkpoint (\d+) taken at (\S+): (\d+) files? rolled back, program resumed$",
                  p.stderr, re.M)
    assert m and int(m.group(1)) == n and m.group(3) == "0", p.stderr
    kill_program(p, "sh")
    q = r.start_lz("restart", "-d", store, "--quiet")
    wait_for("the restarted job", lambda: r.lz("checkpoint", "-d", store).rc == 0)
    kill_program(q, "sh")
    assert q.stderr.strip() == "", q.stderr
    log = r.base / "lz.log"
    lg = r.start_lz("restart", "-d", store, "--quiet", "--log", log)
    wait_for("the log line", lambda: log.exists() and "restarted from checkpoint" in log.read_text())
    m2 = r.checkpoint(store)
    kill_program(lg, "sh")
    lines = log.read_text().splitlines()
    assert all(STAMPED_RE.match(l) for l in lines), lines
    assert [l.split("lazarus: ", 1)[1].split(" ")[0] for l in lines] == ["restarted", "checkpoint", "program"], lines
    assert f"checkpoint {m2} taken" in lines[1] and "killed by signal 9" in lines[2], lines
    assert lg.stderr.strip() == "", lg.stderr
    # errors are never silenced
    res = r.lz("restart", "-d", r.base / "nowhere", "--quiet")
    assert res.rc == 240 and len(res.stderr_lines()) == 1, str(res)
