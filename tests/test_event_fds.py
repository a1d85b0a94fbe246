"""Event-loop descriptors (eventfd, timerfd, signalfd, epoll) checkpointed
with their state and restored with it: a libuv-style C loop and an asyncio
program, each checkpointed, SIGKILLed and restarted twice after seconds down,
check from inside that every object is as it was (counter, semaphore and
non-blocking flags, the time left of a relative timer, the expirations an
absolute timer owes for the downtime, an unread expiration, a signal sent
after the restart through the signalfd, the epoll's ready set with each
watch's data); the manifest holds what fdinfo showed; a malformed record is
refused at restart; an epoll watching a descriptor closed since (also in a
child it shares the epoll with) fails the checkpoint with one line (objects
shared by processes of the job: test_event_fork_shared.py).
As root and as an ordinary user."""
import os
import re
import shutil
import time

import pytest

import lzformat
from conftest import (PROGRAMS_SRC, _compile, ckpt_path, parent_child_restart, kill_program, refuse_edited_manifest,
                      refused_until_let_go, trigger_cycles)

DOWN = 3.0  # seconds the job stays killed: longer than the relative timer has left


@pytest.fixture(scope="module")
def progs(programs):
    py = programs.dir / "py_asyncio_loop.py"
    shutil.copy(PROGRAMS_SRC / "py_asyncio_loop.py", py)
    os.chmod(py, 0o644)
    return {"event_loop": _compile("event_loop", programs.dir), "py_asyncio_loop": py}


def _cycles(runner, argv, comm, up=None):
    """Two cycles (conftest.trigger_cycles): a checkpoint a second after
    `ready N`, SIGKILL, DOWN seconds down, restart, the trigger.  `up`, if
    given, gets per cycle the seconds from `ready N` to the first line the
    check prints, the downtime taken off."""
    def measure(cy):
        cy.proc.wait_for_output(r"^t5 ticks", timeout=60)
        up.append(time.monotonic() - cy.t_ready - (cy.t_up - cy.t_down))

    return trigger_cycles(runner, argv, comm=comm, settle=1.0, down=DOWN,
                          after_restart=lambda cy: time.sleep(0.3), after_trigger=measure if up is not None else None)


def test_event_loop_restarts(runner, progs):
    """The C loop: both checks pass after each restart; the 3 s relative
    timer still had time left (the downtime was not counted) and the
    absolute realtime timer counted the expirations of the downtime, the
    one-shot absolute one due during the downtime fired once, a relative
    periodic one never read counted the time up, not the downtime."""
    up = []
    out = _cycles(runner, [progs["event_loop"], "2"], "event_loop", up=up)
    # the 0.2 s periodic timer counted the time the job was up, not the downtime
    t5 = [int(x) for x in re.findall(r"^t5 ticks (\d+)$", out, re.M)]
    assert len(t5) == 2 and all(1 <= n <= u / 0.2 + 3 for n, u in zip(t5, up)), (t5, up, out)
    lefts = [float(x) for x in re.findall(r"^t1 left ([\d.]+)$", out, re.M)]
    assert len(lefts) == 2 and all(x > 0.5 for x in lefts), out
    ticks = [int(x) for x in re.findall(r"^t2 ticks (\d+)$", out, re.M)]
    assert ticks and ticks[0] >= 2, out
    assert out.count("t4 fired") == 1, out


def test_asyncio_loop_restarts(runner, progs):
    """asyncio (epoll, its self-pipe, an echo over a socket pair, call_later,
    call_soon, an eventfd reader) goes on across two restarts."""
    _cycles(runner, ["/usr/bin/python3", progs["py_asyncio_loop"], "2"], "python3")


def _checkpointed(runner, progs):
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["event_loop"], "1", runner.base / "trig")
    proc.wait_for_output(r"^ready 1$", timeout=60)
    idx = runner.checkpoint(store)
    return store, proc, idx


def test_manifest_holds_the_state(runner, progs):
    """The manifest's event records are what the program made: the counter
    above 32 bits, the semaphore flag, the signal mask, the clocks and the
    absolute flag, the unread tick, five watches with their data and an
    epoll watching the epoll."""
    store, proc, idx = _checkpointed(runner, progs)
    kill_program(proc, "event_loop")
    m = lzformat.Manifest.load(ckpt_path(store, idx) / "manifest")
    ev = m.events
    kinds = [e.kind for e in ev]
    assert kinds.count(lzformat.EV_EVENTFD) == 2 and kinds.count(lzformat.EV_TIMERFD) == 5, ev
    efd = sorted((e for e in ev if e.kind == lzformat.EV_EVENTFD), key=lambda e: e.fd)
    assert (efd[0].count, efd[0].flags) == (123456789012, 0) and (efd[1].count, efd[1].flags) == (3, 1), efd
    sig = [e for e in ev if e.kind == lzformat.EV_SIGNALFD]
    assert len(sig) == 1 and sig[0].mask == (1 << 9) | (1 << 11), sig  # SIGUSR1 10, SIGUSR2 12
    tfd = sorted((e for e in ev if e.kind == lzformat.EV_TIMERFD), key=lambda e: e.fd)
    assert [t.clockid for t in tfd] == [1, 0, 0, 1, 1] and tfd[1].flags & 1 and tfd[1].interval_ns == 10**9, tfd
    assert tfd[2].flags & 1 and tfd[2].interval_ns == 0 and tfd[2].value_ns > 10**18, tfd  # absolute, realtime
    assert tfd[3].count == 1 and tfd[3].value_ns == 0, tfd
    assert tfd[4].interval_ns == 2 * 10**8 and 0 < tfd[4].value_ns <= 2 * 10**8, tfd
    assert 0 < tfd[0].value_ns <= 3 * 10**9, tfd
    watches = {e.data for e in ev if e.kind == lzformat.EV_WATCH}
    assert watches == {0xA1, 0xB2, 0x51, 0x71, 0x50C, 0xE2}, ev
    fds = {f.fd: f for f in m.fds}
    assert all(fds[e.fd].kind == lzformat.FD_EVENT for e in ev), m.fds


@pytest.mark.parametrize("how", ["kind", "target", "nowatched"])
def test_malformed_event_record_refused(how, runner, progs):
    """A sealed manifest whose event record has an unknown kind, a watch of
    a descriptor not in the table, or an event descriptor without its record:
    the restart is refused with one line, and nothing runs."""
    store, proc, idx = _checkpointed(runner, progs)
    kill_program(proc, "event_loop")

    def edit(m):
        ev = m.events
        if how == "kind":
            m.set(ev[0], "kind", 99)
        elif how == "target":
            m.set(next(e for e in ev if e.kind == lzformat.EV_WATCH), "target", 999)
        else:
            m.set(next(e for e in ev if e.kind == lzformat.EV_EVENTFD), "fd", 998)

    refuse_edited_manifest(runner, store, idx, edit)


SHARED = """
import os, select, sys, time
e = os.eventfd(0)
ep = select.epoll()
ep.register(e, select.EPOLLIN)
pid = os.fork()
if pid == 0:
    os.close(e)
    time.sleep(600)
    os._exit(0)
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
os.kill(pid, 9)
os.waitpid(pid, 0)
print("closed", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
"""

CLOSED = """
import os, select, sys, time
e = os.eventfd(0)
ep = select.epoll()
ep.register(e, select.EPOLLIN)
d = os.dup(e)
os.close(e)
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
ep.close()
os.close(d)
print("closed", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
"""

REFUSED = {
    "shared": (SHARED, r"epoll descriptor \d+ watches descriptor \d+, which the program has since closed"),
    "closed": (CLOSED, r"epoll descriptor \d+ watches descriptor \d+, which the program has since closed"),
}


@pytest.mark.parametrize("kind", list(REFUSED))
def test_refused_clearly(kind, runner):
    """An epoll shared by a parent and its child that closed a descriptor
    the epoll watches (the child's table no longer names the watched file),
    an epoll watching a descriptor since closed (its file kept by a dup): the checkpoint fails
    with one line saying so, nothing is left behind, the program runs on, and
    checkpoints work once it let go."""
    src, want = REFUSED[kind]
    script = runner.base / "prog.py"
    script.write_text(src)
    os.chmod(script, 0o644)
    store = runner.base / "store"
    f1, f2 = runner.base / "f1", runner.base / "f2"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", script, f1, f2)
    proc.wait_for_output(r"^ready$", timeout=60)
    # (refused by the child: the parent's writer began its part before the supervisor heard of it)
    refused_until_let_go(runner, store, proc, want, f1, f2, lines=2)


TREE = """
import os, select, sys, time
def own(tag):
    e = os.eventfd(0, os.EFD_NONBLOCK)
    os.eventfd_write(e, tag)
    ep = select.epoll()
    ep.register(e, select.EPOLLIN)
    return e, ep
def check(e, ep, tag, who):
    got = ep.poll(1)
    if got != [(e, select.EPOLLIN)] or os.eventfd_read(e) != tag:
        print("FAIL", who, got, flush=True)
        os._exit(1)
    print("ok", who, flush=True)
pid = os.fork()
if pid == 0:
    e, ep = own(7)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    check(e, ep, 7, "child")
    os._exit(0)
e, ep = own(5)
time.sleep(0.5)
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
check(e, ep, 5, "parent")
_, st = os.waitpid(pid, 0)
sys.exit(0 if st == 0 else 1)
"""


def test_tree_each_with_its_own(runner):
    """A parent and its forked child, each with its own eventfd and epoll:
    the job is checkpointed whole, killed whole, restarted, and each finds its
    counter and its epoll's report."""
    parent_child_restart(runner, TREE)
