"""Outside changes found completely (issue 15, items 4 and 6).

A job (programs/fs_steps.py under `lazarus run -i 0`) takes checkpoint 0,
then changes its files: over.bin overwritten in place (the journal holds the
5000 bytes overwritten, not the file), log.txt appended (the journal holds
none of its bytes, only its size), rewrite.txt and sub/inner.txt rewritten
with O_TRUNC (the journal holds all their bytes), mode.txt chmod'ed, a file
made and one unlinked in sub/, sub/ itself chmod'ed; then it SIGKILLs itself.

After it stopped, something else changes a file or directory of the job:
deletes it, replaces it with `mv`, with a symbolic link, with a directory or a
FIFO, chmods it, replaces sub/ with another directory, copies a file in place
(new inode, same content).  Each time `lazarus restart --at 0`:
- is refused: one `lazarus:` line on stderr naming the path and what happened
  to it, a non-zero exit, and the store and the work directory exactly as
  before (every entry's type, mode, owner, size, inode, link count, mtime,
  ctime, content hash, symlink target);
- with `--force` gives checkpoint 0's exact files, seen from inside the
  restarted program and from outside (type, mode, owner, size, sha256, mtime
  and symlink target of every path of the work directory; directories'
  mtimes aside: an outside change to a directory's entries moves its mtime,
  and the journal holds a directory's times only if the job changed its
  entries) -- unless the file's content at checkpoint 0 is gone: a file the
  job overwrote in place or appended to whose inode was deleted or replaced
  (the journal holds only the bytes the job overwrote).  Then even `--force`
  is refused, by one line naming the file and saying its content is gone,
  and nothing changes.
`lazarus diff` says "restored" for a file that comes back (deleted, replaced),
"lost" for one whose content is gone, never "modified" for a file that is not
there.

Also: changes the rollback neither undoes nor needs do not refuse it; a
`--force` rollback that rebuilds files, SIGKILLed half-way, is finished by
the next `restart`; a file deleted after the stop whose content at
checkpoint 1 is gone but at 0 is in the journal (refused at 1, rolled back to
0); a file unlinked while open and written after the next checkpoint (not at
its name, yet deleted by no one) refuses nothing and rolls back exactly; a
renamed file deleted after the stop (its kept inode's ctime moves: not store
damage).
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from pathlib import Path

import pytest

from conftest import IS_ROOT
from test_files_scenarios import CK, D, F, R, S, Job, diff_snap, fsprogs, rbytes  # noqa: F401 (fixture)

SETUP = {
    "over.bin": F(rbytes(300, 20000)),
    "log.txt": F(b"log start\n" * 50),
    "rewrite.txt": F(rbytes(301, 6000)),
    "mode.txt": F(rbytes(302, 3000)),
    "sub": D(),
    "sub/inner.txt": F(rbytes(303, 5000)),
    "sub/gone.txt": F(b"unlinked by the job\n"),
}
STEPS = [CK,
         S("patch", path="over.bin", off=3000, data=R(310, 5000)),
         S("append", path="log.txt", data="job line\n"),
         S("put", path="rewrite.txt", data=R(311, 7000)),
         S("chmod", path="mode.txt", mode=0o600),
         S("put", path="sub/inner.txt", data="rewritten by the job\n"),
         S("put", path="sub/new.txt", data="made by the job\n"),
         S("unlink", path="sub/gone.txt"),
         S("chmod", path="sub", mode=0o750)]


def entries(root: Path) -> dict:
    """Every entry under root (root included) as lstat sees it, with the
    content hash of files and the target of symlinks."""
    out = {}
    todo = [root]
    while todo:
        p = todo.pop()
        st = os.lstat(p)
        e = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_size,
             st.st_ino, st.st_nlink, st.st_mtime_ns, st.st_ctime_ns)
        if stat.S_ISREG(st.st_mode):
            e += (hashlib.sha256(p.read_bytes()).hexdigest(),)
        elif stat.S_ISLNK(st.st_mode):
            e += (os.readlink(p),)
        elif stat.S_ISDIR(st.st_mode):
            todo.extend(p / n for n in os.listdir(p))
        out[str(p.relative_to(root))] = e
    return out


def outside_tree(root: Path) -> dict:
    """The work tree as programs/fs_steps.py's snapshot has it ("tree"), seen
    from outside the job."""
    out, inodes = {}, {}

    def visit(rel: str) -> None:
        p = root / rel if rel != "." else root
        st = os.lstat(p)
        kind = ("dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode)
                else "symlink" if stat.S_ISLNK(st.st_mode) else "other")
        e = {"type": kind, "mode": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid,
             "gid": st.st_gid, "mtime_ns": st.st_mtime_ns}
        if kind == "file":
            e["size"] = st.st_size
            e["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
            inodes.setdefault((st.st_dev, st.st_ino), []).append(rel)
            e["_ino"] = (st.st_dev, st.st_ino)
        elif kind == "symlink":
            e["target"] = os.readlink(p)
        out[rel] = e
        if kind == "dir":
            for n in sorted(os.listdir(p)):
                visit(n if rel == "." else f"{rel}/{n}")

    visit(".")
    for e in out.values():
        if "_ino" in e:
            e["same"] = sorted(inodes[e.pop("_ino")])[0]
    return out


def not_dir_mtime(want_tree: dict):
    """A diff_snap line filter: differences other than directories' mtimes."""
    def keep(line: str) -> bool:
        m = re.match(r"tree (.*): mtime_ns want", line)
        return not (m and want_tree.get(m.group(1), {}).get("type") == "dir")
    return keep


class OutsideJob:
    def __init__(self, runner, fsprogs):
        self.runner = runner
        self.job = Job(runner, fsprogs, SETUP, STEPS, on_restore="kill")
        self.job.run()
        self.w = self.job.work
        self.store = self.job.store
        self.snap0 = self.job.orig.snaps[0][1]

    def sh(self, cmd: str) -> None:
        """An outside change, made as the job's user, from the work directory."""
        r = self.runner.run(["sh", "-c", f"cd {self.w} && {cmd}"], timeout=60)
        assert r.rc == 0, f"the outside change failed\n{r}"

    def diff_kinds(self) -> dict:
        r = self.runner.lz("diff", "-d", self.store, "--at", str(self.job.index(0)), timeout=120)
        assert r.rc == 0, str(r)
        kinds = {}
        for line in r.stdout.splitlines():
            m = re.match(r"^(\S+) +(/.*)$", line)
            assert m and len(line) > 9 and line[8] == " " and line[9] == "/", f"diff line {line!r}\n{r}"
            kinds[m.group(2)] = m.group(1)
        return kinds

    def path(self, rel: str) -> str:
        return f"{os.path.realpath(self.w)}/{rel}"

    def refused(self, *extra, names=(), words=(), lost=False):
        """restart --at 0 (with extra options) is refused by one line naming
        each (path, what) and changes nothing in the store or the work tree."""
        before = (entries(self.w), entries(self.store))
        r = self.runner.lz("restart", "-d", self.store, "--at", str(self.job.index(0)), *extra, timeout=120)
        lines = r.stderr_lines()
        assert r.rc not in (0, 137), f"restart {' '.join(extra)} must be refused\n{r}"
        assert len(lines) == 1 and lines[0].startswith("lazarus: "), f"want one 'lazarus: ' line\n{r}"
        line = lines[0]
        print(f"restart {' '.join(extra)}: {line}")
        for rel in names:
            p = self.path(rel)
            assert re.search(re.escape(p) + r"(?=[:, )]| was)", line), f"the refusal must name {p}\n{r}"
        for wd in words:
            assert wd in line, f"the refusal must say {wd!r}\n{r}"
        if lost:
            assert "gone" in line and "--force" in line, f"the refusal must say the content is gone\n{r}"
        else:
            assert "--force" in line, f"the refusal must mention --force\n{r}"
        after = (entries(self.w), entries(self.store))
        assert after[0] == before[0], f"a refused restart changed the work tree:\n{_changes(before[0], after[0])}"
        assert after[1] == before[1], f"a refused restart changed the store:\n{_changes(before[1], after[1])}"
        return line

    def forced(self):
        """restart --at 0 --force gives checkpoint 0's files exactly."""
        r, rep = self.job.restart(0, "--force")
        assert len(rep.restored) == 1, str(r)
        want = self.snap0
        keep = not_dir_mtime(want["tree"])
        inside = [d for d in diff_snap(want, rep.restored[0][2]) if keep(d)]
        assert not inside, ("after restart --force the program sees other files than at checkpoint 0:\n  "
                            + "\n  ".join(inside[:40]) + f"\n{r.stderr[-2000:]}")
        outside = [d for d in diff_snap({"tree": want["tree"]}, {"tree": outside_tree(self.w)}) if keep(d)]
        assert not outside, ("after restart --force the work tree (seen from outside) differs from "
                             "checkpoint 0:\n  " + "\n  ".join(outside[:40]))


def _changes(a: dict, b: dict) -> str:
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"  {k}: {a.get(k)} -> {b.get(k)}")
    return "\n".join(out[:30])


# (outside change, shell command, paths named, words the refusal has, kind in diff)
FORCEABLE = {
    "deleted": ("rm rewrite.txt", ["rewrite.txt"], ["deleted"], {"rewrite.txt": "restored"}),
    "replaced_by_mv": ("printf 'the user s file' > x.tmp && mv x.tmp rewrite.txt",
                       ["rewrite.txt"], ["replaced"], {"rewrite.txt": "restored"}),
    "symlink": ("rm rewrite.txt && ln -s over.bin rewrite.txt", ["rewrite.txt"], ["symbolic link"],
                {"rewrite.txt": "restored"}),
    "directory": ("rm rewrite.txt && mkdir rewrite.txt && echo x > rewrite.txt/f", ["rewrite.txt"],
                  ["directory"], {"rewrite.txt": "restored"}),
    "fifo": ("rm rewrite.txt && mkfifo rewrite.txt", ["rewrite.txt"], ["FIFO"], {"rewrite.txt": "restored"}),
    "chmod": ("chmod 640 over.bin", ["over.bin"], ["mode"], {"over.bin": "modified"}),
    "dir_replaced": ("cp -a sub sub.new && rm -rf sub && mv sub.new sub",
                     ["sub", "sub/inner.txt"], ["directory", "replaced"], {"sub/inner.txt": "restored"}),
    "copy_in_place": ("cp -p rewrite.txt x.tmp && mv x.tmp rewrite.txt", ["rewrite.txt"], ["replaced"],
                      {"rewrite.txt": "restored"}),
    "dir_deleted": ("rm -rf sub", ["sub", "sub/inner.txt"], ["deleted"], {"sub/inner.txt": "restored"}),
}


@pytest.mark.parametrize("change", sorted(FORCEABLE))
def test_outside_change_refused_then_forced(runner, fsprogs, change):
    """Refused by name (one line, nothing changed); `diff` says what comes
    back; `--force` gives checkpoint 0 exactly."""
    cmd, names, words, kinds = FORCEABLE[change]
    oj = OutsideJob(runner, fsprogs)
    oj.sh(cmd)
    oj.refused(names=names, words=words)
    got = oj.diff_kinds()
    for rel, kind in kinds.items():
        assert got.get(oj.path(rel)) == kind, f"diff: {rel} is {got.get(oj.path(rel))!r}, want {kind!r}: {got}"
    oj.forced()
    oj.job.finish()


# content at checkpoint 0 gone: (shell command, paths named, words)
LOST = {
    "deleted": ("rm over.bin", ["over.bin"], ["deleted"]),
    "replaced_by_mv": ("printf 'the user s log' > x.tmp && mv x.tmp log.txt", ["log.txt"], ["replaced"]),
    "copy_in_place": ("for f in over.bin log.txt; do cp -p $f x.tmp && mv x.tmp $f; done",
                      ["over.bin", "log.txt"], ["replaced"]),
    "symlink": ("rm mode.txt && ln -s over.bin mode.txt", ["mode.txt"], ["symbolic link"]),
}


@pytest.mark.parametrize("change", sorted(LOST))
def test_outside_change_content_gone(runner, fsprogs, change):
    """A file the job overwrote in place or appended to, deleted or replaced
    after the job stopped: its content at checkpoint 0 cannot be rebuilt from
    the journal, so the restart is refused with and without --force, by one
    line naming it, and nothing changes; `diff` says "lost"."""
    cmd, names, words = LOST[change]
    oj = OutsideJob(runner, fsprogs)
    oj.sh(cmd)
    oj.refused(names=names, words=words)
    oj.refused("--force", names=names, words=words + ["after the job stopped"], lost=True)
    got = oj.diff_kinds()
    for rel in names:
        assert got.get(oj.path(rel)) == "lost", f"diff: {rel} is {got.get(oj.path(rel))!r}, want 'lost': {got}"
    oj.job.finish()


def test_outside_unrelated_changes_not_refused(runner, fsprogs):
    """Changes after the stop that the rollback neither undoes nor needs --
    a new file in the work directory and in sub/, a file the job never
    changed deleted -- do not refuse the restart, and stay."""
    oj = OutsideJob(runner, fsprogs)
    oj.sh("echo notes > notes.txt && echo more > sub/user.txt && rm bystander_dir/inner.txt")
    r, rep = oj.job.restart(0)
    assert len(rep.restored) == 1, str(r)
    assert (oj.w / "notes.txt").read_text() == "notes\n" and (oj.w / "sub" / "user.txt").exists()
    assert not (oj.w / "bystander_dir" / "inner.txt").exists()
    t = outside_tree(oj.w)
    for p in ("notes.txt", "sub/user.txt"):
        t.pop(p)
    want = dict(oj.snap0["tree"])
    want.pop("bystander_dir/inner.txt")
    keep = not_dir_mtime(want)
    diffs = [d for d in diff_snap({"tree": want}, {"tree": t}) if keep(d)]
    assert not diffs, "\n".join(diffs)


def test_outside_forced_rollback_killed_and_finished(runner, fsprogs):
    """rewrite.txt and sub/inner.txt deleted after the stop; `restart --force`
    (a sleep after each rollback step) SIGKILLed as soon as rewrite.txt is
    back (sub/inner.txt not yet), a plain `restart --at 0` (the rollback is
    under way: no check) SIGKILLed once more, a last one finishes it, with
    checkpoint 0's files exactly."""
    import copy
    oj = OutsideJob(runner, fsprogs)
    oj.sh("rm rewrite.txt sub/inner.txt")
    slow = copy.copy(runner)
    slow.env = {**runner.env, "LAZARUS_TEST_ROLLBACK_DELAY_MS": "150"}
    rebuild = oj.store / "files.rebuild"
    p = slow.start_lz("restart", "-d", oj.store, "--at", str(oj.job.index(0)), "--force")
    t0 = time.monotonic()
    while not (oj.w / "rewrite.txt").exists() and p.poll() is None and time.monotonic() - t0 < 30:
        time.sleep(0.002)
    ended = p.poll()
    p.kill()
    state = (rebuild.exists(), (oj.w / "rewrite.txt").exists(), (oj.w / "sub" / "inner.txt").exists())
    assert ended is None and state == (True, True, False), (
        f"want a kill between the two rebuilds: ended {ended}, (files.rebuild, rewrite.txt, sub/inner.txt) "
        f"{state}\n{p.stderr}")
    p = slow.start_lz("restart", "-d", oj.store, "--at", str(oj.job.index(0)))
    time.sleep(0.4)
    p.kill()
    r, rep = oj.job.restart(0)
    assert len(rep.restored) == 1, str(r)
    keep = not_dir_mtime(oj.snap0["tree"])
    diffs = [d for d in diff_snap(oj.snap0, rep.restored[0][2]) if keep(d)]
    assert not diffs, "\n".join(diffs) + f"\n{r.stderr}"
    outside = [d for d in diff_snap({"tree": oj.snap0["tree"]}, {"tree": outside_tree(oj.w)}) if keep(d)]
    assert not outside, "\n".join(outside)
    assert not rebuild.exists(), "files.rebuild left after the rollback finished"


def test_outside_deleted_two_intervals(runner, fsprogs):
    """A file rewritten with O_TRUNC after checkpoint 0 (the journal of 0
    holds all of it) and overwritten in part after checkpoint 1, deleted after
    the stop: its content at 1 is gone (refused with --force, by one line),
    its content at 0 is in the journal of 0 (rolled back with --force)."""
    setup = {"f.bin": F(rbytes(320, 9000)), "g.txt": F(b"g\n")}
    steps = [CK, S("put", path="f.bin", data=R(321, 12000)), CK,
             S("patch", path="f.bin", off=4096, data=R(322, 3000)), S("append", path="g.txt", data="x")]
    job = Job(runner, fsprogs, setup, steps, on_restore="kill")
    job.run()
    oj = OutsideJob.__new__(OutsideJob)
    oj.runner, oj.job, oj.w, oj.store, oj.snap0 = runner, job, job.work, job.store, job.orig.snaps[0][1]
    oj.sh("rm f.bin")
    before = entries(oj.w)
    r = runner.lz("restart", "-d", oj.store, "--at", str(job.index(1)), "--force", timeout=120)
    lines = r.stderr_lines()
    assert r.rc not in (0, 137) and len(lines) == 1, str(r)
    assert oj.path("f.bin") in lines[0] and "gone" in lines[0] and "deleted" in lines[0], str(r)
    assert "after the job stopped" in lines[0], str(r)
    assert entries(oj.w) == before
    oj.refused(names=["f.bin"], words=["deleted"])
    oj.forced()


def test_outside_unlinked_while_open_not_refused(runner, fsprogs):
    """A file the job unlinked while open (kept by the journal of checkpoint
    0) and wrote through its descriptor after checkpoint 1: not at its old
    name, yet not deleted by anyone.  A file made in its directory after the
    stop neither refuses `restart --at 1` nor `--at 0`, and both restore
    exactly."""
    setup = {"held.bin": F(rbytes(330, 8000))}
    steps = [S("open", path="held.bin", flags=["O_RDWR"], as_="h"), CK,
             S("unlink", path="held.bin"), CK,
             S("pwrite", fd="h", off=100, data=R(331, 3000))]
    job = Job(runner, fsprogs, setup, steps, on_restore="kill")
    job.run()
    (job.work / "user-notes.txt").write_text("after the stop\n")
    for k in (1, 0):
        r, rep = job.restart(k)
        want = job.orig.snaps[k][1]
        keep = not_dir_mtime(want["tree"])
        got = rep.restored[0][2] if rep.restored else {}
        # the descriptor's file, nameless, travels by content (its /proc name differs)
        for snap in (want, got):
            for fd in snap.get("fds", {}).values():
                fd.pop("path", None)
        diffs = [d for d in diff_snap(want, got) if keep(d) and "user-notes.txt" not in d]
        assert not diffs, f"checkpoint {k}:\n" + "\n".join(diffs) + f"\n{r}"


def test_outside_renamed_file_deleted(runner, fsprogs):
    """The job renames a.txt to b.txt after checkpoint 0 (a.txt's file is
    kept by the journal); b.txt deleted after the stop: refused naming a.txt
    (the file it was at checkpoint 0 is gone from the tree), and with --force
    a.txt comes back from the journal."""
    job = Job(runner, fsprogs, {"a.txt": F(rbytes(340, 3000))}, [CK, S("rename", src="a.txt", dst="b.txt")],
              on_restore="kill")
    job.run()
    oj = OutsideJob.__new__(OutsideJob)
    oj.runner, oj.job, oj.w, oj.store, oj.snap0 = runner, job, job.work, job.store, job.orig.snaps[0][1]
    oj.sh("rm b.txt")
    oj.refused(names=["a.txt"], words=["deleted"])
    oj.forced()
