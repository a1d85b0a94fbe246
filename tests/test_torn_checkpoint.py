"""SIGKILL of the program while a checkpoint is being written: the torn
checkpoint never becomes visible, the previous one restarts."""
import re
import time

import pytest

from conftest import (ckpt_dirs, ckpt_path, find_program, kill_tree, plain_output, tmp_entries,
                      wait_gone)

ARGS = ["256", "400"]  # 256 MiB: a checkpoint long enough to be caught writing; 400 rounds: the plain run is shared (cached) with test_incremental.py


def kill_during_checkpoint(runner, programs, store):
    """Start the heap mutator with -i 0, take checkpoint A, request another
    and SIGKILL the program (and anything it forked) as soon as a tmp.* entry
    shows in DIR.  Returns (A, torn index or None, tmp names seen) or None if
    the second checkpoint completed before the kill landed."""
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", programs.heap_mutator, *ARGS)
    proc.wait_for_output(r"^start ", timeout=60)
    a = runner.checkpoint(store)
    assert tmp_entries(store) == [], "a tmp.* entry outlived a durable checkpoint"
    req = runner.start_lz("checkpoint", "-d", store)
    seen = []
    deadline = time.monotonic() + 60
    while not seen and req.poll() is None and time.monotonic() < deadline:
        seen = tmp_entries(store)
    if not seen:
        rc = req.wait(timeout=60)
        assert rc == 0, f"second checkpoint failed without a kill\n{req.stderr}"
        kill_tree(proc.pid)
        proc.wait(timeout=60)
        return None
    prog = find_program(proc.pid, "heap_mutator")
    pids = kill_tree(prog)
    rc = proc.wait(timeout=60)
    assert rc == 137, f"supervisor exited {rc} after SIGKILL of the program\n{proc.stderr}"
    wait_gone(pids)
    req_rc = req.wait(timeout=60)
    if req_rc == 0:
        return None  # it became durable just before the kill: not torn
    assert req.stdout.strip() == "", f"a failed checkpoint printed an index\n{req.stdout}"
    m = re.match(r"tmp\.(\d+)", seen[0])
    return a, (int(m.group(1)) if m else None), seen


def test_torn_checkpoint_is_invisible(runner, programs):
    expected = plain_output([programs.heap_mutator, *ARGS]).splitlines()[-1]
    for attempt in range(3):
        store = runner.base / f"store{attempt}"
        got = kill_during_checkpoint(runner, programs, store)
        if got:
            break
    else:
        pytest.fail("the checkpoint always completed before the SIGKILL landed (3 attempts)")
    a, torn, seen = got
    print(f"checkpoint {a} durable; killed while writing {seen} (torn index {torn})")

    # only A is visible, the torn one neither in `list` nor as ckpt.N
    assert runner.indexes(store) == [a]
    assert ckpt_dirs(store) == [a], sorted(p.name for p in store.iterdir())
    if torn is not None and torn != a:
        assert not ckpt_path(store, torn).exists()
    v = runner.lz("verify", "-d", store)
    assert v.rc == 0, f"store with a torn checkpoint must verify as intact\n{v}"

    # the restart resumes from A: a checkpoint it takes names A as parent
    proc = runner.start_lz("restart", "-d", store)
    b = runner.checkpoint_when_up(store)
    entries = {int(e["index"]): e for e in runner.list_json(store)}
    assert b in entries and b != a, entries
    assert entries[b]["parent"] == a, entries[b]
    assert entries[b]["trigger"] == "request", entries[b]
    rc = proc.wait(timeout=300)
    assert rc == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == expected, proc.stdout
    assert not re.search(r"^start ", proc.stdout, re.M), "restart started the program over"

    # nothing left of the torn checkpoint
    assert tmp_entries(store) == [], sorted(p.name for p in store.iterdir())
    idx = runner.indexes(store)
    assert set(idx) <= {a, b}, idx
    if torn is not None and torn not in (a, b):
        assert not ckpt_path(store, torn).exists()
