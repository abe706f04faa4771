"""Every endpoint shape a stub must reproduce: the DESIGN example and the other stream kinds.

Written the old way on purpose (typing.AsyncIterator, Optional): stubs copy what they see.
"""
# ruff: noqa: UP035, UP045

import enum
from collections.abc import AsyncGenerator
from typing import Annotated, AsyncIterator, Literal, Optional

import pydantic

import chains


class Token(pydantic.BaseModel):
    text: str


class Usage(pydantic.BaseModel):
    tokens: int


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


TOKENS = chains.stream_types(Token, footer_type=Usage)  # shared by producer and consumer
DEFAULT_COUNT = 3


class Generator(chains.ChainletBase):
    """A structured stream: items and a footer."""

    remote_config = chains.RemoteConfig(
        docker_image=chains.DockerImage(
            pip_requirements=["numpy>=1.26"], apt_requirements=["ffmpeg", "curl"]
        ),
        compute=chains.Compute(cpu_count=1, memory="512Mi", concurrency=32),
        assets=chains.Assets(secret_keys=["hf_token"]),
    )

    def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
        self._context = context

    async def run_remote(self, prompt: str, max_tokens: int = 16) -> Annotated[AsyncIterator[bytes], TOKENS]:
        writer = chains.stream_writer(TOKENS)
        for i in range(max_tokens):
            yield writer.yield_item(Token(text=f"{prompt}{i}"))
        yield writer.yield_footer(Usage(tokens=max_tokens))


class Words(chains.ChainletBase):
    """An item stream of pydantic models."""

    async def run_remote(self, text: str) -> AsyncIterator[Token]:
        for word in text.split():
            yield Token(text=word)


class Texts(chains.ChainletBase):
    """A text stream with a keyword-only parameter and a module-level constant as default."""

    async def run_remote(
        self, word: str, count: int = DEFAULT_COUNT, *, sep: str = " "
    ) -> AsyncIterator[str]:
        for _ in range(count):
            yield word + sep


class Blobs(chains.ChainletBase):
    """A bytes stream annotated as a generator."""

    async def run_remote(self, size: int, fill: bytes = b"\x00'\"") -> AsyncGenerator[bytes, None]:
        yield fill * size


class Events(chains.ChainletBase):
    """Server-sent events, named through the chains module."""

    async def run_remote(self, n: int) -> AsyncIterator[chains.SSE]:
        for i in range(n):
            yield chains.SSE(str(i), event="tick")


class Counter(chains.ChainletBase):
    """A sync unary endpoint with defaults of many kinds."""

    def run_remote(
        self,
        values: list[int],
        mode: Mode = Mode.FAST,
        label: Optional[str] = None,
        kind: Literal["a", "it's"] = "a",
        weights: tuple[float, ...] = (1.0, -0.5),
        options: dict[str, int] | None = None,
    ) -> dict[str, int]:
        return {"total": sum(values), "mode": len(mode.value)}


class Adder(chains.ChainletBase):
    """An async unary endpoint with a positional-only parameter and a constrained one."""

    async def run_remote(self, a: int, /, b: Annotated[int, pydantic.Field(ge=0)] = 2) -> int:
        return a + b


@chains.mark_entrypoint("streams")
class Entry(chains.ChainletBase):
    """Calls every other chainlet; depends on Counter twice with different options."""

    def __init__(
        self,
        gen: Generator = chains.depends(Generator, retries=3, timeout_sec=30),
        words: Words = chains.depends(Words),
        texts: Texts = chains.depends(Texts),
        blobs: Blobs = chains.depends(Blobs),
        events: Events = chains.depends(Events),
        counter: Counter = chains.depends(Counter, concurrency_limit=4),
        counter_again: Counter = chains.depends(Counter, retries=0),
        adder: Adder = chains.depends(Adder),
    ) -> None:
        self._gen, self._words, self._texts = gen, words, texts
        self._counter, self._adder = counter, adder

    async def run_remote(self, prompt: str) -> AsyncIterator[str]:
        reader = chains.stream_reader(TOKENS, self._gen.run_remote(prompt))
        async for token in reader.read_items():
            yield token.text
        usage = await reader.read_footer()
        async for word in self._words.run_remote(usage.model_dump_json()):
            yield word.text
        yield str(await self._adder.run_remote(1, b=2))
