"""A stop waits as long as the chainlets' own drain: a stream longer than the old fixed 10 s
wait of the supervisor finishes whole when the chain is stopped under it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from tests.helpers import Cli, write_chain

SLOW_STREAM = """
import asyncio
from typing import AsyncIterator

import chains


@chains.mark_entrypoint
class Slow(chains.ChainletBase):
    remote_config = chains.RemoteConfig(
        options=chains.ChainletOptions(env_variables={"CHAINS_GRACE_SEC": "20"})
    )

    async def run_remote(self, n: int) -> AsyncIterator[str]:
        for i in range(n):
            await asyncio.sleep(1.0)
            yield f"{i}\\n"
"""

ITEMS = 13  # about 13 s: past the supervisor's former 10 s, within the chainlet's 20 s


def test_a_stream_longer_than_ten_seconds_survives_chains_stop(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home", timeout=120)
    pushed = cli.push(str(write_chain(tmp_path / "src", SLOW_STREAM)), "--name", "slow")
    assert cli.state("slow")["grace_sec"] == 22.0  # the chainlet's 20 s and the exit margin
    received: list[str] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with (
                httpx.Client(timeout=60) as client,
                client.stream(
                    "POST", pushed["entrypoint_url"] + "/run_remote", json={"n": ITEMS}
                ) as response,
            ):
                for line in response.iter_lines():
                    if line:
                        received.append(line)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 30
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert received, "the stream did not start"
    started = time.monotonic()
    cli.run("stop", "slow", timeout=90)
    stopped_after = time.monotonic() - started
    reader.join(timeout=60)
    assert not errors, errors
    assert received == [str(i) for i in range(ITEMS)]
    assert stopped_after > 10.0  # it waited for the stream rather than cutting it
