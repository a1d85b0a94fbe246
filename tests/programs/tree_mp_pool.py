"""tree_mp_pool.py DIR TASKS WORK: a Python multiprocessing job.

A Pool of 2 worker processes (the default start method: fork) maps TASKS
tasks; task t does WORK rounds of a deterministic integer/hash computation,
writes DIR/task.TT.txt (through a temporary name and os.replace) and
returns its digest.  The parent prints "task TT DIGEST" in task order as
results arrive (imap), appends the same line to DIR/results.log, and at
the end writes DIR/summary.txt and prints "done DIGEST" (sha256 of the
log).  Depends only on its arguments; prints "start TASKS WORK" first."""
import hashlib
import multiprocessing
import os
import sys


def task(args):
    d, t, work = args
    h = hashlib.sha256(f"task {t}".encode())
    acc = t * 2654435761 % (1 << 61)
    lines = []
    for r in range(work):
        for _ in range(200):
            acc = (acc * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        h.update(acc.to_bytes(8, "little"))
        if r % 50 == 0:
            lines.append(f"{r} {acc:016x} {h.hexdigest()[:16]}\n")
    digest = h.hexdigest()
    path = os.path.join(d, f"task.{t:02d}.txt")
    with open(path + ".tmp", "w") as f:
        f.writelines(lines)
        f.write(f"digest {digest}\n")
    os.replace(path + ".tmp", path)
    return t, digest


def main():
    d, tasks, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(f"start {tasks} {work}", flush=True)
    log = os.path.join(d, "results.log")
    with multiprocessing.Pool(2) as pool, open(log, "a") as out:
        for t, digest in pool.imap(task, [(d, t, work) for t in range(tasks)]):
            line = f"task {t:02d} {digest[:16]}"
            out.write(line + "\n")
            out.flush()
            print(line, flush=True)
    with open(log, "rb") as f:
        total = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(d, "summary.txt"), "w") as f:
        f.write(f"{tasks} tasks, {work} rounds, log {total}\n")
    print(f"done {total}", flush=True)


if __name__ == "__main__":
    main()
