"""fs_steps: a generic file-system scenario driver for the file-rollback tests.

    python3 -B fs_steps.py SCENARIO.json

SCENARIO.json is an object:

    {"work": "/abs/dir",          the work directory (the driver chdir()s there;
                                  every path in a step is relative to it)
     "lib": "/abs/liblazarus.so", the C API, called through ctypes
     "steps": [STEP, ...],
     "on_restore": "continue" | "kill" | "exit",   (default "continue")
     "report_fd": 1}              where report lines go (default 1)

A STEP is {"op": NAME, ...}.  Descriptors, Python file objects and mappings
are kept by name ("as": name when made, "fd"/"f"/"map": name when used) across
checkpoints.  Data fields ("data") are either a string (UTF-8) or
{"rep": STRING, "n": N} (STRING repeated, cut to N bytes) or
{"rand": SEED, "n": N} (N deterministic pseudo-random bytes).  A step with
"may_fail": true reports the errno of an OSError instead of dying.

A step with "if_open": true is skipped when its "fd" is not open.

Operations: open, close, close_if_unlinked (when its file has no name left),
openclose (open + close a path), patch (open, pwrite, close), write,
pwrite, writev, read, pread, lseek, append (O_APPEND|O_CREAT write),
put (O_CREAT|O_TRUNC write), truncate, ftruncate, fsync, unlink, rename,
rename2 (renameat2 flags: "exchange"/"noreplace"), mkdir, rmdir, link,
symlink, chmod, fchmod, utime, fallocate (modes: KEEP_SIZE, PUNCH_HOLE,
ZERO_RANGE, COLLAPSE_RANGE, INSERT_RANGE), posix_fallocate,
copy_file_range, sendfile, mmap/mwrite/msync/munmap (MAP_SHARED),
tmpfile (O_TMPFILE), linktmp (link a descriptor's file into the tree),
dup, dup2, pyopen/pywrite/pyseek/pyflush/pyclose (Python buffered io),
print (write to descriptor 1), checkpoint.

Report lines (each one line, on report_fd):

    SNAP <k> <index> <json>      after the k-th checkpoint step (0-based)
                                 returned CONTINUED (or INACTIVE: index 0)
    RESTORED <k> <index> <json>  after it returned RESTARTED, before anything
                                 else happens
    OUT <step> <json>            a step's result (reads, errors of may_fail)
    CKPTERR <k> <ret>            the checkpoint call failed
    END <json>                   after the last step, just before the driver
                                 SIGKILLs itself (so the job is "stopped")

<json> of SNAP/RESTORED/END is {"tree": {...}, "fds": {...}, "files": {...},
"maps": {...}}: every path under the work directory (the directory itself is
"."), with type, permission bits, owner, size, mtime_ns, sha256 of a regular file's
contents, a symlink's target, and "same": the first path (in sorted order)
naming the same inode (hard links within the tree; st_nlink is left out: it
also counts names outside the tree); for every named descriptor its number,
offset, F_GETFL/F_GETFD flags, size, the path it names, whether
that path is the same inode, and the sha256 of 256 bytes read at its offset
(pread: the offset does not move); for Python file objects their tell() and
descriptor; for mappings the sha256 of the mapped bytes.

After RESTORED: "continue" goes on with the steps after that checkpoint
(printing SNAP lines for later checkpoints and END), "kill" SIGKILLs itself at
once, "exit" exits 0.
"""
import ctypes
import ctypes.util
import hashlib
import json
import mmap
import os
import random
import signal
import stat
import sys

libc = ctypes.CDLL(None, use_errno=True)

FALLOC = {"KEEP_SIZE": 0x01, "PUNCH_HOLE": 0x02, "COLLAPSE_RANGE": 0x08,
          "ZERO_RANGE": 0x10, "INSERT_RANGE": 0x20}
RENAME = {"noreplace": 1, "exchange": 2}

REPORT_FD = 1
fds = {}      # name -> descriptor number
files = {}    # name -> Python file object
maps = {}     # name -> mmap object
work_abs = ""


def report(line: str) -> None:
    data = (line + "\n").encode()
    while data:
        n = os.write(REPORT_FD, data)
        data = data[n:]


def mkdata(spec) -> bytes:
    if isinstance(spec, str):
        return spec.encode()
    if "rep" in spec:
        rep = spec["rep"].encode()
        n = spec["n"]
        return (rep * (n // max(len(rep), 1) + 1))[:n]
    if "rand" in spec:
        return random.Random(spec["rand"]).randbytes(spec["n"])
    raise ValueError(f"bad data spec {spec!r}")


def flagbits(names) -> int:
    v = 0
    for n in names:
        v |= getattr(os, n)
    return v


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def file_sha(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                h.update(b)
    except OSError as e:
        return f"unreadable:{e.errno}"
    return h.hexdigest()


def tree_snapshot() -> dict:
    out = {}
    inodes = {}

    def visit(rel: str, st) -> None:
        kind = ("dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode)
                else "symlink" if stat.S_ISLNK(st.st_mode) else "other")
        e = {"type": kind, "mode": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid,
             "gid": st.st_gid, "mtime_ns": st.st_mtime_ns}
        if kind == "file":
            e["size"] = st.st_size
            e["sha256"] = file_sha(rel)
            inodes.setdefault((st.st_dev, st.st_ino), []).append(rel)
            e["_ino"] = (st.st_dev, st.st_ino)
        elif kind == "symlink":
            e["target"] = os.readlink(rel)
        out[rel] = e
        if kind == "dir":
            for name in sorted(os.listdir(rel)):
                child = name if rel == "." else f"{rel}/{name}"
                visit(child, os.lstat(child))

    visit(".", os.lstat("."))
    for e in out.values():
        if "_ino" in e:
            e["same"] = sorted(inodes[e.pop("_ino")])[0]
    return out


def rel_of(target: str) -> str:
    if target == work_abs:
        return "."
    if target.startswith(work_abs + "/"):
        return target[len(work_abs) + 1:]
    return target


def fd_info(fd: int) -> dict:
    d = {"fd": fd}
    try:
        st = os.fstat(fd)
    except OSError as e:
        d["error"] = e.errno
        return d
    d["size"] = st.st_size
    d["fl"] = libc.fcntl(fd, 3, 0)  # F_GETFL
    d["fdfl"] = libc.fcntl(fd, 1, 0)  # F_GETFD
    try:
        d["pos"] = os.lseek(fd, 0, os.SEEK_CUR)
    except OSError as e:
        d["pos"] = f"err:{e.errno}"
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
        d["path"] = rel_of(target)
        try:
            pst = os.lstat(target)
            d["path_same_inode"] = (pst.st_dev, pst.st_ino) == (st.st_dev, st.st_ino)
        except OSError:
            d["path_same_inode"] = False
    except OSError as e:
        d["path"] = f"err:{e.errno}"
    if isinstance(d.get("pos"), int) and (d["fl"] & os.O_ACCMODE) != os.O_WRONLY:
        try:
            d["at_pos"] = sha(os.pread(fd, 256, d["pos"]))
        except OSError as e:
            d["at_pos"] = f"err:{e.errno}"
    return d


def snapshot() -> str:
    snap = {"tree": tree_snapshot(),
            "fds": {n: fd_info(fd) for n, fd in sorted(fds.items())},
            "files": {n: {"tell": f.tell(), "fd": f.fileno()} for n, f in sorted(files.items())
                      if not f.closed},
            "maps": {n: sha(m[:]) for n, m in sorted(maps.items()) if not m.closed}}
    return json.dumps(snap, sort_keys=True, separators=(",", ":"))


def do_step(i: int, s: dict, out: list) -> None:
    op = s["op"]
    if s.get("if_open") and s.get("fd") not in fds:
        return
    if op == "open":
        fds[s["as"]] = os.open(s["path"], flagbits(s.get("flags", ["O_RDONLY"])),
                               s.get("mode", 0o644))
    elif op == "close":
        os.close(fds.pop(s["fd"]))
    elif op == "close_if_unlinked":
        if s["fd"] in fds and os.readlink(f"/proc/self/fd/{fds[s['fd']]}").endswith(" (deleted)"):
            os.close(fds.pop(s["fd"]))
    elif op == "openclose":
        os.close(os.open(s["path"], flagbits(s.get("flags", ["O_RDONLY"]))))
    elif op == "patch":
        fd = os.open(s["path"], os.O_WRONLY)
        try:
            os.pwrite(fd, mkdata(s["data"]), s["off"])
        finally:
            os.close(fd)
    elif op == "write":
        data = mkdata(s["data"])
        bs = s.get("bs", len(data)) or 1
        for o in range(0, len(data), bs):
            chunk = data[o:o + bs]
            n = os.write(fds[s["fd"]], chunk)
            assert n == len(chunk), (n, len(chunk))
    elif op == "pwrite":
        data = mkdata(s["data"])
        assert os.pwrite(fds[s["fd"]], data, s["off"]) == len(data)
    elif op == "writev":
        bufs = [mkdata(d) for d in s["datas"]]
        assert os.writev(fds[s["fd"]], bufs) == sum(map(len, bufs))
    elif op == "read":
        b = os.read(fds[s["fd"]], s["n"])
        out.append({"read": sha(b), "len": len(b), "head": b[:32].hex()})
    elif op == "pread":
        b = os.pread(fds[s["fd"]], s["n"], s["off"])
        out.append({"pread": sha(b), "len": len(b), "head": b[:32].hex()})
    elif op == "lseek":
        out.append({"lseek": os.lseek(fds[s["fd"]], s["off"], s.get("whence", 0))})
    elif op in ("append", "put"):
        how = os.O_APPEND if op == "append" else os.O_TRUNC
        fd = os.open(s["path"], os.O_WRONLY | os.O_CREAT | how, s.get("mode", 0o644))
        try:
            os.write(fd, mkdata(s["data"]))
        finally:
            os.close(fd)
    elif op == "truncate":
        os.truncate(s["path"], s["len"])
    elif op == "ftruncate":
        os.ftruncate(fds[s["fd"]], s["len"])
    elif op == "fsync":
        os.fsync(fds[s["fd"]])
    elif op == "unlink":
        os.unlink(s["path"])
    elif op == "rename":
        os.rename(s["src"], s["dst"])
    elif op == "rename2":
        flags = 0
        for f in s["flags"]:
            flags |= RENAME[f]
        r = libc.renameat2(-100, s["src"].encode(), -100, s["dst"].encode(), flags)
        if r != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    elif op == "mkdir":
        os.mkdir(s["path"], s.get("mode", 0o755))
    elif op == "rmdir":
        os.rmdir(s["path"])
    elif op == "link":
        os.link(s["src"], s["dst"])
    elif op == "symlink":
        os.symlink(s["target"], s["path"])
    elif op == "chmod":
        os.chmod(s["path"], s["mode"])
    elif op == "fchmod":
        os.fchmod(fds[s["fd"]], s["mode"])
    elif op == "utime":
        os.utime(s["path"], ns=tuple(s["ns"]), follow_symlinks=s.get("follow", True))
    elif op == "fallocate":
        mode = 0
        for m in s.get("mode", []):
            mode |= FALLOC[m]
        r = libc.fallocate(fds[s["fd"]], mode, ctypes.c_long(s["off"]), ctypes.c_long(s["len"]))
        if r != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    elif op == "posix_fallocate":
        os.posix_fallocate(fds[s["fd"]], s["off"], s["len"])
    elif op == "copy_file_range":
        n = os.copy_file_range(fds[s["src"]], fds[s["dst"]], s["n"], s.get("src_off"),
                               s.get("dst_off"))
        out.append({"copied": n})
    elif op == "sendfile":
        n = os.sendfile(fds[s["out"]], fds[s["in"]], s.get("off"), s["n"])
        out.append({"sent": n})
    elif op == "mmap":
        maps[s["as"]] = mmap.mmap(fds[s["fd"]], s["len"], mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE, offset=s.get("off", 0))
    elif op == "mwrite":
        data = mkdata(s["data"])
        m = maps[s["map"]]
        m[s["off"]:s["off"] + len(data)] = data
    elif op == "msync":
        maps[s["map"]].flush()
    elif op == "munmap":
        maps.pop(s["map"]).close()
    elif op == "tmpfile":
        fds[s["as"]] = os.open(s.get("dir", "."), os.O_TMPFILE | os.O_RDWR, s.get("mode", 0o600))
    elif op == "linktmp":
        os.link(f"/proc/self/fd/{fds[s['fd']]}", s["path"], follow_symlinks=True)
    elif op == "dup":
        fds[s["as"]] = os.dup(fds[s["fd"]])
    elif op == "dup2":
        fds[s["as"]] = os.dup2(fds[s["fd"]], s["to"])
    elif op == "pyopen":
        files[s["as"]] = open(s["path"], s["mode"], buffering=s.get("buffering", -1))
    elif op == "pywrite":
        data = mkdata(s["data"])
        f = files[s["f"]]
        f.write(data if "b" in f.mode else data.decode())
    elif op == "pyseek":
        files[s["f"]].seek(s["off"], s.get("whence", 0))
    elif op == "pyflush":
        files[s["f"]].flush()
    elif op == "pyclose":
        files.pop(s["f"]).close()
    elif op == "print":
        data = mkdata(s["data"])
        while data:
            data = data[os.write(1, data):]
    else:
        raise ValueError(f"unknown op {op!r}")


def main() -> int:
    global REPORT_FD, work_abs
    with open(sys.argv[1]) as f:
        sc = json.load(f)
    REPORT_FD = sc.get("report_fd", 1)
    on_restore = sc.get("on_restore", "continue")
    os.chdir(sc["work"])
    work_abs = os.getcwd()
    lib = ctypes.CDLL(sc["lib"])
    lib.lazarus_checkpoint.argtypes = [ctypes.POINTER(ctypes.c_ulonglong)]
    k = 0
    for i, s in enumerate(sc["steps"]):
        if s["op"] == "checkpoint":
            idx = ctypes.c_ulonglong(0)
            r = lib.lazarus_checkpoint(ctypes.byref(idx))
            if r in (0, 1):  # 0: not under Lazarus (index 0)
                report(f"SNAP {k} {idx.value} {snapshot()}")
            elif r == 2:
                report(f"RESTORED {k} {idx.value} {snapshot()}")
                if on_restore == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                elif on_restore == "exit":
                    return 0
            else:
                report(f"CKPTERR {k} {r}")
            k += 1
            continue
        out = []
        try:
            do_step(i, s, out)
        except OSError as e:
            if not s.get("may_fail"):
                raise
            out.append({"errno": e.errno})
        for o in out:
            report(f"OUT {i} {json.dumps(o, sort_keys=True)}")
    report(f"END {snapshot()}")
    os.kill(os.getpid(), signal.SIGKILL)
    return 99


if __name__ == "__main__":
    sys.exit(main())
