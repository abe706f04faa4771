"""`@chains.route` endpoints on the two-node swarm: the entrypoint's own route on its published
port, and the other chainlet's routes called by the entrypoint's stubs over the overlay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import unique_port
from tests.swarm.conftest import Cli, Swarm, remove_stack

ROUTED = Path(__file__).parents[1] / "routes" / "routed_chain.py"
CHAIN = "sw-routes"
KEY = "sw-routes-key"

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
def pushed(swarm: Swarm, tmp_path: Path, cache_dir: Path) -> Iterator[tuple[Cli, str]]:
    remove_stack(swarm, CHAIN)
    cli = Cli(swarm, tmp_path / "home", cache_dir)
    answer = cli.push(
        str(ROUTED), "--name", CHAIN, "--api-key", KEY, "--timeout", "180", "--port", str(unique_port())
    )
    try:
        yield cli, str(answer["entrypoint_url"])
    finally:
        cli.run("stop", CHAIN, check=False)
        remove_stack(swarm, CHAIN)


def test_routes_answer_on_the_swarm(pushed: tuple[Cli, str]) -> None:
    cli, url = pushed
    auth = {"authorization": f"Bearer {KEY}"}
    body = {"item": "cup", "quantity": 2, "colour": "blue"}
    with httpx.Client(timeout=60) as client:
        assert client.post(url + "/v1/echo", json=body).status_code == 401
        echo = client.post(url + "/v1/echo", json=body, headers=auth)
        assert echo.status_code == 200, echo.text
        assert echo.json() == body
        called = client.post(url + "/run_remote", json={"item": "tea", "quantity": 3}, headers=auth)
        assert called.status_code == 200, called.text
        assert called.json() == EXPECTED
    answer = cli.run("call", CHAIN, "--route", "POST /v1/echo", "--json", json.dumps(body), "--api-key", KEY)
    assert json.loads(answer.stdout) == body
