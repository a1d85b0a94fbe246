"""shared_files: a job that changes files in a directory standing for a
shared file system (tests/test_s3_journals.py).

    python3 -B shared_files.py WORK STEPS

Each step appends a line to WORK/log.txt, overwrites a 4 KiB block of
WORK/data.bin, renames WORK/turn.<i-1> to WORK/turn.<i> and prints
"step I"; at the end it prints "digest" and the SHA-256 of the files.  What it
leaves depends only on STEPS, never on timing.
"""
import hashlib
import os
import sys
import time

work, steps = sys.argv[1], int(sys.argv[2])
os.chdir(work)
for i in range(steps):
    with open("log.txt", "a") as f:
        f.write(f"line {i}\n")
    fd = os.open("data.bin", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, bytes([i % 251]) * 4096, (i * 7919 % 64) * 4096)
    os.close(fd)
    if i == 0:
        open("turn.0", "w").close()
    else:
        os.rename(f"turn.{i - 1}", f"turn.{i}")
    print(f"step {i}", flush=True)
    time.sleep(0.01)
h = hashlib.sha256()
for name in ("log.txt", "data.bin"):
    with open(name, "rb") as f:
        h.update(f.read())
print("digest", h.hexdigest(), sorted(os.listdir(".")), flush=True)
