#!/usr/bin/env python3
"""Checkpoint/restart benchmark for Lazarus (issue 2, "Performance").

Measures in one run, on the filesystem of the work directory (where the
checkpoint store lives), and repeats each measurement --reps times:

  (a) dd:       dd if=/dev/zero of=FILE bs=1M count=1024 conv=fsync
  (b) ckpt:     bench/programs/bigheap fills 1 GiB of heap with random data and
                calls lazarus_checkpoint(); its own wall time around the call
                (the time until the checkpoint is durable, the pause included)
      ckpt-cli: `lazarus checkpoint -d DIR` of the same program, timed from outside
  (c) cat:      cat of the API checkpoint's files > /dev/null, warm cache, right
                after the checkpoint
  (d) restart:  from just before launching `lazarus restart` to the
                CLOCK_REALTIME the program writes as soon as lazarus_checkpoint()
                returns LAZARUS_RESTARTED
  (e) restart --lazy: the same until the program runs again (target 50 ms for
                1 GiB); until every page is in (the fault server's end, its
                trace line; target 1.1x the eager restart of the same
                repetition); the program's work rate during the fill: its pass
                over the heap in order against a second pass once every page
                is in (target >= 0.8; the eager restart's first pass for scale)

and prints the medians with the ratios ckpt/dd (target <= 1.3) and restart
against reading the image (target <= 1.5).  Reading the image is measured
cold (caches dropped, as after losing the machine; root only) and warm; a warm
`cat` reads into one small buffer, while a restart must also allocate and
first-touch all of the program's memory again, so the warm ratio is given
against cat plus a first touch of as much memory (dd bs=SIZE of /dev/zero to
/dev/null).  Standard library only.

    make && python3 bench/ckpt_restart.py [--reps 3] [--mib 1024] [--workdir DIR]
"""

import argparse
import glob
import json
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_CKPT = 1.3
TARGET_RESTART = 1.5
TARGET_LAZY_RUNNING = 0.050  # s for 1 GiB (issue 20; CRIU lazy: 34 ms here)
TARGET_LAZY_ALL_IN = 1.1     # every page in, against an eager restart
TARGET_LAZY_WORK = 0.8       # work rate during the fill, against the rate with every page in


def store_options(ap, sub, workdir_help, keep_help="keep the stores"):
    """The options every benchmark has: --workdir (default bench/out/SUB), --lazarus,
    --timeout, --keep."""
    ap.add_argument("--workdir", default=os.path.join(ROOT, "bench", "out", *([sub] if sub else [])), help=workdir_help)
    ap.add_argument("--lazarus", default=os.path.join(ROOT, "build", "bin", "lazarus"))
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--keep", action="store_true", help=keep_help)


def ready_workdir(args):
    """Stops with one line if `lazarus` is not built; makes --workdir, absolute."""
    if not os.access(args.lazarus, os.X_OK):
        sys.exit(f"bench: {args.lazarus} not found; run make first")
    os.makedirs(args.workdir, exist_ok=True)
    args.workdir = os.path.abspath(args.workdir)


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def build_bigheap(out):
    src = os.path.join(ROOT, "bench", "programs", "bigheap.c")
    lib = os.path.join(ROOT, "build", "lib")
    cmd = [os.environ.get("CC", "cc"), "-std=c17", "-O2", "-Wall",
           "-I" + os.path.join(ROOT, "include"), "-o", out, src,
           "-L" + lib, "-llazarus", "-Wl,-rpath," + lib]
    subprocess.run(cmd, check=True)


def descendants(root_pid):
    """{pid: comm} of every live descendant of root_pid, from /proc."""
    parent, comm = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        parent[int(d)], comm[int(d)] = ppid, name
    found, grew = {root_pid}, True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if pid not in found and ppid in found:
                found.add(pid)
                grew = True
    found.discard(root_pid)
    return {pid: comm[pid] for pid in found}


class LineReader:
    """Lines of a pipe, with a timeout (a thread feeds a queue)."""

    def __init__(self, pipe):
        self.q = queue.Queue()
        threading.Thread(target=self._pump, args=(pipe,), daemon=True).start()

    def _pump(self, pipe):
        for line in iter(pipe.readline, b""):
            self.q.put(line.decode(errors="replace").rstrip("\n"))
        self.q.put(None)

    def get(self, timeout, what):
        try:
            line = self.q.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        if line is None:
            raise RuntimeError(f"the program ended while waiting for {what}")
        return line


def timed(cmd, **kw):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, **kw)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with status {r.returncode}")
    return dt, r


def one_rep(args, rep, bigheap):
    fig = {}
    work = args.workdir
    mib = args.mib

    # (a) the filesystem's limit: dd with fsync, same size, same filesystem.
    ddfile = os.path.join(work, "dd.bin")
    os.sync()
    fig["dd"], _ = timed(["dd", "if=/dev/zero", f"of={ddfile}", "bs=1M",
                          f"count={mib}", "conv=fsync", "status=none"])
    os.unlink(ddfile)

    store = os.path.join(work, f"store.{rep}")
    tsfile = os.path.join(work, "restarted.ns")
    shutil.rmtree(store, ignore_errors=True)
    if os.path.exists(tsfile):
        os.unlink(tsfile)

    runp = subprocess.Popen([args.lazarus, "run", "-d", store, "-i", "0", "--",
                             bigheap, tsfile, str(mib)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        out = LineReader(runp.stdout)
        out.get(args.timeout, "the heap to be filled")
        os.sync()  # nothing else dirty while the checkpoint writes
        runp.stdin.write(b"go\n")
        runp.stdin.flush()

        # (b) checkpoint through the API, timed by the program itself.
        line = out.get(args.timeout, "the checkpoint")
        m = re.fullmatch(r"checkpoint index=(\d+) seconds=([0-9.]+)", line)
        if not m:
            raise RuntimeError(f"unexpected output from bigheap: {line!r}")
        index, fig["ckpt"] = int(m.group(1)), float(m.group(2))

        # (c) reading that checkpoint's files, warm, right after it.
        # the checkpoint's own files and the page data it references (packs/,
        # shared by checkpoints: the only checkpoint here references all of it)
        files = sorted(p for p in glob.glob(os.path.join(store, "ckpt.*", "*")) + glob.glob(os.path.join(store, "packs", "*"))
                       if os.path.isfile(p))
        if not files:
            raise RuntimeError(f"no checkpoint files under {store}/ckpt.*")
        fig["cat_bytes"] = sum(os.path.getsize(p) for p in files)
        fig["cat"], _ = timed(["cat"] + files, stdout=subprocess.DEVNULL)

        # (b') a checkpoint requested from outside, until `lazarus checkpoint` returns.
        os.sync()
        fig["ckpt_cli"], r = timed([args.lazarus, "checkpoint", "-d", store],
                                   stdout=subprocess.PIPE, timeout=args.timeout)
        cli_index = r.stdout.decode().strip()

        _, r = timed([args.lazarus, "list", "-d", store, "--json"], stdout=subprocess.PIPE)
        rows = {row["index"]: row for row in json.loads(r.stdout)}
        if index in rows:
            fig["pause_ms"] = rows[index].get("pause_ms")
            fig["stored_bytes"] = rows[index].get("stored_bytes")
        if cli_index.isdigit() and int(cli_index) in rows:
            fig["cli_pause_ms"] = rows[int(cli_index)].get("pause_ms")

        # Kill the program (a descendant of `lazarus run`) with SIGKILL.
        victims = [pid for pid, comm in descendants(runp.pid).items() if comm == "bigheap"]
        if not victims:
            raise RuntimeError("bigheap not found below lazarus run")
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        runp.wait(timeout=args.timeout)
    finally:
        if runp.poll() is None:
            runp.kill()
            runp.wait()

    # (d) restart until the program runs again.
    def restart(lazy=False):
        t0 = time.time_ns()
        # --force: after the first restart the program exited 0 (the job finished)
        rp = subprocess.run([args.lazarus, "restart", "-d", store, "--at", str(index), "--force"] + (["--lazy"] if lazy else []),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            timeout=args.timeout, env=dict(os.environ, LAZARUS_TRACE="1") if lazy else None)
        if rp.returncode != 0:
            raise RuntimeError(f"lazarus restart{' --lazy' if lazy else ''} exited with status {rp.returncode}: "
                               f"{rp.stderr.decode(errors='replace')[-500:]}")
        with open(tsfile) as f:
            t = (int(f.read().strip()) - t0) / 1e9
        os.unlink(tsfile)
        with open(tsfile + ".work") as f:
            work = [float(v) for v in f.read().split()]
        os.unlink(tsfile + ".work")
        if not lazy:
            return t, t, work
        m = re.search(r"lazy fill of checkpoint \d+: .* done at (\d+)", rp.stderr.decode(errors="replace"))
        if not m:
            raise RuntimeError("lazarus restart --lazy did not say when its fill was done")
        return t, (int(m.group(1)) - t0) / 1e9, work

    fig["restart"], _, work = restart()
    fig["work_eager"] = work[1] / work[0]
    # (e) lazy: until the program runs again, until every page is in, and its
    # work rate during the fill (a pass over the heap in order) against the
    # same pass with every page in
    fig["lazy_running"], fig["lazy_all_in"], work = restart(lazy=True)
    fig["work_lazy"] = work[1] / work[0]
    # The other limit of a restart: memory the program had must be allocated
    # again, and first touch of fresh pages is expensive in a VM.  dd with a
    # block of the heap's size allocates and fills one buffer of that size.
    fig["alloc"], _ = timed(["dd", "if=/dev/zero", "of=/dev/null", f"bs={mib}M", "count=1", "status=none"])
    # Cold cache: what a restart after losing the machine sees (root only).
    if os.geteuid() == 0:
        def drop_caches():
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        drop_caches()
        fig["cat_cold"], _ = timed(["cat"] + files, stdout=subprocess.DEVNULL)
        drop_caches()
        fig["restart_cold"], _, _ = restart()
    if not args.keep:
        shutil.rmtree(store, ignore_errors=True)
    return fig


def fmt(v, unit="s"):
    if v is None:
        return "-"
    return f"{v:.3f}" if unit == "s" else f"{v:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mib", type=int, default=1024, help="heap size (MiB)")
    store_options(ap, "", "where the store and the dd file go (default bench/out)")
    args = ap.parse_args()

    ready_workdir(args)
    bigheap = os.path.join(args.workdir, "bigheap")
    build_bigheap(bigheap)
    fstype = subprocess.run(["stat", "-f", "-c", "%T", args.workdir],
                            capture_output=True, text=True).stdout.strip()
    log(f"{args.reps} repetitions, {args.mib} MiB, store in {args.workdir} ({fstype})")

    reps = []
    for rep in range(1, args.reps + 1):
        log(f"repetition {rep}/{args.reps}")
        reps.append(one_rep(args, rep, bigheap))

    def med(key):
        vals = [r[key] for r in reps if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    rows = [
        ("(a) dd 1M x N conv=fsync", "dd", "s"),
        ("(b) checkpoint, API, until durable", "ckpt", "s"),
        ("    checkpoint, `lazarus checkpoint`", "ckpt_cli", "s"),
        ("    pause of the API checkpoint (ms)", "pause_ms", "ms"),
        ("    pause of the CLI checkpoint (ms)", "cli_pause_ms", "ms"),
        ("(c) cat image files (warm)", "cat", "s"),
        ("    first touch of as much memory", "alloc", "s"),
        ("(d) restart until running again (warm)", "restart", "s"),
        ("(e) restart --lazy until running again", "lazy_running", "s"),
        ("    restart --lazy until every page in", "lazy_all_in", "s"),
        ("    work rate in the first pass, eager", "work_eager", "s"),
        ("    work rate during the lazy fill", "work_lazy", "s"),
        ("(c) cat image files (cold cache)", "cat_cold", "s"),
        ("(d) restart, cold cache", "restart_cold", "s"),
    ]
    head = f"{'figure':40}" + "".join(f"{'rep' + str(i + 1):>9}" for i in range(len(reps))) + f"{'median':>9}"
    print(f"Lazarus checkpoint/restart, {args.mib} MiB random heap, {args.workdir} ({fstype})")
    print(head)
    print("-" * len(head))
    for label, key, unit in rows:
        print(f"{label:40}" + "".join(f"{fmt(r.get(key), unit):>9}" for r in reps)
              + f"{fmt(med(key), unit):>9}")
    print(f"{'    image bytes read by cat (MiB)':40}"
          + "".join(f"{r['cat_bytes'] / 2**20:>9.1f}" for r in reps))

    # The disk's speed drifts a lot between repetitions (dd alone varies 4x
    # here), so each ratio is taken within one repetition, where both sides
    # ran back to back, and the median of those is reported.
    def ratio(num, *den):
        vals = [r[num] / sum(r[d] for d in den) for r in reps
                if r.get(num) is not None and all(r.get(d) for d in den)]
        return statistics.median(vals) if vals else None

    ratios = {
        "ckpt/dd": (ratio("ckpt", "dd"), TARGET_CKPT),
        "ckpt_cli/dd": (ratio("ckpt_cli", "dd"), None),
        "restart/cat (warm)": (ratio("restart", "cat"), None),
        "restart/(cat+first touch) (warm)": (ratio("restart", "cat", "alloc"), TARGET_RESTART),
    }
    ratios["lazy running again (s)"] = (med("lazy_running"), TARGET_LAZY_RUNNING * args.mib / 1024)
    ratios["lazy all in/restart (warm)"] = (ratio("lazy_all_in", "restart"), TARGET_LAZY_ALL_IN)
    ratios["work rate during the lazy fill"] = (med("work_lazy"), TARGET_LAZY_WORK)
    if med("restart_cold") is not None:
        ratios["restart/cat (cold cache)"] = (ratio("restart_cold", "cat_cold"), TARGET_RESTART)
    print()
    ok = True
    print("ratios: median over repetitions of the ratio within each repetition")
    for name, (val, target) in ratios.items():
        verdict = ""
        higher = name.startswith("work rate")  # a rate: at least the target
        if target is not None and val is not None:
            good = val >= target if higher else val <= target
            ok &= good
            verdict = f"target {'>=' if higher else '<='} {target:g}  {'PASS' if good else 'FAIL'}"
        print(f"{'ratio ' + name:40}{(val if val is not None else float('nan')):>9.3f}   {verdict}")

    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"mib": args.mib, "fstype": fstype, "reps": reps,
                   "ratios": {k: v[0] for k, v in ratios.items()}}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
