"""py_compute: a deterministic pure-Python computation for restart tests.

    python3 py_compute.py [STEPS]        default 160 steps (about 13 s)

Churns big integers, a dict and a list; prints a progress line every few
steps and, at the end, `digest <hex>`.  The output depends only on STEPS.
"""
import hashlib
import sys


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 160
    table = {}
    items = []
    big = 1
    x = 0x9E3779B97F4A7C15
    print(f"start steps={steps}", flush=True)
    for step in range(1, steps + 1):
        for i in range(100000):
            # 64-bit LCG in pure Python
            x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
            key = x % 50021
            table[key] = table.get(key, 0) ^ (x >> 11) ^ i
            if (x >> 60) & 7 == 0:
                items.append((key, x >> 40))
            elif items and (x >> 59) & 15 == 1:
                items.pop((x >> 20) % len(items))
        big = (big * (x | 1) + step) % (1 << 20000)
        # drop a tenth of the dict, deterministically
        for k in [k for k in table if (k ^ step) % 10 == 0]:
            del table[k]
        if step % 10 == 0 or step == steps:
            print(f"step {step}/{steps} table={len(table)} items={len(items)}", flush=True)
    h = hashlib.sha256()
    h.update(repr(sorted(table.items())).encode())
    h.update(repr(items).encode())
    h.update(str(big).encode())
    print(f"digest {h.hexdigest()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
