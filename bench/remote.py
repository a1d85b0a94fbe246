#!/usr/bin/env python3
"""The remote store against its limits (issue 18, "Performance"), every ratio
measured in the same run against versitygw on loopback, which this script
starts (tests/s3server.py's S3Server: plain HTTP and TLS with a CA of its
own) and stops.

  (a) flush:    `run -d DIR --remote URL` of bench/programs/remote_work (MIB
                of random memory): from the checkpoint's commit to its
                publish (the flusher's own "flushed in" trace line) against a
                plain multipart upload of as many bytes (`lazarus-s3 put`,
                the same client alone), and against that upload with a
                CPU-bound process beside it (the program computes beside
                its flush on the same 2 cores); target <= 1.3.  With `run -d s3://`
                in the build (detected): the stream, from the checkpoint's
                request until `list -d s3://` shows it, against the same.
  (b) local + flush: the program's pause (`list --json`) and its compute rate
                during the flush against a local-only job's pause and rate
                over as long after its commit; target within 5 %.
  (c) TLS:      (a) over https against (a) over http (<= 1.3); with
                `--encrypt-key` in the build (detected), TLS + encryption too.
  (d) restart:  `restart -d s3://` into an empty cache until the program's
                first line after it, and the fetch alone (its trace line),
                against downloading as many bytes (`lazarus-s3 get`, which
                checks the MD5 too, and curl alone); target <= 1.5.

Prints a table (medians over --reps) and writes every figure to --json
(default /tmp/lazarus-bench-remote.json).  Standard library only.

    make && python3 bench/remote.py [--reps 1] [--mib 1024] [--lazarus build/bin/lazarus]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import s3server  # noqa: E402  (versitygw started as the tests start it)

TARGET_FLUSH = 1.3
TARGET_LOCAL = 1.05
TARGET_TLS = 1.3
TARGET_RESTART = 1.5


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class Job:
    """A lazarus process: its stdout's slices (remote_work) and stderr lines, read by threads."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen([str(a) for a in argv], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.out, self.err, self.slices = [], [], []
        self.cv = threading.Condition()
        threading.Thread(target=self._pump, args=(self.p.stdout, self.out), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.p.stderr, self.err), daemon=True).start()

    def _pump(self, pipe, into):
        for raw in iter(pipe.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            with self.cv:
                into.append((time.time(), line))
                if line.startswith("slice "):
                    f = line.split()
                    self.slices.append((int(f[1]) / 1e9, int(f[2])))
                self.cv.notify_all()

    def wait_line(self, which, pattern, timeout, after=0):
        """The first line of stdout/stderr at or after index `after` matching: (arrival time, match)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        lines = self.out if which == "out" else self.err
        with self.cv:
            i = after
            while True:
                while i < len(lines):
                    m = rx.search(lines[i][1])
                    if m:
                        return lines[i][0], m
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0 or self.p.poll() is not None and i >= len(lines):
                    tail = "\n".join(l for _, l in self.err[-5:])
                    raise RuntimeError(f"no line /{pattern}/ within {timeout}s (exit {self.p.poll()}):\n{tail}")
                self.cv.wait(min(left, 0.5))

    def rate(self, t0, t1):
        """Work units per second over the slices that ended in (t0, t1]."""
        with self.cv:
            s = [x for x in self.slices if t0 < x[0] <= t1]
        if len(s) < 3:
            return None
        return sum(u for _, u in s[1:]) / (s[-1][0] - s[0][0])

    def kill(self):
        self.p.kill()  # the supervisor: every process of the job ends with it
        self.p.wait(timeout=60)


class Bench:
    def __init__(self, args):
        self.a = args
        self.bin = os.path.dirname(os.path.abspath(args.lazarus))
        self.lz = os.path.join(self.bin, "lazarus")
        self.s3 = os.path.join(self.bin, "lazarus-s3")
        self.work = args.workdir
        self.srv = s3server.S3Server(Path(tempfile.mkdtemp(prefix="lazarus-bench-s3-", dir="/tmp")))
        try:
            self._setup(args)
        except BaseException:
            self.close()  # the servers never outlive the script
            raise

    def _setup(self, args):
        self.bucket = self.srv.bucket("bench")
        self.n = 0
        self.prog = os.path.join(self.work, "remote_work")
        subprocess.run([os.environ.get("CC", "cc"), "-std=c17", "-O2", "-o", self.prog,
                        os.path.join(ROOT, "bench", "programs", "remote_work.c")], check=True)
        self.raw = os.path.join(self.work, "raw.bin")
        with open(self.raw, "wb") as f:
            for _ in range(args.mib // 16 + (args.mib % 16 > 0)):
                f.write(os.urandom(16 << 20))
            f.truncate(args.mib << 20)
        runhelp = subprocess.run([self.lz, "run", "--help"], capture_output=True, text=True)
        helptext = runhelp.stdout + runhelp.stderr
        self.has_encrypt = "--encrypt-key" in helptext
        # the stream: a build without it refuses `run -d s3://` ("not done yet")
        probe = subprocess.run([self.lz, "run", "-d", self.url("probe"), "--", "/bin/true"], capture_output=True,
                               text=True, env=self.env(), timeout=args.timeout)
        self.has_stream = probe.returncode == 0
        self.key = os.path.join(self.work, "bench.key")
        if self.has_encrypt:
            with open(self.key, "wb") as f:
                f.write(os.urandom(32))
            os.chmod(self.key, 0o600)

    def env(self, tls=False, trace=False):
        e = dict(os.environ, **self.srv.env(self.srv.tls_endpoint if tls else None))
        e.pop("LAZARUS_TRACE", None)
        if trace:
            e["LAZARUS_TRACE"] = "1"
        return e

    def tls_opts(self, tls):
        return ["--ca-file", str(self.srv.ca_file)] if tls else []

    def url(self, what):
        self.n += 1
        return f"s3://{self.bucket}/{what}{self.n}"

    def tool(self, *argv, tls=False):
        r = subprocess.run([self.s3, *self.tls_opts(tls), *argv], env=self.env(tls), capture_output=True, text=True,
                           timeout=self.a.timeout)
        if r.returncode != 0:
            raise RuntimeError(f"lazarus-s3 {' '.join(argv)}: {r.stderr.strip()}")
        return float(r.stdout.split()[1])

    def put(self, tls=False):
        """(limit) a plain multipart upload of the same number of bytes."""
        return self.tool("put", self.url("raw") + "/raw.bin", self.raw, tls=tls)

    def put_busy(self):
        """(limit) the same upload with one CPU-bound process beside it: on this 2-core machine with the
        server on it too, a flush or a stream shares the cores with the program computing, which a
        bare put does not."""
        burner = subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"])
        try:
            return self.put()
        finally:
            burner.kill()
            burner.wait()

    def get(self, url):
        out = os.path.join(self.work, "got.bin")
        s = self.tool("get", url, out)
        os.unlink(out)
        return s

    def curl_get(self, url):
        """curl alone (one connection, no checksum), signed the same way; the keys in a config file, not argv."""
        if not shutil.which("curl"):
            return None
        bucket, key = url[5:].split("/", 1)
        cfg = os.path.join(self.work, "curl.cfg")
        with open(cfg, "w") as f:
            os.chmod(cfg, 0o600)
            f.write(f'user = "{s3server.ACCESS}:{s3server.SECRET}"\n')
        t0 = time.monotonic()
        r = subprocess.run(["curl", "-sfK", cfg, "--aws-sigv4", "aws:amz:us-east-1:s3", "-H",
                            "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                            "-o", os.path.join(self.work, "got.bin"), f"{self.srv.endpoint}/{bucket}/{key}"],
                           capture_output=True, timeout=self.a.timeout)
        s = time.monotonic() - t0
        os.unlink(cfg)
        if os.path.exists(os.path.join(self.work, "got.bin")):
            os.unlink(os.path.join(self.work, "got.bin"))
        return s if r.returncode == 0 else None

    def pause_ms(self, store, index):
        r = subprocess.run([self.lz, "list", "-d", store, "--json"], capture_output=True, text=True, check=True)
        return next(e["pause_ms"] for e in json.loads(r.stdout) if e["index"] == index)

    def checkpoint_job(self, store, extra, env, remote):
        """remote_work under `lazarus run`, one checkpoint: its figures; the job is left running."""
        shutil.rmtree(store, ignore_errors=True)
        job = Job([self.lz, "run", "-d", store, "-i", "0", *extra, "--", self.prog, str(self.a.mib)], env)
        job.wait_line("out", r"^filled", self.a.timeout)
        time.sleep(1.0)  # a second of compute before, for scale
        t_req = time.time()
        r = subprocess.run([self.lz, "checkpoint", "-d", store], capture_output=True, text=True, env=env,
                           timeout=self.a.timeout)
        t_commit = time.time()
        if r.returncode != 0:
            job.kill()
            raise RuntimeError(f"lazarus checkpoint: {r.stderr.strip()}")
        index = int(r.stdout.split()[-1])
        res = {"index": index, "pause_ms": self.pause_ms(store, index), "rate_before": job.rate(t_req - 1.0, t_req),
               "t_commit": t_commit}
        if remote:
            t_pub, m = job.wait_line("err", rf"checkpoint {index} flushed in ([0-9.]+) s", self.a.timeout)
            res["flush_s"] = float(m.group(1))
            res["rate_during"] = job.rate(t_commit, t_pub)
        return job, res

    def flush(self, tls=False, encrypt=False):
        url = self.url("flush")
        extra = ["--remote", url, *self.tls_opts(tls)] + (["--encrypt-key", self.key] if encrypt else [])
        job, res = self.checkpoint_job(os.path.join(self.work, "store"), extra, self.env(tls, trace=True), True)
        job.kill()
        res["url"] = url
        return res

    def local(self, window):
        job, res = self.checkpoint_job(os.path.join(self.work, "local"), [], self.env(), False)
        time.sleep(window + 0.2)
        res["rate_during"] = job.rate(res["t_commit"], res["t_commit"] + window)
        job.kill()
        return res

    def stream(self):
        """`run -d s3://`: from the checkpoint's request until `list -d s3://` shows it published."""
        url = self.url("stream")
        env = self.env()
        job = Job([self.lz, "run", "-d", url, "-i", "0", "--", self.prog, str(self.a.mib)], env)
        try:
            job.wait_line("out", r"^filled", self.a.timeout)
            t0 = time.monotonic()
            r = subprocess.run([self.lz, "checkpoint", "-d", url], capture_output=True, text=True, env=env,
                               timeout=self.a.timeout)
            if r.returncode != 0:
                raise RuntimeError(f"lazarus checkpoint -d {url}: {r.stderr.strip()}")
            while time.monotonic() - t0 < self.a.timeout:
                lr = subprocess.run([self.lz, "list", "-d", url, "--json"], capture_output=True, text=True, env=env)
                if lr.returncode == 0 and json.loads(lr.stdout or "[]"):
                    return time.monotonic() - t0
                time.sleep(0.02)
            raise RuntimeError("the streamed checkpoint was not published")
        finally:
            job.kill()

    def restart(self, url):
        cache = os.path.join(self.work, "cache")
        shutil.rmtree(cache, ignore_errors=True)
        subprocess.run(["sync"])
        t0 = time.time()
        job = Job([self.lz, "restart", "-d", url, "--files-as-they-are", "--cache", cache], self.env(trace=True))
        try:
            t_run, _ = job.wait_line("out", r"^slice ", self.a.timeout)
            _, m = job.wait_line("err", r"fetched \d+ objects, \d+ bytes, in ([0-9.]+) s", 1)
        except RuntimeError:
            if not job.out:
                raise
            m = None  # a build without the trace line
        finally:
            job.kill()
        return {"restart_s": t_run - t0, "fetch_s": float(m.group(1)) if m else None}

    def rep(self):
        r = {"put_s": self.put(), "put_busy_s": self.put_busy()}
        f = self.flush()
        r.update({"flush_s": f["flush_s"], "flush_pause_ms": f["pause_ms"], "flush_rate_before": f["rate_before"],
                  "flush_rate_during": f["rate_during"]})
        rawurl = self.url("raw") + "/raw.bin"
        self.tool("put", rawurl, self.raw)
        r["get_s"] = self.get(rawurl)
        r["curl_get_s"] = self.curl_get(rawurl)
        r.update(self.restart(f["url"]))
        lo = self.local(f["flush_s"])
        r.update({"local_pause_ms": lo["pause_ms"], "local_rate_before": lo["rate_before"],
                  "local_rate_during": lo["rate_during"]})
        r["tls_put_s"] = self.put(tls=True)
        r["tls_flush_s"] = self.flush(tls=True)["flush_s"]
        if self.has_encrypt:
            r["tls_enc_flush_s"] = self.flush(tls=True, encrypt=True)["flush_s"]
        if self.has_stream:
            r["stream_s"] = self.stream()
        return r

    def close(self):
        self.srv.stop()
        shutil.rmtree(self.srv.root, ignore_errors=True)
        if not self.a.keep:
            for d in ("store", "local", "cache", "raw.bin"):
                p = os.path.join(self.work, d)
                shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else (os.path.exists(p) and os.unlink(p))


def med(reps, k):
    v = [r[k] for r in reps if r.get(k) is not None]
    return statistics.median(v) if v else None


def table(reps, mib, b):
    m = {k: med(reps, k) for k in reps[0]}
    rows = []

    def row(name, value, unit, limit_name, limit, target, lower_better=True):
        ratio = value / limit if value is not None and limit else None
        ok = None if ratio is None or target is None else (ratio <= target if lower_better else ratio >= target)
        rows.append({"figure": name, "value": value, "unit": unit, "against": limit_name, "limit": limit,
                     "ratio": ratio, "target": target, "ok": ok})

    row(f"(a) flush {mib} MiB, commit -> publish", m["flush_s"], "s", "lazarus-s3 put", m["put_s"], TARGET_FLUSH)
    row(f"(a) flush {mib} MiB, commit -> publish", m["flush_s"], "s", "put beside a busy core", m["put_busy_s"],
        TARGET_FLUSH)
    if "stream_s" in m:
        row(f"(a) stream {mib} MiB until published", m["stream_s"], "s", "lazarus-s3 put", m["put_s"], TARGET_FLUSH)
        row(f"(a) stream {mib} MiB until published", m["stream_s"], "s", "put beside a busy core", m["put_busy_s"],
            TARGET_FLUSH)
    row("(b) pause, local + flush", m["flush_pause_ms"], "ms", "local-only pause", m["local_pause_ms"], TARGET_LOCAL)
    row("(b) compute rate during the flush", m["flush_rate_during"], "units/s", "local-only, as long after commit",
        m["local_rate_during"], 1 / TARGET_LOCAL, lower_better=False)
    row("(b) compute rate during the flush", m["flush_rate_during"], "units/s", "same job before the checkpoint",
        m["flush_rate_before"], None)
    row("(c) flush over TLS", m["tls_flush_s"], "s", "flush over http", m["flush_s"], TARGET_TLS)
    row("(c) lazarus-s3 put over TLS", m["tls_put_s"], "s", "put over http", m["put_s"], None)
    if "tls_enc_flush_s" in m:
        row("(c) flush over TLS + --encrypt-key", m["tls_enc_flush_s"], "s", "flush over http", m["flush_s"], TARGET_TLS)
    row(f"(d) restart {mib} MiB from s3, empty cache", m["restart_s"], "s", "lazarus-s3 get", m["get_s"], TARGET_RESTART)
    row("(d) restart, the fetch alone", m["fetch_s"], "s", "lazarus-s3 get", m["get_s"], None)
    if m.get("curl_get_s"):
        row(f"(d) restart {mib} MiB from s3, empty cache", m["restart_s"], "s", "curl alone", m["curl_get_s"], None)
        row("(d) restart, the fetch alone", m["fetch_s"], "s", "curl alone", m["curl_get_s"], None)
    print(f"{'figure':44} {'value':>10} {'':7} {'against':34} {'limit':>10} {'ratio':>6} target")
    for r in rows:
        v = "n/a" if r["value"] is None else f"{r['value']:.3f}"
        lim = "n/a" if r["limit"] is None else f"{r['limit']:.3f}"
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
        tgt = "" if r["target"] is None else ("<= " if r["target"] >= 1 else ">= ") + f"{r['target']:.2f}" + \
            ("" if r["ok"] is None else ("  ok" if r["ok"] else "  MISSED"))
        print(f"{r['figure']:44} {v:>10} {r['unit']:7} {r['against']:34} {lim:>10} {ratio:>6} {tgt}")
    if not b.has_stream:
        print("(a) stream: `run -d s3://` is not in this build")
    if not b.has_encrypt:
        print("(c) TLS + encryption: `--encrypt-key` is not in this build")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--workdir", default=os.path.join(ROOT, "bench", "out", "remote"))
    ap.add_argument("--lazarus", default=os.path.join(ROOT, "build", "bin", "lazarus"))
    ap.add_argument("--json", default="/tmp/lazarus-bench-remote.json")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--keep", action="store_true", help="keep the stores and the cache")
    a = ap.parse_args()
    if not os.access(a.lazarus, os.X_OK):
        sys.exit(f"bench: {a.lazarus} not found; run make first")
    if not s3server.versitygw_path():
        sys.exit("bench: versitygw is not installed (scripts/deps.sh installs it)")
    os.makedirs(a.workdir, exist_ok=True)
    a.workdir = os.path.abspath(a.workdir)
    b = Bench(a)
    reps = []
    try:
        for i in range(a.reps):
            log(f"repetition {i + 1} of {a.reps}")
            reps.append(b.rep())
            log(json.dumps(reps[-1]))
        rows = table(reps, a.mib, b)
    finally:
        b.close()
    with open(a.json, "w") as f:
        json.dump({"mib": a.mib, "lazarus": a.lazarus, "stream": b.has_stream, "encrypt": b.has_encrypt,
                   "reps": reps, "table": rows}, f, indent=1)
    log(f"figures in {a.json}")


if __name__ == "__main__":
    main()
