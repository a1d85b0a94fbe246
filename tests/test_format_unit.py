"""Unit tests of the on-disk formats and of the C readers' verdicts (quick tier).

tests/lzformat.py is the tests' one decoder and encoder of manifests, tree
files and file journals.  Here:

  - its layouts are checked against common/format.h and files/journal.h
    (sizeof and offsetof of every field, and the constants, from the compiler);
  - it reads a real store (programs/integrity_job.c through store_damage.py:
    checkpoints A < B, a child's journal, a pipe, a nameless file), agrees
    with `lazarus list --json`, and re-encodes every manifest, tree and
    journal record to the very same bytes;
  - the journals' records state facts about their checkpoint that the test
    saw from outside (the file model): a path a NAME record says was absent,
    a file, a directory or a symlink was that at the checkpoint, an inode
    whose name did not change had the recorded size and permission bits;
  - journals and manifests built or edited with the encoder (checksums right,
    content wrong, or damage of one kind) get the C reader's verdict through
    `lazarus verify`: each rule of files/journal_read.c (a log proves its
    extent: BEGIN, END, the zeros after an open log, checksums, saved bytes,
    whose journal it is) and of store/manifest.c / store/tree.c (sizes,
    counts, references between records, identity) refused with one line
    naming it, and what the format allows (a torn record before the zeros,
    an empty sealed log, an unknown section) accepted.

The store is made once per module (about a second) and edited in place, each
case restoring the bytes it changed (the journals name inodes: a copy of the
store would not verify).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import lzformat as F
from conftest import IS_ROOT, REPO, Runner, _compile, _user_base, ckpt_path
from store_damage import build_scenario


# --------------------------------------------------------------------------
# The decoder's layouts are the compiler's
# --------------------------------------------------------------------------
CONSTANTS = {
    "LZ_VERSION": F.VERSION, "LZ_VERSION_MIN": F.VERSION_MIN, "LZ_SEC_MUST": F.SEC_MUST,
    "LZ_MACHINE_X86_64": F.MACHINE_X86_64, "LZ_BYTE_ORDER": F.BYTE_ORDER, "LZ_PAGE_SIZE": F.PAGE_SIZE,
    "LZ_HEADER_V5_SIZE": F.HEADER_V5_SIZE, "FJ_VERSION": F.FJ_VERSION, "LZ_FRAME_ZERO": F.FRAME_ZERO, "FJ_REC_MAGIC": F.FJ_MAGIC,
    "FJ_DATA_MAX": F.FJ_DATA_MAX, "LZ_TH_CKPT": F.TH_CKPT,
    "LZ_SEC_PROC": F.SEC_PROC, "LZ_SEC_REGIONS": F.SEC_REGIONS, "LZ_SEC_EXTENTS": F.SEC_EXTENTS,
    "LZ_SEC_FDS": F.SEC_FDS, "LZ_SEC_STRINGS": F.SEC_STRINGS, "LZ_SEC_PACKS": F.SEC_PACKS,
    "LZ_SEC_AUXV": F.SEC_AUXV, "LZ_SEC_FRAMES": F.SEC_FRAMES, "LZ_SEC_THREADS": F.SEC_THREADS,
    "LZ_SEC_CHANS": F.SEC_CHANS, "LZ_SEC_GROUPS": F.SEC_GROUPS, "LZ_SEC_EVENTS": F.SEC_EVENTS,
    "LZ_SEC_PTYS": F.SEC_PTYS, "LZ_FD_PTY": F.FD_PTY,
    "LZ_SEC_USOCKS": F.SEC_USOCKS, "LZ_FD_FIFO": F.FD_FIFO, "LZ_FD_USOCK": F.FD_USOCK, "LZ_CH_FIFO": F.CH_FIFO,
    "LZ_SEC_INET": F.SEC_INET, "LZ_FD_INET": F.FD_INET, "LZ_IN_UNBOUND": F.IN_UNBOUND,
    "LZ_IN_CONNECTED": F.IN_CONNECTED, "LZ_IN_RESET": F.IN_RESET,
    "LZ_SEC_TIMERS": F.SEC_TIMERS, "LZ_TM_TIMER": F.TM_TIMER, "LZ_TM_NEXT": F.TM_NEXT, "LZ_TMF_ABSTIME": F.TMF_ABSTIME,
    "LZ_FD_EVENT": F.FD_EVENT, "LZ_EV_EVENTFD": F.EV_EVENTFD, "LZ_EV_WATCH": F.EV_WATCH,
    "LZ_FD_FILE": F.FD_FILE, "LZ_FD_DUP": F.FD_DUP, "LZ_FD_GHOST": F.FD_GHOST, "LZ_FD_PIPE": F.FD_PIPE,
    "LZ_FD_SOCKET": F.FD_SOCKET, "LZ_CH_PIPE": F.CH_PIPE, "LZ_CH_SEQPACKET": F.CH_SEQPACKET,
    "LZ_TP_LIVE": F.TP_LIVE, "LZ_TP_ZOMBIE": F.TP_ZOMBIE,
    "LZ_CODEC_NONE": F.CODEC_NONE, "LZ_CODEC_LZ4": F.CODEC_LZ4, "LZ_CODEC_ZSTD": F.CODEC_ZSTD,
    "FJ_INODE": F.FJ_INODE, "FJ_DATA": F.FJ_DATA, "FJ_NAME": F.FJ_NAME, "FJ_MOVED": F.FJ_MOVED,
    "FJ_DIRTIME": F.FJ_DIRTIME, "FJ_BEGIN": F.FJ_BEGIN, "FJ_END": F.FJ_END,
    "FJ_WAS_ABSENT": F.FJ_WAS_ABSENT, "FJ_WAS_FILE": F.FJ_WAS_FILE, "FJ_WAS_DIR": F.FJ_WAS_DIR,
    "FJ_WAS_SYMLINK": F.FJ_WAS_SYMLINK,
}


def test_layouts_are_format_h(tmp_path):
    """sizeof and offsetof of every field the decoder knows, and the
    constants, as gcc sees common/format.h and files/journal.h."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "format.h"', '#include "journal.h"',
             'int main(void)', '{']
    for lay in F.LAYOUTS:
        lines.append(f'    printf("{lay.name} sizeof %zu\\n", sizeof(struct {lay.name}));')
        for name, _ in lay.fields:
            cname = {"job0": "job[0]", "job1": "job[1]"}.get(name, name)
            lines.append(f'    printf("{lay.name} {name} %zu\\n", offsetof(struct {lay.name}, {cname}));')
    for name in CONSTANTS:
        lines.append(f'    printf("const {name} %llu\\n", (unsigned long long)({name}));')
    lines += ["    return 0;", "}"]
    src = tmp_path / "layouts.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layouts"
    cp = subprocess.run(["gcc", "-std=gnu17", f"-I{REPO / 'common'}", f"-I{REPO / 'files'}", "-o", str(exe), str(src)],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    layouts = {lay.name: lay for lay in F.LAYOUTS}
    wrong = []
    for line in out.splitlines():
        what, name, value = line.split()
        value = int(value)
        if what == "const":
            mine = CONSTANTS[name]
        else:
            lay = layouts[what]
            mine = lay.size if name == "sizeof" else lay.offset(name)
        if mine != value:
            wrong.append(f"{what}.{name}: lzformat says {mine}, the compiler {value}")
    assert not wrong, "tests/lzformat.py disagrees with the C headers:\n" + "\n".join(wrong)


def test_xxh3_is_libxxhash():
    # the reference values of XXH3_64bits (xxHash's own test vectors, seed 0)
    assert F.xxh3(b"") == 0x2D06800538D394C2
    assert F.xxh3(b"a") == 0xE6C632B61E964E1F


def test_journal_codec_round_trip():
    recs = [(F.FJ_BEGIN, F.begin_payload((1, 2), 7, 42), 5),
            (F.FJ_NAME, F.with_strings(F.FJ_NAME_L.pack(was=F.FJ_WAS_SYMLINK, mode=0o120777), "/w/l", "target"), 6, 0),
            (F.FJ_DIRTIME, F.with_strings(F.FJ_DIRTIME_L.pack(atime_ns=1, mtime_ns=2), "/w"), 7)]
    data = F.encode_log(recs, seal=True, zeros=100)
    log = F.parse_log(data)
    assert log.end == "sealed", log.problem
    assert [r.type for r in log.records] == [F.FJ_BEGIN, F.FJ_NAME, F.FJ_DIRTIME, F.FJ_END]
    assert log.begin.fixed.index == 7 and log.begin.fixed.pid == 42 and log.begin.stamp == 5
    assert log.records[1].strings == ["/w/l", "target"] and log.records[1].fixed.was == F.FJ_WAS_SYMLINK
    assert log.records[3].fixed.records == 3
    assert b"".join(F.reencode(r) for r in log.records) + b"\0" * 100 == data
    open_log = F.parse_log(F.encode_log(recs, seal=False, zeros=4096))
    assert open_log.end == "open" and len(open_log.records) == 3
    bad = bytearray(data)
    bad[F.FJ_REC.size + 2] ^= 1  # inside BEGIN's payload
    assert F.parse_log(bytes(bad)).end == "damaged"


# --------------------------------------------------------------------------
# A real store
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scn(programs, lazarus_bin):
    """integrity_job's store (checkpoints A < B, killed after B) as the
    session's own identity."""
    mode = "root" if IS_ROOT else "user"
    base = _user_base() if IS_ROOT and mode == "user" else Path(tempfile.mkdtemp(prefix="lazarus-fmt-"))
    os.chmod(base, 0o755)
    runner = Runner(mode, base)
    prog = _compile("integrity_job", programs.dir)
    s = build_scenario(runner, prog, base / "s", "format")
    s.runner = runner
    yield s
    shutil.rmtree(base, ignore_errors=True)


def parts(store: Path, index: int) -> list[Path]:
    """The part directories of a checkpoint: its own and every proc.P/ of a
    live process (from its tree file)."""
    ck = ckpt_path(store, index)
    t = F.Tree.load(ck / "tree")
    return [ck / F.cstr(p.dir) if F.cstr(p.dir) else ck for p in t.procs if p.state == F.TP_LIVE]


def journals(store: Path, index: int) -> list[Path]:
    """Every files.log of the interval after checkpoint index."""
    return sorted(ckpt_path(store, index).rglob("files.log"))


def test_decoder_reads_the_store(scn):
    job = F.job_id(scn.store / "job")
    listed = {e["index"]: e for e in json.loads(scn.runner.lz("list", "-d", scn.store, "--json", check_rc=0).stdout)}
    assert sorted(listed) == [scn.a, scn.b]
    for idx in (scn.a, scn.b):
        ck = ckpt_path(scn.store, idx)
        t = F.Tree.load(ck / "tree")
        assert t.sealed() and t.header.index == idx and (t.header.job0, t.header.job1) == job
        assert F.Tree.build([p.fields() for p in t.procs], [x.fields() for x in t.shared],
                            **{k: v for k, v in t.header.fields().items() if k not in ("nprocs", "nshared")}) == t.data
        threads = 0
        for part in parts(scn.store, idx):
            raw = (part / "manifest").read_bytes()
            m = F.Manifest(raw)
            assert m.sealed(), part
            assert m.end == len(raw) - F.TRAILER_SIZE, "bytes between the last section and the trailer"
            assert m.header.index == idx and (m.header.job0, m.header.job1) == job
            assert m.rebuild() == raw, f"{part}/manifest: decoded and encoded again, the bytes differ"
            p = m.proc
            assert p.ngroups == len(m.groups) and F.xxh3(m.payload(F.SEC_GROUPS)) == p.groups_xxh3
            assert m.threads[0].tid == p.pid and sum(th.flags & F.TH_CKPT for th in m.threads) == 1
            assert m.string(p.cwd).startswith("/")
            # every frame an extent uses lies inside its pack, and the pack is the listed size
            for pk in m.packs:
                assert (part / m.string(pk.path)).stat().st_size == pk.size
            for pack_id, off, stored in m.referenced_frames():
                assert off + stored <= next(pk.size for pk in m.packs if pk.id == pack_id)
            threads += len(m.threads)
            if part == ck:
                main = m
        e = listed[idx]
        h = main.header
        assert (e["created_ns"], e["memory_bytes"], e["data_bytes"], e["changed_bytes"], e["stored_bytes"],
                e["parent"], e["pid"]) == (h.created_ns, h.mem_bytes, h.data_bytes, h.changed_bytes,
                                           h.stored_bytes, h.parent, main.proc.pid), e
        assert e["processes"] == len(t.procs) or e["processes"] == len(parts(scn.store, idx)), e
        assert e["threads"] == threads, e
    # the pipe and the nameless file the program holds are in B's manifest
    m = F.Manifest.load(ckpt_path(scn.store, scn.b) / "manifest")
    kinds = {f.kind for f in m.fds}
    assert F.FD_PIPE in kinds and F.FD_GHOST in kinds, kinds
    assert any(c.kind == F.CH_PIPE and c.bytes > 0 for c in m.chans)


def test_journals_decode(scn):
    """A's journal was let go at B (sealed by an END that counts them), B's
    was open when the job was killed (zeros after the last record); a
    child's ends either way (sealed at exit(), open after _exit());
    every record's checksum holds, every DATA record's bytes are in
    files.data, each log names the job, its interval and its process, and
    each record encodes to the same bytes."""
    job = F.job_id(scn.store / "job")
    seen_types = set()
    for idx, want_end in ((scn.a, "sealed"), (scn.b, "open")):
        logs = journals(scn.store, idx)
        assert len(logs) >= 2, f"checkpoint {idx}: want the program's and a child's journal: {logs}"
        for path in logs:
            raw = path.read_bytes()
            log = F.parse_log(raw)
            child = path.parent.name.startswith("proc.")
            assert log.end in ("open", "sealed") if child else log.end == want_end, f"{path}: {log.end} {log.problem}"
            b = log.begin
            assert b.type == F.FJ_BEGIN and (b.fixed.job0, b.fixed.job1) == job and b.fixed.index == idx
            m = re.fullmatch(r"proc\.(\d+)", path.parent.name)
            if m:
                assert b.fixed.pid == int(m.group(1)), path
            if log.end == "sealed":
                assert log.records[-1].fixed.records == len(log.records) - 1
            assert b"".join(F.reencode(r) for r in log.records) == raw[:log.tail]
            data = (path.parent / "files.data").read_bytes() if (path.parent / "files.data").exists() else b""
            for r in log.of_type(F.FJ_DATA):
                d = r.fixed
                assert d.data_off % 4096 == 0 and d.data_off + d.length <= len(data)
                assert F.xxh3(data[d.data_off:d.data_off + d.length]) == d.xxh3
            seen_types |= {r.type for r in log.records}
    assert {F.FJ_BEGIN, F.FJ_END, F.FJ_INODE, F.FJ_DATA, F.FJ_NAME} <= seen_types, seen_types


def _rel(scn, path: str) -> str | None:
    w = str(scn.work)
    if path == w:
        return "."
    return path[len(w) + 1:] if path.startswith(w + "/") else None


def test_journal_records_are_facts_about_their_checkpoint(scn):
    """The file model: for the interval after checkpoint N (every journal of
    it, merged), the first NAME record of a path says what the path was at N
    (absent, a file, a directory, a symlink with its target: as the test saw
    the work tree at N), and an inode whose name did not change in the
    interval had at N the size and permission bits of its INODE record."""
    checked = 0
    for idx in (scn.a, scn.b):
        at_n = scn.expected[idx]
        recs = []
        for path in journals(scn.store, idx):
            recs += [r for r in F.load_log(path).records if r.type in (F.FJ_NAME, F.FJ_INODE)]
        moved = [r.path for path in journals(scn.store, idx) for r in F.load_log(path).records if r.type == F.FJ_MOVED]
        recs.sort(key=lambda r: r.stamp)
        first_name, first_inode = {}, {}
        for r in recs:
            if r.type == F.FJ_NAME:
                first_name.setdefault(r.path, r)
            else:
                first_inode.setdefault((r.fixed.dev, r.fixed.ino), r)
        # a path below a directory whose name changed in the interval was
        # somewhere else at N
        renamed = set(moved) | {p for p, r in first_name.items() if r.fixed.was in (F.FJ_WAS_ABSENT, F.FJ_WAS_DIR)}

        def below_renamed(path):
            return any(path.startswith(d + "/") for d in renamed)

        for path, r in first_name.items():
            rel = _rel(scn, path)
            if rel is None or below_renamed(path):
                continue
            was, now = r.fixed.was, at_n.get(rel)
            where = f"checkpoint {idx}, {rel}: NAME says {was}, the tree had {now}"
            if was == F.FJ_WAS_ABSENT:
                assert now is None, where
            elif was == F.FJ_WAS_FILE:
                assert now and now[0] == "file" and int(now[1], 8) == r.fixed.mode & 0o7777, where
            elif was == F.FJ_WAS_DIR:
                assert now and now[0] == "dir", where
            elif was == F.FJ_WAS_SYMLINK:
                assert now == ("symlink", r.strings[1]), where
            checked += 1
        for r in first_inode.values():
            rel = _rel(scn, r.path)
            if rel is None or r.path in first_name or below_renamed(r.path):
                continue  # its name changed in the interval: the path may have held another file at N
            now = at_n.get(rel)
            where = f"checkpoint {idx}, {rel}: INODE says size {r.fixed.size} mode {oct(r.fixed.mode)}, the tree had {now}"
            assert now and now[0] == "file" and now[2] == r.fixed.size and int(now[1], 8) == r.fixed.mode & 0o7777, where
            checked += 1
    assert checked >= 10, f"only {checked} records checked"


# --------------------------------------------------------------------------
# The C readers' verdicts on edited files
# --------------------------------------------------------------------------
def _verify(scn, path: Path, content: bytes, at: int):
    """`lazarus verify -d DIR --at at` with path holding content; the file
    is given its bytes back afterwards."""
    old = path.read_bytes()
    st = path.stat()
    try:
        with open(path, "r+b") as f:
            f.write(content)
            f.truncate(len(content))
        return scn.runner.lz("verify", "-d", scn.store, "--at", str(at), timeout=60)
    finally:
        with open(path, "r+b") as f:
            f.write(old)
            f.truncate(len(old))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _expect(r, want: str | None, what: str):
    if want is None:
        assert r.rc == 0, f"{what}: the reader refused what the format allows\n{r}"
        return
    assert r.rc != 0, f"{what}: accepted\n{r}"
    lines = r.stderr_lines()
    assert len(lines) == 1, f"{what}: want exactly one line on stderr\n{r}"
    assert re.search(want, lines[0]), f"{what}: the line should match /{want}/\n{r}"


def _main_log(scn, idx):
    return ckpt_path(scn.store, idx) / "files.log"


def _child_log(scn, idx):
    logs = [p for p in journals(scn.store, idx) if p.parent.name.startswith("proc.")]
    assert logs, "no child journal"
    return logs[0]


def _records(path):
    return [(r.type, r.payload, r.stamp, r.flags) for r in F.load_log(path).records]


def _without_end(recs):
    return [r for r in recs if r[0] != F.FJ_END]


def _begin_with(recs, **fields):
    b = F.FJ_BEGIN_L.unpack(recs[0][1])
    v = b.fields()
    v.update(fields)
    return [(F.FJ_BEGIN, F.FJ_BEGIN_L.pack(**v), recs[0][2], 0)] + recs[1:]


def _first(recs, typ):
    return next(i for i, r in enumerate(recs) if r[0] == typ)


def _edit_fixed(recs, typ, **fields):
    """The first record of that type with fields of its fixed part changed."""
    i = _first(recs, typ)
    lay = F.FJ_FIXED[typ]
    v = lay.unpack(recs[i][1]).fields()
    v.update(fields)
    out = list(recs)
    out[i] = (typ, lay.pack(**v) + recs[i][1][lay.size:]) + recs[i][2:]
    return out


# Sealed logs (checkpoint A's, let go at B): (how the log is made from its
# records and raw bytes, the verdict: a regex of the one line, or None: intact)
SEALED = {
    "intact": (lambda recs, raw: raw, None),
    "re-encoded": (lambda recs, raw: F.encode_log(_without_end(recs)), None),
    "empty-sealed": (lambda recs, raw: F.encode_log(recs[:1]), None),
    "zeros-after-END": (lambda recs, raw: raw + b"\0" * 512, None),
    "record-after-END": (lambda recs, raw: raw + F.encode_record(*recs[1][:2], recs[1][2]), r"bytes follow its END record"),
    "END-miscounts": (lambda recs, raw: F.encode_log(_without_end(recs), seal=False)
                      + F.encode_record(F.FJ_END, F.end_payload(len(recs))), r"its END record counts \d+ records, it has \d+"),
    "no-END": (lambda recs, raw: F.encode_log(_without_end(recs), seal=False),
               r"is truncated \(it ends after \d+ records, without its END record\)"),
    "cut-inside-record": (lambda recs, raw: raw[:len(raw) - 3], r"is truncated inside record \d+"),
    "bad-check": (lambda recs, raw: F.encode_log(_without_end(recs[:2]), seal=False)
                  + F.encode_record(*recs[2][:2], recs[2][2], check=0x12345678)
                  + F.encode_log(_without_end(recs[3:]), seal=False)
                  + F.encode_record(F.FJ_END, F.end_payload(len(recs) - 1)),
                  r"record 3 at offset \d+ fails its checksum"),
    "unknown-type": (lambda recs, raw: F.encode_log(_without_end(recs[:1]) + [(99, b"x" * 8)] + _without_end(recs[1:])),
                     r"is damaged at offset \d+ \(record 2\)"),
    "payload-shorter-than-its-type": (lambda recs, raw: F.encode_log(
        _without_end(recs[:1]) + [(F.FJ_DATA, b"\0" * 8)] + _without_end(recs[1:])), r"is damaged at offset \d+ \(record 2\)"),
    "other-index": (lambda recs, raw: F.encode_log(_without_end(_begin_with(recs, index=99))),
                    r"is the journal of checkpoint 99, not of checkpoint \d+"),
    "other-job": (lambda recs, raw: F.encode_log(_without_end(_begin_with(recs, job0=1, job1=2))), r"belongs to another job"),
    "no-BEGIN": (lambda recs, raw: F.encode_log(_without_end(recs[1:])), r"does not begin with its BEGIN record"),
    "second-BEGIN": (lambda recs, raw: F.encode_log(_without_end(recs[:1] + recs)), r"a second BEGIN record"),
    "path-without-NUL": (lambda recs, raw: F.encode_log(_without_end(
        recs[:_first(recs, F.FJ_NAME)] + [(F.FJ_NAME, recs[_first(recs, F.FJ_NAME)][1].rstrip(b"\0") + b"x")]
        + recs[_first(recs, F.FJ_NAME) + 1:])), r"record \d+ is malformed"),
    "DATA-past-files.data": (lambda recs, raw: F.encode_log(_without_end(_edit_fixed(recs, F.FJ_DATA, data_off=1 << 40))),
                             r"files\.data is truncated or missing"),
    "DATA-unaligned": (lambda recs, raw: F.encode_log(_without_end(_edit_fixed(recs, F.FJ_DATA, data_off=100))),
                       r"files\.data is truncated or missing"),
    "DATA-other-bytes": (lambda recs, raw: F.encode_log(_without_end(_edit_fixed(
        recs, F.FJ_DATA, xxh3=F.FJ_DATA_L.unpack(recs[_first(recs, F.FJ_DATA)][1]).xxh3 ^ 1))),
        r"files\.data is damaged: the \d+ bytes saved at offset \d+ fail their checksum"),
}


@pytest.mark.parametrize("case", list(SEALED))
def test_sealed_journal_verdict(scn, case):
    make, want = SEALED[case]
    path = _main_log(scn, scn.a)
    raw = path.read_bytes()
    r = _verify(scn, path, make(_records(path), raw), scn.a)
    _expect(r, want, f"checkpoint {scn.a}'s files.log, {case}")
    if want:
        assert re.search(rf"ckpt\.{scn.a:06d}/files\.(log|data)", r.stderr), f"the line should name the file\n{r}"


def test_child_journal_names_its_process(scn):
    path = _child_log(scn, scn.a)
    recs = _records(path)
    pid = F.FJ_BEGIN_L.unpack(recs[0][1]).pid
    r = _verify(scn, path, F.encode_log(_without_end(_begin_with(recs, pid=pid + 1))), scn.a)
    _expect(r, rf"is the journal of process {pid + 1}, not of process {pid}", "a child's journal of another process")
    # another process's journal of the same interval, moved here
    r = _verify(scn, path, _main_log(scn, scn.a).read_bytes(), scn.a)
    _expect(r, r"is the journal of process \d+, not of process \d+", "the program's journal as the child's")


# Open logs (checkpoint B's, the job killed): the window's zeros follow the
# last record
OPEN = {
    "intact": (lambda raw, tail: raw, None),
    "no-zeros": (lambda raw, tail: raw[:tail], r"is truncated \(it ends after \d+ records, without its END record\)"),
    "some-zeros": (lambda raw, tail: raw[:tail + 10], None),
    "torn-record": (lambda raw, tail: raw[:tail] + F.encode_record(F.FJ_DIRTIME, b"\xaa" * 24, 1, magic=0)
                    + b"\0" * 4096, None),
    "record-after-zeros": (lambda raw, tail: raw[:tail] + b"\0" * 64 + raw[F.parse_log(raw).records[1].off:tail]
                           + b"\0" * 4096, r"is damaged at offset \d+ \(record \d+ is zeroed, later records follow\)"),
    "zeroed-BEGIN": (lambda raw, tail: b"\0" * tail + raw[tail:], r"does not begin with its BEGIN record"),
    "sealed-after-kill": (lambda raw, tail: raw[:tail] + F.encode_record(
        F.FJ_END, F.end_payload(len(F.parse_log(raw).records))), None),
}


@pytest.mark.parametrize("case", list(OPEN))
def test_open_journal_verdict(scn, case):
    make, want = OPEN[case]
    path = _main_log(scn, scn.b)
    raw = path.read_bytes()
    log = F.parse_log(raw)
    assert log.end == "open" and len(log.records) >= 2
    r = _verify(scn, path, make(raw, log.tail), scn.b)
    _expect(r, want, f"checkpoint {scn.b}'s open files.log, {case}")


# Manifests (B's, edited and re-sealed unless said): the verdict's regex or None
def _m_set(rec_of, field, value):
    def edit(m):
        m.set(rec_of(m), field, value)
    return edit


def _sections_edit(fn):
    """Replace the manifest by one made of fn(list of (type, payload))."""
    def edit(m):
        secs = [(s.type, bytes(m.data[s.off:s.off + s.length])) for s in m.sections]
        m.data[:] = m.rebuild(fn(secs))
    return edit


def _resize(typ, delta):
    return _sections_edit(lambda secs: [(t, p + b"\0" * delta if delta > 0 else p[:delta]) if t == typ else (t, p)
                                        for t, p in secs])


def _drop(typ):
    return _sections_edit(lambda secs: [(t, p) for t, p in secs if t != typ])


def _widen(m, delta, only=None):
    """Every array section's records (or only's) delta bytes longer (zeros
    after each) or shorter, its record size said so: a newer (older) layout."""
    secs = []
    for s in m.sections:
        p, rs = bytes(m.data[s.off:s.off + s.length]), s.record_size
        if rs and s.type in F.SECTION_LAYOUT and (only is None or s.type == only):
            recs = [p[i:i + rs] for i in range(0, len(p), rs)]
            p = b"".join(r + b"\0" * delta if delta > 0 else r[:delta] for r in recs)
            rs += delta
        secs.append((s.raw_type, p, rs))
    m.data[:] = m.rebuild(secs)


def _thread_swap(m):
    th = m.threads
    assert len(th) >= 1
    m.set(th[0], "tid", th[0].tid + 100000)


def _frame_field(field, value):
    return _m_set(lambda m: m.frames[0], field, value)


MANIFEST = {
    "resealed-unchanged": (lambda m: None, None),
    "unknown-section": (_sections_edit(lambda secs: secs + [(77, b"future")]), None),
    "not-sealed": (lambda m: m.data.__setitem__(len(m.data) - 1, m.data[-1] ^ 1), r"manifest checksum mismatch"),
    "header-size": (_m_set(lambda m: m.header, "header_size", 120), r"manifest header is malformed"),
    "trailing-data": (lambda m: m.data.extend(b"\0" * 8), r"manifest is truncated or has trailing data"),
    "section-past-end": (lambda m: m.set(F.SECTION.unpack(m.data, m.sections[-1].head), "length", 1 << 40),
                         r"manifest section table is malformed"),
    "proc-size": (_resize(F.SEC_PROC, 8), r"manifest process record is malformed"),
    "regions-size": (_resize(F.SEC_REGIONS, 8), r"manifest regions are malformed"),
    "extents-size": (_resize(F.SEC_EXTENTS, 8), r"manifest extents are malformed"),
    "frames-size": (_resize(F.SEC_FRAMES, -8), r"manifest frames are malformed"),
    "fds-size": (_resize(F.SEC_FDS, 8), r"manifest descriptors are malformed"),
    "chans-size": (_resize(F.SEC_CHANS, 8), r"manifest pipe and socket list is malformed"),
    "threads-size": (_resize(F.SEC_THREADS, 8), r"manifest thread list is malformed"),
    "no-proc": (_drop(F.SEC_PROC), r"manifest has no process record"),
    "no-threads": (_drop(F.SEC_THREADS), r"manifest thread list is malformed"),
    "groups-count": (_m_set(lambda m: m.proc, "ngroups", 7), r"manifest group list is malformed"),
    "strings-unterminated": (_sections_edit(lambda secs: [(t, p + b"x" if t == F.SEC_STRINGS else p) for t, p in secs]),
                             r"manifest string table is malformed"),
    "cwd-out-of-table": (_m_set(lambda m: m.proc, "cwd", 1 << 30), r"manifest process record is malformed"),
    "npending": (_m_set(lambda m: m.proc, "npending", 65), r"manifest process record is malformed"),
    "first-thread-not-main": (_thread_swap, r"manifest thread list is malformed"),
    "no-checkpointing-thread": (_m_set(lambda m: next(t for t in m.threads if t.flags & F.TH_CKPT), "flags", 0),
                                r"manifest thread list is malformed"),
    "frame-pack": (_frame_field("pack", 1000), r"manifest frame 0 is malformed"),
    "frame-codec": (_frame_field("codec", 9), r"manifest frame 0 is malformed"),
    "frame-raw": (_frame_field("raw", 4095), r"manifest frame 0 is malformed"),
    "frame-past-pack": (_frame_field("offset", 1 << 40), r"manifest frame 0 is malformed"),
    "pack-size": (_m_set(lambda m: m.packs[0], "size", 1), r"manifest frame \d+ is malformed|has 1 bytes|has \d+ bytes, expected 1"),
    "region-empty": (_m_set(lambda m: m.regions[0], "end", 0), r"manifest region 0 is malformed"),
    "region-extents": (_m_set(lambda m: m.regions[0], "nextents", 1 << 30), r"manifest region 0 is malformed"),
    "extent-frame": (_m_set(lambda m: next(x for x in m.extents if x.frame != F.FRAME_ZERO), "frame", 1 << 20),
                     r"manifest extent \d+ is malformed"),
    "extent-unaligned": (lambda m: m.set(m.extents[0], "addr", m.extents[0].addr + 1), r"manifest extent 0 is malformed"),
    "fd-dup-of-nothing": (lambda m: (m.set(m.fds[-1], "kind", F.FD_DUP), m.set(m.fds[-1], "dup_of", 999)),
                          r"manifest descriptor table is malformed"),
    "other-job": (_m_set(lambda m: m.header, "job0", 12345), r"its manifest belongs to another job"),
    "other-index": (_m_set(lambda m: m.header, "index", 99), r"its manifest is checkpoint 99's, not checkpoint \d+'s"),
    "foreign-version": (_m_set(lambda m: m.header, "version", F.VERSION + 1),
                        rf"checkpoint format version {F.VERSION + 1} was written by a newer Lazarus "
                        rf"\(this build reads versions {F.VERSION_MIN} to {F.VERSION}\)"),
    "version-4": (_m_set(lambda m: m.header, "version", 4), r"checkpoint format version 4 is too old for this build"),
    "byte-order": (_m_set(lambda m: m.header, "byte_order", 0x04030201), r"written on a machine of the other byte order"),
    "must-understand-section": (_sections_edit(lambda secs: secs + [(77 | F.SEC_MUST, b"future")]),
                                r"written by a newer Lazarus: section 77 it must understand"),
    "longer-records": (lambda m: _widen(m, 8), None),
    "shorter-records": (lambda m: _widen(m, -8, F.SEC_REGIONS),
                        r"manifest regions are malformed \(records of 96 bytes, shorter than the 104 of this version\)"),
}


@pytest.mark.parametrize("case", list(MANIFEST))
def test_manifest_verdict(scn, case):
    edit, want = MANIFEST[case]
    path = ckpt_path(scn.store, scn.b) / "manifest"
    m = F.Manifest.load(path)
    edit(m)
    if case != "not-sealed":
        m.seal()
    r = _verify(scn, path, bytes(m.data), scn.b)
    _expect(r, want, f"checkpoint {scn.b}'s manifest, {case}")
    if want:
        assert f"ckpt.{scn.b:06d}" in r.stderr or f"checkpoint {scn.b}" in r.stderr, f"the line should name it\n{r}"


TREE = {
    "resealed-unchanged": (lambda t: None, None),
    "no-procs": (lambda t: t.set(t.header, "nprocs", 0), r"truncated or has impossible counts"),
    "other-job": (lambda t: t.set(t.header, "job1", 5), r"its process tree belongs to another job"),
    "other-index": (lambda t: t.set(t.header, "index", 98), r"its process tree is checkpoint 98's"),
    "version": (lambda t: t.set(t.header, "version", 4), r"its process tree has format version 4 \(this build reads versions 5 to 6\)"),
    "not-sealed": (lambda t: t.data.__setitem__(len(t.data) - 1, t.data[-1] ^ 1), r"its process tree fails its checksum"),
}


@pytest.mark.parametrize("case", list(TREE))
def test_tree_verdict(scn, case):
    edit, want = TREE[case]
    path = ckpt_path(scn.store, scn.b) / "tree"
    t = F.Tree.load(path)
    edit(t)
    if case != "not-sealed":
        t.seal()
    r = _verify(scn, path, bytes(t.data), scn.b)
    _expect(r, want, f"checkpoint {scn.b}'s tree, {case}")
