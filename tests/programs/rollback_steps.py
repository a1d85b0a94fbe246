"""A program whose files change in every way between checkpoints, for
tests/test_rollback.py: `rollback_steps.py DIR TRIG STEPS`.  Step i appends
a line to DIR/log, overwrites 4 KiB of DIR/data in place, truncates
DIR/trunc, writes DIR/tmp.i through a rename and removes DIR/tmp.(i-1); then
prints `step i` and waits for the file TRIG.i.  `done` at the end.  The
content depends on i alone: an uninterrupted run gives the same files."""
import os
import sys
import time

d, trig, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = os.path.join(d, "data")
if not os.path.exists(data):
    with open(data, "wb") as f:
        f.write(bytes(range(256)) * 256)  # 64 KiB
for i in range(1, steps + 1):
    with open(os.path.join(d, "log"), "a") as f:
        f.write(f"line {i}\n")
    with open(data, "r+b") as f:
        f.seek((i * 7919) % 60 * 1024)
        f.write(bytes([i]) * 4096)
    with open(os.path.join(d, "trunc"), "w") as f:
        f.write("x" * (1000 * ((i % 3) + 1)))
    with open(os.path.join(d, f"tmp.{i}.new"), "w") as f:
        f.write(f"tmp {i}\n")
    os.rename(os.path.join(d, f"tmp.{i}.new"), os.path.join(d, f"tmp.{i}"))
    if i > 1:
        os.unlink(os.path.join(d, f"tmp.{i - 1}"))
    print(f"step {i}", flush=True)
    while not os.path.exists(f"{trig}.{i}"):
        time.sleep(0.02)
print("done", flush=True)
