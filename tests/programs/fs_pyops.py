"""fs_pyops: a deterministic Python program that changes files in every way
a file-rollback restart must undo.

    python3 fs_pyops.py WORKDIR [STEPS] [SEED] [PAUSE_US]
                                      default 6000 steps, seed 1, 200 us

PAUSE_US is a sleep after each step (it paces the program; 0 = none).

WORKDIR must exist and be empty; the program touches nothing outside it.
It keeps two files open for the whole run: log.txt (buffered appends, a
line per step) and table.bin (256 KiB, buffered in-place overwrites of
records).  Each step also does three operations, chosen by a seeded PRNG, on
the names f00..f11 (and sub/f00..sub/f05 while the directory sub exists):
append, pwrite in place (sometimes past the end), truncate (shrink or
extend), O_TRUNC rewrite, rename (over an existing file too), unlink, hard
link, symlink, chmod, copy_file_range, sendfile, fsync, mkdir/rmdir sub.
A model of every file lives in memory: each step reads a file back and
compares its bytes, size, mode and which other names are hard links to it
(table.bin and log.txt every 50 steps); any difference prints `MISMATCH ...` and exits 3.

Output: `start steps=N seed=S`, `step I/N files=F bytes=B` every 250
steps, and at the end, after checking the whole directory against the model,
`done <sha256>` over names, modes, link counts and contents.  Files and
output depend only on STEPS and SEED, never on timing; a run killed and
resumed from a checkpoint (with the files rolled back to it) ends exactly
like an uninterrupted one.
"""
import hashlib
import os
import random
import sys
import time

TABLE_SIZE = 256 * 1024
RECORD = 64
MAX_FILE = 192 * 1024
SLOTS = [f"f{i:02d}" for i in range(12)]
SUB_SLOTS = [f"sub/f{i:02d}" for i in range(6)]


class Node:
    """One inode: its bytes and permission bits (shared by hard links)."""

    def __init__(self, data=b"", mode=0o644):
        self.data = bytearray(data)
        self.mode = mode


def fail(msg):
    print(f"MISMATCH {msg}", flush=True)
    sys.exit(3)


class Prog:
    def __init__(self, work, steps, seed, pause):
        self.w = work
        self.pause = pause
        self.steps = steps
        self.rng = random.Random(seed)
        self.files = {}   # name -> Node
        self.links = {}   # symlink name -> target
        self.sub = False
        self.step = 0
        umask = os.umask(0o022)
        os.umask(umask)
        self.newmode = 0o666 & ~umask
        self.log = open(self.p("log.txt"), "ab")
        self.logmodel = bytearray()
        self.table = open(self.p("table.bin"), "w+b")
        self.tmodel = bytearray(self.rng.randbytes(TABLE_SIZE))
        self.table.write(self.tmodel)
        self.table.flush()

    def p(self, name):
        return os.path.join(self.w, name)

    # -- choosing names ---------------------------------------------------
    def pool(self):
        return SLOTS + (SUB_SLOTS if self.sub else [])

    def pick_file(self):
        names = sorted(self.files)
        return self.rng.choice(names) if names else None

    def pick_free(self):
        free = [n for n in self.pool() if n not in self.files and n not in self.links]
        return self.rng.choice(free) if free else None

    def nlink(self, node):
        return sum(1 for n in self.files.values() if n is node)

    def chunk(self, lo, hi):
        n = self.rng.randrange(lo, hi)
        if self.rng.random() < 0.5:
            return self.rng.randbytes(n)
        # compressible text
        line = f"step {self.step} {self.rng.random():.12f}\n".encode()
        return (line * (n // len(line) + 1))[:n]

    # -- operations ---------------------------------------------------------
    def op_append(self):
        name = self.pick_file() if self.rng.random() < 0.7 else self.pick_free()
        if name is None:
            return
        node = self.files.get(name)
        if node is not None and len(node.data) > MAX_FILE:
            return self.op_truncate(name)
        data = self.chunk(1, 8192)
        with open(self.p(name), "ab") as f:
            f.write(data)
        if node is None:
            node = self.files[name] = Node(mode=self.newmode)
        node.data += data

    def op_pwrite(self):
        name = self.pick_file()
        if name is None:
            return
        node = self.files[name]
        off = self.rng.randrange(len(node.data) + 1)
        data = self.chunk(1, 4096)
        fd = os.open(self.p(name), os.O_RDWR)
        try:
            assert os.pwrite(fd, data, off) == len(data)
        finally:
            os.close(fd)
        node.data[off:off + len(data)] = data

    def op_truncate(self, name=None):
        name = name or self.pick_file()
        if name is None:
            return
        node = self.files[name]
        size = len(node.data)
        new = self.rng.randrange(size + 1) if self.rng.random() < 0.8 or size > MAX_FILE \
            else size + self.rng.randrange(1, 20000)
        if self.rng.random() < 0.5:
            os.truncate(self.p(name), new)
        else:
            fd = os.open(self.p(name), os.O_WRONLY)
            try:
                os.ftruncate(fd, new)
            finally:
                os.close(fd)
        if new <= size:
            del node.data[new:]
        else:
            node.data += bytes(new - size)

    def op_rewrite(self):
        name = self.pick_file() if self.rng.random() < 0.8 else self.pick_free()
        if name is None:
            return
        data = self.chunk(0, 30000)
        with open(self.p(name), "wb") as f:
            f.write(data)
        node = self.files.get(name)
        if node is None:
            node = self.files[name] = Node(mode=self.newmode)
        node.data[:] = data

    def op_rename(self):
        src = self.pick_file()
        if src is None:
            return
        dst = self.rng.choice([n for n in self.pool() if n != src])
        os.replace(self.p(src), self.p(dst))
        if self.files.get(dst) is self.files[src]:
            return  # two links to one file: rename does nothing
        self.links.pop(dst, None)
        self.files[dst] = self.files.pop(src)

    def op_unlink(self):
        names = sorted(self.files) + sorted(self.links)
        if not names:
            return
        name = self.rng.choice(names)
        os.unlink(self.p(name))
        self.files.pop(name, None)
        self.links.pop(name, None)

    def op_link(self):
        src, dst = self.pick_file(), self.pick_free()
        if src is None or dst is None:
            return
        os.link(self.p(src), self.p(dst))
        self.files[dst] = self.files[src]

    def op_symlink(self):
        dst = self.pick_free()
        if dst is None:
            return
        target = self.rng.choice(SLOTS) + ("-x" if self.rng.random() < 0.3 else "")
        os.symlink(target, self.p(dst))
        self.links[dst] = target

    def op_chmod(self):
        name = self.pick_file()
        if name is None:
            return
        mode = self.rng.choice([0o600, 0o640, 0o644, 0o664, 0o604])
        os.chmod(self.p(name), mode)
        self.files[name].mode = mode

    def op_copy(self):
        src = self.pick_file()
        dst = self.pick_free() if self.rng.random() < 0.6 else self.pick_file()
        if src is None or dst is None or self.files.get(dst) is self.files[src]:
            return
        data = bytes(self.files[src].data)
        fin = os.open(self.p(src), os.O_RDONLY)
        fout = os.open(self.p(dst), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            use_sendfile = self.rng.random() < 0.5
            done = 0
            while done < len(data):
                if use_sendfile:
                    n = os.sendfile(fout, fin, done, len(data) - done)
                else:
                    n = os.copy_file_range(fin, fout, len(data) - done)
                assert n > 0, (src, dst, done)
                done += n
        finally:
            os.close(fin)
            os.close(fout)
        node = self.files.get(dst)
        if node is None:
            node = self.files[dst] = Node(mode=self.newmode)
        node.data[:] = data

    def op_fsync(self):
        name = self.pick_file()
        if name is None:
            return
        fd = os.open(self.p(name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def op_subdir(self):
        if not self.sub:
            os.mkdir(self.p("sub"))
            self.sub = True
        elif not any(n.startswith("sub/") for n in list(self.files) + list(self.links)):
            os.rmdir(self.p("sub"))
            self.sub = False
        else:
            # empty it a little
            for n in sorted(self.files):
                if n.startswith("sub/"):
                    os.unlink(self.p(n))
                    del self.files[n]
                    break

    OPS = [("append", 6), ("pwrite", 6), ("truncate", 2), ("rewrite", 3), ("rename", 3),
           ("unlink", 2), ("link", 1), ("symlink", 1), ("chmod", 1), ("copy", 2),
           ("fsync", 1), ("subdir", 1)]

    # -- checks ---------------------------------------------------------------
    def check_file(self, name):
        node = self.files[name]
        path = self.p(name)
        try:
            st = os.lstat(path)
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            fail(f"step {self.step}: {name}: {e}")
        if data != node.data:
            at = next((i for i, (a, b) in enumerate(zip(data, node.data)) if a != b),
                      min(len(data), len(node.data)))
            fail(f"step {self.step}: {name}: {len(data)} bytes, want {len(node.data)}, "
                 f"first difference at {at}")
        if st.st_mode & 0o7777 != node.mode:
            fail(f"step {self.step}: {name}: mode {st.st_mode & 0o7777:o}, want {node.mode:o}")
        # hard links: which names are one file (st_nlink is not compared: it
        # would count links made outside WORKDIR too)
        for other in sorted(self.files):
            if other == name:
                continue
            try:
                ost = os.lstat(self.p(other))
            except OSError as e:
                fail(f"step {self.step}: {other}: {e}")
            same = (ost.st_dev, ost.st_ino) == (st.st_dev, st.st_ino)
            if same != (self.files[other] is node):
                fail(f"step {self.step}: {name} and {other} are "
                     f"{'one file' if same else 'two files'}, want the opposite")

    def check_some(self):
        names = sorted(self.files) + sorted(self.links)
        if names:
            name = self.rng.choice(names)
            if name in self.links:
                try:
                    got = os.readlink(self.p(name))
                except OSError as e:
                    fail(f"step {self.step}: symlink {name}: {e}")
                if got != self.links[name]:
                    fail(f"step {self.step}: symlink {name} -> {got}, want {self.links[name]}")
            else:
                self.check_file(name)
        if self.step % 50 == 0:
            self.table.flush()
            self.log.flush()
            self.check_table_log()

    def check_table_log(self):
        for name, model in (("table.bin", self.tmodel), ("log.txt", self.logmodel)):
            try:
                with open(self.p(name), "rb") as f:
                    data = f.read()
            except OSError as e:
                fail(f"step {self.step}: {name}: {e}")
            if data != model:
                fail(f"step {self.step}: {name}: {len(data)} bytes differ from the model "
                     f"({len(model)} bytes)")

    def check_all(self):
        want = {"log.txt", "table.bin"} | set(self.files) | set(self.links)
        if self.sub:
            want.add("sub")
        got = set()
        for root, dirs, names in os.walk(self.w):
            for n in dirs + names:
                got.add(os.path.relpath(os.path.join(root, n), self.w))
        if got != want:
            fail(f"end: directory holds {sorted(got ^ want)} unexpectedly/missing")
        for name in sorted(self.files):
            self.check_file(name)
        for name in sorted(self.links):
            if os.readlink(self.p(name)) != self.links[name]:
                fail(f"end: symlink {name}")
        self.check_table_log()

    # -- main loop ------------------------------------------------------------
    def run(self):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        while self.step < self.steps:
            self.step += 1
            ops = self.rng.choices(names, weights, k=3)
            for name in ops:
                getattr(self, "op_" + name)()
            off = self.rng.randrange(TABLE_SIZE // RECORD) * RECORD
            rec = self.rng.randbytes(RECORD)
            self.table.seek(off)
            self.table.write(rec)
            self.tmodel[off:off + RECORD] = rec
            line = f"{self.step} {' '.join(ops)} {len(self.files)}\n".encode()
            self.log.write(line)
            self.logmodel += line
            self.check_some()
            if self.step % 250 == 0 or self.step == self.steps:
                total = sum(len(n.data) for n in {id(n): n for n in self.files.values()}.values())
                print(f"step {self.step}/{self.steps} files={len(self.files)} bytes={total}",
                      flush=True)
            if self.pause:
                time.sleep(self.pause)
        self.table.close()
        self.log.close()
        self.check_all()
        h = hashlib.sha256()
        for name in sorted(self.files):
            node = self.files[name]
            h.update(f"{name} {node.mode:o} {self.nlink(node)} {len(node.data)}\n".encode())
            h.update(node.data)
        for name in sorted(self.links):
            h.update(f"{name} -> {self.links[name]}\n".encode())
        h.update(self.tmodel)
        h.update(self.logmodel)
        print(f"done {h.hexdigest()}", flush=True)


def main():
    work = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6000
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    pause_us = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    if os.listdir(work):
        print(f"fs_pyops: {work} is not empty", file=sys.stderr)
        return 2
    print(f"start steps={steps} seed={seed}", flush=True)
    Prog(work, steps, seed, pause_us / 1e6).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
