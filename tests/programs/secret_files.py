"""secret_files: a job whose memory and files hold a known plaintext marker
(tests/test_s3_crypt.py: none of it may reach an encrypted remote store).

    python3 -B secret_files.py WORK STEPS MARKER

It keeps MARKER many times in its memory; each step overwrites a 4 KiB block
of WORK/data.bin with MARKER and the step's number (so the file journal saves
blocks holding it), appends a line to WORK/log.txt and prints "step I"; at the
end it prints "digest" and the SHA-256 of the files and of what it kept.
What it leaves depends only on STEPS and MARKER, never on timing.
"""
import hashlib
import os
import sys
import time

work, steps, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.chdir(work)
kept = [f"{marker}:{i:06d}".encode() * 64 for i in range(512)]  # about 2 MiB of it in memory
for i in range(steps):
    block = (f"{marker} step {i} ".encode() * 256)[:4096]
    fd = os.open("data.bin", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, block, (i * 7919 % 32) * 4096)
    os.close(fd)
    with open("log.txt", "a") as f:
        f.write(f"line {i}\n")
    kept[i % len(kept)] = kept[(i * 31) % len(kept)][::-1]
    print(f"step {i}", flush=True)
    time.sleep(0.01)
h = hashlib.sha256()
for name in ("log.txt", "data.bin"):
    with open(name, "rb") as f:
        h.update(f.read())
for k in kept:
    h.update(k)
print("digest", h.hexdigest(), sorted(os.listdir(".")), flush=True)
