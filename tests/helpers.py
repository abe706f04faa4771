"""Real processes for integration tests: generated chainlet servers on 127.0.0.1.

Every wait here is bounded; every process is stopped by the fixture that started it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from chains.loader import load_chain

TOKEN = "test-token"


def wait_until(condition: object, timeout: float, what: str, poll: float = 0.05) -> None:
    """Poll ``condition()`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll)
    raise AssertionError(f"not within {timeout}s: {what}")


async def await_until(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    """:func:`wait_until` for a coroutine: other tasks run while it polls."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(poll)
    raise AssertionError(f"not within {timeout}s: {what}")


def tcpdump_listening(sniffer: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """Wait until ``tcpdump`` (started with ``stderr=subprocess.PIPE``) says it listens: it
    captures from then on. Fails with what it said when it exits or stays silent."""
    assert sniffer.stderr is not None
    deadline = time.monotonic() + timeout
    said = b""
    while time.monotonic() < deadline and b"listening on" not in said:
        ready, _, _ = select.select([sniffer.stderr], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(sniffer.stderr.fileno(), 4096) if ready else b""
        if ready and not chunk:  # it exited
            break
        said += chunk
    if b"listening on" not in said:
        raise AssertionError(f"tcpdump is not listening after {timeout}s: {said.decode(errors='replace')}")


_handed_out: set[int] = set()


def unique_port() -> int:
    """A free port on 127.0.0.1 that no other caller in this session got, below the kernel's
    ephemeral range: a port that ``bind(0)`` handed out and released could be handed out again,
    or taken by an outgoing connection, before the process meant to listen on it binds it.

    Each pytest-xdist worker takes the ports of its own residue class, so that two workers
    never hand out the same port (a chain's entrypoint binds with SO_REUSEPORT, so a second
    deployment on that port would not even fail)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    for _ in range(1000):
        port = random.randrange(max(1024, low - 12000), low)
        port -= (port - worker) % workers
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise AssertionError("no free port found below the ephemeral range")


def write_chain(folder: Path, source: str, name: str = "chain.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def generate_chain(file: Path, out: Path, entrypoint: str | None = None) -> dict[str, Path]:
    """Generate every chainlet of ``file``; the directory of each, by name."""
    from chains_codegen import generate

    chain = load_chain(file, entrypoint)
    result = generate(chain, file, out)
    return {name: Path(c.directory) for name, c in result.chainlets.items()}


class Cli:
    """The ``chains`` command line in a subprocess, with its state in a folder of the test's own.

    ``env`` is added to this process's environment; ``target``, when given, goes to every push.
    """

    def __init__(
        self,
        home: Path,
        *,
        env: Mapping[str, str] | None = None,
        target: str | None = None,
        timeout: float = 90,
    ) -> None:
        self.home = home
        self.env = {**os.environ, "CHAINS_HOME": str(home), **(env or {})}
        self.target = target
        self.timeout = timeout

    def run(
        self, *args: str, timeout: float | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "chains", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout or self.timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"chains {' '.join(args)} failed ({result.returncode}):\n{result.stderr}\n{result.stdout}"
            )
        return result

    def push_reporting(self, *args: str) -> tuple[dict[str, Any], str]:
        """``chains push ... --json``: the JSON object it printed, and the progress on stderr."""
        target = ["--target", self.target] if self.target else []
        result = self.run("push", *args, *target, "--json")
        payload: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
        return payload, result.stderr

    def push(self, *args: str) -> dict[str, Any]:
        return self.push_reporting(*args)[0]

    def state(self, name: str) -> dict[str, Any]:
        state: dict[str, Any] = json.loads(self.run("status", name, "--json").stdout)
        return state


class ServerProcess:
    """One generated chainlet server, started as ``python server.py --port N``."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        entrypoint: bool = False,
        dependencies: Mapping[str, object] | None = None,  # CHAINS_DEPENDENCY_URLS entries
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        self.directory = directory
        self.port = port or unique_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log or directory / f"server-{self.port}.log"
        self.env = dict(os.environ)
        self.env.update(
            {
                "CHAINS_INTERNAL_TOKEN": TOKEN,
                "CHAINS_IS_ENTRYPOINT": "1" if entrypoint else "0",
                "CHAINS_DEPENDENCY_URLS": json.dumps(dict(dependencies or {})),
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.update(env or {})
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "server.py", "--port", str(self.port)],
                cwd=self.directory,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def wait_ready(self, timeout: float = 20.0) -> ServerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"server exited with {self.process.returncode}:\n{self.logs()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not ready after {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait for the exit (bounded), return the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            raise AssertionError(
                f"server did not exit within {timeout}s of SIGTERM:\n{self.logs()}"
            ) from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}


@contextmanager
def asgi_in_thread(app: object, port: int | None = None) -> Iterator[str]:
    """Serve a small ASGI ``app`` (a fake peer) with uvicorn in a thread; yields its URL."""
    import uvicorn

    port = port or unique_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def running(*servers: ServerProcess) -> Iterator[tuple[ServerProcess, ...]]:
    """Start ``servers`` together, wait until all are ready, and always stop them."""
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.kill()


@contextmanager
def dashboard(name: str, env: Mapping[str, str], *args: str) -> Iterator[str]:
    """``chains ui NAME`` running in a process of its own with ``env``: the URL it prints (with
    the chain's key, if it has one), once it listens; interrupted and waited for at the end."""
    process = subprocess.Popen(
        [sys.executable, "-m", "chains", "ui", name, "--port", "0", *args],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            try:
                line = pool.submit(process.stdout.readline).result(timeout=60)  # type: ignore[union-attr]
            except concurrent.futures.TimeoutError:
                process.kill()  # ends the read, so the pool can close
                raise
        assert line.startswith(f"dashboard of chain {name!r}: http://127.0.0.1:"), (
            line + process.stderr.read()  # type: ignore[union-attr]
        )
        yield line.split(": ", 1)[1].split()[0]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url``: where a page's own requests go."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
