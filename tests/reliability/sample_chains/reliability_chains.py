"""The chains the reliability suite pushes and attacks.

No entrypoint is marked: each test pushes the one it needs by name, so one file (copied
into every generated chainlet) serves them all. Every value is deterministic, so that a
client can check each item it receives against what it asked for.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import pydantic

import chains

logger = logging.getLogger("reliability")


class Item(pydantic.BaseModel):
    i: int
    text: str


class Started(pydantic.BaseModel):
    n: int


class Summary(pydantic.BaseModel):
    items: int
    characters: int


ITEMS = chains.stream_types(Item, header_type=Started, footer_type=Summary)


def payload(i: int, size: int) -> str:
    """Item ``i``'s text: ``size`` characters, with multi-byte UTF-8 ones and line breaks in it,
    so that re-chunking by a proxy can split a character or an SSE line anywhere."""
    pattern = f"{i}:é€𝄞\n\r ab|"
    return (pattern * (size // len(pattern) + 1))[:size]


# -- unary: process faults ------------------------------------------------------------------


class Doubler(chains.ChainletBase):
    async def run_remote(self, x: int) -> int:
        await asyncio.sleep(0.005)  # a little work, so kills land on calls in flight
        return 2 * x


class UnaryEntry(chains.ChainletBase):
    def __init__(self, doubler: Doubler = chains.depends(Doubler)) -> None:
        self._doubler = doubler

    async def run_remote(self, x: int) -> int:
        return await self._doubler.run_remote(x)


class PairedDoubler(chains.ChainletBase):
    """Two replicas. A replica that restarts is held in ``__init__`` until the file
    ``paired-release-<replica>`` appears in ``CHAINS_HOME`` (at most RESTART_HOLD_MAX_SEC), so
    the test decides when it may serve again: until then, a call it answers could only have
    waited for it. Each answer names the process (pid) that served it."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(replicas=2))

    def __init__(self) -> None:
        replica = os.environ.get("CHAINS_REPLICA", "0")
        home = Path(os.environ["CHAINS_HOME"])
        marker = home / f"paired-started-{replica}"
        if marker.exists():
            deadline = time.monotonic() + float(os.environ.get("RESTART_HOLD_MAX_SEC", "120"))
            while not (home / f"paired-release-{replica}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        marker.touch()

    async def run_remote(self, x: int) -> list[int]:
        await asyncio.sleep(0.005)
        return [2 * x, os.getpid()]


class PairEntry(chains.ChainletBase):
    def __init__(self, doubler: PairedDoubler = chains.depends(PairedDoubler)) -> None:
        self._doubler = doubler

    async def run_remote(self, x: int) -> list[int]:
        return await self._doubler.run_remote(x)


class Sleeper(chains.ChainletBase):
    """A dependency that hangs for as long as it is told to."""

    async def run_remote(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "awake"


class ImpatientEntry(chains.ChainletBase):
    def __init__(self, sleeper: Sleeper = chains.depends(Sleeper, retries=0, timeout_sec=0.5)) -> None:
        self._sleeper = sleeper

    async def run_remote(self, seconds: float) -> str:
        return await self._sleeper.run_remote(seconds)


# -- streams ----------------------------------------------------------------------------------


class Producer(chains.ChainletBase):
    """``n`` items of ``size`` characters, ``delay`` seconds apart; after item ``stall_after``
    it stops for ``stall`` seconds (a slow model, for proxy timeouts)."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=256))

    async def run_remote(
        self, n: int, size: int = 16, delay: float = 0.0, stall_after: int = -1, stall: float = 0.0
    ) -> AsyncIterator[Item]:
        sent = 0
        try:
            for i in range(n):
                if i == stall_after:
                    await asyncio.sleep(stall)
                yield Item(i=i, text=payload(i, size))
                sent += 1
                if delay:
                    await asyncio.sleep(delay)
        except BaseException as exc:
            # What the cancellation test looks for: the generator was stopped, and when.
            logger.warning(
                "producer stopped after %d items: %s at %.3f", sent, type(exc).__name__, time.time()
            )
            raise


class Relay(chains.ChainletBase):
    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=256))

    def __init__(self, producer: Producer = chains.depends(Producer)) -> None:
        self._producer = producer

    async def run_remote(
        self, n: int, size: int = 16, delay: float = 0.0, stall_after: int = -1, stall: float = 0.0
    ) -> AsyncIterator[Item]:
        async for item in self._producer.run_remote(n, size, delay, stall_after, stall):
            yield item


class ItemEntry(chains.ChainletBase):
    """Two hops: ItemEntry -> Relay -> Producer."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=256))

    def __init__(self, relay: Relay = chains.depends(Relay)) -> None:
        self._relay = relay

    async def run_remote(
        self, n: int, size: int = 16, delay: float = 0.0, stall_after: int = -1, stall: float = 0.0
    ) -> AsyncIterator[Item]:
        async for item in self._relay.run_remote(n, size, delay, stall_after, stall):
            yield item


class TextEntry(chains.ChainletBase):
    """The Producer's items as a text stream: raw text, SSE or framed, as the client asks."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=256))

    def __init__(self, producer: Producer = chains.depends(Producer)) -> None:
        self._producer = producer

    async def run_remote(
        self, n: int, size: int = 16, delay: float = 0.0, stall_after: int = -1, stall: float = 0.0
    ) -> AsyncIterator[str]:
        async for item in self._producer.run_remote(n, size, delay, stall_after, stall):
            yield item.text


class StructuredEntry(chains.ChainletBase):
    """The Producer's items as a structured stream (header, items, footer)."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=256))

    def __init__(self, producer: Producer = chains.depends(Producer)) -> None:
        self._producer = producer

    async def run_remote(
        self, n: int, size: int = 16, delay: float = 0.0, stall_after: int = -1, stall: float = 0.0
    ) -> Annotated[AsyncIterator[bytes], ITEMS]:
        writer = chains.stream_writer(ITEMS)
        yield writer.yield_header(Started(n=n))
        characters = 0
        async for item in self._producer.run_remote(n, size, delay, stall_after, stall):
            characters += len(item.text)
            yield writer.yield_item(item)
        yield writer.yield_footer(Summary(items=n, characters=characters))


# -- access -----------------------------------------------------------------------------------


class Vault(chains.ChainletBase):
    """An internal chainlet; ``fail`` makes it raise, so error details can be inspected."""

    async def run_remote(self, key: str, fail: bool = False) -> str:
        if fail:
            raise KeyError(f"no entry {key!r} in the vault")
        return key.upper()


class VaultEntry(chains.ChainletBase):
    def __init__(self, vault: Vault = chains.depends(Vault)) -> None:
        self._vault = vault

    async def run_remote(self, key: str, fail: bool = False) -> str:
        return await self._vault.run_remote(key, fail)
