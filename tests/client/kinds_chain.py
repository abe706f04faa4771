"""One chainlet per kind of output, each pushed on its own as the entrypoint (``--entrypoint``).

The consumer tests read them through ``chains.client`` and through a generated client, in a
virtual environment that has only pydantic and httpx.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

import pydantic

import chains


class Started(pydantic.BaseModel):
    prompt: str


class Token(pydantic.BaseModel):
    text: str
    index: int


class Usage(pydantic.BaseModel):
    tokens: int


class Summary(pydantic.BaseModel):
    words: list[str]
    raw: bytes


TOKENS = chains.stream_types(Token, header_type=Started, footer_type=Usage)


class Unary(chains.ChainletBase):
    """A unary result: a model with bytes in it; ``fail`` raises to show the remote error."""

    async def run_remote(self, text: str, fail: bool = False) -> Summary:
        if fail:
            raise ValueError(f"refusing {text!r}")
        return Summary(words=text.split(), raw=text.encode()[::-1])


class Items(chains.ChainletBase):
    async def run_remote(self, text: str) -> AsyncIterator[Token]:
        for index, word in enumerate(text.split()):
            yield Token(text=word, index=index)


class Structured(chains.ChainletBase):
    async def run_remote(self, prompt: str) -> Annotated[AsyncIterator[bytes], TOKENS]:
        writer = chains.stream_writer(TOKENS)
        yield writer.yield_header(Started(prompt=prompt))
        words = prompt.split()
        for index, word in enumerate(words):
            yield writer.yield_item(Token(text=word, index=index))
        yield writer.yield_footer(Usage(tokens=len(words)))


class Bytes(chains.ChainletBase):
    async def run_remote(self, size: int) -> AsyncIterator[bytes]:
        for start in range(0, size, 100):
            yield bytes((start + i) % 256 for i in range(min(100, size - start)))


class Events(chains.ChainletBase):
    async def run_remote(self, count: int) -> AsyncIterator[chains.SSE]:
        for index in range(count):
            yield chains.SSE(data=f"line {index}\nsecond line", event="tick", id=str(index))


class Slow(chains.ChainletBase):
    """Streams a few items, then pauses longer than a proxy waits: the proxy cuts the stream."""

    async def run_remote(self, pause: float) -> AsyncIterator[str]:
        for index in range(3):
            yield f"piece {index};"
        await asyncio.sleep(pause)
        yield "after the pause"
