"""The compose export of a chain with `@chains.route` endpoints, run for real on a container
engine: the entrypoint's own route answers on the published port, and its stubs call the other
chainlet's routes by method name across the project's network.

The images are built and tagged by the docker target, then the export is brought up with
``up -d --no-build``, as in tests/docker/test_compose_up.py, whose helpers this reuses.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.docker.conftest import ROOT, Cli, cache_dir, cli, engine, remove_chain  # noqa: F401
from tests.docker.test_compose_up import Compose, Project, _filled_env, _remove_project, compose_command  # noqa: F401
from tests.helpers import unique_port

pytestmark = pytest.mark.docker

ROUTED = ROOT / "tests" / "routes" / "routed_chain.py"
CHAIN = "dk-compose-routes"
READY_TIMEOUT_SEC = 90.0
CALL_TIMEOUT_SEC = 30.0

# What the entrypoint's stubs bring back from each of the shop's routes (as on the local target).
EXPECTED = [
    "7:teax3:hi",
    "tea 0",
    "tea 1",
    "either one: tea",
    "either event: tea 0",
    "either event: tea 1",
    "either event: tea 2",
]


@pytest.fixture
def up(engine: Any, compose_command: Compose, cli: Cli, tmp_path: Path) -> Iterator[tuple[str, str]]:  # noqa: F811
    """The routed chain, exported and up: its published URL and API key."""
    remove_chain(engine, CHAIN)
    cli.push(str(ROUTED), "--name", CHAIN, "--timeout", "120")
    cli.run("stop", CHAIN)
    port = unique_port()
    out = tmp_path / "compose"
    cli.run(
        "push",
        str(ROUTED),
        "--name",
        CHAIN,
        "--target",
        "compose",
        "--dry-run",
        "--out",
        str(out),
        "--port",
        str(port),
    )
    api_key = secrets.token_hex(16)
    (out / ".env").write_text(_filled_env((out / ".env.example").read_text(), {"CHAINS_API_KEY": api_key}))
    project = Project(compose_command, out, f"{CHAIN}-{uuid.uuid4().hex[:8]}")
    try:
        project.run("up", "-d", "--no-build", timeout=180)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + READY_TIMEOUT_SEC
        while not _ready(url):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{url}/readyz did not answer 200 in {READY_TIMEOUT_SEC:.0f}s\n{project.logs()}"
                )
            time.sleep(0.2)
        yield url, api_key
    finally:
        try:
            project.run("down", "-v", "--timeout", "10", timeout=120, check=False)
        finally:
            _remove_project(engine, project.name)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_routes_answer_in_the_compose_export(up: tuple[str, str]) -> None:
    url, api_key = up
    auth = {"authorization": f"Bearer {api_key}"}
    with httpx.Client(timeout=CALL_TIMEOUT_SEC) as client:
        body = {"item": "cup", "quantity": 2, "colour": "blue"}
        refused = client.post(url + "/v1/echo", json=body)
        assert refused.status_code == 401, "CHAINS_API_KEY from .env is required on routes too"
        echo = client.post(url + "/v1/echo", json=body, headers=auth)
        assert echo.status_code == 200, echo.text
        assert echo.json() == body
        # The Shop's routes, reached by Front's stubs by the Shop's service name.
        called = client.post(url + "/run_remote", json={"item": "tea", "quantity": 3}, headers=auth)
        assert called.status_code == 200, called.text
        assert called.json() == EXPECTED
