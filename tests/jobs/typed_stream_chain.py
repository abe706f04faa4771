"""A chain that streams typed items, for the resumable-stream tests: each run appends a line to
the log file named in its input, so a test counts runs."""

import asyncio
from collections.abc import AsyncIterator

import pydantic

import chains


class Piece(pydantic.BaseModel):
    index: int
    text: str


@chains.mark_entrypoint("typed-stream")
class Pieces(chains.ChainletBase):
    async def run_remote(self, count: int, log: str, gap: float = 0.01) -> AsyncIterator[Piece]:
        with open(log, "a") as handle:
            handle.write("run\n")
        for i in range(count):
            yield Piece(index=i, text=f"piece {i}\nof {count}")
            await asyncio.sleep(gap)
