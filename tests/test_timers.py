"""POSIX timers (timer_create) checkpointed and restored with their ids and
state: `timers_posix` makes one of each notification kind (SIGEV_SIGNAL,
SIGEV_THREAD_ID at a worker thread, SIGEV_NONE, SIGEV_THREAD whose function
counts its calls in a thread of its own), periodic and one-shot, relative and
absolute, and deletes one (a gap); it is checkpointed, SIGKILLed and restarted
twice, seconds down each time, and checks from inside that the kernel lists
exactly its ids with their kinds, that every periodic timer goes on, that a
relative one did not count the downtime, that the absolute periodic one
counted the intervals missed as its overrun, that each one-shot fired once
and that a new timer gets the next id.  From outside, /proc/PID/timers is the
same before the kill and after the restart.  A forked child has no timers and
makes its own; the manifest holds what the kernel showed; a malformed record
is refused.

inotify, in `inotify_loop`, a libuv-style loop (one epoll over a timerfd, a
signalfd, an eventfd and an inotify descriptor watching the job's work
directory, a file in it and the test's trigger directory, with a gap in the
watch numbers): two checkpoint/SIGKILL/restart cycles, each trigger seen
through inotify after the restart, the loop's checks pass, the watches are
the same numbers and masks from outside; a watch whose directory was renamed
since it was added fails the checkpoint with one line; malformed watch
records are refused; one shared with a forked child is refused, one each in
a parent and its child comes back in each.  As root and as an ordinary user."""
import os
import re
import time
from pathlib import Path

import pytest

import lzformat
from conftest import (_compile, checkpoint_kill_restart, ckpt_path, comm_of, descendants, find_program, kill_program,
                      ns_pid, parent_child_restart, refuse_edited_manifest, trigger_cycles)

DOWN = 3.0  # seconds the job stays killed: three intervals of the absolute 1 s timer


@pytest.fixture(scope="module")
def progs(programs):
    return {"timers_posix": _compile("timers_posix", programs.dir, ("-lpthread",))}


def proc_timers(pid: int) -> list[tuple]:
    """/proc/PID/timers as (id, signal, notify kind, pid or tid, clock), sorted;
    the target's number is left out (a restart in a PID namespace has other
    host TIDs)."""
    text = Path(f"/proc/{pid}/timers").read_text()
    out = []
    for block in re.split(r"^ID: ", text, flags=re.M)[1:]:
        tid = int(block.split("\n")[0])
        sig = int(re.search(r"^signal: (\d+)/", block, re.M).group(1))
        how, to = re.search(r"^notify: (\w+)/(\w+)\.", block, re.M).groups()
        clock = int(re.search(r"^ClockID: (-?\d+)", block, re.M).group(1))
        out.append((tid, sig, how, to, clock))
    return sorted(out)


def _cycles(runner, prog):
    """timers_posix with a forked child through two cycles
    (conftest.trigger_cycles): a checkpoint a second after `ready N`, SIGKILL
    of the whole job, DOWN seconds down, restart, the trigger.  Returns all the output and the (before kill, after
    restart) /proc/PID/timers pairs."""
    seen, want = [], {}

    def before_kill(cy):
        main = find_program(cy.proc.pid, "timers_posix")
        want.update(nspid=ns_pid(main), timers=proc_timers(main))

    def after_restart(cy):
        deadline = time.monotonic() + 30
        while True:  # the main program (its PID as the job sees it), restored and running
            pid = next((p for p, _ in descendants(cy.proc.pid)
                        if ns_pid(p) == want["nspid"] and comm_of(p) == "timers_posix"), None)
            try:
                if pid and Path(f"/proc/{pid}/timers").read_text():
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and cy.proc.poll() is None, cy.proc.stdout + cy.proc.stderr
            time.sleep(0.05)
        seen.append((want["timers"], proc_timers(pid)))

    def after_trigger(cy):
        cy.proc.wait_for_output(rf"^child check {cy.n} ok$|^FAIL", timeout=60)

    out = trigger_cycles(runner, lambda trig: [prog, "2", trig, "fork"], settle=1.0, down=DOWN, expect=": 2 processes",
                         before_kill=before_kill, after_restart=after_restart, after_trigger=after_trigger)
    return out, seen


def test_posix_timers_restart(runner, progs):
    """Every kind of timer, and a child forked after the parent's timers run
    (it has none, makes its own: a SIGEV_THREAD one with the runtime's
    helper thread of its own, ids from 0); the job of two checkpointed,
    killed whole and restarted twice: each process's own checks pass, the
    kernel's list of the main program is the same from outside, the
    SIGEV_NONE timer's time left counts only the time the job was up, and
    the absolute periodic timer's overrun counts the seconds it was down.
    (A program alone, killed alone: test_ids_without_the_restore_prctl.)"""
    out, seen = _cycles(runner, progs["timers_posix"])
    assert out.count("child check") == 2, out
    for before, after in seen:
        assert before == after and len(after) == 7, (before, after)
        # A, E, F: signal to the process; B, D, H: to a thread; C: none
        assert sorted((t[2], t[3]) for t in after) == \
            [("none", "pid")] + [("signal", "pid")] * 3 + [("signal", "tid")] * 3, after
    assert re.search(r"^ids A=0 B=1 C=2 D=4 E=5 F=6 H=7 gap=8$", out, re.M), out
    lefts = [float(x) for x in re.findall(r"^c left ([\d.]+)$", out, re.M)]
    assert len(lefts) == 2 and all(x > 990 for x in lefts), out  # 1000 s less the time up, not the downtime
    overruns = [int(x) for x in re.findall(r"^f overrun (\d+)$", out, re.M)]
    assert len(overruns) == 2 and all(o >= DOWN - 1 for o in overruns), out


def _checkpointed(runner, progs):
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["timers_posix"], "1", runner.base / "trig")
    proc.wait_for_output(r"^ready 1$", timeout=60)
    idx = runner.checkpoint(store)
    kill_program(proc, "timers_posix")
    return store, idx


def test_manifest_holds_the_timers(runner, progs):
    """The manifest's timer records are what the program made: ids 0-7 but 3
    with their clocks, kinds and signals, the absolute flag, the worker's and
    the helper's thread among the image's threads, and the next id (9)."""
    store, idx = _checkpointed(runner, progs)
    m = lzformat.Manifest.load(ckpt_path(store, idx) / "manifest")
    tm = sorted((t for t in m.timers if t.kind == lzformat.TM_TIMER), key=lambda t: t.id)
    nxt = [t for t in m.timers if t.kind == lzformat.TM_NEXT]
    assert [t.id for t in tm] == [0, 1, 2, 4, 5, 6, 7] and len(nxt) == 1 and nxt[0].id == 9, m.timers
    assert [t.clockid for t in tm] == [1, 1, 7, 1, 1, 0, 1], tm
    assert [t.notify for t in tm] == [0, 4, 1, 4, 0, 0, 4], tm
    assert [t.flags for t in tm] == [0, 0, 0, 0, 0, lzformat.TMF_ABSTIME, 0], tm
    assert tm[5].value_ns > 10**18 and tm[5].interval_ns == 10**9, tm[5]  # a realtime expiry
    assert 0 < tm[2].value_ns <= 1000 * 10**9 and tm[2].interval_ns == 0, tm[2]
    assert tm[0].interval_ns == 5 * 10**7 and tm[3].signo == 32 and tm[3].value == 3, tm
    tids = {t.tid for t in m.threads}
    assert tm[1].tid in tids and tm[3].tid in tids and tm[3].tid == tm[6].tid != tm[1].tid, (tm, tids)


def test_ids_without_the_restore_prctl(runner, progs):
    """As on a kernel before 6.17 (no PR_TIMER_CREATE_RESTORE_IDS; the
    restorer told to do without): the timers are made in order and the ids
    between deleted, so every id comes back, the gap among them too; the
    next id is not kept (LIMITS.md): the program's check of a new timer's id
    says so, once the checks of the restored ones passed."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["timers_posix"], "1", trig)
    proc.wait_for_output(r"^ready 1$", timeout=60)
    runner.checkpoint(store)
    kill_program(proc, "timers_posix")
    runner.env["LAZARUS_TEST_NO_TIMER_IDS"] = "1"
    proc = runner.start_lz("restart", "-d", store)
    time.sleep(0.5)
    runner.touch(Path(f"{trig}.1"))
    proc.wait_for_output(r"^check 1 ok$|^FAIL", timeout=60)
    proc.wait(timeout=60)
    assert "c left" in proc.stdout and "FAIL a new timer got id 8, not 9" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("how", ["tid", "notify", "duplicate", "signal", "clock"])
def test_malformed_timer_record_refused(how, runner, progs):
    """A sealed manifest whose timer aims at a thread the image does not
    have, has an unknown notification, repeats an id, signals with no signal
    or is on a clock no timer can be on: the restart is refused with one
    line, and nothing runs."""
    store, idx = _checkpointed(runner, progs)

    def edit(m):
        tm = [t for t in m.timers if t.kind == lzformat.TM_TIMER]
        if how == "tid":
            m.set(next(t for t in tm if t.notify == 4), "tid", 999999)
        elif how == "notify":
            m.set(tm[0], "notify", 2)
        elif how == "signal":
            m.set(tm[0], "signo", 0)  # SIGEV_SIGNAL without a signal
        elif how == "clock":
            m.set(tm[0], "clockid", 4)  # CLOCK_MONOTONIC_RAW: no timer can be on it
        else:
            m.set(tm[1], "id", tm[0].id)

    refuse_edited_manifest(runner, store, idx, edit, "POSIX timer record.*malformed|malformed.*POSIX timer record")


# --------------------------------------------------------------------------
# inotify, in a libuv-style loop
# --------------------------------------------------------------------------
def inotify_watches(pid: int) -> list[tuple]:
    """(wd, mask) of every watch of every inotify descriptor of pid, from
    outside (/proc/PID/fdinfo); inodes left out (a rollback may make files anew)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        out += [(int(wd), mask) for wd, mask in re.findall(r"^inotify wd:(\d+) .*? mask:([0-9a-f]+) ", info, re.M)]
    return sorted(out)


@pytest.fixture(scope="module")
def loop_prog(programs):
    return _compile("inotify_loop", programs.dir)


def test_inotify_loop_restarts(runner, loop_prog):
    """epoll + timerfd + signalfd + eventfd + inotify: the loop watches its
    work directory (files made and deleted each tick), a file in it, and the
    directory of the test's triggers, with a gap in the watch numbers; two
    checkpoint/SIGKILL/restart cycles, each trigger seen through inotify after
    the restart, the loop's own checks pass (every file made reported on the
    right watch, a new watch gets the next number), and from outside the
    watches are the same numbers and masks before the kill and after the
    restart."""
    work = runner.mkdir("work")
    trigs = runner.mkdir("trigs")
    before = []

    def after_restart(cy):
        deadline = time.monotonic() + 30
        while (pid := find_program(cy.proc.pid, "inotify_loop")) is None or len(inotify_watches(pid)) < len(before):
            assert time.monotonic() < deadline and cy.proc.poll() is None, cy.proc.stdout + cy.proc.stderr
            time.sleep(0.05)
        after = inotify_watches(pid)
        assert before == after and [w for w, _ in after][:3] == [1, 3, 4], (before, after)

    out = trigger_cycles(runner, lambda trig: [loop_prog, "2", work, trigs], comm="inotify_loop", trig=trigs / "trig",
                         settle=0.5, down=1.0, after_restart=after_restart,
                         before_kill=lambda cy: before.__setitem__(
                             slice(None), inotify_watches(find_program(cy.proc.pid, "inotify_loop"))))
    assert re.search(r"^wds 1 2 3 4$", out, re.M), out


RENAMED = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
d = sys.argv[1]
os.mkdir(d + "/a")
assert libc.inotify_add_watch(fd, (d + "/a").encode(), 0x100) == 1
os.rename(d + "/a", d + "/b")
print("ready", flush=True)
while not os.path.exists(d + "/f1"):
    time.sleep(0.02)
libc.inotify_rm_watch(fd, 1)
assert libc.inotify_add_watch(fd, (d + "/b").encode(), 0x100) == 2
print("again", flush=True)
while not os.path.exists(d + "/f2"):
    time.sleep(0.02)
"""


def test_inotify_renamed_watch_refused(runner):
    """A watch whose directory was renamed since it was added: the
    checkpoint fails with one line naming the descriptor, the watch and the
    old path; the program runs on, and once it watches the new name again
    the checkpoint works."""
    script = runner.base / "prog.py"
    script.write_text(RENAMED)
    os.chmod(script, 0o644)
    work = runner.mkdir("work")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", script, work)
    proc.wait_for_output(r"^ready$", timeout=60)
    res = runner.lz("checkpoint", "-d", store)
    assert res.rc != 0 and res.stdout == "", str(res)
    assert re.search(rf"inotify descriptor \d+ watches \(wd 1\) {re.escape(str(work))}/a as it was when the watch was "
                     r"added, which has since been renamed or deleted", res.stderr), str(res)
    assert runner.indexes(store) == [] and proc.poll() is None, proc.stderr
    runner.touch(work / "f1")
    proc.wait_for_output(r"^again$", timeout=30)
    runner.checkpoint(store)
    runner.touch(work / "f2")
    assert proc.wait(timeout=60) == 0, proc.stderr


@pytest.mark.parametrize("how", ["relative", "wd"])
def test_malformed_inotify_watch_refused(how, runner, loop_prog):
    """A sealed manifest whose inotify watch names a relative path, or a wd
    not below the descriptor's next one: refused with one line."""
    work = runner.mkdir("work")
    trigs = runner.mkdir("trigs")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", loop_prog, "1", work, trigs)
    proc.wait_for_output(r"^ready 1$", timeout=60)
    idx = runner.checkpoint(store)
    kill_program(proc, "inotify_loop")

    def edit(m):
        w = next(e for e in m.events if e.kind == lzformat.EV_INWATCH)
        if how == "relative":
            m.set(w, "data", w.data + 1)  # the path without its leading slash
        else:
            m.set(w, "target", 1000)

    refuse_edited_manifest(runner, store, idx, edit,
                           "event descriptor record.*malformed|malformed.*event descriptor record")


SHARED_INOTIFY = """
import ctypes, os, select, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
wd = libc.inotify_add_watch(fd, sys.argv[1].encode(), 0x100)
pid = os.fork()
if pid == 0:
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.02)
    open(sys.argv[1] + "/new", "w").close()
    os._exit(0)
print("ready", wd, flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
ep = select.epoll()
ep.register(fd, select.EPOLLIN)
got = os.read(fd, 4096) if ep.poll(5) else b""
watches = [l for l in open(f"/proc/self/fdinfo/{fd}") if l.startswith("inotify wd:")]
_, st = os.waitpid(pid, 0)
if b"new" not in got or len(watches) != 1 or not watches[0].startswith(f"inotify wd:{wd} ") or st != 0:
    print("FAIL", got, watches, st, flush=True)
    sys.exit(1)
print("ok", flush=True)
"""


def test_inotify_shared_restored(runner):
    """An inotify descriptor a parent shares with its forked child:
    checkpointed, the whole job killed and restarted, it is one object with
    its one watch (same number): a file the child makes is read by the parent."""
    script = runner.base / "prog.py"
    script.write_text(SHARED_INOTIFY)
    os.chmod(script, 0o644)
    work = runner.mkdir("work")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "/usr/bin/python3", script, work, runner.base / "go")
    proc.wait_for_output(r"^ready 1$", timeout=60)
    proc, _ = checkpoint_kill_restart(runner, store, proc, expect="2 processes")
    time.sleep(0.3)
    runner.touch(runner.base / "go")
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    assert proc.stdout == "ok\n", proc.stdout


TREE_INOTIFY = """
import ctypes, os, select, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def own(d):
    fd = libc.inotify_init1(os.O_NONBLOCK)
    os.mkdir(d)
    assert libc.inotify_add_watch(fd, d.encode(), 0x100) == 1
    return fd
def check(fd, d, who):
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.02)
    open(d + "/new", "w").close()
    ep = select.epoll()
    ep.register(fd, select.EPOLLIN)
    if not ep.poll(5) or b"new" not in os.read(fd, 4096):
        print("FAIL", who, flush=True)
        os._exit(1)
    print("ok", who, flush=True)
pid = os.fork()
if pid == 0:
    check(own(sys.argv[1] + "/child"), sys.argv[1] + "/child", "child")
    os._exit(0)
fd = own(sys.argv[1] + "/parent")
time.sleep(0.5)
print("ready", flush=True)
check(fd, sys.argv[1] + "/parent", "parent")
_, st = os.waitpid(pid, 0)
sys.exit(0 if st == 0 else 1)
"""


def test_inotify_tree_each_with_its_own(runner):
    """A parent and its forked child, each with its own inotify watching a
    directory of the job: checkpointed whole, killed whole, restarted, and
    each is told of a file made in its directory after the restart."""
    parent_child_restart(runner, TREE_INOTIFY, runner.mkdir("work"))
