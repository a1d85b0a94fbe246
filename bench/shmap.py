#!/usr/bin/env python3
"""Stores into a large MAP_SHARED file mapping under Lazarus (issue 16, item 6).

bench/programs/shmapwrite maps a --mib MiB file (default 1 GiB) MAP_SHARED
read-write, reads every page once, then in each of --rounds rounds stores 8
bytes into --percent % of its pages (distinct, the same pages in every run),
timing the stores, and waits for the benchmark, which runs `lazarus
checkpoint` between rounds (`lazarus run -i 0`: no other checkpoint).  So the
interval after checkpoint N holds exactly one round's stores, and:

  pause       `lazarus list`'s pause of each checkpoint that follows a round
              of stores (the first one, which protects the whole mapping for
              the first time, is shown apart)                     target <= 20 ms
  undo        files.data + files.log of each such interval's journal (the
              store's sizes; -k 1000, so no files.data is a recycled spare),
              against the pages stored into x 4 KiB               target <= 1.2
  stores      the rounds' store time under Lazarus against a native run in
              the same repetition (each first store of a page in an interval
              faults once: the price of saving it before it happens)

Repetitions alternate which run goes first; figures are medians.  --lazarus
can point at another build (the old one copied the whole mapping into the
journal in every pause).  Standard library only.

    make && python3 bench/shmap.py [--reps 3] [--mib 1024] [--percent 1] [--rounds 8]
    python3 bench/shmap.py --mib 200 --pages 1      # the issue's case: one page per interval
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from ckpt_restart import ROOT, descendants, log, ready_workdir, store_options

MiB = 1 << 20
TARGET_PAUSE_MS = 20.0
TARGET_UNDO = 1.2


def build(outdir):
    src = os.path.join(ROOT, "bench", "programs", "shmapwrite.c")
    out = os.path.join(outdir, "shmapwrite")
    subprocess.run([os.environ.get("CC", "cc"), "-std=c17", "-O2", "-Wall", "-o", out, src], check=True)
    return out


def make_file(path, mib):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        block = os.urandom(MiB)
        for i in range(mib):
            os.write(fd, i.to_bytes(8, "little") + block[8:])
        os.fsync(fd)
    finally:
        os.close(fd)


def run(args, prog, data, pages, store=None):
    """One run: per round, (store ns, wall seconds of the checkpoint after it)."""
    cmd = [prog, data, str(pages), str(args.rounds)]
    if store:
        shutil.rmtree(store, ignore_errors=True)
        cmd = [args.lazarus, "run", "-i", "0", "-k", "1000", "-d", store, "--"] + cmd
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rows = []
    try:
        for r in range(args.rounds):
            line = p.stdout.readline().split()
            if len(line) != 6 or line[0] != "round":
                raise RuntimeError(f"{' '.join(cmd)}: unexpected output {line!r}; stderr: {p.stderr.read()}")
            ck = None
            if store:
                t = time.monotonic()
                c = subprocess.run([args.lazarus, "checkpoint", "-d", store], capture_output=True, text=True,
                                   timeout=args.timeout)
                if c.returncode != 0:
                    raise RuntimeError(f"lazarus checkpoint failed: {c.stderr.strip()}")
                ck = time.monotonic() - t
            rows.append((float(line[5]), ck))
            p.stdin.write("\n")
            p.stdin.flush()
        p.stdin.close()
        rc = p.wait(timeout=args.timeout)
        if rc != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited with {rc}: {p.stderr.read().strip()}")
    finally:
        if p.poll() is None:
            for pid in descendants(p.pid):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            p.kill()
            p.wait()
    return rows


def inspect(args, store):
    """{index: (pause ms, undo bytes)} of the store's checkpoints."""
    r = subprocess.run([args.lazarus, "list", "-d", store, "--json"], capture_output=True, text=True, check=True)
    out = {}
    for row in json.loads(r.stdout):
        n = row["index"]
        d = os.path.join(store, f"ckpt.{n:06d}")
        undo = sum(os.path.getsize(os.path.join(d, f)) for f in ("files.data", "files.log") if os.path.exists(os.path.join(d, f)))
        out[n] = (row.get("pause_ms") or 0.0, undo)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mib", type=int, default=1024, help="size of the mapped file")
    ap.add_argument("--percent", type=float, default=1.0, help="pages stored into per round, in %% of the file")
    ap.add_argument("--pages", type=int, default=0, help="pages per round (instead of --percent)")
    ap.add_argument("--rounds", type=int, default=8)
    store_options(ap, "shmap", "where the file and the store go (default bench/out/shmap)")
    args = ap.parse_args()
    ready_workdir(args)
    prog = build(args.workdir)
    data = os.path.join(args.workdir, "data.bin")
    store = os.path.join(args.workdir, "store")
    npages = args.mib * MiB // 4096
    pages = args.pages or max(1, int(npages * args.percent / 100))
    log(f"{args.mib} MiB file, {pages} pages ({pages * 100 / npages:.2f} %) per round, {args.rounds} rounds, {args.reps} repetitions")
    make_file(data, args.mib)
    reps = []
    for rep in range(args.reps):
        runs = {}
        for kind in (("native", "lazarus") if rep % 2 == 0 else ("lazarus", "native")):
            os.sync()
            runs[kind] = run(args, prog, data, pages, store if kind == "lazarus" else None)
        info = inspect(args, store)
        if not args.keep:
            shutil.rmtree(store, ignore_errors=True)
        # round r's stores are in the interval after checkpoint r (its pause: checkpoint r+1's)
        later = range(1, args.rounds)
        stores = statistics.median(runs["lazarus"][r][0] / max(runs["native"][r][0], 1.0) for r in later)
        fault_us = statistics.median((runs["lazarus"][r][0] - runs["native"][r][0]) / pages / 1e3 for r in later)
        pauses = [info[r + 1][0] for r in later if r + 1 in info]
        undo = [info[r][1] / (pages * 4096) for r in later if r in info]
        first = info.get(1, (0.0, 0))[0]
        ckpt_s = statistics.median(runs["lazarus"][r][1] for r in later)
        rec = {"pause_ms": statistics.median(pauses), "pause_max_ms": max(pauses), "first_pause_ms": first,
               "undo_ratio": statistics.median(undo), "undo_max_ratio": max(undo), "stores_ratio": stores,
               "fault_us": fault_us, "checkpoint_s": ckpt_s,
               "native_store_us": statistics.median(runs["native"][r][0] / pages / 1e3 for r in later)}
        reps.append(rec)
        log(f"rep {rep + 1}: pause {rec['pause_ms']:.1f} ms (max {rec['pause_max_ms']:.1f}, first {first:.1f}), "
            f"undo {rec['undo_ratio']:.3f}x the pages stored into (max {rec['undo_max_ratio']:.3f}), "
            f"stores {stores:.1f}x native ({rec['native_store_us']:.2f} us/page native, +{fault_us:.1f} us/page), "
            f"`lazarus checkpoint` {ckpt_s * 1e3:.0f} ms")
    med = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
    os.makedirs(args.workdir, exist_ok=True)
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"args": vars(args), "pages": pages, "reps": reps, "median": med}, f, indent=1)
    print(f"shared mapping of {args.mib} MiB, {pages} pages stored into per interval:")
    print(f"  pause          {med['pause_ms']:8.1f} ms  (max {med['pause_max_ms']:.1f}; first, protecting it all: "
          f"{med['first_pause_ms']:.1f})   target <= {TARGET_PAUSE_MS:g} ms")
    print(f"  undo           {med['undo_ratio']:8.3f} x   the pages stored into (max {med['undo_max_ratio']:.3f})"
          f"   target <= {TARGET_UNDO:g}")
    print(f"  stores         {med['stores_ratio']:8.1f} x   native ({med['native_store_us']:.2f} us per page natively, "
          f"+{med['fault_us']:.1f} us per first store of a page in an interval)")
    print(f"  checkpoint     {med['checkpoint_s'] * 1e3:8.0f} ms  `lazarus checkpoint`, wall")
    ok = med["pause_ms"] <= TARGET_PAUSE_MS and med["undo_ratio"] <= TARGET_UNDO
    if not ok:
        print("target missed")
    if not args.keep:
        os.unlink(data)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
