"""A chain that streams a header, typed items and a footer, for the resumable-stream tests: each
run appends a line to the log file named in its input, so a test counts runs."""

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

import pydantic

import chains


class Started(pydantic.BaseModel):
    count: int


class Piece(pydantic.BaseModel):
    index: int
    text: str


class Usage(pydantic.BaseModel):
    pieces: int


PIECES = chains.stream_types(Piece, header_type=Started, footer_type=Usage)


@chains.mark_entrypoint("structured-stream")
class Parts(chains.ChainletBase):
    async def run_remote(
        self, count: int, log: str, gap: float = 0.01
    ) -> Annotated[AsyncIterator[bytes], PIECES]:
        with open(log, "a") as handle:
            handle.write("run\n")
        writer = chains.stream_writer(PIECES)
        yield writer.yield_header(Started(count=count))
        for i in range(count):
            yield writer.yield_item(Piece(index=i, text=f"piece {i}\nof {count}"))
            await asyncio.sleep(gap)
        yield writer.yield_footer(Usage(pieces=count))
