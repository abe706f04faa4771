"""Streaming: a structured stream (header, items, footer) re-streamed as text by the entrypoint.

`Generator` streams `Token` items between a `Started` header and a `Usage` footer, all
declared once in `TOKENS`, which both the producer and the consumer use. `Words` is an
item-only typed stream. `Entry` reads both and streams plain text to its caller.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

import pydantic

import chains


class Started(pydantic.BaseModel):
    prompt: str
    max_tokens: int


class Token(pydantic.BaseModel):
    text: str
    index: int


class Usage(pydantic.BaseModel):
    tokens: int


TOKENS = chains.stream_types(Token, header_type=Started, footer_type=Usage)

# What a client may ask of the entrypoint: a request is refused (422) beyond these, instead of
# making the chain stream for hours or hold a huge prompt in every hop.
MAX_PROMPT = 10_000
MAX_TOKENS = 1024


class Generator(chains.ChainletBase):
    """Pretends to be a language model: one token per word of the prompt, then counts."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(cpu_count=1, memory="256Mi", concurrency=64))

    async def run_remote(self, prompt: str, max_tokens: int = 8) -> Annotated[AsyncIterator[bytes], TOKENS]:
        writer = chains.stream_writer(TOKENS)
        yield writer.yield_header(Started(prompt=prompt, max_tokens=max_tokens))
        words = prompt.split() or ["..."]
        for index in range(max_tokens):
            await asyncio.sleep(0.02)  # a model takes its time per token
            yield writer.yield_item(Token(text=words[index % len(words)], index=index))
        yield writer.yield_footer(Usage(tokens=max(max_tokens, 0)))


class Words(chains.ChainletBase):
    """Splits text into words: an item-only typed stream."""

    async def run_remote(self, text: str) -> AsyncIterator[Token]:
        for index, word in enumerate(text.split()):
            yield Token(text=word, index=index)


@chains.mark_entrypoint("streaming")
class Entry(chains.ChainletBase):
    """Streams the generated tokens as text, then a summary from the footer."""

    def __init__(
        self,
        generator: Generator = chains.depends(Generator, retries=3, timeout_sec=30),
        words: Words = chains.depends(Words),
    ) -> None:
        self._generator = generator
        self._words = words

    async def run_remote(
        self,
        prompt: Annotated[str, pydantic.Field(max_length=MAX_PROMPT)],
        max_tokens: Annotated[int, pydantic.Field(ge=1, le=MAX_TOKENS)] = 8,
    ) -> AsyncIterator[str]:
        reader = chains.stream_reader(TOKENS, self._generator.run_remote(prompt, max_tokens))
        started = await reader.read_header()
        yield f"[{started.max_tokens} tokens for {started.prompt!r}]"
        async for token in reader.read_items():
            yield f" {token.text}"
        usage = await reader.read_footer()
        yield f"\n[usage: {usage.tokens} tokens;"
        async for word in self._words.run_remote(usage.model_dump_json()):
            yield f" {word.text}"
        yield "]"
