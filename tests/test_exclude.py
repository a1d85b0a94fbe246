"""Memory exclusion (lazarus_exclude/lazarus_include, libckpt's exclude_bytes):
dead bytes are not stored and come back as zeros (also the dead part of a
page that is partly dead), read-only bytes are stored once and then referred
to (a write the directive said would not come is not stored), both seen from
outside through `lazarus list` and from inside through the restored memory;
the exclusions hold after a restart; --check-exclusions names a write into a
read-only range and stores it after all."""
import re
import time

import pytest

from conftest import INCLUDE, LIBDIR, _compile, kill_program, refuse_edited_manifest

MIB = 16
CKPT_RE = re.compile(r"^ckpt (\d) index (\d+) digests ro (\w+) live (\w+) part (\w+)$", re.M)
AFTER_RE = re.compile(r"^after (\d) index (\d+) dead_zero (\d) part_dead_zero (\d) ro (\w+) live (\w+) part (\w+)$", re.M)


@pytest.fixture(scope="module")
def excl_prog(programs):
    return _compile("excl_prog", programs.dir, [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}"])


def run_excl(runner, excl_prog, *opts):
    store = runner.base / "store"
    gofile = runner.base / "go"
    proc = runner.start_lz("run", "-d", store, "-i", "0", *opts, "--", excl_prog, str(MIB), gofile)
    proc.wait_for_output(r"^waiting$", timeout=120)
    ck = {int(m[0]): m for m in CKPT_RE.findall(proc.stdout)}
    assert sorted(ck) == [1, 2], proc.stdout + proc.stderr
    entries = {int(e["index"]): e for e in runner.list_json(store)}
    first, second = entries[int(ck[1][1])], entries[int(ck[2][1])]
    kill_program(proc, "excl_prog")
    runner.touch(gofile)
    r = runner.lz("restart", "-d", store, timeout=120)
    assert r.rc == 0, str(r)
    after = AFTER_RE.findall(r.stdout)
    assert len(after) == 1, str(r)
    third = {int(e["index"]): e for e in runner.list_json(store)}[int(after[0][1])]
    return ck, first, second, after[0], third, proc.stderr


def test_dead_and_readonly(runner, excl_prog):
    ck, first, second, after, third, err = run_excl(runner, excl_prog)
    big, small = MIB << 20, (MIB << 20) // 4
    # dead: not stored (read-only + live + the rest of the program, not the dead buffer)
    assert big + small < first["data_bytes"] < big + small + (4 << 20), first
    assert first["excluded_dead_bytes"] == big + 4900 and first["excluded_readonly_bytes"] == big, first
    # read-only, its first MiB written against the directive: not stored
    # again (only LIVE's 64 KiB and a little)
    assert second["stored_bytes"] < 512 << 10, second
    assert "read-only" not in err
    rc, _, dead_zero, part_dead_zero, ro, live, part = after
    assert rc == "1", after                   # the checkpoint after the restart was taken
    assert dead_zero == "1" and part_dead_zero == "1", after
    assert ro == ck[1][2], (ro, ck)           # the stored copy, not what was written after
    assert live == ck[2][3] and part == ck[2][4], (after, ck)
    # the exclusions came back with the program
    assert third["data_bytes"] < big + small + (4 << 20), third
    assert third["excluded_dead_bytes"] == big + 4900, third


def test_check_exclusions_names_the_write(runner, excl_prog):
    ck, first, second, after, third, err = run_excl(runner, excl_prog, "--check-exclusions")
    m = re.search(r"wrote into memory it declared read-only: bytes 0x(\w+)-0x(\w+) \((\d+) bytes", err)
    assert m and int(m[3]) == MIB << 20, err
    assert second["stored_bytes"] >= 1 << 20, second      # the written pages stored after all
    assert after[4] == ck[2][2], (after, ck)                # restored as written
    assert after[2] == "1" and after[3] == "1", after


def test_no_incremental_still_refers_to_readonly(runner, excl_prog):
    """--no-incremental (libckpt's "user-directed, not incremental" row): the
    second checkpoint stores all live memory again, but not the read-only
    buffer, which it refers to."""
    ck, first, second, after, third, err = run_excl(runner, excl_prog, "--no-incremental")
    big, small = MIB << 20, (MIB << 20) // 4
    assert small < second["stored_bytes"] < small + (4 << 20), second
    assert second["changed_bytes"] >= small, second
    assert after[4] == ck[1][2] and after[2] == "1", (after, ck)


def test_no_fork_writes_in_the_pause(runner, programs):
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--no-fork", "--", programs.heap_mutator, "32", "100000")
    time.sleep(0.5)
    for _ in range(2):
        runner.checkpoint_when_up(store)
    entries = runner.list_json(store)
    # the program stood still until its checkpoint was on disk
    assert entries and all(e["pause_ms"] >= e["durable_ms"] - 1 for e in entries), entries
    kill_program(proc)


def test_from_many_threads(runner, programs):
    """Four threads exclude and include their buffers without pause while
    checkpoints are taken: each checkpoint records whole buffers only (the
    table is never seen half changed), and the program ends normally."""
    prog = _compile("excl_threads", programs.dir,
                    [f"-I{INCLUDE}", f"-L{LIBDIR}", "-llazarus", f"-Wl,-rpath,{LIBDIR}", "-pthread"])
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "-k", "20", "--", prog, "4")
    proc.wait_for_output(r"^ready$", timeout=60)
    for _ in range(8):
        runner.checkpoint(store)
    assert proc.wait(timeout=60) == 0, proc.stderr
    assert re.search(r"^done \d+$", proc.stdout, re.M), proc.stdout
    sums = {a * 1000 + b * 5000 + c * 20000 + d * 70000 for a in (0, 1) for b in (0, 1) for c in (0, 1) for d in (0, 1)}
    entries = runner.list_json(store)
    assert len(entries) == 8, entries
    assert all(e["excluded_dead_bytes"] in sums for e in entries), [e["excluded_dead_bytes"] for e in entries]


@pytest.mark.parametrize("bad", ["kind", "empty", "overlap"])
def test_malformed_exclusions_refused(runner, excl_prog, bad):
    """A sealed manifest whose EXCLUDE records are of an unknown kind, empty
    or out of order: verify and restart refuse it with one line, nothing runs."""
    import lzformat
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", excl_prog, str(MIB), runner.base / "go")
    proc.wait_for_output(r"^waiting$", timeout=120)
    idx = max(runner.indexes(store))
    kill_program(proc, "excl_prog")

    def edit(m):
        recs = m.records(lzformat.SEC_EXCLUDE)
        assert len(recs) == 3, recs
        if bad == "kind":
            m.set(recs[0], "kind", 7)
        elif bad == "empty":
            m.set(recs[1], "end", recs[1].start)
        else:
            m.set(recs[1], "start", recs[0].start)

    refuse_edited_manifest(runner, store, idx, edit, "exclusion list is malformed", cmds=("verify", "restart"))
