"""A callee whose machine vanishes without a reset: the stubs' connections find it dead in
seconds, as a connection failure (retried on another replica), not a call that waits out its
whole timeout (which is not retried).

The callee is a keep-alive HTTP server in a network namespace the test makes (a veth pair on
a /30 of its own); "vanishing" is a DROP rule in that namespace, so every packet to it is lost
silently, as when a swarm node's engine stops. Needs root, ``ip`` and ``iptables`` (CI has
them; CHAINS_REQUIRE_SWARM makes a missing one fail rather than skip).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from chains.stubs.aiohttp_transport import AiohttpTransport
from chains.stubs.httpx_transport import HttpxTransport
from chains.stubs.sockets import CONNECT_TIMEOUT_SEC
from chains.stubs.transport import TransportError

HOST_ADDRESS = "10.213.9.1"
CALLEE_ADDRESS = "10.213.9.2"
TIMEOUT = 30.0  # the attempt's own timeout: far beyond what finding a dead peer takes

SERVER = """
import http.server, sys

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the stubs pool the connection

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "4")
        self.end_headers()
        self.wfile.write(b'"ok"')

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer((sys.argv[1], 8000), Handler).serve_forever()
"""


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@pytest.fixture
def namespace() -> Iterator[str]:
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        why = f"needs root, ip and iptables (missing: {', '.join(missing) or 'root'})"
        if os.environ.get("CHAINS_REQUIRE_SWARM"):
            pytest.fail(why)
        pytest.skip(why)
    name = f"chains-dead-{os.getpid()}"
    host_end, callee_end = f"cdh{os.getpid() % 100000}", f"cdc{os.getpid() % 100000}"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", callee_end)
        _run("ip", "link", "set", callee_end, "netns", name)
        _run("ip", "addr", "add", f"{HOST_ADDRESS}/30", "dev", host_end)
        _run("ip", "link", "set", host_end, "up")
        _run("ip", "-n", name, "addr", "add", f"{CALLEE_ADDRESS}/30", "dev", callee_end)
        _run("ip", "-n", name, "link", "set", callee_end, "up")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


@pytest.fixture
def callee(namespace: str) -> Iterator[str]:
    server = subprocess.Popen(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", SERVER, CALLEE_ADDRESS]
    )
    url = f"http://{CALLEE_ADDRESS}:8000/run_remote"
    try:
        deadline = time.monotonic() + 30
        while (
            subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    namespace,
                    sys.executable,
                    "-c",
                    f"import socket; socket.create_connection(('{CALLEE_ADDRESS}', 8000), 1).close()",
                ],
                capture_output=True,
                timeout=30,
            ).returncode
            != 0
        ):
            assert time.monotonic() < deadline, "the callee did not listen within 30 s"
            time.sleep(0.2)
        yield url
    finally:
        server.kill()
        server.wait(10)


def _vanish(namespace: str) -> None:
    """Every packet into the callee's namespace dropped: no reset, no answer, as a lost machine."""
    _run("ip", "netns", "exec", namespace, "iptables", "-I", "INPUT", "-j", "DROP")


def test_a_pooled_connection_to_a_vanished_callee_fails_as_a_connection_error(
    namespace: str, callee: str
) -> None:
    async def scenario() -> tuple[int, BaseException | None]:
        transport = AiohttpTransport()
        try:
            first = await transport.send(callee, b"{}", {"content-type": "application/json"}, TIMEOUT)
            _vanish(namespace)
            try:
                await transport.send(callee, b"{}", {"content-type": "application/json"}, TIMEOUT)
            except (TransportError, TimeoutError) as exc:
                return first.status, exc
            return first.status, None
        finally:
            await transport.aclose()

    status, failure = asyncio.run(scenario())
    assert status == 200
    # TimeoutError (after the whole 30 s) is what a call waits for without the socket options.
    assert isinstance(failure, TransportError), failure


def test_the_sync_transport_finds_a_vanished_callee_too(namespace: str, callee: str) -> None:
    transport = HttpxTransport()
    try:
        assert transport.send(callee, b"{}", {"content-type": "application/json"}, TIMEOUT).status == 200
        _vanish(namespace)
        with pytest.raises(TransportError):
            transport.send(callee, b"{}", {"content-type": "application/json"}, TIMEOUT)
    finally:
        transport.close()


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_connection_never_answered_is_retryable(namespace: str, callee: str, kind: str) -> None:
    _vanish(namespace)  # before any connection: the SYN itself is lost
    headers = {"content-type": "application/json"}
    if kind == "sync":
        transport = HttpxTransport()
        try:
            with pytest.raises(TransportError, match=f"no connection within {CONNECT_TIMEOUT_SEC:g}s"):
                transport.send(callee, b"{}", headers, TIMEOUT)
        finally:
            transport.close()
        return

    async def scenario() -> None:
        transport = AiohttpTransport()
        try:
            with pytest.raises(TransportError, match=f"no connection within {CONNECT_TIMEOUT_SEC:g}s"):
                await transport.send(callee, b"{}", headers, TIMEOUT)
        finally:
            await transport.aclose()

    asyncio.run(scenario())
