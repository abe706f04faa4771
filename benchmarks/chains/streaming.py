"""Streaming through one hop: ``Producer`` yields ``count`` small typed items, ``Restream`` (the
entrypoint) reads them through its stub and yields each one on to its own caller."""

from collections.abc import AsyncIterator

import pydantic

import chains


class Item(pydantic.BaseModel):
    index: int
    text: str


class Producer(chains.ChainletBase):
    async def run_remote(self, count: int) -> AsyncIterator[Item]:
        for index in range(count):
            yield Item(index=index, text="token")


@chains.mark_entrypoint("bench-streaming")
class Restream(chains.ChainletBase):
    def __init__(self, producer: Producer = chains.depends(Producer)) -> None:
        self._producer = producer

    async def run_remote(self, count: int) -> AsyncIterator[Item]:
        async for item in self._producer.run_remote(count):
            yield item
