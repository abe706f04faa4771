"""The chainlets of ``benchmarks/request_path.py``: each does as little as its kind allows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import chains


class Echo(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        return text


class Waits(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        await asyncio.sleep(0)
        return text


class Tokens(chains.ChainletBase):
    async def run_remote(self, n: int) -> AsyncIterator[str]:
        for _ in range(n):
            yield "t"
