"""Sessions and process groups restored exactly: `sess_tree` makes a tree
as daemons and shells do -- a process that called setsid after forking a
child (which stays in the old session, below it), a session in a
grandchild with a group of its own, a group whose leader exited while a
member lives on, and a session whose leader exited (its member reparented
to the main program, a child subreaper).  Before each SIGKILL of the whole
job and after each restart, every process's parent, group and session are
read from outside (/proc/PID/status, as the job sees them) and must be the
same; each process also checks its own from inside.  Two cycles, as root and
as an ordinary user."""
import re
import time
from pathlib import Path

from conftest import _compile, comm_of, descendants, find_program, is_alive
from conftest import kill_job


def _field(status: str, name: str) -> int:
    m = re.search(rf"^{name}:\s*(.*)$", status, re.M)
    return int(m.group(1).split()[-1])


def _ids(sup_pid: int) -> list:
    """Sorted (pid, ppid, pgid, sid) of the job's sess_tree processes as the
    job sees them; the main program's own group and session (the launcher's
    or the restarter's) read as 'L'."""
    procs = {}
    for p, _ in descendants(sup_pid):
        if comm_of(p) != "sess_tree" or not is_alive(p):
            continue
        st = open(f"/proc/{p}/status").read()
        procs[p] = (_field(st, "NSpid"), _field(st, "PPid"), _field(st, "NSpgid"), _field(st, "NSsid"))
    host_to_job = {h: v[0] for h, v in procs.items()}
    main = find_program(sup_pid, "sess_tree")
    if main not in procs:
        return []
    lpg, lsid = procs[main][2], procs[main][3]
    out = []
    for h, (pid, ppid, pgid, sid) in procs.items():
        norm = lambda v, l: "L" if v == l and v != procs[main][0] else v  # noqa: E731
        out.append((pid, host_to_job.get(ppid, "outside"), norm(pgid, lpg), norm(sid, lsid)))
    return sorted(out, key=str)


def _wait_ids(sup_pid: int, n: int, timeout: float = 30) -> list:
    deadline = time.monotonic() + timeout
    while True:
        ids = _ids(sup_pid)
        if len(ids) == n or time.monotonic() > deadline:
            return ids
        time.sleep(0.1)


def test_sessions_and_groups_exactly(runner, programs):
    prog = _compile("sess_tree", programs.dir)
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", prog, "2", runner.base)
    out = ""
    for c in (1, 2):
        proc.wait_for_output(rf"^ready {c}$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, proc.stdout + proc.stderr
        before = _wait_ids(proc.pid, 8)
        assert len(before) == 8, before
        r = runner.lz("checkpoint", "-d", store, timeout=120)
        assert r.rc == 0, r
        kill_job(proc)
        out += proc.stdout
        proc = runner.start_lz("restart", "-d", store)
        after = _wait_ids(proc.pid, 8)
        assert after == before, (c, before, after, proc.stderr)
        assert "cannot" not in proc.stderr, proc.stderr
        runner.touch(Path(f"{runner.base}/trig.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, out + proc.stdout + proc.stderr
    assert "done" in proc.stdout
