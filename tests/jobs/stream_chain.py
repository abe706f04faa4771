"""A streaming chain for the async-call tests: the token chainlet writes each run to a log file
named in the input, so a test counts runs; ``pause_after`` holds the stream still for a while
(long enough for a proxy to cut an idle connection); ``fail_first_at`` fails the first run at
that item, and only the first (a job's retry then runs whole)."""

import asyncio
from collections.abc import AsyncIterator

import chains


class Tokens(chains.ChainletBase):
    async def run_remote(
        self, count: int, log: str, gap: float, pause_after: int, pause: float, fail_first_at: int = -1
    ) -> AsyncIterator[str]:
        with open(log, "a") as handle:
            handle.write("run\n")
        with open(log) as handle:
            first = len(handle.readlines()) == 1
        for i in range(count):
            if first and i == fail_first_at:
                raise ValueError(f"the first run fails at t{i}")
            yield f"t{i}"
            await asyncio.sleep(pause if i == pause_after else gap)


@chains.mark_entrypoint("streaming-jobs")
class StreamEntry(chains.ChainletBase):
    def __init__(self, tokens: Tokens = chains.depends(Tokens, timeout_sec=120, retries=0)) -> None:
        self._tokens = tokens

    async def run_remote(
        self,
        count: int,
        log: str,
        gap: float = 0.01,
        pause_after: int = -1,
        pause: float = 0.0,
        fail_first_at: int = -1,
    ) -> AsyncIterator[str]:
        async for token in self._tokens.run_remote(count, log, gap, pause_after, pause, fail_first_at):
            yield token
