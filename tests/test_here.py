"""Synchronous checkpoints (lazarus_checkpoint_here, libckpt's checkpoint_here):
--mintime keeps them apart however often the program asks, and the interval
(-i, libckpt's maxtime) starts again after every checkpoint, whatever asked
for it."""
import re

import pytest

from conftest import INCLUDE, LIBDIR, _compile


@pytest.fixture(scope="module")
def here_prog(programs):
    return _compile("here_prog", programs.dir, [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}"])


def taken(out):
    m = re.search(r"^taken (\d+) calls (\d+)$", out, re.M)
    assert m, out
    return int(m[1]), int(m[2])


def test_mintime_in_a_tight_loop(runner, here_prog):
    store = runner.base / "store"
    r = runner.lz("run", "-d", store, "-i", "0", "-k", "50", "--mintime", "0.5", "--", here_prog, "3", "0", timeout=120)
    assert r.rc == 0, str(r)
    n, calls = taken(r.stdout)
    assert calls > 100 * n, str(r)     # nearly every call returned at once
    entries = runner.list_json(store)
    assert len(entries) == n and 2 <= n <= 6, (n, entries)
    # each checkpoint's pause began no sooner than mintime after the last's
    begun = [e["created_ns"] - e["durable_ms"] * 1e6 for e in entries]
    gaps = [b - a for a, b in zip(begun, begun[1:])]
    assert all(g >= 0.5e9 - 5e6 for g in gaps), gaps


def test_interval_restarts_after_each_checkpoint(runner, here_prog):
    """A checkpoint_here() every second under -i 3: the interval never runs out."""
    store = runner.base / "store"
    r = runner.lz("run", "-d", store, "-i", "3", "-k", "50", "--", here_prog, "7", "1000", timeout=120)
    assert r.rc == 0, str(r)
    n, _ = taken(r.stdout)
    entries = runner.list_json(store)
    assert n >= 4 and len(entries) == n, (n, entries)
    assert all(e["trigger"] == "api" for e in entries), entries


def test_mintime_refused_when_malformed(runner, here_prog):
    r = runner.lz("run", "-d", runner.base / "store", "--mintime", "soon", "--", here_prog, "1", "0")
    assert r.rc == 2 and len(r.stderr.strip().splitlines()) == 1 and "--mintime" in r.stderr, str(r)


@pytest.mark.parametrize("fork", [True, False])
def test_written_beside_the_program(runner, here_prog, fork):
    """checkpoint_here() returns once its checkpoint is taken: a forked writer
    stores the 64 MiB while the program runs (libckpt's fork on); with
    --no-fork the program waits until it is durable."""
    store = runner.base / "store"
    opts = [] if fork else ["--no-fork"]
    r = runner.lz("run", "-d", store, "-i", "0", "--mintime", "0.5", *opts, "--", here_prog, "1.2", "0", "64",
                  timeout=120)
    assert r.rc == 0, str(r)
    first = runner.list_json(store)[0]
    assert first["stored_bytes"] > 60 << 20, first
    if fork:
        assert first["pause_ms"] < first["durable_ms"] / 2, first
    else:
        assert first["pause_ms"] >= first["durable_ms"] - 1, first
