"""The door of a pushed chainlet and of the dashboard: request headers, Host, and connections.

Raw sockets to 127.0.0.1, since HTTP clients refuse to send what these tests send. Every
socket a test opens it closes; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chains.targets.state import chain_dir, read_state
from tests.helpers import dashboard
from tests.security.conftest import pushed

KEY = "door-key-1"


def exchange(url: str, head: bytes, *, timeout: float = 10.0) -> tuple[int, bytes]:
    """Send ``head`` on a new connection to ``url``'s host; the status and all that came back."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    with socket.create_connection((host, int(port.rstrip("/"))), timeout=timeout) as sock:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            sock.sendall(head)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
            if b"\r\n\r\n" in received and b"content-length: 0" not in received.lower():
                head, _, body = received.partition(b"\r\n\r\n")
                length = [line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
                if length and len(body) >= int(length[0].split(b":")[1]):
                    break
    assert received, "the server closed the connection without an answer"
    return int(received.split(b" ", 2)[1]), received


def call_head(extra: bytes = b"", host: bytes = b"Host: 127.0.0.1\r\n") -> bytes:
    body = b'{"x": 1.5}'
    return (
        b"POST /run_remote HTTP/1.1\r\n" + host + b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body
    )


@pytest.fixture(scope="module")
def entry(chains_home: Path) -> Iterator[str]:
    with pushed("FloatEntry", "door-headers", api_key=KEY) as handle:
        yield handle.entrypoint_url


def test_oversized_headers_are_refused_431_before_credentials(entry: str) -> None:
    # No credentials in any of these: 431 says the headers were refused before they were read.
    big = b"X-Big: " + b"a" * (1 << 20) + b"\r\n"
    status, answer = exchange(entry, call_head(big))
    assert status == 431 and b"CHAINS_MAX_HEADER_BYTES" in answer
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(101))
    status, answer = exchange(entry, call_head(many))
    assert status == 431 and b"CHAINS_MAX_HEADERS" in answer
    # A header that never ends is cut once past the limit, not held whole first.
    with socket.create_connection(("127.0.0.1", int(entry.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ")
        sent = 0
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            while sent < 32 << 20:
                sock.sendall(b"b" * 65536)
                sent += 65536
        assert sent < 32 << 20, "a 32 MB header was taken in whole"
        status, _ = read_answer(sock)
        assert status == 431
    # Up to the limits, the same call is served: 100 headers, and a 32 KiB one.
    fine = b"".join(b"X-H%d: v\r\n" % i for i in range(90)) + b"X-Long: " + b"c" * 32768 + b"\r\n"
    status, _ = exchange(entry, call_head(fine + f"Authorization: Bearer {KEY}\r\n".encode()))
    assert status == 200
    assert httpx.get(f"{entry}/healthz").status_code == 200


def test_a_request_needs_exactly_one_host(entry: str) -> None:
    auth = f"Authorization: Bearer {KEY}\r\n".encode()
    status, answer = exchange(entry, call_head(auth, host=b""))
    assert status == 400 and b"Host" in answer
    two = b"Host: 127.0.0.1\r\nHost: evil.example\r\n"
    status, answer = exchange(entry, call_head(auth, host=two))
    assert status == 400 and b"2 Host headers" in answer
    # HTTP/1.0 has no Host requirement (RFC 9112 §3.2 is HTTP/1.1's).
    status, _ = exchange(entry, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert status == 200
    status, _ = exchange(entry, call_head(auth))
    assert status == 200


def test_the_dashboard_has_the_same_door(entry: str) -> None:
    with dashboard("door-headers", os.environ) as url:
        base = url.split("?", 1)[0].rstrip("/")
        big = b"X-Big: " + b"a" * 70000 + b"\r\n"
        status, _ = exchange(base, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + big + b"\r\n")
        assert status == 431
        status, _ = exchange(base, b"GET / HTTP/1.1\r\n\r\n")
        assert status == 400


@contextlib.contextmanager
def soft_open_files(limit: int) -> Iterator[None]:
    """This process's soft open-file limit lowered to ``limit``, as the processes it starts
    meanwhile inherit it; restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= limit * 4:
        pytest.skip(f"the hard open-file limit ({hard}) is too low to show a raised soft limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def soft_limit_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError(f"no open-file limit in /proc/{pid}/limits")


def idle(url: str, count: int) -> list[socket.socket]:
    port = int(url.rsplit(":", 1)[1])
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]


def test_idle_connections_past_the_open_file_limit_stop_nothing(chains_home: Path) -> None:
    with contextlib.ExitStack() as stack:
        with soft_open_files(256):  # the chain's processes inherit it; this one gets its own back
            handle = stack.enter_context(pushed("FloatEntry", "door-files"))
        pids = [p.pid for p in read_state("door-files").processes if p.pid]
        assert pids and all(soft_limit_of(pid) > 256 for pid in pids), "the soft limit was not raised"
        sockets = idle(handle.entrypoint_url, 400)  # more than the limit the processes started with
        try:
            answer = httpx.post(f"{handle.entrypoint_url}/run_remote", json={"x": 2.5}, timeout=10)
            assert answer.status_code == 200 and answer.json() == 2.5
        finally:
            for sock in sockets:
                sock.close()


def test_connections_over_the_cap_get_a_logged_503_and_health_still_answers(
    chains_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inherited by the chainlet processes through the supervisor.
    monkeypatch.setenv("CHAINS_MAX_CONNECTIONS", "40")
    monkeypatch.setenv("CHAINS_BUSY_TIMEOUT_SEC", "1")
    with pushed("FloatEntry", "door-cap") as handle:
        url = handle.entrypoint_url
        # Past three quarters of the cap (30), connections that send nothing are closed soon,
        # until no more than three quarters are open (then they wait the usual 30 s).
        sockets = idle(url, 35)
        try:
            deadline = time.monotonic() + 10
            closed = 0
            for sock in sockets:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                with contextlib.suppress(TimeoutError, ConnectionResetError):
                    closed += sock.recv(1) == b""
            assert closed >= 5, f"only {closed} of 35 idle connections were closed near the cap"
        finally:
            for sock in sockets:
                sock.close()
        # Over the cap: a call is refused with 503 at once, the health routes still answer.
        sockets = idle(url, 45)
        try:
            status, answer = exchange(url, call_head())
            assert status == 503 and b"CHAINS_MAX_CONNECTIONS" in answer
            status, _ = exchange(url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert status == 200
            status, _ = exchange(url, b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert status == 200
        finally:
            for sock in sockets:
                sock.close()
        log = next((chain_dir("door-cap") / "logs").glob("FloatEntry*.log")).read_text()
        assert "refused with 503" in log
        # With the idle connections gone, calls are served again.
        answer = httpx.post(f"{url}/run_remote", json={"x": 1.0}, timeout=10)
        assert answer.status_code == 200
