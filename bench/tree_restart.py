#!/usr/bin/env python3
"""Tree restart: what keeping copy-on-write sharing costs and saves.

Two jobs, each checkpointed once under `lazarus run -i 0`, then SIGKILLed and
restarted from that checkpoint again and again, each restart timed from
`lazarus restart` until every process answered once (restorer/restore_inherit.c):
  - shared: tests/programs/cow_workers.c, a parent over 256 MiB of private
    memory and 4 workers forked over it (each writes a 64-page slice of its
    own copy); ready when each checked its whole copy after the restart;
  - apart: bench/programs/treeheap.c, 8 processes of 128 MiB of random data
    each, the children forked before any memory is touched (each child's heap
    at the parent's heap's address: regions a child could keep, with nothing
    to share); ready when `dirty 1` is answered.
Each restart runs in three ways, alternating: `default` (children that would
share at least 4 MiB wait for their parent's fill and go on from its
restorer), `none` (LAZARUS_INHERIT_MIN_KIB huge: every child made first and
running a fresh restorer: the order before sharing was kept) and `every`
(LAZARUS_INHERIT_MIN_KIB=0: every child waits for its parent's fill).
Targets: shared, default: the sum of the processes' Pss after the restart
<= 1.3 x the sum before the kill; apart: restart time default / none <= 1.15
(median of the per-repetition ratios).  Also printed: every / none for apart
(what waiting for the parent's fill costs where nothing is shared), default /
none for shared, and none's Pss.

    make && python3 bench/tree_restart.py [--reps 5] [--mib 256] [--heap-mib 128]

Standard library only.  Results in WORKDIR/results.json (default
bench/out/tree_restart).  Exits 1 if a target is missed or a step fails.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = {"default": None, "none": str((1 << 40) - 1), "every": "0"}
PSS_TARGET, TIME_TARGET = 1.3, 1.15


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def build(src, out):
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-Wall", "-o", out, src], check=True)
    return out


def tree(pid):
    """Every descendant of pid (children files of /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(c) for c in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            pass
    return out


def kill(proc):
    """SIGKILL the supervisor and its whole tree, by PID."""
    for p in [proc.pid] + tree(proc.pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    time.sleep(0.3)


def pss_mib(sup, comm):
    total = 0
    for p in tree(sup):
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() != comm:
                    continue
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += sum(int(l.split()[1]) for l in f if l.startswith("Pss:"))
        except OSError:
            pass
    return total / 1024


def lines_until(proc, prefix, n):
    got = 0
    while got < n:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench: the job ended before {n} lines '{prefix}'")
        got += line.startswith(prefix)


class JobKind:
    def __init__(self, name, comm, argv, nprocs, ready_first, ready_again):
        self.name, self.comm, self.argv, self.nprocs = name, comm, argv, nprocs
        self.ready_first, self.ready_again = ready_first, ready_again


def start(args, argv, env, cwd):
    return subprocess.Popen([args.lazarus] + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True, cwd=cwd, env=env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256, help="the shared job's memory")
    ap.add_argument("--heap-mib", type=int, default=128, help="each apart process's heap")
    ap.add_argument("--workdir", default=os.path.join(ROOT, "bench", "out", "tree_restart"))
    ap.add_argument("--lazarus", default=os.path.join(ROOT, "build", "bin", "lazarus"))
    args = ap.parse_args()
    if not os.access(args.lazarus, os.X_OK):
        sys.exit(f"bench: {args.lazarus} not found; run make first")
    wd = os.path.abspath(args.workdir)
    os.makedirs(wd, exist_ok=True)
    cow = build(os.path.join(ROOT, "tests", "programs", "cow_workers.c"), os.path.join(wd, "cow_workers"))
    heap = build(os.path.join(ROOT, "bench", "programs", "treeheap.c"), os.path.join(wd, "treeheap"))
    trig = os.path.join(wd, "trig")
    kinds = [
        JobKind("shared", "cow_workers", [cow, str(args.mib), "4", trig, "share"], 5,
                lambda p: lines_until(p, "ready", 5), lambda p: lines_until(p, "round 1", 5)),
        JobKind("apart", "treeheap", [heap, str(args.heap_mib), "8"], 8,
                lambda p: lines_until(p, "filled", 1),
                lambda p: (p.stdin.write("dirty 1\n"), p.stdin.flush(), lines_until(p, "dirtied", 1))),
    ]
    base_env = {k: v for k, v in os.environ.items() if k != "LAZARUS_INHERIT_MIN_KIB"}
    results = {}
    for kind in kinds:
        for f in os.listdir(wd):
            if f.startswith("trig."):
                os.unlink(os.path.join(wd, f))
        store = os.path.join(wd, f"store.{kind.name}")
        subprocess.run(["rm", "-rf", store], check=True)
        p = start(args, ["run", "-d", store, "-i", "0", "--"] + kind.argv, base_env, wd)
        kind.ready_first(p)
        subprocess.run([args.lazarus, "checkpoint", "-d", store], check=True, capture_output=True)
        before = pss_mib(p.pid, kind.comm)
        kill(p)
        open(trig + ".1", "w").close()  # the shared job's processes check their copies at once
        times = {m: [] for m in MODES}
        pss = {m: [] for m in MODES}
        for r in range(args.reps):
            order = list(MODES) if r % 2 == 0 else list(MODES)[::-1]
            for m in order:
                env = dict(base_env)
                if MODES[m] is not None:
                    env["LAZARUS_INHERIT_MIN_KIB"] = MODES[m]
                subprocess.run(["sync"])
                t0 = time.monotonic()
                p = start(args, ["restart", "-d", store], env, wd)
                kind.ready_again(p)
                times[m].append(time.monotonic() - t0)
                pss[m].append(pss_mib(p.pid, kind.comm))
                kill(p)
        results[kind.name] = {"pss_before_mib": before, "times_s": times, "pss_mib": pss}
        for m in MODES:
            log(f"{kind.name} {m}: restart {statistics.median(times[m]):.3f} s (each {' '.join(f'{t:.3f}' for t in times[m])}), "
                f"Pss {statistics.median(pss[m]):.0f} MiB (before the kill {before:.0f} MiB)")
    sh, ap_ = results["shared"], results["apart"]
    pss_ratio = statistics.median(sh["pss_mib"]["default"]) / sh["pss_before_mib"]
    ratio = lambda r, a, b: statistics.median(x / y for x, y in zip(r["times_s"][a], r["times_s"][b]))
    figures = {
        "shared: Pss after the restart / before the kill (default)": (pss_ratio, PSS_TARGET),
        "apart: restart time default / none": (ratio(ap_, "default", "none"), TIME_TARGET),
        "apart: restart time every / none (for information)": (ratio(ap_, "every", "none"), None),
        "shared: restart time default / none (for information)": (ratio(sh, "default", "none"), None),
        "shared: Pss after the restart / before the kill, none (for information)":
            (statistics.median(sh["pss_mib"]["none"]) / sh["pss_before_mib"], None),
    }
    missed = False
    for name, (v, target) in figures.items():
        ok = target is None or v <= target
        missed |= not ok
        print(f"{name}: {v:.2f}" + ("" if target is None else f" (target <= {target}: {'met' if ok else 'MISSED'})"))
    with open(os.path.join(wd, "results.json"), "w") as f:
        json.dump({"results": results, "figures": {k: v[0] for k, v in figures.items()},
                   "load": os.getloadavg()}, f, indent=1)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
