"""The S3 client (remote/) against a real server, versitygw (tests/s3server.py),
through `lazarus-s3`, the client alone: uploads (one PUT, multipart with
several parts in flight) and ranged downloads byte for byte, listings, plain
and TLS (a private CA with --ca-file; refused without it unless --insecure),
credentials from the environment and from a shared credentials file with a
profile, and every failure one line and a non-zero exit: wrong credentials,
unknown bucket, bad certificate, refused connection, a stalled server, 503
SlowDown (tried again with backoff), a connection cut in the middle of an
upload (nothing visible, no multipart upload left), a listing that runs out
of memory (an error, not a shorter listing)."""
from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from conftest import BUILD, PROGRAMS_SRC
from s3server import ACCESS, SECRET, FaultProxy, s3server  # noqa: F401  (the fixture)

S3TOOL = BUILD / "bin" / "lazarus-s3"


def tool(runner, srv, *args, env=None, timeout=120):
    runner.env.update(srv.env())
    if env:
        runner.env.update(env)
    return runner.run([S3TOOL, *args], timeout=timeout)


def one_line_failure(r, *words):
    assert r.rc != 0, str(r)
    lines = r.stderr_lines()
    assert len(lines) == 1, f"one line expected\n{r}"
    for w in words:
        assert w in lines[0], f"{w!r} not in the line\n{r}"
    assert SECRET not in r.stderr + r.stdout


def make_file(runner, name: str, size: int) -> tuple:
    p = runner.base / name
    data = os.urandom(size)
    p.write_bytes(data)
    os.chmod(p, 0o644)
    return p, hashlib.md5(data).hexdigest()


def test_put_get_list(runner, s3server):
    b = s3server.bucket()
    small, small_md5 = make_file(runner, "small", 1000)
    big, big_md5 = make_file(runner, "big", 12 * 1024 * 1024 + 77)
    env = {"LAZARUS_S3_PART_MIB": "5", "LAZARUS_S3_PARALLEL": "3"}
    r = tool(runner, s3server, "put", f"s3://{b}/dir/small", small, env=env)
    assert r.rc == 0 and r.stdout.split()[0] == small_md5, str(r)
    r = tool(runner, s3server, "put", f"s3://{b}/dir/big", big, env=env)
    assert r.rc == 0 and r.stdout.split()[0] == big_md5, str(r)
    # stored as sent, and a multipart object (three parts)
    objs = s3server.objects(b)
    assert objs["dir/big"].read_bytes() == big.read_bytes()
    r = tool(runner, s3server, "ls", f"s3://{b}/dir/", env=env)
    rows = sorted((l.split() for l in r.stdout.splitlines()), key=lambda x: x[2])
    assert [(x[2], int(x[0])) for x in rows] == [("dir/big", big.stat().st_size), ("dir/small", 1000)], str(r)
    assert [x for x in rows if x[2] == "dir/big"][0][1].endswith("-3")
    out = runner.base / "back"
    r = tool(runner, s3server, "get", f"s3://{b}/dir/big", out, env=env)
    assert r.rc == 0 and r.stdout.split()[0] == big_md5, str(r)
    assert out.read_bytes() == big.read_bytes()
    assert tool(runner, s3server, "rm", f"s3://{b}/dir/small").rc == 0
    r = tool(runner, s3server, "ls", f"s3://{b}/")
    assert [l.split()[2] for l in r.stdout.splitlines()] == ["dir/big"]
    assert tool(runner, s3server, "uploads", f"s3://{b}/").stdout == ""


def test_shared_credentials_file(runner, s3server):
    b = s3server.bucket()
    cred = runner.base / "credentials"
    cred.write_text(f"[default]\naws_access_key_id = {ACCESS}\naws_secret_access_key = wrong\n\n"
                    f"[lz]\naws_access_key_id = {ACCESS}\naws_secret_access_key = {SECRET}\n")
    os.chmod(cred, 0o644)
    env = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SHARED_CREDENTIALS_FILE": str(cred), "AWS_PROFILE": "lz"}
    r = tool(runner, s3server, "ls", f"s3://{b}/", env=env)
    assert r.rc == 0, str(r)
    env["AWS_PROFILE"] = "default"
    one_line_failure(tool(runner, s3server, "ls", f"s3://{b}/", env=env), "403", "SignatureDoesNotMatch")
    env["AWS_PROFILE"] = "missing"
    one_line_failure(tool(runner, s3server, "ls", f"s3://{b}/", env=env), "no profile [missing]")


def test_tls(runner, s3server):
    b = s3server.bucket()
    f, md5 = make_file(runner, "f", 3000)
    tls = {"AWS_ENDPOINT_URL": s3server.tls_endpoint}
    r = tool(runner, s3server, "--ca-file", s3server.ca_file, "put", f"s3://{b}/k", f, env=tls)
    assert r.rc == 0 and r.stdout.split()[0] == md5, str(r)
    # the system's CAs do not know the test's: refused, one line
    one_line_failure(tool(runner, s3server, "ls", f"s3://{b}/", env=tls), "certificate")
    r = tool(runner, s3server, "--insecure", "ls", f"s3://{b}/", env=tls)
    assert r.rc == 0 and "k" in r.stdout, str(r)


def test_virtual_host_addressing(runner, s3server):
    """--addressing virtual: the bucket is in the host name, not in the path
    (seen by a proxy in front of a server that takes it from there)."""
    b = s3server.bucket()
    f, md5 = make_file(runner, "f", 5000)
    p = FaultProxy(s3server.vhost_port)
    try:
        via = {"AWS_ENDPOINT_URL": f"http://localhost:{p.port}"}
        r = tool(runner, s3server, "--addressing", "virtual", "put", f"s3://{b}/v/k", f, env=via)
        assert r.rc == 0 and r.stdout.split()[0] == md5, str(r)
        r = tool(runner, s3server, "--addressing", "virtual", "ls", f"s3://{b}/v/", env=via)
        assert r.rc == 0 and r.stdout.split()[2] == "v/k", str(r)
        heads = [h.decode(errors="replace") for h in p.heads]
        assert heads and all(f"\r\nHost: {b}.localhost:{p.port}\r\n" in h for h in heads), heads
        assert all(not h.split(" ")[1].startswith(f"/{b}") for h in heads), heads
    finally:
        p.close()
    assert s3server.objects(b)["v/k"].read_bytes() == f.read_bytes()


def test_bad_input_one_line(runner, s3server):
    b = s3server.bucket()
    one_line_failure(tool(runner, s3server, "ls", f"s3://{b}/", env={"AWS_SECRET_ACCESS_KEY": "wrong"}),
                     f"s3://{b}", "403", "SignatureDoesNotMatch")
    one_line_failure(tool(runner, s3server, "ls", "s3://no-such-bucket-lz/"), "s3://no-such-bucket-lz", "404", "NoSuchBucket")
    one_line_failure(tool(runner, s3server, "ls", "/tmp/x"), "not an s3:// URL")
    one_line_failure(tool(runner, s3server, "ls", "s3://B!/x"), "bucket")
    one_line_failure(tool(runner, s3server, "ls", f"s3://{b}/", env={"AWS_ACCESS_KEY_ID": "", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}),
                     "no credentials")
    one_line_failure(tool(runner, s3server, "get", f"s3://{b}/none", runner.base / "x"), "no object")


@pytest.fixture
def proxy(s3server):
    p = FaultProxy(s3server.port)
    yield p
    p.close()


def test_faults(runner, s3server, proxy):
    b = s3server.bucket()
    f, md5 = make_file(runner, "f", 11 * 1024 * 1024)
    via = {"AWS_ENDPOINT_URL": proxy.endpoint, "LAZARUS_S3_PART_MIB": "5", "LAZARUS_S3_PARALLEL": "2"}
    # 503 SlowDown twice, then the server: tried again, stored
    proxy.set("503", count=2)
    r = tool(runner, s3server, "put", f"s3://{b}/a", f, env=via)
    assert r.rc == 0 and r.stdout.split()[0] == md5, str(r)
    assert proxy.faulted == 2
    # always 503: given up after LAZARUS_S3_ATTEMPTS, one line
    proxy.set("503")
    one_line_failure(tool(runner, s3server, "ls", f"s3://{b}/", env={**via, "LAZARUS_S3_ATTEMPTS": "3"}),
                     "503", "SlowDown", "tried 3 times")
    # refused
    proxy.set("refuse")
    one_line_failure(tool(runner, s3server, "ls", f"s3://{b}/", env={**via, "LAZARUS_S3_ATTEMPTS": "2"}),
                     "onnect", "tried 2 times")
    # stalled: a transfer that does not move for LAZARUS_S3_STALL_S fails
    proxy.set("stall")
    one_line_failure(tool(runner, s3server, "ls", f"s3://{b}/", env={**via, "LAZARUS_S3_ATTEMPTS": "1", "LAZARUS_S3_STALL_S": "1"}),
                     f"s3://{b}")
    # cut in the middle of every upload: nothing visible, no multipart upload left
    proxy.set("cut", cut_after=2 * 1024 * 1024)
    one_line_failure(tool(runner, s3server, "put", f"s3://{b}/cut", f, env={**via, "LAZARUS_S3_ATTEMPTS": "2"}), "s3://")
    proxy.set("pass")
    r = tool(runner, s3server, "ls", f"s3://{b}/")
    assert [l.split()[2] for l in r.stdout.splitlines()] == ["a"], str(r)
    assert tool(runner, s3server, "uploads", f"s3://{b}/").stdout == ""
    # a cut only once: the part is sent again and the object is whole
    proxy.set("cut", count=1, cut_after=1024 * 1024)
    r = tool(runner, s3server, "put", f"s3://{b}/again", f, env=via)
    assert r.rc == 0 and r.stdout.split()[0] == md5, str(r)
    assert s3server.objects(b)["again"].read_bytes() == f.read_bytes()


def test_listing_out_of_memory(runner, s3server):
    """A listing whose array cannot grow (realloc fails as out of memory
    would: programs/realloc_fails.c) is one line and exit 1, never a shorter
    listing that gc or a restart would trust."""
    b = s3server.bucket()
    d = s3server.data / b / "many"
    d.mkdir()
    for i in range(70):
        (d / f"o{i:03}").write_bytes(b"x")
    shim = runner.base / "realloc_fails.so"
    cp = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(shim),
                         str(PROGRAMS_SRC / "realloc_fails.c"), "-ldl"], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    r = tool(runner, s3server, "ls", f"s3://{b}/many/")
    assert r.rc == 0 and len(r.stdout.splitlines()) == 70, str(r)
    # s3_list grows its array 64 objects at a time: the second growth, to
    # 128 * sizeof(struct s3_object) (1120 bytes), is the one that fails
    r = tool(runner, s3server, "ls", f"s3://{b}/many/", env={"LD_PRELOAD": str(shim), "LZ_REALLOC_FAILS": str(128 * 1120)})
    one_line_failure(r, "out of memory", f"cannot list s3://{b}/many")
    assert r.stdout == "", str(r)
