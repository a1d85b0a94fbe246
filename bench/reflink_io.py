#!/usr/bin/env python3
"""Undo as reflinks on a file system that has them (issue 16): random 4 KiB
overwrites of a 1 GiB file, and a large truncation, on a loop-mounted XFS
(`mkfs.xfs -m reflink=1`), natively and under `lazarus run -i 1` with the
store on the same file system.

  randwrite   bench/programs/fileio.c: pwrite 4 KiB at random offsets of a
              --file-mib (1024) MiB file, after a 1.5 s untimed warm-up, the
              ops calibrated to --seconds (4) natively; under lazarus with
              the default policy (runs of saved blocks of 1 MiB and more are
              reflinked, shorter ones copied: every run is one 4 KiB block
              here) and with LAZARUS_CLONE_MIN=4096 (every saved block a
              reflink: far slower, so it runs --seconds and its time is
              extrapolated to the native run's ops).         target <= 1.5
  truncate    `truncate -s 0` of a --file-mib file that was written back
              (clean), under lazarus after a checkpoint: the time of the
              truncate (which saves the whole file first) and the bytes
              written to the device until a sync after it (the journal's
              records and saved bytes), reflinked (default) and copied
              (LAZARUS_CLONE_MIN=0); natively for reference.

Needs root (mount) and mkfs.xfs (Debian: xfsprogs); without them it says why
and exits 0 (skipped). The image is a sparse file in --workdir (on the
repository's file system: XFS over a loop device over ext4 here, so its
"disk" is the host's page cache of the image until writeback).

    make && sudo python3 bench/reflink_io.py [--reps 3]

Standard library only. Exits 1 if a target is missed.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from ckpt_restart import ready_workdir, store_options

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
RESULT_RE = re.compile(r"ops=(\d+) bytes=(\d+) seconds=([0-9.]+).* cpu=([0-9.]+)")


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def skip(why):
    print(f"reflink_io: skipped: {why}")
    sys.exit(0)


def sh(*cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


class Xfs:
    def __init__(self, work, gib):
        self.img = os.path.join(work, "xfs.img")
        self.mnt = os.path.join(work, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        sh("umount", self.mnt)
        with open(self.img, "wb") as f:
            f.truncate(gib << 30)
        r = sh("mkfs.xfs", "-q", "-f", "-m", "reflink=1", self.img)
        if r.returncode:
            skip(f"mkfs.xfs failed: {r.stderr.strip()}")
        r = sh("mount", "-o", "loop", self.img, self.mnt)
        if r.returncode:
            skip(f"cannot loop-mount XFS: {r.stderr.strip()}")
        self.dev = os.path.basename(sh("findmnt", "-n", "-o", "SOURCE", self.mnt).stdout.strip())

    def written(self):
        """Bytes written to the loop device so far (after a sync)."""
        os.sync()
        with open(f"/sys/block/{self.dev}/stat") as f:
            return int(f.read().split()[6]) * 512

    def close(self):
        sh("umount", self.mnt)
        os.unlink(self.img)


def write_file(path, size):
    """Incompressible, written 4 KiB at a time (the native overwrite is fastest on such a file: files_io.py)."""
    block = os.urandom(4096)
    with open(path, "wb", buffering=0) as f:
        for n in range(size // 4096):
            f.write(n.to_bytes(8, "little") + block[8:])
        os.fsync(f.fileno())


def fileio(args, prog, data, lazarus, env_extra, ops=None, floor=None, build=None):
    # the same file for every run: reflinks (and the copy-on-write of the
    # overwrites that follow them) leave it in single-block extents, on which
    # even the native overwrite is several times slower
    write_file(data, args.file_mib * MiB)
    cmd = [prog, "-w", "1.5"] + (["-n", str(ops)] if ops else ["-t", str(args.seconds)]) + \
          (["-f", floor] if floor else []) + ["randwrite", data, "4096"]
    store = os.path.join(os.path.dirname(data), "store")
    shutil.rmtree(store, ignore_errors=True)
    if lazarus:
        cmd = [build or args.lazarus, "run", "-i", "1", "-d", store, "--"] + cmd
    env = dict(os.environ, **env_extra)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    m = RESULT_RE.search(p.stdout)
    if p.returncode or not m:
        sys.exit(f"bench: fileio failed ({p.returncode}): {p.stdout[-300:]} {p.stderr[-500:]}")
    shutil.rmtree(store, ignore_errors=True)
    if floor:
        os.unlink(floor)
    return int(m.group(1)), float(m.group(3)), float(m.group(4))


TRUNC = r"""
f=$1 ctl=$2
touch "$ctl/ready"
while [ ! -e "$ctl/go" ]; do sleep 0.01; done
t0=$(date +%s%N); truncate -s 0 "$f"; t1=$(date +%s%N)
echo "truncate_ns=$((t1 - t0))"
touch "$ctl/done"
while [ ! -e "$ctl/end" ]; do sleep 0.01; done
"""


def truncate_case(args, xfs, clone_min, lazarus):
    mnt = xfs.mnt
    data = os.path.join(mnt, "trunc.bin")
    ctl = os.path.join(mnt, "ctl")
    shutil.rmtree(ctl, ignore_errors=True)
    os.makedirs(ctl)
    write_file(data, args.file_mib * MiB)
    os.sync()
    script = os.path.join(mnt, "trunc.sh")
    with open(script, "w") as f:
        f.write(TRUNC)
    store = os.path.join(mnt, "store")
    shutil.rmtree(store, ignore_errors=True)
    cmd = ["bash", script, data, ctl]
    if lazarus:
        cmd = [args.lazarus, "run", "-i", "0", "-d", store, "--"] + cmd
    env = dict(os.environ, LAZARUS_CLONE_MIN=str(clone_min))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while not os.path.exists(os.path.join(ctl, "ready")):
        time.sleep(0.01)
    if lazarus:
        r = sh(args.lazarus, "checkpoint", "-d", store)
        if r.returncode:
            sys.exit(f"bench: checkpoint failed: {r.stderr}")
    w0 = xfs.written()
    open(os.path.join(ctl, "go"), "w").close()
    while not os.path.exists(os.path.join(ctl, "done")):
        time.sleep(0.01)
    disk = xfs.written() - w0
    open(os.path.join(ctl, "end"), "w").close()
    out, err = p.communicate(timeout=args.timeout)
    m = re.search(r"truncate_ns=(\d+)", out)
    if p.returncode or not m:
        sys.exit(f"bench: truncate run failed ({p.returncode}): {out[-300:]} {err[-500:]}")
    shutil.rmtree(store, ignore_errors=True)
    return int(m.group(1)) / 1e9, disk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--file-mib", type=int, default=1024)
    ap.add_argument("--image-gib", type=int, default=12)
    ap.add_argument("--baseline", metavar="LAZARUS",
                    help="another build's lazarus, run on the random overwrites in every repetition too")
    ap.add_argument("--only", default="randwrite,reflink,truncate",
                    help="comma-separated: randwrite (copies), reflink (every block a reflink), truncate")
    store_options(ap, "reflink_io", "directory for the XFS image")
    args = ap.parse_args()
    if os.geteuid() != 0:
        skip("needs root (loop-mounting an XFS image)")
    if not shutil.which("mkfs.xfs"):
        skip("no mkfs.xfs (Debian package xfsprogs)")
    ready_workdir(args)
    prog = os.path.join(args.workdir, "fileio")
    subprocess.run([os.environ.get("CC", "cc"), "-std=c17", "-O2", "-Wall", "-o", prog,
                    os.path.join(ROOT, "bench", "programs", "fileio.c")], check=True)
    xfs = Xfs(args.workdir, args.image_gib)
    results = {"randwrite": [], "truncate": []}
    try:
        data = os.path.join(xfs.mnt, "data.bin")
        only = set(args.only.split(","))
        for rep in range(args.reps):
            ops, nat, natc = fileio(args, prog, data, False, {})
            _, cp, cpc = fileio(args, prog, data, True, {}, ops)
            # the floor of any undo kept in a file: native, plus a copy of each
            # old block into a shared mapping made ready beforehand (fileio -f)
            _, fl, flc = fileio(args, prog, data, False, {}, ops, floor=os.path.join(xfs.mnt, "floor.bin"))
            # far slower: run for --seconds and extrapolate to the native run's ops
            rl = float("nan")
            if "reflink" in only:
                rops, rsec, _ = fileio(args, prog, data, True, {"LAZARUS_CLONE_MIN": "4096"})
                rl = rsec * ops / max(rops, 1)
            r = {"ops": ops, "native_s": nat, "copy_s": cp, "floor_s": fl, "reflink_s": rl,
                 "native_cpu": natc, "copy_cpu": cpc, "floor_cpu": flc, "load": os.getloadavg()[0]}
            if args.baseline:
                _, r["base_s"], r["base_cpu"] = fileio(args, prog, data, True, {}, ops, build=args.baseline)
                log(f"  baseline {args.baseline}: {r['base_s']:.2f} s ({r['base_s'] / nat:.2f}), "
                    f"CPU {r['base_cpu']:.2f} s ({r['base_cpu'] / natc:.2f})")
            results["randwrite"].append(r)
            log(f"randwrite rep {rep + 1}: {ops} ops, native {nat:.2f} s, lazarus {cp:.2f} s ({cp / nat:.2f}), "
                f"floor {fl:.2f} s ({fl / nat:.2f}), every block reflinked {rl:.2f} s ({rl / nat:.2f}); "
                f"CPU native {natc:.2f} s, lazarus {cpc:.2f} s ({cpc / natc:.2f}), floor {flc:.2f} s "
                f"({flc / natc:.2f}); load {r['load']:.1f}")
            if "truncate" not in only:
                continue
            tn, _ = truncate_case(args, xfs, 0, False)
            tr, dr = truncate_case(args, xfs, 1 << 20, True)
            tc, dc = truncate_case(args, xfs, 0, True)
            t = {"native_s": tn, "reflink_s": tr, "reflink_disk": dr, "copy_s": tc, "copy_disk": dc}
            results["truncate"].append(t)
            log(f"truncate rep {rep + 1}: native {tn * 1e3:.1f} ms; reflinked {tr * 1e3:.1f} ms, files.data "
                f"{dr / MiB:.1f} MiB written to the disk; copied {tc * 1e3:.1f} ms, {dc / MiB:.1f} MiB")
    finally:
        xfs.close()
    rw = results["randwrite"]
    med = lambda key, rows: statistics.median(r[key] for r in rows)
    ratio_cp = statistics.median(r["copy_s"] / r["native_s"] for r in rw)
    ratio_rl = statistics.median(r["reflink_s"] / r["native_s"] for r in rw)
    ratio_fl = statistics.median(r["floor_s"] / r["native_s"] for r in rw)
    each = lambda key, base="native_s": " ".join(f"{r[key] / r[base]:.2f}" for r in rw)
    cpu_cp = statistics.median(r["copy_cpu"] / r["native_cpu"] for r in rw)
    cpu_fl = statistics.median(r["floor_cpu"] / r["native_cpu"] for r in rw)
    loads = " ".join(f"{r['load']:.1f}" for r in rw)
    tr = results["truncate"]
    print(f"random 4 KiB overwrites of a {args.file_mib} MiB file on XFS (reflink=1), -i 1:")
    print(f"  native {med('native_s', rw):.2f} s, lazarus {med('copy_s', rw):.2f} s, ratio {ratio_cp:.2f}  "
          f"target <= 1.5  {'PASS' if ratio_cp <= 1.5 else 'FAIL'}  "
          f"({each('copy_s')})")
    print(f"  floor (native + a 4 KiB copy per overwrite into a ready shared mapping, fileio -f): "
          f"{med('floor_s', rw):.2f} s, ratio {ratio_fl:.2f} ({each('floor_s')}); "
          f"lazarus / floor {ratio_cp / ratio_fl:.2f}")
    print(f"  the program's CPU time (user + system, the timed loop): lazarus / native {cpu_cp:.2f} "
          f"({each('copy_cpu', 'native_cpu')}), floor / native {cpu_fl:.2f} ({each('floor_cpu', 'native_cpu')}); "
          f"load {loads}")
    if args.baseline:
        print(f"  baseline {args.baseline}: ratio {statistics.median(r['base_s'] / r['native_s'] for r in rw):.2f} "
              f"({each('base_s')}), CPU {statistics.median(r['base_cpu'] / r['native_cpu'] for r in rw):.2f} "
              f"({each('base_cpu', 'native_cpu')})")
    print(f"  every saved block a reflink (LAZARUS_CLONE_MIN=4096): {med('reflink_s', rw):.2f} s, ratio {ratio_rl:.2f}")
    if tr:
        print(f"truncate -s 0 of a clean {args.file_mib} MiB file after a checkpoint:")
        print(f"  native {med('native_s', tr) * 1e3:.1f} ms; reflinked {med('reflink_s', tr) * 1e3:.1f} ms, "
              f"{med('reflink_disk', tr) / MiB:.1f} MiB written to the disk until synced; copied "
              f"{med('copy_s', tr) * 1e3:.1f} ms, {med('copy_disk', tr) / MiB:.1f} MiB")
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"args": vars(args), "results": results}, f, indent=1)
    sys.exit(0 if ratio_cp <= 1.5 else 1)


if __name__ == "__main__":
    main()
