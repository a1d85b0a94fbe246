#!/usr/bin/env python3
"""libckpt's Table 2 measured again on Lazarus (issue 21).

Plank, Beck, Kingsley and Li ("Libckpt: Transparent Checkpointing under
Unix", USENIX 1995, Table 2) ran five applications with no checkpointing and
with every combination of user-directed x incremental x forked checkpoints
at a fixed interval.  This runs the same experiment: the applications are
written after the paper's descriptions (bench/programs/lk_*.c: MAT, SOLVE,
CELL, WATER, and a sparse least-squares solver standing in for MCNF), the
directives the paper added (§6.4) turned on by the argument `user` (MAT:
inputs and finished product rows read-only; SOLVE: the system dead at the
end of each iteration, then checkpoint_here; CELL: the previous grid dead
each generation, then checkpoint_here; mintime 0.8 x the interval, so that
the synchronous checkpoints come before the timer, as the paper set CELL's
mintime under its maxtime), and for each run: running time, overhead (seconds and % over the
uncheckpointed run), average checkpoint size (bytes a checkpoint stored,
`lazarus list`'s stored_bytes, lz4), checkpoint time (the mean time from
the pause until the checkpoint was durable) and the number of checkpoints,
with libckpt's published overhead % beside each row.  Like the paper, WATER
and MCNF have no user-directed rows (it added no directives to them).

Lazarus' switches: incremental = default (--no-incremental off), forked =
default (--no-fork off).  Sizes: --scale quick (each uncheckpointed run a
few seconds, -i 1; for a check) or full (minutes, -i 10; the experiment).

    make && python3 bench/libckpt_table2.py [--scale quick|full] [--only MAT,SOLVE] [--workdir DIR]

Standard library only.  Results in WORKDIR/results.json and a Markdown
table on stdout (default WORKDIR bench/out/libckpt_table2).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "build", "lib")

# The paper's Table 2: overhead % per (user-directed, incremental, forked).
PAPER = {
    "MAT": {(0, 0, 0): 26.0, (0, 1, 0): 4.4, (0, 0, 1): 5.3, (0, 1, 1): 1.1,
            (1, 0, 0): 4.7, (1, 1, 0): 5.4, (1, 0, 1): 1.1, (1, 1, 1): 1.1},
    "SOLVE": {(0, 0, 0): 17.5, (0, 1, 0): 21.6, (0, 0, 1): 4.2, (0, 1, 1): 5.1,
              (1, 0, 0): 1.7, (1, 1, 0): 1.3, (1, 0, 1): 0.9, (1, 1, 1): 0.8},
    "CELL": {(0, 0, 0): 31.1, (0, 1, 0): 37.3, (0, 0, 1): 6.6, (0, 1, 1): 7.9,
             (1, 0, 0): 13.4, (1, 1, 0): 14.2, (1, 0, 1): 3.9, (1, 1, 1): 4.8},
    "WATER": {(0, 0, 0): 39.7, (0, 1, 0): 15.9, (0, 0, 1): 7.9, (0, 1, 1): 3.8},
    "MCNF": {(0, 0, 0): 50.4, (0, 1, 0): 8.8, (0, 0, 1): 5.1, (0, 1, 1): 0.7},
}
# The paper's average checkpoint sizes (MB) of the transparent and user rows
# (incremental off, fork off), for the size-reduction targets.
PAPER_SIZE = {"MAT": (4.591079, 0.592265), "SOLVE": (4.617315, 0.108339), "CELL": (8.457519, 4.255027)}

# program, arguments per scale
APPS = {
    "MAT": ("lk_mat", {"quick": ["2048"], "full": ["4096"]}),
    "SOLVE": ("lk_solve", {"quick": ["1024", "30"], "full": ["1536", "200"]}),
    "CELL": ("lk_cell", {"quick": ["4096", "400"], "full": ["8192", "1500"]}),
    "WATER": ("lk_water", {"quick": ["3000", "200", "200"], "full": ["6000", "600", "600"]}),
    "MCNF": ("lk_mcnf", {"quick": ["400000", "200000", "12", "400"], "full": ["2000000", "1000000", "12", "900"]}),
}
INTERVAL = {"quick": 1, "full": 10}


def build(prog, outdir):
    out = os.path.join(outdir, prog)
    subprocess.run(["gcc", "-O2", "-Wall", f"-I{ROOT}/include", f"-I{ROOT}/bench/programs", "-o", out,
                    os.path.join(ROOT, "bench", "programs", prog + ".c"), f"-L{LIB}", "-llazarus",
                    f"-Wl,-rpath,{LIB}", "-lm"], check=True)
    return out


def run(argv, cwd):
    t0 = time.monotonic()
    cp = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    if cp.returncode != 0:
        sys.exit(f"libckpt_table2: {' '.join(argv)} exited {cp.returncode}: {cp.stderr.strip()[-500:]}")
    res = [l for l in cp.stdout.splitlines() if l.startswith("result ")]
    return wall, (res[-1] if res else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=("quick", "full"), default="full")
    ap.add_argument("--only", default=",".join(APPS))
    ap.add_argument("--workdir", default=os.path.join(ROOT, "bench", "out", "libckpt_table2"))
    ap.add_argument("--lazarus", default=os.path.join(ROOT, "build", "bin", "lazarus"))
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    interval = INTERVAL[a.scale]
    rows, failed = [], []
    for app in a.only.split(","):
        prog, sizes = APPS[app]
        exe = build(prog, a.workdir)
        args = sizes[a.scale]
        base, want = run([exe, *args], a.workdir)
        rows.append({"app": app, "config": "none", "time": base})
        print(f"{app}: no checkpointing {base:.1f} s", file=sys.stderr)
        for (user, incr, fork), paper in PAPER[app].items():
            store = os.path.join(a.workdir, f"{app}.store")
            shutil.rmtree(store, ignore_errors=True)
            opts = ["-d", store, "-i", str(interval), "-k", "100000"]
            if not incr: opts.append("--no-incremental")
            if not fork: opts.append("--no-fork")
            if user: opts += ["--mintime", str(0.8 * interval)]  # the synchronous ones come before the timer
            wall, got = run([a.lazarus, "run", *opts, "--", exe, *args, *(["user"] if user else [])], a.workdir)
            if got != want:
                failed.append(f"{app} {user}{incr}{fork}: {got} != {want}")
            ck = json.loads(subprocess.run([a.lazarus, "list", "-d", store, "--json"], capture_output=True,
                                           text=True, check=True).stdout)
            n = len(ck)
            row = {"app": app, "user": user, "incremental": incr, "forked": fork, "time": wall,
                   "overhead": wall - base, "overhead_pct": 100 * (wall - base) / base,
                   "size": statistics.mean(e["stored_bytes"] for e in ck) if n else 0,
                   "ckpt_time": statistics.mean(e["durable_ms"] for e in ck) / 1000 if n else 0,
                   "pause": statistics.mean(e["pause_ms"] for e in ck) / 1000 if n else 0,
                   "n": n, "paper_pct": paper}
            rows.append(row)
            print(f"{app} user={user} incr={incr} fork={fork}: {wall:.1f} s, {n} ckpts", file=sys.stderr)
            shutil.rmtree(store, ignore_errors=True)
    with open(os.path.join(a.workdir, "results.json"), "w") as f:
        json.dump({"scale": a.scale, "interval": interval, "rows": rows}, f, indent=1)
    yn = lambda v: "yes" if v else "no"
    print(f"| app | user-directed | incremental | forked | running time (s) | overhead (s) | overhead % | "
          f"libckpt overhead % | avg ckpt size (MB) | ckpt time (s) | pause (s) | ckpts |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r.get("config") == "none":
            print(f"| {r['app']} | no checkpointing | | | {r['time']:.1f} | | | | | | | |")
            continue
        print(f"| {r['app']} | {yn(r['user'])} | {yn(r['incremental'])} | {yn(r['forked'])} | {r['time']:.1f} | "
              f"{r['overhead']:.1f} | {r['overhead_pct']:.1f} | {r['paper_pct']:.1f} | {r['size'] / 1e6:.3f} | "
              f"{r['ckpt_time']:.3f} | {r['pause']:.4f} | {r['n']} |")
    # the issue's targets
    for app in [x for x in a.only.split(",") if x in PAPER]:
        mine = {(r["user"], r["incremental"], r["forked"]): r for r in rows if r["app"] == app and "user" in r}
        best = min(PAPER[app].values())
        default = mine[(0, 1, 1)]["overhead_pct"]
        print(f"{app}: Lazarus default {default:.1f} % vs libckpt's best {best:.1f} %: "
              f"{'met' if default < best else 'MISSED'}")
        if app in PAPER_SIZE and (1, 1, 1) in mine:
            t, u = PAPER_SIZE[app]
            ours = 1 - mine[(1, 0, 1)]["size"] / max(mine[(0, 0, 1)]["size"], 1)
            print(f"{app}: user directives cut the (non-incremental) checkpoint by {100 * ours:.1f} % "
                  f"(libckpt {100 * (1 - u / t):.1f} %): {'met' if ours >= 1 - u / t else 'MISSED'}")
    if failed:
        sys.exit("libckpt_table2: a checkpointed run's result differs from the uncheckpointed one: " + "; ".join(failed))


if __name__ == "__main__":
    main()
