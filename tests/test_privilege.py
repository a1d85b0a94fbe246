"""No privilege from a store (issue 15, item 5): a restart runs the program
with exactly the user and group ids (real, effective, saved), supplementary
groups and capability sets it had at checkpoint time, and only if the
restarting user could give them.

- root restarting an ordinary user's job becomes that user first: the program
  (seen from outside, /proc/PID/status) has the user's ids and groups and no
  capability, cannot write a root-only directory, and everything the store
  gets afterwards (also from a later `lazarus checkpoint` by root) belongs to
  the user; root gives exactly the groups the job had (none, for a job started
  with fewer than the user's login groups); a job that ran with a group that
  is not one of the user's login groups is refused;
- a store edited to claim uid 0 (or euid 0 only, or capabilities), restarted
  by the user (or by root): refused with one line, exit non-zero, no process,
  the store and the user's files byte-identical;
- an ordinary user's restart of a restart (checkpointed inside the restart's
  user namespace, where its other groups read as the overflow gid): accepted;
- root restarting root's own job: the same ids and capabilities as before
  (regression); a root job that ran with fewer capabilities (a smaller bounding
  set) is refused by a root with more, and restarts under the same bounding set.

The ordinary user is `nobody` through setpriv with its login groups
(--init-groups) when the session is root; the root tests are skipped otherwise.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import lzformat
from conftest import (IS_ROOT, LAZARUS, NOBODY, Runner, _user_base, children, ckpt_path, find_program, kill_tree,
                      reap_orphans, snapshot, wait_gone)

COMM = "lzpriv_job"

JOB_SRC = r"""
/* lzpriv_job: every 20 ms appends a line to out.txt in its working directory;
 * when a file `probe` there holds a path, removes `probe`, tries to create
 * that path and writes "written" or the error (strerror) to probe.result
 * (through probe.tmp and a rename).  Prints "ready" once at the start. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    printf("ready\n");
    fflush(stdout);
    for (unsigned long i = 0;; i++) {
        FILE *f = fopen("out.txt", "a");
        if (f) { fprintf(f, "%lu\n", i); fclose(f); }
        FILE *p = fopen("probe", "r");
        if (p) {
            char path[4096] = "";
            if (!fgets(path, sizeof path, p)) path[0] = 0;
            fclose(p);
            unlink("probe");
            path[strcspn(path, "\n")] = 0;
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            const char *res = fd >= 0 ? "written" : strerror(errno);
            if (fd >= 0) close(fd);
            FILE *r = fopen("probe.tmp", "w");
            if (r) { fprintf(r, "%s\n", res); fclose(r); rename("probe.tmp", "probe.result"); }
        }
        usleep(20000);
    }
}
"""

CRED_KEYS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapAmb")


def _gcc(src_text: str, out: Path, extra=()) -> Path:
    src = out.with_suffix(".c")
    src.write_text(src_text)
    cp = subprocess.run(["gcc", "-O2", "-Wall", "-o", str(out), str(src), *extra], capture_output=True, text=True)
    assert cp.returncode == 0, f"compiling {src} failed:\n{cp.stderr}"
    os.chmod(out, 0o755)
    return out


@pytest.fixture(scope="module")
def tools(programs):
    d = programs.dir
    job = _gcc(JOB_SRC, d / COMM)
    return {"job": job}


def _user_runner(base: Path) -> Runner:
    """nobody with its login groups (as a user's session has them), or the
    session's own user when the session is not root."""
    r = Runner("user", base)
    if IS_ROOT:
        r.prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--init-groups", "--"]
    return r


@pytest.fixture
def user_base(tmp_path):
    if IS_ROOT:
        base = _user_base()
    else:
        base = tmp_path / "base"
        base.mkdir()
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _creds(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in CRED_KEYS:
                out[k] = v.split()
    return out


def _probe(workdir: Path, path: Path, timeout: float = 30, proc=None) -> str:
    """Ask the running job (under the supervisor proc) to create `path`; its answer."""
    result = workdir / "probe.result"
    if result.exists():
        result.unlink()
    tmp = workdir / "probe.new"
    tmp.write_text(f"{path}\n")
    os.chmod(tmp, 0o644)
    os.rename(tmp, workdir / "probe")
    deadline = time.monotonic() + timeout
    while not result.exists():
        assert time.monotonic() < deadline, f"the job did not answer a probe within {timeout}s"
        assert proc is None or proc.poll() is None, f"the job ended (status {proc.poll()})\n{proc.stderr}"
        time.sleep(0.02)
    return result.read_text().strip()


def _start_job(runner: Runner, store: Path, prog: Path, wrap=()):
    proc = runner.start([*wrap, LAZARUS, "run", "-d", store, "-i", "0", "--", prog])
    proc.wait_for_output(r"^ready$", timeout=60)
    idx = runner.checkpoint_when_up(store)
    pid = find_program(proc.pid, COMM)
    assert pid is not None, f"no program under the supervisor\n{proc.stderr}"
    return proc, idx, pid


def _kill_job(proc) -> None:
    """SIGKILL the whole job, supervisor included (as a machine dying)."""
    pids = kill_tree(proc.pid)
    proc.wait(timeout=60)
    wait_gone(pids)


def _restarted_program(proc, workdir: Path, timeout: float = 60) -> int:
    """The restarted program, once it runs again (it answers a probe)."""
    assert _probe(workdir, workdir / "alive", timeout, proc) == "written", proc.stderr
    pid = find_program(proc.pid, COMM)
    assert pid is not None, f"no restarted program\n{proc.stderr}"
    return pid


def _no_processes_left() -> None:
    deadline = time.monotonic() + 5
    while children(os.getpid()) and time.monotonic() < deadline:
        reap_orphans()
        time.sleep(0.05)
    assert children(os.getpid()) == [], "the refused restart left processes behind"


def _owners(d: Path) -> dict:
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(root) / n
            out[str(p.relative_to(d))] = p.lstat().st_uid
    return out


# --------------------------------------------------------------- test 1
@pytest.mark.skipif(not IS_ROOT, reason="root restarting a user's job needs the session to run as root")
def test_root_restarts_a_users_job_as_that_user(tools, user_base):
    """nobody runs a job; checkpoint; the whole job SIGKILLed; root runs
    `lazarus restart`: the program has the ids, groups and capability sets it
    had (Uid/Gid all nobody, CapEff/CapPrm 0), so has the restart's supervisor;
    the program cannot write a root-only directory; every file of the store
    (also after a further `lazarus checkpoint` by root) and of the job belongs
    to nobody."""
    user = _user_runner(user_base)
    root = Runner("root", user_base)
    store = user_base / "store"
    proc, idx, pid = _start_job(user, store, tools["job"])
    before = _creds(pid)
    assert before["Uid"] == [str(NOBODY)] * 4 and before["CapEff"] == ["0000000000000000"], before
    _kill_job(proc)

    rproc = root.start_lz("restart", "-d", store)
    rootonly = Path(tempfile.mkdtemp(prefix="lazarus-rootonly-"))
    try:
        os.chmod(rootonly, 0o700)
        prog = _restarted_program(rproc, user_base)
        after = _creds(prog)
        assert after == before, f"ids, groups or capabilities changed by the restart\nbefore {before}\nafter  {after}"
        assert after["Uid"] == [str(NOBODY)] * 4 and after["Gid"] == [str(NOBODY)] * 4, after
        for k in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
            assert after[k] == ["0000000000000000"], f"{k} {after[k]}"
        sup = _creds(rproc.pid)  # `lazarus restart`, now the job's supervisor
        assert sup["Uid"] == [str(NOBODY)] * 4 and sup["Gid"] == [str(NOBODY)] * 4, sup
        assert sup["CapEff"] == sup["CapPrm"] == sup["CapInh"] == ["0000000000000000"], sup

        assert _probe(user_base, rootonly / "x", proc=rproc) == "Permission denied"
        assert not (rootonly / "x").exists()

        owners = _owners(store)
        assert owners and all(u == NOBODY for u in owners.values()), f"store files not nobody's: {owners}"
        n = root.checkpoint(store)
        assert n > idx
        assert ckpt_path(store, n).is_dir()
        owners = _owners(store)
        assert all(u == NOBODY for u in owners.values()), f"store files not nobody's after a checkpoint: {owners}"
        work = {k: v for k, v in _owners(user_base).items() if not k.startswith("store")}
        assert work and all(u == NOBODY for u in work.values()), f"job files not nobody's: {work}"
    finally:
        shutil.rmtree(rootonly, ignore_errors=True)
        _kill_job(rproc)


@pytest.mark.skipif(not IS_ROOT, reason="root restarting a user's job needs the session to run as root")
def test_root_gives_exactly_the_recorded_groups(tools, user_base):
    """nobody's job ran with no supplementary group (setpriv --clear-groups),
    fewer than nobody's login groups: root restarting it as nobody gives it
    exactly the groups it had (none), not the login groups."""
    user = Runner("user", user_base)  # setpriv --clear-groups
    root = Runner("root", user_base)
    store = user_base / "store"
    proc, idx, pid = _start_job(user, store, tools["job"])
    before = _creds(pid)
    assert before["Groups"] == [], before
    _kill_job(proc)
    rproc = root.start_lz("restart", "-d", store)
    try:
        prog = _restarted_program(rproc, user_base)
        assert _creds(prog) == before
    finally:
        _kill_job(rproc)


@pytest.mark.skipif(not IS_ROOT, reason="root restarting a user's job needs the session to run as root")
def test_root_refuses_groups_the_user_does_not_have(tools, user_base):
    """nobody's job ran with supplementary group 100, which is not one of
    nobody's login groups: root restarting it as nobody cannot give that group
    without handing out a privilege the store claims: refused with one line
    naming the groups, nothing changed; nobody itself (still in group 100 in
    its session) restarting it works."""
    user = Runner("user", user_base)
    user.prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--groups=100", "--"]
    root = Runner("root", user_base)
    store = user_base / "store"
    proc, idx, pid = _start_job(user, store, tools["job"])
    before = _creds(pid)
    assert before["Groups"] == ["100"], before
    _kill_job(proc)
    snap = snapshot(user_base)
    r = root.lz("restart", "-d", store)
    assert r.rc != 0, f"accepted\n{r}"
    lines = r.stderr_lines()
    assert len(lines) == 1, f"want exactly one line on stderr\n{r}"
    assert re.search(r"supplementary group.*refused", lines[0]), r
    assert r.stdout == ""
    _no_processes_left()
    assert snapshot(user_base) == snap, "the refused restart changed files"
    rproc = user.start_lz("restart", "-d", store)
    try:
        prog = _restarted_program(rproc, user_base)
        assert _creds(prog) == before
    finally:
        _kill_job(rproc)


@pytest.mark.skipif(not IS_ROOT, reason="needs setpriv from a root session")
def test_user_restarts_a_restart_with_another_group(tools, user_base):
    """nobody with a supplementary group other than its gid (100): its
    restart runs in a user namespace mapping only nobody's uid and gid, where
    group 100 reads as the overflow gid; a checkpoint taken there and restarted
    again by nobody is accepted (the same credentials, seen from inside), and
    the program has group 100 as before (seen from outside)."""
    user = Runner("user", user_base)
    user.prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--groups=100", "--"]
    store = user_base / "store"
    proc, idx, pid = _start_job(user, store, tools["job"])
    before = _creds(pid)
    assert before["Groups"] == ["100"], before
    _kill_job(proc)
    for _ in range(2):
        rproc = user.start_lz("restart", "-d", store)
        try:
            prog = _restarted_program(rproc, user_base)
            assert _creds(prog) == before
            assert user.checkpoint(store) > idx
        finally:
            _kill_job(rproc)


# --------------------------------------------------------------- test 2
FORGED = {
    "uid0": {"uid": 0, "euid": 0, "suid": 0},
    "euid0": {"euid": 0},
    "caps": {"cap_eff": (1 << 41) - 1, "cap_prm": (1 << 41) - 1},
}


@pytest.mark.parametrize("restarter", ["user", "root"])
@pytest.mark.parametrize("forged", list(FORGED))
def test_forged_identity_refused(forged, restarter, tools, user_base):
    """The manifest of an ordinary user's checkpoint edited to claim uid 0
    (real, effective and saved), euid 0 only, or capabilities, its checksum
    re-sealed; restarted by the user (or by root): refused with one line on
    stderr naming what differs, exit non-zero, no process left, every file of
    the store and of the user byte-identical."""
    if restarter == "root" and not IS_ROOT:
        pytest.skip("needs the session to run as root")
    user = _user_runner(user_base)
    store = user_base / "store"
    proc, idx, pid = _start_job(user, store, tools["job"])
    _kill_job(proc)
    manifest = ckpt_path(store, idx) / "manifest"
    m = lzformat.Manifest.load(manifest)
    proc_rec = m.proc  # struct lz_proc (its offsets checked against format.h by test_format_unit.py)
    assert proc_rec.uid == user.uid
    for field, value in FORGED[forged].items():
        m.set(proc_rec, field, value)
    m.save(manifest)  # re-sealed
    snap = snapshot(user_base)
    who = user if restarter == "user" else Runner("root", user_base)
    for extra in ([], ["--at", str(idx)]):
        r = who.lz("restart", "-d", store, *extra, timeout=20)
        assert r.rc != 0, f"{forged}: accepted\n{r}"
        lines = r.stderr_lines()
        assert len(lines) == 1, f"{forged}: want exactly one line on stderr\n{r}"
        want = r"capabilities" if forged == "caps" else r"uid \d+ \(euid 0"
        assert re.search(want, lines[0]) and "refused" in lines[0], \
            f"{forged}: the line should name what differs (/{want}/) and say refused\n{r}"
        assert r.stdout == "", f"{forged}: the program must not have run\n{r}"
        _no_processes_left()
        assert snapshot(user_base) == snap, f"{forged}: the refused restart changed files"


# --------------------------------------------------------------- test 3
@pytest.mark.skipif(not IS_ROOT, reason="needs the session to run as root")
def test_root_restarts_its_own_job(tools, tmp_path):
    """Root's job restarted by root: the same ids, groups and capabilities."""
    root = Runner("root", tmp_path)
    store = tmp_path / "store"
    proc, idx, pid = _start_job(root, store, tools["job"])
    before = _creds(pid)
    assert before["Uid"] == ["0"] * 4
    _kill_job(proc)
    rproc = root.start_lz("restart", "-d", store)
    try:
        prog = _restarted_program(rproc, tmp_path)
        assert _creds(prog) == before
        assert root.checkpoint(store) > idx
    finally:
        _kill_job(rproc)


@pytest.mark.skipif(not IS_ROOT, reason="needs the session to run as root")
def test_root_job_with_fewer_capabilities(tools, tmp_path):
    """Root's job run with a smaller bounding set (no CAP_NET_RAW) had fewer
    capabilities: root with all of them may not restart it (it would gain
    CAP_NET_RAW): refused with one line, nothing changed; root under the same
    bounding set restarts it with exactly its capabilities."""
    if not int(_creds(os.getpid())["CapEff"][0], 16) & (1 << 13):
        pytest.skip("the session has no CAP_NET_RAW")
    wrap = ["setpriv", "--bounding-set=-net_raw", "--"]
    root = Runner("root", tmp_path)
    store = tmp_path / "store"
    proc, idx, pid = _start_job(root, store, tools["job"], wrap)
    before = _creds(pid)
    assert not int(before["CapEff"][0], 16) & (1 << 13), before
    _kill_job(proc)
    snap = snapshot(tmp_path)
    r = root.lz("restart", "-d", store)
    assert r.rc != 0, f"accepted\n{r}"
    lines = r.stderr_lines()
    assert len(lines) == 1 and re.search(r"capabilities.*refused", lines[0]), r
    _no_processes_left()
    assert snapshot(tmp_path) == snap, "the refused restart changed files"
    rproc = root.start([*wrap, LAZARUS, "restart", "-d", store])
    try:
        prog = _restarted_program(rproc, tmp_path)
        assert _creds(prog) == before
    finally:
        _kill_job(rproc)
