"""`lazarus show`, the checkpoint inspector: a known program
(programs/show_prog.c: two named threads, a pipe and a socket pair with bytes
queued, a shared file mapping, files written after the checkpoint) is
checkpointed while it waits, and `show --json` must name what /proc of the
live program said at that checkpoint (read from outside the job): its
threads (TIDs and names), the mapped file, heap and stack by their ranges,
its descriptors (numbers, kinds, paths, pipe and socket inodes), the pipe and
the socket with their queued bytes, and the files the interval changed (the
journal: what a rollback would undo, per file).  A thread's own registers
(programs/show_regs.c: known values in r12-r15 while it spins) are decoded
from the signal frame the checkpoint holds, in a full checkpoint and an
incremental one.  It reads a running job's
store without blocking it and never writes to a store; bad inputs (no store,
no such checkpoint, an unknown section, a damaged manifest) are refused with
one line and a non-zero exit, the store untouched.  As root and as an
ordinary user."""
import json
import os
import re
import signal
from pathlib import Path

import pytest

import lzformat
from conftest import _compile, ckpt_path, find_program, snapshot
from s3server import s3server  # noqa: F401  (the fixture)


@pytest.fixture(scope="module")
def show_prog(programs):
    return _compile("show_prog", programs.dir, ["-pthread"])


@pytest.fixture(scope="module")
def show_regs(programs):
    return _compile("show_regs", programs.dir, ["-pthread"])


def show(runner, store, *args, check=True):
    """`lazarus show --json` parsed (check: it must succeed)."""
    r = runner.lz("show", "-d", store, "--json", *[str(a) for a in args], timeout=60)
    if not check:
        return r
    assert r.rc == 0, f"show failed\n{r}"
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"show --json printed no JSON\n{r}")


def proc_state(pid: int) -> dict:
    """What /proc says of the live program: its threads, descriptors and the
    ranges of its heap, stack and the mapped file."""
    task = Path(f"/proc/{pid}/task")
    threads = {int(t): (task / t / "comm").read_text().strip() for t in os.listdir(task)}
    fds = {}
    for n in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds[int(n)] = os.readlink(f"/proc/{pid}/fd/{n}")
        except FileNotFoundError:
            pass
    maps = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        f = line.split(maxsplit=5)
        a, b = (int(x, 16) for x in f[0].split("-"))
        maps.append((a, b, f[1], f[5] if len(f) > 5 else ""))
    return {"threads": threads, "fds": fds, "maps": maps}


def _start(runner, show_prog, name="w"):
    work = runner.mkdir(name)
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", show_prog, work)
    m = proc.wait_for_output(r"^ready (\d+) (\d+) (\d+) (\d+)$", timeout=60)
    pid = find_program(proc.pid, "show-main")
    assert pid, proc.stderr
    return work, store, proc, pid, [int(x) for x in m.groups()]


def test_show_names_what_the_live_program_holds(runner, show_prog):
    # a directory name JSON must escape: quotes, a backslash, a tab, a non-ASCII letter
    work, store, proc, pid, (pr, pw, sa, sb) = _start(runner, show_prog, 'w "q"\\\u00e9\tt')
    try:
        before = proc_state(pid)
        idx = runner.checkpoint_when_up(store)
        after = proc_state(pid)
        d = show(runner, store)  # the job still runs: read-only, no lock
        assert d["index"] == idx and d["processes"] == 1, d

        # the process tree
        assert [(p["pid"], p["comm"], p["state"]) for p in d["tree"]] == [(pid, "show-main", "live")], d["tree"]

        # threads: exactly /proc's TIDs with the names the program gave them
        assert before["threads"] == after["threads"], "the program's threads changed around the checkpoint"
        got = {t["tid"]: t["name"] for t in d["threads"] if t["pid"] == pid}
        assert got == after["threads"], (got, after["threads"])
        assert set(got.values()) == {"show-main", "show-worker"}, got
        assert sum(t["checkpointing"] for t in d["threads"]) == 1, d["threads"]
        assert all(t["registers"]["rsp"] and t["registers"]["rip"] for t in d["threads"]), d["threads"]

        # regions: the mapped file, the heap and the stack by their ranges in /proc's maps
        regions = [r for r in d["regions"] if r["pid"] == pid]
        def live_range(pred):
            hits = [(a, b) for a, b, _, name in after["maps"] if pred(name)]
            assert len(hits) == 1, (hits, after["maps"])
            return hits[0]
        mapped = str(work / "mapped.bin")
        mf = [r for r in regions if r["path"] == mapped]
        assert [(r["start"], r["end"], r["kind"], r["prot"]) for r in mf] == \
            [(*live_range(lambda n: n == mapped), "file-shared", "rw-s")], mf
        heap = [r for r in regions if r["path"] == "[heap]" or "heap" in r["flags"]]
        assert [(r["start"], r["end"]) for r in heap] == [live_range(lambda n: n == "[heap]")], heap
        stack = [r for r in regions if r["path"] == "[stack]" or "stack" in r["flags"]]
        assert [(r["start"], r["end"]) for r in stack] == [live_range(lambda n: n == "[stack]")], stack
        assert all(r["size"] == r["end"] - r["start"] and r["kind"] in
                   ("anon", "file-private", "file-shared", "shared-anon", "vdso") for r in regions), regions

        # descriptors: each one shown is open in /proc with what it names there
        fds = {f["fd"]: f for f in d["fds"] if f["pid"] == pid}
        live = after["fds"]
        want = {pr: ("pipe", "r"), pw: ("pipe", "w"), sa: ("socketpair", "rw"), sb: ("socketpair", "rw")}
        for fd, (kind, access) in want.items():
            assert (fds[fd]["kind"], fds[fd]["access"]) == (kind, access), fds[fd]
            what = "pipe" if kind == "pipe" else "socket"
            assert live[fd] == f"{what}:[{fds[fd]['ino']}]", (fd, live[fd], fds[fd])
        for fd, f in fds.items():
            if f["kind"] == "control":
                continue  # the runtime's channel
            assert fd in live, (fd, f, live)
            if f["kind"] in ("file", "dir", "device"):
                assert f["path"] == live[fd], (f, live[fd])

        # chans: the pipe with its 1234 bytes, the pair with 777 queued at its second end
        chans = {(c["object"], c["ino"]): c for c in d["chans"] if c["pid"] == pid}
        pipe = chans[("pipe", fds[pr]["ino"])]
        assert (pipe["kind"], pipe["queued_bytes"], sorted(pipe["fds"])) == ("pipe", 1234, sorted([pr, pw])), pipe
        b = chans[("socketpair", fds[sb]["ino"])]
        a = chans[("socketpair", fds[sa]["ino"])]
        assert (b["kind"], b["queued_bytes"], b["fds"], b["peer"]) == ("stream", 777, [sb], a["ino"]), b
        assert (a["queued_bytes"], a["fds"], a["peer"]) == (0, [sa], b["ino"]), a

        # the journal: nothing changed yet; then the program writes a.txt and makes b.txt
        assert d["journal"]["target"] == idx and d["journal"]["files"] == [], d["journal"]
        runner.touch(work / "go")
        proc.wait_for_output(r"^wrote$", timeout=30)
        j = show(runner, store, "--at", idx, "journal")
        assert set(j) >= {"index", "journal"} and "threads" not in j, j.keys()
        files = {f["path"]: f for f in j["journal"]["files"]}
        assert {p: f["change"] for p, f in files.items()} == \
            {str(work / "a.txt"): "modified", str(work / "b.txt"): "removed"}, files
        assert files[str(work / "a.txt")]["saved_bytes"] >= 3, files  # its overwritten bytes at least
        assert [i["index"] for i in j["journal"]["intervals"]] == [idx], j["journal"]
        # a later checkpoint: its own interval has changed nothing, the earlier one still lists them
        idx2 = runner.checkpoint(store)
        assert show(runner, store, "journal")["journal"]["files"] == []
        j = show(runner, store, "--at", idx, "journal")["journal"]
        assert sorted(f["path"] for f in j["files"]) == [str(work / "a.txt"), str(work / "b.txt")], j
        assert [i["index"] for i in j["intervals"]] == [idx, idx2], j

        # packs: every one of them with its live part; those the checkpoint reads say so
        packs = show(runner, store, "packs")["packs"]
        assert packs and all(0 <= p["live_fraction"] <= 1 and p["live_bytes"] <= p["size"] for p in packs), packs
        assert any(p["used"] and p["index"] == idx2 for p in packs), packs

        # the text form: aligned tables with names, not numbers
        t = runner.lz("show", "-d", store, "--at", idx, timeout=60)
        assert t.rc == 0, str(t)
        for word in ("show-worker", "mapped.bin", "file-shared", "socketpair", "heap", "a.txt", "pack."):
            assert word in t.stdout, (word, t.stdout)
    finally:
        runner.touch(work / "stop")
    assert proc.wait(timeout=60) == 0, proc.stderr


SPIN_REGS = {"r12": 0x1122334455667788, "r13": 0x99aabbccddeeff00,
             "r14": 0x0123456789abcdef, "r15": 0xfedcba9876543210}


def _frame_pack(store, idx, addr) -> int:
    """N of the pack.N that holds memory at addr in checkpoint idx (-1: zeros / not stored)."""
    m = lzformat.Manifest.load(ckpt_path(store, idx) / "manifest")
    ids, frames = m.pack_ids(), m.frames
    for x in m.extents:
        if x.addr <= addr < x.addr + x.length:
            return -1 if x.frame == lzformat.FRAME_ZERO else ids[frames[x.frame].pack]
    return -1


def test_show_decodes_the_programs_registers(runner, show_regs):
    """A thread spinning with known r12-r15, interrupted anywhere by the
    checkpoint: `show --json threads` gives exactly those, a rip inside the
    program's executable text and the signal mask it set; the main thread's
    rsp is in its [stack] and its rip in executable memory (all checked
    against /proc/PID/maps, read from outside the job).  The same after an
    incremental second checkpoint, whose chain may keep the frame in an older
    pack, and for the first one again; a manifest without the frame's address
    (an older image) gives "program": null with the reason, and so does a
    damaged frame under the signal frame (for that thread only, exit 0)."""
    work = runner.mkdir("w")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--", show_regs, work)
    try:
        m = proc.wait_for_output(r"^ready (\d+)$", timeout=60)
        spin_tid = int(m.group(1))
        pid = find_program(proc.pid, "regs-main")
        assert pid, proc.stderr
        maps = []
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            f = line.split(maxsplit=5)
            a, b = (int(x, 16) for x in f[0].split("-"))
            maps.append((a, b, f[1], f[5] if len(f) > 5 else ""))
        exe = os.path.realpath(show_regs)
        text = [(a, b) for a, b, perm, name in maps if name == exe and "x" in perm]
        assert text, maps
        (stack,) = [(a, b) for a, b, _, name in maps if name == "[stack]"]
        blocked = (1 << (signal.SIGUSR2 - 1)) | (1 << (signal.SIGWINCH - 1))  # what the spinning thread set

        def check(idx):
            d = show(runner, store, "--at", idx, "threads")
            threads = {t["tid"]: t for t in d["threads"] if t["pid"] == pid}
            assert set(threads) == {pid, spin_tid}, d["threads"]
            spin, main = threads[spin_tid]["program"], threads[pid]["program"]
            assert spin is not None and main is not None, threads
            assert {r: spin[r] for r in SPIN_REGS} == SPIN_REGS, (idx, spin)
            assert any(a <= spin["rip"] < b for a, b in text), (hex(spin["rip"]), text)
            assert spin["signal_mask"] == blocked, hex(spin["signal_mask"])
            assert stack[0] <= main["rsp"] < stack[1], (hex(main["rsp"]), stack)
            assert any(a <= main["rip"] < b and "x" in perm for a, b, perm, _ in maps), hex(main["rip"])
            assert main["rbp"] != SPIN_REGS["r12"] and main["r12"] != SPIN_REGS["r12"], main
            for t in threads.values():  # the handler's resume point stays, apart
                assert t["registers"]["rip"] and t["registers"]["rip"] != t["program"]["rip"], t
                assert t["program_reason"] is None, t
            return threads

        idx = runner.checkpoint_when_up(store)
        threads = check(idx)
        idx2 = runner.checkpoint(store)
        threads2 = check(idx2)
        check(idx)
        # the second is incremental: its manifest reads pages of the first one's pack too (a signal
        # frame itself is written anew at each checkpoint: it is in the pack of the one it belongs to)
        chain = lzformat.Manifest.load(ckpt_path(store, idx2) / "manifest")
        assert idx in chain.referenced_packs(), chain.referenced_packs()
        assert {_frame_pack(store, idx2, v["program"]["frame"]) for v in threads2.values()} <= chain.referenced_packs()
        assert threads[spin_tid]["program"]["rip"] == threads2[spin_tid]["program"]["rip"], (threads, threads2)

        # the text form: a block per thread
        t = runner.lz("show", "-d", store, "threads", timeout=60)
        assert t.rc == 0 and "program registers" in t.stdout and "0x1122334455667788" in t.stdout, str(t)
    finally:
        runner.touch(work / "stop")
    assert proc.wait(timeout=60) == 0, proc.stderr

    # an older image: the field was reserved (0); "program" is null with the reason
    path = ckpt_path(store, idx2) / "manifest"
    m = lzformat.Manifest.load(path)
    for th in m.threads:
        m.set(th, "ucontext", 0)
    m.save(path)
    d = show(runner, store, "--at", idx2, "threads")
    assert all(t["program"] is None and "not recorded" in t["program_reason"] for t in d["threads"]), d["threads"]
    t = runner.lz("show", "-d", store, "--at", idx2, "threads", timeout=60)
    assert t.rc == 0 and "program registers: not recorded" in t.stdout, str(t)

    # a damaged frame under the spinning thread's signal frame: said for that thread, the others shown
    m = lzformat.Manifest.load(ckpt_path(store, idx) / "manifest")
    # (the registers lie in the signal frame's first 256 bytes, which may cross into the next page data frame)
    addr = threads[spin_tid]["program"]["frame"]
    flipped = sorted({x.frame for x in m.extents if x.addr < addr + 256 and addr < x.addr + x.length})
    assert flipped, "the signal frame is in no extent"
    for fi in flipped:
        f = m.frames[fi]
        pack = ckpt_path(store, idx) / m.string(m.packs[f.pack].path)
        data = bytearray(pack.read_bytes())
        # many bytes: one flipped byte of a match offset inside zeros can expand to the same page
        for k in range(f.offset + f.stored // 4, f.offset + f.stored // 4 + min(256, f.stored // 2)):
            data[k] ^= 0x55
        pack.write_bytes(bytes(data))
    d = show(runner, store, "--at", idx, "threads")
    got = {t["tid"]: t for t in d["threads"]}
    assert got[spin_tid]["program"] is None, got[spin_tid]
    assert re.search(r"unreadable: .*(fails its checksum|does not expand)", got[spin_tid]["program_reason"]), got[spin_tid]
    main_at = threads[pid]["program"]["frame"]
    mine = {e.frame for e in m.extents if e.addr < main_at + 256 and main_at < e.addr + e.length}
    if not mine & set(flipped):  # its frames are other ones: still read
        assert got[pid]["program"] == threads[pid]["program"], got[pid]


def test_bad_inputs_refused_store_untouched(runner, show_prog):
    work, store, proc, pid, _ = _start(runner, show_prog)
    idx = runner.checkpoint_when_up(store)
    runner.touch(work / "stop")
    assert proc.wait(timeout=60) == 0, proc.stderr
    snap = snapshot(store)
    assert show(runner, store)["index"] == idx
    for what in ("tree", "threads", "regions", "fds", "chans", "journal", "packs"):
        d = show(runner, store, what)
        assert what in d and d["index"] == idx, (what, d.keys())

    def refused(args, rc, pattern):
        r = runner.lz("show", *args, timeout=60)
        assert r.rc == rc and r.stdout == "" and len(r.stderr_lines()) == 1, str(r)
        assert re.search(pattern, r.stderr), str(r)

    refused(["-d", runner.base / "nothing"], 240, "no checkpoint store")  # lazarus(1) EXIT STATUS
    refused(["-d", store, "--at", str(idx + 40)], 240, rf"no checkpoint {idx + 40}")
    refused(["-d", store, "memory"], 2, "'memory' is none of")
    refused(["-d", store, "tree", "fds"], 2, "unexpected argument")
    refused(["-d", store, "--at", "x"], 2, "whole number")
    refused(["-d", store, "--force"], 2, "does not apply")
    assert snapshot(store) == snap, "show changed the store"

    # a damaged manifest: one line naming it, nothing changed
    manifest = ckpt_path(store, idx) / "manifest"
    data = bytearray(manifest.read_bytes())
    data[len(data) // 2] ^= 0x40
    manifest.write_bytes(bytes(data))
    snap = snapshot(store)
    for args in (["-d", store], ["-d", store, "--json", "threads"]):
        refused(args, 244, rf"checkpoint {idx} is damaged: .*manifest")
    assert snapshot(store) == snap, "show changed a damaged store"


def test_show_remote_checkpoint(runner, show_prog, s3server):
    """-d s3://: the published checkpoint, fetched into a scratch directory of
    $TMPDIR (removed after), shows the same threads and queued bytes."""
    from test_s3_flush import wait_published
    runner.env.update(s3server.env())
    url = f"s3://{s3server.bucket()}/show"
    work = runner.mkdir("w")
    store = runner.base / "store"
    proc = runner.start_lz("run", "-d", store, "-i", "0", "--remote", url, "--", show_prog, work)
    try:
        proc.wait_for_output(r"^ready ", timeout=60)
        idx = runner.checkpoint_when_up(store)
        wait_published(runner, store, idx, proc)
        local = show(runner, store, "--at", idx)
        for what in ("threads", "chans"):
            d = show(runner, url, what)
            assert d["index"] == idx, d
            assert d[what] == local[what], (what, d[what], local[what])
        d = show(runner, url)  # all but the journal, which is where the job kept it (not --journal-dir here)
        assert "journal" not in d and len(d["threads"]) == 2 and d["packs"], d
        r = show(runner, url, "journal", check=False)
        assert r.rc == 1 and len(r.stderr_lines()) == 1 and "journal" in r.stderr, str(r)
        assert not [n for n in os.listdir(runner.base) if n.startswith("lazarus-show-")], "scratch left behind"
    finally:
        runner.touch(work / "stop")
    assert proc.wait(timeout=60) == 0, proc.stderr
