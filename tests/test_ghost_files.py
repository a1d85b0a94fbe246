"""Open deleted files kept whole (issue 17): `ghost_files` holds a deleted
file with a hole between two blocks through a read-write descriptor it
shares with a forked child and a read-only one opened through a hard link
(both names removed); checkpointed, the whole job SIGKILLed and restarted
twice, it checks from inside that both descriptors are one nameless inode
again with its mode, modification time, size, hole and bytes, and that the
child's appends through the shared descriptor move the parent's offset and
are read through the other, the child's own description and a second
child's (one inode across three processes, one description across two).  As root and as an ordinary user."""
import re
import time
from pathlib import Path

import pytest

from conftest import _compile, kill_program


@pytest.fixture(scope="module")
def ghost_files(programs):
    return _compile("ghost_files", programs.dir)


def test_deleted_file_shared_restarts(runner, ghost_files):
    store = runner.base / "store"
    trig = runner.base / "trig"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", ghost_files, "2", trig)
    out = ""
    for c in (1, 2):
        proc.wait_for_output(rf"^ready {c}$", timeout=60)
        runner.checkpoint(store)
        kill_program(proc, "ghost_files")
        out += proc.stdout
        assert "FAIL" not in proc.stdout, out + proc.stderr
        proc = runner.start_lz("restart", "-d", store)
        time.sleep(0.5)
        runner.touch(Path(f"{trig}.{c}"))
        proc.wait_for_output(rf"^check {c} ok$|^FAIL", timeout=60)
        assert "FAIL" not in proc.stdout, out + proc.stdout + proc.stderr
    assert proc.wait(timeout=60) == 0, out + proc.stdout + proc.stderr
    out += proc.stdout
    assert re.search(r"^done$", out, re.M) and out.count("check 2 ok") == 1, out
