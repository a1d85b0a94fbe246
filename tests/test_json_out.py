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

from conftest import REPO, RUN_LINE_RE, kill_program

EVENT_KEYS = {"time", "event", "message"}
# docs/json.md: the members of each event besides time, event and message
EVENTS = {
    "started": {"pid", "command", "dir"},
    "checkpoint": {"index", "pause_ns", "bytes", "processes", "threads"},
    "checkpoint_failed": {"index", "reason"},
    "restarted": {"index", "taken", "files_rolled_back", "pid"},
    "exited": {"status", "checkpoints"},
    "info": set(), "warning": set(), "error": set(),
}
# include/lazarus.h: the version every --json document and the first event line carry
VERSION = ".".join(re.search(rf"#define LAZARUS_VERSION_{p} (\d+)", (REPO / "include" / "lazarus.h").read_text()).group(1)
                   for p in ("MAJOR", "MINOR", "PATCH"))
TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
STAMPED_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z lazarus: ")


@pytest.fixture
def r(runner, programs):
    runner.programs = programs
    return runner


def events(text):
    """Every line a JSON event with the documented keys; the first one says
    which lazarus wrote them."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        e = json.loads(line)
        assert EVENT_KEYS <= e.keys() and TIME_RE.fullmatch(e["time"]), line
        assert e["event"] in EVENTS and EVENTS[e["event"]] <= e.keys(), line
        out.append(e)
    assert out and out[0].get("lazarus_version") == VERSION, text
    return out


def versioned(doc, keys):
    """A --json object: its documented keys and the version, nothing else."""
    assert set(doc) == set(keys) | {"lazarus_version"} and doc["lazarus_version"] == VERSION, doc
    return doc


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
    versioned(c, {"index", "time", "duration", "pause", "processes", "threads", "bytes"})
    assert c["index"] >= 1 and c["processes"] >= 1 and c["threads"] >= 1 and c["bytes"] > 0, c
    assert abs(c["time"] - time.time()) < 120 and 0 <= c["pause"] <= c["duration"] < 120, c
    assert [e["index"] for e in r.list_json(store)] == [c["index"]]
    r.touch(go)
    proc.wait_for_output(r"^appended$", timeout=60)
    kill_program(proc, "sh")
    res = r.lz("diff", "-d", store, "--json")
    assert res.rc == 0, str(res)
    d = json.loads(res.stdout)
    versioned(d, {"index", "changes"})
    assert d["index"] == c["index"] and d["changes"] == [{"kind": "modified", "path": str(f)}], d
    plain = r.lz("diff", "-d", store)
    assert plain.stdout == f"modified {f}\n", str(plain)
    res = r.lz("gc", "-d", store, "--json")
    assert res.rc == 0, str(res)
    g = json.loads(res.stdout)
    versioned(g, {"packs_removed", "bytes_removed", "bytes_punched", "journals_removed"})
    assert all(isinstance(v, int) and v >= 0 for k, v in g.items() if k != "lazarus_version"), g
    # the documents that are arrays: each object carries the version
    for cmd in ("list", "verify"):
        res = r.lz(cmd, "-d", store, "--json")
        assert res.rc == 0, str(res)
        arr = json.loads(res.stdout)
        assert arr and all(e.get("lazarus_version") == VERSION for e in arr), arr
    res = r.lz("show", "-d", store, "--json", "tree")
    assert res.rc == 0 and json.loads(res.stdout)["lazarus_version"] == VERSION, str(res)
    # verify's pieces: their documented keys, intact; then one damaged: still a document, exit 244
    res = r.lz("verify", "-d", store, "--json")
    pieces = [versioned(e, {"index", "piece", "intact", "error"}) for e in json.loads(res.stdout)]
    assert all(e["intact"] is True and e["error"] is None for e in pieces), pieces
    manifest = next(p for p in store.rglob("manifest") if not p.parent.name.startswith("tmp"))
    data = bytearray(manifest.read_bytes())
    data[len(data) // 2] ^= 0x40
    manifest.write_bytes(data)
    res = r.lz("verify", "-d", store, "--json")
    assert res.rc == 244, str(res)
    pieces = [versioned(e, {"index", "piece", "intact", "error"}) for e in json.loads(res.stdout)]
    bad = [e for e in pieces if not e["intact"]]
    assert bad and all(isinstance(e["error"], str) and e["error"] for e in bad), pieces


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
    assert ev[2]["status"] == 137 and ev[2]["signal"] == 9 and ev[2]["checkpoints"] == 1, ev[2]
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
    # a plain run says where it went and how it ended, nothing else
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and re.fullmatch(rf"lazarus: job started \(pid \d+\), checkpoints on request in {re.escape(str(store))}",
                                            lines[0]), proc.stderr
    assert lines[1] == "lazarus: program killed by signal 9 (exit status 137) after 1 checkpoint", proc.stderr
    assert all(RUN_LINE_RE.match(l) for l in lines), lines  # what tests that drop them match
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


def test_run_lines_without_a_terminal(r):
    """run says in one line where it went and in one how it ended, around
    the program's own stderr (untouched, in its order); --quiet silences
    both; --json has them as the started and exited events."""
    store = r.base / "st"
    go = r.base / "go"
    script = f"echo mine >&2; echo ready; while [ ! -e {go} ]; do sleep 0.05; done; echo also mine >&2; exit 3"
    proc = r.start_lz("run", "-d", store, "-i", "3600", "--", "sh", "-c", script)
    proc.wait_for_output(r"^ready$", timeout=60)
    r.checkpoint(store)
    r.checkpoint(store)
    r.touch(go)
    assert proc.wait(timeout=60) == 3, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 4, proc.stderr
    assert re.fullmatch(rf"lazarus: job started \(pid \d+\), checkpoints every 3600 s in {re.escape(str(store))}", lines[0]), lines
    assert lines[1:] == ["mine", "also mine", "lazarus: program exited with status 3 after 2 checkpoints"], lines
    q = r.lz("run", "-d", r.base / "q", "--quiet", "--", "sh", "-c", "echo mine >&2; exit 4")
    assert q.rc == 4 and q.stderr == "mine\n", str(q)
    j = r.lz("run", "-d", r.base / "j", "--json", "--", "sh", "-c", "echo mine >&2; exit 5")
    assert j.rc == 5, str(j)
    own = [l for l in j.stderr.splitlines() if l != "mine"]
    ev = events("\n".join(own))
    assert [e["event"] for e in ev] == ["started", "exited"] and "mine" in j.stderr.splitlines(), j.stderr
    assert ev[0]["interval"] == 600 and ev[1]["status"] == 5 and ev[1]["checkpoints"] == 0, ev


def test_restart_counts_files_rolled_back(r):
    """The restart line's count is what `diff` lists: a job that changed 3
    files since the checkpoint rolls back 3, one that changed none 0."""
    store = r.base / "st"
    a, b, c, go = (r.base / n for n in ("a.txt", "b.txt", "c.txt", "go"))
    script = (f"echo a > {a}; echo b > {b}; echo ready; while [ ! -e {go} ]; do sleep 0.05; done; "
              f"echo more >> {a}; rm {b}; echo c > {c}; echo changed; while :; do sleep 1; done")
    proc = r.start_lz("run", "-d", store, "-i", "0", "--", "sh", "-c", script)
    proc.wait_for_output(r"^ready$", timeout=60)
    n = r.checkpoint(store)
    r.touch(go)
    proc.wait_for_output(r"^changed$", timeout=60)
    kill_program(proc, "sh")
    go.unlink()
    d = r.lz("diff", "-d", store)
    assert d.rc == 0 and len(d.stdout.splitlines()) == 3, str(d)
    p = r.start_lz("restart", "-d", store, "--json")
    wait_for("the restarted event", lambda: '"restarted"' in p.stderr or p.poll() is not None)
    ev = [e for e in events(p.stderr) if e["event"] == "restarted"]
    assert ev and ev[0]["index"] == n and ev[0]["files_rolled_back"] == 3, p.stderr
    assert "3 files rolled back" in ev[0]["message"], ev
    assert a.read_text() == "a\n" and b.read_text() == "b\n" and not c.exists()
    # nothing changed since: 0 (a checkpoint of the restarted job, killed at once)
    m = r.checkpoint(store)
    kill_program(p, "sh")
    q = r.start_lz("restart", "-d", store)
    wait_for("the restart line", lambda: "rolled back" in q.stderr or q.poll() is not None)
    assert re.search(rf"^lazarus: restarted from checkpoint {m} taken at \S+: 0 files rolled back, program resumed$",
                     q.stderr, re.M), q.stderr
    kill_program(q, "sh")
