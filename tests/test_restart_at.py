"""`restart --at N` resumes the state of checkpoint N, for every retained N;
`-k N` keeps exactly the N newest checkpoints."""
import re

import pytest

from conftest import ckpt_dirs, copy_store, kill_program, tmp_entries

STEP_RE = re.compile(r"^step (\d+) ret (\w+) index (\d+) pid (\d+) digest ([0-9a-f]{16})$", re.M)


def parse_steps(out: str):
    return [(int(s), ret, int(i), int(p), d) for s, ret, i, p, d in STEP_RE.findall(out)]


def run_api_job(runner, programs, store, steps, keep=None, mib=8):
    """Run api_prog under Lazarus (-i 0: only its own API checkpoints) until
    it waits after the last step, then SIGKILL it.  Returns the parsed steps."""
    gofile = runner.base / "go"  # created only later, for restarts
    opts = ["-k", str(keep)] if keep is not None else []
    proc = runner.start_lz("run", "-d", store, "-i", "0", *opts, "--",
                           programs.api_prog, str(steps), str(mib), gofile)
    proc.wait_for_output(r"^waiting$", timeout=120)
    parsed = parse_steps(proc.stdout)
    kill_program(proc, "api_prog")
    assert [s[0] for s in parsed] == list(range(1, steps + 1)), proc.stdout
    assert all(s[1] == "continued" for s in parsed), f"{proc.stdout}\n{proc.stderr}"
    idx = [s[2] for s in parsed]
    assert idx == sorted(set(idx)), f"checkpoint indexes must increase: {idx}"
    return parsed, gofile


def test_restart_at_every_retained_checkpoint(runner, programs):
    steps = 5
    store = runner.base / "store"
    parsed, gofile = run_api_job(runner, programs, store, steps)  # default -k 3
    by_index = {s[2]: s for s in parsed}
    retained = runner.indexes(store)
    assert retained == [s[2] for s in parsed][-3:], f"list: {retained}, steps: {parsed}"
    entries = runner.list_json(store)
    assert {e["trigger"] for e in entries} == {"api"}, entries
    runner.touch(gofile)

    for n in retained:
        step, _, _, pid, digest = by_index[n]
        copy = runner.base / f"store-at-{n}"
        copy_store(store, copy)
        r = runner.lz("restart", "-d", copy, "--at", str(n), timeout=120)
        assert r.rc == 0, str(r)
        got = parse_steps(r.stdout)
        assert got, str(r)
        # resumes in the step of checkpoint n, with that step's memory and pid
        assert got[0] == (step, "restarted", n, pid, digest), f"restart --at {n}\n{r}"
        # then goes on exactly as the original run did
        later = [(s, d) for s, _, _, _, d in got[1:]]
        assert later == [(s[0], s[4]) for s in parsed[step:]], f"restart --at {n}\n{r}"
        assert all(s[1] == "continued" for s in got[1:]), str(r)
        assert re.search(r"^done digest " + parsed[-1][4] + "$", r.stdout, re.M), str(r)


def test_restart_at_missing_checkpoint_fails(runner, programs):
    store = runner.base / "store"
    parsed, gofile = run_api_job(runner, programs, store, 5, keep=2)
    retained = runner.indexes(store)
    dropped = parsed[0][2]
    assert dropped not in retained
    for n in (dropped, max(retained) + 100):
        r = runner.lz("restart", "-d", store, "--at", str(n))
        assert r.rc != 0, str(r)
        assert len(r.stderr_lines()) == 1, f"want one clear line\n{r}"
    assert runner.indexes(store) == retained


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_retention_keeps_k_newest(keep, runner, programs):
    steps = 5
    store = runner.base / "store"
    parsed, _ = run_api_job(runner, programs, store, steps, keep=keep, mib=2)
    newest = [s[2] for s in parsed][-keep:]
    assert runner.indexes(store) == newest
    assert ckpt_dirs(store) == newest, sorted(p.name for p in store.iterdir())
    assert tmp_entries(store) == []
