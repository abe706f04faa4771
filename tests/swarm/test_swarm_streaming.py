"""The streaming example on a real two-node swarm: every stream form as the local target gives it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from chains.streaming import SSE
from tests.helpers import unique_port
from tests.swarm.conftest import ROOT, Cli, Swarm, remove_stack

STREAMING = ROOT / "examples" / "streaming" / "chain.py"


def _stream_forms(url: str) -> dict[str, Any]:
    body = {"prompt": "to be", "max_tokens": 4}
    raw = httpx.post(f"{url}/run_remote", json=body, timeout=60)
    sse = httpx.post(f"{url}/run_remote", json=body, headers={"accept": "text/event-stream"}, timeout=60)

    async def events() -> list[SSE]:
        async def chunks() -> Any:
            yield sse.content

        return [event async for event in SSE.from_chunks(chunks())]

    parsed = asyncio.run(events())
    return {
        "raw": (raw.status_code, raw.headers["content-type"], raw.text),
        "sse": [(e.event, e.data) for e in parsed],
    }


def test_streaming_example_matches_the_local_target(swarm: Swarm, tmp_path: Path, cache_dir: Path) -> None:
    remove_stack(swarm, "sw-streaming")
    local = Cli(swarm, tmp_path / "local-home", cache_dir, target="local")
    url = local.push(str(STREAMING), "--name", "sw-streaming")["entrypoint_url"]
    try:
        reference = _stream_forms(url)
    finally:
        local.run("stop", "sw-streaming")
    cli = Cli(swarm, tmp_path / "home", cache_dir)
    try:
        pushed = cli.push(
            str(STREAMING), "--name", "sw-streaming", "--timeout", "180", "--port", str(unique_port())
        )
        found = _stream_forms(pushed["entrypoint_url"])
        assert found == reference
        assert found["raw"][2] == "[4 tokens for 'to be'] to be to be\n[usage: 4 tokens; {\"tokens\":4}]"
        framed = subprocess.run(
            [
                sys.executable,
                "-m",
                "chains",
                "call",
                "sw-streaming",
                "--json",
                '{"prompt": "to be", "max_tokens": 4}',
            ],
            capture_output=True,
            text=True,
            env=cli.env,
            timeout=60,
            check=True,
        ).stdout
        assert "to be to be" in framed
    finally:
        cli.run("stop", "sw-streaming", check=False)
        remove_stack(swarm, "sw-streaming")
