"""SIGKILL of `lazarus restart` itself (its whole process tree) at random
instants while it restores: the next `restart` still works and the program
finishes with the uninterrupted result."""
import re
import time

from conftest import kill_program, plain_output, tmp_entries, wait_new_checkpoint

ARGS = ["256", "120"]  # 256 MiB to restore (kills land inside); rounds only lengthen the last run
KILLS = 6


def test_killed_restart_can_be_restarted(runner, programs, rng):
    argv = [programs.heap_mutator, *ARGS]
    expected = plain_output(argv).splitlines()[-1]
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "1", "--", *argv)
    assert wait_new_checkpoint(runner, store, -1, proc)
    time.sleep(rng.uniform(0, 1))
    kill_program(proc, "heap_mutator")
    log = []
    for i in range(KILLS):
        before = runner.indexes(store)
        assert before, "no checkpoint left"
        r = runner.start_lz("restart", "-d", store)
        # restoring 256 MiB takes a fraction of a second: aim inside it,
        # now and then a little after
        delay = rng.uniform(0.0, 0.8)
        time.sleep(delay)
        ended = r.poll()
        log.append(f"restart {i}: SIGKILL after {delay:.3f}s (had ended: {ended}); "
                   f"stderr: {r.stderr.strip()[-300:]!r}")
        assert ended is None, "\n".join(log)
        r.kill()
        after = runner.indexes(store)
        assert after and max(after) >= max(before), f"checkpoints lost: {before} -> {after}\n" + "\n".join(log)
    print("\n".join(log))

    v = runner.lz("verify", "-d", store)
    assert v.rc == 0, f"store damaged by killed restarts\n{v}\n" + "\n".join(log)
    final = runner.lz("restart", "-d", store, timeout=300)
    assert final.rc == 0, f"{final}\n" + "\n".join(log)
    assert final.stdout.splitlines()[-1] == expected, str(final)
    assert not re.search(r"^start ", final.stdout, re.M), "restart started the program over"
    assert tmp_entries(store) == []
