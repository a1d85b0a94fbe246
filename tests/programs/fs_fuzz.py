"""Random file-system operations with a checkpoint every few steps.

Usage: fs_fuzz.py LIBLAZARUS SEED STEPS EVERY [wait]
Works in the current directory (its subdirectory `w`).  After each checkpoint
that continues it prints "SNAP <index> <json>" (the tree as it is) and, with
`wait`, waits until a file `go.<index>` exists in the current directory (so
that a test can look at the tree from outside meanwhile); when it comes back
from a restart it prints "BACK <index> <json>" and exits 0.  After the last
step it kills itself (SIGKILL), so the job is restartable.
"""
import ctypes, hashlib, json, os, random, signal, stat, sys, time

lib = ctypes.CDLL(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
steps, every = int(sys.argv[3]), int(sys.argv[4])
wait = sys.argv[5:] == ["wait"]
W = "w"


def snapshot():
    out = {}
    for root, dirs, files in os.walk(W):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(root, name)
            st = os.lstat(p)
            e = {"mode": oct(st.st_mode), "mtime": st.st_mtime_ns}
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    e["sha"] = hashlib.sha256(f.read()).hexdigest()
                e["size"] = st.st_size
            elif stat.S_ISLNK(st.st_mode):
                e["target"] = os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                e.pop("mtime")  # entries made inside by a restart's own link/rename are restored, but keep it simple
                e["mtime_dir"] = st.st_mtime_ns
            out[p] = e
    return out


def checkpoint():
    idx = ctypes.c_ulonglong()
    r = lib.lazarus_checkpoint(ctypes.byref(idx))
    if r == 2:
        print("BACK", idx.value, json.dumps(snapshot()), flush=True)
        sys.exit(0)
    if r != 1:
        print("CKPT-FAILED", r, flush=True)
        sys.exit(3)
    print("SNAP", idx.value, json.dumps(snapshot()), flush=True)
    while wait and not os.path.exists("go.%d" % idx.value):
        time.sleep(0.002)


def files():
    return [os.path.join(r, f) for r, d, fs in os.walk(W) for f in fs if not os.path.islink(os.path.join(r, f))]


def dirs():
    return [W] + [os.path.join(r, d) for r, ds, f in os.walk(W) for d in ds if not os.path.islink(os.path.join(r, d))]


def newname():
    return os.path.join(rng.choice(dirs()), "n%d" % rng.randrange(10**6))


def data(n):
    return bytes(rng.randrange(256) for _ in range(n))


def op():
    fs, ds = files(), dirs()
    k = rng.randrange(16)
    try:
        if k == 0 or not fs:
            with open(newname(), "wb") as f:
                f.write(data(rng.randrange(1, 20000)))
        elif k == 1:
            with open(rng.choice(fs), "ab") as f:
                f.write(data(rng.randrange(1, 9000)))
        elif k in (2, 3):
            p = rng.choice(fs)
            fd = os.open(p, os.O_RDWR)
            size = os.fstat(fd).st_size
            os.pwrite(fd, data(rng.randrange(1, 6000)), rng.randrange(size + 1))
            os.close(fd)
        elif k == 4:
            p = rng.choice(fs)
            os.truncate(p, rng.randrange(os.path.getsize(p) + 3000))
        elif k == 5:
            os.unlink(rng.choice(fs))
        elif k == 6:
            os.rename(rng.choice(fs), rng.choice(fs + [newname()]))
        elif k == 7:
            os.mkdir(newname())
        elif k == 8:
            d = rng.choice(ds[1:] or [W])
            if d != W and not os.listdir(d):
                os.rmdir(d)
        elif k == 9:
            d = rng.choice(ds[1:] or [W])
            if d != W:
                os.rename(d, newname())
        elif k == 10:
            os.symlink("t%d" % rng.randrange(100), newname())
        elif k == 11:
            os.link(rng.choice(fs), newname())
        elif k == 12:
            os.chmod(rng.choice(fs), rng.choice([0o600, 0o644, 0o640, 0o755]))
        elif k == 13:
            os.utime(rng.choice(fs), ns=(rng.randrange(10**18), rng.randrange(10**18)))
        elif k == 14:
            with open(rng.choice(fs), "r+b") as f:  # buffered stdio-like overwrite
                f.seek(rng.randrange(os.fstat(f.fileno()).st_size + 1))
                f.write(data(rng.randrange(1, 3000)))
        else:
            p = rng.choice(fs)
            with open(p, "wb") as f:  # O_TRUNC re-creation
                f.write(data(rng.randrange(0, 5000)))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, OSError):
        pass


os.makedirs(W, exist_ok=True)
for i in range(6):
    with open(os.path.join(W, "f%d" % i), "wb") as f:
        f.write(data(rng.randrange(1, 30000)))
os.mkdir(os.path.join(W, "d0"))
for s in range(steps):
    if s % every == 0:
        checkpoint()
    op()
os.kill(os.getpid(), signal.SIGKILL)
