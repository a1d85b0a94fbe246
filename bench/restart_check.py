#!/usr/bin/env python3
"""What the checks of a restart cost (issue 15, "a restart in two phases"), and
what an incremental chain costs it (issue 16).

Default: `lazarus restart` of a 1 GiB program against the same restart by a
baseline build, the commit before issue 15 (BASELINE; --baseline REV for
another).  Since issue 15 a restart proves everything before it changes
anything: the journals, the job file, the tree, the channels, every path, and
every frame its memory is filled from.  The frames are proven by the
restorer itself while it fills the anonymous memory, before the supervisor
rolls the files back (restorer/restore_main.c, wait_for_rollback), so that
no byte is read twice.  Target: <= 1.1 warm and cold (--cold).  The baseline
is checked out with `git worktree` into WORKDIR/baseline and built there
(the first run takes a minute); each build restarts a store it made itself
(the formats differ).  By default from one full checkpoint (--rounds 0): the
baseline filled memory in address order, which an incremental chain made
several times slower (issue 16, fixed since), and a chain would flatter
today's build.

--versus-full: instead, today's restart from the newest of a chain of ROUNDS
increments (default 10) against from one full checkpoint of as much memory
(issue 16: <= 1.1, warm and cold); with --compact the chain is run with
`lazarus run --compact`.  It also prints what the chain's increments cost
(stored bytes, pause, time until durable).

The program is bench/programs/incrheap.c: MIB MiB written with PATTERN, a full
checkpoint through the C API, then ROUNDS times DIRTY % of the pages
rewritten and an incremental API checkpoint; then it is SIGKILLed.  Each
restart (`restart --at NEWEST --force`) is timed from just before `lazarus
restart` is launched to the CLOCK_REALTIME the program writes as soon as
lazarus_checkpoint() returns LAZARUS_RESTARTED (it then checks its heap and
exits 0, and the next restart starts from the same checkpoint).  The two
sides alternate in pairs, the order swapped from pair to pair; the ratio is
taken within each pair and the median reported.  One restart of each first
warms the page cache.  --cold drops the caches before every restart (root).

Patterns: random (nothing compresses: frames stored raw; the worst case) and
halfzero (every page half zeros: lz4 frames of about half the size, which
the restorer must expand).

    make && python3 bench/restart_check.py [--reps 5] [--mib 1024] [--cold] [--baseline REV]
    python3 bench/restart_check.py --versus-full [--compact] [--rounds 10] [--cold]

Standard library only.  Results in WORKDIR/results*.json (default
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
BASELINE = "bac99a7"  # the last commit before issue 15


class Build:
    """A build of Lazarus: its `lazarus` and incrheap linked against its library."""

    def __init__(self, root, lazarus, outdir):
        self.lazarus = lazarus
        src = os.path.join(root, "bench", "programs", "incrheap.c")
        lib = os.path.join(root, "build", "lib")
        self.prog = os.path.join(outdir, "incrheap")
        subprocess.run([os.environ.get("CC", "cc"), "-std=c17", "-O2", "-Wall",
                        "-I" + os.path.join(root, "include"), "-I" + os.path.join(root, "bench", "programs"),
                        "-o", self.prog, src, "-L" + lib, "-llazarus", "-Wl,-rpath," + lib], check=True)


def baseline_build(args):
    """The baseline commit checked out (git worktree) and built in WORKDIR/baseline."""
    tree = os.path.join(args.workdir, "baseline")
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", args.baseline], capture_output=True, text=True, check=True).stdout.strip()
    have = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() \
        if os.path.isdir(tree) else ""
    if have != rev:
        if os.path.isdir(tree):
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=True)
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, rev], check=True, capture_output=True)
    log(f"building the baseline {args.baseline} ({rev[:12]}) in {tree}")
    subprocess.run(["make", "-C", tree, "-j2"], check=True, stdout=subprocess.DEVNULL)
    out = os.path.join(args.workdir, "baseline-bin")
    os.makedirs(out, exist_ok=True)
    return Build(tree, os.path.join(tree, "build", "bin", "lazarus"), out)


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


def make_chain(args, build, pattern, tsfile, rounds=None, name=""):
    """A killed job whose newest checkpoint is the last of a chain of `rounds`
    increments (0: one full checkpoint): (store, index)."""
    rounds = args.rounds if rounds is None else rounds
    store = os.path.join(args.workdir, f"store.{pattern}.{rounds}{name}")
    shutil.rmtree(store, ignore_errors=True)
    compact = ["--compact"] if args.compact and rounds else []
    p = subprocess.Popen([build.lazarus, "run", "-d", store, "-i", "0", "-k", "100", *compact, "--",
                          build.prog, str(args.mib), pattern, "nohuge", tsfile],
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


def increments(build, store):
    """The checkpoints of a store as `lazarus list --json` gives them, oldest first."""
    r = subprocess.run([build.lazarus, "list", "-d", store, "--json"], capture_output=True, text=True, check=True)
    return [{k: c[k] for k in ("index", "changed_bytes", "stored_bytes", "pause_ms", "durable_ms")}
            for c in sorted(json.loads(r.stdout), key=lambda c: c["index"])]


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def restart(args, build, store, index, tsfile):
    if os.path.exists(tsfile):
        os.unlink(tsfile)
    if args.cold:
        drop_caches()
    t0 = time.time_ns()
    # --force: the restarted program exits 0 (a finished job's restart is refused otherwise), and
    # the timestamp file it writes is deleted here (an outside change otherwise)
    r = subprocess.run([build.lazarus, "restart", "-d", store, "--at", str(index), "--force"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=args.timeout)
    if r.returncode != 0:
        why = "the heap came back different" if r.returncode == 4 else r.stderr.strip()[-500:]
        raise RuntimeError(f"`lazarus restart -d {store} --at {index}` exited {r.returncode}: {why}")
    with open(tsfile) as f:
        return (int(f.read().strip()) - t0) / 1e9


def versus_full(args, build, tsfile, fstype, cache):
    """Restart from the newest of the chain against from one full checkpoint of
    as much memory, in pairs (order swapped from pair to pair)."""
    results, ok = {}, True
    for pattern in args.patterns.split(","):
        log(f"{pattern}: building the chain and the full checkpoint")
        chain, ci = make_chain(args, build, pattern, tsfile)
        full, fi = make_chain(args, build, pattern, tsfile, rounds=0)
        # what each must read: the stored bytes of every frame its extents use (a frame is
        # checked whole, so a chain reads the pages later increments replaced too)
        read = {k: checked_bytes(os.path.join(st, f"ckpt.{i:06d}", "manifest"))[0]
                for k, st, i in (("chain", chain, ci), ("full", full, fi))}
        writes = increments(build, chain)
        restart(args, build, chain, ci, tsfile)
        restart(args, build, full, fi, tsfile)
        pairs = []
        for rep in range(args.reps):
            order = ("chain", "full") if rep % 2 == 0 else ("full", "chain")
            t = {k: restart(args, build, chain if k == "chain" else full, ci if k == "chain" else fi, tsfile) for k in order}
            pairs.append((t["chain"], t["full"]))
            log(f"{pattern} pair {rep + 1}/{args.reps}: chain {t['chain']:.3f} s, full {t['full']:.3f} s")
        ratio = statistics.median(a / b for a, b in pairs)
        results[pattern] = {"pairs": pairs, "ratio": ratio, "read_bytes": read, "increments": writes}
        ok &= ratio <= TARGET
        if not args.keep:
            shutil.rmtree(chain, ignore_errors=True)
            shutil.rmtree(full, ignore_errors=True)
    print(f"`lazarus restart` of {args.mib} MiB from the newest of {args.rounds} increments ({args.dirty} % each"
          f"{', run --compact' if args.compact else ''}) "
          f"against from one full checkpoint, {cache} cache, {args.workdir} ({fstype})")
    head = f"{'pattern':10}{'chain MiB':>10}{'full MiB':>9}{'bytes':>7}{'chain (s)':>10}{'full (s)':>10}{'ratio':>8}"
    print(head)
    print("-" * len(head))
    for pattern, r in results.items():
        c = statistics.median(a for a, _ in r["pairs"])
        f = statistics.median(b for _, b in r["pairs"])
        rb = r["read_bytes"]
        print(f"{pattern:10}{rb['chain'] / 2**20:>10.0f}{rb['full'] / 2**20:>9.0f}{rb['chain'] / rb['full']:>7.2f}"
              f"{c:>10.3f}{f:>10.3f}{r['ratio']:>8.3f}   target <= {TARGET}  {'PASS' if r['ratio'] <= TARGET else 'FAIL'}")
    print("MiB: stored bytes of the frames each restart reads (every frame is checked whole); "
          "bytes: their ratio, the floor of the time ratio when reading is what costs")
    print("What the chain's increments cost (medians over the 10; the full checkpoint: the first):")
    head = f"{'pattern':10}{'changed MiB':>12}{'stored MiB':>11}{'max MiB':>8}{'pause ms':>9}{'durable ms':>11}{'full: stored MiB':>17}{'durable ms':>11}"
    print(head)
    print("-" * len(head))
    for pattern, r in results.items():
        inc, first = r["increments"][1:], r["increments"][0]
        med = lambda k: statistics.median(c[k] for c in inc) if inc else 0
        print(f"{pattern:10}{med('changed_bytes') / 2**20:>12.1f}{med('stored_bytes') / 2**20:>11.1f}"
              f"{max((c['stored_bytes'] for c in inc), default=0) / 2**20:>8.1f}{med('pause_ms'):>9.1f}{med('durable_ms'):>11.0f}"
              f"{first['stored_bytes'] / 2**20:>17.1f}{first['durable_ms']:>11.0f}")
    with open(os.path.join(args.workdir, f"results_versus_full{'_compact' if args.compact else ''}.json"), "w") as fh:
        json.dump({"mib": args.mib, "cache": cache, "rounds": args.rounds, "dirty": args.dirty, "results": results}, fh, indent=1)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="pairs of restarts per pattern")
    ap.add_argument("--mib", type=int, default=1024, help="heap size (MiB)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="incremental checkpoints after the full one (default 0; 10 with --versus-full)")
    ap.add_argument("--dirty", type=float, default=5.0, help="%% of the pages rewritten before each")
    ap.add_argument("--patterns", default="random,halfzero")
    ap.add_argument("--cold", action="store_true", help="drop the caches before each restart (root)")
    ap.add_argument("--baseline", default=BASELINE, help=f"the commit to compare with (default {BASELINE})")
    ap.add_argument("--compact", action="store_true",
                    help="--versus-full: the chain run with `lazarus run --compact`")
    ap.add_argument("--versus-full", action="store_true",
                    help="instead: restart from the chain's newest against a full checkpoint of as much memory "
                         "(issue 16: <= 1.1x)")
    store_options(ap, "restart_check", "where the stores go (default bench/out/restart_check)")
    args = ap.parse_args()
    if args.rounds is None:
        args.rounds = 10 if args.versus_full else 0
    if args.cold and os.geteuid() != 0:
        sys.exit("bench: --cold needs root (it writes /proc/sys/vm/drop_caches)")
    ready_workdir(args)
    args.lazarus = os.path.abspath(args.lazarus)
    today = Build(ROOT, args.lazarus, args.workdir)
    tsfile = os.path.join(args.workdir, "restarted.ns")
    fstype = subprocess.run(["stat", "-f", "-c", "%T", args.workdir], capture_output=True, text=True).stdout.strip()
    cache = "cold" if args.cold else "warm"
    log(f"{args.reps} pairs, {args.mib} MiB, {args.rounds} incremental rounds of {args.dirty} %, "
        f"{cache} cache, store in {args.workdir} ({fstype})")
    if args.versus_full:
        return versus_full(args, today, tsfile, fstype, cache)

    base = baseline_build(args)
    results = {}
    ok = True
    for pattern in args.patterns.split(","):
        log(f"{pattern}: a store of each build")
        stores = {b: make_chain(args, b, pattern, tsfile, name=n) for b, n in ((today, ""), (base, ".baseline"))}
        nbytes, npacks, raw = checked_bytes(os.path.join(stores[today][0], f"ckpt.{stores[today][1]:06d}", "manifest"))
        for b in (today, base):
            restart(args, b, *stores[b], tsfile)  # warms the page cache and the binaries
        pairs = []
        for rep in range(args.reps):
            order = (today, base) if rep % 2 == 0 else (base, today)
            t = {b: restart(args, b, *stores[b], tsfile) for b in order}
            pairs.append((t[today], t[base]))
            log(f"{pattern} pair {rep + 1}/{args.reps}: today {t[today]:.3f} s, baseline {t[base]:.3f} s")
        ratio = statistics.median(a / b for a, b in pairs)
        results[pattern] = {"checked_bytes": nbytes, "packs": npacks, "raw_bytes": raw, "pairs": pairs, "ratio": ratio}
        ok &= ratio <= TARGET
        if not args.keep:
            for store, _ in stores.values():
                shutil.rmtree(store, ignore_errors=True)

    print(f"`lazarus restart` of {args.mib} MiB ({args.rounds} increments of {args.dirty} %), today against "
          f"{args.baseline}, {cache} cache, {args.workdir} ({fstype})")
    head = f"{'pattern':10}{'stored MiB':>11}{'today (s)':>10}{'baseline (s)':>13}{'ratio':>8}"
    print(head)
    print("-" * len(head))
    for pattern, r in results.items():
        w = statistics.median(a for a, _ in r["pairs"])
        wo = statistics.median(b for _, b in r["pairs"])
        verdict = "PASS" if r["ratio"] <= TARGET else "FAIL"
        print(f"{pattern:10}{r['checked_bytes'] / 2**20:>11.1f}{w:>10.3f}{wo:>13.3f}{r['ratio']:>8.3f}"
              f"   target <= {TARGET}  {verdict}")
    print("times: medians; ratio: median over pairs of the ratio within each pair")
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"mib": args.mib, "fstype": fstype, "cache": cache, "rounds": args.rounds, "baseline": args.baseline,
                   "dirty": args.dirty, "results": results}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
