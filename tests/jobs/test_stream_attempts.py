"""A streaming job that runs again marks where the new attempt starts (``event: restart``),
whether its earlier attempt failed or was given back unfinished by a server that stopped: a
reader must never take the two attempts' events for one stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from chains.jobs.records import AsyncRequest
from chains.jobs.sqlite_store import SqliteJobStore
from chains.loader import load_chain
from chains.server.credentials import Credentials
from chains.server.jobs import JobRoutes

TYPED_CHAIN = Path(__file__).parent / "typed_stream_chain.py"


async def test_a_streaming_job_given_back_unfinished_and_run_again_marks_the_restart(
    tmp_path: Path,
) -> None:
    store = SqliteJobStore(tmp_path / "jobs.sqlite")
    hold = asyncio.Event()  # never set: the first attempt stops only when its server does

    async def pieces(arguments: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        for i in range(2):
            yield {"index": i, "text": "x"}  # the loaded chain's own Piece is another class
            await asyncio.sleep(0.01)  # each piece its own chunk, stored before the next
        if arguments["first"]:
            await hold.wait()

    async def unary(arguments: dict[str, Any]) -> Any:
        raise AssertionError("a streaming job is not invoked as one value")

    routes = JobRoutes(
        load_chain(TYPED_CHAIN, "Pieces", "typed-stream").entrypoint,
        "typed-stream",
        store,
        Credentials(entrypoint=True, expected=None),
        unary,
        pieces,
        max_body_bytes=1 << 20,
        run_timeout_sec=60,
        webhook_secret=None,
    )
    owner = routes.runner.owner
    submitted = store.submit(AsyncRequest(model_input={}), b"{}", now=time.time(), streams=True)
    first = store.claim(owner, lease_sec=30, now=time.time(), job_id=submitted.id)
    assert first is not None and first.attempts == 1
    running = asyncio.create_task(routes._run_stream(first, {"first": True}))
    async with asyncio.timeout(30):
        while len(store.events(first.id, after=0)) < 2:
            await asyncio.sleep(0.01)
    running.cancel()  # as the runner cancels it when its server stops
    await asyncio.gather(running, return_exceptions=True)
    store.release(first.id, owner, now=time.time())  # the attempt does not count

    again = store.claim(owner, lease_sec=30, now=time.time(), job_id=first.id)
    assert again is not None and again.attempts == 1 and again.events == 2
    await routes._run_stream(again, {"first": False})
    kinds = [data.split(b"\n", 1)[0] for _, data in store.events(first.id, after=0)]
    assert kinds == [
        b'data: {"index":0,"text":"x"}',
        b'data: {"index":1,"text":"x"}',
        b"event: restart",
        b'data: {"index":0,"text":"x"}',
        b'data: {"index":1,"text":"x"}',
        b"event: end",
    ]
