"""Shared memory seen through several addresses, large reservations, madvise
flags, System V IPC and POSIX message queues (issue 17), each checkpointed,
SIGKILLed and restarted twice by a program of its own that checks itself
after every restart, and checked from outside (/proc/PID/smaps, ipcs-like
reads of /proc/sysvipc).  As root and as an ordinary user.

- programs/ipc_views.c: a ring buffer (one memfd mapped twice back to back),
  a shared anonymous mapping given a second view with mremap, an 8 GiB
  MAP_NORESERVE reservation with a few pages touched, mappings advised
  DONTDUMP, DONTFORK, WIPEONFORK, HUGEPAGE, NOHUGEPAGE, MERGEABLE,
  SEQUENTIAL, RANDOM: the views are one object again, the reservation maps
  back, and every VmFlag is back (read by the program and from outside).
"""
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from conftest import PROGRAMS_SRC, _compile, find_program, kill_program

DOWN = 1.0


@pytest.fixture(scope="module")
def progs(programs):
    return {n: _compile(n, programs.dir) for n in ("ipc_views",)}


def smaps_flags(pid: int) -> dict:
    """start address -> VmFlags of /proc/PID/smaps."""
    out, cur = {}, None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        m = re.match(r"^([0-9a-f]+)-[0-9a-f]+ ", line)
        if m:
            cur = int(m.group(1), 16)
        elif line.startswith("VmFlags:") and cur is not None:
            out[cur] = line.split()[1:]
    return out


def cycles(runner, argv, comm, n=2, outside=None):
    """Run argv (prints `ready N`, waits for base/trig.N), and n times:
    checkpoint, SIGKILL, restart, touch the trigger, wait for `check N ok`.
    `outside(pid, output)`, if given, looks at the restarted program from
    outside before it is let check itself.  Returns all the output."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", *argv, trig)
    out = ""
    for c in range(1, n + 1):
        proc.wait_for_output(rf"^ready {c}$", timeout=60)
        runner.checkpoint(store)
        kill_program(proc, comm)
        out += proc.stdout
        assert "FAIL" not in proc.stdout, out + proc.stderr
        time.sleep(DOWN)
        proc = runner.start_lz("restart", "-d", store)
        deadline = time.monotonic() + 30
        pid = None
        while pid is None and time.monotonic() < deadline:
            pid = find_program(proc.pid, comm)
            time.sleep(0.05)
        assert pid, proc.stderr
        time.sleep(0.3)
        if outside:
            outside(pid, out)
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, out + proc.stdout + proc.stderr
    out += proc.stdout
    assert re.search(r"^done$", out, re.M), out
    return out


@pytest.mark.parametrize("what", ["all", "noviews"])
def test_views_reservation_and_flags(what, runner, progs):
    """The ring's two views and the mremap'd second view are one object after
    each restart; the 8 GiB MAP_NORESERVE reservation maps back with its
    pages; every advised mapping shows its VmFlag in /proc/PID/smaps, seen
    from outside (before: the checkpoint was refused, "shared memory mapped
    twice over the same bytes"; without the views (`noviews`), a reservation
    larger than memory and swap could not be mapped back, "Cannot allocate
    memory", and the mappings lost mg, sr, rr)."""
    def outside(pid, out):
        flags = smaps_flags(pid)
        for name, addr, flag in re.findall(r"^adv (\w+) ([0-9a-f]+) (\w+)$", out, re.M):
            assert flag in flags.get(int(addr, 16), []), (name, flag, flags.get(int(addr, 16)))

    cycles(runner, [progs["ipc_views"], "2", what], "ipc_views", outside=outside)
