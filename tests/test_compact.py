"""`lazarus run --compact` (issue 16): a restart from the newest of a chain of
incremental checkpoints reads about what a full checkpoint does.

A restart reads every frame the checkpoint uses whole (one checksum per
frame), the pages later increments replaced too.  Under `--compact` each
checkpoint stores again the live pages of old frames once such stale bytes
pass 1/16 of the data (runtime/rt_frames.c), and an old frame that was one
address range as that whole range, in a frame the restorer places whole
(runtime/rt_windows.c).  Driven by programs/incr_heap.c (see
test_incremental.py): rounds of 5 % random rewrites, uncompressed, by each
way of writing (a forked writer for a small heap, copy mode for a large one,
LAZARUS_NO_FORK=1); every checkpoint of the chain must restart exactly, gc
keep what they use and verify pass, and the restorer copy out page by page
less than half the extents it does for the default chain (the rest placed
whole)."""
import re

import pytest

import lzformat
from conftest import ckpt_path
from test_incremental import check_restarts, gc_and_check, incr_heap, restart, start, take  # noqa: F401 (a fixture)

ROUNDS = 12


def read_share(store, idx) -> float:
    """Stored bytes of the frames checkpoint idx uses / the bytes it holds."""
    m = lzformat.Manifest.load(ckpt_path(store, idx) / "manifest")
    data = sum(x.length for x in m.extents if x.frame != lzformat.FRAME_ZERO)
    return sum(s for _, _, s in m.referenced_frames()) / data


def copied_extents(runner, store, idx, state, env) -> int:
    """Restarts checkpoint idx (its state must come back): the extents the
    restorer copies out page by page rather than placing their frame whole
    (its trace, LAZARUS_TRACE=1, of the anonymous memory's fill)."""
    job = restart(runner, store, "--at", idx, env={**(env or {}), "LAZARUS_TRACE": "1"})
    assert job.cmd("digest") == state
    job.kill()
    m = re.search(r"lazarus-restore: +[0-9.]+ ms (\d+) frames placed whole, (\d+) extents to fill", job.proc.stderr)
    assert m, f"no fill step in the restorer's trace\n{job.proc.stderr[-3000:]}"
    return int(m.group(2))


@pytest.mark.parametrize("writer,mib", [("fork", 16), ("copy", 192), ("nofork", 16)])
def test_chain_reads_what_a_full_checkpoint_does(runner, incr_heap, writer, mib):
    env = {"LAZARUS_NO_FORK": "1"} if writer == "nofork" else None
    shares, copied = {}, {}
    for compact in (False, True):
        store = runner.base / f"store-{compact}"
        opts = ["-i", "0", "-k", str(ROUNDS + 2), "--compress", "none"] + (["--compact"] if compact else [])
        job = start(runner, store, [incr_heap, mib, 5], *opts, env=env)
        states = {}
        take(job, runner, store, states)
        for _ in range(ROUNDS):
            last = take(job, runner, store, states, "next")
        job.kill()
        shares[compact] = read_share(store, last)
        copied[compact] = copied_extents(runner, store, last, states[last], env)
        if compact:
            check_restarts(runner, store, states, env=env)
            gc_and_check(runner, store)
    # without --compact, 12 rounds of 5 % leave about a third of the old frames stale
    assert shares[False] > 1.2, f"the default chain reads only {shares[False]:.2f}x its data"
    assert shares[True] <= 1.1, f"--compact: the newest checkpoint reads {shares[True]:.2f}x its data"
    # an old frame stored again whole: its range placed whole, not copied page by page
    assert copied[True] * 2 < copied[False], f"extents copied by the restorer (default, --compact): {copied}"
