"""The chains the security tests push: no entrypoint is marked, each test names its own."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import chains


class Leaf(chains.ChainletBase):
    async def run_remote(self, x: float) -> float:
        return x


class FloatEntry(chains.ChainletBase):
    """Passes ``x`` one hop on, as JSON."""

    def __init__(self, leaf: Leaf = chains.depends(Leaf)) -> None:
        self._leaf = leaf

    async def run_remote(self, x: float, extra: Any = None) -> float:
        return await self._leaf.run_remote(x=x)


class BinaryEntry(chains.ChainletBase):
    """Passes ``x`` one hop on, as MessagePack."""

    def __init__(self, leaf: Leaf = chains.depends(Leaf, use_binary=True)) -> None:
        self._leaf = leaf

    async def run_remote(self, x: float) -> float:
        return await self._leaf.run_remote(x=x)


class Counter(chains.ChainletBase):
    async def run_remote(self, start: float) -> AsyncIterator[float]:
        for step in range(3):
            yield start + step


class StreamEntry(chains.ChainletBase):
    """Streams what Counter streams."""

    def __init__(self, counter: Counter = chains.depends(Counter)) -> None:
        self._counter = counter

    async def run_remote(self, start: float) -> AsyncIterator[float]:
        async for value in self._counter.run_remote(start=start):
            yield value


class Hidden(chains.ChainletBase):
    async def run_remote(self, x: float) -> float:
        raise ValueError(f"cannot take {x}")


class FailEntry(chains.ChainletBase):
    """Fails one hop in, so that an outside caller sees an internal chainlet's error."""

    def __init__(self, hidden: Hidden = chains.depends(Hidden, retries=0)) -> None:
        self._hidden = hidden

    async def run_remote(self, x: float) -> float:
        return await self._hidden.run_remote(x=x)


class Keeper(chains.ChainletBase):
    """Answers with a digest of its secret, so that a test can tell which value arrived."""

    remote_config = chains.RemoteConfig(assets=chains.Assets(secret_keys=["token"]))

    def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
        self._digest = hashlib.sha256(context.secrets["token"].encode()).hexdigest()

    async def run_remote(self) -> str:
        return self._digest
