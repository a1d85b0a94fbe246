"""Shared memory seen through several addresses, large reservations, madvise
flags, System V IPC and POSIX message queues (issue 17), each checkpointed,
SIGKILLed and restarted twice by a program of its own that checks itself
after every restart, and checked from outside (/proc/PID/smaps, ipcs-like
reads of /proc/sysvipc).  As root and as an ordinary user.

- programs/ipc_views.c: a ring buffer (one memfd mapped twice back to back),
  a shared anonymous mapping given a second view with mremap, an 8 GiB
  MAP_NORESERVE reservation with a few pages touched, mappings advised
  DONTDUMP, DONTFORK, WIPEONFORK, HUGEPAGE, NOHUGEPAGE, MERGEABLE,
  SEQUENTIAL, RANDOM: the views are one object again, within the process
  and with a forked child that holds them too, the reservation maps back,
  and every VmFlag is back (read by the program and from outside).
- programs/ipc_sysv.c: a producer and its forked consumer over a System V
  message queue (numbered messages of three types) and a ring in a System V
  segment guarded by a semaphore set, the segment attached twice in each; a
  segment filled and detached; a keyed queue; a POSIX message queue with
  messages of two priorities: after each restart nothing is lost or seen
  twice, the semaphores and attributes are as they were, shmdt works, and
  from outside /proc/sysvipc shows the same ids with their attachments and
  messages.  The objects the killed job left are taken over; removed after
  the kill, they are made again with their ids by root, and an ordinary
  user's restart is refused with one line, changing nothing.
"""
import os
import re
import time
from pathlib import Path

import ctypes
import subprocess

import pytest

from conftest import _compile, comm_of, descendants, kill_program, refuse_edited_manifest, snapshot, trigger_cycles

DOWN = 1.0


@pytest.fixture(scope="module")
def progs(programs):
    return {n: _compile(n, programs.dir) for n in ("ipc_views", "ipc_sysv", "ipc_refuse")}


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


def cycles(runner, argv, comm, n=2, outside=None, log=None, down=None):
    """n cycles (conftest.trigger_cycles): a checkpoint at `ready N`,
    SIGKILL, DOWN seconds down and `down(N)`, restart; `outside(pid,
    output)`, if given, looks at the restarted program from outside before
    it is let check itself; `log` gets every run's Proc.  Returns all the
    output."""
    def after_restart(cy):
        if outside:  # once the restorers are done (several processes: up to a few seconds)
            for i in range(150):
                named = [(d, p) for p, d in descendants(cy.proc.pid) if comm_of(p) == comm[:15]]
                try:
                    assert named, cy.proc.stderr
                    outside(min(named)[1], cy.out)  # the topmost: the main program
                    break
                except AssertionError:
                    if i == 149:
                        raise
                    time.sleep(0.1)

    return trigger_cycles(runner, argv, comm=comm, cycles=n, down=DOWN, after_restart=after_restart,
                          while_down=(lambda cy: down(cy.n)) if down else None,
                          started=log.append if log is not None else None)


@pytest.mark.parametrize("what", ["all", "noviews"])
def test_views_reservation_and_flags(what, runner, progs):
    """The ring's two views and the mremap'd second view are one object after
    each restart; the 8 GiB MAP_NORESERVE reservation maps back with its
    pages; every advised mapping shows its VmFlag in /proc/PID/smaps, seen
    from outside (before: the checkpoint was refused, "shared memory mapped
    twice over the same bytes"; without the views (`noviews`), a reservation
    larger than memory and swap could not be mapped back, "Cannot allocate
    memory", and the mappings lost mg, sr, rr); /proc/PID/exe names the
    program (before: lazarus-restore, as root too: the kernel refused
    PR_SET_MM_EXE_FILE without CAP_SYS_RESOURCE)."""
    def outside(pid, out):
        # /proc/PID/exe names the program again, also after an ordinary user's restart
        assert os.readlink(f"/proc/{pid}/exe") == str(progs["ipc_views"])
        flags = smaps_flags(pid)
        for name, addr, flag in re.findall(r"^adv (\w+) ([0-9a-f]+) (\w+)$", out, re.M):
            assert flag in flags.get(int(addr, 16), []), (name, flag, flags.get(int(addr, 16)))

    cycles(runner, [progs["ipc_views"], "2", what], "ipc_views", outside=outside)


def sysvipc(kind: str) -> dict:
    """id -> the row of /proc/sysvipc/KIND (shm, sem, msg) as a dict."""
    lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
    head = lines[0].split()
    rows = (dict(zip(head, ln.split())) for ln in lines[1:])
    return {int(r["shmid" if kind == "shm" else "semid" if kind == "sem" else "msqid"]): r for r in rows}


def ids_of(out: str) -> dict:
    m = re.search(r"^ids shm (\d+) sem (\d+) msg (\d+) ack (\d+) key (\d+) lone (\d+) mq (\S+)$", out, re.M)
    assert m, out
    return {"shm": int(m[1]), "sem": int(m[2]), "msg": int(m[3]), "ack": int(m[4]), "key": int(m[5]), "lone": int(m[6]),
            "mq": m[7]}


def remove_all(ids: dict) -> None:
    """What the program made, removed (as root: the test's own cleanup)."""
    for flag, key in (("-m", "shm"), ("-m", "lone"), ("-s", "sem"), ("-q", "msg"), ("-q", "ack"), ("-q", "key")):
        subprocess.run(["ipcrm", flag, str(ids[key])], capture_output=True)
    rt = ctypes.CDLL("libc.so.6", use_errno=True)
    rt.mq_unlink(ids["mq"].encode())


def leave_nothing(procs) -> None:
    """The objects of a run that failed, removed (a killed job leaves them)."""
    for p in procs:
        try:
            p.wait_for_output(r"^ids ", timeout=5)
        except AssertionError:
            continue
        remove_all(ids_of(p.stdout))


def test_sysv_and_mqueue_users(runner, progs):
    """Two checkpoint/SIGKILL/restart cycles of the producer and consumer:
    each checks itself; from outside, the ring segment has its id and four
    attachments (two per process), the queue its 40 messages, the semaphore
    set its id.  Before: the message queue descriptor was lost at the restart
    (Bad file descriptor), the segment's attachments were plain memory
    (shmdt: EINVAL) and the set and queues kept what the killed job left."""
    seen = {}

    def outside(pid, out):
        ids = seen.setdefault("ids", ids_of(out))
        shm = sysvipc("shm")
        assert ids["shm"] in shm and int(shm[ids["shm"]]["nattch"]) == 4, shm.get(ids["shm"])
        assert ids["lone"] in shm and int(shm[ids["lone"]]["nattch"]) == 0, shm.get(ids["lone"])
        msg = sysvipc("msg")
        assert int(msg[ids["msg"]]["qnum"]) == 40, msg.get(ids["msg"])
        assert ids["sem"] in sysvipc("sem")

    log = []
    try:
        out = cycles(runner, [progs["ipc_sysv"], "2"], "ipc_sysv", outside=outside, log=log)
    except BaseException:
        leave_nothing(log)
        raise
    ids = ids_of(out)
    # the program removed every object it made: nothing leaked
    assert ids["shm"] not in sysvipc("shm") and ids["sem"] not in sysvipc("sem") and ids["msg"] not in sysvipc("msg")


def test_objects_gone_after_the_kill(runner, progs):
    """The job's objects removed after it was killed (a reboot, ipcrm): root
    makes each again with its id and state, and the program goes on; an
    ordinary user cannot choose ids, so its restart is refused with one line
    naming the object, and nothing was changed."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["ipc_sysv"], "1", trig)
    try:
        proc.wait_for_output(r"^ready 1$", timeout=60)
        runner.checkpoint(store)
        kill_program(proc, "ipc_sysv")
        ids = ids_of(proc.stdout)
        remove_all(ids)
        _gone_restart(runner, store, trig, ids)
    except BaseException:
        leave_nothing([proc])
        raise


def _gone_restart(runner, store, trig, ids):
    if runner.mode == "user":
        before = snapshot(store)
        r = runner.lz("restart", "-d", store, timeout=60)
        assert r.rc != 0 and len(r.stderr.strip().splitlines()) == 1, str(r)
        assert "only root can make one again with the same id" in r.stderr and "nothing was changed" in r.stderr, str(r)
        assert snapshot(store) == before
        return
    proc = runner.start_lz("restart", "-d", store)
    time.sleep(1.0)
    assert ids["shm"] in sysvipc("shm") and ids["msg"] in sysvipc("msg"), proc.stderr
    runner.touch(Path(f"{trig}.1"))
    assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
    assert "check 1 ok" in proc.stdout and "done" in proc.stdout, proc.stdout


@pytest.mark.parametrize("how", ["kind", "length", "queue"])
def test_malformed_ipc_record_refused(how, runner, progs):
    """A sealed manifest whose IPC record has an unknown kind, bytes past the
    section's end, or a message queue descriptor naming no queue of the
    section: the restart is refused with one line, changing nothing."""
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["ipc_sysv"], "1", runner.base / "trig")
    try:
        proc.wait_for_output(r"^ready 1$", timeout=60)
        idx = runner.checkpoint(store)
        kill_program(proc, "ipc_sysv")

        def edit(m):
            recs = m.ipc
            # 3 segments, a set, 3 queues, a POSIX one
            assert sorted(r.kind for r in recs) == [1, 1, 1, 2, 3, 3, 3, 4], recs
            if how == "kind":
                m.set(recs[0], "kind", 99)
            elif how == "length":
                shm = next(r for r in recs if r.kind == 1)
                m.set(shm, "length", shm.length + 4096)
            else:
                fd = next(f for f in m.fds if f.kind == 15)
                m.set(fd, "path", 0)

        refuse_edited_manifest(runner, store, idx, edit)
    finally:
        leave_nothing([proc])  # the refused restart left the killed job's objects


def test_outside_segment_left_alone(runner, progs):
    """A segment made outside the job (here by the test) that the program
    attached: attached again at its address after each restart, with what
    is in it now (the test writes the cycle's number into it while the job
    is down), never the checkpoint's content."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    sid = libc.shmget(0, 4096, 0o1000 | 0o666)  # IPC_PRIVATE, IPC_CREAT
    assert sid >= 0, ctypes.get_errno()

    def down(c):
        a = libc.shmat(sid, None, 0)
        ctypes.memmove(a, bytes([c]), 1)
        libc.shmdt(ctypes.c_void_p(a))

    log = []
    runner.env["IPC_FOREIGN"] = str(sid)
    try:
        cycles(runner, [progs["ipc_sysv"], "2"], "ipc_sysv", log=log, down=down)
    except BaseException:
        leave_nothing(log)
        raise
    finally:
        libc.shmctl(sid, 0, None)  # IPC_RMID


REFUSED = {
    "notify": r"^lazarus: checkpoint \d+ failed: descriptor \d+ \(POSIX message queue /lzref-\d+\) has an mq_notify "
              r"registration, which Lazarus cannot keep$",
    "partial": r"^lazarus: checkpoint \d+ failed: System V shared memory \d+ is attached in part at 0x[0-9a-f]+ \(a part of "
               r"the attachment was unmapped\): Lazarus restores whole attachments only$",
}


@pytest.mark.parametrize("what", list(REFUSED))
def test_refused_clearly(what, runner, progs):
    """A POSIX queue with an mq_notify registration, a System V attachment
    with a hole: the checkpoint fails with one line saying so, the program
    runs on, and once it let go a checkpoint works and the restarted program
    finds its queue's message or its segment's content."""
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["ipc_refuse"], what, trig)
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    m = None
    try:
        m = proc.wait_for_output(r"^held (\S+) (-?\d+)$", timeout=60)
        r = runner.lz("checkpoint", "-d", store, timeout=60)
        assert r.rc != 0 and re.fullmatch(REFUSED[what], r.stderr.strip()), str(r)
        runner.touch(Path(f"{trig}.1"))
        proc.wait_for_output(r"^released$", timeout=60)
        runner.checkpoint(store)
        kill_program(proc, "ipc_refuse")
        proc = runner.start_lz("restart", "-d", store)
        runner.touch(Path(f"{trig}.2"))
        assert proc.wait(timeout=60) == 0, proc.stdout + proc.stderr
        assert "done" in proc.stdout and "FAIL" not in proc.stdout, proc.stdout
    except BaseException:
        if m:  # what the program made, left by the failure
            libc.mq_unlink(m[1].encode())
            if int(m[2]) >= 0:
                libc.shmctl(int(m[2]), 0, None)
        raise
