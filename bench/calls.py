#!/usr/bin/env python3
"""Calls: the cost of the wrappers that keep a checkpoint out of blocking calls.

bench/programs/pollcall.c times poll() on a pipe with a zero timeout (the
cheapest blocking call: enter the kernel, nothing ready, return), natively
and as the program of `lazarus run -i 0` (the runtime's poll wrapper around
libc's: two thread-local loads before, a compare after).  Repetitions
alternate the order; each takes the best of 5 rounds of N calls, and the
median over repetitions is reported with the ratio and the difference in ns.
Target (issue 17): under the runtime / native <= 1.10.

    make && python3 bench/calls.py [--reps 5] [--calls 1000000]

Standard library only.  Exits 1 if the target is missed or a step fails.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAZARUS = os.path.join(ROOT, "build", "bin", "lazarus")
TARGET = 1.10


def per_call(argv):
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"ns_per_call ([\d.]+)", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1000000)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="lazarus-bench-calls-")
    try:
        prog = os.path.join(work, "pollcall")
        subprocess.run(["gcc", "-O2", "-o", prog, os.path.join(ROOT, "bench", "programs", "pollcall.c")], check=True)
        native, lz = [], []
        for r in range(a.reps):
            store = os.path.join(work, f"store{r}")
            runs = [("native", [prog, str(a.calls), "5"]),
                    ("lazarus", [LAZARUS, "run", "-d", store, "-i", "0", "--", prog, str(a.calls), "5"])]
            if r % 2:
                runs.reverse()
            for name, argv in runs:
                (native if name == "native" else lz).append(per_call(argv))
            print(f"rep {r + 1}: native {native[-1]:.1f} ns, under the runtime {lz[-1]:.1f} ns", flush=True)
        n, l = statistics.median(native), statistics.median(lz)
        ratio = l / n
        print(f"poll(pipe, 0): native {n:.1f} ns/call, under the runtime {l:.1f} ns/call, "
              f"+{l - n:.1f} ns, ratio {ratio:.3f} (target <= {TARGET})")
        return 0 if ratio <= TARGET else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
