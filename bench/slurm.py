#!/usr/bin/env python3
"""Batch jobs on a real Slurm (issue 19, "Measured"): the work a requeue
loses, and how long the warning signal takes to become a requeued job,
against Slurm's own requeue delay measured in the same run.

Starts the one-node Slurm of tests/slurm.py (root; Debian's slurmctld slurmd
slurm-client munge), then:

  (a) Slurm alone: a `sleep` job, `scontrol requeue` once it runs: the time
      until Slurm shows it requeued (state no longer RUNNING) and until it
      runs again (cred_expire=30 and the 5 s scheduling pass: Slurm's own
      requeue delay);
  (b) the warning path: `exec lazarus run --resume -d DIR -i 30 -- step_sim`
      (steps of PACE ms), `scancel --batch --signal=USR1 JOB` at a known
      instant once it has run a while: the time until Slurm shows the job
      requeued (Lazarus checkpointed, made it durable, stopped the program and
      ran `scontrol requeue`), then until it runs again, and the work lost:
      the steps the first run printed after the checkpoint it resumes from
      (read from the job's output: the last step before the restart against
      the first after it), times PACE;
  (c) node failure: the same job with -i INTERVAL, the node set DOWN after a
      while and resumed: the work lost (up to the interval: what the last
      periodic checkpoint did not hold).

    python3 bench/slurm.py [--pace-ms 100] [--interval 10] [--reps 2]

Prints each measurement and the medians.  About 3 minutes per repetition.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import slurm as slurm_mod  # noqa: E402

LAZARUS = REPO / "build" / "bin" / "lazarus"


def state(c, job):
    return c.job(job).get("JobState", "")


def wait(c, job, pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = state(c, job)
        if pred(s):
            return time.monotonic()
        time.sleep(0.05)
    raise SystemExit(f"job {job}: {what} not within {timeout}s (state {state(c, job)})\n{c.logs()}")


def lost_steps(log: str) -> int:
    """Steps the first run printed after the checkpoint the rerun resumed from."""
    lines = log.splitlines()
    cut = next(i for i, l in enumerate(lines) if "restarting the job in" in l)
    before = [int(m.group(1)) for l in lines[:cut] if (m := re.match(r"step (\d+) ", l))]
    after = [int(m.group(1)) for l in lines[cut:] if (m := re.match(r"step (\d+) ", l))]
    return max(before) - after[0] + 1 if before and after else 0


def job_script(work: Path, name: str, interval: int, steps: int, pace: int) -> Path:
    p = work / f"{name}.sh"
    p.write_text(f"""#!/bin/bash
#SBATCH --requeue --open-mode=append --output={work}/{name}.log --ntasks=1 --time=30
exec {LAZARUS} run --resume -d {work}/{name}.ckpt -i {interval} -- {work}/step_sim {steps} {pace} {work}/{name}.txt
""")
    return p


def slurm_requeue(c, work):
    s = work / "sleep.sh"
    s.write_text(f"#!/bin/bash\n#SBATCH --requeue --ntasks=1 --output={work}/sleep.log\nexec sleep 600\n")
    job = c.sbatch(s)
    wait(c, job, lambda x: x == "RUNNING", 120, "running")
    time.sleep(1)
    t0 = time.monotonic()
    c.run("scontrol", "requeue", str(job), check=True)
    t1 = wait(c, job, lambda x: x != "RUNNING", 60, "requeued")
    t2 = wait(c, job, lambda x: x == "RUNNING", 300, "running again")
    c.run("scancel", str(job))
    wait(c, job, lambda x: x in ("CANCELLED", "COMPLETED"), 120, "cancelled")
    return t1 - t0, t2 - t0


def warning_path(c, work, pace, rep):
    name = f"warn{rep}"
    job = c.sbatch(job_script(work, name, 30, 400, pace))
    wait(c, job, lambda x: x == "RUNNING", 120, "running")
    time.sleep(8)
    t0 = time.monotonic()
    c.run("scancel", "--batch", "--signal=USR1", str(job), check=True)
    t1 = wait(c, job, lambda x: x != "RUNNING", 60, "requeued")
    t2 = wait(c, job, lambda x: x == "RUNNING", 300, "running again")
    time.sleep(3)
    c.run("scancel", str(job))
    wait(c, job, lambda x: x in ("CANCELLED", "COMPLETED"), 120, "cancelled")
    log = (work / f"{name}.log").read_text(errors="replace")
    return t1 - t0, t2 - t0, lost_steps(log) * pace / 1000.0


def node_failure(c, work, pace, interval, rep):
    name = f"node{rep}"
    job = c.sbatch(job_script(work, name, interval, 400, pace))
    wait(c, job, lambda x: x == "RUNNING", 120, "running")
    time.sleep(interval + 7)
    c.run("scontrol", "update", f"nodename={c.node}", "state=down", "reason=bench", check=True)
    try:
        wait(c, job, lambda x: x != "RUNNING", 120, "requeued")
    finally:
        c.run("scontrol", "update", f"nodename={c.node}", "state=resume")  # refused if already back (ReturnToService=2)
    wait(c, job, lambda x: x == "RUNNING", 300, "running again")
    time.sleep(3)
    c.run("scancel", str(job))
    wait(c, job, lambda x: x in ("CANCELLED", "COMPLETED"), 120, "cancelled")
    log = (work / f"{name}.log").read_text(errors="replace")
    return lost_steps(log) * pace / 1000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pace-ms", type=int, default=100)
    ap.add_argument("--interval", type=int, default=10)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    c, why = slurm_mod.start_cluster()
    if c is None:
        raise SystemExit(f"cannot run: {why}")
    try:
        work = c.dir / "work"
        work.mkdir(mode=0o755)
        subprocess.run(["gcc", "-O2", "-o", str(work / "step_sim"), str(REPO / "tests/programs/step_sim.c")], check=True)
        rows = {"slurm_requeued": [], "slurm_running": [], "warn_requeued": [], "warn_running": [], "warn_lost": [],
                "node_lost": []}
        for rep in range(a.reps):
            q, r = slurm_requeue(c, work)
            rows["slurm_requeued"].append(q)
            rows["slurm_running"].append(r)
            print(f"rep {rep}: Slurm alone: scontrol requeue -> requeued {q:.2f} s, running again {r:.1f} s", flush=True)
            q, r, lost = warning_path(c, work, a.pace_ms, rep)
            rows["warn_requeued"].append(q)
            rows["warn_running"].append(r)
            rows["warn_lost"].append(lost)
            print(f"rep {rep}: warning USR1 -> requeued {q:.2f} s, running again {r:.1f} s, work lost {lost:.2f} s",
                  flush=True)
            lost = node_failure(c, work, a.pace_ms, a.interval, rep)
            rows["node_lost"].append(lost)
            print(f"rep {rep}: node DOWN (-i {a.interval}): work lost {lost:.2f} s", flush=True)
        med = {k: statistics.median(v) for k, v in rows.items()}
        print(f"\nmedians over {a.reps}: Slurm's own requeue: requeued {med['slurm_requeued']:.2f} s, running again "
              f"{med['slurm_running']:.1f} s; warning signal -> requeued {med['warn_requeued']:.2f} s (Lazarus' share "
              f"{med['warn_requeued'] - med['slurm_requeued']:+.2f} s), running again {med['warn_running']:.1f} s; "
              f"work lost per requeue: warning {med['warn_lost']:.2f} s, node failure with -i {a.interval} "
              f"{med['node_lost']:.2f} s")
    finally:
        c.stop()
        c.cleanup()


if __name__ == "__main__":
    main()
