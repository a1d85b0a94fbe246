"""A restart elsewhere fetches a checkpoint's objects at once
(`restart -d s3://...`, remote/s3_fetch.c), against versitygw
(tests/s3server.py):

- a job of several processes (a shell and three children, a pack each) is
  flushed, its machine lost; the restart fetches every object with ranges
  in flight across objects: a proxy in front of the server sees several
  connections open at once (each object is one range here, so they are
  different objects), and every fetched pack is byte-identical to the lost machine's; the results
  are the uninterrupted runs'; with stderr on a terminal, one progress line
  rewritten in place (MiB of MiB, MiB/s);
- a flipped byte in one pack among many in flight (5 MiB ranges): the
  restart names that object, exits 1 with one line (no progress line when
  stderr is not a terminal), leaves no cache and the remote as it was; the
  same for an object its commit lists that is gone from the store."""
from __future__ import annotations

import filecmp
import os
import pty
import re
import shutil
import subprocess
import threading
import time

from conftest import LAZARUS, plain_output
from s3server import FaultProxy, s3server  # noqa: F401  (the fixture)
from test_s3_flush import remote_keys, wait_published

ROUNDS = "100"


class CountingProxy(FaultProxy):
    """A passing proxy that counts the connections open at once (`peak`)."""

    def __init__(self, target: int):
        self.active = self.peak = 0
        self._count = threading.Lock()
        super().__init__(target)

    def _serve(self, c, mode):
        with self._count:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            super()._serve(c, mode)
        finally:
            with self._count:
                self.active -= 1


def flushed_tree_job(runner, s3server, url, sizes, **env):
    """A shell and one heap_mutator per size, checkpointed and flushed: (store, index, job)."""
    runner.env.update(s3server.env(), **env)
    store = runner.base / "store"
    hm = runner.hm
    script = " & ".join(f"{hm} {m} {ROUNDS} {i + 1}" for i, m in enumerate(sizes)) + "; wait"
    job = runner.start_lz("run", "-d", store, "-i", "0", "--remote", url, "--", "/bin/sh", "-c", script)
    time.sleep(0.5)
    idx = runner.checkpoint_when_up(store)
    wait_published(runner, store, idx, job)
    return store, idx, job


def restart_on_a_terminal(runner, *args, timeout=300):
    """`lazarus restart ARGS` with stderr on a pseudo-terminal: (rc, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(runner.argv([LAZARUS, "restart", *args]), cwd=runner.base, env=runner.env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = bytearray()

    def drain():
        while True:
            try:
                d = os.read(master, 65536)
            except OSError:  # EIO: every end of the terminal is closed
                return
            if not d:
                return
            seen.extend(d)

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    out, _ = p.communicate(timeout=timeout)
    t.join(10)
    os.close(master)
    return p.returncode, out.decode(errors="replace"), seen.decode(errors="replace")


def want_sums(hm, sizes):
    return sorted(plain_output([hm, str(m), ROUNDS, str(i + 1)]).splitlines()[-1] for i, m in enumerate(sizes))


def test_objects_fetched_at_once(runner, programs, s3server):
    runner.hm = programs.heap_mutator
    b = s3server.bucket()
    url = f"s3://{b}/at-once"
    sizes = (8, 12, 16)
    # each object one range: connections open at once are different objects
    store, idx, job = flushed_tree_job(runner, s3server, url, sizes, LAZARUS_S3_PART_MIB="64")
    lost = runner.base / "lost"
    shutil.copytree(store / "packs", lost)
    job.kill()
    shutil.rmtree(store)
    proxy = CountingProxy(s3server.port)
    try:
        runner.env.update(AWS_ENDPOINT_URL=proxy.endpoint, LAZARUS_S3_FETCH_PARALLEL="8")
        cache = runner.base / "cache"
        rc, out, term = restart_on_a_terminal(runner, "-d", url, "--files-as-they-are", "--cache", cache)
    finally:
        proxy.close()
    assert rc == 0, term
    assert sorted(l for l in out.splitlines() if l.startswith("checksum")) == want_sums(programs.heap_mutator, sizes)
    assert proxy.peak >= 4, f"at most {proxy.peak} connection(s) open at once: objects fetched one after another"
    # one progress line, rewritten in place, on the terminal
    assert re.search(rf"\rlazarus: fetching checkpoint {idx}: \d+ of \d+ MiB, \d+ MiB/s", term), term
    packs = sorted(p.name for p in lost.iterdir())
    assert len(packs) >= 3 and sorted(p.name for p in (cache / "packs").iterdir()) == packs
    for name in packs:
        assert filecmp.cmp(lost / name, cache / "packs" / name, shallow=False), name


def test_flipped_byte_among_many_in_flight(runner, programs, s3server):
    runner.hm = programs.heap_mutator
    b = s3server.bucket()
    url = f"s3://{b}/flip-many"
    store, idx, job = flushed_tree_job(runner, s3server, url, (12, 12, 12), LAZARUS_S3_PART_MIB="5")
    job.kill()
    packs = sorted(((k, p) for k, p in s3server.objects(b).items() if "/pack." in k), key=lambda kp: kp[0])
    assert len(packs) >= 3
    key, path = packs[1]
    good = path.read_bytes()
    data = bytearray(good)
    data[len(data) * 2 // 3] ^= 0x01
    path.write_bytes(data)
    before = remote_keys(runner, s3server, url)
    cache = runner.base / "cache"
    r = runner.lz("restart", "-d", url, "--files-as-they-are", "--cache", cache, timeout=120)
    lines = [l for l in r.stderr_lines() if "through the local store" not in l]
    assert r.rc == 244 and len(lines) == 1, str(r)  # damaged (lazarus(1) EXIT STATUS)
    assert f"s3://{b}/{key} fails its checksum" in lines[0] and "nothing was changed" in lines[0], str(r)
    assert not cache.exists() and remote_keys(runner, s3server, url) == before
    # an object its commit lists, gone from the store: named too
    path.write_bytes(good)
    gone, gpath = packs[0]
    gpath.unlink()
    r = runner.lz("restart", "-d", url, "--files-as-they-are", "--cache", cache, timeout=120)
    lines = [l for l in r.stderr_lines() if "through the local store" not in l]
    assert r.rc == 1 and len(lines) == 1 and f"remote object s3://{b}/{gone} is gone" in lines[0], str(r)
    assert not cache.exists()
