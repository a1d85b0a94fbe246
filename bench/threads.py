#!/usr/bin/env python3
"""Threads: benchmark of a checkpoint's pause for a multi-threaded program.

16 threads sharing a 1 GiB heap, each writing its own slice, against 1
thread with the same 1 GiB heap (bench/programs/threadheap.c, 4 KiB pages,
random data), both under `lazarus run -i 0`, checkpointed with `lazarus
checkpoint`: the first checkpoint (the heap is new: fork mode) and the later
ones, each after 1 % of the pages were rewritten (spread over every thread's
slice: copy mode).  The pause is the checkpoint's `pause_ms` from `lazarus
list --json`.  Target (threads issue): pause with 16 threads / pause with 1
thread <= 1.2, for the first checkpoint and for the later ones.

Two states of the threads while they are checkpointed:
  idle   every thread waits (the main thread in read(), the others on a
         condition variable): what the target is about;
  busy   every thread computes (16 runnable threads on this machine's CPUs:
         each must be scheduled to stop), for information, with the same target.

Repetitions alternate the order of the 1- and 16-thread jobs; each ratio is
taken within a repetition and the median of those is reported, like the
other benchmarks.  The pause's steps (LAZARUS_TRACE=1) show where a pause
with threads costs more: the first, "threads stopped", is the pause's set-up
(scratch memory, the previous write's outcome) and the stop of every other
thread, so its 16-thread figure less the 1-thread one is the stop itself.

    make && python3 bench/threads.py [--reps 3] [--later 5] [--mib 1024] [--threads 16]

Standard library only.  Results in WORKDIR/results.json (default
bench/out/threads).  Exits 1 if a target is missed or a step fails.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

from ckpt_restart import log, ready_workdir, store_options
from incremental import TRACE_RE, BenchError, Job, Report, build, med

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 1.2


def pause_steps(job):
    """The pause's steps (LAZARUS_TRACE=1) of each checkpoint, in order: a list
    of {step: ms since the previous step}; a checkpoint's steps start with
    "threads stopped"."""
    groups = []
    for line in job.err:
        m = TRACE_RE.match(line)
        if not m:
            continue
        step, at = m.group(2), float(m.group(1))
        if step == "threads stopped" or not groups:
            groups.append({"_prev": 0.0})
        g = groups[-1]
        g[step] = at - g["_prev"]
        g["_prev"] = at
    for g in groups:
        del g["_prev"]
    return groups


class Bench(Report):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.work = args.workdir
        self.lz = args.lazarus
        self.prog = build("threadheap", self.work)
        self.results = {}

    def one_job(self, nthreads, mode):
        """First checkpoint, then --later ones each after `dirty 1`: their rows."""
        job = Job(self, f"{mode}-{nthreads}", [self.prog, str(self.args.mib), str(nthreads), mode],
                  env={"LAZARUS_TRACE": "1"})
        try:
            walls = [job.checkpoint()]
            dirtied = []
            for _ in range(self.args.later):
                d = job.cmd("dirty 1", "dirtied")
                dirtied.append(int(d.split()[1]))
                walls.append(job.checkpoint())
            job.quit()
            rows = job.rows()
            steps = pause_steps(job)
        finally:
            job.remove()
        idx = [i for _, i in walls]
        return {"pause_ms": [rows[i]["pause_ms"] for i in idx], "durable_ms": [rows[i]["durable_ms"] for i in idx],
                "stored_bytes": [rows[i]["stored_bytes"] for i in idx],
                "changed_bytes": [rows[i]["changed_bytes"] for i in idx],
                "wall_s": [w for w, _ in walls], "dirtied_pages": dirtied,
                "stop_ms": [g.get("threads stopped") for g in steps], "steps": steps}

    def section(self, mode):
        n, mib, reps = self.args.threads, self.args.mib, self.args.reps
        what = {"idle": "waiting (read(), condition variable)", "busy": "computing"}[mode]
        self.head(f"{'1' if mode == 'idle' else '2'}. {mib} MiB heap, 4 KiB pages; threads {what} while checkpointed; "
                  f"first checkpoint + {self.args.later} later (1 % of the pages rewritten before each); "
                  f"{reps} repetitions, medians")
        figs = self.results[mode] = []
        for rep in range(reps):
            fig = {}
            for k in ((1, n) if rep % 2 == 0 else (n, 1)):
                log(f"{mode}: repetition {rep + 1}/{reps}, {k} thread(s)")
                fig[k] = self.one_job(k, mode)
            figs.append(fig)

        def first(k, key="pause_ms"):
            return med([f[k][key][0] for f in figs])

        def later(k, key="pause_ms"):
            return med([med(f[k][key][1:]) for f in figs])

        ratio_first = med([f[n]["pause_ms"][0] / f[1]["pause_ms"][0] for f in figs])
        ratio_later = med([med(f[n]["pause_ms"][1:]) / med(f[1]["pause_ms"][1:]) for f in figs])
        self.row("1 thread: first checkpoint, pause (limit)", first(1), "ms", None, None,
                 f"durable {first(1, 'durable_ms'):.0f} ms")
        self.row(f"{n} threads: first checkpoint, pause", first(n), "ms", None, first(1),
                 f"durable {first(n, 'durable_ms'):.0f} ms; step 'threads stopped' {first(n, 'stop_ms'):.2f} ms "
                 f"(1 thread: {first(1, 'stop_ms'):.2f})")
        self.row(f"  ratio {n} / 1 threads, first checkpoint", ratio_first, "x", ("<=", TARGET), None,
                 "each repetition: " + " ".join(f"{f[n]['pause_ms'][0] / f[1]['pause_ms'][0]:.2f}" for f in figs))
        self.row("1 thread: later checkpoints, pause (limit)", later(1), "ms", None, None,
                 f"durable {later(1, 'durable_ms'):.0f} ms, changed {later(1, 'changed_bytes') / 2**20:.1f} MiB")
        self.row(f"{n} threads: later checkpoints, pause", later(n), "ms", None, later(1),
                 f"durable {later(n, 'durable_ms'):.0f} ms, changed {later(n, 'changed_bytes') / 2**20:.1f} MiB; "
                 f"step 'threads stopped' {later(n, 'stop_ms'):.2f} ms (1 thread: {later(1, 'stop_ms'):.2f})")
        self.row(f"  ratio {n} / 1 threads, later checkpoints", ratio_later, "x", ("<=", TARGET), None,
                 "each repetition: " + " ".join(f"{med(f[n]['pause_ms'][1:]) / med(f[1]['pause_ms'][1:]):.2f}"
                                                for f in figs))
        # the steps of the pause, last checkpoint of the last repetition: where the threads cost more
        for k in (1, n):
            steps = figs[-1][k]["steps"]
            if steps:
                self.note(f"pause steps, {mode}, {k} thread(s), last checkpoint (ms; pause_ms ends inside the "
                          f"last step, before the threads are let go): "
                          + ", ".join(f"{s} {ms:.2f}" for s, ms in steps[-1].items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions (each: a 1-thread and an N-thread job)")
    ap.add_argument("--later", type=int, default=5, help="checkpoints after the first in each job")
    ap.add_argument("--mib", type=int, default=1024, help="the shared heap (MiB)")
    ap.add_argument("--threads", type=int, default=16, help="threads sharing the heap")
    ap.add_argument("--modes", default="idle,busy", help="idle, busy or both (default)")
    store_options(ap, "threads", "stores and results.json (default bench/out/threads)")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in ("idle", "busy") for m in modes):
        ap.error("--modes: idle, busy")
    ready_workdir(args)
    b = Bench(args)
    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    load0 = os.getloadavg()
    t0 = time.time()
    for mode in modes:
        log(f"section {mode}")
        try:
            b.section(mode)
        except (BenchError, RuntimeError, subprocess.SubprocessError, OSError) as e:
            b.head(f"   {mode}: FAILED: {e}")
            b.failed.append(f"{mode}: {e}")
            log(f"{mode} failed: {e}")
    elapsed = time.time() - t0
    load1 = os.getloadavg()
    print(f"Lazarus threads: {args.lazarus} ({git}), store on {args.workdir}, {os.cpu_count()} CPUs")
    print(f"load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end; {elapsed:.0f} s. "
          f"Limit = the 1-thread figure measured in this run; target: {args.threads} threads / 1 thread <= {TARGET}.")
    ok = b.print_all(f"pause with {args.threads} threads <= {TARGET} x the pause with 1 thread")
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"lazarus": args.lazarus, "git": git, "load": [load0, load1], "seconds": elapsed,
                   "results": {m: [{str(k): v for k, v in fig.items()} for fig in figs]
                               for m, figs in b.results.items()},
                   "table": b.table, "notes": b.notes, "failed": b.failed}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
