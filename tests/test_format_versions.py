"""Stores of an earlier format version, and what this build must refuse
(docs/format.md, "Versions").

A version-5 store is made at test time by the Lazarus of the commit before
the bump to version 6, built once per session (tests/fixtures/make_old_store.py,
about 20 s, kept in $TMPDIR for later sessions;
that test is in the slow tier): the integrity_job scenario (checkpoints A < B, file
journals of the program and a child, a pipe, an open deleted file) runs under
it and is killed.  This build lists it, verifies it, and restarts it to B and
to A with the work tree exactly as it was there.

On a store of this build, edited with tests/lzformat.py and sealed again:
a manifest claiming version 99 is refused with one line; a section of a type
no build knows flagged "must understand" is refused with one line, without
the flag it is skipped; records longer than this build's (a newer layout:
8 more bytes each, their record size saying so) are read by their prefix and
the job restarts exactly; a page size other than this machine's is refused by
`restart` (verify still reads the store); a journal of a newer journal
version is refused by name.
"""
from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest

import lzformat as F
from conftest import Runner, _compile, assert_refused, ckpt_path
from fixtures.make_old_store import build_old, old_rev
from store_damage import build_scenario, restart_outcome, verify_outcome

class OldRunner(Runner):
    """A Runner whose `lazarus` is another build's."""

    def __init__(self, runner: Runner, lazarus: Path):
        self.__dict__.update(runner.__dict__)
        self.old = lazarus

    def lz(self, *args, timeout: float = 60, check_rc: int | None = None):
        return self.run([self.old, *args], timeout=timeout, check_rc=check_rc)

    def start_lz(self, *args):
        return self.start([self.old, *args])


@pytest.fixture(scope="session")
def v5_lazarus():
    rev = old_rev(5)
    if rev is None:
        pytest.skip("no commit of this checkout bumped the format past version 5")
    dest = Path(tempfile.gettempdir()) / f"lazarus-format5-{rev.rstrip('^')[:12]}"
    return build_old(dest, rev)  # kept: the next session reuses it


@pytest.fixture(scope="module")
def integrity_prog():
    d = Path(tempfile.mkdtemp(prefix="lazarus-fmtv-", dir="/tmp"))
    d.chmod(0o755)
    return _compile("integrity_job", d)


def _scenario(runner, prog, name, lazarus=None):
    r = OldRunner(runner, lazarus) if lazarus else runner
    return build_scenario(r, prog, runner.base / name, f"tok-{name}")


def test_version5_store_lists_verifies_restarts(runner, v5_lazarus, integrity_prog):
    for at in (None, "a"):
        scn = _scenario(runner, integrity_prog, f"v5{at or 'b'}", v5_lazarus)
        for i in (scn.a, scn.b):
            assert F.Manifest.load(ckpt_path(scn.store, i) / "manifest").header.version == 5
        assert runner.indexes(scn.store) == [scn.a, scn.b]
        rc, out, problem = verify_outcome(runner, scn)
        assert rc == 0 and problem is None, f"{out}\n{problem}"
        o = restart_outcome(runner, scn, scn.a if at else None)
        assert o.kind == "restored", str(o)


def _edit_manifest(scn, fn):
    path = ckpt_path(scn.store, scn.b) / "manifest"
    m = F.Manifest.load(path)
    fn(m)
    m.save(path)


def test_newer_version_refused(runner, integrity_prog):
    scn = _scenario(runner, integrity_prog, "v99")
    _edit_manifest(scn, lambda m: m.set(m.header, "version", 99))
    assert_refused(runner, scn.store, r"checkpoint format version 99 was written by a newer Lazarus "
                   rf"\(this build reads versions {F.VERSION_MIN} to {F.VERSION}\)", what="version 99")


def _add_section(typ):
    def edit(m):
        secs = [(s.raw_type, bytes(m.data[s.off:s.off + s.length]), s.record_size) for s in m.sections]
        m.data[:] = m.rebuild(secs + [(typ, b"from a later Lazarus", 0)])
    return edit


def test_unknown_must_understand_section_refused(runner, integrity_prog):
    scn = _scenario(runner, integrity_prog, "must")
    _edit_manifest(scn, _add_section(77 | F.SEC_MUST))
    assert_refused(runner, scn.store, r"written by a newer Lazarus: section 77 it must understand", what="section 77")


def test_unknown_plain_section_skipped(runner, integrity_prog):
    scn = _scenario(runner, integrity_prog, "plain")
    _edit_manifest(scn, _add_section(77))
    o = restart_outcome(runner, scn, None)
    assert o.kind == "restored", str(o)


def test_longer_records_read_by_prefix(runner, integrity_prog):
    """Every array section's records 8 bytes longer (PTYS, IPC: after their count)."""
    scn = _scenario(runner, integrity_prog, "longer")
    widened = []

    def widen(m):
        secs = []
        for s in m.sections:
            p, rs = bytes(m.data[s.off:s.off + s.length]), s.record_size
            if rs:
                head, body, tail = b"", p, b""
                if s.type in (F.SEC_PTYS, F.SEC_IPC):
                    n = struct.unpack_from("<Q", p)[0]
                    head, body, tail = p[:8], p[8:8 + n * rs], p[8 + n * rs:]
                body = b"".join(body[i:i + rs] + b"\xa5" * 8 for i in range(0, len(body), rs))
                p, rs = head + body + tail, rs + 8
                widened.append(s.name)
            secs.append((s.raw_type, p, rs))
        m.data[:] = m.rebuild(secs)
    _edit_manifest(scn, widen)
    assert {"proc", "threads", "regions", "extents", "frames", "fds"} <= set(widened), widened
    rc, out, problem = verify_outcome(runner, scn)
    assert rc == 0 and problem is None, f"{out}\n{problem}"
    o = restart_outcome(runner, scn, None)
    assert o.kind == "restored", str(o)


def test_other_page_size_refused_by_restart(runner, integrity_prog):
    scn = _scenario(runner, integrity_prog, "page")
    _edit_manifest(scn, lambda m: m.set(m.header, "page_size", 16384))
    assert_refused(runner, scn.store, r"taken with a page size of 16384 bytes \(this machine's: 4096\)",
                   cmds=("restart",), what="page size")
    assert runner.lz("verify", "-d", scn.store).rc == 0


def test_newer_journal_version_refused(runner, integrity_prog):
    scn = _scenario(runner, integrity_prog, "jver")
    path = ckpt_path(scn.store, scn.b) / "files.log"
    raw = path.read_bytes()
    log = F.parse_log(raw)
    begin = log.records[0]
    assert begin.type == F.FJ_BEGIN and F.FJ_BEGIN_L.unpack(begin.payload).version == F.FJ_VERSION
    payload = bytearray(begin.payload)
    struct.pack_into("<I", payload, F.FJ_BEGIN_L.offset("version"), F.FJ_VERSION + 1)
    new = F.encode_record(F.FJ_BEGIN, bytes(payload), begin.stamp, begin.flags)
    path.write_bytes(raw[:begin.off] + new + raw[begin.off + len(new):])
    assert_refused(runner, scn.store, rf"files.log was written by a newer Lazarus \(journal version {F.FJ_VERSION + 1}",
                   what="journal version")
