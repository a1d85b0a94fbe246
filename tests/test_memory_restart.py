"""Kill at random instants, restart, and finish with the result of an
uninterrupted run: python3, and a program living on alarms, interval timers
and signal handlers; every piece of output is the plain run's.  As root and
as an ordinary user.  The 256 MiB heap mutator's run, with the same checks,
is test_incremental.py::test_program_killed_while_checkpointing (one run
for both: it also watches the store)."""
import re

import pytest

from conftest import plain_output, run_until_done

# name -> (argv builder, comm, result-line prefixes, kills)
PROGRAMS = {
    # pure Python, about 8 s; 3 kills: a first run, restarts of a restarted program
    "py_compute": (lambda p: ["/usr/bin/python3", p.py_compute, "100"], "python3", ["digest "], 3),
    # alarm/setitimer/SIGUSR1/SIGPROF/clock_gettime, about 8 s (5 phases waiting 1 s, 10 waiting 0.2 s)
    "signals_timers": (lambda p: [p.signals_timers, "15"], "signals_timers",
                       ["ticks ", "prof-timer ", "usr1-handler ", "mask ", "pending ", "realtime ",
                        "work "], 3),
}


def result_lines(stdout: str, prefixes) -> list:
    out = []
    for pre in prefixes:
        lines = [l for l in stdout.splitlines() if l.startswith(pre)]
        out.append(lines[-1] if lines else None)
    return out


@pytest.fixture(scope="module")
def reference(programs):
    """Uninterrupted runs without Lazarus; each must be deterministic."""
    refs = {}

    def get(name):
        if name not in refs:
            argv = PROGRAMS[name][0](programs)
            out = plain_output(argv)
            assert all(result_lines(out, PROGRAMS[name][2])), out
            assert "LOST" not in out and "BACKWARDS" not in out, out
            refs[name] = out
        return refs[name]

    return get


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_killed_at_random_instants(name, runner, programs, reference, rng):
    """SIGKILL the program at random instants (each after a new checkpoint),
    `lazarus restart` each time: the final result equals the uninterrupted
    run's, restarts resume rather than start over, getpid() never changes.
    What each run printed (checkpoints every second, the last one to the
    end) is a piece of what the program prints without Lazarus: the first
    its beginning, the last its end (this run also stands for an
    uninterrupted run under Lazarus printing exactly the plain output)."""
    build, comm, prefixes, kills = PROGRAMS[name]
    argv = build(programs)
    plain = reference(name)
    expected = result_lines(plain, prefixes)
    store = runner.base / "store"
    kr = run_until_done(runner, store, argv, rng, kills=kills, comm=comm,
                        done_re="^" + re.escape(prefixes[-1]))
    info = kr.describe()
    assert kr.kills == kills, f"program finished after only {kr.kills} kills\n{info}"
    assert [s.rc for s in kr.segments] == [137] * kills + [0], info
    assert [kr.last_line(p) for p in prefixes] == expected, info
    segs = kr.segments
    assert plain.startswith(segs[0].stdout) and plain.endswith(segs[-1].stdout), info
    for i, s in enumerate(segs):
        assert s.stdout in plain, f"segment {i} printed what the program without Lazarus does not\n{info}"
    assert "LOST" not in kr.all_stdout and "BACKWARDS" not in kr.all_stdout, info
    # a restart resumes from a checkpoint taken after the start line was
    # printed: printing it again means the program was started over
    starts = [i for i, s in enumerate(kr.segments)
              if s.kind == "restart" and re.search(r"^start ", s.stdout, re.M)]
    assert not starts, f"restart segments {starts} started the program over\n{info}"
    # the same getpid() in every segment (the first one is the original)
    pids = {s.killed_nspid for s in kr.segments if s.killed_nspid is not None}
    assert len(pids) == 1, f"getpid() changed across restarts: {pids}\n{info}"


def test_stack_grows_after_restart(runner, programs):
    """A restarted program whose stack grows deeper than it ever was, after
    new mappings filled the address space down past its stack
    (programs/stack_room.c), runs on: the room below the stack is there as
    natively (a restarted program's new mappings come from the top of the
    address space, gcc's cc1 crashed on this)."""
    from conftest import _compile, kill_program
    prog = _compile("stack_room", programs.dir)
    assert plain_output([prog, "now"]).startswith("start\ndeep "), "the program fails without Lazarus"
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", prog)
    proc.wait_for_output(r"^start$", timeout=60)
    runner.checkpoint(store)
    kill_program(proc, "stack_room")
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0 and re.search(r"^deep \d+$", r.stdout, re.M), str(r)
