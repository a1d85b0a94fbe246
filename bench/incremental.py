#!/usr/bin/env python3
"""Incremental, compressed, forked checkpoints: benchmark for Lazarus (issue 4).

Measures in one run, each figure next to its target and, where there is one,
the machine's limit measured in the same run:

  pause     program pause of a 4 GiB heap, 4 KiB pages (MADV_NOHUGEPAGE) and
            transparent huge pages (MADV_HUGEPAGE): the first checkpoint (it
            registers the mapping for dirty tracking) and the steady state
            (later checkpoints, each after 1 % of the pages changed), against
            a bare fork() of a process with the same heap (bench/programs/
            forkheap.c) and a copy of 1 % of its pages into fresh memory.
            Targets: <= 150 ms (4 KiB pages), <= 20 ms (huge pages).
  incr      1 GiB of random data, 1 % of the pages changed before each
            checkpoint, --compress none: stored / changed bytes (<= 1.2),
            pause (<= 20 ms), durable (<= 100 ms), medians; and the same
            written in the pause (LAZARUS_NO_FORK=1) for comparison.
  full      full checkpoint of 1 GiB of random data until durable (`lazarus
            checkpoint` returns), --compress none and lz4, against dd of
            /dev/zero and of a random file (conv=fsync): <= 1.2; then the
            restart of that image from `lazarus restart` until the program
            runs (<= 0.5 s), and the restorer's own time (LAZARUS_TRACE).
  compress  1 GiB, half zeros and half random doubles, laid out two ways:
            even pages zero and odd pages random doubles (memory / stored
            >= 2: zero pages are never stored, whatever the codec), and
            every page half random doubles, half zeros (no zero page, so only
            compression can halve it: none / codec >= 2); time until durable
            against none (<= 1).
  libckpt   libckpt's Table 2 (Plank et al., USENIX 1995): MAT (C = A x B,
            A and B read-only) and CELL (a cellular automaton rewriting its
            grid every step) checkpointed every N steps; the size reduction
            incremental checkpoints give, 1 - mean stored of the later
            checkpoints / memory of the full one, none and lz4.

    make && python3 bench/incremental.py [--only pause,incr,...] [--reps 5]

Standard library only.  Results in WORKDIR/results.json (default
bench/out/incremental).  Exits 1 if a target is missed or a step fails.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

from ckpt_restart import LineReader, descendants, log, ready_workdir, store_options, timed
from files_io import read_file, write_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
GiB = 1 << 30
SECTIONS = ("pause", "incr", "full", "compress", "libckpt")
ALIASES = {"restart": "full", "mat": "libckpt", "cell": "libckpt"}
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
LIBCKPT = {"MAT": 87.6, "CELL": 0.2}  # libckpt's Table 2: % of the checkpoint size saved
TRACE_RE = re.compile(r"lazarus: checkpoint +([0-9.]+) ms (.*)")
RTRACE_RE = re.compile(r"lazarus-restore: +([0-9.]+) ms (.*)")


class BenchError(Exception):
    pass


def build(prog, outdir):
    """bench/programs/PROG.c, linked with liblazarus like ckpt_restart's bigheap."""
    src = os.path.join(ROOT, "bench", "programs", prog + ".c")
    lib = os.path.join(ROOT, "build", "lib")
    out = os.path.join(outdir, prog)
    subprocess.run([os.environ.get("CC", "cc"), "-std=c17", "-O2", "-Wall",
                    "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "bench", "programs"),
                    "-o", out, src, "-L" + lib, "-llazarus", "-Wl,-rpath," + lib], check=True)
    return out


def kv(line, key, conv=float):
    m = re.search(r"\b" + key + r"=(\S+)", line)
    if not m:
        raise BenchError(f"no {key}= in {line!r}")
    return conv(m.group(1))


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def thp_mode():
    try:
        with open(THP_ENABLED) as f:
            m = re.search(r"\[(\w+)\]", f.read())
        return m.group(1) if m else "unknown"
    except OSError:
        return None


class Job:
    """A program under `lazarus run -i 0`, driven over its stdin and stdout."""

    def __init__(self, b, name, argv, compress=None, env=None, ready="filled"):
        self.b = b
        self.store = os.path.join(b.work, "store." + name)
        shutil.rmtree(self.store, ignore_errors=True)
        self.comm = os.path.basename(argv[0])[:15]
        cmd = [b.lz, "run", "-d", self.store, "-i", "0", "-k", "100"]
        if compress:
            cmd += ["--compress", compress]
        self.p = subprocess.Popen(cmd + ["--"] + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=dict(os.environ, **(env or {})))
        self.out = LineReader(self.p.stdout)
        self.err = []
        threading.Thread(target=self._errors, daemon=True).start()
        self.ready = self.out.get(b.args.timeout, f"{self.comm} to be ready")
        if not self.ready.startswith(ready):
            raise BenchError(f"{self.comm}: unexpected first line {self.ready!r}; stderr: {self.stderr()}")

    def _errors(self):
        for line in iter(self.p.stderr.readline, b""):
            self.err.append(line.decode(errors="replace").rstrip("\n"))

    def stderr(self, last=8):
        lines = [l for l in self.err if not TRACE_RE.match(l)]
        return " | ".join(lines[-last:]) or "(nothing)"

    def cmd(self, line, expect):
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()
        reply = self.out.get(self.b.args.timeout, f"{self.comm}'s answer to {line!r}")
        if not reply.startswith(expect):
            raise BenchError(f"{self.comm}: {line!r} answered {reply!r}")
        return reply

    def checkpoint(self):
        """`lazarus checkpoint`: (seconds until it returned, i.e. durable; index)."""
        t0 = time.perf_counter()
        r = subprocess.run([self.b.lz, "checkpoint", "-d", self.store], capture_output=True, text=True,
                           timeout=self.b.args.timeout)
        dt = time.perf_counter() - t0
        if r.returncode != 0 or not r.stdout.strip().isdigit():
            raise BenchError(f"`lazarus checkpoint -d {self.store}` failed (exit {r.returncode}): "
                             f"{r.stderr.strip()}; program stderr: {self.stderr()}")
        return dt, int(r.stdout.strip())

    def rows(self):
        r = subprocess.run([self.b.lz, "list", "--json", "-d", self.store], capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"`lazarus list --json -d {self.store}` failed: {r.stderr.strip()}")
        return {row["index"]: row for row in json.loads(r.stdout)}

    def manifest_bytes(self, index):
        return os.path.getsize(os.path.join(self.store, f"ckpt.{index:06d}", "manifest"))

    def traces(self):
        """The pause's steps (LAZARUS_TRACE=1), one list of (step, ms) per checkpoint, in order."""
        groups = []
        for line in self.err:
            m = TRACE_RE.match(line)
            if not m:
                continue
            if m.group(2) == "process and descriptors" or not groups:
                groups.append([])
            groups[-1].append((m.group(2), float(m.group(1))))
        return groups

    def quit(self):
        self.p.stdin.write(b"quit\n")
        self.p.stdin.close()
        rc = self.p.wait(timeout=self.b.args.timeout)
        if rc != 0:
            raise BenchError(f"`lazarus run` of {self.comm} exited with {rc}: {self.stderr()}")

    def kill(self):
        """SIGKILL the program (a descendant of `lazarus run`), as a crash would."""
        victims = [pid for pid, comm in descendants(self.p.pid).items() if comm == self.comm]
        if not victims:
            raise BenchError(f"{self.comm} not found below lazarus run")
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        self.p.wait(timeout=self.b.args.timeout)

    def close(self):
        if self.p.poll() is None:
            for pid, comm in descendants(self.p.pid).items():
                if comm == self.comm:
                    os.kill(pid, signal.SIGKILL)
            self.p.kill()
            self.p.wait()

    def remove(self):
        self.close()
        if not self.b.args.keep:
            shutil.rmtree(self.store, ignore_errors=True)


class Report:
    """The figures of a benchmark run: a table of rows against targets and the
    machine's limits, notes, failed steps (shared by threads.py)."""

    def __init__(self):
        self.table = []   # (label, value, unit, target, limit, extra) or a heading string
        self.notes = []
        self.failed = []

    def head(self, text):
        self.table.append(text)

    def row(self, label, value, unit, target=None, limit=None, extra=""):
        """target: (op, number) with op '<=' or '>='; limit: the machine's figure (same unit)."""
        self.table.append((label, value, unit, target, limit, extra))

    def note(self, text):
        self.notes.append(text)
        log("note: " + text)

    def print_table(self):
        ok = True
        w = 56
        print(f"{'figure':{w}}{'value':>10} {'unit':4} {'target':>9}{'limit':>10}{'ratio':>7}  verdict")
        print("-" * (w + 50))
        for r in self.table:
            if isinstance(r, str):
                print(r)
                continue
            label, value, unit, target, limit, extra = r

            def f(v):
                if v is None:
                    return "-"
                return f"{v:.3f}" if unit in ("s", "x") else f"{v:.1f}"
            verdict = ""
            if target is not None and value is not None:
                op, t = target
                good = value <= t if op == "<=" else value >= t
                ok &= good
                verdict = "PASS" if good else "FAIL"
            ratio = f"{value / limit:.2f}" if value is not None and limit else "-"
            tgt = f"{target[0]} {target[1]:g}" if target else ""
            print(f"     {label:{w - 5}}{f(value):>10} {unit:4} {tgt:>9}{f(limit):>10}{ratio:>7}  {verdict}"
                  + (f"  {extra}" if extra else ""))
        return ok

    def print_all(self, verdict=None):
        """The table, the notes, the failed steps and, given what it is about, a
        PASS/FAIL verdict line.  True if every target was met and no step failed."""
        ok = self.print_table() and not self.failed
        if self.notes:
            print()
            for n in self.notes:
                print("note: " + n)
        if self.failed:
            print()
            for f in self.failed:
                print("failed: " + f)
        if verdict:
            print()
            print("verdict: " + ("PASS" if ok else "FAIL") + f" ({verdict})")
        return ok


class Bench(Report):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.work = args.workdir
        self.lz = args.lazarus
        self.prog = {p: build(p, self.work) for p in ("incrheap", "forkheap", "mat", "cell")}
        self.results = {}

    def hot_memory(self, size):
        """As files_io.py: sync, then write and delete a scratch file of `size` bytes, so that
        the page cache of the timed write that follows reuses memory freed an instant before
        (memory this VM has not touched lately costs 1-3 s per GiB on first touch)."""
        os.sync()
        scratch = os.path.join(self.work, "scratch.bin")
        write_file(scratch, size, fsync=False)
        os.unlink(scratch)
        os.sync()

    def free_gib(self):
        return shutil.disk_usage(self.work).free / GiB

    def forkheap(self, mib, advice, n, pct):
        r = subprocess.run([self.prog["forkheap"], str(mib), advice, str(n), str(pct)], capture_output=True,
                           text=True, timeout=self.args.timeout)
        if r.returncode != 0:
            raise BenchError(f"forkheap failed: {r.stderr.strip()}")
        lines = r.stdout.splitlines()
        forks = [kv(l, "seconds") * 1e3 for l in lines if l.startswith("fork")]
        copies = [kv(l, "seconds") * 1e3 for l in lines if l.startswith("copy")]
        return {"fork_ms": forks, "copy_ms": copies, "hugekb": kv(lines[0], "hugekb", int),
                "pte_kb": kv(lines[0], "pte_kb", int)}

    # ---- 1. the pause of a 4 GiB heap -----------------------------------------

    def sec_pause(self):
        mib = self.args.pause_mib
        nsteady = max(5, self.args.reps)
        thp = thp_mode()
        self.head(f"1. Program pause, {mib} MiB heap (a distinct stamp per page, lz4), "
                  f"1 % of the pages changed before each later checkpoint; THP {thp or 'unavailable'}")
        free = self.free_gib()
        if free < 12:
            self.head(f"   skipped: {free:.1f} GiB free on {self.work}, 12 GiB wanted")
            return
        res = self.results["pause"] = {"thp": thp}
        for advice, label, target in (("nohuge", "4 KiB pages (MADV_NOHUGEPAGE)", 150.0),
                                      ("huge", "transparent huge pages (MADV_HUGEPAGE)", 20.0)):
            if advice == "huge" and thp in (None, "never"):
                self.head(f"   {label}: skipped, transparent huge pages are unavailable "
                          f"({THP_ENABLED}: {thp or 'missing'})")
                continue
            log(f"pause: {label}: bare fork() of the heap")
            lim = self.forkheap(mib, advice, nsteady, 1)
            fork_ms, copy_ms = med(lim["fork_ms"]), med(lim["copy_ms"])
            log(f"pause: {label}: checkpoints")
            job = Job(self, "pause-" + advice, [self.prog["incrheap"], str(mib), "stamp", advice],
                      compress="lz4", env={"LAZARUS_TRACE": "1"})
            try:
                fill_huge = kv(job.ready, "hugekb", int)
                walls = [job.checkpoint()]
                dirty = []
                for _ in range(nsteady):
                    dirty.append(job.cmd("dirty 1", "dirtied"))
                    walls.append(job.checkpoint())
                job.quit()
                rows = job.rows()
                traces = job.traces()
            finally:
                job.remove()
            idx = [i for _, i in walls]
            pauses = [rows[i]["pause_ms"] for i in idx]
            r = res[advice] = {
                "fork_ms": lim["fork_ms"], "copy_1pct_ms": lim["copy_ms"], "forkheap_hugekb": lim["hugekb"],
                "hugekb_after_fill": fill_huge, "hugekb_after_changes": [kv(d, "hugekb", int) for d in dirty],
                "pte_kb_after_changes": [kv(d, "pte_kb", int) for d in dirty],
                "pause_ms": pauses, "durable_ms": [rows[i]["durable_ms"] for i in idx],
                "changed_bytes": [rows[i]["changed_bytes"] for i in idx],
                "stored_bytes": [rows[i]["stored_bytes"] for i in idx],
                "data_bytes": [rows[i]["data_bytes"] for i in idx],
                "checkpoint_wall_s": [w for w, _ in walls], "trace": traces,
            }
            steady = med(pauses[1:])
            self.head(f"   {label}")
            self.row("bare fork() of the same heap (limit)", fork_ms, "ms")
            self.row("copy 1 % of its pages to fresh memory (limit)", copy_ms, "ms")
            self.row("first checkpoint: pause (registers the heap)", pauses[0], "ms", ("<=", target), fork_ms)
            self.row(f"later checkpoints: pause, median of {len(pauses) - 1}", steady, "ms", ("<=", target), fork_ms,
                     "each: " + " ".join(f"{p:.0f}" for p in pauses[1:]))
            self.row("later checkpoints: durable, median", med(r["durable_ms"][1:]), "ms")
            if advice == "huge":
                self.row("heap in huge pages: after fill / after changes", fill_huge / 1024, "MiB",
                         extra=f"/ {r['hugekb_after_changes'][-1] / 1024:.0f} MiB (fork limit: "
                               f"{lim['hugekb'] / 1024:.0f} MiB)")
                if fill_huge < (mib << 10) // 2:
                    self.note(f"only {fill_huge >> 10} MiB of the {mib} MiB heap got huge pages (fragmented memory?)")
            for k, t in ((0, "first"), (len(traces) - 1, "last")):
                if k < len(traces):
                    steps, prev = [], 0.0
                    for step, ms in traces[k]:
                        steps.append(f"{step} {ms - prev:.1f}")
                        prev = ms
                    self.note(f"pause steps, {label}, {t} checkpoint (ms): " + ", ".join(steps))
            # every page of the heap holds data (a stamp): a checkpoint that describes
            # less data than that lost part of the heap
            short = [(i, d) for i, d in zip(idx, r["data_bytes"]) if d < (mib << 20)]
            if short:
                self.note(f"BUG? {label}: checkpoints " + ", ".join(f"{i} ({d / MiB:.0f} MiB)" for i, d in short)
                          + f" describe less data than the {mib} MiB heap, whose every page holds a stamp: "
                          f"a restart from them would not bring the heap back")
                self.failed.append(f"pause/{advice}: checkpoints {', '.join(str(i) for i, _ in short)} miss heap data")

    # ---- 2. incremental checkpoints of 1 GiB, 1 % changed ---------------------

    def sec_incr(self):
        mib = self.args.mib
        n = max(5, self.args.reps)
        self.head(f"2. Incremental checkpoint, {mib} MiB of random data, 1 % of the pages rewritten "
                  f"with new random data before each, --compress none, median of {n}")
        if self.free_gib() < 4:
            self.head(f"   skipped: {self.free_gib():.1f} GiB free on {self.work}, 4 GiB wanted")
            return
        lim = self.forkheap(mib, "nohuge", n, 1)
        res = self.results["incr"] = {"fork_ms": lim["fork_ms"], "copy_1pct_ms": lim["copy_ms"]}
        # what writing the changed bytes durably costs the disk here
        ddfile = os.path.join(self.work, "dd.small")
        dd = []
        for _ in range(n):
            os.sync()
            t, _ = timed(["dd", "if=/dev/zero", f"of={ddfile}", "bs=1M", f"count={max(1, mib // 100)}",
                          "conv=fsync", "status=none"])
            dd.append(t * 1e3)
            os.unlink(ddfile)
        res["dd_1pct_ms"] = dd
        for variant, env in (("fork", {}), ("nofork", {"LAZARUS_NO_FORK": "1"})):
            log(f"incr: {variant}")
            job = Job(self, "incr-" + variant, [self.prog["incrheap"], str(mib), "random", "nohuge"],
                      compress="none", env=dict(env, LAZARUS_TRACE="1"))
            try:
                os.sync()
                first = job.checkpoint()
                walls, dirtied = [], []
                for _ in range(n):
                    d = job.cmd("dirty 1", "dirtied")
                    dirtied.append(int(d.split()[1]) * 4096)
                    os.sync()
                    walls.append(job.checkpoint())
                job.quit()
                rows = job.rows()
                traces = job.traces()
                manifests = [job.manifest_bytes(i) for _, i in walls]
            finally:
                job.remove()
            idx = [i for _, i in walls]
            r = res[variant] = {
                "manifest_bytes": manifests,
                "stored_over_rewritten": [rows[i]["stored_bytes"] / d for i, d in zip(idx, dirtied)],
                "stored_manifest_over_rewritten": [(rows[i]["stored_bytes"] + m) / d
                                                   for i, d, m in zip(idx, dirtied, manifests)],
                "first": rows[first[1]], "first_wall_s": first[0],
                "rows": [rows[i] for i in idx], "wall_s": [w for w, _ in walls], "dirtied_bytes": dirtied,
                "stored_over_changed": [rows[i]["stored_bytes"] / rows[i]["changed_bytes"] for i in idx],
                "changed_over_dirtied": [rows[i]["changed_bytes"] / d for i, d in zip(idx, dirtied)],
                "trace": traces[-1] if traces else None,
            }
            pause = med([x["pause_ms"] for x in r["rows"]])
            durable = med([x["durable_ms"] for x in r["rows"]])
            if variant == "fork":
                self.row("stored / changed bytes (`lazarus list`)", med(r["stored_over_changed"]), "x", ("<=", 1.2),
                         None, f"changed {med([x['changed_bytes'] for x in r['rows']]) / MiB:.2f} MiB = "
                         f"{med(r['changed_over_dirtied']):.3f} x the {med(dirtied) / MiB:.2f} MiB the program rewrote")
                self.row("stored / bytes the program rewrote", med(r["stored_over_rewritten"]), "x", None, None,
                         f"with the manifest ({med(manifests) / 1024:.0f} KiB): "
                         f"{med(r['stored_manifest_over_rewritten']):.3f}")
                self.row("pause", pause, "ms", ("<=", 20.0), med(lim["copy_ms"]),
                         f"limit: copy 1 % to fresh memory; bare fork {med(lim['fork_ms']):.1f} ms")
                self.row("durable (from the pause)", durable, "ms", ("<=", 100.0), med(dd),
                         f"limit: dd {max(1, mib // 100)} MiB conv=fsync")
                self.row("`lazarus checkpoint` until it returned", med(r["wall_s"]) * 1e3, "ms")
            else:
                self.row("LAZARUS_NO_FORK=1 (written in the pause): pause", pause, "ms", None, med(lim["copy_ms"]))
                self.row("  the same: stored / changed", med(r["stored_over_changed"]), "x")
            if r["trace"]:
                steps, prev = [], 0.0
                for step, ms in r["trace"]:
                    steps.append(f"{step} {ms - prev:.1f}")
                    prev = ms
                self.note(f"pause steps, incremental {variant}, last checkpoint (ms): " + ", ".join(steps))

    # ---- 3a + 4. full checkpoint vs dd; restart ------------------------------

    def sec_full(self):
        mib = self.args.mib
        reps = self.args.reps
        self.head(f"3. Full checkpoint of {mib} MiB of random data until durable (`lazarus checkpoint`), "
                  f"vs dd bs=1M count={mib} conv=fsync; {reps} repetitions, medians of per-repetition ratios")
        if self.free_gib() < 2 * mib / 1024 + 2:
            self.head(f"   skipped: {self.free_gib():.1f} GiB free on {self.work}")
            return
        src = os.path.join(self.work, "random.src")
        log("full: making the random source file for dd")
        write_file(src, mib * MiB, fsync=True)
        read_file(src)  # in the page cache: dd copies from memory
        ddfile = os.path.join(self.work, "dd.bin")
        tsfile = os.path.join(self.work, "restarted.ns")
        figs = self.results["full"] = []
        try:
            for rep in range(reps):
                fig = {}
                for name, src_path in (("dd_zero", "/dev/zero"), ("dd_rand", src)):
                    self.hot_memory(mib * MiB)
                    fig[name], _ = timed(["dd", f"if={src_path}", f"of={ddfile}", "bs=1M", f"count={mib}",
                                          "conv=fsync", "status=none"])
                    os.unlink(ddfile)
                codecs = ("none", "lz4") if rep % 2 == 0 else ("lz4", "none")
                for codec in codecs:
                    log(f"full: repetition {rep + 1}/{reps}, {codec}")
                    self.full_one(fig, codec, mib, tsfile, rep)
                fig["first_touch"], _ = timed(["dd", "if=/dev/zero", "of=/dev/null", f"bs={mib}M", "count=1",
                                               "status=none"])
                figs.append(fig)
        finally:
            if os.path.exists(src):
                os.unlink(src)

        def m(key, scale=1.0):
            return med([f.get(key) * scale if f.get(key) is not None else None for f in figs])

        def ratio(num, *den):
            return med([f[num] / sum(f[d] for d in den) for f in figs
                        if f.get(num) is not None and all(f.get(d) for d in den)])

        self.row("dd if=/dev/zero conv=fsync (limit)", m("dd_zero"), "s")
        self.row("dd if=random file (cached) conv=fsync (limit)", m("dd_rand"), "s")
        for codec in ("none", "lz4"):
            self.row(f"checkpoint, {codec}: until durable", m("ckpt_" + codec), "s", None, None,
                     f"pause {m('pause_' + codec):.1f} ms, durable {m('durable_' + codec):.0f} ms, "
                     f"stored {m('stored_' + codec) / MiB:.0f} MiB")
            self.row(f"  ratio to dd of /dev/zero", ratio("ckpt_" + codec, "dd_zero"), "x", ("<=", 1.2))
            self.row(f"  ratio to dd of the random file", ratio("ckpt_" + codec, "dd_rand"), "x", ("<=", 1.2))
        self.head(f"4. Restart of that {mib} MiB image right after the checkpoint (written with O_DIRECT: not in the page cache), "
                  f"from launching `lazarus restart` until the program runs")
        self.row("cat of the image files (limit)", m("cat_none"), "s")
        self.row(f"first touch of {mib} MiB (dd bs={mib}M, limit)", m("first_touch"), "s")
        for codec in ("none", "lz4"):
            self.row(f"restart, {codec}", m("restart_" + codec), "s", ("<=", 0.5),
                     None if m("cat_" + codec) is None else m("cat_" + codec) + m("first_touch"),
                     f"limit: cat + first touch")
            self.row(f"  restorer's own time (LAZARUS_TRACE), {codec}", m("restorer_" + codec), "s", None, None,
                     f"of which memory filled and verified {m('restorer_fill_' + codec):.3f} s")

    def full_one(self, fig, codec, mib, tsfile, rep):
        job = Job(self, f"full-{codec}", [self.prog["incrheap"], str(mib), "random", "nohuge", tsfile],
                  compress=codec)
        try:
            self.hot_memory(mib * MiB)
            fig["ckpt_" + codec], index = job.checkpoint()
            row = job.rows()[index]
            fig["pause_" + codec] = row["pause_ms"]
            fig["durable_" + codec] = row["durable_ms"]
            fig["stored_" + codec] = row["stored_bytes"]
            # a checkpoint through the API (incremental, nothing changed): after a
            # restart from it, the program writes the time it runs again
            api = job.cmd("api", "api index=")
            api_index = kv(api, "index", int)
            fig["api_" + codec] = kv(api, "seconds")
            job.kill()
            files = [p for p in glob.glob(os.path.join(job.store, "packs", "*")) +
                     glob.glob(os.path.join(job.store, f"ckpt.{api_index:06d}", "*")) if os.path.isfile(p)]
            fig["image_bytes_" + codec] = sum(os.path.getsize(p) for p in files)
            fig["cat_" + codec], _ = timed(["cat"] + files, stdout=subprocess.DEVNULL)
            if os.path.exists(tsfile):
                os.unlink(tsfile)
            t0 = time.time_ns()
            r = subprocess.run([self.lz, "restart", "-d", job.store, "--at", str(api_index)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ, LAZARUS_TRACE="1"), timeout=self.args.timeout)
            if r.returncode != 0:
                why = "the heap came back different" if r.returncode == 4 else r.stderr.strip()[-500:]
                raise BenchError(f"`lazarus restart -d {job.store} --at {api_index}` exited {r.returncode}: {why}")
            with open(tsfile) as f:
                fig["restart_" + codec] = (int(f.read().strip()) - t0) / 1e9
            os.unlink(tsfile)
            steps = [(m.group(2), float(m.group(1))) for m in map(RTRACE_RE.match, r.stderr.splitlines()) if m]
            fig["restorer_trace_" + codec] = steps
            if steps:
                fig["restorer_" + codec] = steps[-1][1] / 1e3
                fill = [ms for s, ms in steps if s.startswith("memory filled")]
                regions = [ms for s, ms in steps if s.startswith("regions mapped")]
                if fill and regions:
                    fig["restorer_fill_" + codec] = (fill[0] - regions[0]) / 1e3
        finally:
            job.remove()

    # ---- 3b. compression of half zero, half random doubles ----------------------

    def sec_compress(self):
        mib = self.args.mib
        reps = self.args.reps
        codecs = ("none", "lz4", "zstd")
        layouts = (("zeropages", "even pages zero, odd pages random doubles in [0,1)", "memory"),
                   ("halfzero", "each page half random doubles in [0,1), half zeros (no zero page)", "none"))
        if self.free_gib() < 2:
            self.head(f"3b. skipped: {self.free_gib():.1f} GiB free on {self.work}")
            return
        self.results["compress"] = {}
        for layout, what, base in layouts:
            self.head(f"3b. First checkpoint of {mib} MiB, {what}; {reps} repetitions (codec order rotated), medians")
            figs = self.results["compress"][layout] = []
            for rep in range(reps):
                fig = {}
                order = codecs[rep % 3:] + codecs[:rep % 3]
                for codec in order:
                    log(f"compress: {layout}, repetition {rep + 1}/{reps}, {codec}")
                    job = Job(self, "compress-" + codec, [self.prog["incrheap"], str(mib), layout, "nohuge"],
                              compress=codec)
                    try:
                        self.hot_memory(mib * MiB // 2)
                        wall, index = job.checkpoint()
                        job.quit()
                        row = job.rows()[index]
                    finally:
                        job.remove()
                    fig[codec] = {"wall_s": wall, "stored": row["stored_bytes"], "durable_ms": row["durable_ms"],
                                  "pause_ms": row["pause_ms"], "memory": row["memory_bytes"], "codec": row["codec"]}
                figs.append(fig)

            def m(codec, key):
                return med([f[codec][key] for f in figs])

            for codec in codecs:
                self.row(f"{codec}: stored", m(codec, "stored") / MiB, "MiB", None, None,
                         f"durable {m(codec, 'durable_ms'):.0f} ms, `lazarus checkpoint` {m(codec, 'wall_s'):.2f} s, "
                         f"memory {m(codec, 'memory') / MiB:.0f} MiB")
            for codec in ("lz4", "zstd"):
                # zero pages are never stored whatever the codec: there, smaller than the data itself
                if base == "memory":
                    self.row(f"memory / stored, {codec}", med([f[codec]["memory"] / f[codec]["stored"] for f in figs]),
                             "x", (">=", 2.0), None, f"none: {m('none', 'memory') / m('none', 'stored'):.2f}")
                else:
                    self.row(f"stored none / {codec}", med([f["none"]["stored"] / f[codec]["stored"] for f in figs]),
                             "x", (">=", 2.0), None, f"memory / stored {m(codec, 'memory') / m(codec, 'stored'):.2f}")
                self.row(f"durable {codec} / none", med([f[codec]["durable_ms"] / f["none"]["durable_ms"] for f in figs]),
                         "x", ("<=", 1.0))

    # ---- 5. libckpt's Table 2 ----------------------------------------------------

    def sec_libckpt(self):
        n_mat, n_cell, k = self.args.mat_n, self.args.cell_n, self.args.libckpt_ckpts
        rows_per = max(1, n_mat // 8)
        self.head(f"5. libckpt's Table 2: reduction = 1 - mean stored of the {k} later checkpoints / memory of the "
                  f"full one (libckpt: MAT {LIBCKPT['MAT']} %, CELL {LIBCKPT['CELL']} %)")
        res = self.results["libckpt"] = {}
        for wl, argv, step in (("MAT", [self.prog["mat"], str(n_mat)], f"rows {rows_per}"),
                               ("CELL", [self.prog["cell"], str(n_cell)], f"steps {self.args.cell_steps}")):
            for codec in ("none", "lz4"):
                log(f"libckpt: {wl}, {codec}")
                job = Job(self, f"{wl.lower()}-{codec}", argv, compress=codec, ready="ready")
                try:
                    first = job.checkpoint()[1]
                    later, work = [], []
                    for _ in range(k):
                        work.append(kv(job.cmd(step, "done"), "seconds"))
                        later.append(job.checkpoint()[1])
                    job.quit()
                    rows = job.rows()
                finally:
                    job.remove()
                full = rows[first]
                stored = [rows[i]["stored_bytes"] for i in later]
                changed = [rows[i]["changed_bytes"] for i in later]
                red = 1 - statistics.mean(stored) / full["memory_bytes"]
                res[f"{wl}_{codec}"] = {"full": full, "later": [rows[i] for i in later], "work_s": work,
                                        "reduction": red}
                desc = (f"{wl}: A, B, C {n_mat}x{n_mat} doubles, {rows_per} rows of C per interval"
                        if wl == "MAT" else
                        f"{wl}: two {n_cell}x{n_cell} byte grids, {self.args.cell_steps} steps per interval")
                self.row(f"{wl}, {codec}: size reduction", red * 100, "%", None, None,
                         f"libckpt {LIBCKPT[wl]} %; full: memory {full['memory_bytes'] / MiB:.0f} MiB, stored {full['stored_bytes'] / MiB:.0f} "
                         f"MiB; later: stored {statistics.mean(stored) / MiB:.1f} MiB, changed "
                         f"{statistics.mean(changed) / MiB:.1f} MiB, pause {med([rows[i]['pause_ms'] for i in later]):.0f}"
                         f" ms, interval {med(work):.2f} s" + (f"  [{desc}]" if codec == "none" else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--reps", type=int, default=5,
                    help="repetitions of the full checkpoints (3, 3b); later checkpoints in 1 and 2: max(5, N)")
    ap.add_argument("--mib", type=int, default=1024, help="heap of 2, 3 and 4 (MiB)")
    ap.add_argument("--pause-mib", type=int, default=4096, help="heap of 1 (MiB)")
    ap.add_argument("--mat-n", type=int, default=2896, help="MAT's matrices are N x N doubles (2896: 64 MiB each)")
    ap.add_argument("--cell-n", type=int, default=8192, help="CELL's grids are N x N bytes (8192: 64 MiB each)")
    ap.add_argument("--cell-steps", type=int, default=4, help="CELL steps between checkpoints (even: both grids)")
    ap.add_argument("--libckpt-ckpts", type=int, default=6, help="checkpoints after the full one in 5")
    store_options(ap, "incremental", "stores, dd files and results.json (default bench/out/incremental)")
    args = ap.parse_args()

    only = SECTIONS
    if args.only:
        only = []
        for s in args.only.split(","):
            s = ALIASES.get(s.strip(), s.strip())
            if s not in SECTIONS:
                ap.error(f"unknown section {s!r} (known: {', '.join(SECTIONS)})")
            only.append(s)
    ready_workdir(args)
    b = Bench(args)
    fstype = subprocess.run(["stat", "-f", "-c", "%T", args.workdir], capture_output=True, text=True).stdout.strip()
    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    load0 = os.getloadavg()
    t0 = time.time()
    for s in SECTIONS:
        if s not in only:
            continue
        log(f"section {s}")
        try:
            getattr(b, "sec_" + s)()
        except (BenchError, RuntimeError, subprocess.SubprocessError, OSError) as e:
            b.head(f"   {s}: FAILED: {e}")
            b.failed.append(f"{s}: {e}")
            log(f"{s} failed: {e}")
    elapsed = time.time() - t0
    load1 = os.getloadavg()

    print(f"Lazarus incremental checkpoints: {args.lazarus} ({git}), store on {args.workdir} ({fstype}), "
          f"{os.cpu_count()} CPUs, THP {thp_mode() or 'unavailable'}")
    print(f"load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end; {elapsed:.0f} s. "
          f"Ratio = value / limit (the machine's figure measured in this run).")
    ok = b.print_all()
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({"lazarus": args.lazarus, "git": git, "fstype": fstype, "thp": thp_mode(),
                   "load": [load0, load1], "seconds": elapsed, "results": b.results,
                   "table": b.table, "notes": b.notes, "failed": b.failed}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
