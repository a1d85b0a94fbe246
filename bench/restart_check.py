#!/usr/bin/env python3
"""What phase 1's frame check costs a restart (issue 15, "a restart in two phases").

Before it rolls any file back, `lazarus restart` reads every frame the
restorer will map and checks the XXH3-64 of its stored bytes
(store/frames_check.c).  This measures `lazarus restart` of a 1 GiB program
from the newest checkpoint of an incremental chain with that check and
without it (LAZARUS_NO_FRAME_CHECK=1, a knob for this comparison only), and
reports the ratio.  Target: <= 1.1.

The program is bench/programs/incrheap.c: MIB MiB written with PATTERN, a full
checkpoint through the C API, then ROUNDS times DIRTY % of the pages
rewritten and an incremental API checkpoint; then it is SIGKILLed.  The
newest checkpoint references frames of every pack of the chain.  Each
restart (`restart --at NEWEST`) is timed from just before `lazarus restart`
is launched to the CLOCK_REALTIME the program writes as soon as
lazarus_checkpoint() returns LAZARUS_RESTARTED (it then checks its heap and
exits 0, and the next restart starts from the same checkpoint).  Restarts
with and without the check alternate in pairs, the order swapped from pair
to pair; the ratio is taken within each pair and the median reported.  One
restart first warms the page cache.  --cold drops the caches before every
restart (root only): the check then reads the packs from the disk and the
restorer finds them in the page cache.

Patterns: random (nothing compresses: frames stored raw, the check hashes
all MIB MiB; the worst case) and halfzero (every page half zeros: lz4 frames
of about half the size, which the restorer must expand).

    make && python3 bench/restart_check.py [--reps 5] [--mib 1024] [--patterns random,halfzero] [--cold]

Standard library only.  Results in WORKDIR/results.json (default
bench/out/restart_check).  Exits 1 if the target is missed.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time

from ckpt_restart import LineReader, descendants, log, ready_workdir, store_options

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 1.1
FRAME_SIZE = 40  # sizeof(struct lz_frame)


def build(outdir):
    src = os.path.join(ROOT, "bench", "programs", "incrheap.c")
    lib = os.path.join(ROOT, "build", "lib")
    out = os.path.join(outdir, "incrheap")
    subprocess.run([os.environ.get("CC", "cc"), "-std=c17", "-O2", "-Wall",
                    "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "bench", "programs"),
                    "-o", out, src, "-L" + lib, "-llazarus", "-Wl,-rpath," + lib], check=True)
    return out


def checked_bytes(manifest):
    """(bytes the frame check reads, packs they are in, memory bytes they expand to):
    the stored bytes of every distinct frame an extent references."""
    with open(manifest, "rb") as f:
        data = f.read()
    header_size = struct.unpack_from("<I", data, 12)[0]
    nsections = struct.unpack_from("<I", data, 52)[0]
    off, sec = header_size, {}
    for _ in range(nsections):
        typ, _, length = struct.unpack_from("<IIQ", data, off)
        sec[typ] = data[off + 16:off + 16 + length]
        off += 16 + ((length + 7) & ~7)
    frames = [struct.unpack_from("<IIQII", sec[8], i) for i in range(0, len(sec[8]), FRAME_SIZE)]
    used = set()
    for i in range(0, len(sec[3]), 24):
        fr = struct.unpack_from("<QIIII", sec[3], i)[2]
        if fr != 0xFFFFFFFF:
            used.add(fr)
    spans = {(frames[k][0], frames[k][2]): (frames[k][3], frames[k][4]) for k in used}
    return (sum(s for s, _ in spans.values()), len({p for p, _ in spans}), sum(r for _, r in spans.values()))


def drain(reader):
    lines = []
    while True:
        try:
            line = reader.get(0.1, "stderr")
        except RuntimeError:
            return " | ".join(lines[-8:]) or "(nothing)"
        lines.append(line)


def make_chain(args, prog, pattern, tsfile, rounds=None):
    """A killed job whose newest checkpoint is the last of a chain of `rounds`
    increments (0: one full checkpoint): (store, index)."""
    rounds = args.rounds if rounds is None else rounds
    store = os.path.join(args.workdir, f"store.{pattern}.{rounds}")
    shutil.rmtree(store, ignore_errors=True)
    p = subprocess.Popen([args.lazarus, "run", "-d", store, "-i", "0", "-k", "100", "--",
                          prog, str(args.mib), pattern, "nohuge", tsfile],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # the job's stderr a pipe, not this script's: a file the job writes to, changed by
    # anyone after it stopped, would make the restart refuse (an outside change)
    err = LineReader(p.stderr)
    try:
        out = LineReader(p.stdout)

        def cmd(line, expect):
            p.stdin.write((line + "\n").encode())
            p.stdin.flush()
            reply = out.get(args.timeout, f"the answer to {line!r}")
            if not reply.startswith(expect):
                raise RuntimeError(f"incrheap answered {reply!r} to {line!r}; stderr: {drain(err)}")
            return reply

        out.get(args.timeout, "the heap to be filled")
        index = None
        for r in range(rounds + 1):
            if r:
                cmd(f"dirty {args.dirty}", "dirtied")
            index = int(cmd("api", "api index=").split("index=")[1].split()[0])
        victims = [pid for pid, comm in descendants(p.pid).items() if comm == "incrheap"]
        if not victims:
            raise RuntimeError("incrheap not found below lazarus run")
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        p.wait(timeout=args.timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return store, index


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def restart(args, store, index, tsfile, check):
    env = dict(os.environ)
    env.pop("LAZARUS_NO_FRAME_CHECK", None)
    if not check:
        env["LAZARUS_NO_FRAME_CHECK"] = "1"
    if os.path.exists(tsfile):
        os.unlink(tsfile)
    if args.cold:
        drop_caches()
    t0 = time.time_ns()
    # --force: the restarted program exits 0, and a finished job's restart is refused otherwise
    r = subprocess.run([args.lazarus, "restart", "-d", store, "--at", str(index), "--force"], env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=args.timeout)
    if r.returncode != 0:
        why = "the heap came back different" if r.returncode == 4 else r.stderr.strip()[-500:]
        raise RuntimeError(f"`lazarus restart -d {store} --at {index}` exited {r.returncode}: {why}")
    with open(tsfile) as f:
        return (int(f.read().strip()) - t0) / 1e9


def versus_full(args, prog, tsfile, fstype, cache):
    """Restart from the newest of the chain against from one full checkpoint of
    as much memory, in pairs (order swapped from pair to pair)."""
    results, ok = {}, True
    for pattern in args.patterns.split(","):
        log(f"{pattern}: building the chain and the full checkpoint")
        chain, ci = make_chain(args, prog, pattern, tsfile)
        full, fi = make_chain(args, prog, pattern, tsfile, rounds=0)
        restart(args, chain, ci, tsfile, True)
        restart(args, full, fi, tsfile, True)
        pairs = []
        for rep in range(args.reps):
            order = ("chain", "full") if rep % 2 == 0 else ("full", "chain")
            t = {k: restart(args, chain if k == "chain" else full, ci if k == "chain" else fi, tsfile, True) for k in order}
            pairs.append((t["chain"], t["full"]))
            log(f"{pattern} pair {rep + 1}/{args.reps}: chain {t['chain']:.3f} s, full {t['full']:.3f} s")
        ratio = statistics.median(a / b for a, b in pairs)
        results[pattern] = {"pairs": pairs, "ratio": ratio}
        ok &= ratio <= TARGET
        if not args.keep:
            shutil.rmtree(chain, ignore_errors=True)
            shutil.rmtree(full, ignore_errors=True)
    print(f"`lazarus restart` of {args.mib} MiB from the newest of {args.rounds} increments ({args.dirty} % each) "
          f"against from one full checkpoint, {cache} cache, {args.workdir} ({fstype})")
    head = f"{'pattern':10}{'chain (s)':>10}{'full (s)':>10}{'ratio':>8}"
    print(head)
    print("-" * len(head))
    for pattern, r in results.items():
        c = statistics.median(a for a, _ in r["pairs"])
        f = statistics.median(b for _, b in r["pairs"])
        print(f"{pattern:10}{c:>10.3f}{f:>10.3f}{r['ratio']:>8.3f}   target <= {TARGET}  {'PASS' if r['ratio'] <= TARGET else 'FAIL'}")
    with open(os.path.join(args.workdir, "results_versus_full.json"), "w") as fh:
        json.dump({"mib": args.mib, "cache": cache, "rounds": args.rounds, "dirty": args.dirty, "results": results}, fh, indent=1)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="pairs of restarts per pattern")
    ap.add_argument("--mib", type=int, default=1024, help="heap size (MiB)")
    ap.add_argument("--rounds", type=int, default=4, help="incremental checkpoints after the full one")
    ap.add_argument("--dirty", type=float, default=5.0, help="%% of the pages rewritten before each")
    ap.add_argument("--patterns", default="random,halfzero")
    ap.add_argument("--cold", action="store_true", help="drop the caches before each restart (root)")
    ap.add_argument("--versus-full", action="store_true",
                    help="instead: restart from the chain's newest against a full checkpoint of as much memory "
                         "(issue 16: <= 1.1x), both with the check")
    store_options(ap, "restart_check", "where the stores go (default bench/out/restart_check)")
    args = ap.parse_args()
    if args.cold and os.geteuid() != 0:
        sys.exit("bench: --cold needs root (it writes /proc/sys/vm/drop_caches)")
    ready_workdir(args)
    prog = build(args.workdir)
    tsfile = os.path.join(args.workdir, "restarted.ns")
    fstype = subprocess.run(["stat", "-f", "-c", "%T", args.workdir], capture_output=True, text=True).stdout.strip()
    cache = "cold" if args.cold else "warm"
    log(f"{args.reps} pairs, {args.mib} MiB, {args.rounds} incremental rounds of {args.dirty} %, "
        f"{cache} cache, store in {args.workdir} ({fstype})")

    results = {}
    ok = True
    if args.versus_full:
        return versus_full(args, prog, tsfile, fstype, cache)
    for pattern in args.patterns.split(","):
        log(f"{pattern}: building the chain")
        store, index = make_chain(args, prog, pattern, tsfile)
        nbytes, npacks, raw = checked_bytes(os.path.join(store, f"ckpt.{index:06d}", "manifest"))
        restart(args, store, index, tsfile, True)  # warms the page cache and the binaries
        pairs = []
        for rep in range(args.reps):
            order = (True, False) if rep % 2 == 0 else (False, True)
            t = {c: restart(args, store, index, tsfile, c) for c in order}
            pairs.append((t[True], t[False]))
            log(f"{pattern} pair {rep + 1}/{args.reps}: with check {t[True]:.3f} s, without {t[False]:.3f} s")
        ratio = statistics.median(a / b for a, b in pairs)
        results[pattern] = {"index": index, "checked_bytes": nbytes, "packs": npacks, "raw_bytes": raw,
                            "pairs": pairs, "ratio": ratio}
        ok &= ratio <= TARGET
        if not args.keep:
            shutil.rmtree(store, ignore_errors=True)

    print(f"`lazarus restart` of {args.mib} MiB from checkpoint {args.rounds + 1} of a chain "
          f"({args.rounds} x {args.dirty} % rewritten), {cache} cache, {args.workdir} ({fstype})")
    head = f"{'pattern':10}{'checked MiB':>12}{'packs':>6}{'with (s)':>10}{'without (s)':>12}{'ratio':>8}"
    print(head)
    print("-" * len(head))
    for pattern, r in results.items():
        w = statistics.median(a for a, _ in r["pairs"])
        wo = statistics.median(b for _, b in r["pairs"])
        verdict = "PASS" if r["ratio"] <= TARGET else "FAIL"
        print(f"{pattern:10}{r['checked_bytes'] / 2**20:>12.1f}{r['packs']:>6}{w:>10.3f}{wo:>12.3f}{r['ratio']:>8.3f}"
              f"   target <= {TARGET}  {verdict}")
    print("times: medians; ratio: median over pairs of the ratio within each pair")
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"mib": args.mib, "fstype": fstype, "cache": cache, "rounds": args.rounds,
                   "dirty": args.dirty, "results": results}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
