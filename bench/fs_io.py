#!/usr/bin/env python3
"""fio through the file system front end (CprFS, issue 22) against the same
directory natively, in the same run.

Each test runs fio (psync: one pread/pwrite per block, one job) on files of
DATA (a directory of --workdir) twice in a row: natively, and as the program
of a files-only job, `lazarus run --files-only --fs DATA --fs-mode MODE` (fio
then reaches the same files through lazarus-fsd's mount over DATA). The
pairs alternate which side goes first; the figure is the median over
--reps repetitions of each pair's ratio fs time / native time (native
throughput / fs throughput, fio's own figure for its I/O loop: the mount and
the job's start are not in it).

  seqread     1 MiB reads of a --mib MiB file, start to end         <= 1.05  (CprFS: +7.3 %)
  seqwrite    1 MiB writes of a new --mib MiB file (no fsync)       <= 1.0   (CprFS: -11.6 %)
  randread    4 KiB reads at random offsets of that file, --seconds <= 1.10  (CprFS: +15.6 %)
  randwrite   4 KiB overwrites at random offsets of a --mib MiB     <= 1.15  (CprFS: +11.9 %)
              file written 4 KiB at a time just before, --seconds
  append      64 B writes at the end of an existing log, --seconds  <= 1.0   (CprFS: PAPSM's small
              or --append-mib MiB, whichever ends first                         writes, -15.7 % end to end)

Reads run warm (the file read once natively just before each run: the page
cache holds it, the mount's own cache starts empty with each job) and cold
(the file's pages evicted just before each run: `sync`, then
posix_fadvise(DONTNEED) of the whole file, as any user; the file is read
once before, so that the VM host's cache of its disk holds it for both
sides alike).
Writes go to the page cache (no fsync; a `sync` before each run, so an
earlier run's writeback is not in it). The table gives MiB/s for the
sequential tests and IOPS for the others; the ratio is always time per
byte, fs / native. fio's own cache dropping is off
(invalidate=0) and it never lays a file out: every file is made natively
before the runs, outside any job, so overwrites and appends meet data that
was there at the job's first commit (undo mode saves the old bytes of each
block at its first overwrite).

Modes: every --mode that `lazarus run` accepts (probed: a refused one is
reported "not available" with lazarus' line), and `undo+wb`: undo with the
kernel's writeback cache on (LAZARUS_TEST_FSD_WRITEBACK=1, a test-only
switch; undo mode keeps it off because of mtime, ARCHITECTURE.md).

    make && python3 bench/fs_io.py [--reps 5] [--mib 1024] [--seconds 3]
    python3 bench/fs_io.py --quick          # a smoke run, tiny sizes
    python3 bench/fs_io.py --only randwrite,append --mode undo --json out.json

Standard library only, and fio. Exits 1 if a target is missed.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from ckpt_restart import ready_workdir, store_options

MiB = 1 << 20

# key, label, fio rw, block size, target, CprFS's figure (IOzone over NFS, 4/8 KiB records)
TESTS = [
    ("seqread", "seq read 1 MiB", "read", MiB, 1.05, "1.073"),
    ("seqwrite", "seq write 1 MiB, new file", "write", MiB, 1.0, "0.884"),
    ("randread", "rand read 4 KiB", "randread", 4096, 1.10, "1.156"),
    ("randwrite", "rand write 4 KiB, existing file", "randwrite", 4096, 1.15, "1.119"),
    ("append", "append 64 B lines to a log", "write", 64, 1.0, "0.843 (PAPSM, app)"),
]
READS = ("seqread", "randread")
ALL_MODES = ("undo", "buffer", "shadow")
WRITEBACK = "undo+wb"   # undo with the writeback cache (test-only switch)


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def write_file(path, size, bs=MiB):
    """`size` bytes of incompressible data, `bs` at a time, natively."""
    block = os.urandom(bs)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done, n = 0, 0
        while done < size:
            chunk = block[:min(bs, size - done)]
            os.write(fd, n.to_bytes(8, "little") + chunk[8:])
            done += len(chunk)
            n += 1
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


def evict(path):
    """The file's pages out of the page cache (clean after a sync): this file
    only, so that the rest of the cache, and the memory the VM holds hot,
    stay as they were (a global drop_caches made the next run's memory cold:
    runs right after it took up to 3 times longer, whichever side it was)."""
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class Bench:
    def __init__(self, args):
        self.args = args
        self.lz = args.lazarus
        self.data = os.path.join(args.workdir, "data")       # the directory mounted over
        self.store = os.path.join(args.workdir, "store")
        self.outdir = os.path.join(args.workdir, "fio")
        for d in (self.data, self.outdir):
            os.makedirs(d, exist_ok=True)
        self.big = os.path.join(self.data, "big.bin")      # the reads
        self.rw = os.path.join(self.data, "rw.bin")        # the overwrites
        self.new = os.path.join(self.data, "new.bin")      # the sequential writes
        self.logf = os.path.join(self.data, "app.log")     # the appends
        self.log_base = 1 * MiB                             # the log before each run

    # ---- modes -------------------------------------------------------------

    def probe_modes(self, wanted):
        """{mode: None if available else lazarus' line}."""
        out = {}
        for m in wanted:
            mode = "undo" if m == WRITEBACK else m
            shutil.rmtree(self.store, ignore_errors=True)
            r = subprocess.run([self.lz, "run", "--quiet", "--files-only", "--fs", self.data, "-d", self.store,
                                "--fs-mode", mode, "--", "true"], capture_output=True, text=True,
                               timeout=self.args.timeout)
            lines = (r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}").splitlines()
            out[m] = None if r.returncode == 0 else lines[-1]
        shutil.rmtree(self.store, ignore_errors=True)
        return out

    # ---- files ---------------------------------------------------------------

    def make_files(self):
        size = self.args.mib * MiB
        if not os.path.exists(self.big) or os.path.getsize(self.big) != size:
            log(f"writing {self.args.mib} MiB of random data to {self.big}")
            write_file(self.big, size)
        os.sync()

    def prepare(self, key, cache):
        """The state every run of `key` starts from, the same on both sides."""
        rm(self.new)
        if key == "append":
            write_file(self.logf, self.log_base)
        if key in READS and cache == "cold":
            # read once first: cold in this machine's page cache, but warm in
            # the host's under the VM's disk (else the first run of a pair
            # reads from the host's disk, the second from its cache: 3-4x)
            evict(self.big)
            read_file(self.big)
            evict(self.big)
            return
        if key in READS:
            read_file(self.big)
        if key == "randwrite":
            # written 4 KiB at a time, just before: small folios in the page
            # cache, where a native 4 KiB overwrite is fastest (bench/README.md)
            write_file(self.rw, self.args.mib * MiB, bs=4096)
        os.sync()

    # ---- one run -------------------------------------------------------------

    def fio_cmd(self, key, out):
        _, _, rw, bs = next(t for t in TESTS if t[0] == key)[:4]
        a = self.args
        f = {"seqread": self.big, "randread": self.big, "randwrite": self.rw,
             "seqwrite": self.new, "append": self.logf}[key]
        cmd = ["fio", f"--name={key}", f"--filename={f}", f"--rw={rw}", f"--bs={bs}", "--ioengine=psync",
               "--invalidate=0", "--fallocate=none", "--numjobs=1", "--output-format=json", f"--output={out}"]
        if key in ("seqread", "seqwrite"):
            cmd += [f"--size={a.mib}M"]
        elif key == "append":
            cmd += ["--file_append=1", f"--size={a.append_mib}M", f"--runtime={int(a.seconds * 1000)}ms"]
        else:
            cmd += [f"--size={a.mib}M", "--time_based", f"--runtime={int(a.seconds * 1000)}ms", "--randrepeat=1"]
        return cmd

    def run(self, key, mode, cache):
        """One fio run: natively (mode None) or in a files-only job. Its figures."""
        out = os.path.join(self.outdir, f"{key}.json")
        rm(out)
        cmd = self.fio_cmd(key, out)
        env = dict(os.environ)
        env.pop("LAZARUS_TEST_FSD_WRITEBACK", None)
        if mode:
            shutil.rmtree(self.store, ignore_errors=True)
            if mode == WRITEBACK:
                env["LAZARUS_TEST_FSD_WRITEBACK"] = "1"
            cmd = [self.lz, "run", "--quiet", "--files-only", "--fs", self.data, "-d", self.store,
                   "--fs-mode", "undo" if mode == WRITEBACK else mode, "--"] + cmd
        self.prepare(key, cache)
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                           timeout=self.args.timeout)
        try:
            with open(out) as f:
                job = json.load(f)["jobs"][0]
        except (OSError, ValueError, KeyError, IndexError):
            job = None
        if r.returncode != 0 or job is None or job.get("error"):
            raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr.strip()}")
        side = job["read"] if key in READS else job["write"]
        res = {"bytes": side["io_bytes"], "ms": side["runtime"], "bw": side["bw_bytes"], "iops": side["iops"],
               "cpu_usr": job.get("usr_cpu"), "cpu_sys": job.get("sys_cpu")}
        if mode:
            res["store_bytes"] = du(self.store)
            if not self.args.keep:
                shutil.rmtree(self.store, ignore_errors=True)
        return res


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mib", type=int, default=1024, help="the file of the reads, overwrites and seq writes (MiB)")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of the random and append runs")
    ap.add_argument("--append-mib", type=int, default=64, help="the appends stop after this much (MiB)")
    ap.add_argument("--mode", default=",".join(ALL_MODES + (WRITEBACK,)),
                    help=f"comma-separated: {', '.join(ALL_MODES)}, {WRITEBACK} (default all)")
    ap.add_argument("--only", default="", help="comma-separated tests: " + ",".join(t[0] for t in TESTS))
    ap.add_argument("--cache", choices=("warm", "cold", "both"), default="both",
                    help="the reads: warm, cold (the file evicted from the page cache) or both (default)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 repetition, 32 MiB, 0.5 s")
    ap.add_argument("--json", metavar="FILE", help="every figure as JSON")
    store_options(ap, "fs_io", "where DATA and the stores go (default bench/out/fs_io)")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.mib, a.seconds, a.append_mib = 1, 32, 0.5, 2
    if shutil.which("fio") is None:
        sys.exit("bench: fio is not installed (Debian: apt-get install fio)")
    ready_workdir(a)
    modes = [m for m in a.mode.split(",") if m]
    for m in modes:
        if m not in ALL_MODES + (WRITEBACK,):
            sys.exit(f"bench: unknown mode {m}")
    only = [k for k in a.only.split(",") if k] or [t[0] for t in TESTS]
    for k in only:
        if k not in [t[0] for t in TESTS]:
            sys.exit(f"bench: unknown test {k}")
    caches = ["warm", "cold"] if a.cache == "both" else [a.cache]

    b = Bench(a)
    avail = b.probe_modes(modes)
    for m, why in avail.items():
        if why:
            log(f"mode {m} not available: {why}")
    run_modes = [m for m in modes if not avail[m]]
    b.make_files()
    cases = [(k, c) for k in only for c in (caches if k in READS else ["-"])]
    load0 = os.getloadavg()
    log(f"load average at the start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    raw = {}   # (key, cache, mode) -> [(native, fs), ...]
    t_start = time.time()
    for rep in range(a.reps):
        for key, cache in cases:
            for m in run_modes:
                order = [None, m] if (rep % 2 == 0) else [m, None]
                got = {}
                for side in order:
                    got[side] = b.run(key, side, cache)
                raw.setdefault((key, cache, m), []).append((got[None], got[m]))
                nat, fs = got[None], got[m]
                log(f"rep {rep} {key:9s} {cache:4s} {m:7s} native {nat['bw'] / MiB:9.1f} MiB/s  "
                    f"fs {fs['bw'] / MiB:9.1f} MiB/s  ratio {nat['bw'] / fs['bw']:.3f}")
    load1 = os.getloadavg()

    rows = []
    for key, cache in cases:
        t = next(t for t in TESTS if t[0] == key)
        for m in modes:
            row = {"test": key, "label": t[1], "cache": cache, "mode": m, "target": t[4], "cprfs": t[5]}
            if avail[m]:
                row["available"] = False
                row["why"] = avail[m]
            else:
                pairs = raw[(key, cache, m)]
                ratios = [n["bw"] / f["bw"] for n, f in pairs]
                row.update(available=True, ratio=statistics.median(ratios), ratios=ratios,
                           native_mibs=statistics.median(n["bw"] for n, _ in pairs) / MiB,
                           fs_mibs=statistics.median(f["bw"] for _, f in pairs) / MiB,
                           native_iops=statistics.median(n["iops"] for n, _ in pairs),
                           fs_iops=statistics.median(f["iops"] for _, f in pairs),
                           store_mib=statistics.median(f.get("store_bytes", 0) for _, f in pairs) / MiB,
                           ok=statistics.median(ratios) <= t[4] if m != WRITEBACK else None,
                           runs=[{"native": n, "fs": f} for n, f in pairs])
            rows.append(row)

    print(f"\nfio {subprocess.run(['fio', '--version'], capture_output=True, text=True).stdout.strip()}, "
          f"{a.reps} repetitions, {a.mib} MiB file, {a.seconds:g} s random/append runs, "
          f"load average {load0[0]:.2f} -> {load1[0]:.2f}, {time.time() - t_start:.0f} s\n")
    print("| test | cache | mode | native | fs | fs/native (median) | target | CprFS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    missed = 0
    for r in rows:
        if not r["available"]:
            continue
        small = r["test"] in ("randread", "randwrite", "append")
        unit = (lambda v: f"{v:,.0f} IOPS") if small else (lambda v: f"{v:,.0f} MiB/s")
        nv = unit(r["native_iops"] if small else r["native_mibs"])
        fv = unit(r["fs_iops"] if small else r["fs_mibs"])
        verdict = "" if r["ok"] is None else (" ok" if r["ok"] else " missed")
        missed += r["ok"] is False
        spread = " ".join(f"{x:.2f}" for x in r["ratios"])
        print(f"| {r['label']} | {r['cache']} | {r['mode']} | {nv} | {fv} | **{r['ratio']:.3f}** ({spread}){verdict} "
              f"| ≤ {r['target']:g} | {r['cprfs']} |")
    for m, why in avail.items():
        if why:
            print(f"\nmode {m}: not available ({why})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "load_start": load0, "load_end": load1, "modes": avail, "rows": rows}, f,
                      indent=1)
        log(f"figures in {a.json}")
    if not a.keep:
        shutil.rmtree(b.data, ignore_errors=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
