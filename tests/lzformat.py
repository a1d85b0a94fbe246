"""The tests' one decoder (and encoder) of Lazarus's on-disk formats.

Format version 6, as common/format.h and files/journal.h define it and
docs/format.md specifies (version 5 manifests are decoded too):

  manifest   ckpt.N/manifest, ckpt.N/proc.P/manifest: a 160-byte header (128
             in version 5), `nsections` sections (a 16-byte {type | MUST,
             record_size, length} head, the payload padded to 8), a trailer
             (XXH3-64 of every byte before it)
  tree       ckpt.N/tree: a 48-byte header, nprocs 72-byte procs, nshared
             16-byte shared descriptions, the trailer
  journal    files.log: records of a 24-byte head {u32 magic "LZFJ", u16 type,
             u16 flags, u32 len, u32 check, u64 stamp} and `len` payload bytes,
             check = the low 32 bits of XXH3-64 of the head (check 0) and payload
  job file   DIR/job: text lines, the last `check=<XXH3-64 of the bytes before it>`

Every C struct is a `Layout`: its fields by their C names, in order, with
struct codes and no implicit padding (the C structs have explicit pads), so
that `Layout.offset("field")` is offsetof() and test_format_unit.py can check
every offset and size against the compiler's.  Records decode to `Rec`
objects that know where they lie in the buffer, so a test edits a field in
place (`Manifest.set`) and re-seals the checksum (`Manifest.seal`).

XXH3-64 comes from the system's libxxhash (libxxhash0, a dependency of
libxxhash-dev, which the build needs anyway).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import struct
from dataclasses import dataclass, field
from pathlib import Path

# --------------------------------------------------------------------------
# XXH3-64
# --------------------------------------------------------------------------
_xxh = None


def xxh3(data: bytes) -> int:
    """XXH3-64 of data (the checksum of every Lazarus file)."""
    global _xxh
    if _xxh is None:
        name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
        lib = ctypes.CDLL(name)
        lib.XXH3_64bits.restype = ctypes.c_uint64
        lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _xxh = lib
    data = bytes(data)
    return _xxh.XXH3_64bits(data, len(data))


# --------------------------------------------------------------------------
# Constants (common/format.h, files/journal.h)
# --------------------------------------------------------------------------
VERSION = 6
VERSION_MIN = 5  # the oldest version the C reader accepts
SEC_MUST = 0x80000000  # in a section's type: a reader that does not know it must refuse
MACHINE_X86_64 = 62
BYTE_ORDER = 0x01020304
PAGE_SIZE = 4096
HEADER_V5_SIZE = 128
FJ_VERSION = 1  # fj_begin.version (0 in journals of format 5)
MAGIC = b"LZRSCKPT"
TREE_MAGIC = b"LZRSTREE"

SEC_PROC, SEC_REGIONS, SEC_EXTENTS, SEC_FDS, SEC_STRINGS, SEC_PACKS = 1, 2, 3, 4, 5, 6
SEC_AUXV, SEC_FRAMES, SEC_THREADS, SEC_CHANS, SEC_GROUPS, SEC_EVENTS = 7, 8, 9, 10, 11, 12
SEC_USOCKS, SEC_INET, SEC_PTYS = 13, 14, 15
SEC_TIMERS = 17
SEC_IPC = 16
SEC_SIGQUEUE = 18  # struct lz_siginfo_rec[] (136 B): pending signals past the process record's 64
SEC_EXCLUDE = 19  # struct lz_exclusion[] (32 B): memory the program excluded (lazarus_exclude)
SECTION_NAMES = {SEC_PROC: "proc", SEC_REGIONS: "regions", SEC_EXTENTS: "extents", SEC_FDS: "fds",
                 SEC_STRINGS: "strings", SEC_PACKS: "packs", SEC_AUXV: "auxv", SEC_FRAMES: "frames",
                 SEC_THREADS: "threads", SEC_CHANS: "chans", SEC_GROUPS: "groups",
                 SEC_EVENTS: "events", SEC_USOCKS: "usocks", SEC_INET: "inet", SEC_PTYS: "ptys",
                 SEC_TIMERS: "timers", SEC_IPC: "ipc",
                 SEC_SIGQUEUE: "sigqueue", SEC_EXCLUDE: "exclude"}

FRAME_ZERO = 0xFFFFFFFF
CODEC_NONE, CODEC_ZERO, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3

FD_FILE, FD_DIR, FD_DEV, FD_STDIO, FD_DUP, FD_CTL, FD_GHOST, FD_PIPE, FD_SOCKET, FD_EVENT = range(1, 11)
FD_PTY = 14
FD_FIFO, FD_USOCK = 11, 12
EV_EVENTFD, EV_TIMERFD, EV_SIGNALFD, EV_EPOLL, EV_WATCH, EV_INOTIFY, EV_INWATCH = range(1, 8)
TM_TIMER, TM_NEXT = 1, 2
TMF_ABSTIME = 0x1
FD_INET = 13
IN_UNBOUND, IN_BOUND, IN_LISTEN, IN_CONNECTED, IN_RESET = range(1, 6)
CH_PIPE, CH_STREAM, CH_DGRAM, CH_SEQPACKET, CH_FIFO = 1, 2, 3, 4, 5
TH_CKPT = 0x1
TP_LIVE, TP_ZOMBIE = 1, 2

FJ_MAGIC = 0x4A465A4C  # "LZFJ" little-endian
FJ_INODE, FJ_DATA, FJ_NAME, FJ_MOVED, FJ_DIRTIME, FJ_BEGIN, FJ_END = range(1, 8)
FJ_TYPE_NAMES = {FJ_INODE: "INODE", FJ_DATA: "DATA", FJ_NAME: "NAME", FJ_MOVED: "MOVED",
                 FJ_DIRTIME: "DIRTIME", FJ_BEGIN: "BEGIN", FJ_END: "END"}
FJ_WAS_ABSENT, FJ_WAS_FILE, FJ_WAS_DIR, FJ_WAS_SYMLINK, FJ_WAS_OTHER = range(5)
FJ_DATA_MAX = 1 << 20


class FormatError(ValueError):
    """Bytes that are not what the format says."""


# --------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------
class Rec:
    """One decoded struct: its fields as attributes, `_off` its offset in
    the buffer it came from (None when built), `_layout` its Layout."""

    def __init__(self, layout: "Layout", off, values: dict):
        self.__dict__["_layout"] = layout
        self.__dict__["_off"] = off
        self.__dict__.update(values)

    def fields(self) -> dict:
        return {n: getattr(self, n) for n, _ in self._layout.fields}

    def pack(self) -> bytes:
        return self._layout.pack(**self.fields())

    def __repr__(self):
        return f"{self._layout.name}({', '.join(f'{k}={v!r}' for k, v in self.fields().items())})"


class Layout:
    """A C struct: (C field name, struct code) in order, little-endian,
    every pad explicit, `size` its sizeof()."""

    def __init__(self, name: str, size: int, fields):
        self.name = name
        self.fields = list(fields)
        self.size = size
        self._offsets = {}
        off = 0
        for n, code in self.fields:
            self._offsets[n] = off
            off += struct.calcsize("<" + code)
        self.st = struct.Struct("<" + "".join(c for _, c in self.fields))
        assert self.st.size == size, (name, self.st.size, size)

    def offset(self, name: str) -> int:
        return self._offsets[name]

    def code(self, name: str) -> str:
        return dict(self.fields)[name]

    def unpack(self, buf, off: int = 0) -> Rec:
        if off < 0 or off + self.size > len(buf):
            raise FormatError(f"{self.name} at {off}: beyond the {len(buf)} bytes")
        vals = self.st.unpack_from(buf, off)
        return Rec(self, off, dict(zip((n for n, _ in self.fields), vals)))

    def array(self, buf, off: int, length: int) -> list:
        if length % self.size:
            raise FormatError(f"{length} bytes are not a whole number of {self.name} ({self.size})")
        return [self.unpack(buf, off + i) for i in range(0, length, self.size)]

    def pack(self, **values) -> bytes:
        """Fields not given are zero (b'' for byte strings)."""
        out = []
        for n, code in self.fields:
            v = values.pop(n, None)
            if v is None:
                v = b"" if code.endswith("s") else 0
            out.append(v)
        if values:
            raise KeyError(f"{self.name} has no field {sorted(values)}")
        return self.st.pack(*out)


def _L(name, size, spec):
    """Layout from 'code name, code name, ...' (arrays as one byte string)."""
    fields = []
    for item in spec.split(","):
        code, n = item.split()
        fields.append((n, code))
    return Layout(name, size, fields)


HEADER = _L("lz_header", 160,
            "8s magic, I version, I header_size, Q manifest_size, Q index, Q parent, Q created_ns, "
            "I trigger, I nsections, Q mem_bytes, Q data_bytes, Q stored_bytes, Q pause_ns, "
            "Q changed_bytes, Q durable_ns, I codec, I pad, Q job0, Q job1, "
            "I machine, I page_size, I byte_order, I pad2, 16s reserved")
HEADER_V5 = _L("lz_header (version 5)", 128,
               "8s magic, I version, I header_size, Q manifest_size, Q index, Q parent, Q created_ns, "
               "I trigger, I nsections, Q mem_bytes, Q data_bytes, Q stored_bytes, Q pause_ns, "
               "Q changed_bytes, Q durable_ns, I codec, I pad, Q job0, Q job1")
SECTION = _L("lz_section", 16, "I type, I record_size, Q length")
TRAILER_SIZE = 8
PROC = _L("lz_proc", 11320,
          "i pid, i ppid, i pgid, i sid, I uid, I gid, I umask, I personality, 16s comm, "
          "I cwd, I exe, Q xcr0, Q start_code, Q end_code, Q start_data, Q end_data, "
          "Q start_brk, Q brk, Q start_stack, Q arg_start, Q arg_end, Q env_start, Q env_end, "
          "2048s sigactions, I npending, I pad1, 8704s pending, 48s itimers, 256s rlimits, "
          "Q resume_addr, Q vdso_hash, Q vdso_block_start, Q vdso_block_end, Q vdso_offset, "
          "I euid, I suid, I egid, I sgid, I ngroups, I pad2, Q groups_xxh3, "
          "Q cap_eff, Q cap_prm, Q cap_inh, Q reserved")
SIGINFO_REC = _L("lz_siginfo_rec", 136, "i signo, i tid, 128s info")
EXCLUSION = _L("lz_exclusion", 32, "Q start, Q end, I kind, I pad, Q stored_at")
REGION = _L("lz_region", 104,
            "Q start, Q end, I prot, I kind, I flags, I path, Q file_offset, Q file_size, "
            "Q file_ino, Q file_dev, q file_mtime_ns, Q file_hash, I first_extent, I nextents, 16s reserved")
EXTENT = _L("lz_extent", 24, "Q addr, I length, I frame, I skip, I pad")
FRAME = _L("lz_frame", 40, "I pack, I codec, Q offset, I stored, I raw, Q xxh3, Q sxxh3")
PACK = _L("lz_pack", 24, "I path, I pad, Q size, Q id")
FD = _L("lz_fd", 80,
        "i fd, I kind, i dup_of, I path, I flags, I fdflags, q offset, Q ino, Q dev, Q size, "
        "q mtime_ns, I mode, I launcher, Q xxh3")
THREAD = _L("lz_thread", 216,
            "i tid, I flags, 16s comm, Q fs_base, Q gs_base, Q rseq_addr, I rseq_len, I rseq_sig, "
            "Q robust_list, Q robust_len, Q tid_address, Q altstack_sp, Q altstack_size, "
            "i altstack_flags, i pad0, Q handler_sigmask, 72s ctx, Q ucontext, 24s reserved")
CHAN = _L("lz_chan", 80,
          "Q ino, Q peer, I kind, I path, Q bytes, Q xxh3, I nmsgs, I capacity, I sndbuf, "
          "I shutdown, i peek_off, I sockflags, 16s reserved")
USOCK = _L("lz_usock", 360,
           "80s q, i fd, I flags, I backlog, I addr_len, I peer_len, I mode, I uid, I gid, q rcvtimeo_us, "
           "q sndtimeo_us, 108s addr, 108s peer_addr, I from_path, I from_bytes, Q from_xxh3")
EVENT = _L("lz_event", 64,
           "i fd, I kind, I flags, i clockid, Q count, Q mask, q value_ns, q interval_ns, i target, I pad, Q data")
PTY = _L("lz_pty", 88,
         "I index, I flags, I iflag, I oflag, I cflag, I lflag, B line, 19s cc, I ispeed, I ospeed, "
         "H rows, H cols, H xpixel, H ypixel, I to_slave, I to_master, i sid, i fg_pgrp, I pad, Q data")
INET = _L("lz_inet", 136,
          "i fd, I family, I type, I state, 16s local, 16s peer, H lport, H pport, I scope, i peer_fd, I opts, "
          "i keepidle, i keepintvl, i keepcnt, i linger, I rcvbuf, I sndbuf, q rcvtimeo_us, q sndtimeo_us, "
          "I backlog, I path, Q bytes, Q xxh3, Q peer_ino")
TIMER = _L("lz_timer", 56,
           "I kind, i id, i clockid, i notify, i signo, i tid, I flags, i overrun, Q value, q value_ns, q interval_ns")
IPC = _L("lz_ipc", 88,
         "I kind, I flags, i id, i key, I mode, I uid, I gid, I cuid, I name, I count, Q size, Q msgsize, "
         "Q data, Q length, 16s reserved")
TREE_HEADER = _L("lz_tree_header", 48, "8s magic, I version, I nprocs, I nshared, I trigger, Q index, Q job0, Q job1")
TREE_PROC = _L("lz_tree_proc", 72, "i pid, i ppid, i pgid, i sid, I state, i status, 16s comm, 32s dir")
TREE_SHARED = _L("lz_tree_shared", 16, "i group, i pid, i fd, i pad")

FJ_REC = _L("fj_rec", 24, "I magic, H type, H flags, I len, I check, Q stamp")
FJ_INODE_L = _L("fj_inode", 56, "Q dev, Q ino, Q size, I mode, I uid, I gid, I pad, q atime_ns, q mtime_ns")
FJ_DATA_L = _L("fj_data", 48, "Q dev, Q ino, Q offset, Q data_off, Q length, Q xxh3")
FJ_NAME_L = _L("fj_name", 64,
               "I was, I mode, I uid, I gid, Q dev, Q ino, Q rdev, q atime_ns, q mtime_ns, q btime_ns")
FJ_MOVED_L = _L("fj_moved", 16, "Q dev, Q ino")
FJ_DIRTIME_L = _L("fj_dirtime", 16, "q atime_ns, q mtime_ns")
FJ_BEGIN_L = _L("fj_begin", 32, "Q job0, Q job1, Q index, i pid, I version")
FJ_END_L = _L("fj_end", 8, "Q records")

# the fixed part of each journal record's payload
FJ_FIXED = {FJ_INODE: FJ_INODE_L, FJ_DATA: FJ_DATA_L, FJ_NAME: FJ_NAME_L, FJ_MOVED: FJ_MOVED_L,
            FJ_DIRTIME: FJ_DIRTIME_L, FJ_BEGIN: FJ_BEGIN_L, FJ_END: FJ_END_L}
# records whose fixed part is followed by NUL-terminated strings
FJ_STRINGS = {FJ_INODE, FJ_NAME, FJ_MOVED, FJ_DIRTIME}

# every layout, for the offsetof() check of test_format_unit.py ("job0"/"job1"
# stand for C's job[0]/job[1])
LAYOUTS = [HEADER, SECTION, PROC, SIGINFO_REC, EXCLUSION, REGION, EXTENT, FRAME, PACK, FD, THREAD, CHAN, EVENT, PTY, USOCK, INET, TIMER, IPC,
           TREE_HEADER, TREE_PROC, TREE_SHARED,
           FJ_REC, FJ_INODE_L, FJ_DATA_L, FJ_NAME_L, FJ_MOVED_L, FJ_DIRTIME_L, FJ_BEGIN_L, FJ_END_L]

# the arrays of records a section holds
SECTION_LAYOUT = {SEC_REGIONS: REGION, SEC_EXTENTS: EXTENT, SEC_FDS: FD, SEC_PACKS: PACK,
                  SEC_FRAMES: FRAME, SEC_THREADS: THREAD, SEC_CHANS: CHAN, SEC_EVENTS: EVENT,
                  SEC_USOCKS: USOCK, SEC_INET: INET, SEC_TIMERS: TIMER, SEC_EXCLUDE: EXCLUSION,
                  SEC_SIGQUEUE: SIGINFO_REC}
# lz_section.record_size of each known section as this version writes it (0: not an array)
RECORD_SIZE = {**{t: lay.size for t, lay in SECTION_LAYOUT.items()},
               SEC_PROC: PROC.size, SEC_GROUPS: 4, SEC_PTYS: PTY.size, SEC_IPC: IPC.size,
               SEC_STRINGS: 0, SEC_AUXV: 0}


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def cstr(b: bytes) -> str:
    """A NUL-padded char array as text."""
    return b.split(b"\0", 1)[0].decode(errors="replace")


# --------------------------------------------------------------------------
# Manifests
# --------------------------------------------------------------------------
@dataclass
class Section:
    type: int     # without SEC_MUST
    head: int     # offset of its lz_section
    off: int      # offset of its payload
    length: int   # payload bytes (without the padding)
    raw_type: int = 0     # as stored: type | SEC_MUST when flagged
    record_size: int = 0  # as stored (version 5: 0 always)

    @property
    def stride(self) -> int:
        """Bytes per record of an array section (version 5: this build's size)."""
        return self.record_size or RECORD_SIZE.get(self.type, 0)

    @property
    def name(self) -> str:
        return SECTION_NAMES.get(self.type, f"type {self.type}")


class Manifest:
    """A manifest, decoded from its bytes (kept in `data`, a bytearray that
    set() edits in place).  Parsing checks only the structure (magic, sizes,
    section table), never the trailer: `sealed()` says whether it holds."""

    def __init__(self, data: bytes):
        self.data = bytearray(data)
        d = self.data
        if len(d) < HEADER.size + TRAILER_SIZE or d[:8] != MAGIC:
            raise FormatError(f"not a manifest ({len(d)} bytes, magic {bytes(d[:8])!r})")
        version = struct.unpack_from("<I", d, 8)[0]
        if not VERSION_MIN <= version <= VERSION:
            raise FormatError(f"format version {version}, this decoder reads {VERSION_MIN} to {VERSION}")
        self.header = (HEADER_V5 if version == 5 else HEADER).unpack(d, 0)
        if self.header.header_size != (HEADER_V5_SIZE if version == 5 else HEADER.size):
            raise FormatError(f"header_size {self.header.header_size}")
        self.sections: list[Section] = []
        off, end = self.header.header_size, len(d) - TRAILER_SIZE
        for _ in range(self.header.nsections):
            if off + SECTION.size > end:
                raise FormatError("section table runs past the end")
            s = SECTION.unpack(d, off)
            if off + SECTION.size + s.length > end:
                raise FormatError(f"section of type {s.type} runs past the end")
            self.sections.append(Section(s.type & ~SEC_MUST, off, off + SECTION.size, s.length, s.type, s.record_size))
            off += SECTION.size + _pad8(s.length)
        self.end = off  # where the trailer should start

    @classmethod
    def load(cls, path) -> "Manifest":
        return cls(Path(path).read_bytes())

    def save(self, path, seal: bool = True) -> None:
        if seal:
            self.seal()
        Path(path).write_bytes(bytes(self.data))

    # -- the trailer ----------------------------------------------------
    @property
    def trailer(self) -> int:
        return struct.unpack_from("<Q", self.data, len(self.data) - TRAILER_SIZE)[0]

    def sealed(self) -> bool:
        return self.trailer == xxh3(self.data[:-TRAILER_SIZE])

    def seal(self) -> None:
        """Rewrite the trailer for the bytes as they are now."""
        struct.pack_into("<Q", self.data, len(self.data) - TRAILER_SIZE, xxh3(self.data[:-TRAILER_SIZE]))

    # -- sections -------------------------------------------------------
    def section(self, typ: int) -> Section | None:
        """The first section of that type (the reader's choice is the last
        one, but a manifest has each once)."""
        for s in self.sections:
            if s.type == typ:
                return s
        return None

    def payload(self, typ: int) -> bytes:
        s = self.section(typ)
        return b"" if s is None else bytes(self.data[s.off:s.off + s.length])

    def records(self, typ: int) -> list:
        s = self.section(typ)
        if s is None:
            return []
        lay = SECTION_LAYOUT[typ]
        if s.stride == lay.size:
            return lay.array(self.data, s.off, s.length)
        # records of a newer, longer layout: the prefix this decoder knows
        return [lay.unpack(self.data, s.off + i) for i in range(0, s.length - s.stride + 1, s.stride)]

    @property
    def proc(self) -> Rec:
        s = self.section(SEC_PROC)
        if s is None or s.length != s.stride or s.stride < PROC.size:
            raise FormatError("no process record")
        return PROC.unpack(self.data, s.off)

    regions = property(lambda self: self.records(SEC_REGIONS))
    extents = property(lambda self: self.records(SEC_EXTENTS))
    fds = property(lambda self: self.records(SEC_FDS))
    packs = property(lambda self: self.records(SEC_PACKS))
    frames = property(lambda self: self.records(SEC_FRAMES))
    threads = property(lambda self: self.records(SEC_THREADS))
    chans = property(lambda self: self.records(SEC_CHANS))
    events = property(lambda self: self.records(SEC_EVENTS))
    usocks = property(lambda self: self.records(SEC_USOCKS))

    def ptys(self) -> list[dict]:
        """The PTYS section: each record's fields, and `data` its queued bytes
        (to_slave's, then to_master's)."""
        p = self.payload(SEC_PTYS)
        if not p:
            return []
        n = struct.unpack_from("<Q", p)[0]
        stride = self.section(SEC_PTYS).stride
        base = 8 + n * stride
        out = []
        for i in range(n):
            r = PTY.unpack(p, 8 + i * stride).fields()
            r["data"] = p[base + r["data"]:base + r["data"] + r["to_slave"] + r["to_master"]]
            out.append(r)
        return out
    inets = property(lambda self: self.records(SEC_INET))
    timers = property(lambda self: self.records(SEC_TIMERS))

    @property
    def ipc(self) -> list:
        """The IPC section's records (after its u64 count); each record's
        bytes are at ipc_data_off + record.data."""
        s = self.section(SEC_IPC)
        if s is None:
            return []
        n = struct.unpack_from("<Q", self.data, s.off)[0]
        return [IPC.unpack(self.data, s.off + 8 + i * s.stride) for i in range(n)]

    @property
    def groups(self) -> list[int]:
        p = self.payload(SEC_GROUPS)
        return list(struct.unpack(f"<{len(p) // 4}I", p[:len(p) // 4 * 4]))

    def string(self, off: int) -> str:
        """The string at offset off of the string table ('' for 0)."""
        if off == 0:
            return ""
        st = self.payload(SEC_STRINGS)
        end = st.index(b"\0", off)
        return st[off:end].decode(errors="surrogateescape")

    def string_at(self, off: int) -> int:
        """Absolute offset in `data` of string-table offset off."""
        return self.section(SEC_STRINGS).off + off

    # -- views the tests use --------------------------------------------
    def pack_ids(self) -> list[int]:
        """N of packs/pack.N for every entry of the PACKS section."""
        return [p.id for p in self.packs]

    def frame_places(self) -> list[tuple[int, int, int]]:
        """(pack id, offset, stored bytes) of every frame listed."""
        ids = self.pack_ids()
        return [(ids[f.pack], f.offset, f.stored) for f in self.frames]

    def referenced_frames(self) -> list[tuple[int, int, int]]:
        """(pack id, offset, stored) of every frame an extent uses, sorted."""
        ids, frames = self.pack_ids(), self.frames
        used = set()
        for x in self.extents:
            if x.frame != FRAME_ZERO:
                f = frames[x.frame]
                used.add((ids[f.pack], f.offset, f.stored))
        return sorted(used)

    def referenced_packs(self) -> set[int]:
        """Ids N of the packs/pack.N that the extents use."""
        return {p for p, _, _ in self.referenced_frames()}

    # -- editing --------------------------------------------------------
    def set(self, rec: Rec, name: str, value) -> None:
        """Write field `name` of a record decoded from this manifest (the
        trailer is not updated: seal() does that)."""
        lay = rec._layout
        struct.pack_into("<" + lay.code(name), self.data, rec._off + lay.offset(name), value)
        rec.__dict__[name] = value

    # -- encoding -------------------------------------------------------
    @staticmethod
    def build(sections, **header) -> bytes:
        """A sealed manifest from [(type, payload bytes)] or [(type, payload,
        record size)] (type as stored, SEC_MUST included; record size by
        default this version's, 0 in version 5) and header fields (version,
        index, job0, job1, ...; sizes and counts computed)."""
        version = header.get("version", VERSION)
        body = bytearray()
        for sec in sections:
            typ, payload = sec[0], sec[1]
            rs = sec[2] if len(sec) > 2 else (0 if version == 5 else RECORD_SIZE.get(typ & ~SEC_MUST, 0))
            body += SECTION.pack(type=typ, record_size=rs, length=len(payload))
            body += payload + b"\0" * (_pad8(len(payload)) - len(payload))
        lay = HEADER_V5 if version == 5 else HEADER
        h = dict(magic=MAGIC, version=VERSION, header_size=lay.size)
        if lay is HEADER:
            h.update(machine=MACHINE_X86_64, page_size=PAGE_SIZE, byte_order=BYTE_ORDER)
        h.update(header)
        h["nsections"] = header.get("nsections", len(sections))
        h["manifest_size"] = header.get("manifest_size", lay.size + len(body) + TRAILER_SIZE)
        out = lay.pack(**h) + bytes(body)
        return out + struct.pack("<Q", xxh3(out))

    def rebuild(self, sections=None, **header) -> bytes:
        """This manifest's header with other sections (default: its own),
        sealed: [(type, payload)]."""
        if sections is None:
            sections = [(s.raw_type, bytes(self.data[s.off:s.off + s.length]), s.record_size) for s in self.sections]
        h = self.header.fields()
        for k in ("manifest_size", "nsections"):
            h.pop(k)
        h.update(header)
        return Manifest.build(sections, **h)


# --------------------------------------------------------------------------
# Process trees
# --------------------------------------------------------------------------
class Tree:
    """ckpt.N/tree: header, procs, shared descriptions, trailer."""

    def __init__(self, data: bytes):
        self.data = bytearray(data)
        d = self.data
        if len(d) < TREE_HEADER.size + TRAILER_SIZE or d[:8] != TREE_MAGIC:
            raise FormatError(f"not a tree file ({len(d)} bytes)")
        self.header = TREE_HEADER.unpack(d, 0)
        h = self.header
        want = TREE_HEADER.size + h.nprocs * TREE_PROC.size + h.nshared * TREE_SHARED.size + TRAILER_SIZE
        if len(d) != want:
            raise FormatError(f"tree of {len(d)} bytes, its counts say {want}")
        self.procs = TREE_PROC.array(d, TREE_HEADER.size, h.nprocs * TREE_PROC.size)
        self.shared = TREE_SHARED.array(d, TREE_HEADER.size + h.nprocs * TREE_PROC.size,
                                        h.nshared * TREE_SHARED.size)

    @classmethod
    def load(cls, path) -> "Tree":
        return cls(Path(path).read_bytes())

    def sealed(self) -> bool:
        return struct.unpack_from("<Q", self.data, len(self.data) - 8)[0] == xxh3(self.data[:-8])

    def seal(self) -> None:
        struct.pack_into("<Q", self.data, len(self.data) - 8, xxh3(self.data[:-8]))

    def set(self, rec: Rec, name: str, value) -> None:
        lay = rec._layout
        struct.pack_into("<" + lay.code(name), self.data, rec._off + lay.offset(name), value)
        rec.__dict__[name] = value

    @staticmethod
    def build(procs, shared=(), **header) -> bytes:
        """A sealed tree file from TREE_PROC and TREE_SHARED field dicts."""
        h = dict(magic=TREE_MAGIC, version=VERSION, nprocs=len(procs), nshared=len(shared))
        h.update(header)
        out = TREE_HEADER.pack(**h) + b"".join(TREE_PROC.pack(**p) for p in procs) + \
            b"".join(TREE_SHARED.pack(**s) for s in shared)
        return out + struct.pack("<Q", xxh3(out))


# --------------------------------------------------------------------------
# File journals (files.log)
# --------------------------------------------------------------------------
@dataclass
class JRec:
    """One journal record: its head fields, its payload, its fixed part
    decoded (`fixed`), and the strings after it (path, symlink target)."""
    off: int
    magic: int
    type: int
    flags: int
    len: int
    check: int
    stamp: int
    payload: bytes
    fixed: Rec | None = None
    strings: list = field(default_factory=list)
    check_ok: bool = True

    @property
    def name(self) -> str:
        return FJ_TYPE_NAMES.get(self.type, f"type {self.type}")

    @property
    def path(self) -> str | None:
        return self.strings[0] if self.strings else None

    @property
    def size(self) -> int:
        return FJ_REC.size + self.len


def record_check(type_: int, flags: int, payload: bytes, stamp: int, magic: int = FJ_MAGIC) -> int:
    head = FJ_REC.pack(magic=magic, type=type_, flags=flags, len=len(payload), check=0, stamp=stamp)
    return xxh3(head + payload) & 0xFFFFFFFF


def encode_record(type_: int, payload: bytes, stamp: int = 0, flags: int = 0, magic: int = FJ_MAGIC,
                  check: int | None = None) -> bytes:
    """One record, its check computed (or forced)."""
    if check is None:
        check = record_check(type_, flags, payload, stamp, magic)
    return FJ_REC.pack(magic=magic, type=type_, flags=flags, len=len(payload), check=check, stamp=stamp) + payload


def begin_payload(job: tuple[int, int], index: int, pid: int) -> bytes:
    return FJ_BEGIN_L.pack(job0=job[0], job1=job[1], index=index, pid=pid, version=FJ_VERSION)


def end_payload(records: int) -> bytes:
    return FJ_END_L.pack(records=records)


def with_strings(fixed: bytes, *strings: str) -> bytes:
    return fixed + b"".join(s.encode() + b"\0" for s in strings)


@dataclass
class Log:
    """A decoded files.log: its records in order and how it ends.

    end: "sealed" (an END record, then nothing but zeros), "open" (zeros, or
    a torn record of magic 0 then zeros, after the last record), or
    "damaged" (`problem` says where)."""
    records: list
    end: str
    tail: int             # offset after the last record
    problem: str = ""

    def of_type(self, t: int) -> list:
        return [r for r in self.records if r.type == t]

    @property
    def begin(self) -> JRec:
        return self.records[0]


def _decode_payload(r: JRec) -> None:
    lay = FJ_FIXED.get(r.type)
    if lay is None or r.len < lay.size:
        return
    r.fixed = lay.unpack(r.payload, 0)
    if r.type in FJ_STRINGS:
        rest = r.payload[lay.size:]
        r.strings = [s.decode(errors="surrogateescape") for s in rest.split(b"\0")[:-1]]


def parse_log(data: bytes, check: bool = True) -> Log:
    """Every record of a files.log, the way journal_read.c walks it (but
    without stopping at a bad checksum: such a record gets check_ok False
    and the log ends "damaged")."""
    data = bytes(data)
    recs, off, problem = [], 0, ""
    end = None
    while True:
        if off >= len(data):
            end = "damaged"
            problem = f"ends after {len(recs)} records without END or zeros"
            break
        if len(data) - off < FJ_REC.size:
            end = "open" if not any(data[off:]) and recs else "damaged"
            problem = "" if end == "open" else f"a partial record head at {off}"
            break
        h = FJ_REC.unpack(data, off)
        if h.magic == 0:
            end = "open"
            break
        if h.magic != FJ_MAGIC or not FJ_INODE <= h.type <= FJ_END or off + FJ_REC.size + h.len > len(data):
            end, problem = "damaged", f"no record at {off}"
            break
        payload = data[off + FJ_REC.size:off + FJ_REC.size + h.len]
        r = JRec(off, h.magic, h.type, h.flags, h.len, h.check, h.stamp, payload)
        if check:
            r.check_ok = record_check(h.type, h.flags, payload, h.stamp, h.magic) == h.check
        _decode_payload(r)
        recs.append(r)
        off += r.size
        if not r.check_ok:
            end, problem = "damaged", f"record {len(recs)} at {r.off} fails its checksum"
            break
        if h.type == FJ_END:
            end = "sealed" if not any(data[off:]) else "damaged"
            if end == "damaged":
                problem = "bytes after END"
            break
    return Log(recs, end, off, problem)


def load_log(path) -> Log:
    return parse_log(Path(path).read_bytes())


def encode_log(records, seal: bool = True, zeros: int = 0) -> bytes:
    """A files.log from [(type, payload[, stamp[, flags]])]: BEGIN must be
    first; seal adds the END record counting them; zeros appends that many
    zero bytes (the unused window of an open log)."""
    out = bytearray()
    for r in records:
        t, payload = r[0], r[1]
        stamp = r[2] if len(r) > 2 else 0
        flags = r[3] if len(r) > 3 else 0
        out += encode_record(t, payload, stamp, flags)
    if seal:
        out += encode_record(FJ_END, end_payload(len(records)))
    return bytes(out) + b"\0" * zeros


def reencode(rec: JRec) -> bytes:
    """A decoded record as bytes again, its check recomputed."""
    return encode_record(rec.type, rec.payload, rec.stamp, rec.flags)


# --------------------------------------------------------------------------
# The job file
# --------------------------------------------------------------------------
def read_job(path) -> dict:
    """The job file's settings (key -> value; `exclude` may repeat: a list)."""
    out: dict = {}
    for line in Path(path).read_text().splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            if k == "exclude":
                out.setdefault(k, []).append(v)
            else:
                out[k] = v
    return out


def job_id(path) -> tuple[int, int]:
    """The job's identity (the `id` line: 32 hex digits) as (job[0], job[1])."""
    v = read_job(path)["id"]
    return int(v[:16], 16), int(v[16:32], 16)


def reseal_job(path) -> None:
    """Rewrite the job file's `check=` line for the lines before it."""
    p = Path(path)
    data = p.read_bytes()
    i = data.rfind(b"\ncheck=")
    keep = data[:i + 1] if i >= 0 else data
    p.write_bytes(keep + b"check=%016x\n" % xxh3(keep))
