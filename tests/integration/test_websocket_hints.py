"""A pushed WebSocket entrypoint: push prints lines that work (not a curl that can only get
426), and ``/openapi.json`` describes the endpoint as a WebSocket, not a JSON POST."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.helpers import Cli, unique_port

REALTIME = Path(__file__).parents[2] / "examples" / "realtime" / "chain.py"


@pytest.fixture
def pushed(tmp_path: Path) -> Iterator[tuple[Cli, str]]:
    cli = Cli(tmp_path / "home")
    out = cli.run("push", str(REALTIME), "--port", str(unique_port())).stdout
    try:
        yield cli, out
    finally:
        cli.run("stop", "realtime", check=False)


def test_push_prints_a_call_and_a_websocket_line_that_work(pushed: tuple[Cli, str]) -> None:
    cli, out = pushed
    assert "curl" not in out
    lines = out.splitlines()
    call = next(line for line in lines if line.startswith("try: "))
    command = call.removeprefix("try: ").split("   (")[0]
    assert command == "chains call realtime"
    answered = subprocess.run(
        [sys.executable, "-m", *shlex.split(command)],
        input="hello\nworld\n",
        capture_output=True,
        text=True,
        env=cli.env,
        timeout=60,
        check=False,
    )
    assert answered.stdout.split() == ["HELLO", "WORLD"], answered.stderr

    websocat = next(line for line in lines if line.startswith(" or: websocat "))
    url = websocat.split()[2]
    assert url.startswith("ws://127.0.0.1:") and url.endswith("/run_remote")
    # websocat is not installed here; the same handshake from aiohttp shows the URL works.
    assert asyncio.run(_one_message(url, "hi")) == "HI"


async def _one_message(url: str, text: str) -> str:
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as socket:
        await socket.send_str(text)
        answer = await asyncio.wait_for(socket.receive_str(), 30)
        return answer


def test_openapi_describes_the_websocket(pushed: tuple[Cli, str]) -> None:
    cli, _ = pushed
    url = str(cli.state("realtime")["entrypoint_url"])
    doc = httpx.get(url + "/openapi.json").json()
    operations = doc["paths"]["/run_remote"]
    assert set(operations) == {"get"}, "a WebSocket endpoint takes no POST"
    get = operations["get"]
    assert get["x-websocket"] is True and "WebSocket conversation" in get["description"]
    assert "requestBody" not in get
    assert {p["name"]: p["schema"]["const"] for p in get["parameters"]} == {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
    }
    assert {"101", "426"} <= set(get["responses"])
    # What the document says of a POST holds.
    assert httpx.post(url + "/run_remote", json={}).status_code == 426
    page = httpx.get(url + "/docs").text
    assert "A WebSocket endpoint" in page and "<form" not in page and "textarea" not in page
