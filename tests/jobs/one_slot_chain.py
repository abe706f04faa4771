"""A streaming entrypoint with one concurrency slot, for the tests of what a resumable run holds:
``pause_after`` holds the stream still for ``pause`` seconds (a run a test cancels)."""

import asyncio
from collections.abc import AsyncIterator

import chains


@chains.mark_entrypoint("one-slot")
class OneSlot(chains.ChainletBase):
    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=1))

    async def run_remote(self, count: int, pause_after: int = -1, pause: float = 0.0) -> AsyncIterator[str]:
        for i in range(count):
            yield f"t{i}"
            if i == pause_after:
                await asyncio.sleep(pause)
