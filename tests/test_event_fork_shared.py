"""Event-loop objects shared by processes of the job (inherited over fork,
as a prefork worker pool's): a parent and its forked child sharing an
eventfd, a timerfd, an epoll watching both and a signalfd are checkpointed, the whole job
SIGKILLed and restarted, twice; the program checks itself that each is still
ONE object (what the child reads from the counter the parent no longer
finds, the timer the child arms fires through the parent's epoll with the
watch's data), and from outside /proc shows one object in both processes
(kcmp: the same open file description; the same eventfd-id in fdinfo; the
same epoll watches).  As root and as an ordinary user."""
import ctypes
import os
import platform
import re
import time
from pathlib import Path

import pytest

from conftest import _compile, descendants, kill_tree, ns_pid, wait_gone

KCMP_FILE = 0
SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture(scope="module")
def prog(programs):
    return _compile("fork_events", programs.dir)


def _host_pids(sup: int, want: list[int]) -> list[int]:
    """The host PIDs of the job's processes whose own PIDs are `want`."""
    by_ns = {ns_pid(p): p for p, _ in descendants(sup)}
    return [by_ns[w] for w in want]


def _fdinfo(pid: int, fd: int) -> str:
    return Path(f"/proc/{pid}/fdinfo/{fd}").read_text()


def _one_object(parent: int, child: int, fds: list[int]) -> None:
    """From outside: each of fds is one open file description in both."""
    efd, _tfd, ep, sfd = fds
    for fd in fds:
        if SYS_KCMP is not None:
            r = _libc.syscall(SYS_KCMP, parent, child, KCMP_FILE, fd, fd)
            assert r == 0, f"descriptor {fd}: kcmp says two objects ({r}, errno {ctypes.get_errno()})"
    ids = [re.search(r"^eventfd-id:\s*(\d+)", _fdinfo(p, efd), re.M) for p in (parent, child)]
    if all(ids):
        assert ids[0].group(1) == ids[1].group(1), ids
    watches = [re.findall(r"^tfd:.*$", _fdinfo(p, ep), re.M) for p in (parent, child)]
    assert len(watches[0]) == 2 and watches[0] == watches[1], watches
    masks = [re.search(r"^sigmask:\s*(\w+)", _fdinfo(p, sfd), re.M).group(1) for p in (parent, child)]
    assert masks[0] == masks[1] == "0000000000000200", masks  # SIGUSR1


def test_fork_shared_event_objects(runner, prog):
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", prog, "2", trig)
    m = proc.wait_for_output(r"^pids (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$", timeout=60)
    own = [int(m.group(1)), int(m.group(2))]
    fds = [int(m.group(i)) for i in (3, 4, 5, 6)]
    out = ""
    for c in (1, 2):
        proc.wait_for_output(rf"^ready {c}$", timeout=60)
        time.sleep(0.5)
        runner.checkpoint(store)
        pids = kill_tree(proc.pid)
        proc.wait(timeout=30)
        wait_gone(pids)
        out += proc.stdout
        assert "FAIL" not in proc.stdout, out + proc.stderr
        time.sleep(1.0)
        proc = runner.start_lz("restart", "-d", store)
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        proc.wait_for_output(rf"^child {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
        # both run on, restored: from outside, one object each in both processes
        host = _host_pids(proc.pid, own)
        _one_object(host[0], host[1], fds)
    runner.touch(Path(f"{trig}.3"))
    assert proc.wait(timeout=60) == 0, out + proc.stdout + proc.stderr
    out += proc.stdout
    assert re.search(r"^done$", out, re.M), out
    assert out.count("child 1 ok") == 1 and out.count("child 2 ok") == 1, out
