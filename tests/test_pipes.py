"""Pipes and AF_UNIX socket pairs the program made, checkpointed with the
data in flight: programs killed at random instants and restarted finish with
the result of an uninterrupted run (one thread over a pipe, a producer and a
consumer thread over a pipe, a socket pair of each type); flags and sizes
survive; a damaged data file or a malformed record stops a restart with one
line and changes nothing; a pipe or socket whose other end is elsewhere (or
that is not a local pair) still fails the checkpoint, naming the descriptor.
As root and as an ordinary user."""
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import lzformat
from conftest import (IS_ROOT, Runner, _compile, _user_base, assert_refused, ckpt_path, copy_store, find_program,
                      kill_program, kill_tree, plain_output, refused_until_let_go, run_until_done, wait_gone)


@pytest.fixture(scope="module")
def progs(programs):
    """This file's programs, compiled next to the session's."""
    return {
        "pipe_records": _compile("pipe_records", programs.dir),
        "pipe_threads": _compile("pipe_threads", programs.dir, ["-pthread"]),
        "sock_pairs": _compile("sock_pairs", programs.dir),
        "chan_refuse": _compile("chan_refuse", programs.dir),
        "shared_queue": _compile("shared_queue", programs.dir),
    }


def _no_trouble(out: str, info: str) -> None:
    for word in ("LOST", "FLAGS"):
        assert not re.search(rf"^{word}\b", out, re.M), f"the program saw {word}\n{info}"


# ------------------------------------------------------- kills and restarts
# name -> (argv, result-line prefix); each runs about 4 s uninterrupted
KILLED = {
    "pipe_records": (lambda p, base: [p["pipe_records"], "1800"], "records "),
    "pipe_threads": (lambda p, base: [p["pipe_threads"], "28000", base / "pt.out"], "done "),
    "sock_pairs": (lambda p, base: [p["sock_pairs"], "1600"], "messages "),
}


@pytest.fixture(scope="module")
def reference(progs):
    """Uninterrupted runs without Lazarus: the result line (and for
    pipe_threads the output file)."""
    refs = {}
    tmp = Path(tempfile.mkdtemp(prefix="lazarus-pipes-ref-"))

    def get(name):
        if name not in refs:
            argv, prefix = KILLED[name][0](progs, tmp), KILLED[name][1]
            out = plain_output(argv)
            lines = [l for l in out.splitlines() if l.startswith(prefix)]
            assert len(lines) == 1 and "LOST" not in out and "FLAGS" not in out, out
            data = (tmp / "pt.out").read_bytes() if name == "pipe_threads" else None
            refs[name] = (lines[0], data)
        return refs[name]

    yield get
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("name", list(KILLED))
def test_killed_with_data_in_flight(name, runner, progs, reference, rng):
    """SIGKILL at random instants (each after a new checkpoint, -i 1), restart
    each time: the program never sees a record, message or flag change, and
    ends with the uninterrupted run's result (and output file); restarts
    resume instead of starting over."""
    want, want_file = reference(name)
    argv = KILLED[name][0](progs, runner.base)
    kills = 3
    kr = run_until_done(runner, runner.base / "store", argv, rng, kills=kills, comm=name,
                        done_re="^" + re.escape(KILLED[name][1]))
    info = kr.describe()
    assert kr.kills >= 2, f"the program finished after only {kr.kills} kills\n{info}"
    assert [s.rc for s in kr.segments] == [137] * kr.kills + [0], info
    _no_trouble(kr.all_stdout, info)
    assert kr.last_line(KILLED[name][1]) == want, info
    starts = [i for i, s in enumerate(kr.segments) if s.kind == "restart" and re.search(r"^start", s.stdout, re.M)]
    assert not starts, f"restart segments {starts} started the program over\n{info}"
    if want_file is not None:
        got = (runner.base / "pt.out").read_bytes()
        assert got == want_file, (f"output file differs from the uninterrupted run's ({len(got)} bytes, "
                                  f"want {len(want_file)})\n{info}")


# ------------------------------------------------------------ flags, sizes
def _fdinfo_flags(pid: int, fd: int) -> int:
    with open(f"/proc/{pid}/fdinfo/{fd}") as f:
        for line in f:
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    raise AssertionError(f"no flags in /proc/{pid}/fdinfo/{fd}")


def _wait_lines(proc, pattern: str, count: int, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while len(re.findall(pattern, proc.stdout, re.M)) < count:
        assert proc.poll() is None, f"the program ended\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        assert time.monotonic() < deadline, f"no {count} x /{pattern}/\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        time.sleep(0.05)


@pytest.mark.parametrize("name", ["pipe_records", "sock_pairs"])
def test_flags_survive_restart(name, runner, progs):
    """O_NONBLOCK on one end and not the other, FD_CLOEXEC, the access mode:
    the kernel's view of every pipe and socket descriptor (fdinfo) is the
    same in the restarted program as at the checkpoint (the program also
    checks them, and the pipe's 128 KiB size, every round)."""
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs[name], "100000")
    fds = [int(x) for x in proc.wait_for_output(r"^start fds ([\d ]+)$", timeout=60).group(1).split()]
    _wait_lines(proc, r"^round ", 2)
    runner.checkpoint(store)
    pid = find_program(proc.pid, name)
    before = {fd: _fdinfo_flags(pid, fd) for fd in fds}
    kill_program(proc, name)
    assert any(v & os.O_NONBLOCK for v in before.values()), before
    assert any(not v & os.O_NONBLOCK for v in before.values()), before

    proc = runner.start_lz("restart", "-d", store)
    _wait_lines(proc, r"^round ", 2)  # it runs on, checking its descriptors
    pid = find_program(proc.pid, name)
    after = {fd: _fdinfo_flags(pid, fd) for fd in fds}
    assert after == before, f"descriptor flags (octal) changed: {[(fd, oct(before[fd]), oct(after[fd])) for fd in fds]}"
    _no_trouble(proc.stdout, proc.stderr)
    kill_program(proc, name)


# ------------------------------------------------------- damaged checkpoints
def _flip(p: Path):
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x10
    p.write_bytes(bytes(data))


def _truncate(p: Path):
    os.truncate(p, p.stat().st_size - 1)


def _remove(p: Path):
    p.unlink()


@pytest.fixture(scope="module")
def pristine(progs, lazarus_bin):
    """Per identity and program: a store of a killed job with two checkpoints
    A < B taken with data in flight."""
    made = {}
    bases = []

    def get(mode, name):
        if (mode, name) not in made:
            base = _user_base() if mode == "user" and IS_ROOT else Path(tempfile.mkdtemp(prefix="lazarus-store-"))
            bases.append(base)
            r = Runner(mode, base)
            store = base / "store"
            proc = r.start_lz("run", "-d", store, "-i", "0", "--", progs[name], "100000")
            proc.wait_for_output(r"^round ", timeout=60)
            a = r.checkpoint(store)
            b = r.checkpoint(store)
            kill_program(proc, name)
            made[(mode, name)] = (store, a, b)
        return made[(mode, name)]

    yield get
    for b in bases:
        shutil.rmtree(b, ignore_errors=True)


CORRUPT = {"bitflip": _flip, "truncated": _truncate, "missing": _remove}


@pytest.mark.parametrize("how", list(CORRUPT))
@pytest.mark.parametrize("name,prefix", [("pipe_records", "pipe."), ("sock_pairs", "sock.")])
def test_damaged_data_file_refused(name, prefix, how, runner, pristine):
    """The data in flight of a pipe or socket, bit-flipped, truncated or
    removed: one line naming the file, exit non-zero, DIR unchanged, no
    process; the older checkpoint still verifies."""
    if name == "sock_pairs" and how != "bitflip":
        pytest.skip("one damage is enough for the socket files")
    src, a, b = pristine(runner.mode, name)
    store = runner.base / "store"
    copy_store(src, store)
    files = sorted(p for p in ckpt_path(store, b).iterdir() if p.name.startswith(prefix))
    assert files, f"checkpoint {b} kept no {prefix}* file: {sorted(os.listdir(ckpt_path(store, b)))}"
    files = [p for p in files if p.stat().st_size > 0]
    CORRUPT[how](files[0])
    assert_refused(runner, store, re.escape(files[0].name), at=b, what=f"{how} {files[0].name}")
    r = runner.lz("verify", "-d", store, "--at", str(a), timeout=120)
    assert r.rc == 0, f"intact checkpoint {a} next to a damaged one\n{r}"


def _bad_fd_ino(m):
    for f in m.fds:
        if f.kind == lzformat.FD_PIPE:
            m.set(f, "ino", 12345)  # a pipe no record describes
            return
    raise AssertionError("no pipe descriptor in the manifest")


def _bad_chan_kind(m):
    m.set(m.chans[0], "kind", 77)


def _bad_chan_bytes(m):
    c = m.chans[0]
    m.set(c, "bytes", c.capacity + 1)  # more in flight than the pipe holds


def _bad_chan_path(m):
    # the data file's name made to climb out of the checkpoint: "pipe.N" -> "../e.N"
    at = m.string_at(m.chans[0].path)
    assert m.data[at:at + 5] == b"pipe."
    m.data[at:at + 5] = b"../e."


MALFORMED = {"fd-names-no-pipe": _bad_fd_ino, "chan-kind": _bad_chan_kind,
             "chan-bytes": _bad_chan_bytes, "chan-path": _bad_chan_path}


@pytest.mark.parametrize("how", list(MALFORMED))
def test_malformed_records_refused(how, runner, pristine, progs):
    """A manifest whose checksum is right but whose pipe records are not
    (a descriptor naming no pipe, an unknown kind, more bytes than the pipe
    holds, a data file outside the checkpoint) is refused as malformed."""
    src, a, b = pristine(runner.mode, "pipe_records")
    store = runner.base / "store"
    copy_store(src, store)
    manifest = ckpt_path(store, b) / "manifest"
    m = lzformat.Manifest.load(manifest)
    assert m.chans, "no pipe record in the manifest"
    MALFORMED[how](m)
    m.save(manifest)  # re-sealed: its checksum is right, its records are not
    assert_refused(runner, store, "malformed", at=b, what=how)


# ------------------------------------------------------------- refusals
REFUSED = {
    # (a pair whose other end is closed and a listening socket are restored now: test_unix_sockets.py)
    "inet": r"listening socket with 1 connection\(s\) not yet accepted",
    # a socket pair whose other end an orphan outside the job holds (one shared with a
    # child is checkpointed with both processes: test_shared_with_a_child)
    "outsock": r"descriptor 7 is one end of a local socket pair whose other end no process of the job holds",
    "peekedempty": r"empty messages",
}


@pytest.mark.parametrize("kind", ["childpipe", "childsock"])
def test_shared_with_a_child(kind, runner, progs):
    """A pipe or socket pair whose other end a child holds: both processes
    are in the checkpoint."""
    store = runner.base / "store"
    f1, f2 = runner.base / "f1", runner.base / "f2"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["chan_refuse"], kind, f1, f2)
    proc.wait_for_output(r"^ready$", timeout=60)
    res = runner.lz("checkpoint", "-d", store)
    assert res.rc == 0 and "2 processes" in res.stderr, str(res)
    assert runner.lz("verify", "-d", store).rc == 0
    runner.touch(f1)
    proc.wait_for_output(r"^closed$", timeout=30)
    runner.touch(f2)
    assert proc.wait(timeout=60) == 0, proc.stderr


@pytest.mark.parametrize("kind", list(REFUSED))
def test_refused_when_the_other_end_is_elsewhere(kind, runner, progs):
    """A socket that is not one of a local pair the process holds (its peer
    closed, listening, TCP, the other end in a child), or a datagram queue
    whose empty message a peek no longer sees: the checkpoint fails with one
    line naming descriptor 7 (or the process and its descriptor), nothing is
    listed or left behind, the program runs on, and checkpoints work once the
    descriptor is closed."""
    store = runner.base / "store"
    f1, f2 = runner.base / "f1", runner.base / "f2"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["chan_refuse"], kind, f1, f2)
    proc.wait_for_output(r"^ready$", timeout=60)
    named = "" if kind.startswith("child") else r"(?=.*descriptor 7\b)"  # a child's: named by its process
    refused_until_let_go(runner, store, proc, rf"(?s){named}(?=.*{REFUSED[kind]})", f1, f2, lines=2)
    assert proc.stdout == "ready\nclosed\ndone\n", proc.stdout


@pytest.mark.parametrize("kind", ["stream", "dgram", "seqpacket"])
def test_queue_held_by_several_processes(kind, runner, progs):
    """One end of a pair held by four processes, 400 messages queued on it:
    every holder captures the same queue at once, and each must see all of
    it (a peek walks the queue with the socket's one SO_PEEK_OFF, which the
    holders share).  Every checkpoint succeeds, the program's SO_PEEK_OFF is
    as it set it, and after the whole job is killed the restart reads every
    message back in order."""
    store = runner.base / "store"
    go = runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", progs["shared_queue"], kind, "4", go)
    proc.wait_for_output(r"^ready$", timeout=60)
    for _ in range(6):
        runner.checkpoint(store)
    pids = kill_tree(proc.pid)
    proc.wait(timeout=30)
    wait_gone(pids)
    r = runner.start_lz("restart", "-d", store)
    time.sleep(0.5)
    runner.checkpoint_when_up(store)
    runner.checkpoint(store)
    runner.touch(go)
    assert r.wait(timeout=120) == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1:] == ["done 400"], r.stdout + r.stderr
