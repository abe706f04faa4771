"""Three chainlets (one of them in two replicas) and a streaming entrypoint, for the
dashboard's browser tests.

``Entry`` streams ``Generator``'s tokens as text, then ``Counter``'s count of them. With
``release`` set, the generator sends its first token and then waits (bounded) until that file
exists: a test sees the first token in the page while the stream is still open, then lets it end.
"""

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator

import chains

GATE_WAIT_SEC = 30.0


class Generator(chains.ChainletBase):
    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=8, replicas=2))

    async def run_remote(self, prompt: str, release: str = "") -> AsyncIterator[str]:
        for index, word in enumerate(prompt.split() or ["..."]):
            if index == 1 and release:
                deadline = time.monotonic() + GATE_WAIT_SEC
                while not pathlib.Path(release).exists() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            yield word


class Counter(chains.ChainletBase):
    async def run_remote(self, words: list[str]) -> int:
        return len(words)


@chains.mark_entrypoint("dashboard")
class Entry(chains.ChainletBase):
    def __init__(
        self,
        generator: Generator = chains.depends(Generator, retries=2, timeout_sec=40),
        counter: Counter = chains.depends(Counter, retries=1, timeout_sec=5),
    ) -> None:
        self._generator = generator
        self._counter = counter

    async def run_remote(self, prompt: str, release: str = "") -> AsyncIterator[str]:
        words = []
        async for word in self._generator.run_remote(prompt, release):
            words.append(word)
            yield f"<{word}>"
        yield f" [{await self._counter.run_remote(words)} words]"
