"""A real S3 server for the remote-store tests: versitygw on loopback, plain
and TLS, with its own data directory and root keys, and a fault proxy.

`s3server` (a session fixture, in conftest.py's style) starts two versitygw
processes on one data directory: plain HTTP, and HTTPS with a certificate of
a CA the fixture makes with openssl (`ca_file`).  Both are stopped by PID at
the session's end (conftest.persistent keeps _no_leftovers off them).  A
bucket is a directory of the data directory (versitygw's posix backend):
`bucket()` makes a fresh one.

A third versitygw (`vhost_endpoint`, http://localhost:PORT) takes the bucket
from the host name (`--virtual-domain localhost`; curl resolves BUCKET.localhost
to loopback itself).

`FaultProxy` stands between a client and the plain server (Python standard
library only; `heads` keeps the first bytes of each connection it passed): `pass` forwards, `refuse` closes its listening socket (the
connection is refused), `cut` forwards a connection's first `cut_after`
request bytes then closes both sides (an upload cut in the middle), `stall`
accepts and never answers, `503` answers every request "503 SlowDown".  A
fault can be limited to the next `count` connections, after which it passes.

versitygw: ~/go/bin/versitygw or on PATH (scripts/deps.sh installs it with
`go install github.com/versity/versitygw/cmd/versitygw@v1.8.0`); the tests
are skipped, saying so, only when it is nowhere.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

import conftest

ACCESS = "LZTESTACCESS"
SECRET = "lz-test-secret-" + secrets.token_hex(8)


def versitygw_path() -> str | None:
    for p in (os.environ.get("LAZARUS_VERSITYGW"), shutil.which("versitygw"),
              os.path.expanduser("~/go/bin/versitygw"), "/root/go/bin/versitygw"):
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"versitygw exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"versitygw did not listen on {port} within {timeout}s")


def make_ca(d: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 and localhost signed by it."""
    ca_key, ca_crt = d / "ca.key", d / "ca.crt"
    key, csr, crt, ext = d / "server.key", d / "server.csr", d / "server.crt", d / "ext.cnf"
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=lazarus test CA",
        "-keyout", str(ca_key), "-out", str(ca_crt))
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr))
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", "2", "-extfile", str(ext), "-out", str(crt))
    for p in (ca_crt, crt):
        os.chmod(p, 0o644)
    return ca_crt, crt, key


class S3Server:
    def __init__(self, root: Path):
        self.root = root
        self.data = root / "data"
        self.data.mkdir()
        self.procs: list[subprocess.Popen] = []
        self.ca_file, crt, key = make_ca(root)
        exe = versitygw_path()
        env = dict(os.environ, ROOT_ACCESS_KEY_ID=ACCESS, ROOT_SECRET_ACCESS_KEY=SECRET)
        self.port = free_port()
        self.tls_port = free_port()
        self.vhost_port = free_port()  # bucket in the host name: BUCKET.localhost (curl resolves it to loopback)
        for port, extra in ((self.port, []), (self.tls_port, ["--cert", str(crt), "--key", str(key)]),
                            (self.vhost_port, ["--virtual-domain", "localhost"])):
            log = open(root / f"versitygw.{port}.log", "wb")
            p = subprocess.Popen([exe, "--port", f"127.0.0.1:{port}", "--keep-alive", "-q", *extra, "posix", str(self.data)],
                                 env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            log.close()
            conftest.persistent.add(p.pid)
            self.procs.append(p)
            wait_port(port, p)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.tls_endpoint = f"https://127.0.0.1:{self.tls_port}"
        self.vhost_endpoint = f"http://localhost:{self.vhost_port}"
        self._n = 0

    def bucket(self, prefix: str = "lz") -> str:
        """A new, empty bucket (readable by every user of the tests)."""
        self._n += 1
        name = f"{prefix}-{os.getpid()}-{self._n}-{secrets.token_hex(3)}"
        (self.data / name).mkdir()
        return name

    def env(self, endpoint: str | None = None, **extra) -> dict:
        e = {"AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ENDPOINT_URL": endpoint or self.endpoint,
             "AWS_REGION": "us-east-1"}
        e.update(extra)
        return e

    def objects(self, bucket: str) -> dict[str, Path]:
        """Every object of a bucket, by key, as versitygw keeps them (files)."""
        out = {}
        base = self.data / bucket
        for dirpath, dirnames, files in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".sgw")]
            for f in files:
                p = Path(dirpath) / f
                out[str(p.relative_to(base))] = p
        return out

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.kill(p.pid, 9)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            conftest.persistent.discard(p.pid)


@pytest.fixture(scope="session")
def s3server():
    if not versitygw_path():
        pytest.skip("versitygw is not installed (scripts/deps.sh installs it: "
                    "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
    root = Path(tempfile.mkdtemp(prefix="lazarus-s3-", dir="/tmp"))
    os.chmod(root, 0o755)
    srv = S3Server(root)
    yield srv
    srv.stop()
    shutil.rmtree(root, ignore_errors=True)


class FaultProxy:
    """A TCP proxy to 127.0.0.1:target with faults (module docstring)."""

    def __init__(self, target: int):
        self.target = target
        self.port = free_port()
        self.mode = "pass"
        self.count = None          # connections the fault applies to (None: all)
        self.cut_after = 64 * 1024  # `cut`: request bytes forwarded before the cut
        self.connections = 0
        self.faulted = 0
        self.heads: list[bytes] = []  # the first bytes of each connection passed (a request's line and headers)
        self.events: list[tuple] = []  # (monotonic time, mode, request line) per connection, to say what stalled
        self._lock = threading.Lock()
        self._stop = False
        self._ls = None
        self._listen()
        self._thr = threading.Thread(target=self._accept_loop, daemon=True)
        self._thr.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listen(self):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        ls.settimeout(0.1)
        self._ls = ls

    def set(self, mode: str, count: int | None = None, cut_after: int | None = None) -> None:
        with self._lock:
            if mode == "refuse" and self._ls is not None:
                self._ls.close()
                self._ls = None
            elif mode != "refuse" and self._ls is None:
                self._listen()
            self.mode, self.count, self.faulted = mode, count, 0
            if cut_after is not None:
                self.cut_after = cut_after

    def _fault_now(self) -> str:
        with self._lock:
            self.connections += 1
            if self.mode == "pass" or (self.count is not None and self.faulted >= self.count):
                return "pass"
            self.faulted += 1
            return self.mode

    def _accept_loop(self):
        while not self._stop:
            ls = self._ls
            if ls is None:
                time.sleep(0.05)
                if self.count is not None and self.mode == "refuse":
                    pass
                continue
            try:
                c, _ = ls.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._serve, args=(c, self._fault_now()), daemon=True).start()

    def _note(self, mode: str, first: bytes) -> None:
        with self._lock:
            self.events.append((time.monotonic(), mode, first.split(b"\r\n", 1)[0][:200].decode(errors="replace")))

    def _serve(self, c: socket.socket, mode: str):
        try:
            if mode == "stall":
                c.settimeout(120)
                d = c.recv(65536)
                self._note(mode, d)
                while d:
                    d = c.recv(65536)
                return
            if mode == "503":
                c.settimeout(10)
                buf = b""
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                body = b"<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                c.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
                          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                return
            s = socket.create_connection(("127.0.0.1", self.target))
            limit = self.cut_after if mode == "cut" else None
            c.settimeout(30)
            first = c.recv(65536)
            if not first:
                s.close()
                return
            with self._lock:
                self.heads.append(first[:2048])
            self._note(mode, first)
            s.sendall(first[:limit] if limit is not None else first)
            if limit is not None and len(first) >= limit:
                s.close()
                return
            if limit is not None:
                limit -= len(first)
            c.settimeout(None)
            done = threading.Event()

            def pump(src, dst, budget):
                sent = 0
                try:
                    while True:
                        d = src.recv(65536)
                        if not d:
                            break
                        if budget is not None and sent + len(d) >= budget:
                            dst.sendall(d[:max(0, budget - sent)])
                            break
                        dst.sendall(d)
                        sent += len(d)
                except OSError:
                    pass
                done.set()

            t1 = threading.Thread(target=pump, args=(c, s, limit), daemon=True)
            t2 = threading.Thread(target=pump, args=(s, c, None), daemon=True)
            t1.start()
            t2.start()
            done.wait()
            for x in (s, c):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            s.close()
        finally:
            c.close()

    def close(self):
        self._stop = True
        if self._ls is not None:
            self._ls.close()
