#!/usr/bin/env python3
"""Many short processes changing one file: a shell loop of `dd` under
`lazarus run -i 1` (issue 16, item 5).

bash runs --count (3000) `dd` invocations on a --mib (32) MiB image: every
--rewrite-every (10)th rewrites the whole image from the start (dd without
conv=notrunc: it truncates the image to 0, then writes it again), every other
one overwrites one 4 KiB block at a random offset (conv=notrunc). Natively and
under `lazarus run -i 1` (a checkpoint every second, default -k 3), in pairs
run back to back whose order alternates; a repetition's ratio is the median of
its pairs' lazarus / native wall times, the figure the median over
repetitions.

Printed per repetition and as medians: native and lazarus seconds, the ratio
(target <= 1.5), the checkpoints taken, and the undo each kept interval
recorded (from `undo_bytes` of `lazarus list --json`, which counts what a
rollback to a checkpoint needs: the journals of its interval and of every
later one) against the bytes the job changed in it: every interval holds whole
rewrites (about one dd in ten), so the image's 32 MiB, and nothing more, is
what changed at least once (target: undo per interval <= the image's size,
+1 % for the records themselves).
Before the map of saved blocks shared by the job's processes, every dd saved
the whole image again (it opens the image on its stdout, which stdio could
write anywhere: `fj_fd_reused`), 1.1-2.4 GiB of undo per interval.

    make && python3 bench/dd_loop.py [--reps 3] [--pairs 1] [--count 3000]

Standard library only. Exits 1 if a target is missed.
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

LOOP = r"""
cd "$1" || exit 1
count=$2 every=$3 blocks=$4
i=0
while [ $i -lt $count ]; do
  i=$((i + 1))
  if [ "$every" -gt 0 ] && [ $((i % every)) -eq 0 ]; then
    dd if=base.img of=img bs=1M status=none || exit 1
  else
    dd if=patch.bin of=img bs=4096 count=1 seek=$(( (RANDOM * 32768 + RANDOM) % blocks )) conv=notrunc status=none || exit 1
  fi
done
"""


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def prepare(work, mib):
    with open(os.path.join(work, "base.img"), "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MiB))
    with open(os.path.join(work, "patch.bin"), "wb") as f:
        f.write(os.urandom(4096))
    with open(os.path.join(work, "loop.sh"), "w") as f:
        f.write(LOOP)


def per_interval(listing):
    """The undo of each kept interval: `undo_bytes` of checkpoint N counts what
    a rollback to N needs, the journals of N and of every later interval."""
    cks = sorted(listing, key=lambda c: c["index"])
    return [c["undo_bytes"] - (cks[i + 1]["undo_bytes"] if i + 1 < len(cks) else 0) for i, c in enumerate(cks)]


def one_run(args, lazarus):
    """Wall seconds of the loop, and for a lazarus run `lazarus list --json`."""
    work = args.workdir
    shutil.copyfile(os.path.join(work, "base.img"), os.path.join(work, "img"))
    os.sync()
    store = os.path.join(work, "store")
    shutil.rmtree(store, ignore_errors=True)
    cmd = ["bash", os.path.join(work, "loop.sh"), work, str(args.count), str(args.rewrite_every),
           str(args.mib * MiB // 4096)]
    if lazarus:
        cmd = [args.lazarus, "run", "-i", "1", "-d", store, "--"] + cmd
    errp = os.path.join(work, "run.stderr")
    with open(errp, "w") as fe:
        t0 = time.monotonic()
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fe, timeout=args.timeout)
        t = time.monotonic() - t0
    err = open(errp).read().strip()
    if p.returncode != 0:
        sys.exit(f"bench: {'lazarus' if lazarus else 'native'} run failed (exit {p.returncode}): {err[-400:]}")
    listing = []
    if lazarus:
        out = subprocess.run([args.lazarus, "list", "-d", store, "--json"], capture_output=True, text=True)
        listing = json.loads(out.stdout) if out.returncode == 0 else []
        failed = [l for l in err.splitlines() if "failed" in l]
        if failed:
            log(f"note: {failed[0]}")
    return t, listing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--count", type=int, default=3000, help="dd invocations")
    ap.add_argument("--mib", type=int, default=32, help="size of the image")
    ap.add_argument("--rewrite-every", type=int, default=10, help="every Nth dd rewrites the whole image (0: never)")
    store_options(ap, "dd_loop", "directory for the image and the store")
    args = ap.parse_args()
    ready_workdir(args)
    prepare(args.workdir, args.mib)
    reps = []
    for rep in range(args.reps):
        ratios, nat, laz, undo, ckpts = [], [], [], [], []
        for pair in range(args.pairs):
            order = (False, True) if (rep + pair) % 2 == 0 else (True, False)
            t = {}
            for lz in order:
                t[lz], listing = one_run(args, lz)
                if lz:
                    ckpts.append(max((c["index"] for c in listing), default=0))
                    undo += per_interval(listing)
            nat.append(t[False])
            laz.append(t[True])
            ratios.append(t[True] / t[False])
        r = {"native_s": statistics.median(nat), "lazarus_s": statistics.median(laz),
             "ratio": statistics.median(ratios), "checkpoints": statistics.median(ckpts),
             "undo_max": max(undo, default=0), "undo_median": statistics.median(undo) if undo else 0}
        reps.append(r)
        log(f"rep {rep + 1}: native {r['native_s']:.2f} s, lazarus {r['lazarus_s']:.2f} s, ratio {r['ratio']:.2f}, "
            f"{r['checkpoints']:.0f} checkpoints, undo per kept interval median {r['undo_median'] / MiB:.1f} MiB, "
            f"max {r['undo_max'] / MiB:.1f} MiB")
    ratio = statistics.median(r["ratio"] for r in reps)
    undo_max = max(r["undo_max"] for r in reps)
    limit = args.mib * MiB if args.rewrite_every else None
    print(f"dd loop ({args.count} dd, {args.mib} MiB image, rewrite every {args.rewrite_every}), -i 1:")
    each = " ".join("%.2f" % r["ratio"] for r in reps)
    print(f"  native {statistics.median(r['native_s'] for r in reps):.2f} s, "
          f"lazarus {statistics.median(r['lazarus_s'] for r in reps):.2f} s, "
          f"ratio {ratio:.2f} (each {each})  target <= 1.5  "
          f"{'PASS' if ratio <= 1.5 else 'FAIL'}")
    undo_line = f"  undo per interval: max {undo_max / MiB:.1f} MiB, median {statistics.median(r['undo_median'] for r in reps) / MiB:.1f} MiB"
    if limit:
        undo_line += f"; changed per interval: the whole image, {limit / MiB:.0f} MiB  target undo <= changed (+1 %: the records)  " \
                     f"{'PASS' if undo_max <= limit * 1.01 else 'FAIL'}"
    print(undo_line)
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"args": vars(args), "reps": reps, "ratio": ratio, "undo_max": undo_max}, f, indent=1)
    if not args.keep:
        for n in ("img", "base.img"):
            try:
                os.unlink(os.path.join(args.workdir, n))
            except FileNotFoundError:
                pass
        shutil.rmtree(os.path.join(args.workdir, "store"), ignore_errors=True)
    sys.exit(0 if ratio <= 1.5 and (not limit or undo_max <= limit * 1.01) else 1)


if __name__ == "__main__":
    main()
