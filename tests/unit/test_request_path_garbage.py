"""A served call leaves no reference cycle behind: everything it made is freed when it ends.

Garbage in cycles waits for the collector, whose passes then cost every call on the hot path;
a call that waits (for a dependency, for its stream's consumer) starts a disconnect watcher,
which is where such a cycle once was.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest

import chains
from chains.server.asgi import Message
from chains.server.serve import create_app
from chains.server.settings import ServerSettings


class Waits(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        await asyncio.sleep(0)
        return text


class Ticks(chains.ChainletBase):
    async def run_remote(self, n: int) -> AsyncIterator[str]:
        for _ in range(n):
            await asyncio.sleep(0)
            yield "t"


async def _garbage_per_call(chainlet: type[chains.ChainletBase], body: bytes, calls: int) -> int:
    app = create_app(chainlet, settings=ServerSettings(is_entrypoint=True))
    await app.startup()
    await app.started.wait()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    never: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

    async def call() -> int:
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[Message] = []

        async def receive() -> Message:
            return messages.pop() if messages else await never

        async def send(message: Message) -> None:
            sent.append(message)

        await app(
            {"type": "http", "path": "/run_remote", "method": "POST", "headers": headers}, receive, send
        )
        return int(sent[0]["status"])

    assert await call() == 200  # first-use caches are made here, not counted
    gc.collect()
    gc.disable()
    try:
        statuses = [await call() for _ in range(calls)]
        await asyncio.sleep(0)  # the cancelled watchers finish
        found = gc.collect()
    finally:
        gc.enable()
        await app.shutdown()
    assert statuses == [200] * calls
    return found


@pytest.mark.parametrize(
    ("chainlet", "body"), [(Waits, b'{"text": "hi"}'), (Ticks, b'{"n": 3}')], ids=["unary", "stream"]
)
def test_a_call_that_waits_leaves_no_cycle_for_the_collector(
    chainlet: type[chains.ChainletBase], body: bytes
) -> None:
    assert asyncio.run(_garbage_per_call(chainlet, body, calls=20)) == 0
