"""Chains whose errors cross several hops: an overloaded dependency two hops from the
entrypoint, and a stream that outlives its caller's deadline.

No entrypoint is marked: each test pushes the one it needs by name. Busy chainlets take two
calls at once (and queue 4x that): the rest of a burst is refused with 503.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import chains

BUSY = chains.RemoteConfig(compute=chains.Compute(concurrency=2))
ROOMY = chains.RemoteConfig(compute=chains.Compute(concurrency=64))


class Busy(chains.ChainletBase):
    remote_config = BUSY

    async def run_remote(self, hold: float) -> str:
        await asyncio.sleep(hold)
        return "done"


class Middle(chains.ChainletBase):
    remote_config = ROOMY

    def __init__(self, busy: Busy = chains.depends(Busy, retries=0)) -> None:
        self._busy = busy

    async def run_remote(self, hold: float) -> str:
        return await self._busy.run_remote(hold)


class OverloadEntry(chains.ChainletBase):
    """Entry -> Middle -> Busy: Middle gives up on Busy at once (retries=0)."""

    remote_config = ROOMY

    def __init__(self, middle: Middle = chains.depends(Middle, retries=0)) -> None:
        self._middle = middle

    async def run_remote(self, hold: float) -> str:
        return await self._middle.run_remote(hold)


class BusyStream(chains.ChainletBase):
    remote_config = BUSY

    async def run_remote(self, hold: float, count: int, gap: float) -> AsyncIterator[str]:
        await asyncio.sleep(hold)
        for i in range(count):
            if i:
                await asyncio.sleep(gap)
            yield f"{i};"


class StreamMiddle(chains.ChainletBase):
    remote_config = ROOMY

    def __init__(self, busy: BusyStream = chains.depends(BusyStream, retries=0)) -> None:
        self._busy = busy

    async def run_remote(self, hold: float, count: int, gap: float) -> AsyncIterator[str]:
        async for text in self._busy.run_remote(hold, count, gap):
            yield text


class StreamOverloadEntry(chains.ChainletBase):
    """Entry -> StreamMiddle -> BusyStream, framed between them."""

    remote_config = ROOMY

    def __init__(self, middle: StreamMiddle = chains.depends(StreamMiddle, retries=0)) -> None:
        self._middle = middle

    async def run_remote(self, hold: float, count: int, gap: float) -> AsyncIterator[str]:
        async for text in self._middle.run_remote(hold, count, gap):
            yield text
