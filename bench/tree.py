#!/usr/bin/env python3
"""Tree: benchmark of the coordinated checkpoint's pause for a job of processes.

A job of 8 processes with 128 MiB each against one process with 1 GiB
(bench/programs/treeheap.c: the main process forks its children before any
memory is touched, then each fills a heap of its own, 4 KiB pages, random
data), both under `lazarus run -i 0`, checkpointed with `lazarus checkpoint`:
the first checkpoint (every heap is new: fork mode), then the later ones, each
after every process rewrote about 1 % of its pages.  The pause is the
checkpoint's `pause_ms` from `lazarus list --json`: for a job, the largest of
its processes' pauses, each from its checkpoint handler's start until it is let
go (RESUME), i.e. the coordinated pause as the process signalled first sees it.
Target (process-tree issue): pause(8 x 128 MiB) / pause(1 x 1 GiB) <= 2, for
the first checkpoint and for the later ones.  Also reported: the wall time of
`lazarus checkpoint` (until durable) for both.

Each repetition runs the two jobs back to back, the order alternating; each
ratio is taken within a repetition and the median of those is reported, like
the other benchmarks.  With LAZARUS_TRACE=1 the supervisor prints the
coordination's steps ("lazarus: job": signalled, each process stopped, GO,
each process captured, tree read, RESUME sent, committed) and every process its
own pause's steps ("lazarus: checkpoint", not labelled by process): notes give
both for the last checkpoints of the last repetition.

    make && python3 bench/tree.py [--reps 3] [--later 5] [--procs 8] [--mib 128]

Standard library only.  Results in WORKDIR/results.json (default
bench/out/tree).  Exits 1 if a target is missed or a step fails.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

from ckpt_restart import descendants, log, ready_workdir, store_options
from incremental import TRACE_RE, BenchError, Job, Report, build, med

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 2.0
JOB_RE = re.compile(r"lazarus: job +([0-9.]+) ms (.*)")
STEPS = ("threads stopped", "the job is stopped", "process and descriptors", "regions",
         "directory and file journal", "dirty pages", "changed pages copied", "forked")


def job_steps(job):
    """The supervisor's steps of each checkpoint: a list of {step: ms since it
    began signalling}; per-process steps ("stopped PID", "captured PID") are
    gathered as first/last."""
    groups = []
    for line in job.err:
        m = JOB_RE.match(line)
        if not m:
            continue
        at, what = float(m.group(1)), m.group(2)
        if what.startswith("checkpoint "):
            groups.append({"signalled": at})
            continue
        if not groups:
            continue
        g = groups[-1]
        key = what.split(" ")[0] if what.startswith(("stopped ", "captured ")) else what.split(" to ")[0]
        if key in ("stopped", "captured"):
            g.setdefault(key + " first", at)
            g[key + " last"] = at
        else:
            g[key] = at
    return groups


def proc_steps(job):
    """The processes' pause steps (LAZARUS_TRACE=1) of each checkpoint: a list
    of {step: [ms since that process's pause began, one per process]}.  The
    lines of the processes interleave and are not labelled, so only the spread
    of each step is known."""
    groups, prev = [], None
    for line in job.err:
        m = TRACE_RE.match(line)
        if not m:
            continue
        step, at = m.group(2), float(m.group(1))
        if step == "threads stopped" and prev not in (None, "threads stopped"):
            groups.append({})
        if not groups:
            groups.append({})
        groups[-1].setdefault(step, []).append(at)
        prev = step
    return groups


def schedstat(pids):
    """{pid: (ns on a CPU, ns waiting on a run queue)} (/proc/PID/schedstat: the
    thread group leader, the only thread of these processes and of the supervisor)."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                run, wait = f.read().split()[:2]
            out[pid] = (int(run), int(wait))
        except (OSError, ValueError):
            pass
    return out


def sched_delta(before, after):
    """(ms on a CPU, summed; ms waiting for a CPU, summed; the largest wait of one process)"""
    d = [((after[p][0] - before[p][0]) / 1e6, (after[p][1] - before[p][1]) / 1e6) for p in after if p in before]
    return (sum(c for c, _ in d), sum(w for _, w in d), max((w for _, w in d), default=0.0)) if d else (None,) * 3


class Bench(Report):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.work = args.workdir
        self.lz = args.lazarus
        self.prog = build("treeheap", self.work)
        self.results = []

    def one_job(self, nprocs, mib):
        """First checkpoint, then --later ones each after `dirty 1`: their figures."""
        job = Job(self, f"{nprocs}x{mib}", [self.prog, str(mib), str(nprocs)], env={"LAZARUS_TRACE": "1"})
        try:
            procs = [p for p, c in descendants(job.p.pid).items() if c == job.comm]
            if len(procs) != nprocs:
                raise BenchError(f"{nprocs}x{mib}: {len(procs)} {job.comm} process(es) below lazarus run")
            cpu = []  # per checkpoint: the job's processes' (cpu, wait, max wait) ms, the supervisor's (cpu, wait)

            def checkpoint():
                b0, s0 = schedstat(procs), schedstat([job.p.pid])
                w = job.checkpoint()
                jd, sd = sched_delta(b0, schedstat(procs)), sched_delta(s0, schedstat([job.p.pid]))
                cpu.append({"cpu_ms": jd[0], "wait_ms": jd[1], "max_wait_ms": jd[2],
                            "sv_cpu_ms": sd[0], "sv_wait_ms": sd[1]})
                return w
            walls = [checkpoint()]
            dirtied = []
            for _ in range(self.args.later):
                d = job.cmd("dirty 1", "dirtied")
                dirtied.append(int(d.split()[1]))
                walls.append(checkpoint())
            job.quit()
            rows = job.rows()
            sv, steps = job_steps(job), proc_steps(job)
        finally:
            job.remove()
        idx = [i for _, i in walls]
        bad = [i for i in idx if rows[i]["processes"] != nprocs]
        if bad:
            raise BenchError(f"{nprocs}x{mib}: checkpoint(s) {bad} hold {[rows[i]['processes'] for i in bad]} "
                             f"process(es), not {nprocs}")
        return {"pause_ms": [rows[i]["pause_ms"] for i in idx], "durable_ms": [rows[i]["durable_ms"] for i in idx],
                "stored_bytes": [rows[i]["stored_bytes"] for i in idx],
                "changed_bytes": [rows[i]["changed_bytes"] for i in idx],
                "memory_bytes": [rows[i]["memory_bytes"] for i in idx],
                "wall_s": [w for w, _ in walls], "dirtied_pages": dirtied,
                "cpu_ms": [c["cpu_ms"] for c in cpu], "wait_ms": [c["wait_ms"] for c in cpu],
                "max_wait_ms": [c["max_wait_ms"] for c in cpu], "sv_cpu_ms": [c["sv_cpu_ms"] for c in cpu],
                "sv_wait_ms": [c["sv_wait_ms"] for c in cpu],
                "resume_ms": [g.get("RESUME sent") for g in sv], "stopped_ms": [g.get("GO sent") for g in sv],
                "supervisor": sv, "steps": steps}

    def run(self):
        a = self.args
        n, mib, ref = a.procs, a.mib, a.ref_mib or a.procs * a.mib
        kinds = ((1, ref), (n, mib))
        self.head(f"1. {n} processes x {mib} MiB against 1 process x {ref} MiB, 4 KiB pages, idle while "
                  f"checkpointed; first checkpoint + {a.later} later (1 % of each process's pages rewritten "
                  f"before each); {a.reps} repetitions, medians")
        figs = self.results
        for rep in range(a.reps):
            fig = {}
            for k, m in (kinds if rep % 2 == 0 else kinds[::-1]):
                log(f"repetition {rep + 1}/{a.reps}: {k} x {m} MiB")
                fig[k] = self.one_job(k, m)
            figs.append(fig)
            log(f"repetition {rep + 1}: pause first {fig[n]['pause_ms'][0]:.1f} / {fig[1]['pause_ms'][0]:.1f} ms, "
                f"later {med(fig[n]['pause_ms'][1:]):.1f} / {med(fig[1]['pause_ms'][1:]):.1f} ms")

        def first(k, key="pause_ms"):
            return med([f[k][key][0] for f in figs])

        def later(k, key="pause_ms"):
            return med([med(f[k][key][1:]) for f in figs])

        def each(vals):
            return " ".join(f"{v:.2f}" if v < 10 else f"{v:.1f}" for v in vals)

        r_first = [f[n]["pause_ms"][0] / f[1]["pause_ms"][0] for f in figs]
        r_later = [med(f[n]["pause_ms"][1:]) / med(f[1]["pause_ms"][1:]) for f in figs]
        self.ratios = {"first": r_first, "later": r_later}
        tag = f"{n} x {mib} MiB"
        self.row(f"1 x {ref} MiB: first checkpoint, pause (limit)", first(1), "ms", None, None,
                 f"each: {each(f[1]['pause_ms'][0] for f in figs)}; durable {first(1, 'durable_ms'):.0f} ms")
        self.row(f"{tag}: first checkpoint, pause", first(n), "ms", None, first(1),
                 f"each: {each(f[n]['pause_ms'][0] for f in figs)}; durable {first(n, 'durable_ms'):.0f} ms; "
                 f"supervisor: all stopped {first(n, 'stopped_ms'):.1f} ms, RESUME sent {first(n, 'resume_ms'):.1f} ms")
        self.row(f"  ratio {tag} / 1 x {ref} MiB, first checkpoint", med(r_first), "x", ("<=", TARGET), None,
                 "each repetition: " + each(r_first))
        self.row(f"1 x {ref} MiB: later checkpoints, pause (limit)", later(1), "ms", None, None,
                 f"each: {each(med(f[1]['pause_ms'][1:]) for f in figs)}; durable {later(1, 'durable_ms'):.0f} ms, "
                 f"changed {later(1, 'changed_bytes') / 2**20:.1f} MiB")
        self.row(f"{tag}: later checkpoints, pause", later(n), "ms", None, later(1),
                 f"each: {each(med(f[n]['pause_ms'][1:]) for f in figs)}; durable {later(n, 'durable_ms'):.0f} ms, "
                 f"changed {later(n, 'changed_bytes') / 2**20:.1f} MiB; supervisor: all stopped "
                 f"{later(n, 'stopped_ms'):.1f} ms, RESUME sent {later(n, 'resume_ms'):.1f} ms")
        self.row(f"  ratio {tag} / 1 x {ref} MiB, later checkpoints", med(r_later), "x", ("<=", TARGET), None,
                 "each repetition: " + each(r_later))
        self.row(f"1 x {ref} MiB: first checkpoint, `lazarus checkpoint`", first(1, "wall_s"), "s", None, None,
                 f"each: {each(f[1]['wall_s'][0] for f in figs)}")
        self.row(f"{tag}: first checkpoint, `lazarus checkpoint`", first(n, "wall_s"), "s", None,
                 first(1, "wall_s"), f"each: {each(f[n]['wall_s'][0] for f in figs)}")
        self.row(f"1 x {ref} MiB: later checkpoints, `lazarus checkpoint`", later(1, "wall_s"), "s", None, None,
                 f"each: {each(med(f[1]['wall_s'][1:]) for f in figs)}")
        self.row(f"{tag}: later checkpoints, `lazarus checkpoint`", later(n, "wall_s"), "s", None,
                 later(1, "wall_s"), f"each: {each(med(f[n]['wall_s'][1:]) for f in figs)}")
        for k, m in kinds:
            for which, fn in (("first", first), ("later", later)):
                self.note(f"CPU, {k} x {m} MiB, {which} checkpoint(s) (medians; /proc/PID/schedstat from just before "
                          f"`lazarus checkpoint` to its return, writers not included): the job's processes "
                          f"{fn(k, 'cpu_ms'):.1f} ms on a CPU, {fn(k, 'wait_ms'):.1f} ms waiting for one "
                          f"(the most of one process {fn(k, 'max_wait_ms'):.1f} ms); the supervisor "
                          f"{fn(k, 'sv_cpu_ms'):.1f} ms on a CPU, {fn(k, 'sv_wait_ms'):.1f} ms waiting for one")
        # where the time goes, last repetition: the supervisor's steps and the spread of the processes' steps
        for k, m in kinds:
            fig = figs[-1][k]
            for which, i in (("first", 0), ("last", -1)):
                if fig["supervisor"]:
                    sv = fig["supervisor"][i]
                    self.note(f"supervisor, {k} x {m} MiB, {which} checkpoint (ms since it began signalling): "
                              + ", ".join(f"{s} {v:.1f}" for s, v in sv.items()))
                if fig["steps"]:
                    st = fig["steps"][i]
                    self.note(f"pause steps, {k} x {m} MiB, {which} checkpoint (ms since each process's pause "
                              f"began; min-max over the processes): "
                              + ", ".join(f"{s} {min(st[s]):.1f}" + (f"-{max(st[s]):.1f}" if len(st[s]) > 1 else "")
                                          for s in STEPS if s in st))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions (each: the single process and the job)")
    ap.add_argument("--later", type=int, default=5, help="checkpoints after the first in each job")
    ap.add_argument("--procs", type=int, default=8, help="processes of the job")
    ap.add_argument("--mib", type=int, default=128, help="each process's heap (MiB)")
    ap.add_argument("--ref-mib", type=int, default=0, help="the single process's heap (default procs x mib)")
    store_options(ap, "tree", "stores and results.json (default bench/out/tree)")
    args = ap.parse_args()
    if args.procs < 2:
        ap.error("--procs: at least 2")
    ready_workdir(args)
    b = Bench(args)
    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    load0 = os.getloadavg()
    t0 = time.time()
    try:
        b.run()
    except (BenchError, RuntimeError, subprocess.SubprocessError, OSError) as e:
        b.head(f"   FAILED: {e}")
        b.failed.append(str(e))
        log(f"failed: {e}")
    elapsed = time.time() - t0
    load1 = os.getloadavg()
    ref = args.ref_mib or args.procs * args.mib
    print(f"Lazarus tree: {args.lazarus} ({git}), store on {args.workdir}, {os.cpu_count()} CPUs")
    print(f"load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end; {elapsed:.0f} s. "
          f"Limit = the single-process figure measured in this run; target: {args.procs} x {args.mib} MiB / "
          f"1 x {ref} MiB <= {TARGET:g}.")
    ok = b.print_all(f"pause of {args.procs} processes x {args.mib} MiB <= {TARGET:g} x the pause of 1 process x {ref} MiB")
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"lazarus": args.lazarus, "git": git, "load": [load0, load1], "seconds": elapsed,
                   "args": vars(args), "results": [{str(k): v for k, v in fig.items()} for fig in b.results],
                   "ratios": getattr(b, "ratios", None),
                   "table": b.table, "notes": b.notes, "failed": b.failed}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
