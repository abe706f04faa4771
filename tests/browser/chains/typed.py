"""A typed stream with a header and a footer, which can fail partway: for the browser tests."""

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

import pydantic

import chains


class Begin(pydantic.BaseModel):
    count: int
    tags: list[str]


class Part(pydantic.BaseModel):
    text: str
    index: int


class Done(pydantic.BaseModel):
    parts: int


PARTS = chains.stream_types(Part, header_type=Begin, footer_type=Done)


@chains.mark_entrypoint("typed")
class Typed(chains.ChainletBase):
    async def run_remote(
        self, count: int, tags: list[str] | None = None, fail_at: int = -1, delay: float = 0.0
    ) -> Annotated[AsyncIterator[bytes], PARTS]:
        tags = tags or ["part"]
        writer = chains.stream_writer(PARTS)
        yield writer.yield_header(Begin(count=count, tags=tags))
        for index in range(count):
            if index == fail_at:
                raise ValueError(f"asked to fail at part {index}")
            await asyncio.sleep(delay)
            yield writer.yield_item(Part(text=tags[index % len(tags)], index=index))
        yield writer.yield_footer(Done(parts=count))
