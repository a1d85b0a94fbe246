#!/usr/bin/env python3
"""File I/O overhead benchmark for Lazarus (issue 3, file rollback).

Runs each workload natively and under `lazarus run -i 1 -d STORE` (a
checkpoint every second; the store on the filesystem of the data, in the work
directory), in native/lazarus pairs run back to back, alternating which goes
first (several pairs per repetition, see --pairs), and reports the median
over repetitions of the per-repetition ratio lazarus time / native time (the
median of the repetition's pairs):

  seqread     pread 128 KiB sequentially over a 1 GiB file, page cache warm   <= 1.03
  randread    pread 4 KiB at random offsets of that file, page cache warm      <= 1.03
  append_1m   1 GiB of 1 MiB appends with write()                              <= 1.05
  append_4k   1 GiB of 4 KiB appends with write()                              <= 1.05
  fwrite_16   10 million 16-byte appends with fwrite()                         <= 1.05
  write_16    10 million 16-byte appends with write()                          <= 1.05
  randwrite   pwrite 4 KiB at random offsets of the existing 1 GiB file        <= 2.5
  randwrite --durability machine   the same, no target: far slower, it runs
                                   --seconds and its time is extrapolated to
                                   the work of the native randwrite

The workloads are bench/programs/fileio.c (fio's psync engine: pread/pwrite,
fio's random map) and bench/programs/appender.c, single-threaded programs that
time themselves, so the figures are the I/O loop alone, without the start of
`lazarus run`. fio itself cannot be checkpointed (it runs its job in a child
process with threads and a pipe); when it is installed the same read, overwrite
and append workloads are run once with fio natively, as a reference for the
programs' native throughput.

    make && python3 bench/files_io.py [--reps 3] [--seconds 4] [--quick]

Standard library only. Exits 1 if a target is missed.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

from ckpt_restart import descendants, ready_workdir, store_options  # descendants: {pid: comm} of a process' live descendants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
GiB = 1 << 30


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# key, label, target, program, mode, block size (bytes), volume
#   fileio workloads: ops are calibrated so that the native run takes --seconds
#   appender workloads: volume is (record size, record count)
WORKLOADS = [
    ("seqread", "seq read 128 KiB, 1 GiB file, warm", 1.03, "fileio", "seqread", 128 << 10),
    ("randread", "random read 4 KiB, 1 GiB file, warm", 1.03, "fileio", "randread", 4096),
    ("append_1m", "append 1 MiB records, write()", 1.05, "appender", "write", MiB),
    ("append_4k", "append 4 KiB records, write()", 1.05, "appender", "write", 4096),
    ("fwrite_16", "append 16 B records, fwrite()", 1.05, "appender", "stdio", 16),
    ("write_16", "append 16 B records, write()", 1.05, "appender", "write", 16),
    ("randwrite", "random overwrite 4 KiB pwrite", 2.5, "fileio", "randwrite", 4096),
    ("randwrite_k1", "  same, -k 1 (one checkpoint kept)", None, "fileio", "randwrite", 4096),
    ("randwrite_machine", "  same, --durability machine (*)", None, "fileio", "randwrite", 4096),
    # not lazarus: the floor of any undo kept in a file, native plus a copy of
    # each old block into a shared mapping made ready beforehand (fileio -f)
    ("randwrite_floor", "  floor: native + a 4 KiB copy per op", None, "fileio", "randwrite", 4096),
]

# Workloads whose runs last well under a second: --short-pairs native/lazarus pairs
# per repetition; randwrite (slow, and steady): one; the others --pairs.
SHORT = ("append_1m", "append_4k", "fwrite_16")
SINGLE = ("randwrite", "randwrite_k1", "randwrite_machine", "randwrite_floor")
# Only the overwrites need the warm-up: no undo is kept before the first checkpoint.
WARM = ("randwrite", "randwrite_k1", "randwrite_machine", "randwrite_floor")

RESULT_RE = re.compile(r"ops=(\d+) bytes=(\d+) seconds=([0-9.]+) t0_ns=(\d+) t1_ns=(\d+)(?: cpu=([0-9.]+))?")


def build(prog, outdir):
    src = os.path.join(ROOT, "bench", "programs", prog + ".c")
    out = os.path.join(outdir, prog)
    subprocess.run([os.environ.get("CC", "cc"), "-std=c17", "-O2", "-Wall", "-o", out, src],
                   check=True)
    return out


def write_file(path, size, fsync, bs=MiB):
    """A file of `size` bytes of incompressible data, written `bs` bytes at a time."""
    block = os.urandom(bs)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done, n = 0, 0
        while done < size:
            chunk = block[:min(bs, size - done)]
            # a different block each time: nothing dedups or compresses
            os.write(fd, n.to_bytes(8, "little") + chunk[8:] if len(chunk) >= 8 else chunk)
            done += len(chunk)
            n += 1
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb", buffering=0) as f:
        while f.read(4 * MiB):
            pass


def rm(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.workdir
        self.lz = args.lazarus
        self.data = os.path.join(self.work, "data.bin")
        self.out = os.path.join(self.work, "append.out")
        self.scratch = os.path.join(self.work, "scratch.bin")
        self.ops = {}   # calibrated op counts of the fileio workloads
        self.has_diff = subprocess.run([self.lz, "diff", "--help"], capture_output=True).returncode == 0
        runhelp = subprocess.run([self.lz, "run", "--help"], capture_output=True, text=True)
        self.has_durability = "--durability" in runhelp.stdout + runhelp.stderr

    # ---- preparing a run -------------------------------------------------

    def hot_memory(self, size):
        """Write then delete a scratch file of `size` bytes, just before a run
        that allocates page cache. In this VM, memory the guest has not touched
        lately costs 1-3 s per GiB on first touch (it is handed back to the
        host after about 2 s free), which would swamp the figures; memory
        freed an instant ago is mostly reused at once, and hot."""
        write_file(self.scratch, size, fsync=False)
        os.unlink(self.scratch)

    def prepare(self, w):
        key, prog, mode = w[0], w[3], w[4]
        rm(self.out)
        os.sync()
        if mode in ("seqread", "randread"):
            read_file(self.data)          # page cache warm
        elif mode == "randwrite":
            read_file(self.data)
            self.hot_memory(self.args.file_mib * MiB)
        else:
            self.hot_memory(self.append_bytes(w))

    def append_bytes(self, w):
        return self.append_count(w) * w[5]

    def append_count(self, w):
        if w[5] == 16:
            return self.args.small_records
        return self.args.append_mib * MiB // w[5]

    def command(self, w, ops=None, seconds=None, warmup=0.0, floor=False):
        prog, mode, bs = w[3], w[4], w[5]
        if prog == "fileio":
            lim = ["-n", str(ops)] if ops else ["-t", str(seconds)]
            if warmup:
                lim = ["-w", str(warmup)] + lim
            if floor:
                lim += ["-f", self.scratch]
            return [self.bin["fileio"]] + lim + [mode, self.data, str(bs)]
        return [self.bin["appender"], mode, self.out, str(bs), str(self.append_count(w))]

    # ---- one run ---------------------------------------------------------

    def run(self, w, lazarus, store=None, ops=None, seconds=None, warmup=0.0):
        key = w[0]
        floor = lazarus and key.endswith("_floor")   # the "lazarus" side of the floor is fileio -f
        lazarus = lazarus and not floor
        cmd = self.command(w, ops, seconds, warmup, floor)
        if lazarus:
            shutil.rmtree(store, ignore_errors=True)
            opts = (["--durability", "machine"] if key.endswith("_machine")
                    else ["-k", "1"] if key.endswith("_k1") else [])
            cmd = [self.lz, "run", "-i", "1", "-d", store] + opts + ["--"] + cmd
        outp = os.path.join(self.work, "run.stdout")
        errp = os.path.join(self.work, "run.stderr")
        # The job's stdout/stderr are files, not pipes (a pipe cannot be checkpointed).
        with open(outp, "w") as fo, open(errp, "w") as fe:
            t_launch = time.time_ns()
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe)
            # Short appends end before the first periodic checkpoint (1 s): once a
            # third of the data is written, ask for one, so that every measured
            # run contains a checkpoint. The native run is polled the same way.
            asked = None
            if w[3] == "appender":
                goal = self.append_bytes(w) // 3
                while p.poll() is None:
                    try:
                        size = os.stat(self.out).st_size
                    except FileNotFoundError:
                        size = 0
                    if size >= goal:
                        if lazarus and not self.args.no_extra_checkpoint:
                            r = subprocess.run([self.lz, "checkpoint", "-d", store],
                                               capture_output=True, text=True, timeout=self.args.timeout)
                            asked = r.stdout.strip() if r.returncode == 0 else f"failed: {r.stderr.strip()}"
                        break
                    time.sleep(0.002)
            try:
                rc = p.wait(timeout=self.args.timeout)
            except subprocess.TimeoutExpired:
                for pid in descendants(p.pid):   # the job below `lazarus run`
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                p.kill()
                p.wait()
                raise RuntimeError(f"timed out after {self.args.timeout:g} s: {' '.join(cmd)}")
        with open(outp) as f:
            out = f.read()
        with open(errp) as f:
            err = f.read()
        m = RESULT_RE.search(out)
        if rc != 0 or not m:
            raise RuntimeError(f"{' '.join(cmd)} exited with status {rc}\n"
                               f"stdout: {out.strip()}\nstderr: {err.strip()}")
        res = {"ops": int(m.group(1)), "bytes": int(m.group(2)), "seconds": float(m.group(3)),
               "t0_ns": int(m.group(4)), "t1_ns": int(m.group(5)), "launch_ns": t_launch}
        if m.group(6):
            res["cpu"] = float(m.group(6))   # the program's CPU time in its timed loop
        if floor:
            rm(self.scratch)
        if lazarus:
            res.update(self.inspect(w, store, res, err))
            if asked is not None:
                res["asked_checkpoint"] = asked
            if not self.args.keep:
                shutil.rmtree(store, ignore_errors=True)
        return res

    def inspect(self, w, store, res, err):
        """What the engine did during a lazarus run: failed checkpoints,
        checkpoints inside the timed region, undo bytes, and whether
        `lazarus diff` names the file the workload changed."""
        info = {"failed_checkpoints": [l for l in err.splitlines() if re.search(r"checkpoint .*failed", l)]}
        r = subprocess.run([self.lz, "list", "-d", store, "--json"], capture_output=True, text=True)
        rows = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
        info["list"] = rows
        t0, t1 = res["t0_ns"], res["t1_ns"]
        inside = [row["index"] for row in rows if t0 <= row.get("created_ns", 0) <= t1]
        before = [row["index"] for row in rows if row.get("created_ns", 0) < t0]
        info["pause_ms"] = sum(row.get("pause_ms") or 0 for row in rows if t0 <= row.get("created_ns", 0) <= t1)
        if inside:
            # The store keeps the newest few: older ones are counted by index, those
            # no longer listed placed one second apart (-i 1) before the oldest kept.
            if before:
                n_before = max(before)
            else:
                first = min(rows, key=lambda row: row["index"])
                n_before = sum(1 for j in range(1, first["index"])
                               if first["created_ns"] - (first["index"] - j) * 10**9 < t0)
            info["checkpoints"] = max(inside) - n_before
        else:
            info["checkpoints"] = 0
        info["undo_bytes"] = max((row.get("undo_bytes") or 0 for row in rows), default=0)
        if self.has_diff and rows:
            oldest = min(row["index"] for row in rows)
            r = subprocess.run([self.lz, "diff", "-d", store, "--at", str(oldest)],
                               capture_output=True, text=True)
            target = self.data if w[3] == "fileio" else self.out
            named = any(l.split(None, 1)[-1] == target for l in r.stdout.splitlines())
            writes = w[4] not in ("seqread", "randread")
            info["diff_ok"] = r.returncode == 0 and named == writes
            info["diff"] = r.stdout.strip().splitlines()[:20] + ([r.stderr.strip()] if r.stderr.strip() else [])
        return info

    # ---- the benchmark ---------------------------------------------------

    def calibrate(self, w):
        """Ops of a fileio workload for about --seconds natively."""
        self.prepare(w)
        res = self.run(w, False, seconds=self.args.calibrate)
        rate = res["ops"] / res["seconds"]
        return max(1000, int(rate * self.args.seconds))

    def fio_reference(self):
        """fio's native throughput for the same workloads (reference only)."""
        a = self.args
        base = ["fio", "--output-format=json", "--ioengine=psync", "--invalidate=0", "--end_fsync=0"]
        runtime = f"--runtime={int(a.seconds * 1000)}ms"
        fio = {
            "seqread": ["--rw=read", "--bs=128k", "--time_based", runtime],
            "randread": ["--rw=randread", "--bs=4k", "--time_based", runtime],
            "append_1m": ["--rw=write", "--bs=1m", "--fallocate=none"],
            "append_4k": ["--rw=write", "--bs=4k", "--fallocate=none"],
            "randwrite": ["--rw=randwrite", "--bs=4k", "--time_based", runtime],
        }
        ref = {}
        for w in WORKLOADS:
            if w[0] not in fio:
                continue
            self.prepare(w)
            if w[3] == "fileio":
                target = ["--filename=" + self.data, f"--size={a.file_mib}m"]
            else:
                target = ["--filename=" + self.out, f"--size={a.append_mib}m"]
            r = subprocess.run(base + ["--name=" + w[0]] + fio[w[0]] + target,
                               capture_output=True, text=True, timeout=a.timeout)
            rm(self.out)
            try:
                job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]
                ref[w[0]] = job["write" if w[4] in ("write", "randwrite") else "read"]["bw_bytes"]
            except (ValueError, KeyError, IndexError):
                log(f"fio {w[0]} failed: {r.stderr.strip()[:200]}")
        return ref


def size_label(label, args):
    mib = args.file_mib
    return label.replace("1 GiB file", f"{mib // 1024} GiB file" if mib % 1024 == 0 else f"{mib} MiB file")


def fmt_time(s):
    return f"{s:.3f}" if s is not None else "-"


def main():
    t_start = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0,
                    help="native duration of the read and overwrite workloads (default 4)")
    ap.add_argument("--warmup", type=float, default=1.5,
                    help="untimed start of the overwrite workloads, past the first "
                         "checkpoint (default 1.5 s)")
    ap.add_argument("--pairs", type=int, default=3,
                    help="native/lazarus pairs per repetition (default 3; randwrite: 1)")
    ap.add_argument("--short-pairs", type=int, default=5,
                    help="the same for the appends that last under a second (default 5)")
    ap.add_argument("--file-mib", type=int, default=1024, help="size of the read/overwrite file")
    ap.add_argument("--append-mib", type=int, default=1024, help="volume of the 1 MiB and 4 KiB appends")
    ap.add_argument("--small-records", type=int, default=10_000_000, help="number of 16-byte appends")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 repetition, 1 s, 256 MiB file, 128 MiB appends, 1M records, no fio")
    ap.add_argument("--only", help="comma-separated workload keys to run")
    ap.add_argument("--no-fio", action="store_true", help="skip the fio reference")
    ap.add_argument("--no-extra-checkpoint", action="store_true",
                    help="do not ask for a checkpoint during the appends (they then mostly end before the first)")
    store_options(ap, "files_io", "data files and stores go here (default bench/out/files_io)", "keep the stores and the data file")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.seconds, args.file_mib = 1, 1.0, 256
        args.append_mib, args.small_records, args.no_fio = 128, 1_000_000, True
        args.pairs = args.short_pairs = 1
    args.calibrate = min(1.0, args.seconds)

    ready_workdir(args)
    fstype = (subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", args.workdir],
                             capture_output=True, text=True).stdout.strip()
              or subprocess.run(["stat", "-f", "-c", "%T", args.workdir],
                                capture_output=True, text=True).stdout.strip())
    load = os.getloadavg()[0]
    if load > 0.5 * (os.cpu_count() or 1):
        log(f"warning: load average {load:.2f}; other jobs will disturb the figures")

    b = Bench(args)
    b.bin = {p: build(p, args.workdir) for p in ("fileio", "appender")}
    workloads = [w for w in WORKLOADS if not args.only or w[0] in args.only.split(",")]
    if not b.has_durability:
        log("lazarus run has no --durability: skipping randwrite_machine")
        workloads = [w for w in workloads if not w[0].endswith("_machine")]
    if not b.has_diff:
        log("warning: lazarus has no `diff` command: this engine does not roll files back")

    # The data file is written 4 KiB at a time, as fio lays out a file for a
    # 4 KiB job, and stays in the page cache from then on. How a file came into
    # the cache sets its folio sizes, and on this kernel a 4 KiB overwrite of a
    # large folio (a file written in big chunks, or read back by readahead)
    # costs 10-20 times more natively: this is the state where the native
    # overwrite is fastest, the strictest for a ratio.
    # Every block of the file is overwritten each second natively, so under
    # lazarus nearly every overwrite is the first of its interval and saves
    # 4 KiB: more undo per second than a disk writes. Once the page cache holds
    # more dirty data than the kernel's threshold, the program is throttled to
    # the disk's bandwidth: measure it, in the same run, as the limit.
    disk_bw = None
    if any(w[0].startswith("randwrite") for w in workloads):
        probe = os.path.join(args.workdir, "disk-probe")
        t = time.monotonic()
        write_file(probe, 2 * GiB if not args.quick else 512 * MiB, fsync=True)
        disk_bw = (2 * GiB if not args.quick else 512 * MiB) / (time.monotonic() - t)
        os.unlink(probe)
        log(f"disk: {disk_bw / MiB:.0f} MiB/s sequential write with fsync")
    log(f"writing the {args.file_mib} MiB data file")
    write_file(b.data, args.file_mib * MiB, fsync=True, bs=4096)
    log(f"{args.reps} repetitions, {args.seconds:g} s, in {args.workdir} ({fstype}), load {load:.2f}")

    for w in workloads:
        if w[3] == "fileio" and w[0] not in b.ops:
            base = w[0].replace("_machine", "").replace("_k1", "").replace("_floor", "")
            if base not in b.ops:
                b.ops[base] = b.calibrate(next(x for x in WORKLOADS if x[0] == base))
            b.ops[w[0]] = b.ops[base]
    if b.ops:
        log("calibrated ops: " + ", ".join(f"{k}={v}" for k, v in b.ops.items()))

    fio_ref = {}
    if not args.no_fio and shutil.which("fio"):
        log("fio reference (native)")
        fio_ref = b.fio_reference()

    reps = []
    for rep in range(1, args.reps + 1):
        log(f"repetition {rep}/{args.reps}")
        fig = {}
        for w in workloads:
            key = w[0]
            store = os.path.join(args.workdir, f"store.{key}.{rep}")
            ops = b.ops.get(key)
            try:
                if key.endswith("_machine"):
                    # Too slow for the calibrated work: runs --seconds, and its time is
                    # extrapolated to the work of the native run it is compared with.
                    base = key.replace("_machine", "")
                    if "native" in fig.get(base, {}):
                        nat = fig[base]["native"]   # the same native run as randwrite
                    else:
                        b.prepare(w)
                        nat = b.run(w, False, ops=ops, warmup=args.warmup)
                    b.prepare(w)
                    laz = b.run(w, True, store, seconds=args.seconds, warmup=args.warmup)
                    laz["measured_seconds"] = laz["seconds"]
                    laz["seconds"] = nat["ops"] * laz["seconds"] / max(laz["ops"], 1)
                    pairs = [{"native": nat, "lazarus": laz, "ratio": laz["seconds"] / nat["seconds"]}]
                else:
                    # Short runs are noisier: several pairs, the ratio is their median.
                    pairs = []
                    npairs = args.short_pairs if key in SHORT else 1 if key in SINGLE else args.pairs
                    for k in range(npairs):
                        sides = ["native", "lazarus"] if (rep + k) % 2 else ["lazarus", "native"]
                        got = {}
                        for side in sides:
                            b.prepare(w)
                            got[side] = b.run(w, side == "lazarus", store, ops=ops,
                                              warmup=args.warmup if key in WARM else 0.0)
                        got["ratio"] = got["lazarus"]["seconds"] / got["native"]["seconds"]
                        pairs.append(got)
            except RuntimeError as e:
                log(f"  {key}: {e}")
                fig[key] = {"error": str(e)}
                continue
            mid = sorted(pairs, key=lambda x: x["ratio"])[(len(pairs) - 1) // 2]
            nat, laz = mid["native"], mid["lazarus"]
            fig[key] = {"native": nat, "lazarus": laz, "ratio": statistics.median(x["ratio"] for x in pairs),
                        "pair_ratios": [x["ratio"] for x in pairs]}
            if len(pairs) > 1:
                fig[key]["native_seconds"] = statistics.median(x["native"]["seconds"] for x in pairs)
                fig[key]["lazarus_seconds"] = statistics.median(x["lazarus"]["seconds"] for x in pairs)
            log(f"  {key:18} native {nat['seconds']:.3f} s  lazarus {laz['seconds']:.3f} s  "
                f"ratio {fig[key]['ratio']:.3f}  checkpoints {laz.get('checkpoints')}"
                + (f"  CPU {nat['cpu']:.2f} s / {laz['cpu']:.2f} s, ratio {laz['cpu'] / nat['cpu']:.2f}"
                   if nat.get("cpu") and laz.get("cpu") else "")
                + f"  load {os.getloadavg()[0]:.1f}"
                + (f"  (pairs: {' '.join(f'{x:.3f}' for x in fig[key]['pair_ratios'])})" if len(pairs) > 1 else ""))
            for line in laz.get("failed_checkpoints", []):
                log(f"    {line}")
        reps.append(fig)

    rm(b.out)
    if not args.keep:
        rm(b.data)

    # ---- report ----------------------------------------------------------
    def med(vals):
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    print(f"Lazarus file I/O overhead: `lazarus run -i 1` vs native, {args.reps} repetition(s), "
          f"{args.workdir} ({fstype})")
    print("times: the program's own I/O loop, median over repetitions; ratio: median of the "
          "per-repetition ratios lazarus/native")
    head = (f"{'workload':36}{'native s':>10}{'lazarus s':>10}{'ratio':>8}  {'per rep':<{6 * args.reps}}"
            f"{'ckpts':>6}{'pause ms':>9}{'undo MiB':>9}  {'diff':5} target")
    print(head)
    print("-" * len(head))
    ok, notes = True, []
    for w in workloads:
        key, label, target = w[0], size_label(w[1], args), w[2]
        errors = [r[key]["error"] for r in reps if "error" in r.get(key, {})]
        notes += [f"{key}: {e}" for e in errors]
        rows = [r[key] for r in reps if "ratio" in r.get(key, {})]
        if not rows:
            print(f"{label:36}  error: {errors[0].splitlines()[0][:120] if errors else 'not run'}")
            ok = ok and target is None
            continue
        ratio = med([r["ratio"] for r in rows])
        ck = med([r["lazarus"].get("checkpoints") for r in rows])
        pause = med([r["lazarus"].get("pause_ms") for r in rows])
        undo = max((r["lazarus"].get("undo_bytes", 0) for r in rows), default=0) / MiB
        diffs = [r["lazarus"].get("diff_ok") for r in rows]
        diff = "-" if None in diffs else ("ok" if all(diffs) else "WRONG")
        verdict = ""
        if target is not None:
            good = ratio <= target
            ok &= good
            verdict = f"<= {target:<5} {'PASS' if good else 'FAIL'}"
        per = " ".join(f"{r['ratio']:.3g}" for r in rows)
        nat_s = med([r.get("native_seconds", r["native"]["seconds"]) for r in rows])
        laz_s = med([r.get("lazarus_seconds", r["lazarus"]["seconds"]) for r in rows])
        print(f"{label:36}{fmt_time(nat_s):>10}{fmt_time(laz_s):>10}{ratio:>8.3f}  "
              f"{per:<{6 * args.reps}}{ck if ck is not None else '-':>6}{pause or 0:>9.1f}{undo:>9.0f}"
              f"  {diff:5} {verdict}")
        for i, r in enumerate(rows):
            lz = r["lazarus"]
            if lz.get("failed_checkpoints"):
                notes.append(f"{key} rep {i + 1}: {len(lz['failed_checkpoints'])} failed checkpoint(s): "
                             f"{lz['failed_checkpoints'][0]}")
            if lz.get("asked_checkpoint", "").startswith("failed"):
                notes.append(f"{key} rep {i + 1}: `lazarus checkpoint` {lz['asked_checkpoint']}")
            if lz.get("diff_ok") is False:
                notes.append(f"{key} rep {i + 1}: `lazarus diff` printed {lz.get('diff')}")
    print()
    print(f"work per run: read/overwrite {args.file_mib} MiB file, ops calibrated to {args.seconds:g} s natively "
          + ", ".join(f"({k} {v})" for k, v in b.ops.items() if not k.endswith('_machine'))
          + f"; appends {args.append_mib} MiB; 16 B records x {args.small_records}")
    print("ckpts: checkpoints inside the timed region of the lazarus run (median); "
          + ("appends also ask one with `lazarus checkpoint` a third of the way through (in a 0.2 s run, "
             "it weighs 5 times what one a second would)" if not args.no_extra_checkpoint
             else "no checkpoint asked for during the appends"))
    print("pause ms: their pauses (kept checkpoints only, `lazarus list`), median; undo MiB: largest "
          "undo_bytes of a kept checkpoint")
    print(f"overwrite runs start with {args.warmup:g} s untimed (past the first checkpoint): "
          "the times are of the steady state")
    print(f"pairs per repetition: {args.short_pairs} for the short appends, 1 for randwrite, "
          f"{args.pairs} for the others; a repetition's ratio is the median of its pairs'")
    print("(*) runs --seconds under lazarus; its time is extrapolated to the work of the native randwrite")
    if disk_bw:
        nat = med([r["randwrite"]["native"]["ops"] / r["randwrite"]["native"]["seconds"]
                   for r in reps if "native" in r.get("randwrite", {})])
        print(f"machine limit for randwrite: the disk writes {disk_bw / MiB:.0f} MiB/s (measured in this run), "
              f"{disk_bw / 4096:,.0f} blocks of 4 KiB/s"
              + (f", against {nat:,.0f} native overwrites/s: sustained, once the dirty page cache passes the "
                 f"kernel's threshold, saved blocks reach the disk no faster than that; -k 1 reuses the undo "
                 f"pages of the dropped checkpoint before most are written back" if nat else ""))
    print("diff: `lazarus diff --at OLDEST` names the file the workload wrote, and not the file it only read")
    if fio_ref:
        print()
        print("native throughput, this benchmark's program vs fio with the same parameters (reference)")
        for key, bw in fio_ref.items():
            ours = med([r[key]["native"]["bytes"] / r[key]["native"]["seconds"] for r in reps
                        if "native" in r.get(key, {})])
            label = size_label(next(w[1] for w in WORKLOADS if w[0] == key), args)
            print(f"  {label:36}{(ours or 0) / MiB:>10.0f} MiB/s   fio {bw / MiB:>8.0f} MiB/s")
    for n in notes:
        print("note: " + n)
    total = time.monotonic() - t_start
    print(f"\ntotal time {int(total // 60)}m{total % 60:04.1f}s")

    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(args).items()}, "fstype": fstype, "ops": b.ops,
                   "fio_reference": fio_ref, "reps": reps}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
