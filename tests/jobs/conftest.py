"""What the async-call tests share: a chain pushed as local processes, a webhook receiver
that checks every signature, and the side-effect log the chain writes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from chains.deploy import ChainHandle, push_chain, stop_chain
from chains.jobs import WebhookRefused, verify
from chains.loader import load_chain
from chains.targets import PushOptions
from chains.targets.state import chain_dir

CHAIN_FILE = Path(__file__).parent / "jobs_chain.py"
STREAM_CHAIN = Path(__file__).parent / "stream_chain.py"


@pytest.fixture
def chains_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("CHAINS_HOME", str(home))
    return home


def push(name: str, timeout: float = 60, file: Path = CHAIN_FILE, entrypoint: str = "Entry") -> ChainHandle:
    """The chain of ``file`` (jobs_chain.py by default) pushed as local processes as ``name``."""
    chain = load_chain(file, entrypoint, name)
    return push_chain(chain, file, "local", PushOptions(timeout=timeout))


@pytest.fixture
def pushed(chains_home: Path) -> Iterator[ChainHandle]:
    handle = push("jobs")
    try:
        yield handle
    finally:
        stop_chain("jobs", grace=5)


@pytest.fixture
def streaming(chains_home: Path) -> Iterator[ChainHandle]:
    """The streaming chain of stream_chain.py, pushed."""
    handle = push("streaming-jobs", file=STREAM_CHAIN, entrypoint="StreamEntry")
    try:
        yield handle
    finally:
        stop_chain("streaming-jobs", grace=5)


def secret_of(name: str) -> str:
    return (chain_dir(name) / "webhook_secret").read_text().strip()


# What an async call ends as, whichever way it ends.
ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELED"})


class Api:
    """The async routes of one pushed chain."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)

    def submit(self, model_input: dict[str, Any], **options: Any) -> str:
        response = self.http.post("/async_run_remote", json={"model_input": model_input, **options})
        assert response.status_code == 200, response.text
        request_id: str = response.json()["request_id"]
        return request_id

    def status(self, request_id: str) -> dict[str, Any]:
        response = self.http.get(f"/async_request/{request_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def wait(self, request_id: str, statuses: Collection[str], timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = self.status(request_id)
            except (httpx.TransportError, AssertionError):
                # The entrypoint is restarting (a fault test killed it): ask again.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            if status["status"] in statuses:
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"{request_id} still {status} after {timeout}s")
            time.sleep(0.1)

    def wait_all(self, request_ids: list[str], statuses: Collection[str], timeout: float = 60) -> list[str]:
        """The status of each of ``request_ids`` once every one is in ``statuses``; fails once
        ``timeout`` seconds have passed in all."""
        deadline = time.monotonic() + timeout
        return [self.wait(r, statuses, max(0.0, deadline - time.monotonic()))["status"] for r in request_ids]


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1: records each delivery whose signature checks out, and
    counts the ones that do not."""

    secret: str
    port: int
    delivered: list[dict[str, Any]] = field(default_factory=list)
    refused: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                try:
                    content = verify(body, self.headers.get("x-baseten-signature", ""), receiver.secret)
                except (WebhookRefused, ValueError):
                    receiver.refused += 1
                    self.send_response(401)
                else:
                    receiver.delivered.append(content)
                    self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def dumps(value: Any) -> str:
    return json.dumps(value)
