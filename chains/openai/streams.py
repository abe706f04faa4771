"""OpenAI's streams: chunks as server-sent events, ``data: {...}`` each, then ``data: [DONE]``.

A route returns what these make; the chain's server sends the events as they come::

    async def chat(self, body: ChatCompletionRequest) -> ChatCompletion | AsyncIterator[chains.SSE]:
        deltas = self.tokens.run_remote(body.messages[-1].text())   # an AsyncIterator[str]
        if body.stream:
            return chains.openai.chat_events(deltas, model=body.model, include_usage=body.include_usage)
        return await chains.openai.chat_completion(deltas, model=body.model)
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing

from chains.errors import ErrorDetail
from chains.openai.errors import error_body
from chains.openai.models import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatMessage,
    ChunkChoice,
    Completion,
    CompletionChoice,
    Delta,
    Usage,
    new_id,
)
from chains.streaming import SSE

__all__ = [
    "DONE",
    "chat_completion",
    "chat_events",
    "completion",
    "completion_events",
    "events",
]

logger = logging.getLogger("chains.openai")

DONE = SSE("[DONE]")
"""The event that ends every OpenAI stream."""


_MARK = "chains-delta-mark"


class _Template:
    """The JSON of a content chunk, with the text to put in: a model built and dumped per
    token costs several times what the rest of a token's way through the chain does
    (benchmarks/openai_stream.py)."""

    def __init__(self, chunk: ChatCompletionChunk | Completion) -> None:
        self.prefix, self.suffix = chunk.model_dump_json(exclude_none=True).split(json.dumps(_MARK))

    def __call__(self, text: str) -> str:
        return self.prefix + json.dumps(text, ensure_ascii=False) + self.suffix


async def _chat_json(
    deltas: AsyncIterator[str], *, model: str, include_usage: bool, prompt_tokens: int
) -> AsyncIterator[ChatCompletionChunk | str]:
    """The chunks of one chat completion streaming ``deltas`` (each counted as a token), each
    content chunk as its JSON text.

    The first chunk says the role, each delta is a chunk of content, the last has the
    ``finish_reason``; with ``include_usage`` a final chunk without choices carries the usage.
    """
    chunk_id = new_id("chatcmpl")
    yield ChatCompletionChunk(
        id=chunk_id, model=model, choices=[ChunkChoice(delta=Delta(role="assistant", content=""))]
    )
    content = _Template(
        ChatCompletionChunk(id=chunk_id, model=model, choices=[ChunkChoice(delta=Delta(content=_MARK))])
    )
    count = 0
    async with aclosing(deltas):  # type: ignore[type-var]
        async for text in deltas:
            count += 1
            yield content(text)
    yield ChatCompletionChunk(
        id=chunk_id, model=model, choices=[ChunkChoice(delta=Delta(), finish_reason="stop")]
    )
    if include_usage:
        yield ChatCompletionChunk(id=chunk_id, model=model, choices=[], usage=Usage.of(prompt_tokens, count))


async def events(
    chunks: AsyncIterator[ChatCompletionChunk]
    | AsyncIterator[Completion]
    | AsyncIterator[ChatCompletionChunk | str],
) -> AsyncIterator[SSE]:
    """``chunks`` (models, or their JSON text) as OpenAI's events, then ``[DONE]``; a failure
    midway becomes the error event OpenAI's clients raise (``data: {"error": {...}}``),
    without ``[DONE]``."""
    async with aclosing(chunks):  # type: ignore[type-var]
        try:
            async for chunk in chunks:
                yield SSE(chunk if isinstance(chunk, str) else chunk.model_dump_json(exclude_none=True))
        except Exception as exc:
            logger.exception("an OpenAI stream failed midway")
            _, body = error_body(500, ErrorDetail.from_exception(exc).public("").message)
            yield SSE(json.dumps(body, separators=(",", ":")))
            return
    yield DONE


def chat_events(
    deltas: AsyncIterator[str], *, model: str, include_usage: bool = False, prompt_tokens: int = 0
) -> AsyncIterator[SSE]:
    """The events of a streamed chat completion of ``deltas``, one chunk per delta, as :func:`events`."""
    return events(_chat_json(deltas, model=model, include_usage=include_usage, prompt_tokens=prompt_tokens))


async def chat_completion(
    deltas: AsyncIterator[str], *, model: str, prompt_tokens: int = 0
) -> ChatCompletion:
    """The whole chat completion of ``deltas``, for ``stream=False``."""
    parts = [text async for text in deltas]
    message = ChatMessage(role="assistant", content="".join(parts))
    return ChatCompletion(
        model=model,
        choices=[ChatCompletionChoice(message=message)],
        usage=Usage.of(prompt_tokens, len(parts)),
    )


async def _completion_chunks(
    deltas: AsyncIterator[str], *, model: str, include_usage: bool, prompt_tokens: int
) -> AsyncIterator[Completion]:
    chunk_id = new_id("cmpl")
    count = 0
    async with aclosing(deltas):  # type: ignore[type-var]
        async for text in deltas:
            count += 1
            yield Completion(id=chunk_id, model=model, choices=[CompletionChoice(text=text)])
    yield Completion(id=chunk_id, model=model, choices=[CompletionChoice(text="", finish_reason="stop")])
    if include_usage:
        yield Completion(id=chunk_id, model=model, choices=[], usage=Usage.of(prompt_tokens, count))


def completion_events(
    deltas: AsyncIterator[str], *, model: str, include_usage: bool = False, prompt_tokens: int = 0
) -> AsyncIterator[SSE]:
    """The events of a streamed (legacy) completion of ``deltas``."""
    return events(
        _completion_chunks(deltas, model=model, include_usage=include_usage, prompt_tokens=prompt_tokens)
    )


async def completion(deltas: AsyncIterator[str], *, model: str, prompt_tokens: int = 0) -> Completion:
    """The whole (legacy) completion of ``deltas``."""
    parts = [text async for text in deltas]
    return Completion(
        model=model,
        choices=[CompletionChoice(text="".join(parts), finish_reason="stop")],
        usage=Usage.of(prompt_tokens, len(parts)),
    )
