"""Dirty-page tracking (runtime/rt_dirty.c): userfaultfd asynchronous
write-protect + PAGEMAP_SCAN.  tests/programs/dirty_probe.c is compiled
together with the module and run once per scenario, as root and as the user
nobody; each probe mode checks exact page sets itself and prints
`check NAME: reported=N expected=N mismatches=N` and `fact KEY=VALUE` lines,
which are checked again here."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROBE_SRC = REPO / "tests" / "programs" / "dirty_probe.c"
MODULE_SRC = REPO / "runtime" / "rt_dirty.c"
NOBODY = 65534
IS_ROOT = os.geteuid() == 0
CFLAGS = ["-std=gnu17", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-O2"]


def _unprivileged_userfaultfd() -> str:
    try:
        return Path("/proc/sys/vm/unprivileged_userfaultfd").read_text().strip()
    except OSError:
        return "?"


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dirty") / "dirty_probe"
    cmd = ["gcc", *CFLAGS, f"-I{REPO / 'common'}", f"-I{REPO / 'include'}", f"-I{REPO / 'runtime'}",
           "-o", str(out), str(PROBE_SRC), str(MODULE_SRC)]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.fail(f"compiling dirty_probe failed:\n$ {' '.join(cmd)}\n{cp.stdout}{cp.stderr}")
    return out


@pytest.fixture(params=["root", "user"])
def identity(request, probe):
    """(argv prefix, probe path, work directory) for the identity.  The user
    variant runs a copy of the probe from a directory nobody can reach (pytest's
    tmp_path is private to root)."""
    if request.param == "root":
        if not IS_ROOT:
            pytest.skip("the root variant needs the test session to run as root")
        work = Path(tempfile.mkdtemp(prefix="lazarus-dirty-", dir="/tmp"))
        yield [], probe, work
        shutil.rmtree(work, ignore_errors=True)
        return
    prefix = []
    if IS_ROOT:
        if not shutil.which("setpriv"):
            pytest.skip("setpriv is missing: cannot run as nobody")
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    work = Path(tempfile.mkdtemp(prefix="lazarus-dirty-", dir="/tmp"))
    os.chmod(work, 0o755)
    exe = work / "dirty_probe"
    shutil.copy(probe, exe)
    os.chmod(exe, 0o755)
    if IS_ROOT:
        os.chown(work, NOBODY, NOBODY)
    yield prefix, exe, work
    shutil.rmtree(work, ignore_errors=True)


def run_probe(identity, mode: str, *extra, timeout: float = 60):
    prefix, exe, work = identity
    argv = [*prefix, str(exe), mode, *(extra or [str(work)])]
    cp = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=timeout,
                        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    text = f"$ {' '.join(argv)}\n-> exit {cp.returncode}\n{cp.stdout}\n--- stderr\n{cp.stderr}"
    print(text)
    if cp.returncode == 2 and "INIT-FAILED" in cp.stdout:
        pytest.fail(f"rt_dirty_init failed:\n{text}")
    assert cp.returncode == 0, text
    assert f"PASS {mode}" in cp.stdout.splitlines(), text
    assert "FAIL" not in cp.stdout, text
    checks = {}
    for m in re.finditer(r"^check (\S+): reported=(\d+) expected=(\d+) mismatches=(\d+)$", cp.stdout, re.M):
        name, rep, exp, bad = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        assert bad == 0 and rep == exp, f"{name}: {m.group(0)}\n{text}"
        checks[name] = exp
    facts = dict(re.findall(r"(\w+)=(\S+)", "\n".join(
        l[5:] for l in cp.stdout.splitlines() if l.startswith("fact "))))
    return checks, facts, text


def test_module_is_freestanding(tmp_path):
    """rt_dirty.c compiles with the runtime's flags and calls nothing outside
    itself (no libc: it runs in the checkpoint signal handler)."""
    obj = tmp_path / "rt_dirty.o"
    cmd = ["gcc", *CFLAGS, "-fPIC", "-Iinclude", "-Icommon", "-Istore", "-Ifiles", "-c",
           "runtime/rt_dirty.c", "-o", str(obj)]
    cp = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    nm = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True)
    assert nm.returncode == 0, nm.stderr
    assert nm.stdout.split() == [], f"undefined symbols: {nm.stdout}"


def test_init(identity):
    checks, facts, text = run_probe(identity, "init")
    assert facts["user_mode_only_userfaultfd"] == "ok", text
    assert facts["fds"] == "980,981", text
    user = bool(identity[0]) or not IS_ROOT
    if not user:
        assert facts["plain_userfaultfd"] == "ok", text
    elif _unprivileged_userfaultfd() == "0":
        # an ordinary user needs UFFD_USER_MODE_ONLY
        assert facts["plain_userfaultfd"] == "EPERM", text
    assert facts["init_with_nofile_256"] == "-1", text
    assert "init-after-double-track" in checks, text


def test_no_writes(identity):
    checks, _, text = run_probe(identity, "none")
    assert checks == {"none-64MiB": 0, "none-64MiB-again": 0}, text


def test_random_1_percent(identity):
    checks, _, text = run_probe(identity, "random")
    k = 64 * 256 // 100
    for name in ("random-1%-cap5", "random-1%-cap4096", "random-1%-cap40", "random-untouched-1%"):
        assert checks.get(name) == k, text
    for name in ("random-second-scan", "random-second-scan-2", "random-untouched-second-scan"):
        assert checks.get(name) == 0, text


def test_same_page_twice(identity):
    checks, _, text = run_probe(identity, "twice")
    assert checks == {"twice-rescan": 0, "twice-again": 1}, text


def test_kernel_write_read_from_pipe(identity):
    checks, _, text = run_probe(identity, "pipe")
    assert checks == {"pipe-read": 5, "syscall-writes": 2}, text


def test_heap(identity):
    checks, facts, text = run_probe(identity, "heap")
    assert facts["heap_from_brk"] == "1", text
    # 1 % (+1) of the page-aligned interior of each 8 MiB block
    assert checks.get("heap-malloc-mmapped") in (21, 20) and checks.get("heap-brk") in (21, 20), text
    assert checks.get("heap-malloc-mmapped-rescan") == 0 and checks.get("heap-brk-rescan") == 0, text


def test_stack(identity):
    checks, _, text = run_probe(identity, "stack")
    assert checks.get("stack") == 7 and checks.get("stack-rescan") == 0, text


def test_private_file_mapping(identity):
    checks, _, text = run_probe(identity, "privfile")
    assert checks == {"privfile-cow": 5, "privfile-rescan": 0}, text


def test_shared_file_mapping(identity):
    checks, facts, text = run_probe(identity, "sharedfile")
    assert checks["sharedfile"] == 4 and checks["sharedfile-after-msync"] == 0, text
    assert checks["sharedfile-write-after-msync"] == 1, text
    # write(2) to the file changes the mapping without being reported
    assert facts["sharedfile_pwrite_reported"] == "0", text
    assert facts["track_readonly_shared_file"] == "EPERM", text


def test_memfd(identity):
    checks, facts, text = run_probe(identity, "memfd")
    assert checks["memfd"] == 3, text
    assert facts["memfd_alias_write_reported"] == "0", text


def test_shared_anonymous(identity):
    checks, facts, text = run_probe(identity, "shmanon")
    assert checks["shmanon"] == 3 and checks["shmanon-parent-write"] == 1, text
    assert facts["shmanon_child_write_reported"] == "0", text


def test_mapping_created_after_tracking(identity):
    """An unregistered VMA in the scanned range makes the scan fail (-EPERM,
    from PM_SCAN_CHECK_WPASYNC); the caller then treats the range as dirty."""
    checks, facts, text = run_probe(identity, "newmap")
    assert facts["unregistered_scan"] == "EPERM", text
    assert facts["map_fixed_replaced_scan"] == "EPERM", text
    assert facts["mremap_moved_scan"] == "EPERM", text
    assert facts["failed_scan_loses_earlier_reports"] == "1", text
    assert checks["newmap-b-after-track"] == 1 and checks["newmap-mprotect"] == 3, text


def test_madv_dontneed(identity):
    """Anonymous pages dropped with MADV_DONTNEED are reported (single pages
    and a whole 2 MiB page table); a dropped copied-on-write page of a private
    file mapping is not (the kernel leaves a write-protect marker)."""
    checks, facts, text = run_probe(identity, "dontneed")
    assert checks["dontneed-anon"] == 4 + 512, text
    assert facts["dontneed_pages_reported"] == "1" and facts["dontneed_2MiB_reported"] == "1", text
    assert checks["dontneed-read-after"] == 0 and checks["dontneed-write-after"] == 2, text
    assert facts["dontneed_private_file_cow_reported"] == "0", text
    assert facts["dontneed_private_file_clean_reported"] == "0", text
    assert facts["dontneed_private_file_cow_now_file_page"] == "1", text
    assert facts["madv_remove_memfd_reported"] == "0", text
    assert checks["dontneed-file-recopy"] == 1, text


def test_fork(identity):
    checks, facts, text = run_probe(identity, "fork")
    assert facts["child_scan_before_track"] == "EPERM", text
    assert checks["fork-child"] == 2, text
    assert checks["fork-parent"] == 2 and checks["fork-parent-after"] == 1, text


def test_bench_smoke(identity):
    """The bench mode on 128 MiB: prints timings, asserts none."""
    _, _, text = run_probe(identity, "bench", "128")
    assert "bench scan 128 MiB clean" in text, text
