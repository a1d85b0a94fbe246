"""The launcher's output files (issue 16, item 3): `lazarus run ... > out 2> err`.

Regular files on the main program's 0/1/2 are the launcher's, like a terminal
or a pipe: never rolled back, never checked for outside changes, and a
restarted program writes to what `lazarus restart` was given.
`programs/stdio_lines.c` writes `out i` / `err i` per step, checkpoints itself
(C API) at step CKPT (then writes `continued`, or `restarted` once restored),
makes a checkpoint fail at step FAIL (the supervisor's own line lands in err)
and waits at step WAIT until the test has SIGKILLed the whole job.  Then
another process appends to the old out (a batch system's "CANCELLED" line),
and `lazarus restart > out2 2> err2` must run the rest with its output there,
the old files untouched.  Shapes: the program itself, a forked child writing
to the inherited stdout, a child exec'd by sh, stdout dup'ed to descriptor 7.
Also: a deleted old out, stdout and stderr one description (`2>&1`), stdout
reopened by name (the job's own file), `restart` with its stdout or stderr
closed, and `run --job-stdio` (the files are the job's: rolled back).
The restarted program makes its checkpoint fail at step FAIL again: from a
child (the fork and exec shapes) that asks through the C API before the main
program is back, the request waits for it and must stay a C API request (its
caller waited forever once in two runs when it did not).
"""
from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

import conftest
from conftest import INCLUDE, LAZARUS, LIBDIR, RUN_LINE_RE, _compile

STEPS, CKPT, FAIL, WAIT = 40, 10, 15, 20
CANCELLED = "slurmstepd: error: *** JOB 42 CANCELLED DUE TO TIME LIMIT ***\n"


@pytest.fixture(scope="module")
def prog(programs, lazarus_bin):
    return _compile("stdio_lines", programs.dir,
                    [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}"])


def outs(a, b):
    return [f"out {i}" for i in range(a, b)]


def errs(a, b):
    return [f"err {i}" for i in range(a, b)]


# what the first run wrote before it was killed, and what a restart writes
FIRST_OUT = outs(0, CKPT + 1) + ["continued"] + outs(CKPT + 1, WAIT + 1)
REST_OUT = ["restarted"] + outs(CKPT + 1, STEPS)
FIRST_ERR = errs(0, WAIT + 1)
REST_ERR = errs(CKPT + 1, STEPS)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def program_lines(path: Path) -> list[str]:
    return [l for l in lines(path) if not l.startswith("lazarus")]


def lazarus_lines(path: Path) -> list[str]:
    return [l for l in lines(path) if l.startswith("lazarus")]


class Job:
    """A job run by `sh -c 'exec lazarus run ... REDIRECTIONS'` as the runner's
    identity, in its base directory."""

    def __init__(self, runner, prog: Path, shape: str = "plain", run_opts=(), redirect="> out 2> err"):
        self.runner = runner
        self.base = runner.base
        self.store = runner.base / "store"
        self.release = runner.base / "release"
        args = [prog, STEPS, CKPT, FAIL, WAIT, self.release]
        if shape == "fork":
            args.append("--fork")
        elif shape in ("dup", "reopen"):
            args.append("--" + shape)
        if shape == "exec":
            script = runner.base / "job.sh"
            script.write_text(f"{shlex.join(str(a) for a in args)}\necho sh-done\n")
            args = ["sh", script]
        self.argv = [LAZARUS, "run", "-d", self.store, "-i", "0", *run_opts, "--", *args]
        self.proc = runner.start(["sh", "-c", f"exec {shlex.join(str(a) for a in self.argv)} {redirect}"])

    def wait_killed(self, out: Path, timeout: float = 60) -> None:
        """Waits until the program waits at step WAIT, then SIGKILLs the whole
        job (supervisor, program, children)."""
        want = f"out {WAIT}\n"
        deadline = time.monotonic() + timeout
        while not (out.exists() and want in out.read_text()):
            assert self.proc.poll() is None, f"the job ended (status {self.proc.wait(1)}) before step {WAIT}:\n" \
                                             f"{out.read_text() if out.exists() else '(no out)'}"
            assert time.monotonic() < deadline, f"no step {WAIT} after {timeout}s"
            time.sleep(0.05)
        time.sleep(0.2)  # the program is waiting for RELEASE: nothing in flight
        self.proc.kill()

    def restart(self, redirect="> out2 2> err2", check_rc: int | None = 0):
        self.runner.touch(self.release)
        cmd = shlex.join(str(a) for a in [LAZARUS, "restart", "-d", self.store])
        return self.runner.run(["sh", "-c", f"exec {cmd} {redirect}"], timeout=120, check_rc=check_rc)


SHAPES = {  # the lines a restart adds after the program's own
    "plain": [],
    "fork": ["parent done"],   # a forked child writes to the inherited stdout; its parent last
    "exec": ["sh-done"],       # sh runs the program (fork + exec), then writes itself
    "dup": [],                 # stdout moved to descriptor 7 (and 1 closed) before any output
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_output_goes_where_the_restarter_says(runner, prog, shape):
    b = runner.base
    job = Job(runner, prog, shape)
    job.wait_killed(b / "out")
    assert "stdio=launcher\n" in (job.store / "job").read_text()
    assert lines(b / "out") == FIRST_OUT
    assert program_lines(b / "err") == FIRST_ERR
    lz_lines = lazarus_lines(b / "err")
    assert any("checkpoint" in l and "failed" in l for l in lz_lines), \
        f"the supervisor's line about the failed checkpoint is missing from err:\n{(b / 'err').read_text()}"
    # the batch system writes its verdict into the job's output file, after the
    # job stopped (past the second after the stop that outside checks allow)
    time.sleep(1.5)
    with open(b / "out", "a") as f:
        f.write(CANCELLED)
    out_before, err_before = (b / "out").read_bytes(), (b / "err").read_bytes()
    job.restart()
    # the old files: nothing rolled back, nothing written by the restarted job
    assert (b / "out").read_bytes() == out_before, "the restart changed the launcher's old stdout file"
    assert (b / "err").read_bytes() == err_before, "the restart changed the launcher's old stderr file"
    assert lazarus_lines(b / "err") == lz_lines
    # the rest of the run went where `lazarus restart` was told
    assert lines(b / "out2") == REST_OUT + SHAPES[shape]
    assert program_lines(b / "err2") == REST_ERR


def test_deleted_old_output_file(runner, prog):
    b = runner.base
    job = Job(runner, prog)
    job.wait_killed(b / "out")
    (b / "out").unlink()
    job.restart()
    assert not (b / "out").exists(), "the restart made the launcher's deleted stdout file again"
    assert lines(b / "out2") == REST_OUT
    assert program_lines(b / "err2") == REST_ERR
    assert program_lines(b / "err") == FIRST_ERR


def test_stdout_and_stderr_one_description(runner, prog):
    """`> out 2>&1`, restarted with `> out2 2> err2`: each descriptor takes the
    restarter's of its own number."""
    b = runner.base
    job = Job(runner, prog, redirect="> out 2>&1")
    job.wait_killed(b / "out")
    before = (b / "out").read_bytes()
    assert [l for l in program_lines(b / "out") if l.startswith("out") or l == "continued"] == FIRST_OUT
    job.restart()
    assert (b / "out").read_bytes() == before
    assert lines(b / "out2") == REST_OUT
    assert program_lines(b / "err2") == REST_ERR


def test_stdout_reopened_by_name_is_the_jobs(runner, prog):
    """The program opens its stdout's file again by name onto descriptor 1: that
    description is the job's file (rolled back, written on after the restart);
    stderr is still the launcher's."""
    b = runner.base
    job = Job(runner, prog, "reopen")
    job.wait_killed(b / "out")
    assert lines(b / "out") == FIRST_OUT
    job.restart()
    assert lines(b / "out") == outs(0, CKPT + 1) + REST_OUT, "the job's own file was not rolled back exactly"
    assert lines(b / "out2") == []
    assert program_lines(b / "err2") == REST_ERR
    assert program_lines(b / "err") == FIRST_ERR


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_restart_with_a_closed_descriptor(runner, prog, closed):
    """`lazarus restart` with its stdout (stderr) closed: the program's goes
    nowhere (/dev/null), and its other one where the restarter said."""
    b = runner.base
    job = Job(runner, prog)
    job.wait_killed(b / "out")
    before = (b / "out").read_bytes(), (b / "err").read_bytes()
    job.restart(">&- 2> err2" if closed == "stdout" else "> out2 2>&-")
    assert ((b / "out").read_bytes(), (b / "err").read_bytes()) == before
    if closed == "stdout":
        assert program_lines(b / "err2") == REST_ERR
    else:
        assert lines(b / "out2") == REST_OUT
    last = (f"out {STEPS - 1}" if closed == "stdout" else f"err {STEPS - 1}").encode()
    for f in job.store.rglob("*"):
        assert not (f.is_file() and last in f.read_bytes()), f"the program's {closed} went into {f}"


def test_job_stdio_rolls_the_files_back(runner, prog):
    """`run --job-stdio`: the files are the job's, as before this option existed:
    rolled back to the checkpoint and written on by the restarted program
    (each line once); what Lazarus wrote there after the checkpoint goes too,
    and the restarter's own descriptors get nothing from the program."""
    b = runner.base
    job = Job(runner, prog, run_opts=["--job-stdio"])
    job.wait_killed(b / "out")
    assert "stdio=job\n" in (job.store / "job").read_text()
    assert lines(b / "out") == FIRST_OUT
    job.restart()
    assert lines(b / "out") == outs(0, CKPT + 1) + REST_OUT
    # run's first line was there at the checkpoint; everything after it goes
    err = lines(b / "err")
    assert RUN_LINE_RE.match(err[0]) and "job started" in err[0], err[:2]
    assert err[1:] == errs(0, STEPS), "err must be rolled back to the checkpoint, Lazarus' later lines too"
    assert lines(b / "out2") == []
    assert program_lines(b / "err2") == []


WAIT_RELEASE = 'while [ ! -e release ]; do sleep 0.05; done'
PARKED = {
    # the script keeps the launcher's stdout pipe on 10 itself
    "exec": f"exec 10>&1 1>/dev/null\necho ready >&10\n{WAIT_RELEASE}\necho after >&10\n",
    # bash saves its stdout on 10 while a redirected compound command runs, and puts it back after
    "saved": f"echo ready\n{{ {WAIT_RELEASE}; }} > /dev/null\necho after\n",
}


@pytest.mark.parametrize("shape", list(PARKED))
def test_launcher_pipe_parked_on_another_descriptor(runner, shape):
    """bash holds the launcher's stdout pipe on descriptor 10 (`exec 10>&1`, or
    its own save around `{ ...; } > /dev/null`) when it is checkpointed: that
    is the launcher's pipe, not one the job made, so after a restart it writes
    into the restarter's stdout (it was given a pipe with no reader, and died
    of SIGPIPE)."""
    b = runner.base
    (b / "job.sh").write_text(PARKED[shape])
    store = b / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", "bash", b / "job.sh")
    proc.wait_for_output(r"^ready$", 60)
    runner.lz("checkpoint", "-d", store, check_rc=0)
    conftest.kill_program(proc, "bash")
    runner.touch(b / "release")
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0 and r.stdout.splitlines() == ["after"], str(r)
