"""The page-data codec (common/codec.c) through tests/programs/codec_probe.c.

The probe is compiled (dynamically, and as a -static-pie like the restorer)
into pytest's temporary directory from the sources; it needs no `make`.
Every buffer the probe gives the codec ends right before a PROT_NONE page, so
an overrun crashes it.  `LAZARUS_CODEC_BENCH_MIB` (default 32) sets the size
of the data kinds of test_bench; run the probe's `bench` mode by hand for the
full 256 MiB figures:  <probe> bench 256
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import PROGRAMS_SRC, REPO, SEED

CODEC_C = REPO / "common" / "codec.c"
PROBE_C = PROGRAMS_SRC / "codec_probe.c"
WARN = ["-std=gnu17", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-O2"]
INC = [f"-I{REPO / 'include'}", f"-I{REPO / 'common'}"]


def _cc(args, what):
    cmd = ["gcc", *args]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.fail(f"{what} failed:\n$ {' '.join(map(str, cmd))}\n{cp.stdout}{cp.stderr}")


@pytest.fixture(scope="module")
def builddir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("codec")


@pytest.fixture(scope="module")
def probe(builddir) -> Path:
    out = builddir / "codec_probe"
    # -z now as in the runtime: no lazy binding inside the measured calls
    _cc([*WARN, *INC, "-Wl,-z,now", "-o", str(out), str(PROBE_C), str(CODEC_C), "-lzstd", "-llz4"],
        "compiling the codec probe")
    return out


@pytest.fixture(scope="module")
def static_probe(builddir) -> Path:
    out = builddir / "codec_probe_static"
    _cc([*WARN, *INC, "-DPROBE_STATIC", "-fPIE", "-static-pie", "-o", str(out), str(PROBE_C), str(CODEC_C),
         "-l:libzstd.a", "-l:liblz4.a"], "linking the codec probe with -static-pie")
    return out


def run(probe, *args, timeout=60, ok=(0,)):
    env = dict(os.environ, LAZARUS_TEST_SEED=str(SEED))
    cp = subprocess.run([str(probe), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
    print(cp.stdout, cp.stderr, sep="")
    if cp.returncode < 0:
        pytest.fail(f"codec_probe {' '.join(map(str, args))} killed by signal {-cp.returncode} "
                    f"(crash or overrun into a guard page)\n{cp.stdout}{cp.stderr}")
    if cp.returncode not in ok:
        pytest.fail(f"codec_probe {' '.join(map(str, args))} exited {cp.returncode}\n{cp.stdout}{cp.stderr}")
    return cp


# --------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------
@pytest.mark.parametrize("pic", ["-fPIC", "-fPIE"])
def test_compiles_with_project_flags(builddir, pic):
    _cc([*WARN, pic, *INC, "-c", str(CODEC_C), "-o", str(builddir / f"codec{pic}.o")],
        f"compiling common/codec.c with {pic}")


def test_object_imports_nothing_unsafe(builddir):
    """codec.o itself calls only string functions and the two libraries: no
    malloc, stdio, locks (what the libraries do is test_no_malloc's job)."""
    obj = builddir / "codec-imports.o"
    _cc([*WARN, "-fPIC", *INC, "-c", str(CODEC_C), "-o", str(obj)], "compiling common/codec.c")
    out = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, check=True).stdout
    syms = {line.split()[-1] for line in out.splitlines() if line.strip()}
    allowed = {"memcpy", "memset", "memmove", "strcmp", "strncmp", "__stack_chk_fail", "_GLOBAL_OFFSET_TABLE_"}
    bad = sorted(s for s in syms if s not in allowed and not s.startswith(("ZSTD_", "LZ4_")))
    assert not bad, f"codec.o imports {bad}"


def test_static_pie(static_probe):
    """The restorer's link: -static-pie with libzstd.a and liblz4.a; the result
    has no interpreter and no shared library, and works."""
    hdr = subprocess.run(["readelf", "-lhd", str(static_probe)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"Type:\s+DYN", hdr), "not position-independent"
    assert "INTERP" not in hdr and "(NEEDED)" not in hdr, "not static"
    run(static_probe, "roundtrip", "sci", "zstd:3")
    run(static_probe, "roundtrip", "text", "lz4")
    run(static_probe, "corrupt", "zstd:3", "trunc")
    run(static_probe, "corrupt", "lz4", "garbage")


# --------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------
SPECS = ["none", "lz4", "zstd:-7", "zstd:-1", "zstd:1", "zstd:3", "zstd:9", "zstd:19"]
KINDS = ["random", "zero", "sci", "text"]
SIZES = [4096, 12296, 65536, 1 << 20, 8 << 20]  # 12296: not a multiple of the page size


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("kind", KINDS)
def test_roundtrip(probe, kind, spec):
    """random: incompressible (lz_compress returns 0, stored raw); zero:
    lz_is_zero, compresses at least 50x; sci (half zero pages, half random
    doubles): compresses below 3/4; text: below 3/5.  Each 4 KiB .. 8 MiB."""
    sizes = SIZES
    if spec == "zstd:19" and kind in ("random", "text"):
        sizes = [s for s in SIZES if s <= 1 << 20]  # seconds per 8 MiB at level 19
    cp = run(probe, "roundtrip", kind, spec, *sizes)
    assert cp.stdout.count("roundtrip kind=") == len(sizes)


def test_zstd_context_sizing(probe):
    """A zstd context sized for max_input serves every input size up to it, at
    every level (zstd switches parameter sets at 16, 128 and 256 KiB)."""
    run(probe, "tiers", timeout=120)


def test_is_zero(probe):
    run(probe, "iszero")


def test_sizes_and_names(probe):
    cp = run(probe, "sizes")
    dctx = int(re.search(r"^dctx (\d+)", cp.stdout, re.M).group(1))
    assert 0 < dctx < 1 << 20


# --------------------------------------------------------------------------
# lz_codec_parse
# --------------------------------------------------------------------------
@pytest.mark.parametrize("spec,codec,level", [
    ("none", "none", 0), ("lz4", "lz4", 0), ("zstd", "zstd", 3), ("zstd:1", "zstd", 1),
    ("zstd:3", "zstd", 3), ("zstd:19", "zstd", 19), ("zstd:-1", "zstd", -1), ("zstd:-7", "zstd", -7),
    ("zstd:+5", "zstd", 5), ("zstd:07", "zstd", 7),
])
def test_parse_accepts(probe, spec, codec, level):
    cp = run(probe, "parse", spec)
    assert cp.stdout.strip() == f"ok {codec} {level}"


UNKNOWN = 'unknown compression "{}" (choose none, lz4, zstd or zstd:LEVEL)'
BADLEVEL = 'bad zstd level "{}" in "{}" (choose 1..19 or -7..-1)'


@pytest.mark.parametrize("spec,message", [
    ("gzip", UNKNOWN.format("gzip")),
    ("", UNKNOWN.format("")),
    ("ZSTD", UNKNOWN.format("ZSTD")),
    ("lz4:1", UNKNOWN.format("lz4:1")),
    ("zstd3", UNKNOWN.format("zstd3")),
    ("zero", UNKNOWN.format("zero")),
    (" zstd", UNKNOWN.format(" zstd")),
    ("zstd:0", BADLEVEL.format("0", "zstd:0")),
    ("zstd:20", BADLEVEL.format("20", "zstd:20")),
    ("zstd:-8", BADLEVEL.format("-8", "zstd:-8")),
    ("zstd:", BADLEVEL.format("", "zstd:")),
    ("zstd:3x", BADLEVEL.format("3x", "zstd:3x")),
    ("zstd:-", BADLEVEL.format("-", "zstd:-")),
    ("zstd:99999999999999999999", BADLEVEL.format("99999999999999999999", "zstd:99999999999999999999")),
])
def test_parse_rejects(probe, spec, message):
    cp = run(probe, "parse", spec, ok=(3,))
    assert cp.stdout == f"err {message}\n"
    assert "\n" not in message


# --------------------------------------------------------------------------
# Corrupt input: -1, never a crash or a write past dst+dlen
# --------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["trunc", "dlen", "flip", "garbage"])
@pytest.mark.parametrize("spec", ["none", "zero", "lz4", "zstd:1", "zstd:19"])
def test_corrupt(probe, spec, what):
    """trunc: every truncation near both ends (and a sample between) must be
    rejected; dlen: a wrong decompressed length must be rejected (not for ZERO:
    any length of zeros is valid); flip, garbage: damaged or random input must
    not crash nor overrun; it may decode to wrong bytes of the right length
    (no checksum in the frames: the extent's xxh3 catches that)."""
    cp = run(probe, "corrupt", spec, what)
    m = re.search(r"tried=(\d+) rejected=(\d+) accepted=(\d+)", cp.stdout)
    assert m, cp.stdout
    if what in ("trunc", "dlen"):
        assert m.group(3) == "0"
        if spec != "zero" or what == "trunc":
            assert int(m.group(1)) > 0


# --------------------------------------------------------------------------
# Async-signal-safety properties
# --------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["none", "lz4", "zstd:-7", "zstd:1", "zstd:3", "zstd:19"])
def test_no_malloc(probe, spec):
    """malloc/calloc/realloc/memalign interposed by the probe (forwarding to
    __libc_malloc...): zero calls in lz_cctx_init, lz_compress and
    lz_decompress (including failing decompressions), while the same counter
    does see ZSTD_createCCtx and LZ4_createStream allocate."""
    # level 19 (btultra2) takes seconds per 8 MiB: 1 MiB is enough there
    cp = run(probe, "nomalloc", spec, *([1 << 20] if spec == "zstd:19" else []))
    assert "init=0 compress=0 decompress=0" in cp.stdout


@pytest.mark.parametrize("spec", ["lz4", "zstd:1", "zstd:3", "zstd:19"])
def test_stack_use(probe, spec):
    """Small enough for a signal handler on an ordinary sigaltstack."""
    cp = run(probe, "stack", spec)
    m = re.search(r"compress=(\d+) decompress=(\d+)", cp.stdout)
    assert int(m.group(1)) < 16384 and int(m.group(2)) < 16384


# --------------------------------------------------------------------------
# Benchmark: figures only, no timing assertions
# --------------------------------------------------------------------------
def test_bench(probe):
    mib = int(os.environ.get("LAZARUS_CODEC_BENCH_MIB", "32"))
    cp = run(probe, "bench", mib, timeout=600)
    assert len(re.findall(r"MB/s", cp.stdout)) >= 2 * 12
